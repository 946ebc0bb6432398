"""The one calibration behind the configuration search (advisor/sizing/calibration.py): the serving
model's factors, its leave-one-out error on the shipped reference runs (data/reference), and a
`bench calibrate` record taking precedence over the runs."""

from __future__ import annotations

import math

import pytest

from advisor.sizing.calibration import (
    GATE_MAPE,
    StepCalibration,
    calibration_from,
    points_from_shapes,
)
from advisor.sizing.calibration_fit import fit_record
from advisor.sizing.configurations import Deployment, search_configurations
from advisor.sizing.measured import measured_reference_runs, read_reference_folder
from advisor.sizing.mechanics import mechanisms_of
from advisor.sizing.serving_model import (
    calibrate,
    observations,
    predict_stage_capacity,
    run_shape,
)
from advisor.workload.profile import StageProfile
from advisor.workload.profile_input import profile_from_flags
from bench.core.calibration import record_from_runs
from bench.core.config import ParallelismConfig, PrecisionConfig
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

CHAT = {
    "model": "llama-2-7b",
    "prompt_tokens": {"mean": 512},
    "output_tokens": {"mean": 256},
    "peak_request_rate_rps": 40,
    "concurrency": 32,
    "slo": {"ttft_ms": 300, "tpot_ms": 50},
    "gpu": {"type": "H200"},
}


@pytest.fixture(scope="module")
def reference_runs():
    return read_reference_folder(SHIPPED_REFERENCE_DIR).runs


@pytest.fixture(scope="module")
def calibrated(reference_runs):
    return calibration_from([], reference_runs)


@pytest.fixture(scope="module")
def calibration(calibrated):
    return calibrated[0]


def _shapes(reference_runs):
    return [
        (item, name)
        for name, runs in reference_runs.items()
        for run in runs
        if (item := run_shape(run)) is not None
    ]


def test_shipped_runs_read_as_tp1_one_replica_at_their_recorded_precision(reference_runs) -> None:
    pairs = _shapes(reference_runs)
    points = points_from_shapes(pairs)
    by_id = {item.run.run_id: item.run for item, _ in pairs}
    assert len(points) >= 20  # every closed-loop level of the shipped vLLM runs (H200, H100)
    for point in points:
        assert point.deployment.parallelism.tensor_parallel_size == 1
        assert point.deployment.parallelism.replicas == 1
        recorded = by_id[point.run_id].config.precision
        assert point.deployment.precision.quantization == recorded.quantization
        assert point.deployment.precision.kv_cache_dtype == recorded.kv_cache_dtype
        assert point.gpu in ("H200", "H100-SXM")  # the shipped runs' GPUs
    kinds = {
        (p.deployment.precision.quantization, p.deployment.precision.kv_cache_dtype) for p in points
    }
    assert {(None, "auto"), ("fp8", "auto"), ("fp8", "fp8")} <= kinds


def test_mape_is_finite_and_from_real_rows(calibration) -> None:
    assert calibration.tpot_mape is not None and math.isfinite(calibration.tpot_mape)
    assert calibration.throughput_mape is not None and math.isfinite(calibration.throughput_mape)
    assert calibration.tpot_mape > 0  # a predictor that is exact on real rows left nothing out
    for point in calibration.points:
        assert point.predicted_tpot_ms is not None and point.predicted_tpot_ms > 0
        expected = (point.predicted_tpot_ms - point.measured_tpot_ms) / point.measured_tpot_ms
        assert point.tpot_error == pytest.approx(expected)
    partitions = {p.partition for p in calibration.partitions}
    assert "vllm TP=1 16-bit weights on H200" in partitions
    for partition in calibration.partitions:
        if partition.within_gate is not None:
            worst = max(partition.tpot_mape, partition.throughput_mape)
            assert partition.within_gate == (worst < GATE_MAPE)
    assert "10%-per-partition gate" in calibration.verdict


def test_leave_one_out_is_the_serving_models_step_without_the_run(reference_runs) -> None:
    """Each level is predicted by the serving model's step with factors fitted on the other
    runs; fitted with its own run the prediction differs."""
    pairs = _shapes(reference_runs)
    points = points_from_shapes(pairs)
    every = [item for item, _ in pairs]
    item = next(i for i in every if i.family == "vllm" and i.precision_class.startswith("16"))
    mine = [p for p in points if p.run_id == item.run.run_id]
    assert mine
    others = [s for s in every if s.run.run_id != item.run.run_id]
    without = calibrate(item.family, item.gpu, item.precision_class, others).factors
    with_it = calibrate(item.family, item.gpu, item.precision_class, every).factors
    obs = {o.phase: o for o in observations(item)}
    for point in mine:
        o = obs[point.phase]
        step = item.shape.step_ms(without, o.decode, o.prefill, o.context)
        assert point.predicted_tpot_ms == pytest.approx(step)
        assert item.shape.step_ms(with_it, o.decode, o.prefill, o.context) != pytest.approx(step)


