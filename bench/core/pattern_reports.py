"""Typed pattern reports: what each load pattern says about a run (knee, soak fits, recovery).

`RunResult.pattern_report` is the discriminated union `PatternReport` of one model per pattern,
keyed by `pattern`. Adding a pattern's report is one class deriving from `PatternReportBase`
(with `pattern: Literal["name"]`) plus one member of `PatternReport`. Every model here converts
numpy scalars and arrays to Python values before validation (`ReportModel`): the analysis works
in numpy, and a `numpy.bool` left in a result made the whole run unserialisable (issue 21).

The field names are those the results have always been stored with, so older results load as
they are; `RunResult` reads the two older shapes (an empty dict, a report without `pattern`).
A model's `field_metrics` says which catalogued metric each figure field holds
(`peak_window_p99_e2e_ms` is `e2e_ms_p99`): tables and sentences take label and unit from
`metric_of(field)` (bench.core.metric_catalog), never from the field's spelling.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, TypeAdapter, model_validator

from bench.core.config import SLO
from bench.core.metric_catalog import LADDER_LATENCIES, CataloguedFields
from bench.core.percentiles import Percentiles
from bench.core.strict import Strict


def plain(value: Any) -> Any:
    """`value` with numpy scalars as Python scalars and numpy arrays as lists, recursively.

    numpy is recognised by module name so that reading a result never imports numpy.
    """
    if isinstance(value, dict):
        return {key: plain(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [plain(inner) for inner in value]
    if type(value).__module__ == "numpy":
        return plain(value.tolist()) if hasattr(value, "tolist") else value
    return value


class ReportModel(CataloguedFields, Strict):
    """Base of every report model: numpy values become Python values at this boundary."""

    @model_validator(mode="before")
    @classmethod
    def _plain_values(cls, data: Any) -> Any:
        return plain(data) if isinstance(data, dict) else data


# --------------------------------------------------------------------------- ladder (step)


class LadderStage(ReportModel):
    """One closed-loop stage of a concurrency ladder and why it is (or is not) the knee."""

    field_metrics: ClassVar[dict[str, str]] = {
        "request_throughput_rps": "request_throughput_rps",
        "output_throughput_tok_s": "output_throughput_tok_s",
        "error_rate": "error_rate",
        **{latency.ladder_field: latency.name for latency in LADDER_LATENCIES},
    }

    concurrency: int
    requests: int
    request_throughput_rps: float
    output_throughput_tok_s: float
    error_rate: float
    p99_ttft_ms: float | None = None
    p99_tpot_ms: float | None = None
    p99_e2e_ms: float | None = None
    gain: float | None = Field(
        None, description="Output-throughput gain over the previous stage (None at the first)."
    )
    knee_reasons: list[str] = Field(default_factory=list)


class Ladder(ReportModel):
    """Knee and capacity of a concurrency ladder (rule: bench.run.load.patterns.ladder)."""

    stages: list[LadderStage] = Field(default_factory=list)
    knee_stage: int | None = Field(None, description="Index in `stages` of the knee stage.")
    knee_concurrency: int | None = None
    knee_reasons: list[str] = Field(default_factory=list)
    capacity_concurrency: int | None = None
    capacity_rps: float | None = None
    capacity_output_tok_s: float | None = None
    capacity_is_lower_bound: bool | None = Field(
        None, description="True when no stage was a knee: capacity is at least the last stage."
    )
    throughput_metric: Literal["output_throughput_tok_s"] = "output_throughput_tok_s"


# --------------------------------------------------------------------------- soak (steady)


class SlopeFit(ReportModel):
    """A least-squares line through one per-window series (bench.run.load.analysis._fit)."""

    windows: int = Field(ge=0, description="Windows fitted (the partial last one left out).")
    flagged: bool = Field(description="Significant and material growth (a leak or a drift).")
    note: str | None = None
    slope_per_hour: float | None = None
    intercept: float | None = None
    p_value: float | None = None
    r_squared: float | None = None
    projected_change: float | None = None
    projected_change_fraction: float | None = None


class SoakFits(ReportModel):
    """The soak's line fits, one per window series (`p99_e2e_ms`: the fit of the windows'
    E2E p99)."""

    field_metrics: ClassVar[dict[str, str]] = {"p99_e2e_ms": "e2e_ms_p99"}

    p99_e2e_ms: SlopeFit
    gpu_memory_mb: SlopeFit
    host_rss_mb: SlopeFit


class SoakWindow(ReportModel):
    """One soak window: its requests and its figures."""

    field_metrics: ClassVar[dict[str, str]] = {"p99_e2e_ms": "e2e_ms_p99"}

    t_s: float
    requests: int
    errors: int
    p99_e2e_ms: float | None = None
    gpu_memory_mb: float | None = None
    host_rss_mb: float | None = None


class SteadyAnalysis(ReportModel):
    """Per-window soak series and their fits (bench.run.load.analysis.steady_report)."""

    window_s: float
    duration_s: float | None = None
    windows: list[SoakWindow] = Field(default_factory=list)
    fits: SoakFits | None = None
    leak_suspected: bool = False
    latency_drift: bool = False
    rule: str | None = None
    notes: list[str] = Field(default_factory=list)


# --------------------------------------------------------------------------- burst (pulse)


class PulseWindow(ReportModel):
    """One window of a pulse run, from the burst start on."""

    field_metrics: ClassVar[dict[str, str]] = {"p99_e2e_ms": "e2e_ms_p99"}

    t_s: float
    requests: int
    errors: int
    p99_e2e_ms: float | None = None
    in_burst: bool


class PulseAnalysis(ReportModel):
    """Errors, peak latency, queue depth and recovery of a burst (analysis.pulse_report).

    `peak_e2e_ms` is the largest E2E from the burst on: a maximum, no catalogued statistic."""

    field_metrics: ClassVar[dict[str, str]] = {
        "baseline_p99_e2e_ms": "e2e_ms_p99",
        "peak_window_p99_e2e_ms": "e2e_ms_p99",
    }

    window_s: float
    burst_s: float
    baseline_requests: int
    baseline_p99_e2e_ms: float | None = None
    errors_before_burst: int
    errors_during_burst: int
    errors_after_burst: int
    peak_window_p99_e2e_ms: float | None = None
    peak_e2e_ms: float | None = None
    max_queue_depth: int
    max_queue_depth_burst: int
    recovery_s: float | None = None
    recovered: bool
    rule: str
    windows: list[PulseWindow] = Field(default_factory=list)


# --------------------------------------------------------------------------- the reports

MAX_SCHEDULING_LAG_P99_MS = 200.0
"""A run whose open-loop sends were later than this at p99 is INVALID: its figures measure a
load generator that fell behind its schedule, not the server (issue 51). 200 ms: far above the
driver's own tail (0.1 ms on an idle core, tens of ms on a shared 2-core machine), far below
the seconds a harness-limited run shows."""


class ClientProcessOverhead(ReportModel):
    """One client process's part of a run split across processes (`load.client_processes`)."""

    process: int = Field(ge=0, description="0 = the worker itself; 1.. = helper processes.")
    sent: int = Field(ge=0, description="Measured requests this process sent.")
    achieved_rps: float = Field(
        ge=0,
        description="sent / this process's measured wall time (start to its last request's end).",
    )
    scheduling_lag_p50_ms: float | None = Field(None, description="p50 of this process's lag.")
    scheduling_lag_p99_ms: float | None = Field(None, description="p99 of this process's lag.")
    cpu_s: float = Field(ge=0, description="CPU time of this process over the measured phases.")


