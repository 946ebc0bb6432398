"""What a run's card on the Benchmark page says, as plain functions the page draws (no streamlit
here, so each rule has a test): the progress line while it runs, the live throughput it plots,
and, once finished, VALID / INVALID with reasons and pass / fail per SLO limit.

Kept apart from ui/benchmark_page.py so the page stays a thin drawer and other cards (a forward
run's sample units) can share the same rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.core.config import LoadPattern, RunConfig
from bench.core.job_progress import JobRunProgress
from bench.core.metric_catalog import REQUEST_SLO_BOUNDS
from bench.core.progress import ProgressPoint, RunProgress
from bench.core.schema import RunResult, RunStatus, ValidityStatus

RATE_WINDOW_S = 10.0
"""The live chart's trailing window (s): tokens are counted when a request completes, so a
batch finishing together makes a shorter window pulse between 0 and twice the rate."""


# --------------------------------------------------------------------------- progress


@dataclass(frozen=True)
class ProgressLine:
    """The bar of a running run: how full, and what it says."""

    fraction: float
    text: str


def _seconds(value: float | None) -> str:
    return f"{0 if value is None else value:.0f} s"


def progress_line(
    latest: RunProgress | None, load: LoadPattern | None, stage_elapsed_s: float | None
) -> ProgressLine:
    """The progress bar of a running run.

    `stage_elapsed_s` is how long the run has been in its current stage (the job row's
    `stage_since`): the model's load has no estimate of its own, so it shows a timer. Past the
    measured window the text says why the run goes on (a `min_requests` floor, or the requests
    in flight finishing) instead of "48 s of 15 s".
    """
    if latest is None:
        return ProgressLine(0.0, f"Starting the engine worker… {_seconds(stage_elapsed_s)}")
    if latest.stage in ("loading", "loaded"):
        return ProgressLine(
            0.0,
            f"Loading the model: {_seconds(stage_elapsed_s)} elapsed (compile or engine build "
            "included; the run's own clock starts after it)",
        )
    if latest.phase_index is None:
        return ProgressLine(
            0.0,
            f"Warming up: {_seconds(latest.elapsed_s)} (these requests are excluded from the "
            f"figures) · {latest.completed or 0} done",
        )
    phases = latest.phases_total or 1
    done, failed, in_flight = latest.completed or 0, latest.failed or 0, latest.in_flight or 0
    counts = f"{done} requests done, {failed} failed, {in_flight} in flight"
    elapsed, window = latest.phase_elapsed_s or 0.0, latest.phase_duration_s
    wanted = getattr(load, "min_requests", None)
    if not window:
        fraction = 0.0
        where = f"{_seconds(elapsed)} elapsed"
    elif elapsed <= window:
        fraction = elapsed / window
        where = f"{_seconds(elapsed)} of the {_seconds(window)} window"
    elif wanted is not None and done + in_flight < wanted:  # `completed` counts failures too
        # The window is over; the run sends on until its validity minimum was sent.
        fraction = min(0.99, done / wanted)
        where = (
            f"the {_seconds(window)} window is over; on until {wanted} requests are sent "
            f"({_seconds(elapsed)} elapsed)"
        )
    else:
        fraction = 0.99
        where = (
            f"the {_seconds(window)} window is over; finishing the requests in flight "
            f"({_seconds(elapsed)} elapsed)"
        )
    if phases == 1:
        return ProgressLine(min(1.0, fraction), f"Run: {where} · {counts}")
    overall = min(1.0, (latest.phase_index + min(1.0, fraction)) / phases)
    return ProgressLine(
        overall, f"Run: phase {latest.phase_index + 1} of {phases}, {where} · {counts}"
    )


# --------------------------------------------------------------------------- live throughput


@dataclass(frozen=True)
class ThroughputPoint:
    """One point of the live throughput chart (output tok/s)."""

    elapsed_s: float
    since_start: float | None
    """Output tokens since the phase began / time since it began: the run's own figure (output
    tokens over the measured window) as it stands at this point."""
    last_window: float | None
    """Output tokens of the last RATE_WINDOW_S / that time; None before a window has passed."""


def throughput_points(history: Sequence[ProgressPoint]) -> list[ThroughputPoint]:
    """The live throughput of the measured phases, phase by phase (counters restart at each
    phase; warm-up left out). Completions come in batches, so a rate over 0.5 s ticks pulses
    between 0 and a multiple of the rate; both series here smooth that the way the run's figure
    does, by counting tokens over seconds, not ticks."""
    points: list[ThroughputPoint] = []
    by_phase: dict[str, list[ProgressPoint]] = {}
    for point in history:
        if point.elapsed_s is None or point.phase in (None, "warmup"):
            continue
        by_phase.setdefault(point.phase, []).append(point)
    for phase_points in by_phase.values():
        phase_points.sort(key=lambda p: p.elapsed_s or 0.0)
        first = phase_points[0]
        # The phase began phase_elapsed_s before its first point (older rows lack it: then the
        # first point stands for the start).
        start = (first.elapsed_s or 0.0) - (first.phase_elapsed_s or 0.0)
        for index, point in enumerate(phase_points):
            now, tokens = point.elapsed_s or 0.0, point.output_tokens or 0
            since = tokens / (now - start) if now - start >= 1.0 else None
            earlier = [
                p for p in phase_points[: index + 1] if (p.elapsed_s or 0.0) <= now - RATE_WINDOW_S
            ]
            window = None
            if earlier:
                base = earlier[-1]
                seconds = now - (base.elapsed_s or 0.0)
                window = (tokens - (base.output_tokens or 0)) / seconds if seconds > 0 else None
            points.append(ThroughputPoint(now, since, window))
    return points


# --------------------------------------------------------------------------- finished run


@dataclass(frozen=True)
class SloCheck:
    """One SLO limit of a run against its measured figure."""

    label: str
    """`TTFT p99`: the metric at the SLO's percentile."""
    unit: str
    limit: float
    value: float | None
    passed: bool | None
    """None when the run has no figure for it (no successful request)."""

    @property
    def text(self) -> str:
        if self.value is None:
            return f"{self.label}: no figure (limit {self.limit:g} {self.unit}) — not judged"
        sign = "≤" if self.passed else ">"
        verdict = "PASS" if self.passed else "FAIL"
        figure = f"{self.value:,.1f} {self.unit} {sign} {self.limit:g} {self.unit}"
        return f"{self.label} {figure}: {verdict}"


