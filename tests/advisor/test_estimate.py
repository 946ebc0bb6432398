"""The estimate against hand-computed figures, and the GPU catalogue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.sizing.estimate import GB, estimate_stage
from advisor.workload.architectures import ARCHITECTURES
from advisor.workload.gpus import GPUS, find_gpu, get_gpu
from advisor.workload.profile_input import profile_from_dict
from bench.core.errors import UserError

LLAMA_2_13B_PARAMETERS = 13_015_864_320
"""Hand count: embed 32000x5120 + 40 x (4x5120^2 + 3x5120x13824 + 2x5120) + 5120 + lm_head."""
LLAMA_2_7B_PARAMETERS = 6_738_415_616


def stage(**data):
    return profile_from_dict(data).primary


def test_llama_2_13b_parameter_count_by_hand() -> None:
    hidden, layers, intermediate, vocab = 5120, 40, 13824, 32000
    per_layer = 4 * hidden * hidden + 3 * hidden * intermediate + 2 * hidden
    assert vocab * hidden * 2 + layers * per_layer + hidden == LLAMA_2_13B_PARAMETERS
    assert ARCHITECTURES["llama-2-13b"].parameters == LLAMA_2_13B_PARAMETERS


def test_llama_2_13b_fp16_weights_26_gb() -> None:
    estimate = estimate_stage(stage(model="llama-2-13b", precision={"dtype": "float16"}))
    assert estimate.parameters == LLAMA_2_13B_PARAMETERS
    assert estimate.weights_gb == pytest.approx(LLAMA_2_13B_PARAMETERS * 2 / 1e9)
    assert round(estimate.weights_gb, 1) == 26.0


def test_llama_2_13b_kv_cache_4096_tokens_one_sequence() -> None:
    estimate = estimate_stage(
        stage(
            model="llama-2-13b",
            prompt_tokens={"mean": 2048},
            output_tokens={"mean": 2048},
            concurrency=1,
        )
    )
    # 2 (K,V) x 40 layers x 40 heads x 128 head dim x 2 bytes x 4096 tokens
    expected_bytes = 2 * 40 * 40 * 128 * 2 * 4096
    assert expected_bytes == 3_355_443_200
    assert estimate.kv_cache_bytes_per_token == 2 * 40 * 5120 * 2
    assert estimate.context_tokens == 4096
    assert estimate.kv_cache_gb == pytest.approx(3.3554432)
    assert round(estimate.kv_cache_gb, 2) == 3.36


def test_kv_cache_scales_with_concurrency() -> None:
    one = estimate_stage(stage(model="llama-2-13b", concurrency=1))
    many = estimate_stage(stage(model="llama-2-13b", concurrency=16))
    assert many.kv_cache_gb == pytest.approx(16 * one.kv_cache_gb)


@pytest.mark.parametrize(
    ("model", "kv_heads"),
    [("llama-2-7b", 32), ("llama-3-8b", 8), ("mistral-7b", 8), ("llama-2-13b", 40)],
)
def test_kv_cache_is_gqa_aware(model: str, kv_heads: int) -> None:
    estimate = estimate_stage(stage(model=model))
    layers = 40 if model == "llama-2-13b" else 32
    assert estimate.kv_cache_bytes_per_token == 2 * layers * kv_heads * 128 * 2


def test_llama_2_7b_decode_floor_on_h200() -> None:
    estimate = estimate_stage(stage(model="llama-2-7b", gpu={"type": "H200"}))
    # 6,738,415,616 x 2 bytes = 13.48 GB; / 4.8 TB/s = 2.81 ms per token at batch 1
    assert estimate.weights_gb == pytest.approx(13.476831232)
    assert estimate.memory_bandwidth_tb_s == 4.8
    assert estimate.decode_floor_ms_per_token == pytest.approx(13.476831232 / 4.8, rel=1e-9)
    assert estimate.decode_floor_ms_per_token == pytest.approx(2.81, abs=0.01)
    assert estimate.bandwidth_source.startswith("datasheet")


def test_measured_bandwidth_replaces_datasheet() -> None:
    estimate = estimate_stage(
        stage(model="llama-2-7b", gpu={"type": "H200", "memory_bandwidth_tb_s": 4.0})
    )
    assert estimate.decode_floor_ms_per_token == pytest.approx(13.476831232 / 4.0)
    assert estimate.bandwidth_source == "measured (profile)"


def test_prefill_floor() -> None:
    estimate = estimate_stage(
        stage(model="llama-2-7b", gpu={"type": "H200"}, prompt_tokens={"mean": 512})
    )
    # GEMMs (2 x parameters per token) plus causal attention (2 x layers x width x prompt^2)
    attention = 2 * 32 * 4096 * 512**2
    expected_ms = (2 * LLAMA_2_7B_PARAMETERS * 512 + attention) / 989e12 * 1e3
    assert estimate.prefill_floor_ms == pytest.approx(expected_ms)


@pytest.mark.parametrize(
    ("precision", "bytes_per_param"),
    [
        ({"dtype": "float32"}, 4.0),
        ({"dtype": "bfloat16"}, 2.0),
        ({"dtype": "float16", "quantization": "fp8"}, 1.0),
        ({"dtype": "float16", "quantization": "awq"}, 0.5 + 4 / 128),
        ({"dtype": "float16", "quantization": "gptq-int4"}, 0.5 + 4 / 128),
    ],
)
def test_weight_bytes_per_precision(precision: dict, bytes_per_param: float) -> None:
    estimate = estimate_stage(stage(model="llama-2-7b", precision=precision))
    assert estimate.bytes_per_parameter == bytes_per_param
    assert estimate.weights_gb == pytest.approx(LLAMA_2_7B_PARAMETERS * bytes_per_param / GB)


def test_unknown_quantisation_is_refused_listing_the_known() -> None:
    """An unknown scheme (int3) was sized as 16-bit weights with a note; the profile now refuses
    it, and the names it allows are exactly the ones the estimate sizes."""
    from advisor.sizing.estimate import QUANTIZATION_BYTES
    from advisor.workload.profile import QUANTIZATION_SCHEMES
    from bench.core.errors import UserError

    assert set(QUANTIZATION_SCHEMES) == set(QUANTIZATION_BYTES)
    with pytest.raises(UserError, match=r"'int3' is not a weight quantisation.*awq, gptq"):
        stage(model="llama-2-7b", precision={"dtype": "float16", "quantization": "int3"})


def test_fit_and_suggestions_when_it_does_not_fit() -> None:
    estimate = estimate_stage(stage(model="llama-2-13b", gpu={"type": "L4"}))
    assert estimate.fits is False
    # the 90% of a 24 GiB L4 a serving engine takes (advisor/sizing/engine_model/replica.py)
    assert estimate.available_gb == pytest.approx(0.9 * 24 * 2**30 / GB)
    assert estimate.tensor_parallel_needed == 2
    text = " | ".join(estimate.suggestions)
    assert "tensor_parallel_size=2" in text
    assert "awq" in text and "-> fits" in text
    assert "FP8 KV cache" in text


def test_required_memory_formula() -> None:
    estimate = estimate_stage(
        stage(model="llama-2-13b", gpu={"type": "A100-80GB-SXM"}, concurrency=2)
    )
    weights = LLAMA_2_13B_PARAMETERS * 2
    kv = 2 * 40 * 5120 * 2 * (512 + 256) * 2
    required = weights + kv + 1.5 * 2**30  # the runtime measured on vLLM (memory_validation)
    assert estimate.required_gb == pytest.approx(required / GB)
    assert estimate.fits is True
    available = 0.9 * 80 * 2**30  # 90% of the 80 GiB datasheet size
    assert estimate.headroom_gb == pytest.approx((available - required) / GB)
    assert estimate.suggestions == []


def test_tensor_parallel_splits_the_floor() -> None:
    one = estimate_stage(stage(model="llama-2-13b", gpu={"type": "H100-SXM"}))
    two = estimate_stage(stage(model="llama-2-13b", gpu={"type": "H100-SXM", "count": 2}))
    assert two.available_gb == pytest.approx(2 * one.available_gb)
    assert one.available_gb == pytest.approx(0.9 * 80 * 2**30 / GB)
    assert two.decode_floor_ms_per_token == pytest.approx(one.decode_floor_ms_per_token / 2)


def test_littles_law_concurrency() -> None:
    estimate = estimate_stage(stage(model="llama-2-7b", request_rate_rps=10, slo={"e2e_ms": 2500}))
    assert estimate.concurrency == 25
    assert "Little" in estimate.concurrency_source


def test_unknown_model_and_gpu() -> None:
    # A model nobody can size is refused when the profile is read (issue 47: it used to be
    # sized as "unknown"); one whose size the profile states is sized from it.
    with pytest.raises(UserError, match="model path /nowhere/model does not exist"):
        stage(model="/nowhere/model")
    override = estimate_stage(stage(model="/nowhere/model", parameters_b=7.0, gpu={"type": "L4"}))
    assert override.weights_gb == pytest.approx(14.0)
    assert override.decode_floor_ms_per_token == pytest.approx(14.0 / 0.3)


def test_local_checkpoint_config(tmp_path: Path) -> None:
    config = {
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "intermediate_size": 11008,
        "vocab_size": 32000,
        "max_position_embeddings": 4096,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    estimate = estimate_stage(stage(model=str(tmp_path)))
    assert estimate.parameters == LLAMA_2_7B_PARAMETERS
    assert "config.json" in estimate.parameters_source


def test_forward_floor_for_cnn() -> None:
    estimate = estimate_stage(
        stage(kind="forward", model="resnet-50", batch_size=32, image_size=224, gpu={"type": "L4"})
    )
    compute_ms = 8.2e9 * 32 / 121e12 * 1e3
    assert estimate.forward_floor_ms == pytest.approx(compute_ms)
    assert estimate.kv_cache_gb is None


def test_long_context_over_position_limit_is_refused_not_fitted() -> None:
    estimate = estimate_stage(
        stage(model="llama-2-7b", prompt_tokens={"mean": 4000}, output_tokens={"mean": 512})
    )
    assert estimate.context is not None and estimate.context.fits is False
    assert estimate.refused and "4,512 tokens" in estimate.refused and "4,096" in estimate.refused
    assert estimate.fits is None and estimate.fit_verdict == "refused: context too long"
    assert estimate.max_concurrency_that_fits is None


def test_llama_2_70b_6000_prompt_is_not_fits_on_four_h200() -> None:
    """Issue 23: memory alone fits (4 x 141 GB) but 6,200 tokens exceed 4,096 positions."""
    estimate = estimate_stage(
        stage(
            model="llama-2-70b",
            prompt_tokens={"mean": 6000},
            output_tokens={"mean": 200},
            gpu={"type": "H200", "count": 4},
        )
    )
    assert estimate.required_gb is not None and estimate.required_gb < estimate.available_gb
    assert estimate.fits is None and estimate.fit_verdict != "fits"
    assert "6,200" in (estimate.refused or "")


def test_200k_prompt_on_llama_2_7b_is_refused_with_the_field() -> None:
    from advisor.sizing.field_problems import feasibility_problems

    refused = stage(model="llama-2-7b", prompt_tokens={"mean": 200_000})
    (problem,) = feasibility_problems([refused])
    assert problem.field == "prompt_tokens" and problem.severity == "error"
    assert "200,256 tokens" in problem.message and "4,096" in problem.message
    assert feasibility_problems([stage(model="llama-2-7b", prompt_tokens={"mean": 3000})]) == []


def test_only_the_tail_past_the_window_warns() -> None:
    """Normal 3,000 ± 300 + 256: near-worst 3,856 fits 4,096; mean + 5 std (4,756) does not."""
    from advisor.sizing.field_problems import feasibility_problems

    tail = stage(model="llama-2-7b", prompt_tokens={"kind": "normal", "mean": 3000, "spread": 300})
    estimate = estimate_stage(tail)
    assert estimate.context.fits is True and estimate.refused is None
    assert estimate.context.longest_tokens == 3000 + 5 * 300 + 256
    (problem,) = feasibility_problems([tail])
    assert problem.severity == "warning" and "clip" in problem.message


def test_rope_scaling_extends_the_serving_window_not_transformers(tmp_path: Path) -> None:
    """vLLM's rule: linear x4 on 4,096 positions is a 16,384 window; llama3-type already states
    it in max_position_embeddings; the bench's transformers adapters keep the raw positions."""
    from advisor.workload.architectures import architecture_for, context_limits

    config = {
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 176,
        "vocab_size": 1000,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "linear", "factor": 4.0},
    }
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    architecture, _ = architecture_for(str(tmp_path))
    window, limits, words = context_limits(architecture)
    assert window == 16384 and limits["vllm"] == 16384 and limits["pytorch"] == 4096
    assert words == "linear x4"
    fits = estimate_stage(stage(model=str(tmp_path), prompt_tokens={"mean": 12000}))
    assert fits.context.fits is True
    config["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert context_limits(architecture_for(str(tmp_path))[0])[0] == 4096


def test_no_gpu_decided_says_so_and_tiny_parameters_are_not_zero() -> None:
    estimate = estimate_stage(stage(model="tiny-llama"))
    assert estimate.available_gb is None and estimate.fits is None
    assert estimate.fit_verdict == "no GPU to fit against"
    assert estimate.max_concurrency_that_fits is None and estimate.memory_source is None
    assert any("no GPU to fit against" in note for note in estimate.notes)
    assert estimate.parameters_label == "4.19 M"
    assert estimate.parameters_b == pytest.approx(0.004188, abs=1e-6)


# ---------------------------------------------------------------- the catalogue


def test_catalogue_has_the_asked_gpus_with_sources() -> None:
    for name in (
        "A100-40GB-PCIE",
        "A100-80GB-PCIE",
        "A100-40GB-SXM",
        "A100-80GB-SXM",
        "H100-SXM",
        "H100-PCIE",
        "H200",
        "L4",
        "L40S",
        "A10G",
        "T4",
        "RTX-4090",
    ):
        spec = GPUS[name]
        assert spec.memory_gb > 0 and spec.memory_bandwidth_tb_s > 0
        assert "datasheet" in spec.source or "whitepaper" in spec.source
        assert spec.figures_kind == "datasheet"


@pytest.mark.parametrize(
    ("raw", "name"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB-SXM"),
        ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIE"),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB-PCIE"),
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIE"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA A10G", "A10G"),
        ("Tesla T4", "T4"),
        ("NVIDIA GeForce RTX 4090", "RTX-4090"),
        ("h100 sxm", "H100-SXM"),
        ("rtx4090", "RTX-4090"),
    ],
)
def test_find_gpu_by_nvml_or_loose_name(raw: str, name: str) -> None:
    spec = find_gpu(raw)
    assert spec is not None and spec.name == name


