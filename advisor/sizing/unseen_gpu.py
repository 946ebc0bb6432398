"""The serving model on a GPU it was never fitted on: a held-out capacity search measured on that
GPU, predicted three ways and set beside the measurement.

- **uncalibrated**: the default efficiencies (80% of the datasheet bandwidth, 60% of the tensor
  peak), the interval from the default factors' errors on the runs of the other GPUs;
- **calibrated on another GPU only**: the factors fitted on the shipped runs of the same engine
  and precision class on the other GPU (the H200's), carried over: the physics (bytes, FLOPs,
  bandwidth, peak) is the new GPU's datasheet, the efficiencies are the other GPU's;
- **calibrated on this GPU**: the `bench calibrate` record measured on it, fitted as every
  prediction fits one (`advisor.sizing.calibration_fit.fit_record`).

None of the three has seen the held-out search: the record's mixes leave its prompt/output shape
out, and runs on the held-out GPU are removed from the other two bases. Each basis gives the
search's capacity under its own SLO and rule (`run_capacity`, as docs/capacity-model.md's
leave-one-out rows), whether the interval holds the measured rate, and the latency error at
each probe the measurement judged feasible (a failed probe ends early, so its percentiles rest
on the few requests before the stop and say nothing about the model).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.sizing.calibration_fit import fit_record
from advisor.sizing.serving_calibration import Factors
from advisor.sizing.serving_model import (
    RunShape,
    Workload,
    calibrate,
    capacity_residuals,
    run_capacity,
    run_shape,
    simulate,
    steady_phases,
    step_errors,
    uncalibrated_step_errors,
)
from advisor.sizing.serving_validation import (
    LATENCY_FIGURES,
    latency_figures,
    search_slo_words,
    simulated_level,
)
from bench.core.calibration import CalibrationRecord
from bench.core.pattern_reports import CapacityReport
from bench.core.schema import RunResult
from bench.core.strict import Strict

BasisKind = Literal["uncalibrated", "other GPU only", "this GPU"]
SAME_PROMPT = 0.02  # a `vllm bench serve` level belongs to a search within 2% of its prompt length


class VllmBenchServeResult(BaseModel):
    """The fields read from `vllm bench serve --save-result` JSON (vLLM writes many more)."""

    model_config = ConfigDict(extra="ignore")

    request_rate: float
    completed: int
    total_input_tokens: int
    request_throughput: float
    request_goodput: float
    p50_ttft_ms: float
    p99_ttft_ms: float
    p50_tpot_ms: float
    p99_tpot_ms: float
    p50_e2el_ms: float


class UnseenBasis(Strict):
    """One way of predicting the held-out GPU: its factors, interval errors and source."""

    kind: BasisKind
    words: str = Field(description="Where the factors come from, in words.")
    factors: Factors
    step_errors: list[float] = Field(description="Log step errors behind the interval.")
    residuals: list[float] = Field(
        description="Capacity errors on the other GPU's searches (each predicted without "
        "itself) that widen the interval (serving_calibration.widen_to_residuals)."
    )


class UnseenCapacity(Strict):
    """The held-out search's capacity as one basis predicts it."""

    kind: BasisKind
    predicted_rps: float
    low_rps: float
    high_rps: float
    covered: bool = Field(description="The interval holds the measured max_rate_rps.")
    error: float = Field(description="(predicted - measured) / measured.")


class UnseenLevel(Strict):
    """One feasible probe of the held-out search: measured and each basis' prediction."""

    phase: str
    rate_rps: float
    measured: dict[str, float]
    predicted: dict[BasisKind, dict[str, float]]


class UnseenFigureError(Strict):
    """A latency figure's error over the feasible probes, for one basis."""

    kind: BasisKind
    figure: str
    median_abs_error: float
    worst_abs_error: float
    levels: int


class ServeLevel(Strict):
    """A `vllm bench serve` level measured on the held-out GPU: Poisson arrivals at a rate,
    a number of requests from an empty engine, vLLM's own percentiles and goodput."""

    source: str = Field(description="The data file and member it was read from.")
    rate_rps: float
    requests: int
    prompt_tokens: float = Field(description="Mean prompt tokens of its requests.")
    throughput_rps: float
    goodput_rps: float = Field(description="Requests/s within the run's --goodput limits.")
    measured: dict[str, float]


class UnseenServeLevel(Strict):
    """A `vllm bench serve` level beside each basis' simulation of it."""

    level: ServeLevel
    predicted: dict[BasisKind, dict[str, float]]


