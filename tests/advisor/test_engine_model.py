"""The one engine model (advisor/sizing/engine_model) on the functions the product calls: the
memory fit, the floors, the serving model's replica shape and the fleet answer."""

from __future__ import annotations

import json

import pytest

from advisor.sizing.configurations import Deployment
from advisor.sizing.engine_model.facts import ModelFacts
from advisor.sizing.engine_model.formats import FOUR_BIT_BYTES, formats_for, gemm_peak_tflops
from advisor.sizing.engine_model.prefix import TrafficShape, prefix_reuse
from advisor.sizing.estimate import estimate_stage
from advisor.sizing.serving_model import _setup
from advisor.workload.gpus import GPUS
from advisor.workload.profile_input import profile_from_dict
from bench.core.config import ParallelismConfig, PrecisionConfig

LLAMA_31_8B = {  # meta-llama/Llama-3.1-8B config.json (the sizes the model reads)
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": False,
}


def stage_of(data: dict):
    return profile_from_dict({"title": "t", "kind": "generate", **data}).stages[0]


@pytest.fixture
def llama31(tmp_path):
    folder = tmp_path / "llama31-8b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_31_8B))
    return str(folder)


def test_a_110k_prefill_floor_includes_attention(llama31):
    stage = stage_of(
        {
            "model": llama31,
            "prompt_tokens": {"mean": 110_000},
            "output_tokens": {"mean": 200},
            "gpu": {"type": "H100-SXM"},
        }
    )
    estimate = estimate_stage(stage)
    parameters = estimate.parameters
    peak = GPUS["H100-SXM"].dense_bf16_tflops * 1e12
    gemm_only_ms = 2 * parameters * 110_000 / peak * 1e3
    # causal attention: 2 x layers x (heads x head size) x prompt^2
    attention_ms = 2 * 32 * 4096 * 110_000**2 / peak * 1e3
    assert estimate.prefill_floor_ms == pytest.approx(gemm_only_ms + attention_ms, rel=1e-6)
    assert attention_ms > gemm_only_ms  # about two thirds of the work at 110k tokens
    assert 4_500 < estimate.prefill_floor_ms < 5_500  # the "about 5 s", not 1.8


def test_an_awq_profile_is_sized_at_4_bits():
    stage = stage_of(
        {
            "model": "llama-2-13b",
            "prompt_tokens": {"mean": 512},
            "output_tokens": {"mean": 256},
            "peak_request_rate_rps": 2,
            "slo": {"ttft_ms": 500, "tpot_ms": 40},
            "gpu": {"type": "L40S"},
            "precision": {"dtype": "float16", "quantization": "awq"},
        }
    )
    estimate = estimate_stage(stage)
    assert estimate.weights_gb == pytest.approx(estimate.parameters * FOUR_BIT_BYTES / 1e9)
    deployment = Deployment(framework="vllm", precision=stage.precision.run_precision())
    setup = _setup(stage, deployment, [])
    assert setup is not None
    # the serving model reads the 4-bit checkpoint, not fp16 weights
    assert setup.shape.weight_bytes == pytest.approx(estimate.parameters * FOUR_BIT_BYTES)
    fp16 = _setup(
        stage.model_copy(
            update={"precision": stage.precision.model_copy(update={"quantization": None})}
        ),
        deployment,
        [],
    )
    assert fp16.shape.weight_bytes == pytest.approx(estimate.parameters * 2)
    # the fleet answer sizes and names the 4-bit checkpoint
    from advisor.sizing.fleet import predicted_options

    options, _ = predicted_options(stage, "vllm", [])
    asked = [o for o in options if o.departures == 0]
    assert asked and asked[0].weights == "int4 weights" and "awq weights" in asked[0].label


def test_formats_and_their_gemm_peaks():
    h100, a100 = GPUS["H100-SXM"], GPUS["A100-80GB-SXM"]
    assert formats_for("bfloat16", "fp8", "fp8").label() == "fp8 weights + fp8 KV"
    assert gemm_peak_tflops(h100, formats_for("bfloat16", "fp8", "auto")) == 2 * 989
    # no FP8 tensor cores: weight-only FP8 at the 16-bit peak
    assert gemm_peak_tflops(a100, formats_for("bfloat16", "fp8", "auto")) == 312
    # 4-bit weights are dequantised into 16-bit GEMMs; INT8 W8A8 runs at twice the peak
    assert gemm_peak_tflops(a100, formats_for("float16", None, "auto", "awq")) == 312
    assert gemm_peak_tflops(a100, formats_for("float16", None, "auto", "w8a8")) == 624


def test_a_mixture_of_experts_step_reads_the_experts_its_tokens_chose():
    # Mixtral-8x7B: 46.7B parameters, 12.9B active (8 experts, top-2; Mistral AI's release)
    facts = ModelFacts(
        parameters=46_700_000_000,
        active_parameters=12_900_000_000,
        experts=8,
        experts_per_token=2,
    )
    assert facts.weight_fraction_read(1) == pytest.approx(12.9 / 46.7, rel=1e-6)
    assert facts.weight_fraction_read(64) == pytest.approx(1.0, abs=1e-6)
    assert facts.weight_fraction_read(4) < facts.weight_fraction_read(16) < 1
    dense = ModelFacts(parameters=7_000_000_000, active_parameters=7_000_000_000)
    assert dense.weight_fraction_read(1) == 1.0


