"""Configuration search: memory per GPU by hand, enumeration, ranking, and the 70B case."""

from __future__ import annotations

import pytest

from advisor.sizing.calibration import calibration_from
from advisor.sizing.configurations import (
    FP8_ACCURACY_NOTE,
    Deployment,
    candidate_deployments,
    estimate_deployment,
    search_configurations,
    stage_inputs,
)
from advisor.sizing.measured import read_reference_folder
from advisor.sizing.serving_model import Factors
from advisor.workload.architectures import ARCHITECTURES, _architecture_from_config
from advisor.workload.profile_input import profile_from_flags
from bench.core.config import ParallelismConfig, PrecisionConfig
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR


@pytest.fixture(scope="module")
def calibration():
    return calibration_from([], read_reference_folder(SHIPPED_REFERENCE_DIR).runs)


def test_llama_2_70b_count_is_the_formula_on_its_published_config() -> None:
    config = {
        "hidden_size": 8192,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
        "vocab_size": 32000,
    }
    architecture, _ = _architecture_from_config("llama-2-70b", config)
    assert architecture is not None
    assert ARCHITECTURES["llama-2-70b"].parameters == architecture.parameters


def test_memory_per_gpu_by_hand() -> None:
    stage = profile_from_flags(
        model="llama-2-13b", gpu="H200", gpu_count=2, concurrency=64, dtype="bfloat16"
    ).primary
    inputs = stage_inputs(stage)
    assert inputs is not None
    tp2 = Deployment(framework="vllm", parallelism=ParallelismConfig(tensor_parallel_size=2))
    estimate = estimate_deployment(stage, inputs, tp2, Factors(), "test: the default factors")
    params = ARCHITECTURES["llama-2-13b"].parameters
    assert estimate.weights_gb_per_gpu == pytest.approx(params * 2 / 2 / 1e9)
    # KV: 2 x 40 layers x 40 heads x 128 x 2 bytes per token, 512 + 256 tokens, 64 sequences / TP 2
    kv = 2 * 40 * 40 * 128 * 2 * (512 + 256) * 64 / 2 / 1e9
    assert estimate.kv_cache_gb_per_gpu == pytest.approx(kv)
    fp8 = Deployment(
        framework="vllm",
        parallelism=ParallelismConfig(replicas=2),
        precision=PrecisionConfig(dtype="bfloat16", quantization="fp8", kv_cache_dtype="fp8"),
    )
    fp8_estimate = estimate_deployment(stage, inputs, fp8, Factors(), "test: the default factors")
    assert fp8_estimate.weights_gb_per_gpu == pytest.approx(params / 1e9)
    # one replica holds 32 of the 64 sequences, at 1 byte per KV element
    assert fp8_estimate.kv_cache_gb_per_gpu == pytest.approx(kv / 2)
    assert FP8_ACCURACY_NOTE in fp8_estimate.notes
    # TP=2 halves the batch-1 floor's weight bytes per GPU
    one = estimate_deployment(
        stage, inputs, Deployment(framework="vllm"), Factors(), "test: the default factors"
    )
    assert estimate.decode_floor_ms_per_token == pytest.approx(one.decode_floor_ms_per_token / 2)


def test_enumeration_divides_the_gpu_count() -> None:
    stage = profile_from_flags(model="llama-2-7b", gpu="H200", gpu_count=4).primary
    deployments = candidate_deployments("vllm", stage, ARCHITECTURES["llama-2-7b"], 4)
    layouts = {(d.parallelism.tensor_parallel_size, d.parallelism.replicas) for d in deployments}
    assert layouts == {(1, 4), (2, 2), (4, 1)}
    assert all(d.gpus == 4 for d in deployments)
    precisions = {(d.precision.quantization, d.precision.kv_cache_dtype) for d in deployments}
    assert precisions == {(None, "auto"), ("fp8", "auto"), ("fp8", "fp8"), (None, "fp8")}


def test_70b_on_one_h200_names_configurations_that_fit_as_estimates(calibration) -> None:
    stage = profile_from_flags(model="llama-2-70b", parameters_b=70, gpu="H200").primary
    search = search_configurations(
        stage,
        "vllm",
        calibration[1].lookup(stage),
        lambda deployment: calibration[0].measured_levels(stage, deployment),
    )
    assert search is not None and search.estimates
    best = search.estimates[0]
    assert best.fits and best.within_gpu_budget
    assert best.deployment.precision.quantization == "fp8"  # bf16 70B (140 GB) needs 2 GPUs
    assert search.recommended_basis == "estimate"
    labels = [e.label for e in search.estimates]
    tp2 = [e for e in search.estimates if e.deployment.parallelism.tensor_parallel_size == 2]
    assert tp2 and not tp2[0].within_gpu_budget and tp2[0].deployment.precision.quantization is None
    assert any("float16: needs" in text for text in search.excluded), labels
    assert FP8_ACCURACY_NOTE in search.notes
    assert search.plan[0] == best.label