def test_measured_levels_match_the_configuration_exactly(calibration) -> None:
    stage = profile_from_flags(
        model="llama-2-7b", gpu="H200", prompt_tokens=128, output_tokens=128
    ).primary
    tp1 = Deployment(framework="vllm")
    tp2 = Deployment(framework="vllm", parallelism=ParallelismConfig(tensor_parallel_size=2))
    levels = calibration.measured_levels(stage, tp1)
    assert {level.concurrency for level in levels} >= {1, 16, 64, 256}
    assert calibration.measured_levels(stage, tp2) == []  # a TP=1 run is no evidence for TP=2


def test_the_search_and_the_fleet_use_the_same_factors(calibrated, reference_runs) -> None:
    """One calibration: the search's TPOT is the engine shape's step with the factors the fleet
    prediction (predict_stage_capacity) was sized with."""
    _, lookup = calibrated
    stage = StageProfile(**CHAT)
    vllm = Deployment(framework="vllm", precision=PrecisionConfig(dtype="float16"))
    factors, words = lookup.factors(stage, vllm)
    assert "fitted on" in words
    runs = [run for file_runs in reference_runs.values() for run in file_runs]
    fleet = predict_stage_capacity(stage, vllm, runs, seeds=1, interval=False)
    assert fleet is not None and fleet.factors == factors
    search = search_configurations(stage, "vllm", lookup.lookup(stage))
    assert search is not None
    tp1 = next(
        e
        for e in search.estimates
        if e.deployment.parallelism.tensor_parallel_size == 1
        and not e.deployment.precision.uses_fp8
    )
    assert tp1.efficiency_source == words
    assert tp1.prediction is not None
    # The same TPOT with other factors is another TPOT: the factors drive it.
    slower = factors.model_copy(update={"memory": factors.memory * 2})
    other = search_configurations(stage, "vllm", lambda d: (slower, "test: doubled memory"))
    assert other is not None
    tp1_slower = next(e for e in other.estimates if e.label == tp1.label)
    assert tp1_slower.prediction is not None
    assert tp1_slower.prediction.tpot_ms > tp1.prediction.tpot_ms


def test_a_record_comes_before_the_runs_and_no_calibration_offers_the_command() -> None:
    runs = [
        run
        for file_runs in measured_reference_runs(SHIPPED_REFERENCE_DIR).values()
        for run in file_runs
        if run_shape(run) is not None
        and not mechanisms_of(run)
        and run.config.backend == "vllm"
        and run.config.model == "llama-2-7b"
        and run.config.precision.quantization is None
        and run.config.precision.kv_cache_dtype == "auto"
    ]
    record = record_from_runs(runs)
    lookup = StepCalibration(shapes=[], yours=[record])
    stage = StageProfile(**CHAT)
    vllm = Deployment(framework="vllm", precision=PrecisionConfig(dtype="float16"))
    factors, words = lookup.factors(stage, vllm)
    fit = fit_record(record, "yours")
    assert fit is not None and factors == fit.calibration.factors
    assert record.calibration_id in words
    _, none = StepCalibration().factors(stage, vllm)
    assert none.startswith("uncalibrated") and "python -m bench calibrate" in none


def test_docs_table_matches_the_calibration(calibration) -> None:
    """docs/configurations.md quotes the leave-one-out errors on the shipped runs."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "configurations.md").read_text()
    for partition in calibration.partitions:
        rows = [line for line in text.splitlines() if line.startswith(f"| {partition.partition} |")]
        assert len(rows) == 1, partition.partition
        assert f"| {partition.points} | {partition.tpot_mape:.1%} |" in rows[0]
        assert f"| {partition.throughput_mape:.1%} |" in rows[0]
        verdict = {True: "yes", False: "no", None: "—"}[partition.within_gate]
        assert rows[0].endswith(f"| {verdict} |")
    assert f"| all | {len(calibration.points)} | {calibration.tpot_mape:.1%} |" in text


def test_accuracy_is_of_the_partition_on_the_gpu_asked(calibration) -> None:
    """On a GPU with no stored level of the partition, the error there is said to be unmeasured;
    on the H200 it is the MAPE of that partition's stored levels."""
    vllm = Deployment(framework="vllm")
    members = [p for p in calibration.points if p.partition == "vllm TP=1 16-bit weights"]
    expected = sum(abs(p.tpot_error or 0.0) for p in members) / len(members)
    on_h200 = calibration.accuracy_of(vllm, "H200")
    assert f"{expected:.1%}" in on_h200 and f"over {len(members)} stored level(s)" in on_h200
    on_h100 = calibration.accuracy_of(vllm, "H100-SXM")
    assert "no stored level on H100-SXM" in on_h100 and "not measured" in on_h100