def test_a_shared_prefix_is_cached_and_held_once():
    stage = stage_of(
        {
            "model": "llama-2-13b",
            "prompt_tokens": {"mean": 3400},
            "output_tokens": {"mean": 300},
            "shared_prefix": {"tokens": 3000, "count": 2},
        }
    )
    reuse = prefix_reuse(TrafficShape.of_stage(stage), caching=True)
    assert reuse.cached_tokens == 2992  # whole 16-token blocks: 187 of 187.5
    assert reuse.shared_kv_tokens == 2 * 2992
    assert prefix_reuse(TrafficShape.of_stage(stage), caching=False).cached_tokens == 0
    conversation = stage_of(
        {
            "model": "llama-2-13b",
            "prompt_tokens": {"mean": 500},
            "output_tokens": {"mean": 200},
            "conversation": {"turns": 4, "user_tokens": 100},
        }
    )
    traffic = TrafficShape.of_stage(conversation)
    # turn i finds what turn i-1 computed (its prompt and answer but the answer's last token)
    # in whole 16-token blocks: 699 -> 688, 999 -> 992, 1,299 -> 1,296; turn 1 finds nothing
    assert prefix_reuse(traffic, caching=True).cached_tokens == pytest.approx(
        (688 + 992 + 1296) / 4
    )
    # vLLM's CPU build uses 128-token blocks: 640, 896, 1,280
    assert prefix_reuse(traffic, caching=True, block_tokens=128).cached_tokens == pytest.approx(
        (640 + 896 + 1280) / 4
    )
    assert traffic.served_prompt().mean == 500 + 1.5 * 300


def test_a_prefix_common_to_the_batch_is_read_once_per_step_on_vllm():
    """vLLM's cascade attention reads a common prefix's KV once for the batch (from 256 tokens
    and 8 sequences on); other engines, several shared contexts, or a short prefix or batch
    read it once per sequence."""
    from advisor.sizing.engine_model.step import FLOOR
    from advisor.sizing.serving_sim import engine_shape
    from advisor.workload.architectures import architecture_for

    def shape(framework: str, count: int = 1, tokens: int = 1024):
        stage = stage_of(
            {
                "model": "llama-2-7b",
                "prompt_tokens": {"mean": tokens + 128},
                "shared_prefix": {"tokens": tokens, "count": count},
            }
        )
        architecture, _ = architecture_for("llama-2-7b")
        return engine_shape(
            architecture.parameters,
            architecture,
            GPUS["H100-SXM"],
            Deployment(framework=framework),
            reuse=prefix_reuse(TrafficShape.of_stage(stage), caching=True),
            prompt_tokens=tokens + 128.0,
        )

    vllm = shape("vllm")
    assert vllm.common_prefix_tokens == 1024
    context = 64 * (1024 + 128)
    assert vllm.kv_read_tokens(context, 64) == context - 63 * 1024
    assert vllm.kv_read_tokens(7 * 1152, 7) == 7 * 1152  # too few sequences
    cached = vllm.step_ms(FLOOR, 64, 0, context, 64)
    assert cached < vllm.step_ms(FLOOR, 64, 0, context)  # 0 sequences counted: every read
    assert shape("tensorrt_llm").common_prefix_tokens == 0
    assert shape("vllm", count=2).common_prefix_tokens == 0
    short = shape("vllm", tokens=192)
    assert short.kv_read_tokens(64 * 320, 64) == 64 * 320  # under 256 tokens


def test_a_shared_prefix_fits_where_its_copies_would_not():
    """The issue's 8B case: every request opens with the same 3,000 tokens; one copy in the
    pool, not one per sequence, so the model fits one 80 GB GPU (no tensor-parallel branch)."""
    data = {
        "model": "llama-3-8b",
        "prompt_tokens": {"mean": 3300},
        "output_tokens": {"mean": 300},
        "shared_prefix": {"tokens": 3000},
        "concurrency": 200,
        "gpu": {"type": "H100-SXM"},
    }
    shared = estimate_stage(stage_of(data))
    copies = estimate_stage(stage_of({k: v for k, v in data.items() if k != "shared_prefix"}))
    assert shared.fits is True and copies.fits is False
    per_token = 2 * 32 * 8 * 128 * 2
    pooled = 2992  # the shared 3,000 tokens in whole 16-token blocks
    assert shared.kv_cache_gb == pytest.approx(per_token * (200 * (3600 - pooled) + pooled) / 1e9)


