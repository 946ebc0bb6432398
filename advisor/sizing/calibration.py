"""The one calibration behind the configuration search, and its leave-one-out error.

The configuration search predicts a deployment's TPOT at a concurrency as the serving model
does (advisor/sizing/serving_model.py): the engine shape's step time with the serving model's
calibrated factors (overhead, memory, compute). The factors for a stage's GPU, engine and
precision class come from, in order:
1. a `bench calibrate` record of that engine on that GPU type and precision class (yours in the
   store before one shipped in data/reference; advisor/sizing/calibration_fit.py);
2. the serving model's fit on the stored runs of that engine on that GPU type
   (`serving_model.calibrate`: the same precision class, else any);
3. none: the serving model's default factors, said so with the `bench calibrate` command.
This is the fit the fleet answer uses; there is no second one.

Its error is the serving model's own leave-one-out over the stored closed-loop levels: each
level's step time (its TPOT p50) is predicted from factors fitted without its run, and the
absolute percentage errors of TPOT p50 and output tok/s are averaged (MAPE), overall and per
partition (engine x TP x precision, on each GPU). The bar: under 10% per partition, the gate the
field's best-known performance predictors set for themselves; a partition with fewer than two
levels cannot be judged.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from advisor.sizing.calibration_fit import (
    RecordFit,
    shipped_records,
    stage_calibration,
    stored_records,
)
from advisor.sizing.configurations import OUTPUT_WORDS, TPOT_WORDS
from advisor.sizing.deployments import Deployment, MeasuredLevel
from advisor.sizing.engine_shape import SHAPE_TOLERANCE
from advisor.sizing.measured import stored_runs
from advisor.sizing.mechanics import mechanisms_of
from advisor.sizing.serving_model import (
    Calibration as Fit,
)
from advisor.sizing.serving_model import (
    Factors,
    RunShape,
    calibrate,
    engine_family,
    observations,
    run_shape,
)
from advisor.workload.profile import StageProfile
from bench.core.calibration import CalibrationRecord
from bench.core.config import GenerateWorkload
from bench.core.schema import RunResult
from bench.core.strict import Strict

if TYPE_CHECKING:
    from advisor.sizing.measured import ReferenceFiles

GATE_MAPE = 0.10


class CalibrationPoint(Strict):
    """One measured closed-loop level and the serving model's leave-one-out prediction of it."""

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
    batch_per_replica: float = Field(description="Sequences decoding per step of one replica.")
    measured_tpot_ms: float
    measured_output_tok_s: float
    measured_tok_s_per_gpu: float
    measured_tok_s_per_user: float
    loo_basis: str = Field("", description="The factors it was predicted with, in words.")
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

    def accuracy_of(self, deployment: Deployment, gpu: str | None = None) -> str:
        """The leave-one-out error of the configuration's partition (on `gpu` when given), or
        of the whole predictor when that partition has no stored level there."""
        name = partition_of(deployment)
        members = [p for p in self.points if p.partition == name and (gpu is None or p.gpu == gpu)]
        where = f" on {gpu}" if gpu else ""
        if members:
            tpot = _mape([p.tpot_error or 0.0 for p in members])
            throughput = _mape([p.throughput_error or 0.0 for p in members])
            return (
                f"leave-one-out error of {name}{where}: {TPOT_WORDS} {tpot:.1%}, "
                f"{OUTPUT_WORDS} {throughput:.1%} over {len(members)} stored level(s)"
            )
        if self.tpot_mape is None or self.throughput_mape is None:
            return "no stored level to measure the estimate's error against"
        return (
            f"{name} has no stored level{where}, so its error there is not measured; over all "
            f"{len(self.points)} stored levels the leave-one-out error is {TPOT_WORDS} "
            f"{self.tpot_mape:.1%}, {OUTPUT_WORDS} {self.throughput_mape:.1%}"
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


@dataclass
class StepCalibration:
    """The factors of the one calibration, looked up per stage and deployment (remembered:
    the search asks for every candidate configuration)."""

    shapes: Sequence[RunShape] = ()
    yours: Sequence[CalibrationRecord] = ()
    shipped: Sequence[CalibrationRecord] = ()
    _memo: dict[tuple, tuple[Factors, str]] = field(default_factory=dict)

    def factors(self, stage: StageProfile, deployment: Deployment) -> tuple[Factors, str]:
        """(factors, which calibration they come from, in words)."""
        gpu = stage.gpu.type or ""
        key = (gpu, engine_family(deployment.framework), deployment.precision_key)
        if key not in self._memo:
            found = stage_calibration(stage, deployment, self.yours, self.shipped)
            if isinstance(found, RecordFit):
                self._memo[key] = (found.calibration.factors, found.basis.words)
            else:
                fit: Fit = calibrate(key[1], gpu, key[2], self.shapes)
                words = fit.basis if fit.calibrated else found.words
                self._memo[key] = (fit.factors, words)
        return self._memo[key]

    def lookup(self, stage: StageProfile):
        """The search's `StepLookup` for one stage."""
        return lambda deployment: self.factors(stage, deployment)


def _shapes(
    runs: Iterable[tuple[RunResult, str | None]],
) -> list[tuple[RunShape, str | None]]:
    out = []
    for run, reference in runs:
        # a run of a mechanic (a shared prefix, a MoE model, long context) checks that mechanic
        # (advisor/sizing/mechanism_validation.py); it is no level of plain traffic to fit on or
        # to quote as this shape's measurement
        item = run_shape(run) if not mechanisms_of(run) else None
        if item is not None:
            out.append((item, reference))
    return out


def points_from_shapes(shapes: Sequence[tuple[RunShape, str | None]]) -> list[CalibrationPoint]:
    """Every closed-loop level of the runs the serving model covers, its step time predicted
    from the factors fitted without its own run (the serving model's leave-one-out)."""
    every = [item for item, _ in shapes]
    points: list[CalibrationPoint] = []
    for item, reference in shapes:
        run = item.run
        config = run.config
        assert isinstance(config.workload, GenerateWorkload)  # run_shape covers only these
        others = [s for s in every if s.run.run_id != run.run_id]
        fit = calibrate(item.family, item.gpu, item.precision_class, others)
        deployment = Deployment(
            framework=config.backend, parallelism=config.parallelism, precision=config.precision
        )
        phases = {phase.name: phase for phase in run.phases}
        for obs in observations(item):
            summary = phases[obs.phase].summary
            if obs.over != "concurrency" or summary is None:
                continue
            if summary.output_throughput_tok_s <= 0:
                continue
            tpot = item.shape.step_ms(fit.factors, obs.decode, obs.prefill, obs.context, obs.decode)
            throughput = item.replicas * obs.decode * 1e3 / tpot
            measured_tpot = obs.measured_step_ms
            measured_tok_s = summary.output_throughput_tok_s
            points.append(
                CalibrationPoint(
                    run_id=run.run_id,
                    phase=obs.phase,
                    reference=reference,
                    model=config.model,
                    gpu=item.gpu,
                    deployment=deployment,
                    partition=partition_of(deployment),
                    prompt_tokens=config.workload.prompt_tokens.mean,
                    output_tokens=config.workload.output_tokens.mean,
                    concurrency=int(obs.level),
                    batch_per_replica=obs.decode,
                    measured_tpot_ms=measured_tpot,
                    measured_output_tok_s=measured_tok_s,
                    measured_tok_s_per_gpu=measured_tok_s / deployment.gpus,
                    measured_tok_s_per_user=1e3 / measured_tpot,
                    loo_basis=fit.basis,
                    predicted_tpot_ms=tpot,
                    predicted_output_tok_s=throughput,
                    tpot_error=(tpot - measured_tpot) / measured_tpot,
                    throughput_error=(throughput - measured_tok_s) / measured_tok_s,
                )
            )
    return points


def _mape(errors: Sequence[float]) -> float:
    return statistics.mean(abs(e) for e in errors)


def accuracy(points: Sequence[CalibrationPoint]) -> Calibration:
    """MAPE of the leave-one-out predictions, overall and per partition, and the verdict."""
    checked = list(points)
    calibration = Calibration(points=checked)
    if not checked:
        calibration.verdict = (
            "no stored generate run the serving model covers: its factors are the defaults "
            "unless a `bench calibrate` record exists, and the error is unknown; every figure "
            "of the configuration search is an estimate"
        )
        return calibration
    calibration.tpot_mape = _mape([p.tpot_error or 0.0 for p in checked])
    calibration.throughput_mape = _mape([p.throughput_error or 0.0 for p in checked])
    # per GPU too: an engine's efficiency on one GPU says nothing of its error on another
    by_partition: dict[str, list[CalibrationPoint]] = {}
    for point in checked:
        by_partition.setdefault(f"{point.partition} on {point.gpu}", []).append(point)
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
    runs: Iterable[RunResult],
    reference_runs: dict[str, list[RunResult]],
    yours: Sequence[CalibrationRecord] = (),
    shipped: Sequence[CalibrationRecord] = (),
) -> tuple[Calibration, StepCalibration]:
    """The one calibration on the user's stored runs, the shipped reference runs and the
    `bench calibrate` records: (its leave-one-out accuracy, its factor lookup)."""
    pairs: list[tuple[RunResult, str | None]] = [(run, None) for run in runs]
    pairs += [(run, name) for name, file_runs in reference_runs.items() for run in file_runs]
    shapes = _shapes(pairs)
    lookup = StepCalibration(shapes=[item for item, _ in shapes], yours=yours, shipped=shipped)
    return accuracy(points_from_shapes(shapes)), lookup


def evidence_calibration(
    store: object | None,
    reference: ReferenceFiles,
    reference_dir: str | Path | None = None,
    runs: Sequence[RunResult] | None = None,
) -> tuple[Calibration, StepCalibration]:
    """The one calibration on the evidence the advisor reads (the store's runs and `bench
    calibrate` records, the shipped runs and records): its accuracy and its factor lookup. The
    lookup remembers each fit, so a caller that keeps it for many answers fits each once.
    `runs`: the store's runs (and any unsaved ones) where the caller has read them already."""
    return calibration_from(
        stored_runs(store) if runs is None else runs,
        reference.runs,
        yours=stored_records(store),
        shipped=shipped_records(Path(reference_dir) if reference_dir is not None else None),
    )


__all__ = [
    "GATE_MAPE",
    "Calibration",
    "CalibrationPoint",
    "PartitionError",
    "StepCalibration",
    "accuracy",
    "calibration_from",
    "evidence_calibration",
    "gate_verdict",
    "partition_of",
    "points_from_shapes",
    "same_configuration",
]
