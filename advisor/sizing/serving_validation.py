"""The serving model's check against measurement: predicted vs measured capacity and latency for
every stored run the model covers (`advisor.sizing.serving_model.run_shape`), leave-one-out.

For each run: the factors are fitted on every other run (`calibrate` without it), then
- each steady level (a closed-loop concurrency, an open-loop rate; pulse bursts and recoveries
  left out) is simulated with the run's own engine limits, lengths and arrival process, the
  level's request count after as many warm-up requests (sustained load), and TTFT p50/p99,
  TPOT p50/p99 and E2E p50 are set beside the measured ones;
- a capacity search (pattern `capacity` over rate) is predicted as `predict_stage_capacity`
  does (median of the request streams, the interval from the step errors of the other runs)
  and set beside the search's `max_rate_rps`.
The same rows uncalibrated (default factors) show what calibration buys. Errors are
(predicted - measured) / measured; a table's headline is the median |error|.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from pydantic import Field

from advisor.sizing.serving_model import (
    CONTINUOUS_BATCHING,
    Factors,
    RunShape,
    Workload,
    calibrate,
    capacity_errors,
    engine_family,
    observations,
    run_capacity,
    run_shape,
    simulate,
    steady_phases,
    step_errors,
    uncalibrated_step_errors,
)
from bench.core.config import CapacityLoad, GenerateWorkload
from bench.core.pattern_reports import CapacityReport
from bench.core.schema import RunResult
from bench.core.strict import Strict

LATENCY_FIGURES = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50")


class LevelRow(Strict):
    """One measured level beside its leave-one-out prediction."""

    run_id: str
    reference: str | None = None
    framework: str
    precision_class: str
    shape: str = Field(description="prompt/output tokens.")
    phase: str
    over: str
    level: float
    measured: dict[str, float]
    predicted: dict[str, float]
    uncalibrated: dict[str, float]

    def error(self, figure: str, calibrated: bool = True) -> float | None:
        predicted = (self.predicted if calibrated else self.uncalibrated).get(figure)
        measured = self.measured.get(figure)
        if predicted is None or not measured:
            return None
        return (predicted - measured) / measured


class CapacityRow(Strict):
    """One measured capacity search beside its leave-one-out prediction."""

    run_id: str
    reference: str | None = None
    precision_class: str
    slo: str
    measured_rps: float
    first_infeasible_rps: float | None
    smoothed_boundary_rps: float | None
    settled: bool = Field(
        False,
        description="The search's probes held their level before being judged "
        "(`CapacityLoad.probes_settled`): a sustained rate.",
    )
    predicted_rps: float
    low_rps: float
    high_rps: float
    covered: bool
    error: float
    uncalibrated_rps: float
    uncalibrated_error: float
    calibration_runs: int

    @property
    def above_bracket(self) -> bool:
        """The whole interval lies above the rate the search saw fail."""
        upper = self.first_infeasible_rps or self.measured_rps
        return self.low_rps > upper


class Validation(Strict):
    levels: list[LevelRow] = Field(default_factory=list)
    capacities: list[CapacityRow] = Field(default_factory=list)
    not_covered: list[str] = Field(
        default_factory=list, description="Runs the model does not predict, and why."
    )

    def median_error(self, figure: str, calibrated: bool = True) -> float | None:
        errors = [row.error(figure, calibrated) for row in self.levels]
        values = [abs(e) for e in errors if e is not None]
        return statistics.median(values) if values else None

    def capacity_median_error(self, calibrated: bool = True) -> float | None:
        values = [abs(r.error if calibrated else r.uncalibrated_error) for r in self.capacities]
        return statistics.median(values) if values else None

    def coverage(self) -> float | None:
        if not self.capacities:
            return None
        return sum(r.covered for r in self.capacities) / len(self.capacities)


def search_slo_words(run: RunResult) -> str:
    """A capacity search's SLO as the tables print it: `TTFT p99 <= 300 ms, TPOT p99 <= 50 ms`."""
    slo, percentile = run.config.slo, run.config.load.percentile
    return ", ".join(
        f"{name} {percentile} <= {value:g} ms"
        for name, value in (("TTFT", slo.ttft_ms), ("TPOT", slo.tpot_ms), ("E2E", slo.e2e_ms))
        if value is not None
    )