class HarnessOverhead(ReportModel):
    """The load generator's own cost over the measured phases, reported with every run, so a
    harness-limited figure is never read as the server's (bench.run.runner fills it)."""

    scheduling_lag_p50_ms: float | None = Field(
        None, description="Open loop: p50 of actual send - planned send over all measured sends."
    )
    scheduling_lag_p99_ms: float | None = Field(
        None, description="Open loop: p99 of actual send - planned send (None: closed loop)."
    )
    timed_sends: int = Field(0, ge=0, description="Sends with a planned time (open loop).")
    client_cpu_s: float = Field(
        ge=0, description="CPU time of the client process (every thread) over the measured phases."
    )
    loop_cpu_s: float = Field(
        0.0,
        ge=0,
        description="CPU time of the sending loop's thread alone over the measured phases "
        "(client_cpu_s less this: the request producer, the tokenizer's threads, others).",
    )
    measured_wall_s: float = Field(ge=0, description="Wall time of the measured phases.")
    prepare_before_s: float = Field(
        0.0, ge=0, description="Wall time spent preparing requests before phase clocks started."
    )
    producer_waits: int = Field(
        0, ge=0, description="Times the sending loop found no prepared request and waited."
    )
    max_lag_p99_ms: float = Field(
        MAX_SCHEDULING_LAG_P99_MS, description="p99 lag above this makes the run INVALID."
    )
    achieved_rps: float | None = Field(
        None, description="Measured sends / measured wall time, every client process together."
    )
    processes: list[ClientProcessOverhead] = Field(
        default_factory=list,
        description="Per client process, when open-loop phases were split across processes "
        "(client_cpu_s then counts them all).",
    )

    def invalid_reason(self) -> str | None:
        """Why the run is harness-limited, or None."""
        lag = self.scheduling_lag_p99_ms
        if lag is None or lag <= self.max_lag_p99_ms:
            return None
        return (
            f"harness-limited: scheduling lag p99 {lag:,.1f} ms > {self.max_lag_p99_ms:g} ms "
            "(the load generator fell behind its schedule; these figures measure the client, "
            "not the server)"
        )


