"""The `capacity` load pattern: the highest rate (or concurrency) at which the SLO still holds.

A level is feasible when, over one probe at that level, every SLO metric set (TTFT, TPOT,
E2E) has its chosen percentile (p50/p90/p99) within its limit, the goodput attainment (share of
the probe's requests meeting every SLO) is at least the target (default 0.99), and no request
failed. The search (after AIPerf's `max-concurrency-under-sla` monotonic planner and vLLM's
`bench sweep serve_workload`, which starts from a serial probe):

1. start: over=rate, a quick closed-loop probe at concurrency 1 gives the serial rate, the
   first level (or `start_rps`); over=concurrency starts at `start_concurrency`;
2. bracket: multiply the level by `growth_factor` until a level fails (or divide it until one
   passes, when the first fails);
3. bisect [last feasible, first infeasible] until (hi - lo) / hi <= `precision` (5%);
4. re-check: probe the last feasible level again with fresh arrivals; if it fails there the
   boundary moved, the level counts as infeasible and bisection resumes below it.

A boundary probe is confirmed by a repeat before it decides (`confirm_boundary`): a failed
probe whose verdict would set the boundary (a failure above a passing level, in bracketing or
bisection, and a failed re-check) is probed again at once with fresh arrivals, and the level is
judged on both probes' requests together (`pooled_verdict`). At 500 requests a probe's p99 rests
on its 5 worst requests, and a Poisson burst near the end of one probe decides it alone: the
shipped H200 bf16 search (data/reference/h200_llama2-7b_capacity_chat_slo) failed 24 req/s on
14 requests, all sent in the last 0.3 s of the probe. A failure that no repeat could turn (the
pair is already over its miss budget, or a request failed) is not repeated.

A rate probe is judged once the engine has settled (`settle_s`): before its judged requests it
sends arrivals at the same rate for the end-to-end time the SLO allows (`SLO.e2e_bound_ms`: a
request that meets the SLO is done by then, so the requests in flight have levelled off at what
that rate holds), served as warm-up and not judged; the judged requests follow without a gap.
A probe started on an empty engine judges its first requests on a half-filled batch, and a rate
the engine cannot hold passes while its queue is still growing: on one H200 (llama-2-7b, bf16,
512/256, TTFT p99 <= 300 ms, TPOT p99 <= 50 ms), 500 requests from empty held at 24 req/s and
1,500 did not (every miss from the 494th request on), while 22 req/s held for 1,500
(data/reference/h200_llama2-7b_capacity_boundary, `vllm bench serve` on `vllm serve`).

A probe ends early (GuideLLM's over-saturation stop, here as a certain bound rather than a
slope test) once more of its planned requests have missed the SLO than the attainment target
allows, or one failed: it can no longer pass, so waiting for the rest only costs time.
Every probe is long enough for its percentile: `min_probe_requests`.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Literal

from bench.core.config import (
    MIN_PROBE_REQUESTS_FLOOR,
    PERCENTILE_LEVELS,
    SERIAL_PROBE_REQUESTS,
    SLO,
    TAIL_SAMPLES,
    CapacityLoad,
    ValidityRules,
    min_probe_requests,
)
from bench.core.metric_catalog import REQUEST_SLO_BOUNDS
from bench.core.metrics import ENDED_EARLY
from bench.core.pattern_reports import (
    CapacityCurvePoint,
    CapacityProbe,
    CapacityReport,
    Constraint,
    PatternReportBase,
)
from bench.core.schema import MetricsSummary, Percentiles, PhaseResult, Validity, ValidityStatus
from bench.run.load.driver import PhaseOutcome, PhaseSpec, PlanInterrupted

SETTLE_SEED_OFFSET = 100_000
"""Settle phases draw their arrivals from seeds apart from the judged probes' (seed + index)."""
SLO_METRICS = tuple(bound.field for bound in REQUEST_SLO_BOUNDS)
"""The per-request SLO limits a probe is judged on (bench.core.metric_catalog: all maximums)."""


def allowed_misses(planned_requests: int, attainment_target: float) -> int:
    """Requests of a probe that may miss the SLO with attainment still >= the target."""
    return math.floor((1 - attainment_target) * planned_requests + 1e-9)


