"""Calibration of the configuration estimate on stored measurements, with its leave-one-out error.

Every closed-loop level of a stored generate run on a catalogued GPU (a concurrency run, or each
phase of a step ladder) is one point: its configuration (engine, TP, replicas, precision), its
shape and load, the step floor `advisor.sizing.configurations` computes for it, and the measured
TPOT p50 and output tok/s. A point's observed efficiency = step floor / measured TPOT p50.

The efficiency used for a configuration is the median observed efficiency of the closest points,
taken from the first level that has any:
1. the same engine, TP degree and precision (weights and KV formats);
2. the same engine and precision at another TP degree, scaled by the assumed TP factors;
3. the same engine at another precision (FP8 assumed to keep the 16-bit efficiency);
4. every engine (the engine has no stored run);
5. none stored: an assumed 0.5.
Leave-one-out: each point is predicted from the others (its own measurement removed before the
efficiency is looked up), and the absolute percentage errors of TPOT p50 and output tok/s are
averaged (MAPE), overall and per partition (engine x TP x precision). The bar this predictor is
held to: under 10% per partition, the gate the field's best-known performance predictors set
for themselves; a partition with fewer than two points cannot be judged.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from pydantic import Field

from advisor.sizing.configurations import (
    DEFAULT_MAX_BATCH,
    OUTPUT_WORDS,
    TP_EFFICIENCY_ASSUMED,
    TPOT_WORDS,
    Deployment,
    MeasuredLevel,
    ShapeInputs,
    step_floor_ms,
)
from advisor.sizing.engine_shape import SHAPE_TOLERANCE
from advisor.sizing.measured import run_gpu_name
from advisor.workload.architectures import architecture_for
from advisor.workload.gpus import GPUS
from advisor.workload.profile import StageProfile
from bench.core.config import GenerateWorkload
from bench.core.schema import MetricsSummary, RunResult, RunStatus, ValidityStatus
from bench.core.strict import Strict

GATE_MAPE = 0.10
ASSUMED_EFFICIENCY = 0.5
"""Efficiency when no run at all is stored (about what vLLM reaches on an H200 at batch 1)."""


class CalibrationPoint(Strict):
    """One measured closed-loop level and what the estimate predicts for it."""

    run_id: str
    phase: str
    reference: str | None = Field(None, description="Reference file, or None for the store.")
    model: str
    gpu: str
    deployment: Deployment
    partition: str
    prompt_tokens: float
    output_tokens: float
    concurrency: int
    max_batch: int
    batch_per_replica: int
    step_floor_ms: float
    measured_tpot_ms: float
    measured_output_tok_s: float
    measured_tok_s_per_gpu: float
    measured_tok_s_per_user: float
    observed_efficiency: float
    loo_efficiency: float | None = None
    loo_efficiency_source: str = ""
    predicted_tpot_ms: float | None = None
    predicted_output_tok_s: float | None = None
    tpot_error: float | None = Field(None, description="(predicted - measured) / measured.")
    throughput_error: float | None = None


class PartitionError(Strict):
    partition: str
    points: int
    tpot_mape: float
    throughput_mape: float
    within_gate: bool | None = Field(
        None, description="Both MAPEs under the gate; None with fewer than two points."
    )


class Calibration(Strict):
    """The calibrated predictor's accuracy, as a user can read it."""

    points: list[CalibrationPoint] = Field(default_factory=list)
    tpot_mape: float | None = None
    throughput_mape: float | None = None
    partitions: list[PartitionError] = Field(default_factory=list)
    gate_mape: float = GATE_MAPE
    verdict: str = ""

    def efficiency(self, deployment: Deployment) -> tuple[float, str]:
        return efficiency_for(deployment, self.points)

    def accuracy_of(self, deployment: Deployment) -> str:
        """The leave-one-out error of the configuration's partition, or of the whole predictor
        when that partition has no stored level."""
        name = partition_of(deployment)
        for partition in self.partitions:
            if partition.partition == name:
                return (
                    f"leave-one-out error of {name}: {TPOT_WORDS} {partition.tpot_mape:.1%}, "
                    f"{OUTPUT_WORDS} {partition.throughput_mape:.1%} over {partition.points} "
                    "stored level(s)"
                )
        if self.tpot_mape is None or self.throughput_mape is None:
            return "no stored level to measure the estimate's error against"
        return (
            f"{name} has no stored level; over all {len(self.points)} stored levels the "
            f"leave-one-out error is {TPOT_WORDS} {self.tpot_mape:.1%}, {OUTPUT_WORDS} "
            f"{self.throughput_mape:.1%}"
        )

    def measured_levels(self, stage: StageProfile, deployment: Deployment) -> list[MeasuredLevel]:
        """The stage's model on the stage's GPU at its prompt/output shape, in exactly this
        configuration (engine, TP, replicas, precision): a TP=2 run is no measurement of TP=1."""
        levels = []
        for point in self.points:
            same = (
                point.model == stage.model
                and point.gpu == stage.gpu.type
                and _close(point.prompt_tokens, stage.prompt_tokens.mean)
                and _close(point.output_tokens, stage.output_tokens.mean)
                and same_configuration(point.deployment, deployment)
            )
            if same:
                levels.append(
                    MeasuredLevel(
                        concurrency=point.concurrency,
                        run_id=point.run_id,
                        reference=point.reference,
                        measured_tpot_ms=point.measured_tpot_ms,
                        measured_output_tok_s=point.measured_output_tok_s,
                        measured_tok_s_per_gpu=point.measured_tok_s_per_gpu,
                        measured_tok_s_per_user=point.measured_tok_s_per_user,
                        predicted_tpot_ms=point.predicted_tpot_ms,
                        predicted_output_tok_s=point.predicted_output_tok_s,
                        tpot_error=point.tpot_error,
                        throughput_error=point.throughput_error,
                    )
                )
        return sorted(levels, key=lambda level: level.concurrency)