def test_cli_recommend_70b_names_unmeasured_configurations() -> None:
    from typer.testing import CliRunner

    from advisor.cli import app

    result = CliRunner().invoke(
        app,
        [
            *("recommend", "--model", "llama-2-70b", "--parameters-b", "70", "--gpu", "H200"),
            *("--reference-dir", str(SHIPPED_REFERENCE_DIR)),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Configuration: vllm TP=1 float16 + fp8 weights on 1 GPU(s) [estimate]" in result.output
    assert "vllm TP=2 float16 [beyond the GPU budget]" in result.output
    assert "lm-evaluation-harness" in result.output
    assert "Estimate accuracy: Leave-one-out over" in result.output


def test_plan_runs_carry_parallelism_and_precision(calibration) -> None:
    from advisor.plan.stage_plan import plan_for_stage
    from advisor.sizing.configurations import plan_runs

    stage = profile_from_flags(
        model="llama-2-13b", gpu="H200", gpu_count=2, concurrency=256
    ).primary
    plain = plan_for_stage(stage)
    base = plain.configs[0]
    search = search_configurations(stage, base.backend, calibration[1].lookup(stage))
    assert search is not None
    runs = plan_runs(base, search)
    assert runs and len(runs) <= len(search.plan)
    for run in runs:
        assert run.parallelism.gpus_needed == 2
        assert "tensor_parallel_size" not in run.engine_args
        assert (run.parallelism, run.precision) != (base.parallelism, base.precision)
    layouts = {(r.parallelism.tensor_parallel_size, r.parallelism.replicas) for r in runs}
    assert layouts & {(2, 1), (1, 2)}
    with_search = plan_for_stage(stage, configurations=True)
    assert len(with_search.configs) == len(plain.configs) + len(runs)


def test_a_tp2_run_is_not_evidence_for_the_tp1_stage() -> None:
    from advisor.evidence.rows import rows_from_runs

    runs = read_reference_folder(SHIPPED_REFERENCE_DIR).runs
    run = next(
        r
        for file_runs in runs.values()
        for r in file_runs
        if r.config.backend == "vllm" and r.config.model == "llama-2-7b"
    )
    stage = profile_from_flags(model="llama-2-7b", gpu="H200").primary
    (as_shipped,) = rows_from_runs(stage, [run])
    assert as_shipped.closeness.same_configuration  # old runs: TP=1, 1 replica, no FP8
    tp2 = run.model_copy(
        update={
            "config": run.config.model_copy(
                update={"parallelism": ParallelismConfig(tensor_parallel_size=2)}
            )
        }
    )
    fp8 = run.model_copy(
        update={
            "config": run.config.model_copy(
                update={"precision": PrecisionConfig(dtype="float16", quantization="fp8")}
            )
        }
    )
    for other in (tp2, fp8):
        (row,) = rows_from_runs(stage, [other])
        assert not row.closeness.same_configuration


def test_two_gpus_are_compared_with_one_measured_gpu(calibration) -> None:
    stage = profile_from_flags(
        model="llama-2-7b",
        gpu="H200",
        gpu_count=2,
        prompt_tokens=128,
        output_tokens=128,
        concurrency=256,
    ).primary
    search = search_configurations(
        stage,
        "vllm",
        calibration[1].lookup(stage),
        lambda deployment: calibration[0].measured_levels(stage, deployment),
    )
    assert search is not None and search.single_gpu is not None
    # the shipped vLLM TP=1 ladder on the H200 is the one-GPU reference, measured
    assert {m.concurrency for m in search.single_gpu.measured} >= {1, 16, 64, 256}
    layouts = {e.label for e in search.estimates if e.deployment.precision.quantization is None}
    assert {"vllm TP=2 float16", "vllm 2 x TP=1 float16"} <= layouts
    first_two = search.trade_offs[:2]
    assert all(" vs vllm TP=1 float16: TPOT p50 " in line for line in first_two)
    assert all("on 2 vs 1 GPU(s)" in line for line in first_two)


def test_a_tiny_model_is_said_to_be_outside_the_step_model(calibration) -> None:
    stage = profile_from_flags(model="tiny-llama", gpu="H200").primary
    search = search_configurations(stage, "vllm", calibration[1].lookup(stage))
    assert search is not None
    assert any("launches" in note and "overstate" in note for note in search.notes)
    big = profile_from_flags(model="llama-2-7b", gpu="H200").primary
    big_search = search_configurations(big, "vllm", calibration[1].lookup(big))
    assert big_search is not None and not any("launches" in n for n in big_search.notes)


def test_cpu_plans_never_add_gpu_configurations() -> None:
    from advisor.plan.stage_plan import plan_for_stage

    stage = profile_from_flags(model="llama-2-13b", gpu="H200", gpu_count=2).primary
    cpu = plan_for_stage(stage, cpu_only=True, configurations=True)
    assert all(c.parallelism.gpus_needed == 1 and not c.precision.uses_fp8 for c in cpu.configs)
    gpu = plan_for_stage(stage, configurations=True)
    assert any(c.parallelism.gpus_needed == 2 for c in gpu.configs)
    assert len(gpu.estimates) == len(gpu.configs)