class UnseenGpuCheck(Strict):
    """The three predictions of one held-out search on a GPU the model was not fitted on."""

    gpu: str
    run_id: str
    reference: str | None = None
    shape: str = Field(description="prompt/output tokens of the held-out search.")
    slo: str
    measured_rps: float
    search_invalid: list[str] = Field(
        default_factory=list,
        description="Why the search is INVALID (did not converge, ...); empty when VALID: its "
        "max_rate_rps is then the highest rate it saw pass, not a confirmed edge.",
    )
    first_infeasible_rps: float | None
    smoothed_boundary_rps: float | None
    calibration_id: str = Field(description="The `bench calibrate` record of this GPU.")
    calibration_levels: int
    other_gpu: str | None = Field(description="The GPU whose runs give the second basis.")
    bases: list[UnseenBasis]
    capacities: list[UnseenCapacity]
    levels: list[UnseenLevel]
    errors: list[UnseenFigureError]
    serve_levels: list[UnseenServeLevel] = Field(default_factory=list)


def serve_level(result: VllmBenchServeResult, source: str) -> ServeLevel:
    """A `vllm bench serve --save-result` file's figures under LATENCY_FIGURES names."""
    return ServeLevel(
        source=source,
        rate_rps=result.request_rate,
        requests=result.completed,
        prompt_tokens=result.total_input_tokens / max(result.completed, 1),
        throughput_rps=result.request_throughput,
        goodput_rps=result.request_goodput,
        measured={
            "ttft_p50": result.p50_ttft_ms,
            "ttft_p99": result.p99_ttft_ms,
            "tpot_p50": result.p50_tpot_ms,
            "tpot_p99": result.p99_tpot_ms,
            "e2e_p50": result.p50_e2el_ms,
        },
    )


def other_gpu_of(target: RunShape, shapes: Sequence[RunShape]) -> str | None:
    """The GPU with the most runs of the held-out's engine family and precision class."""
    counts: dict[str, int] = {}
    for item in shapes:
        if item.family == target.family and item.precision_class == target.precision_class:
            counts[item.gpu] = counts.get(item.gpu, 0) + 1
    return max(counts, key=lambda gpu: counts[gpu]) if counts else None


def prediction_bases(
    target: RunShape, record: CalibrationRecord, others: Sequence[RunShape], other_gpu: str | None
) -> list[UnseenBasis]:
    bases = [
        UnseenBasis(
            kind="uncalibrated",
            words="default efficiencies (80% of the datasheet bandwidth, 60% of the tensor peak)",
            factors=Factors(),
            step_errors=uncalibrated_step_errors(others),
            residuals=list(capacity_residuals(others, calibrated=False)),
        )
    ]
    # cached per set of runs: each held-out check and the long-context check share them
    calibrated_residuals = list(capacity_residuals(others, calibrated=True))
    if other_gpu is not None:
        fitted = calibrate(target.family, other_gpu, target.precision_class, others)
        if fitted.calibrated:
            bases.append(
                UnseenBasis(
                    kind="other GPU only",
                    words=f"{fitted.basis} (on {other_gpu}), carried over",
                    factors=fitted.factors,
                    step_errors=step_errors(
                        others, target.family, other_gpu, target.precision_class
                    ),
                    residuals=calibrated_residuals,
                )
            )
    fit = fit_record(record, "shipped")
    if fit is not None:
        bases.append(
            UnseenBasis(
                kind="this GPU",
                words=fit.basis.words,
                factors=fit.calibration.factors,
                step_errors=fit.step_errors,
                residuals=calibrated_residuals,
            )
        )
    return bases


def _invalid_reasons(run: RunResult) -> list[str]:
    validity = run.validity
    if validity is None or validity.status.value != "INVALID":
        return []
    return list(validity.reasons)


def _feasible_phases(run: RunResult) -> set[str]:
    report = run.pattern_report
    if not isinstance(report, CapacityReport):
        return set()
    return {probe.phase for probe in report.probes if probe.feasible}