def latency_figures(summary) -> dict[str, float]:  # MetricsSummary or LatencyAtLoad
    """TTFT, TPOT and E2E percentiles of a measured or simulated level, by LATENCY_FIGURES name."""
    out: dict[str, float] = {}
    for name, attribute in (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("e2e", "e2e_ms")):
        values = getattr(summary, attribute)
        if values is not None:
            out[f"{name}_p50"] = values.p50
            out[f"{name}_p99"] = values.p99
    return {k: v for k, v in out.items() if k in LATENCY_FIGURES}


def simulated_level(item: RunShape, factors: Factors, phase, over: str, level: float):
    """A measured level simulated with `factors`: its request count after as many warm-up
    requests at the same rate (open loop), or from its start (a closed-loop ladder level)."""
    load = item.run.config.load
    requests = phase.summary.requests
    arrival = getattr(load, "arrival", "poisson")
    warmup = requests if over == "rate" else 0  # a ladder level is measured from its start
    workload = Workload(item.prompt, item.output, requests, arrival, 0, warmup)
    if over == "rate":
        return simulate(item.shape, factors, workload, item.replicas, rate_rps=level)
    return simulate(item.shape, factors, workload, item.replicas, concurrency=int(level))


def validate(runs: Iterable[tuple[RunResult, str | None]]) -> Validation:
    """The leave-one-out table over (run, reference file or None) pairs."""
    pairs = list(runs)
    shapes: list[tuple[RunShape, str | None]] = []
    validation = Validation()
    for run, reference in pairs:
        item = run_shape(run)
        if item is None:
            if isinstance(run.config.workload, GenerateWorkload):
                validation.not_covered.append(
                    f"{run.run_id} ({run.config.backend}): "
                    + (
                        "its adapter forms static batches, not modelled"
                        if engine_family(run.config.backend) not in CONTINUOUS_BATCHING
                        else "not VALID, prompts spread too wide, or GPU or model sizes unknown"
                    )
                )
            continue
        if not observations(item):
            validation.not_covered.append(f"{run.run_id}: no steady level with a TPOT")
            continue
        shapes.append((item, reference))
    every = [item for item, _ in shapes]
    for item, reference in shapes:
        others = [s for s in every if s.run.run_id != item.run.run_id]
        calibration = calibrate(item.family, item.gpu, item.precision_class, others)
        factors = calibration.factors
        shape_words = f"{item.prompt.mean}/{item.output.mean}"
        for phase, over, level in steady_phases(item.run):
            predicted = simulated_level(item, factors, phase, over, level)
            uncalibrated = simulated_level(item, Factors(), phase, over, level)
            validation.levels.append(
                LevelRow(
                    run_id=item.run.run_id,
                    reference=reference,
                    framework=item.run.config.backend,
                    precision_class=item.precision_class,
                    shape=shape_words,
                    phase=phase.name,
                    over=over,
                    level=level,
                    measured=latency_figures(phase.summary),
                    predicted=latency_figures(predicted),
                    uncalibrated=latency_figures(uncalibrated),
                )
            )
        report = item.run.pattern_report
        if isinstance(report, CapacityReport) and report.over == "rate" and report.max_rate_rps:
            errors = step_errors(others, item.family, item.gpu, item.precision_class)
            # each other search's error from a fit without it and without this one
            residuals = capacity_errors(others, calibrated=True)
            rate, low, high = run_capacity(item, factors, errors, residuals)
            plain, _, _ = run_capacity(item, Factors(), ())
            measured = report.max_rate_rps
            load = item.run.config.load
            validation.capacities.append(
                CapacityRow(
                    run_id=item.run.run_id,
                    reference=reference,
                    precision_class=item.precision_class,
                    slo=search_slo_words(item.run),
                    measured_rps=measured,
                    first_infeasible_rps=report.first_infeasible_rps,
                    smoothed_boundary_rps=report.smoothed_boundary_level,
                    settled=isinstance(load, CapacityLoad) and load.probes_settled,
                    predicted_rps=rate,
                    low_rps=low,
                    high_rps=high,
                    covered=low <= measured <= high,
                    error=(rate - measured) / measured,
                    uncalibrated_rps=plain,
                    uncalibrated_error=(plain - measured) / measured,
                    calibration_runs=len(calibration.runs),
                )
            )
    return validation


__all__ = [
    "LATENCY_FIGURES",
    "CapacityRow",
    "LevelRow",
    "Validation",
    "latency_figures",
    "search_slo_words",
    "simulated_level",
    "uncalibrated_step_errors",
    "validate",
]
