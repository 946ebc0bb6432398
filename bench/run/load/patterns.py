"""What shape of load: each pattern is a generator of phases that reads each phase's summary.

`plan()` yields a `PhaseSpec`, the runner runs it and sends back its `MetricsSummary`, and the
generator's return value is the typed pattern report (bench/core/pattern_reports.py: knee and
capacity, soak or pulse parameters). Time-series analysis of soak and pulse runs happens afterwards
(bench/run/load/analysis.py).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from bench.core.config import (
    CAPACITY_LADDER,
    CAPACITY_MIN_GAIN,
    CAPACITY_STAGE_S,
    SLO,
    CapacityLoad,
    ConcurrencyLoad,
    LoadCommon,
    PulseLoad,
    RateLoad,
    ReplayLoad,
    SteadyLoad,
    StepLoad,
    ValidityRules,
)
from bench.core.metric_catalog import LADDER_LATENCIES, REQUEST_SLO_BOUNDS
from bench.core.pattern_reports import (
    ConcurrencyReport,
    Ladder,
    LadderStage,
    PatternReportBase,
    PulseReport,
    RateReport,
    SteadyReport,
    StepReport,
)
from bench.core.schema import MetricsSummary
from bench.run.load.capacity import capacity_search
from bench.run.load.driver import PhaseSpec
from bench.run.load.replay import Replay, plan_replay, replay_validity_reasons

PhasePlan = Generator[PhaseSpec, MetricsSummary, PatternReportBase]
LadderPlan = Generator[PhaseSpec, MetricsSummary, Ladder]
Load = TypeVar("Load", bound=LoadCommon)


@dataclass(frozen=True)
class PlanInputs:
    """What a phase plan reads besides its pattern's config."""

    slo: SLO
    rules: ValidityRules
    vocab_size: int | None = None
    """The model's vocabulary (replay builds its prompts from token IDs); None = not known."""
    output_tokens: float | None = None
    """The workload's mean output length (the capacity search settles its probes by the E2E
    the SLO allows for it); None = not a generation."""


Planner = Callable[[Any, PlanInputs], PhasePlan]
ValidityRule = Callable[[Any, PatternReportBase | None], list[str]]

__all__ = [
    "CAPACITY_LADDER",
    "CAPACITY_MIN_GAIN",
    "CAPACITY_STAGE_S",
    "PLANNERS",
    "VALIDITY_RULES",
    "PlanInputs",
    "ladder",
    "plan",
    "planner",
    "slo_breaches",
    "validity_reasons",
]

PLANNERS: dict[type[LoadCommon], Planner] = {}
"""Each pattern config class's phase plan, registered with `@planner(ConfigClass)`."""


VALIDITY_RULES: dict[type[LoadCommon], ValidityRule] = {
    ReplayLoad: replay_validity_reasons,
}
"""A pattern's own rule for an INVALID run, beyond the run-wide ones (bench.core.metrics)."""


def planner(
    load_type: type[Load],
) -> Callable[[Callable[[Load, PlanInputs], PhasePlan]], Planner]:
    """Register the phase plan of one load-pattern config class."""

    def register(function: Callable[[Load, PlanInputs], PhasePlan]) -> Planner:
        PLANNERS[load_type] = function
        return function

    return register


def slo_breaches(summary: MetricsSummary, slo: SLO, rules: ValidityRules) -> list[str]:
    """Why a stage breaks the latency SLO or error budget (empty list = it does not).

    Rule: the stage's TTFT, TPOT and E2E at the SLO's percentile (`slo.percentile`, p99 by
    default) are each compared with the SLO set for that metric (above it breaks it);
    error_rate > max_error_rate breaks the budget; a stage with no successful request breaks
    both.
    """
    reasons: list[str] = []
    if summary.successful == 0:
        return ["no successful requests"]
    percentile = slo.percentile
    for bound in REQUEST_SLO_BOUNDS:
        limit = getattr(slo, bound.field)
        measured = bound.metric_at(percentile).read(summary)
        if limit is not None and measured is not None and bound.broken(measured, limit):
            reasons.append(f"{percentile} {bound.spec.family} {measured:.1f} ms > SLO {limit:g} ms")
    if summary.error_rate > rules.max_error_rate:
        reasons.append(f"error rate {summary.error_rate:.2%} > budget {rules.max_error_rate:.2%}")
    return reasons