def same_configuration(a: Deployment, b: Deployment) -> bool:
    """Same engine, TP degree, replicas, weight and KV formats (the 16-bit dtype may differ)."""
    return (
        a.framework == b.framework
        and a.parallelism.tensor_parallel_size == b.parallelism.tensor_parallel_size
        and a.parallelism.replicas == b.parallelism.replicas
        and a.precision_key == b.precision_key
    )


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= SHAPE_TOLERANCE * max(abs(b), 1e-9)


def partition_of(deployment: Deployment) -> str:
    return (
        f"{deployment.framework} TP={deployment.parallelism.tensor_parallel_size} "
        f"{deployment.precision_key}"
    )


def _tp_factor(target: int, measured: int) -> float:
    return TP_EFFICIENCY_ASSUMED.get(target, 0.6) / TP_EFFICIENCY_ASSUMED.get(measured, 0.6)


def efficiency_for(
    deployment: Deployment, points: Sequence[CalibrationPoint], leave_out: int | None = None
) -> tuple[float, str]:
    """(efficiency, where it comes from) for a configuration; `leave_out` = a point's index
    removed first (leave-one-out)."""
    pool = [p for i, p in enumerate(points) if i != leave_out]
    tp = deployment.parallelism.tensor_parallel_size
    key = deployment.precision_key
    engine = [p for p in pool if p.deployment.framework == deployment.framework]
    levels = (
        (
            [p for p in engine if p.partition == partition_of(deployment)],
            "calibrated on {n} stored level(s) of {what}",
        ),
        (
            [p for p in engine if p.deployment.precision_key == key],
            "{what}: measured at another TP degree, scaled by the assumed TP factor",
        ),
        (engine, "{what}: measured at another precision only (assumed the same efficiency)"),
        (pool, "{what}: no stored run of this engine; the median of every engine's {n} level(s)"),
    )
    for members, text in levels:
        if members:
            values = [
                p.observed_efficiency
                * _tp_factor(tp, p.deployment.parallelism.tensor_parallel_size)
                for p in members
            ]
            what = partition_of(deployment)
            return statistics.median(values), text.format(n=len(members), what=what)
    return ASSUMED_EFFICIENCY * _tp_factor(tp, 1), "assumed (no stored measurement)"