class PatternReportBase(ReportModel):
    """What every pattern's report carries besides its own findings (set by bench.run.runner)."""

    pattern: str = Field(description="The load pattern; each report narrows it to its name.")
    phase_windows: dict[str, list[int]] = Field(
        default_factory=dict, description="Phase name -> [start_ns, end of issuing ns]."
    )
    incomplete: str | None = Field(None, description="Why the plan did not finish, if it did not.")
    scheduling_lag_ms: dict[str, Percentiles] = Field(
        default_factory=dict, description="Open-loop phases: send time minus planned send time."
    )
    harness: HarnessOverhead | None = Field(
        None, description="The load generator's own overhead (lag, client CPU) over the run."
    )

    def with_phase_windows(self, windows: dict[str, list[int]]) -> PatternReportBase:
        """This report with the run's phase windows (patterns that analyse a phase keep its)."""
        return self.model_copy(update={"phase_windows": windows})


class ConcurrencyReport(PatternReportBase):
    pattern: Literal["concurrency"] = "concurrency"
    concurrency: int | None = None


class RateReport(PatternReportBase):
    pattern: Literal["rate"] = "rate"
    rate_rps: float | None = None
    arrival: Literal["poisson", "constant"] | None = None


class StepReport(Ladder, PatternReportBase):
    pattern: Literal["step"] = "step"


class HeldLoadReport(PatternReportBase):
    """Steady and pulse hold a load relative to a capacity, given or measured by a ladder."""

    window_s: float | None = None
    capacity_rps: float | None = None
    capacity_source: Literal["config", "capacity ladder"] | None = None
    capacity_ladder: Ladder | None = None
    capacity_note: str | None = None
    error: str | None = Field(None, description="Why the held phases did not run.")
    analysis_error: str | None = Field(
        None, description="Why the after-the-run analysis failed (the run is then FAILED)."
    )


class SteadyReport(HeldLoadReport):
    pattern: Literal["steady"] = "steady"
    fraction: float | None = None
    duration_s: float | None = None
    rate_rps: float | None = None
    steady_start_ns: int | None = None
    steady_end_ns: int | None = None
    analysis: SteadyAnalysis | None = None

    def with_phase_windows(self, windows: dict[str, list[int]]) -> SteadyReport:
        start, end = windows.get("steady", (None, None))
        return self.model_copy(
            update={"phase_windows": windows, "steady_start_ns": start, "steady_end_ns": end}
        )


class PulseReport(HeldLoadReport):
    pattern: Literal["pulse"] = "pulse"
    baseline_rps: float | None = None
    burst_rps: float | None = None
    burst_start_ns: int | None = None
    burst_end_ns: int | None = None
    analysis: PulseAnalysis | None = None

    def with_phase_windows(self, windows: dict[str, list[int]]) -> PulseReport:
        start, end = windows.get("pulse-burst", (None, None))
        return self.model_copy(
            update={"phase_windows": windows, "burst_start_ns": start, "burst_end_ns": end}
        )


# --------------------------------------------------------------------------- capacity search

