"""Evidence for forward stages matches by modality and model family (issue 48), on the shipped
H200 runs (data/reference: PyTorch ResNet-50 and BERT-base, batch 1, float16): a ResNet-50 run
is never a match for a speech model or a text embedder, and says why it is context only; a BERT
run at the stage's shape is a match for a BERT-family embedder."""

from __future__ import annotations

import pytest

from advisor.evidence.modality import forward_traits
from advisor.evidence.rows import workload_match
from advisor.sizing.measured import read_reference_folder
from advisor.workload.profile import StageProfile
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

SHIPPED = read_reference_folder(SHIPPED_REFERENCE_DIR)


def _shipped(model: str):
    for runs in SHIPPED.runs.values():
        for run in runs:
            config = run.config
            if (
                config.backend == "pytorch"
                and config.model == model
                and config.workload.kind == "forward"
                and config.workload.batch_size == 1
                and config.load.pattern == "concurrency"
            ):
                return run
    raise AssertionError(f"no shipped pytorch {model} batch-1 run at one steady load")


def _stage(model: str, **shape) -> StageProfile:
    return StageProfile(
        kind="forward", model=model, batch_size=1, concurrency=1, precision={"dtype": "float16"},
        **shape,
    )  # fmt: skip


SPEECH = _stage("openai/whisper-small", sequence_length={"mean": 128})
EMBEDDER = _stage("BAAI/bge-small-en-v1.5", sequence_length={"mean": 128})
VIT = _stage("vit-base", image_size=224)


@pytest.mark.parametrize(("stage", "why"), [(SPEECH, "modality"), (EMBEDDER, "modality")])
def test_a_resnet_run_is_never_a_match_for_another_modality(stage, why) -> None:
    run = _shipped("resnet-50")
    match = workload_match(run, stage)
    assert not match.matches and not match.model_kind
    assert f"different {why}" in match.summary and "resnet image model" in match.summary


def test_a_resnet_run_is_no_match_for_a_vit_of_the_same_image_size() -> None:
    run = _shipped("resnet-50")
    assert run.config.workload.image_size == 224
    match = workload_match(run, VIT)
    assert not match.matches and "different family" in match.summary


def test_a_bert_run_matches_a_bert_family_embedder_at_its_shape_not_a_speech_model() -> None:
    run = _shipped("bert-base")
    assert run.config.workload.sequence_length.mean == 128
    assert workload_match(run, EMBEDDER).matches
    speech = workload_match(run, SPEECH)
    assert not speech.matches and "audio model" in speech.summary


def test_traits_come_from_names_then_shape() -> None:
    assert forward_traits("resnet-50").modality == "image"
    assert forward_traits(None, "WhisperForConditionalGeneration").family == "whisper"
    assert forward_traits("/models/my-encoder", image_size=True).modality == "image"
    assert forward_traits("/models/my-encoder", sequence_length=True).modality == "text"
    assert forward_traits("/models/my-encoder").modality is None


def test_a_stage_that_does_not_say_its_modality_is_never_matched_by_a_known_one() -> None:
    """An unnamed model taking batches of one is no match for a ResNet-50 batch of one: the run
    is context only, and the summary says what the stage would need to state."""
    run = _shipped("resnet-50")
    unnamed = StageProfile(
        kind="forward", batch_size=1, concurrency=1, precision={"dtype": "float16"}
    )  # fmt: skip
    match = workload_match(run, unnamed)
    assert not match.matches and not match.model_kind
    assert "does not say what its model takes in" in match.summary
    # Stating the modality settles it: an image stage of the run's shape matches ...
    image = unnamed.model_copy(update={"modality": "image", "image_size": 224})
    assert workload_match(run, image).matches
    # ... and the user's word outranks a guess from the model's name.
    said_audio = _stage("/models/my-encoder", image_size=224).model_copy(
        update={"modality": "audio"}
    )
    assert "different modality" in workload_match(run, said_audio).summary


@pytest.mark.parametrize(
    ("model_id", "preset", "parameters"),
    [
        ("BAAI/bge-large-en-v1.5", "bert-large", 335_141_888),
        ("sentence-transformers/all-MiniLM-L6-v2", "minilm-l6-h384", 22_713_216),
        ("BAAI/bge-small-en-v1.5", "minilm-l12-h384", 33_360_000),
        ("intfloat/e5-base-v2", "bert-base", 109_482_240),
        ("google/vit-large-patch16-224", "vit-large", 304_326_632),
    ],
)
def test_the_encoders_people_serve_are_sized_from_their_hub_ids(model_id, preset, parameters):
    """Published counts: BGE-large 335M, all-MiniLM-L6-v2 22.7M, BGE-small 33.4M, ViT-L/16
    304M (their model cards); test_estimate checks each preset's count against transformers."""
    from advisor.sizing.forward_sizing import size_forward_stage
    from advisor.workload.architectures import architecture_for
    from bench.engines.models import check_model_name

    check_model_name(model_id)  # a known id: no refusal, no config.json needed
    architecture, source = architecture_for(model_id)
    assert architecture is not None and architecture.name == preset
    assert architecture.parameters == parameters and preset in source
    shape = {"image_size": 224} if "vit" in preset else {"sequence_length": {"mean": 256}}
    stage = StageProfile(
        kind="forward", model=model_id, batch_size=1, concurrency=8,
        peak_request_rate_rps=500, slo={"e2e_ms": 100}, gpu={"type": "L4"},
        precision={"dtype": "float16"}, **shape,
    )  # fmt: skip
    sized = size_forward_stage(stage, "onnxruntime", [])
    assert sized is not None and sized.batching is not None
    assert sized.batching.samples_per_s_per_gpu > 0