def check_unseen_gpu(
    held_out: RunResult,
    record: CalibrationRecord,
    shapes: Sequence[RunShape],
    reference: str | None = None,
    serve: Sequence[ServeLevel] = (),
) -> UnseenGpuCheck | None:
    """The held-out capacity search predicted uncalibrated, from the other GPU's runs and from
    the record; None when the model does not cover the run or it is not a rate search.
    `shapes`: every run the product ships (those on the held-out GPU are left out here);
    `serve`: `vllm bench serve` levels, of which those with the search's prompt length are set
    beside it."""
    # a search that did not converge is still a measurement of the edge (its highest passing
    # rate); it is predicted, and `search_invalid` says why it is INVALID
    target = run_shape(held_out, require_valid=False)
    report = held_out.pattern_report
    if target is None or not isinstance(report, CapacityReport) or report.over != "rate":
        return None
    if not report.max_rate_rps:
        return None
    others = [s for s in shapes if s.gpu != target.gpu and s.run.run_id != held_out.run_id]
    other_gpu = other_gpu_of(target, others)
    bases = prediction_bases(target, record, others, other_gpu)
    measured = report.max_rate_rps
    capacities = []
    for basis in bases:
        rate, low, high = run_capacity(target, basis.factors, basis.step_errors, basis.residuals)
        capacities.append(
            UnseenCapacity(
                kind=basis.kind,
                predicted_rps=rate,
                low_rps=low,
                high_rps=high,
                covered=low <= measured <= high,
                error=(rate - measured) / measured,
            )
        )
    feasible = _feasible_phases(held_out)
    levels = [
        UnseenLevel(
            phase=phase.name,
            rate_rps=level,
            measured=latency_figures(phase.summary),
            predicted={
                basis.kind: latency_figures(
                    simulated_level(target, basis.factors, phase, over, level)
                )
                for basis in bases
            },
        )
        for phase, over, level in steady_phases(held_out)
        if phase.name in feasible
    ]
    return UnseenGpuCheck(
        gpu=target.gpu,
        run_id=held_out.run_id,
        reference=reference,
        shape=f"{target.prompt.mean:g}/{target.output.mean:g}",
        slo=search_slo_words(held_out),
        measured_rps=measured,
        search_invalid=_invalid_reasons(held_out),
        first_infeasible_rps=report.first_infeasible_rps,
        smoothed_boundary_rps=report.smoothed_boundary_level,
        calibration_id=record.calibration_id,
        calibration_levels=len(record.levels),
        other_gpu=other_gpu,
        bases=bases,
        capacities=capacities,
        levels=levels,
        errors=_errors(bases, levels),
        serve_levels=[
            UnseenServeLevel(
                level=level,
                predicted={
                    basis.kind: latency_figures(
                        simulate(
                            target.shape,
                            basis.factors,
                            # from an empty engine, as `vllm bench serve` starts
                            Workload(target.prompt, target.output, level.requests, "poisson", 0, 0),
                            target.replicas,
                            rate_rps=level.rate_rps,
                        )
                    )
                    for basis in bases
                },
            )
            for level in sorted(serve, key=lambda level: level.rate_rps)
            if abs(level.prompt_tokens - target.prompt.mean) <= SAME_PROMPT * target.prompt.mean
        ],
    )


def _errors(bases: Sequence[UnseenBasis], levels: Sequence[UnseenLevel]) -> list[UnseenFigureError]:
    out = []
    for basis in bases:
        for figure in LATENCY_FIGURES:
            errors = [
                abs(level.predicted[basis.kind][figure] - level.measured[figure])
                / level.measured[figure]
                for level in levels
                if figure in level.measured
                and level.measured[figure] > 0
                and figure in level.predicted[basis.kind]
            ]
            if errors:
                out.append(
                    UnseenFigureError(
                        kind=basis.kind,
                        figure=figure,
                        median_abs_error=statistics.median(errors),
                        worst_abs_error=max(errors),
                        levels=len(errors),
                    )
                )
    return out


__all__ = [
    "ServeLevel",
    "UnseenGpuCheck",
    "VllmBenchServeResult",
    "check_unseen_gpu",
    "serve_level",
]


class UnseenSummary(Strict):
    """One basis over every held-out search of the unseen GPU: the capacity errors the
    validation states (median, worst, how many intervals hold the measured rate)."""

    kind: BasisKind
    searches: int
    median_abs_error: float
    worst_abs_error: float
    covered: int


def summarize_unseen(checks: Sequence[UnseenGpuCheck]) -> list[UnseenSummary]:
    """Per basis, in the checks' basis order, over the searches it predicted."""
    kinds: list[BasisKind] = []
    for check in checks:
        kinds += [c.kind for c in check.capacities if c.kind not in kinds]
    out = []
    for kind in kinds:
        rows = [c for check in checks for c in check.capacities if c.kind == kind]
        errors = [abs(c.error) for c in rows]
        out.append(
            UnseenSummary(
                kind=kind,
                searches=len(rows),
                median_abs_error=statistics.median(errors),
                worst_abs_error=max(errors),
                covered=sum(c.covered for c in rows),
            )
        )
    return out