# --------------------------------------------------------------------------- judging a probe


def _attainment(summary: MetricsSummary) -> float | None:
    if summary.requests == 0:
        return None
    meets = round((summary.goodput_rps or 0.0) * summary.duration_s)
    return min(1.0, meets / summary.requests)


def smoothed_boundary(probes: list[CapacityProbe], slo: SLO, percentile: str) -> float | None:
    """The level where the probes' worst SLO ratio (percentile / limit over the metrics set),
    fitted monotone in the level, crosses 1; None without probes on both sides.

    Pool-adjacent-violators (scipy.optimize.isotonic_regression) takes out the noise that makes
    a higher level look better than a lower one; a PCHIP spline through the fit (ties broken
    by a 1e-9 ramp so it is strictly increasing) is solved for ratio - 1 = 0.
    """
    by_level: dict[float, list[float]] = {}
    for probe in probes:
        if probe.feasible is None:
            continue
        ratios = []
        for metric in SLO_METRICS:
            limit = getattr(slo, metric)
            measured: Percentiles | None = getattr(probe, metric)
            if limit is not None and measured is not None:
                ratios.append(getattr(measured, percentile) / limit)
        if ratios:
            by_level.setdefault(probe.level, []).append(max(ratios) - 1)
    if len(by_level) < 2:
        return None
    import numpy as np
    from scipy.interpolate import PchipInterpolator
    from scipy.optimize import isotonic_regression

    levels = np.array(sorted(by_level), dtype=np.float64)
    margins = np.array([np.mean(by_level[level]) for level in levels], dtype=np.float64)
    fitted = isotonic_regression(margins, increasing=True).x
    if not (fitted[0] < 0 < fitted[-1]):
        return None
    span = float(fitted[-1] - fitted[0])
    strict = fitted + np.arange(fitted.size) * 1e-9 * span
    roots = PchipInterpolator(levels, strict).solve(0.0, extrapolate=False)
    inside = [float(root) for root in np.atleast_1d(roots) if levels[0] <= root <= levels[-1]]
    return inside[0] if inside else None


def judge_probe(
    summary: MetricsSummary, slo: SLO, percentile: str, attainment_target: float
) -> tuple[bool, list[str], Constraint | None]:
    """(feasible, reasons, binding constraint) of one probe's summary (computed with `slo`).

    Binding = errors if a request failed, else the SLO metric whose percentile is furthest over
    its limit (percentile / limit), else attainment (every percentile holds but too many
    requests missed the SLO). Reasons are listed in that order.
    """
    failing: list[tuple[float, Constraint, str]] = []
    if summary.requests == 0:
        return False, ["no requests completed"], "errors"
    if summary.failed:
        failing.append(
            (math.inf, "errors", f"{summary.failed} of {summary.requests} requests failed")
        )
    for metric in SLO_METRICS:
        limit = getattr(slo, metric)
        if limit is None:
            continue
        measured: Percentiles | None = getattr(summary, metric)
        if measured is None:
            if metric == "ttft_ms" and summary.successful:
                failing.append((math.inf, "ttft_ms", "no request produced a first token"))
            continue  # no TPOT (<= 1 output token) meets a TPOT SLO, as in goodput
        value = getattr(measured, percentile)
        if value > limit:
            failing.append(
                (value / limit, metric, f"{percentile} {metric[:-3]} {value:.1f} ms > {limit:g} ms")
            )
    attainment = _attainment(summary)
    if attainment is not None and attainment < attainment_target - 1e-12:
        failing.append(
            (
                0.0,  # below every failing metric: it binds only when no percentile fails
                "attainment",
                f"goodput attainment {attainment:.2%} < target {attainment_target:.2%}",
            )
        )
    if not failing:
        return True, [], None
    failing.sort(key=lambda item: -item[0])
    return False, [text for _, _, text in failing], failing[0][1]