def test_unknown_gpu() -> None:
    assert find_gpu("A100") is None  # ambiguous: 40/80 GB, PCIe/SXM
    with pytest.raises(UserError, match="'H300' is not a known GPU; known: A100-40GB-PCIE"):
        get_gpu("H300")


@pytest.mark.slow
def test_preset_counts_match_bench_models() -> None:
    """The estimate's table equals bench.engines.models' exact counts (meta-device models,
    torch)."""
    from bench.engines.models import PRESETS, parameter_count

    for name, preset in PRESETS.items():
        assert ARCHITECTURES[name].parameters == parameter_count(preset.build_config()), name


def test_preset_context_windows_match_bench_models() -> None:
    """The context check's windows are the presets' max_position_embeddings (configs only, no
    weights), and only Llama-3.1's presets have rope scaling (llama3 x8 of 8,192), as their
    config.json says."""
    from advisor.workload.architectures import RopeScaling
    from bench.engines.models import PRESETS

    for name, preset in PRESETS.items():
        config = preset.build_config()
        assert ARCHITECTURES[name].max_positions == getattr(
            config, "max_position_embeddings", None
        ), name
        assert ARCHITECTURES[name].max_positions == preset.positions, name
        expected = RopeScaling("llama3", 8.0, 8192) if name.startswith("llama-3.1") else None
        assert ARCHITECTURES[name].rope_scaling == expected, name