Constraint = Literal["ttft_ms", "tpot_ms", "e2e_ms", "attainment", "errors"]
"""What can bind a capacity search: an SLO metric's percentile, attainment, or errors."""


def wilson_interval(successes: int, trials: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion successes / trials (Wilson 1927).

    Chosen over the normal approximation because a probe's attainment sits near 1, where the
    normal interval runs past 1 and collapses to a point at 100%; Wilson's stays inside [0, 1]
    and still has width at 500 of 500 (lower end 99.24%).
    """
    if trials <= 0:
        raise ValueError("wilson_interval needs at least one trial")
    share = successes / trials
    z2 = z * z
    denominator = 1 + z2 / trials
    centre = (share + z2 / (2 * trials)) / denominator
    half = z * math.sqrt(share * (1 - share) / trials + z2 / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


class CapacityProbe(ReportModel):
    """One probe of the search: its level, what the engine did there, and the verdict."""

    index: int = Field(ge=0)
    phase: str = Field(description="Name of the phase that ran it (RunResult.phases).")
    kind: Literal["serial", "bracket", "bisect", "recheck", "confirm"] = Field(
        description="confirm: the repeat, with fresh arrivals, of a failed probe whose verdict "
        "would set the boundary (`repeats` names it); the pair decides together (`pooled_*`)."
    )
    strategy: Literal["concurrency", "rate"]
    level: float = Field(description="Offered rate (requests/s) or concurrency of the probe.")
    planned_requests: int
    requests: int
    successful: int
    failed: int
    duration_s: float
    achieved_rps: float = Field(description="Successful requests / the probe's window.")
    output_throughput_tok_s: float
    attainment: float | None = Field(
        None, description="Share of the probe's requests meeting every SLO (failed = miss)."
    )
    attainment_low: float | None = Field(
        None,
        description="95% Wilson score interval of the attainment, lower end: meeting requests "
        "out of the probe's judged requests (filled on load for runs stored without it).",
    )
    attainment_high: float | None = Field(None, description="Upper end of that interval.")
    ttft_ms: Percentiles | None = None
    tpot_ms: Percentiles | None = None
    e2e_ms: Percentiles | None = None
    feasible: bool | None = Field(None, description="None for the serial start probe (unjudged).")
    reasons: list[str] = Field(default_factory=list, description="Why it is infeasible.")
    binding_constraint: Constraint | None = Field(
        None, description="The most violated constraint (ratio to its limit) of this probe."
    )
    ended_early: str | None = Field(None, description="Why the probe was ended before its end.")
    repeats: int | None = Field(
        None, description="kind confirm: index of the failed probe this one repeats."
    )
    pooled_attainment: float | None = Field(
        None, description="kind confirm: attainment over both probes' judged requests."
    )
    settle_s: float | None = Field(
        None,
        description="Seconds of arrivals at the probe's rate served before its judged requests "
        "(not judged); none: judged from its first request.",
    )
    pooled_feasible: bool | None = Field(
        None,
        description="kind confirm: the verdict of the pair, which the search acted on "
        "(bench/run/load/capacity.py, pooled_verdict).",
    )

    @model_validator(mode="after")
    def _fill_interval(self) -> CapacityProbe:
        # Runs stored before the interval existed still show one: it follows from the stored
        # attainment and request count alone.
        if self.attainment is not None and self.attainment_low is None and self.requests > 0:
            meeting = round(self.attainment * self.requests)
            self.attainment_low, self.attainment_high = wilson_interval(meeting, self.requests)
        return self


class CapacityCurvePoint(ReportModel):
    """Percentile latency vs offered load, one point per judged probe (for the charts)."""

    level: float
    achieved_rps: float
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    attainment: float | None = None
    feasible: bool


class CapacityReport(PatternReportBase):
    """The typed report of the capacity pattern (RunResult.pattern_report of such a run).

    `max_rate_rps` is the last feasible probe's rate (over=concurrency: the request rate the
    engine achieved at the last feasible concurrency); `first_infeasible_rps` the lowest
    infeasible probe above it; `binding_constraint` the constraint that failed first there.
    A search that stopped before its bracket met the precision has `converged` False.
    """

    pattern: Literal["capacity"] = "capacity"
    over: Literal["rate", "concurrency"] = "rate"
    arrival: Literal["poisson", "constant"] = "poisson"
    percentile: Literal["p50", "p90", "p99"] = "p99"
    attainment_target: float = 0.99
    precision: float = 0.05
    slo: SLO = Field(default_factory=SLO)
    probe_requests: int = 0
    probe_requests_rule: str = ""
    settle_rule: str = Field(
        "",
        description="How long each rate probe settled before its judged requests, and why "
        "(empty: stored before probes settled, judged from their first request).",
    )
    result: Literal["found", "no_feasible_level", "ceiling_reached", "not_converged"] = (
        "not_converged"
    )
    converged: bool = False
    max_rate_rps: float | None = None
    max_concurrency: int | None = None
    first_infeasible_rps: float | None = None
    first_infeasible_concurrency: int | None = None
    relative_gap: float | None = Field(
        None, description="(first infeasible - last feasible level) / first infeasible level."
    )
    smoothed_boundary_level: float | None = Field(
        None,
        description="Where a monotone fit of the probes' worst percentile/limit ratio crosses 1 "
        "(AIPerf's smooth_isotonic: PAVA then PCHIP); a denoised reading of the boundary for "
        "charts, not the capacity (that is the last feasible probe).",
    )
    binding_constraint: Constraint | None = None
    binding_reasons: list[str] = Field(default_factory=list)
    output_throughput_tok_s_at_max: float | None = None
    boundary_phase: str | None = Field(None, description="Phase of the accepted feasible probe.")
    boundary_rechecked: bool = False
    non_monotonic: bool = Field(
        False, description="A level passed once and failed on its re-check (noisy boundary)."
    )
    probes: list[CapacityProbe] = Field(default_factory=list)
    curve: list[CapacityCurvePoint] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _slo_at_the_searched_percentile(self) -> CapacityReport:
        # Reports stored before the SLO held its percentile: their search judged at
        # `percentile`, so their SLO says so.
        if "percentile" not in self.slo.model_fields_set:
            self.slo = self.slo.model_copy(update={"percentile": self.percentile})
        return self


class ReplayReport(PatternReportBase):
    """Trace replay (bench/run/load/replay.py): which trace, how it was scheduled."""

    pattern: Literal["replay"] = "replay"
    trace: str | None = Field(None, description="The trace file as given.")
    trace_sha256: str | None = Field(None, description="Content hash of the trace file.")
    trace_rows: int | None = Field(None, description="Rows replayed (after max_requests).")
    time_scale: float | None = None
    trace_span_s: float | None = Field(None, description="First to last send, scaled (s).")
    max_lateness_ms: float | None = Field(
        None, description="p99 send lateness above this made the run INVALID."
    )


PatternReport = Annotated[
    ConcurrencyReport
    | RateReport
    | StepReport
    | SteadyReport
    | PulseReport
    | CapacityReport
    | ReplayReport,
    Field(discriminator="pattern"),
]
"""One report per load pattern; a new pattern's report is one more member here."""