class EndEarly:
    """PhaseSpec.end_early of one probe: ends it once it is certain to fail.

    Certain = a request failed (the SLO allows no errors), or more requests have missed the SLO
    than `allowed_misses(planned, target)`: attainment can no longer reach the target whatever
    the remaining requests do. Keeps the probe's summary as it was at that moment (before the
    cancelled requests count as failures) for the probe's figures.
    """

    def __init__(
        self,
        slo: SLO,
        planned_requests: int,
        attainment_target: float,
        allowed: int | None = None,
    ) -> None:
        self.slo = slo
        # A confirming repeat gets what is left of the pair's miss budget (`allowed`).
        self.allowed = (
            allowed_misses(planned_requests, attainment_target) if allowed is None else allowed
        )
        self.planned = planned_requests
        self.reason: str | None = None
        self.snapshot: MetricsSummary | None = None
        self._seen = 0

    def __call__(self, outcome: PhaseOutcome) -> str | None:
        accumulator = outcome.accumulator
        if accumulator.requests == self._seen:  # nothing finished since the last look
            return None
        self._seen = accumulator.requests
        misses = accumulator.requests - accumulator.meeting_slo(self.slo)
        if accumulator.failed:
            reason = f"{ENDED_EARLY}: {accumulator.failed} request(s) failed"
        elif misses > self.allowed:
            reason = (
                f"{ENDED_EARLY}: {misses} of {self.planned} planned requests already missed the "
                f"SLO (the attainment target allows {self.allowed})"
            )
        else:
            return None
        self.reason = reason
        self.snapshot = accumulator.summary(self.slo)
        return reason


def _meeting(summary: MetricsSummary) -> int:
    return round((summary.goodput_rps or 0.0) * summary.duration_s)


def pair_target(percentile: str, attainment_target: float) -> float:
    """The share of a confirmed pair's requests that must meet the SLO: the attainment target,
    or the SLO's percentile where that is stricter (p99 with a 90% target: 99%)."""
    return max(attainment_target, PERCENTILE_LEVELS[percentile])


def pooled_verdict(
    pair: list[tuple[int, MetricsSummary]], percentile: str, attainment_target: float
) -> tuple[bool, float | None, list[str]]:
    """(feasible, pooled attainment, reasons) of one level probed twice.

    `pair` holds (planned requests, judged summary) of each probe (an ended-early probe's
    summary as it was when it ended). Feasible when no request failed and the requests that
    missed the SLO over both probes are within `allowed_misses` of both probes' planned
    requests at `pair_target`. Where both probes ran to the end that count is the percentile
    rule on the pooled requests (a metric's requests over its limit are among the misses, so at
    most 1 - q of the pair lie above it); an ended-early probe's unsent requests count toward
    neither side. The two probes' own percentiles are not averaged: an ended-early probe's p99 rests
    on the few requests it judged (on one H200 a 22 req/s probe ended at 6 misses of 258 judged
    with p99 TTFT 498 ms, its repeat missed none of 500, and the mean of the two p99s, 324 ms,
    failed a pair with 6 misses of 1,000 planned;
    data/reference/h200_llama2-7b_capacity_settled).
    """
    failed = sum(summary.failed for _, summary in pair)
    judged = sum(summary.requests for _, summary in pair)
    meeting = sum(_meeting(summary) for _, summary in pair)
    planned = sum(count for count, _ in pair)
    attainment = min(1.0, meeting / judged) if judged else None
    reasons: list[str] = []
    if failed:
        reasons.append(f"{failed} request(s) failed over the two probes")
    allowed = allowed_misses(planned, pair_target(percentile, attainment_target))
    if judged - meeting > allowed:
        reasons.append(
            f"{judged - meeting} of {planned} planned requests of the two probes missed the SLO "
            f"(the attainment target and the SLO's {percentile} allow {allowed})"
        )
    return not reasons, attainment, reasons


# --------------------------------------------------------------------------- the search


