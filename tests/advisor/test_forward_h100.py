"""The shipped H100 measurement of two encoders (data/reference/h100_encoders_runs.json:
bert-base at 128 tokens and vit-base at 224 px, float16, PyTorch, ONNX Runtime and torch.compile)
read by the forward model: its ladders calibrate the sizing of a stage on that GPU, the fit
keeps the shape that follows each ladder, and docs/forward-serving.md's table of predicted
against measured capacity is what the real functions compute from the shipped file."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.sizing.forward_model import ladder_points
from advisor.sizing.forward_sizing import CARRIED_ERROR, size_forward_stage
from advisor.sizing.forward_validation import LadderFit, SearchCheck, ladder_fits, search_checks
from advisor.sizing.measured import read_reference_folder
from advisor.workload.gpus import find_gpu
from advisor.workload.profile import StageProfile
from bench.core.quality import QualityResult
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

FILE = "h100_encoders_runs.json"
RUNS = read_reference_folder(SHIPPED_REFERENCE_DIR).runs.get(FILE, [])
GPU = find_gpu("NVIDIA H100 80GB HBM3")
DOC = (Path(__file__).resolve().parents[2] / "docs" / "forward-serving.md").read_text()
QUALITY = SHIPPED_REFERENCE_DIR / "quality" / "h100_tiny-bert-classifier"


def _stage(gpu: str, rate: float = 500) -> StageProfile:
    """A bert-base embedder at 128 tokens, fp16, p99 50 ms, on `gpu`."""
    return StageProfile(
        name="embedder",
        kind="forward",
        model="bert-base",
        sequence_length={"kind": "fixed", "mean": 128},
        request_rate_rps=rate,
        slo={"e2e_ms": 50},
        gpu={"type": gpu},
        precision={"dtype": "float16"},
    )


def fit_row(fit: LadderFit) -> str:
    shape = "max(overhead, device)" if fit.overlapped else "overhead + device"
    return (
        f"| {fit.model} | {fit.engine} | {shape} | {fit.overhead_ms:.2f} | "
        f"{fit.efficiency:.0%} | {fit.worst_error:.0%} |"
    )


def search_row(check: SearchCheck) -> str:
    measured = f"{check.measured_rps:,.0f}" if check.measured_rps else "none"
    predicted = f"{check.predicted_rps:,.0f}" if check.predicted_rps is not None else "no ladder"
    error = f"{check.error:+.0%}" if check.error is not None else "-"
    first = f"{check.first_infeasible_rps:,.0f}" if check.first_infeasible_rps else "-"
    return (
        f"| {check.model} | {check.engine} | {check.result} | {measured} | {first} | "
        f"{predicted} | {error} |"
    )


def test_the_file_is_h100_forward_runs_with_their_fingerprint() -> None:
    assert len(RUNS) == 26, f"{FILE}: {len(RUNS)} runs"
    for run in RUNS:
        assert run.config.workload.kind == "forward" and run.config.precision.dtype == "float16"
        assert run.environment is not None
        assert find_gpu(run.environment.primary_gpu_name or "") == GPU


def test_each_ladder_is_fitted_by_the_shape_that_follows_it() -> None:
    fits = {(fit.engine, fit.model): fit for fit in ladder_fits(RUNS, GPU)}
    assert set(fits) == {
        (e, m) for e in ("pytorch", "onnxruntime") for m in ("bert-base", "vit-base")
    }
    for fit in fits.values():
        assert fit.batches == [1, 4, 16, 64, 256]
        assert fit.worst_error <= 0.15, fit
    # Eager PyTorch's dispatch (about 5 ms) overlaps the GPU's work until the batch outgrows
    # it; ONNX Runtime's times add up.
    assert fits[("pytorch", "bert-base")].overlapped and fits[("pytorch", "vit-base")].overlapped
    assert not fits[("onnxruntime", "bert-base")].overlapped


def test_the_docs_tables_are_what_the_functions_compute() -> None:
    for fit in ladder_fits(RUNS, GPU):
        assert fit_row(fit) in DOC, fit_row(fit)
    checks = search_checks(RUNS, GPU)
    assert len(checks) == 5
    for check in checks:
        assert search_row(check) in DOC, search_row(check)


def test_the_model_is_near_onnx_runtime_and_far_above_eager_pytorch_in_process() -> None:
    checks = {(c.engine, c.model): c for c in search_checks(RUNS, GPU)}
    ort = checks[("onnxruntime", "bert-base")]
    assert ort.result == "found" and ort.error is not None and abs(ort.error) <= 0.10
    # between the last passing and the first failing rate: the model's rate is within 5%
    assert ort.predicted_rps <= ort.first_infeasible_rps * 1.05  # type: ignore[operator]
    eager = checks[("pytorch", "bert-base")]
    assert eager.error is not None and eager.error > 0.5  # the gap the doc states


def test_an_h100_stage_is_sized_from_the_shipped_ladder() -> None:
    sized = size_forward_stage(_stage("H100-SXM", rate=5000), "onnxruntime", RUNS)
    assert sized is not None and sized.basis == "measured ladder"
    assert "20261206-134937-ec115bcd" in sized.basis_words  # the batch-1 ladder run
    assert sized.batching is not None and sized.batching.max_batch <= 256
    assert sized.fleet is not None and sized.fleet.gpus >= 1


@pytest.mark.parametrize(
    ("name", "measured", "not_run"),
    [
        ("quality.json", {"fp32", "bf16", "fp16"}, {"int8", "fp8"}),
        ("onnxruntime/quality.json", {"fp32", "fp16", "int8"}, set()),
        ("pytorch-8bit/quality.json", {"fp32", "int8", "fp8"}, set()),
    ],
)
def test_the_gpu_quality_files_say_what_ran(name, measured, not_run) -> None:
    result = QualityResult.model_validate_json((QUALITY / name).read_text())
    statuses = {p.precision: p.status for p in result.precisions}
    assert {n for n, s in statuses.items() if s == "measured"} == measured
    assert {n for n, s in statuses.items() if s == "not run"} == not_run
    assert result.environment is not None


def test_a_gpu_without_a_ladder_gets_the_ladder_of_another_carried_over() -> None:
    """On a T4 (no ladder) the H100's five-point ladder stands in, on the T4's own floor, with
    the carried error; without any ladder the floor alone is a bound, not a prediction."""
    sized = size_forward_stage(_stage("T4"), "onnxruntime", RUNS)
    assert sized is not None and sized.basis == "carried ladder"
    assert "carried to the T4 floor" in sized.basis_words
    assert "20261206-134937-ec115bcd" in sized.basis_words
    assert sized.error == CARRIED_ERROR and sized.gpus_range is not None
    alone = size_forward_stage(_stage("T4"), "onnxruntime", [])
    assert alone is not None and alone.basis == "floor only"
    # the floor is a lower bound on batch time: the carried model serves fewer samples/s
    assert sized.batching.samples_per_s_per_gpu < alone.batching.samples_per_s_per_gpu


def test_the_carried_error_covers_a_carry_between_the_h100_and_the_h200() -> None:
    """Each engine's bert-base ladder fitted on one GPU and carried to the other GPU's floor
    predicts that GPU's measured batch times within CARRIED_ERROR (worst measured: 53%)."""
    shipped = read_reference_folder(SHIPPED_REFERENCE_DIR).runs
    h200 = shipped["h200_llama2-7b_engines_bert_resnet_runs.json"]
    worst = 0.0
    for engine in ("pytorch", "onnxruntime"):
        for source, target, target_gpu in ((h200, RUNS, "H100-SXM"), (RUNS, h200, "H200")):
            carried = size_forward_stage(_stage(target_gpu), engine, source)
            assert carried is not None and carried.basis == "carried ladder"
            for batch, ms, _ in ladder_points(
                r
                for r in target
                if r.config.backend == engine
                and r.config.model == "bert-base"
                and r.config.precision.dtype == "float16"
                and r.config.workload.sequence_length is not None
                and r.config.workload.sequence_length.mean == 128
            ):
                worst = max(worst, abs(carried.batch_time.batch_ms(batch) - ms) / ms)
    assert 0.4 < worst <= CARRIED_ERROR, worst


def test_the_long_probe_search_is_valid_and_in_the_docs() -> None:
    """torch_compile's search rerun with 12,000 requests a probe (the 3,000-request one in the
    ladder file measured under 10 s: INVALID) is VALID and its row is the docs' row."""
    long_runs = read_reference_folder(SHIPPED_REFERENCE_DIR).runs[
        "h100_bert_torch_compile_runs.json"
    ]
    assert [run.validity.status for run in long_runs] == ["VALID"]
    short = [
        run
        for run in RUNS
        if run.config.backend == "torch_compile" and run.config.load.pattern == "capacity"
    ]
    assert [run.validity.status for run in short] == ["INVALID"]
    (check,) = search_checks(long_runs, GPU)
    assert check.result == "found" and check.measured_rps == 4375
    assert search_row(check) in DOC, search_row(check)