def test_a_whisper_stage_is_sized_from_its_encoder_and_its_loop():
    """openai/whisper-small: its published config (encoder 12 x 768 over 1,500 frames), no
    parameters_b needed; the encoder's FLOPs by hand; the basis of every GPU count from it says
    how many decoder steps a clip it assumed; the bench, which has no preset of it, refuses to
    plan it in one line."""
    from advisor.sizing.forward_model import forward_flops_per_sample
    from advisor.sizing.forward_sizing import size_forward_stage
    from advisor.workload.architectures import architecture_for
    from advisor.workload.profile_input import profile_from_dict

    architecture, source = architecture_for("openai/whisper-small")
    assert architecture is not None and architecture.name == "whisper-small"
    assert "published config.json" in source and "no preset" in source
    by_hand = 12 * (24 * 768**2 * 1500 + 4 * 1500**2 * 768)  # 340 GFLOP a 30 s clip
    assert forward_flops_per_sample(architecture, None, None) == by_hand
    profile = profile_from_dict(
        {"kind": "forward", "model": "openai/Whisper-Small", "batch_size": 1,
         "peak_request_rate_rps": 60, "slo": {"e2e_ms": 500}, "gpu": {"type": "L4"}}
    )  # fmt: skip
    sized = size_forward_stage(profile.stages[0], "onnxruntime", [])
    assert sized is not None and sized.batching is not None and sized.fleet is not None
    assert sized.scope is not None and "decoder's loop of 100 steps a clip (assumed" in sized.scope
    # An L4's 121 dense FP16 TFLOP/s bound the encoder at 357 clips/s: the floor cannot exceed it.
    assert sized.batching.samples_per_s_per_gpu <= 121e12 / by_hand


def test_the_decoder_loop_is_in_a_speech_floor_by_hand_and_bounds_the_batch():
    """whisper-large-v3 on an A10: each of 100 steps reads the decoder's weights once and, per
    clip, the cross-attention K/V over 1,500 frames in 32 layers plus half the transcript's own
    cache; the K/V of a whole batch stays for the loop, so 70 clips fit beside the weights. The
    loop sizes the fleet: more GPUs than the encoder alone, and more for longer transcripts."""
    from advisor.sizing.engine_model.replica import GIB
    from advisor.sizing.forward_model import floor_model
    from advisor.sizing.forward_sizing import size_forward_stage
    from advisor.workload.architectures import architecture_for
    from advisor.workload.gpus import GPUS
    from advisor.workload.profile_input import profile_from_dict

    architecture, _ = architecture_for("openai/whisper-large-v3")
    a10 = GPUS["A10"]
    model = floor_model(architecture, a10, "float16", None, None, decode_steps=100)
    encoder_only = floor_model(architecture, a10, "float16", None, None)
    assert model is not None and encoder_only is not None
    bandwidth = 600e9
    cross = 32 * 2 * 1500 * 1280 * 2  # 246 MB a clip
    own = 32 * 2 * 50 * 1280 * 2
    assert model.loop_read_ms_per_sample == pytest.approx((cross + own) / bandwidth * 1e3)
    decoder = 1_543_490_560 - 636_968_960
    assert model.loop_weights_ms == pytest.approx(decoder * 2 / bandwidth * 1e3)
    by_hand = encoder_only.floor_ms(16) + 100 * (
        decoder * 2 / bandwidth * 1e3 + 16 * (cross + own) / bandwidth * 1e3
    )
    assert model.floor_ms(16) == pytest.approx(by_hand)
    free = 0.9 * 24 * GIB - 1.5 * GIB - 1_543_490_560 * 2
    assert model.largest_batch_in_memory == int(free // (32 * 2 * 1600 * 1280 * 2)) == 70

    def fleet(**extra):
        stage = profile_from_dict(
            {"kind": "forward", "model": "openai/whisper-large-v3", "batch_size": 1,
             "peak_request_rate_rps": 20, "slo": {"e2e_ms": 2000}, "gpu": {"type": "A10"},
             **extra}
        ).stages[0]  # fmt: skip
        # The floor's loop (a loop without per-step launches); eager PyTorch's measured
        # launches are tests/advisor/test_speech_loop.py's.
        sized = size_forward_stage(stage, "any engine", [])
        assert sized is not None and sized.batching is not None and sized.fleet is not None
        assert sized.batching.max_batch <= 70
        return sized

    assumed, longer = fleet(), fleet(output_tokens={"mean": 200})
    assert "200 steps a clip (the profile's output_tokens)" in longer.scope
    encoder_rate = 64 / (encoder_only.floor_ms(64) / 1e3)  # clips/s of the encoder alone
    assert assumed.batching.samples_per_s_per_gpu < encoder_rate
    assert longer.fleet.gpus > assumed.fleet.gpus >= 2