class _Search:
    """State of one search; `run()` is the phase generator (see the module docstring)."""

    def __init__(self, load: CapacityLoad, slo: SLO, output_tokens: float | None = None) -> None:
        self.load = load
        self.slo = slo
        self.settle_s, settle_rule = load.settle_for(slo, output_tokens)
        # Judged at the SLO's percentile (RunConfig keeps load.percentile equal to it).
        self.percentile = slo.percentile
        self.by_rate = load.over == "rate"
        derived = min_probe_requests(self.percentile, load.attainment_target)
        self.planned = load.probe_requests or derived
        self.report = CapacityReport(
            over=load.over,
            arrival=load.arrival,
            percentile=self.percentile,
            attainment_target=load.attainment_target,
            precision=load.precision,
            slo=slo,
            probe_requests=self.planned,
            probe_requests_rule=(
                f"max({MIN_PROBE_REQUESTS_FLOOR}, ceil({TAIL_SAMPLES} / (1 - q)) for "
                f"{self.percentile}, ceil({TAIL_SAMPLES} / (1 - attainment target))) = {derived}"
                + ("" if load.probe_requests is None else f"; given: {load.probe_requests}")
            ),
        )
        self.report.settle_rule = settle_rule
        if load.probe_requests is not None and load.probe_requests < derived:
            self.report.notes.append(
                f"probe_requests {load.probe_requests} is below the derived minimum {derived}: "
                f"the {self.percentile} of a probe rests on fewer than {TAIL_SAMPLES} requests"
            )
        self.judged = 0
        self.floor = 0.0  # lowest level worth a probe, set once the start is known
        # (planned, judged summary) of each probe by index, for a confirming repeat's verdict.
        self.figures: dict[int, tuple[int, MetricsSummary]] = {}

    # ---------------------------------------------------------------- one probe

    def _probe(
        self,
        level: float,
        kind: Literal["serial", "bracket", "bisect", "recheck", "confirm"],
        repeats: CapacityProbe | None = None,
    ) -> Generator[PhaseSpec, MetricsSummary, CapacityProbe]:
        index = len(self.report.probes)
        budget = None  # a repeat may miss only what the pair's budget leaves
        if repeats is not None:
            first_planned, first = self.figures[repeats.index]
            target = pair_target(self.percentile, self.load.attainment_target)
            budget = allowed_misses(first_planned + self.planned, target) - (
                first.requests - _meeting(first)
            )
        load = self.load
        serial = kind == "serial"
        if serial or not self.by_rate:
            concurrency = 1 if serial else round(level)
            planned = SERIAL_PROBE_REQUESTS if serial else max(self.planned, 2 * concurrency)
            name = f"capacity-{index:02d}-c{concurrency}"
            guard = (
                None
                if serial or not load.end_early
                else EndEarly(self.slo, planned, load.attainment_target, budget)
            )
            spec = PhaseSpec(
                name, "concurrency", concurrency, None, max_requests=planned, end_early=guard
            )
        else:
            planned = self.planned
            name = f"capacity-{index:02d}-r{level:.4g}"
            if self.settle_s:
                # Served, not judged (warm-up records); no drain: the judged requests start on
                # the engine this rate has filled.
                yield PhaseSpec(
                    f"{name}-settle",
                    "rate",
                    level,
                    self.settle_s,
                    arrival=load.arrival,
                    seed=load.seed + SETTLE_SEED_OFFSET + index,
                    warmup=True,
                    drain=False,
                )
            guard = (
                EndEarly(self.slo, planned, load.attainment_target, budget)
                if load.end_early
                else None
            )
            spec = PhaseSpec(
                name,
                "rate",
                level,
                None,
                max_requests=planned,
                arrival=load.arrival,
                seed=load.seed + index,
                end_early=guard,
            )
        summary = yield spec
        ended = guard.reason if guard is not None else None
        figures = guard.snapshot if ended and guard is not None and guard.snapshot else summary
        if serial:
            feasible, reasons, binding = None, [], None
        else:
            feasible, reasons, binding = judge_probe(
                figures, self.slo, self.percentile, load.attainment_target
            )
            if ended:
                feasible = False
                reasons = [*reasons, ended]
                binding = binding or "attainment"
            self.judged += 1
        self.figures[index] = (planned, figures)
        pooled_feasible: bool | None = None
        pooled_attainment: float | None = None
        if repeats is not None:
            pooled_feasible, pooled_attainment, pooled_reasons = pooled_verdict(
                [self.figures[repeats.index], (planned, figures)],
                self.percentile,
                load.attainment_target,
            )
            reasons = [*reasons, *(f"pair: {text}" for text in pooled_reasons)]
        probe = CapacityProbe(
            index=index,
            phase=name,
            kind=kind,
            strategy=spec.strategy,
            level=float(level),
            planned_requests=planned,
            requests=summary.requests,
            successful=summary.successful,
            failed=summary.failed,
            duration_s=summary.duration_s,
            achieved_rps=figures.request_throughput_rps,
            output_throughput_tok_s=figures.output_throughput_tok_s,
            attainment=_attainment(figures),
            ttft_ms=figures.ttft_ms,
            tpot_ms=figures.tpot_ms,
            e2e_ms=figures.e2e_ms,
            feasible=feasible,
            reasons=reasons,
            binding_constraint=binding,
            ended_early=ended,
            repeats=None if repeats is None else repeats.index,
            pooled_attainment=pooled_attainment,
            pooled_feasible=pooled_feasible,
            settle_s=self.settle_s if spec.strategy == "rate" and not serial else None,
        )
        self.report.probes.append(probe)
        return probe

    def _confirmed(
        self, level: float, probe: CapacityProbe
    ) -> Generator[PhaseSpec, MetricsSummary, CapacityProbe]:
        """The probe that decides `level` after `probe` failed there with a pass below it:
        a repeat with fresh arrivals whose pooled verdict decides, or `probe` itself when a
        repeat could not change the verdict (a failed request, the pair's miss budget already
        spent) or is off or out of probes."""
        if (
            probe.feasible is not False
            or not self.load.confirm_boundary
            or self.judged >= self.load.max_probes
        ):
            return probe
        planned, figures = self.figures[probe.index]
        misses = figures.requests - _meeting(figures)
        if figures.failed or misses > allowed_misses(
            planned + self.planned, self.load.attainment_target
        ):
            return probe
        return (yield from self._probe(level, "confirm", repeats=probe))

    @staticmethod
    def _passes(probe: CapacityProbe) -> bool:
        """The verdict the search acts on: a confirming repeat's is the pair's."""
        if probe.kind == "confirm":
            return bool(probe.pooled_feasible)
        return bool(probe.feasible)

    def _serial_gate(self, serial: CapacityProbe) -> tuple[Constraint, str] | None:
        """(metric, why) when even one request at a time misses the SLO at the median: then
        no arrival rate can meet it, and probing ever lower rates would only cost time."""
        for metric in SLO_METRICS:
            limit = getattr(self.slo, metric)
            measured: Percentiles | None = getattr(serial, metric)
            if limit is not None and measured is not None and measured.p50 > limit:
                return metric, (
                    f"one request at a time already misses the SLO: p50 {metric[:-3]} "
                    f"{measured.p50:.1f} ms > {limit:g} ms"
                )
        return None

    # ---------------------------------------------------------------- levels

    def _grow(self, level: float) -> float:
        if self.by_rate:
            return min(level * self.load.growth_factor, self.load.max_rps)
        return min(max(level + 1, math.ceil(level * self.load.growth_factor)), self.ceiling)

    def _shrink(self, level: float) -> float | None:
        if self.by_rate:
            lower = level / self.load.growth_factor
            return lower if lower >= self.floor else None
        return float(max(1, math.floor(level / self.load.growth_factor))) if level > 1 else None

    def _middle(self, lo: float, hi: float) -> float | None:
        """The next bisection level, None once [lo, hi] meets the precision."""
        if (hi - lo) / hi <= self.load.precision:
            return None
        if self.by_rate:
            return (lo + hi) / 2
        middle = (lo + hi) // 2
        return float(middle) if lo < middle < hi else None

    @property
    def ceiling(self) -> float:
        return self.load.max_rps if self.by_rate else float(self.load.max_concurrency)

    # ---------------------------------------------------------------- the plan

    def run(self) -> Generator[PhaseSpec, MetricsSummary, CapacityReport]:
        """The search; a run stopped before it ends gets the report of the probes so far."""
        try:
            return (yield from self._search())
        except PlanInterrupted as interrupted:
            feasible = {p.level: p for p in self.report.probes if self._passes(p)}
            failed = [p for p in self.report.probes if p.feasible is False]
            lo = max(feasible) if feasible else None
            above = [p for p in failed if lo is None or p.level > lo]
            hi_probe = min(above, key=lambda p: p.level) if above else None
            self.report.notes.append(f"the run ended before the search did ({interrupted})")
            hi = hi_probe.level if hi_probe else None
            return self._finish(lo, hi, hi_probe, feasible, "not_converged")

    def _search(self) -> Generator[PhaseSpec, MetricsSummary, CapacityReport]:
        load = self.load
        report = self.report
        if self.by_rate:
            if load.start_rps is not None:
                start = load.start_rps
            else:
                serial = yield from self._probe(1, "serial")
                start = serial.achieved_rps
                gate = self._serial_gate(serial)
                if start <= 0 or gate:
                    report.result = "no_feasible_level"
                    report.converged = True
                    report.binding_constraint = "errors" if start <= 0 else gate[0]
                    report.binding_reasons = (
                        ["the serial probe completed no request"] if start <= 0 else [gate[1]]
                    )
                    return self._finish(None, None, None, {}, "no_feasible_level")
            # An open loop far below the serial rate is one request at a time with gaps: if
            # the SLO fails at start / 8 it fails for the engine, so go no lower.
            self.floor = start / 8
        else:
            start = float(load.start_concurrency)
            self.floor = 1.0
        start = min(start, self.ceiling)
        feasible: dict[float, CapacityProbe] = {}  # level -> last passing probe there
        lo: float | None = None
        hi: float | None = None
        hi_probe: CapacityProbe | None = None
        level: float | None = start
        # Bracket.
        while lo is None or hi is None:
            if self.judged >= load.max_probes:
                return self._finish(lo, hi, hi_probe, feasible, "not_converged")
            probe = yield from self._probe(level, "bracket")
            if lo is not None:  # a failure above a pass sets the boundary: confirm it first
                probe = yield from self._confirmed(level, probe)
            if self._passes(probe):
                lo = level
                feasible[level] = probe
                if hi is None:
                    if level >= self.ceiling:
                        return self._finish(lo, hi, hi_probe, feasible, "ceiling_reached")
                    level = self._grow(level)
            else:
                hi, hi_probe = level, probe
                if lo is None:
                    level = self._shrink(level)
                    if level is None:
                        return self._finish(lo, hi, hi_probe, feasible, "no_feasible_level")
        # Bisect, then re-check the boundary; a failed re-check resumes bisection below it.
        rechecked: set[float] = set()
        while True:
            middle = self._middle(lo, hi)
            if middle is None:
                if not load.recheck_boundary or lo in rechecked:
                    break
                if self.judged >= load.max_probes:
                    return self._finish(lo, hi, hi_probe, feasible, "not_converged")
                rechecked.add(lo)
                probe = yield from self._probe(lo, "recheck")
                probe = yield from self._confirmed(lo, probe)
                if self._passes(probe):
                    feasible[lo] = probe
                    report.boundary_rechecked = True
                    break
                report.non_monotonic = True
                report.notes.append(
                    f"level {lo:g} passed, then failed its re-check: the boundary is below it"
                )
                hi, hi_probe = lo, probe
                feasible.pop(lo, None)
                below = [value for value in feasible if value < hi]
                if not below:
                    level = self._shrink(hi)
                    while level is not None:  # bracket downwards again
                        if self.judged >= load.max_probes:
                            return self._finish(None, hi, hi_probe, feasible, "not_converged")
                        probe = yield from self._probe(level, "bracket")
                        if self._passes(probe):
                            feasible[level] = probe
                            break
                        hi, hi_probe = level, probe
                        level = self._shrink(level)
                    if level is None:
                        return self._finish(None, hi, hi_probe, feasible, "no_feasible_level")
                    below = [level]
                lo = max(below)
                continue
            if self.judged >= load.max_probes:
                return self._finish(lo, hi, hi_probe, feasible, "not_converged")
            probe = yield from self._probe(middle, "bisect")
            probe = yield from self._confirmed(middle, probe)
            if self._passes(probe):
                lo = middle
                feasible[middle] = probe
            else:
                hi, hi_probe = middle, probe
        return self._finish(lo, hi, hi_probe, feasible, "found")

    def _finish(
        self,
        lo: float | None,
        hi: float | None,
        hi_probe: CapacityProbe | None,
        feasible: dict[float, CapacityProbe],
        result: Literal["found", "no_feasible_level", "ceiling_reached", "not_converged"],
    ) -> CapacityReport:
        report = self.report
        report.result = result
        report.converged = result != "not_converged"
        if result == "not_converged":
            report.notes.append(
                f"the search stopped after {self.judged} probes (max_probes {self.load.max_probes})"
                " before its bracket met the precision"
            )
        if result == "ceiling_reached":
            report.notes.append(
                f"the SLO still held at the ceiling {self.ceiling:g}: the capacity is a lower bound"
            )
        boundary = feasible.get(lo) if lo is not None else None
        if boundary is not None:
            report.boundary_phase = boundary.phase
            report.output_throughput_tok_s_at_max = boundary.output_throughput_tok_s
            if self.by_rate:
                report.max_rate_rps = lo
            else:
                report.max_concurrency = round(lo)
                report.max_rate_rps = boundary.achieved_rps
        if hi is not None and hi_probe is not None:
            if self.by_rate:
                report.first_infeasible_rps = hi
            else:
                report.first_infeasible_concurrency = round(hi)
                report.first_infeasible_rps = hi_probe.achieved_rps
            report.binding_constraint = hi_probe.binding_constraint
            report.binding_reasons = list(hi_probe.reasons)
        if lo is not None and hi is not None:
            report.relative_gap = (hi - lo) / hi
        quantile = self.percentile
        report.smoothed_boundary_level = smoothed_boundary(report.probes, self.slo, quantile)
        report.curve = [
            CapacityCurvePoint(
                level=probe.level,
                achieved_rps=probe.achieved_rps,
                ttft_ms=getattr(probe.ttft_ms, quantile) if probe.ttft_ms else None,
                tpot_ms=getattr(probe.tpot_ms, quantile) if probe.tpot_ms else None,
                e2e_ms=getattr(probe.e2e_ms, quantile) if probe.e2e_ms else None,
                attainment=probe.attainment,
                feasible=bool(probe.feasible),
            )
            for probe in sorted(report.probes, key=lambda p: (p.level, p.index))
            if probe.feasible is not None
        ]
        return report