PATTERN_REPORT: TypeAdapter[PatternReport] = TypeAdapter(PatternReport)


def empty_report(pattern: str) -> PatternReportBase:
    """The report of `pattern` with nothing found yet (a run stopped before its plan ended)."""
    return PATTERN_REPORT.validate_python({"pattern": pattern})


def older_report(data: Any, pattern: str) -> Any:
    """A stored pattern report in the shape this version reads.

    Two older shapes exist: `{}` (a run that failed before its load plan returned) -> None, and
    a report without `pattern` -> the run's load pattern is added.
    """
    if isinstance(data, dict) and "pattern" not in data:
        return {"pattern": pattern, **data} if data else None
    return data


__all__ = [
    "PATTERN_REPORT",
    "CapacityCurvePoint",
    "CapacityProbe",
    "CapacityReport",
    "ConcurrencyReport",
    "Constraint",
    "HeldLoadReport",
    "Ladder",
    "LadderStage",
    "PatternReport",
    "PatternReportBase",
    "PulseAnalysis",
    "PulseReport",
    "PulseWindow",
    "RateReport",
    "ReplayReport",
    "SlopeFit",
    "SoakFits",
    "SoakWindow",
    "SteadyAnalysis",
    "SteadyReport",
    "StepReport",
    "empty_report",
    "older_report",
    "wilson_interval",
]
