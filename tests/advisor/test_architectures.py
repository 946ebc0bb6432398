"""Model facts: mixture-of-experts fields and active parameters, sliding window, the new presets'
exact counts, Hugging Face ids, the refusal of unknown models, and the profile's quantisation
reaching the configuration search and the serving model."""

from __future__ import annotations

import pytest

from advisor.sizing.configurations import (
    Deployment,
    estimate_deployment,
    stage_inputs,
)
from advisor.sizing.estimate import QUANTIZATION_BYTES, estimate_stage
from advisor.sizing.serving_model import Factors, engine_shape
from advisor.workload.architectures import (
    ARCHITECTURES,
    _architecture_from_config,
    architecture_for,
    context_limits,
)
from advisor.workload.gpus import GPUS
from advisor.workload.profile_input import load_profile, profile_from_flags
from bench.core.config import ParallelismConfig, PrecisionConfig
from bench.core.errors import UserError
from bench.core.model_ids import HUGGING_FACE_IDS
from bench.engines.models import PRESETS, check_model_name

GENERATE_PRESETS = [name for name, preset in PRESETS.items() if preset.kind == "generate"]


@pytest.mark.parametrize("name", GENERATE_PRESETS)
def test_the_config_formula_gives_the_table_for_every_generate_preset(name: str) -> None:
    """The table's facts are what `_architecture_from_config` reads from the preset's own
    config.json (transformers' config, no weights): count, active count, window, experts."""
    config = PRESETS[name].build_config().to_dict()
    read, source = _architecture_from_config(name, config)
    table = ARCHITECTURES[name]
    assert read is not None and "exact" in source
    assert read.parameters == table.parameters
    assert read.active_parameters == table.active_parameters
    assert read.sliding_window == table.sliding_window
    assert (read.experts, read.experts_per_token) == (table.experts, table.experts_per_token)
    assert read.head_dim == table.head_dim
    assert context_limits(read)[0] == context_limits(table)[0]


def test_mixtral_counts_are_the_published_ones() -> None:
    """Mistral AI, "Mixtral of experts" (mistral.ai/news/mixtral-of-experts, Dec 2023): 46.7B
    total parameters, 12.9B used per token."""
    mixtral = ARCHITECTURES["mixtral-8x7b"]
    assert mixtral.is_moe
    assert round(mixtral.parameters / 1e9, 1) == 46.7
    assert round(mixtral.active_parameters / 1e9, 1) == 12.9
    # The difference is 6 idle experts x 32 layers x 3 x 4096 x 14336.
    assert mixtral.parameters - mixtral.active_parameters == 6 * 32 * 3 * 4096 * 14336


def test_qwen3_moe_and_llama_3_1_counts_are_the_published_ones() -> None:
    """Qwen3-30B-A3B's model card: 30.5B total, 3.3B activated; Llama-3.1's: 8B, 70B (8.03B and
    70.6B exactly), with a 128k window from rope llama3 x8 over 8,192 positions."""
    qwen = ARCHITECTURES["qwen3-30b-a3b"]
    assert round(qwen.parameters / 1e9, 1) == 30.5
    assert round(qwen.active_parameters / 1e9, 1) == 3.4  # 3.35B: the card rounds it down
    assert qwen.head_dim == 128  # stated, not 2048 / 32
    assert ARCHITECTURES["llama-3.1-8b"].parameters == 8_030_261_248
    assert ARCHITECTURES["llama-3.1-70b"].parameters == 70_553_706_496
    assert ARCHITECTURES["qwen2.5-7b"].parameters == 7_615_616_512
    for name in ("llama-3.1-8b", "llama-3.1-70b"):
        window, limits, words = context_limits(ARCHITECTURES[name])
        assert window == 131072 and words == "llama3 x8" and limits["vllm"] == 131072


def test_dense_models_are_all_active() -> None:
    for name in ("llama-2-7b", "llama-3.1-70b", "qwen2.5-7b", "mistral-7b"):
        architecture = ARCHITECTURES[name]
        assert not architecture.is_moe
        assert architecture.active_parameters == architecture.parameters


def test_sliding_window_is_read_only_where_the_model_uses_it() -> None:
    base = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 100,
    }
    mistral, _ = _architecture_from_config("m", {**base, "sliding_window": 4096})
    qwen_off, _ = _architecture_from_config(
        "q", {**base, "sliding_window": 131072, "use_sliding_window": False}
    )
    assert mistral is not None and mistral.sliding_window == 4096
    assert qwen_off is not None and qwen_off.sliding_window is None
    assert ARCHITECTURES["mistral-7b"].sliding_window == 4096