def slo_checks(result: RunResult) -> list[SloCheck]:
    """Every per-request SLO limit the run's config sets, judged at its percentile with the
    catalogue's rule (`SloBound.broken`): the same rule the ladder's knee and the capacity
    search read."""
    slo = result.config.slo
    checks = []
    for bound in REQUEST_SLO_BOUNDS:
        limit = getattr(slo, bound.field)
        if limit is None:
            continue
        metric = bound.metric_at(slo.percentile)
        value = metric.read(result.summary, result) if result.summary is not None else None
        if value is not None and not math.isfinite(value):
            value = None
        checks.append(
            SloCheck(
                label=metric.label,
                unit=metric.unit,
                limit=float(limit),
                value=value,
                passed=None if value is None else not bound.broken(value, limit),
            )
        )
    return checks


@dataclass(frozen=True)
class ValidityMark:
    """VALID / INVALID (or no verdict for a run that never measured) and why."""

    status: str
    valid: bool | None
    reasons: list[str]
    notes: list[str]
    after_failure: bool = False
    """INVALID because the run failed: its failure (drawn on its own, the one red box) is the
    news; this verdict follows from it and is drawn as a quiet line, its `reasons` the ones
    the failure does not already say."""

    @property
    def text(self) -> str:
        if self.valid is None:
            return "No validity verdict: the run measured nothing"
        if self.valid:
            return "VALID: the run met its duration, request count and error budget"
        if self.after_failure:
            also = f"; also {'; '.join(self.reasons)}" if self.reasons else ""
            return f"INVALID: the run failed (its figures cover what it measured before){also}"
        return "INVALID: " + "; ".join(self.reasons)


def validity_mark(result: RunResult) -> ValidityMark:
    validity = result.validity
    if validity is None:
        return ValidityMark("—", None, [], [])
    valid = validity.status == ValidityStatus.VALID
    reasons = list(validity.reasons)
    after_failure = result.failure is not None and not valid
    if after_failure:
        # Reasons that only repeat the failure: the run's status (bench/run/api.py's
        # "run failed", the store's sweep of a dead runner) or the failure's own cause
        # (a failed analysis, bench/run/api.py's _fail_after_measuring).
        repeats = {f"run {result.status.value.lower()}", "run failed", result.failure.cause}
        reasons = [reason for reason in reasons if reason not in repeats]
    return ValidityMark(validity.status.value, valid, reasons, list(validity.notes), after_failure)


# --------------------------------------------------------------------------- the job's line


@dataclass(frozen=True)
class JobNotice:
    """What the job's head says about how it ended, and how loud: `error` (a red box),
    `warning` (stopped on request) or `caption` (a line, when the run panels say the rest)."""

    level: str
    text: str


def job_notice(
    status: RunStatus, error: str | None, runs: Sequence[JobRunProgress], total: int
) -> JobNotice | None:
    """The job's own message above its runs. A FAILED job whose error is only the job runner's
    summary of its failed runs (bench/orchestrate/job_run.py's `failed_runs_line`, then each
    run's cause) would repeat, in a second red box, the cause each failed run's panel says:
    then the head says only how many failed. Any other error (the runner interrupted, a
    runner that died, a count the panels do not match) is the job's own news: a red box."""
    from bench.orchestrate.job_run import failed_runs_line

    if not error:
        return None
    if status == RunStatus.STOPPED:
        return JobNotice("warning", error)
    failed = [run for run in runs if run.status == RunStatus.FAILED]
    line = failed_runs_line(len(failed), total)
    if (
        status == RunStatus.FAILED
        and failed
        and all(run.error for run in failed)  # each failed run's panel has a cause to say
        and error.startswith(f"{line}: ")
    ):
        below = "its panel below says why" if len(failed) == 1 else "each one's panel says why"
        return JobNotice("caption", f"{line}: {below}.")
    return JobNotice("error", error)


def load_of(configs: Sequence[RunConfig], index: int) -> LoadPattern | None:
    """The load of a job's run `index` (None for an index the job does not have)."""
    return configs[index].load if 0 <= index < len(configs) else None


__all__ = [
    "RATE_WINDOW_S",
    "JobNotice",
    "ProgressLine",
    "SloCheck",
    "ThroughputPoint",
    "ValidityMark",
    "job_notice",
    "load_of",
    "progress_line",
    "slo_checks",
    "throughput_points",
    "validity_mark",
]
