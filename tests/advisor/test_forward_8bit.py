"""The shipped H100 ladders of INT8 and FP8 W8A8 encoders through eager PyTorch
(data/reference/h100_encoders_8bit_runs.json) read by the forward model: each format's ladder is
fitted apart, the 8-bit formats are slower than float16 on this engine (the transfer the sizing
used without them is off by most of a batch's time), a stage's 8-bit option is sized from its
own ladder (or carried to another GPU), and docs/forward-serving.md's tables are what the real
functions compute from the shipped file."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.sizing.forward_sizing import CARRIED_ERROR, TRANSFER_CAVEAT, size_forward_stage
from advisor.sizing.forward_validation import (
    FormatCheck,
    FormatRung,
    LadderFit,
    SearchCheck,
    format_checks,
    ladder_fits,
    search_checks,
)
from advisor.sizing.measured import read_reference_folder
from advisor.workload.gpus import find_gpu
from advisor.workload.profile import StageProfile
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

FILE = "h100_encoders_8bit_runs.json"
RUNS = read_reference_folder(SHIPPED_REFERENCE_DIR).runs.get(FILE, [])
GPU = find_gpu("NVIDIA H100 80GB HBM3")
DOC = (Path(__file__).resolve().parents[2] / "docs" / "forward-serving.md").read_text()


def _format(name: str | None) -> str:
    return name.upper() if name else "float16"


def fit_row(fit: LadderFit) -> str:
    return (
        f"| {fit.model} | {_format(fit.weight_format)} | {fit.overhead_ms:.2f} | "
        f"{fit.efficiency:.1%} | {fit.worst_error:.0%} |"
    )


def rung_row(check: FormatCheck, rung: FormatRung) -> str:
    return (
        f"| {check.model} | {check.weight_format.upper()} | {rung.batch} | {rung.ms_16bit:.1f} | "
        f"{rung.ms_8bit:.1f} | {rung.speedup:.2f}x | {rung.transferred_ms:.1f} "
        f"({rung.transfer_error:+.0%}) |"
    )


def search_row(check: SearchCheck) -> str:
    return (
        f"| {check.model} | {_format(check.weight_format)} | {check.result} | "
        f"{check.measured_rps:,.0f} | {check.first_infeasible_rps:,.0f} | "
        f"{check.predicted_rps:,.0f} | {check.error:+.0%} |"
    )


def _stage(gpu: str, quantization: str | None = None) -> StageProfile:
    """A bert-base embedder at 128 tokens, fp16, p99 50 ms, 2,000 req/s, on `gpu`."""
    return StageProfile(
        name="embedder",
        kind="forward",
        model="bert-base",
        sequence_length={"kind": "fixed", "mean": 128},
        request_rate_rps=2000,
        slo={"e2e_ms": 50},
        gpu={"type": gpu},
        precision={"dtype": "float16", "quantization": quantization},
    )


def test_the_file_is_h100_ladders_at_three_formats_with_their_fingerprint() -> None:
    assert len(RUNS) == 26, f"{FILE}: {len(RUNS)} runs"
    formats = {run.config.precision.quantization for run in RUNS}
    assert formats == {None, "int8", "fp8"}
    for run in RUNS:
        # the FP8 batcher search did not converge (its 375 req/s level failed its re-check)
        converged = not (
            run.config.load.capacity_search and run.config.precision.quantization == "fp8"
        )
        assert (run.validity.status.value == "VALID") == converged, run.run_id
        assert run.config.backend == "pytorch" and run.config.precision.dtype == "float16"
        assert run.environment is not None
        assert find_gpu(run.environment.primary_gpu_name or "") == GPU
        quantized = run.engine.extra.get("quantization") if run.engine else None
        if run.config.precision.quantization:  # the engine says it ran the 8-bit layers
            assert f"{run.config.precision.quantization} W8A8" in str(quantized)
        else:
            assert quantized is None


def test_eight_bit_is_slower_than_float16_on_eager_pytorch() -> None:
    checks = format_checks(RUNS, GPU)
    assert {(c.model, c.weight_format) for c in checks} == {
        (m, f) for m in ("bert-base", "vit-base") for f in ("int8", "fp8")
    }
    speedups = [rung.speedup for check in checks for rung in check.rungs]
    assert len(speedups) == 16 and max(speedups) < 0.3
    # the caveat the sizing states is this range
    slowest, fastest = 1 / min(speedups), 1 / max(speedups)
    assert f"{fastest:.1f}-{slowest:.1f}x slower" in TRANSFER_CAVEAT
    # the transfer (float16 calibration on the 8-bit floor) misses by most of a batch's time
    assert min(check.worst_transfer_error for check in checks) > 0.7


def test_each_format_is_fitted_apart_and_the_docs_tables_are_what_the_functions_compute():
    fits = ladder_fits(RUNS, GPU)
    assert {(f.model, f.weight_format) for f in fits} == {
        (m, f) for m in ("bert-base", "vit-base") for f in (None, "int8", "fp8")
    }
    for fit in fits:
        assert fit.batches == [1, 16, 64, 256] and fit.worst_error <= 0.1, fit
        assert fit_row(fit) in DOC, fit_row(fit)
    for check in format_checks(RUNS, GPU):
        for rung in check.rungs:
            assert rung_row(check, rung) in DOC, rung_row(check, rung)
    searches = search_checks(RUNS, GPU)
    assert {s.weight_format for s in searches} == {"int8", "fp8"}
    for search in searches:
        assert search_row(search) in DOC, search_row(search)


def test_an_eight_bit_option_is_sized_from_its_own_ladder() -> None:
    """On the H100 the INT8 option of eager PyTorch comes from the INT8 ladder (slower than
    float16: more GPUs), not from the float16 ladder on the INT8 floor."""
    fp16 = size_forward_stage(_stage("H100-SXM"), "pytorch", RUNS)
    int8 = size_forward_stage(_stage("H100-SXM"), "pytorch", RUNS, weight_format="int8")
    assert fp16 is not None and int8 is not None
    assert int8.basis == "measured ladder" and int8.weight_format == "int8"
    assert fp16.basis == "measured ladder"
    assert int8.batching is not None and fp16.batching is not None
    assert int8.batching.samples_per_s_per_gpu < 0.5 * fp16.batching.samples_per_s_per_gpu
    assert int8.fleet is not None and fp16.fleet is not None
    assert int8.fleet.gpus > fp16.fleet.gpus


def test_an_eight_bit_ladder_is_carried_to_a_gpu_without_one() -> None:
    carried = size_forward_stage(_stage("L4"), "pytorch", RUNS, weight_format="int8")
    assert carried is not None and carried.basis == "carried ladder"
    assert "INT8 ladder on H100-SXM carried to the L4 INT8 floor" in carried.basis_words
    assert carried.error == CARRIED_ERROR


@pytest.mark.parametrize("framework", ["onnxruntime", "torch_compile"])
def test_an_engine_without_an_eight_bit_ladder_says_what_the_transfer_missed(framework) -> None:
    shipped = read_reference_folder(SHIPPED_REFERENCE_DIR).runs.get("h100_encoders_runs.json", [])
    sized = size_forward_stage(_stage("H100-SXM"), framework, shipped + RUNS, weight_format="int8")
    assert sized is not None
    if sized.basis != "floor only":
        assert "INT8 itself not measured" in sized.basis_words
        assert TRANSFER_CAVEAT in sized.basis_words