def _levels(run: RunResult) -> Iterable[tuple[str, int, MetricsSummary]]:
    """(phase name, concurrency, summary) of every closed-loop level of a run."""
    if run.config.load.closed_loop:
        for phase in run.phases:
            if phase.strategy == "concurrency" and phase.summary is not None:
                yield phase.name, int(phase.target), phase.summary


def _max_batch(run: RunResult) -> int:
    args = run.config.engine_args
    value = args.get("max_num_seqs") or args.get("max_batch_size")
    return int(value) if isinstance(value, int) and value > 0 else DEFAULT_MAX_BATCH


def points_from_runs(
    runs: Iterable[tuple[RunResult, str | None]],
) -> list[CalibrationPoint]:
    """Calibration points from (run, reference file or None) pairs; runs that are not VALID
    completed generate runs on a catalogued GPU with a known model size are skipped."""
    points: list[CalibrationPoint] = []
    for run, reference in runs:
        config = run.config
        if not isinstance(config.workload, GenerateWorkload):
            continue
        if run.status != RunStatus.COMPLETED or (
            run.validity is not None and run.validity.status != ValidityStatus.VALID
        ):
            continue
        gpu_name = run_gpu_name(run)
        gpu = GPUS.get(gpu_name) if gpu_name else None
        architecture, _ = architecture_for(config.model)
        parameters = architecture.parameters if architecture else None
        if parameters is None and run.model is not None and run.model.parameters:
            parameters = run.model.parameters
        if gpu is None or not parameters:
            continue
        deployment = Deployment(
            framework=config.backend, parallelism=config.parallelism, precision=config.precision
        )
        inputs = ShapeInputs(
            parameters=parameters,
            architecture=architecture,
            gpu=gpu,
            bandwidth_tb_s=gpu.memory_bandwidth_tb_s,
            prompt_tokens=config.workload.prompt_tokens.mean,
            output_tokens=config.workload.output_tokens.mean,
        )
        max_batch = _max_batch(run)
        for phase, concurrency, summary in _levels(run):
            if summary.tpot_ms is None or summary.tpot_ms.p50 <= 0:
                continue
            if summary.output_throughput_tok_s <= 0:
                continue
            batch = max(1, min(-(-concurrency // deployment.parallelism.replicas), max_batch))
            floor, _ = step_floor_ms(inputs, deployment, batch)
            measured_tpot = summary.tpot_ms.p50
            points.append(
                CalibrationPoint(
                    run_id=run.run_id,
                    phase=phase,
                    reference=reference,
                    model=config.model,
                    gpu=gpu.name,
                    deployment=deployment,
                    partition=partition_of(deployment),
                    prompt_tokens=inputs.prompt_tokens,
                    output_tokens=inputs.output_tokens,
                    concurrency=concurrency,
                    max_batch=max_batch,
                    batch_per_replica=batch,
                    step_floor_ms=floor,
                    measured_tpot_ms=measured_tpot,
                    measured_output_tok_s=summary.output_throughput_tok_s,
                    measured_tok_s_per_gpu=summary.output_throughput_tok_s / deployment.gpus,
                    measured_tok_s_per_user=1e3 / measured_tpot,
                    observed_efficiency=floor / measured_tpot,
                )
            )
    return points


def _mape(errors: Sequence[float]) -> float:
    return statistics.mean(abs(e) for e in errors)


def calibrate(points: Sequence[CalibrationPoint]) -> Calibration:
    """Leave-one-out predictions for every point, then MAPE overall and per partition."""
    checked: list[CalibrationPoint] = []
    for index, point in enumerate(points):
        efficiency, source = efficiency_for(point.deployment, points, leave_out=index)
        # The same arithmetic as `configurations.predict`, on the floor already computed from
        # the run's own sizes (a checkpoint-path model has no preset to recompute them from).
        tpot = point.step_floor_ms / efficiency
        throughput = point.deployment.parallelism.replicas * point.batch_per_replica * 1e3 / tpot
        checked.append(
            point.model_copy(
                update={
                    "loo_efficiency": efficiency,
                    "loo_efficiency_source": source,
                    "predicted_tpot_ms": tpot,
                    "predicted_output_tok_s": throughput,
                    "tpot_error": (tpot - point.measured_tpot_ms) / point.measured_tpot_ms,
                    "throughput_error": (throughput - point.measured_output_tok_s)
                    / point.measured_output_tok_s,
                }
            )
        )
    calibration = Calibration(points=checked)
    if not checked:
        calibration.verdict = (
            "no stored generate run on a catalogued GPU: the efficiency is assumed and its "
            "error unknown; every figure of the configuration search is an estimate"
        )
        return calibration
    calibration.tpot_mape = _mape([p.tpot_error or 0.0 for p in checked])
    calibration.throughput_mape = _mape([p.throughput_error or 0.0 for p in checked])
    by_partition: dict[str, list[CalibrationPoint]] = {}
    for point in checked:
        by_partition.setdefault(point.partition, []).append(point)
    for name, members in sorted(by_partition.items()):
        tpot_mape = _mape([p.tpot_error or 0.0 for p in members])
        throughput_mape = _mape([p.throughput_error or 0.0 for p in members])
        calibration.partitions.append(
            PartitionError(
                partition=name,
                points=len(members),
                tpot_mape=tpot_mape,
                throughput_mape=throughput_mape,
                within_gate=None
                if len(members) < 2
                else max(tpot_mape, throughput_mape) < GATE_MAPE,
            )
        )
    calibration.verdict = gate_verdict(calibration)
    return calibration


def gate_verdict(calibration: Calibration) -> str:
    """One sentence: where the predictor stands against the 10%-per-partition gate."""
    judged = [p for p in calibration.partitions if p.within_gate is not None]
    passing = [p.partition for p in judged if p.within_gate]
    failing = [
        f"{p.partition} ({max(p.tpot_mape, p.throughput_mape):.0%})"
        for p in judged
        if not p.within_gate
    ]
    text = (
        f"Leave-one-out over {len(calibration.points)} stored level(s): {TPOT_WORDS} MAPE "
        f"{calibration.tpot_mape:.1%}, {OUTPUT_WORDS} MAPE {calibration.throughput_mape:.1%}. "
        f"Against a {calibration.gate_mape:.0%}-per-partition gate: "
    )
    text += f"{len(passing)} of {len(judged)} partition(s) with 2+ levels pass"
    if passing:
        text += f" ({', '.join(passing)})"
    if failing:
        text += f"; above it: {', '.join(failing)}"
    unjudged = len(calibration.partitions) - len(judged)
    if unjudged:
        text += f"; {unjudged} partition(s) have a single level and cannot be judged"
    return text + "."


def calibration_from(
    runs: Iterable[RunResult], reference_runs: dict[str, list[RunResult]]
) -> Calibration:
    """Calibrate on the user's stored runs and the shipped reference runs."""
    pairs: list[tuple[RunResult, str | None]] = [(run, None) for run in runs]
    pairs += [(run, name) for name, file_runs in reference_runs.items() for run in file_runs]
    return calibrate(points_from_runs(pairs))


__all__ = [
    "ASSUMED_EFFICIENCY",
    "GATE_MAPE",
    "Calibration",
    "CalibrationPoint",
    "PartitionError",
    "calibrate",
    "calibration_from",
    "efficiency_for",
    "gate_verdict",
    "partition_of",
    "points_from_runs",
    "same_configuration",
]