@pytest.mark.slow
def test_qwen2_moe_shared_expert_and_dense_layers_count_as_transformers_does() -> None:
    """Qwen2-MoE's shared expert and gate, decoder_sparse_step and mlp_only_layers, checked
    against transformers' own count of the same config (meta device, torch)."""
    from transformers import Qwen2MoeConfig

    from bench.engines.models import parameter_count

    config = Qwen2MoeConfig(
        vocab_size=500,
        hidden_size=64,
        intermediate_size=256,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=96,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_experts=6,
        num_experts_per_tok=2,
        decoder_sparse_step=1,
        mlp_only_layers=[0],
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen2MoeForCausalLM"]
    read, _ = _architecture_from_config("qwen2-moe", config.to_dict())
    assert read is not None
    assert read.parameters == parameter_count(config)
    assert read.moe_layers == 3 and read.shared_expert_intermediate_size == 96
    assert read.active_parameters == read.parameters - 3 * (6 - 2) * 3 * 64 * 32


def test_every_hugging_face_id_maps_to_a_preset_with_facts() -> None:
    for model_id, preset in HUGGING_FACE_IDS.items():
        assert preset in PRESETS and preset in ARCHITECTURES, model_id
        architecture, source = architecture_for(model_id.upper())  # the Hub ignores case
        assert architecture is ARCHITECTURES[preset], model_id
        assert preset in source
        check_model_name(model_id.lower())


def test_an_unknown_model_is_refused_with_how_to_give_a_config(tmp_path) -> None:
    with pytest.raises(UserError) as refused:
        check_model_name("meta-llama/Llama-9-1B")
    message = str(refused.value)
    assert "\n" not in message and "config.json" in message and "--local-dir" in message
    with pytest.raises(UserError, match=r"did you mean 'llama-3\.1-8b'"):
        check_model_name("llama-3.1-8")
    # A local folder with a config.json is the way to give any other model; it wins over ids.
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    check_model_name(str(folder))
    assert architecture_for("meta-llama/Llama-9-1B")[0] is None


def test_a_typo_in_a_profile_or_a_flag_is_refused_in_one_line(tmp_path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("stages:\n- name: chat\n  model: llama-2-7bb\n")
    with pytest.raises(UserError, match=r"model: unknown model 'llama-2-7bb'.*did you mean"):
        load_profile(profile)
    with pytest.raises(UserError, match="flags: model: unknown model"):
        profile_from_flags(model="mistralai/Mistral-8B-Nope")
    known = profile_from_flags(model="mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert known.stages[0].model == "mistralai/Mixtral-8x7B-Instruct-v0.1"


def test_cli_refuses_an_unknown_hugging_face_id_with_exit_2() -> None:
    from typer.testing import CliRunner

    from advisor.cli import app

    result = CliRunner().invoke(app, ["recommend", "--model", "acme/unknown-7b", "--gpu", "H200"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "config.json" in lines[0], result.output


def _awq_stage(quantization: str | None):
    return profile_from_flags(
        model="llama-2-13b",
        gpu="H100-SXM",
        concurrency=8,
        quantization=quantization,
    ).stages[0]


def test_awq_profile_is_sized_at_4_bits_in_every_weight_figure() -> None:
    """The issue's case: an AWQ 4-bit profile was configured at fp16. The memory fit and decode
    floor (estimate), the configuration search's weights and the serving model's replica all
    take 4-bit weights with their group scales."""
    awq, plain = _awq_stage("awq"), _awq_stage(None)
    assert stage_inputs(awq).scheme == "awq" and stage_inputs(plain).scheme is None
    estimate_awq, estimate_plain = estimate_stage(awq), estimate_stage(plain)
    assert estimate_awq.weights_gb == pytest.approx(
        estimate_plain.weights_gb * QUANTIZATION_BYTES["awq"] / 2
    )
    assert estimate_awq.decode_floor_ms_per_token < estimate_plain.decode_floor_ms_per_token / 3
    deployment = Deployment(
        framework="vllm",
        parallelism=ParallelismConfig(tensor_parallel_size=1, replicas=1),
        precision=PrecisionConfig(dtype="float16"),
    )
    inputs_awq, inputs_plain = stage_inputs(awq), stage_inputs(plain)
    assert inputs_awq is not None and inputs_plain is not None
    config_awq = estimate_deployment(
        awq, inputs_awq, deployment, Factors(), "test: the default factors"
    )
    config_plain = estimate_deployment(
        plain, inputs_plain, deployment, Factors(), "test: the default factors"
    )
    assert config_awq.weights_gb_per_gpu == pytest.approx(
        config_plain.weights_gb_per_gpu * QUANTIZATION_BYTES["awq"] / 2
    )
    architecture = ARCHITECTURES["llama-2-13b"]
    gpu = GPUS["H100-SXM"]
    shape_awq = engine_shape(
        architecture.parameters,
        architecture,
        gpu,
        deployment,
        scheme=awq.precision.quantization,
    )
    shape_plain = engine_shape(architecture.parameters, architecture, gpu, deployment)
    assert shape_awq is not None and shape_plain is not None
    assert shape_awq.weight_bytes == pytest.approx(
        architecture.parameters * QUANTIZATION_BYTES["awq"]
    )
    assert shape_plain.weight_bytes == architecture.parameters * 2