def capacity_search(
    load: CapacityLoad, slo: SLO, rules: ValidityRules, output_tokens: float | None = None
) -> Generator[PhaseSpec, MetricsSummary, dict]:
    """The capacity pattern's phases; returns its `CapacityReport` as a JSON-ready dict.

    `rules` are not used by the search itself (the SLO allows no errors at all); the run's
    validity is `capacity_validity` of the report. `output_tokens`: the workload's mean output
    length, for settling by the SLO's end-to-end bound (None: not a generation).
    """
    if not slo.is_set():
        raise ValueError("the capacity pattern needs an SLO (ttft_ms, tpot_ms or e2e_ms)")
    return (yield from _Search(load, slo, output_tokens).run())


def capacity_validity(
    pattern_report: PatternReportBase | None,
    phases: list[PhaseResult],
    run_summary: MetricsSummary | None,
    rules: ValidityRules,
) -> Validity:
    """VALID when the search converged on a boundary whose probe holds the run's rules.

    Infeasible probes fail the SLO or error budget by design, so the run-wide error rate is
    not a rule here; instead: result "found" and converged; the accepted boundary probe has
    at least `min_requests` successful requests and no failed one; the run's measured window
    is at least `min_duration_s`.
    """
    from bench.core.metrics import judge_validity

    reasons: list[str] = []
    report = pattern_report
    if not isinstance(report, CapacityReport):  # the plan never returned its report
        return Validity(
            status=ValidityStatus.INVALID, reasons=["the capacity search did not finish"]
        )
    if report.incomplete:
        reasons.append(f"the capacity search did not finish: {report.incomplete}")
    if not report.converged:
        reasons.append("the capacity search did not converge: " + "; ".join(report.notes))
    elif report.result == "no_feasible_level":
        reasons.append(
            "no probed level meets the SLO: " + "; ".join(report.binding_reasons or ["-"])
        )
    elif report.result == "ceiling_reached":
        reasons.append("the SLO held up to the search ceiling: the capacity is only a lower bound")
    if report.boundary_phase is not None:
        phase = next((p for p in phases if p.name == report.boundary_phase), None)
        if phase is None:
            reasons.append(f"boundary probe {report.boundary_phase} has no phase result")
        else:
            probe_rules = rules.model_copy(update={"min_duration_s": 0.0, "max_error_rate": 0.0})
            reasons += [
                f"boundary probe: {text}"
                for text in judge_validity(phase.summary, probe_rules).reasons
            ]
    duration_rule = ValidityRules(
        min_duration_s=rules.min_duration_s, min_requests=0, max_error_rate=1
    )
    reasons += judge_validity(run_summary, duration_rule).reasons
    status = ValidityStatus.INVALID if reasons else ValidityStatus.VALID
    return Validity(status=status, reasons=reasons)