def _stage_row(
    concurrency: int, summary: MetricsSummary, gain: float | None, reasons: list[str]
) -> LadderStage:
    return LadderStage(
        concurrency=concurrency,
        requests=summary.requests,
        request_throughput_rps=summary.request_throughput_rps,
        output_throughput_tok_s=summary.output_throughput_tok_s,
        error_rate=summary.error_rate,
        **{metric.ladder_field: metric.read(summary) for metric in LADDER_LATENCIES},
        gain=gain,
        knee_reasons=reasons,
    )


def ladder(
    concurrencies: list[int] | tuple[int, ...],
    stage_duration_s: float,
    min_gain: float,
    slo: SLO,
    rules: ValidityRules,
    stop_at_knee: bool = True,
    name_prefix: str = "step",
) -> LadderPlan:
    """Closed-loop stages at rising concurrency; returns the knee/capacity report.

    Throughput here is output-token throughput (output_throughput_tok_s: tokens for generate,
    samples for forward), the work actually done; gain = (this - previous) / previous.
    Knee = the first stage that breaks the SLO or error budget (`slo_breaches`), or, from the
    second stage on, whose gain is below `min_gain`. Capacity = the last stage before the knee
    (the knee stage added nothing or broke a limit); a knee at the first stage leaves capacity
    None. No knee: capacity = the last stage and `capacity_is_lower_bound` is True.
    """
    stages: list[LadderStage] = []
    knee_index: int | None = None
    for index, concurrency in enumerate(concurrencies):
        summary = yield PhaseSpec(
            name=f"{name_prefix}-c{concurrency}",
            strategy="concurrency",
            target=concurrency,
            duration_s=stage_duration_s,
        )
        reasons = slo_breaches(summary, slo, rules)
        gain: float | None = None
        if stages:
            previous = stages[-1].output_throughput_tok_s
            current = summary.output_throughput_tok_s
            gain = (current - previous) / previous if previous > 0 else None
            if gain is not None and gain < min_gain:
                reasons.append(f"throughput gain {gain:.1%} < {min_gain:.0%}")
        stages.append(_stage_row(concurrency, summary, gain, reasons))
        if reasons and knee_index is None:
            knee_index = index
            if stop_at_knee:
                break
    if knee_index is None:
        capacity_index: int | None = len(stages) - 1 if stages else None
    else:
        capacity_index = knee_index - 1 if knee_index > 0 else None
    capacity = stages[capacity_index] if capacity_index is not None else None
    knee = stages[knee_index] if knee_index is not None else None
    return Ladder(
        stages=stages,
        knee_stage=knee_index,
        knee_concurrency=knee.concurrency if knee else None,
        knee_reasons=list(knee.knee_reasons) if knee else [],
        capacity_concurrency=capacity.concurrency if capacity else None,
        capacity_rps=capacity.request_throughput_rps if capacity else None,
        capacity_output_tok_s=capacity.output_throughput_tok_s if capacity else None,
        capacity_is_lower_bound=knee_index is None,
    )


def _find_capacity(
    given_rps: float | None, slo: SLO, rules: ValidityRules
) -> Generator[PhaseSpec, MetricsSummary, tuple[float | None, dict[str, Any]]]:
    """Capacity (req/s) given or measured with the short ladder; plus how it was obtained (the
    `HeldLoadReport` fields)."""
    if given_rps is not None:
        return given_rps, {"capacity_rps": given_rps, "capacity_source": "config"}
    report = yield from ladder(
        CAPACITY_LADDER, CAPACITY_STAGE_S, CAPACITY_MIN_GAIN, slo, rules, name_prefix="capacity"
    )
    capacity = report.capacity_rps
    note = None
    if capacity is None and report.stages:
        # The first stage already broke a limit: hold a fraction of what concurrency 1 did.
        capacity = report.stages[0].request_throughput_rps or None
        note = "the first capacity stage already broke the SLO or error budget"
    info: dict[str, Any] = {
        "capacity_rps": capacity,
        "capacity_source": "capacity ladder",
        "capacity_ladder": report,
        "capacity_note": note,
    }
    return capacity, info


def plan(
    load: LoadCommon,
    slo: SLO,
    rules: ValidityRules,
    vocab_size: int | None = None,
    output_tokens: float | None = None,
) -> PhasePlan:
    """The phases of a load pattern; send each phase's summary back, get the report at the end.

    concurrency/rate: one phase. step: `ladder()` over start, start+step, ... <= max.
    steady: open-loop Poisson at fraction x capacity for duration_s (one phase "steady").
    pulse: "pulse-baseline" at baseline_fraction x capacity, "pulse-burst" at burst_factor x
    capacity, "pulse-recovery" at the baseline rate; baseline and burst do not drain, so the
    burst's queue carries into recovery. Steady/pulse without capacity_rps first run the
    `CAPACITY_LADDER` (stages of CAPACITY_STAGE_S) to measure it. capacity: the SLO search of
    bench/run/load/capacity.py. replay: one phase on the trace's schedule
    (bench/run/load/replay.py), its prompts from the model's `vocab_size`.
    """
    found = PLANNERS.get(type(load))
    if found is None:
        known = ", ".join(sorted(load_type.__name__ for load_type in PLANNERS))
        raise ValueError(f"no phase plan for load pattern {type(load).__name__}; known: {known}")
    return found(load, PlanInputs(slo, rules, vocab_size, output_tokens))


