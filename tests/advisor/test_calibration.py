"""Calibration of the configuration estimate on the shipped reference runs (data/reference)."""

from __future__ import annotations

import math

import pytest

from advisor.sizing.calibration import GATE_MAPE, calibration_from, efficiency_for, points_from_runs
from advisor.sizing.configurations import Deployment
from advisor.sizing.measured import read_reference_folder
from advisor.workload.profile_input import profile_from_flags
from bench.core.config import ParallelismConfig
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR


@pytest.fixture(scope="module")
def reference_runs():
    return read_reference_folder(SHIPPED_REFERENCE_DIR).runs


@pytest.fixture(scope="module")
def calibration(reference_runs):
    return calibration_from([], reference_runs)


def test_shipped_runs_read_as_tp1_one_replica_at_their_recorded_precision(reference_runs) -> None:
    pairs = [(run, name) for name, runs in reference_runs.items() for run in runs]
    by_id = {run.run_id: run for run, _ in pairs}
    points = points_from_runs(pairs)
    assert len(points) >= 20  # every closed-loop level of the shipped generate runs on the H200
    for point in points:
        assert point.deployment.parallelism.tensor_parallel_size == 1
        assert point.deployment.parallelism.replicas == 1
        recorded = by_id[point.run_id].config.precision
        assert point.deployment.precision.quantization == recorded.quantization
        assert point.deployment.precision.kv_cache_dtype == recorded.kv_cache_dtype
        assert point.gpu == "H200"
    # h200_llama2-7b_vllm_fp8_runs.json: bf16, FP8 weights, FP8 weights + FP8 KV on one host.
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
    assert "vllm TP=1 16-bit weights" in partitions
    for partition in calibration.partitions:
        if partition.within_gate is not None:
            worst = max(partition.tpot_mape, partition.throughput_mape)
            assert partition.within_gate == (worst < GATE_MAPE)
    assert "10%-per-partition gate" in calibration.verdict


def test_leave_one_out_really_leaves_the_row_out(calibration) -> None:
    """In a two-level partition the left-out level is predicted from the other level alone."""
    by_partition: dict[str, list] = {}
    for point in calibration.points:
        by_partition.setdefault(point.partition, []).append(point)
    pairs = [members for members in by_partition.values() if len(members) == 2]
    assert pairs, "the shipped data has a partition with exactly two levels (onnxruntime)"
    first, second = pairs[0]
    assert first.loo_efficiency == pytest.approx(second.observed_efficiency)
    assert second.loo_efficiency == pytest.approx(first.observed_efficiency)
    with_itself, _ = efficiency_for(first.deployment, calibration.points)
    assert with_itself != pytest.approx(first.loo_efficiency)  # removing the row changed it


def test_measured_levels_match_the_configuration_exactly(calibration) -> None:
    stage = profile_from_flags(
        model="llama-2-7b", gpu="H200", prompt_tokens=128, output_tokens=128
    ).primary
    tp1 = Deployment(framework="vllm")
    tp2 = Deployment(framework="vllm", parallelism=ParallelismConfig(tensor_parallel_size=2))
    levels = calibration.measured_levels(stage, tp1)
    assert {level.concurrency for level in levels} >= {1, 16, 64, 256}
    assert calibration.measured_levels(stage, tp2) == []  # a TP=1 run is no evidence for TP=2


def test_efficiency_falls_back_with_a_stated_source(calibration) -> None:
    tp2 = Deployment(framework="vllm", parallelism=ParallelismConfig(tensor_parallel_size=2))
    value, source = calibration.efficiency(tp2)
    tp1_value, tp1_source = calibration.efficiency(Deployment(framework="vllm"))
    assert "calibrated on" in tp1_source
    assert "assumed TP factor" in source
    assert value < tp1_value
    _, unknown = calibration.efficiency(Deployment(framework="tensorrt_llm"))
    assert "no stored run of this engine" in unknown


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