def capacity_summary_line(pattern_report: PatternReportBase | None) -> str:
    """One line for the CLI: `capacity 20 req/s (first infeasible 20.62; binding ttft_ms) ...`."""
    report = pattern_report
    if not isinstance(report, CapacityReport):
        return "capacity: the search did not finish (no report)"
    unit = "req/s" if report.over == "rate" else "in flight"
    found = report.max_rate_rps if report.over == "rate" else report.max_concurrency
    first = (
        report.first_infeasible_rps
        if report.over == "rate"
        else (report.first_infeasible_concurrency)
    )
    probes = sum(1 for probe in report.probes if probe.feasible is not None)
    text = f"capacity {found:g} {unit}" if found is not None else "capacity: no level meets the SLO"
    details = [f"{report.result}, {probes} probes, {report.percentile}"]
    if first is not None:
        details.append(f"first infeasible {first:g}")
    if report.binding_constraint:
        details.append(f"binding {report.binding_constraint}")
    if report.over == "concurrency" and report.max_rate_rps is not None:
        details.append(f"{report.max_rate_rps:.2f} req/s there")
    return f"{text} ({'; '.join(details)})"


def _share(value: float) -> str:
    return f"{value:.1%}"


def probe_attainment_text(probe: CapacityProbe) -> str:
    """`attainment 99.4% [98.3%, 99.8%]` (95% Wilson interval), with the pair's for a repeat."""
    if probe.attainment is None:
        return "attainment -"
    text = f"attainment {_share(probe.attainment)}"
    if probe.attainment_low is not None and probe.attainment_high is not None:
        text += f" [{_share(probe.attainment_low)}, {_share(probe.attainment_high)}]"
    if probe.pooled_attainment is not None:
        text += f", pair {_share(probe.pooled_attainment)}"
    return text