def validity_reasons(load: LoadCommon, report: PatternReportBase | None) -> list[str]:
    """Why a completed run of `load` is INVALID by its pattern's own rule, or because the load
    generator fell behind its schedule (every pattern: `HarnessOverhead.invalid_reason`); empty:
    valid."""
    rule = VALIDITY_RULES.get(type(load))
    reasons = rule(load, report) if rule is not None else []
    harness = report.harness if report is not None else None
    harness_reason = harness.invalid_reason() if harness is not None else None
    return reasons + ([harness_reason] if harness_reason else [])


@planner(ConcurrencyLoad)
def _concurrency(load: ConcurrencyLoad, inputs: PlanInputs) -> PhasePlan:
    yield PhaseSpec(
        name="concurrency",
        strategy="concurrency",
        target=load.concurrency,
        duration_s=load.duration_s,
        max_requests=load.max_requests,
        min_requests=load.min_requests,
    )
    return ConcurrencyReport(concurrency=load.concurrency)


@planner(RateLoad)
def _rate(load: RateLoad, inputs: PlanInputs) -> PhasePlan:
    yield PhaseSpec(
        name="rate",
        strategy="rate",
        target=load.rate_rps,
        duration_s=load.duration_s,
        max_requests=load.max_requests,
        arrival=load.arrival,
        seed=load.seed,
        max_concurrency=load.max_concurrency,
    )
    return RateReport(rate_rps=load.rate_rps, arrival=load.arrival)


@planner(StepLoad)
def _step(load: StepLoad, inputs: PlanInputs) -> PhasePlan:
    found = yield from ladder(
        load.concurrencies(),
        load.stage_duration_s,
        load.min_gain,
        inputs.slo,
        inputs.rules,
        stop_at_knee=load.stop_at_knee,
    )
    return StepReport(**dict(found))


@planner(SteadyLoad)
def _steady(load: SteadyLoad, inputs: PlanInputs) -> PhasePlan:
    capacity, info = yield from _find_capacity(load.capacity_rps, inputs.slo, inputs.rules)
    steady = SteadyReport(
        fraction=load.fraction, duration_s=load.duration_s, window_s=load.window_s, **info
    )
    if not capacity:
        steady.error = "capacity could not be measured: no steady phase was run"
        return steady
    steady.rate_rps = load.fraction * capacity
    yield PhaseSpec(
        name="steady",
        strategy="rate",
        target=steady.rate_rps,
        duration_s=load.duration_s,
    )
    return steady


@planner(PulseLoad)
def _pulse(load: PulseLoad, inputs: PlanInputs) -> PhasePlan:
    capacity, info = yield from _find_capacity(load.capacity_rps, inputs.slo, inputs.rules)
    pulse = PulseReport(window_s=load.window_s, **info)
    if not capacity:
        pulse.error = "capacity could not be measured: no pulse was run"
        return pulse
    baseline_rps = load.baseline_fraction * capacity
    burst_rps = load.burst_factor * capacity
    pulse.baseline_rps, pulse.burst_rps = baseline_rps, burst_rps
    yield PhaseSpec("pulse-baseline", "rate", baseline_rps, load.baseline_s, seed=1, drain=False)
    yield PhaseSpec("pulse-burst", "rate", burst_rps, load.burst_s, seed=2, drain=False)
    yield PhaseSpec("pulse-recovery", "rate", baseline_rps, load.recovery_s, seed=3)
    return pulse


@planner(CapacityLoad)
def _capacity(load: CapacityLoad, inputs: PlanInputs) -> PhasePlan:
    return (yield from capacity_search(load, inputs.slo, inputs.rules, inputs.output_tokens))


@planner(ReplayLoad)
def _replay(load: ReplayLoad, inputs: PlanInputs) -> PhasePlan:
    if inputs.vocab_size is None:
        raise ValueError("a replay plan needs the model's vocab_size")
    return (yield from plan_replay(Replay(load), inputs.vocab_size))