def test_a_rate_beyond_one_engine_is_replicas_not_tensor_parallelism():
    stage = stage_of(
        {
            "model": "llama-2-13b",
            "prompt_tokens": {"mean": 3400},
            "output_tokens": {"mean": 300},
            "peak_request_rate_rps": 20,
            "slo": {"ttft_ms": 1000, "tpot_ms": 60},
            "gpu": {"type": "H100-SXM"},
        }
    )
    estimate = estimate_stage(stage)
    assert estimate.fits is True and estimate.kv_limited
    assert estimate.tensor_parallel_needed == 1
    assert 0 < estimate.max_concurrency_that_fits < estimate.concurrency
    assert "replicas take the rest" in " ".join(estimate.notes)


def test_tensor_parallel_shape_splits_bytes_and_flops():
    stage = stage_of(
        {"model": "llama-2-7b", "prompt_tokens": {"mean": 512}, "gpu": {"type": "H200"}}
    )
    one = _setup(stage, Deployment(framework="vllm"), [])
    two = _setup(
        stage,
        Deployment(framework="vllm", parallelism=ParallelismConfig(tensor_parallel_size=2)),
        [],
    )
    assert two.shape.weight_bytes == pytest.approx(one.shape.weight_bytes / 2)
    assert two.shape.flops_per_token == pytest.approx(one.shape.flops_per_token / 2)
    fp8 = _setup(
        stage,
        Deployment(framework="vllm", precision=PrecisionConfig(quantization="fp8")),
        [],
    )
    assert fp8.shape.weight_bytes == pytest.approx(one.shape.weight_bytes / 2)


def test_a_mixtral_class_model_is_sized_from_its_active_parameters():
    """Mixtral-8x7B (by its Hugging Face id) on two H100s: the decode floor reads the routed
    experts, not all 46.7B parameters, and where FP8 weights fit one GPU the fleet is replicas
    of one GPU, not tensor parallelism over two."""
    from advisor.decide.recommend import recommend

    data = {
        "long_sequence_generation": True,
        "model": "mistralai/Mixtral-8x7B-Instruct-v0.1",
        "prompt_tokens": {"mean": 1000},
        "output_tokens": {"mean": 300},
        "peak_request_rate_rps": 10,
        "slo": {"ttft_ms": 1000, "tpot_ms": 50},
        "gpu": {"type": "H100-SXM", "count": 2},
    }
    estimate = estimate_stage(stage_of(data))
    h100 = GPUS["H100-SXM"]
    all_weights_ms = estimate.weights_gb * 1e9 / (h100.memory_bandwidth_tb_s * 1e12 * 2) * 1e3
    active_share = 12_879_925_248 / 46_702_792_704
    assert estimate.decode_floor_ms_per_token == pytest.approx(
        all_weights_ms * active_share, rel=0.01
    )
    report = recommend(profile_from_dict({"title": "mixtral", "kind": "generate", **data}))
    chosen = report.stages[0].recommendation
    fleet = chosen.fleet
    assert fleet is not None and fleet.chosen.parallelism.tensor_parallel_size == 1
    assert fleet.chosen.precision.quantization == "fp8"
    assert chosen.configuration.parallelism.replicas == chosen.capacity.gpus_needed


def test_each_mechanic_says_what_the_shipped_gpu_runs_checked(monkeypatch):
    """The shipped H100 runs check prefix caching, long context under load and MoE routing
    (their median error is stated, recomputed here from the runs); a folder without such runs
    says each is unchecked."""
    from advisor.sizing import measured
    from advisor.sizing.fleet import mechanism_notes
    from advisor.sizing.mechanism_validation import shipped_evidence
    from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

    seed_only = mechanism_notes(stage_of({"model": "llama-2-7b", "shared_prefix": {"tokens": 500}}))
    assert seed_only == ["its prefix reuse's GPU speed-up not yet checked against a measurement"]
    monkeypatch.setattr(measured, "DEFAULT_REFERENCE_DIR", SHIPPED_REFERENCE_DIR)

    stage = stage_of(
        {"model": "mixtral-8x7b", "shared_prefix": {"tokens": 500}, "prompt_tokens": {"mean": 9000}}
    )
    notes = mechanism_notes(stage)
    found = shipped_evidence()
    assert set(found) == {"prefix caching", "long context", "mixture-of-experts"}
    prefix, moe, long_context = notes
    assert prefix.startswith("its prefix caching checked on H100-SXM")
    checked = found["prefix caching"]
    assert (
        f"TPOT p50 off by {100 * checked.tpot_p50_error:.0f}% at the median level, "
        f"{100 * checked.tpot_p50_worst:.0f}% at worst" in prefix
    )
    assert checked.tpot_p50_worst >= checked.tpot_p50_error
    assert moe.startswith("its mixture-of-experts checked on H100-SXM (2 run(s)")
    assert found["mixture-of-experts"].tpot_p50_error < 0.15  # the record's TPOT: 14% median
    assert long_context.startswith("its long context checked on H100-SXM (2 run(s)")
    assert found["long context"].basis == "its bench calibrate record"
    assert mechanism_notes(stage_of({"model": "llama-2-7b"})) == []