def capacity_probe_lines(pattern_report: PatternReportBase | None) -> list[str]:
    """One line per judged probe for the CLI: level, kind, attainment with its interval, the
    verdict (a confirming repeat's is the pair's)."""
    if not isinstance(pattern_report, CapacityReport):
        return []
    unit = "req/s" if pattern_report.over == "rate" else "in flight"
    lines = []
    for probe in pattern_report.probes:
        if probe.feasible is None:
            continue
        if probe.kind == "confirm":
            verdict = f"pair {'feasible' if probe.pooled_feasible else 'infeasible'}"
            kind = f"confirm of #{probe.repeats}"
        else:
            verdict = "feasible" if probe.feasible else "infeasible"
            kind = probe.kind
        lines.append(
            f"probe {probe.index} {kind} {probe.level:g} {unit}: "
            f"{probe_attainment_text(probe)}, {verdict}"
        )
    return lines


__all__ = [
    "CapacityCurvePoint",
    "CapacityProbe",
    "CapacityReport",
    "EndEarly",
    "allowed_misses",
    "capacity_probe_lines",
    "capacity_search",
    "capacity_summary_line",
    "capacity_validity",
    "judge_probe",
    "pair_target",
    "pooled_verdict",
    "probe_attainment_text",
    "smoothed_boundary",
]
