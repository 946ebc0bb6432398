"""After-the-run analysis of soak (steady) and burst (pulse) runs from records and telemetry.

Both reports cut time into windows, compute per-window p99 latency (and memory for steady),
and say in plain fields whether the engine leaked, drifted or recovered.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from bench.core.metrics import NS_PER_MS, NS_PER_S
from bench.core.pattern_reports import (
    PatternReportBase,
    PulseAnalysis,
    PulseReport,
    SlopeFit,
    SoakFits,
    SteadyAnalysis,
    SteadyReport,
)
from bench.core.schema import RequestRecord, TelemetrySample

SIGNIFICANCE_P = 0.01
"""A slope counts only when its linear-regression p-value is below this."""
MATERIAL_GROWTH_FRACTION = 0.05
"""...and when the fitted growth over the whole run is at least this fraction of the fitted
level at the start (memory: a leak; p99 E2E: a latency drift). Only increases are flagged."""
RECOVERY_TOLERANCE = 0.10
"""Pulse: recovered when a window's p99 E2E is within 10% of the baseline p99 (article 3.3)."""
MIN_FIT_WINDOWS = 3
BYTES_PER_MB = 1024 * 1024


def _record_arrays(records: Iterable[RequestRecord]) -> dict[str, np.ndarray]:
    """start/end ns, E2E ms and ok flags of measured records (streamed, not held)."""
    starts: list[int] = []
    ends: list[int] = []
    ok: list[bool] = []
    for record in records:
        if record.warmup:
            continue
        starts.append(record.start_ns)
        ends.append(record.end_ns)
        ok.append(record.error is None)
    start_ns = np.asarray(starts, dtype=np.int64)
    end_ns = np.asarray(ends, dtype=np.int64)
    return {
        "start_ns": start_ns,
        "end_ns": end_ns,
        "e2e_ms": (end_ns - start_ns) / NS_PER_MS,
        "ok": np.asarray(ok, dtype=bool),
    }


def _p99(values: np.ndarray) -> float | None:
    return float(np.percentile(values, 99)) if values.size else None


def _fit(t_hours: np.ndarray, values: np.ndarray, run_hours: float) -> SlopeFit:
    """Least-squares line through (t, value); flagged when significant and material.

    The figures are numpy values; `SlopeFit` turns them into Python values as it validates."""
    from scipy.stats import linregress

    keep = ~np.isnan(values)
    t_hours, values = t_hours[keep], values[keep]
    if values.size < MIN_FIT_WINDOWS or np.ptp(t_hours) == 0:
        return SlopeFit(windows=values.size, flagged=False, note="too few windows to fit")
    if np.ptp(values) == 0:  # a flat line: no slope, nothing to test
        return SlopeFit(
            windows=values.size,
            slope_per_hour=0.0,
            intercept=values[0],
            p_value=1.0,
            projected_change=0.0,
            projected_change_fraction=0.0,
            flagged=False,
        )
    fit = linregress(t_hours, values)
    start_level = fit.intercept + fit.slope * float(t_hours.min())
    change = fit.slope * run_hours
    fraction = change / start_level if start_level > 0 else None
    significant = fit.pvalue < SIGNIFICANCE_P
    material = fraction is not None and fraction >= MATERIAL_GROWTH_FRACTION
    return SlopeFit(
        windows=values.size,
        slope_per_hour=fit.slope,
        intercept=fit.intercept,
        p_value=fit.pvalue,
        r_squared=fit.rvalue**2,
        projected_change=change,
        projected_change_fraction=fraction,
        flagged=significant and material,
    )


def steady_report(
    records: Iterable[RequestRecord], samples: list[TelemetrySample], window_s: float
) -> SteadyAnalysis:
    """Per-window p99 E2E, GPU memory and host RSS of a soak, with slope fits.

    Windows start at the first measured request's start; a request belongs to the window in
    which it ended (its latency is known then); a sample to the window of its `t_ns`. Per window:
    p99 E2E of successful requests, mean GPU memory used (MB; process memory when the device
    figure is missing) and mean host RSS (MB). Each series is fitted against window mid-time in
    hours (scipy.stats.linregress). A series is flagged when p < SIGNIFICANCE_P (0.01) AND the
    fitted growth over the run is >= MATERIAL_GROWTH_FRACTION (5%) of its fitted start level:
    GPU memory or host RSS -> `leak_suspected`; p99 E2E -> `latency_drift`.
    """
    if window_s <= 0:
        raise ValueError("window_s must be > 0")
    data = _record_arrays(records)
    sample_t = np.asarray([sample.t_ns for sample in samples], dtype=np.int64)
    if data["start_ns"].size:
        origin_ns = int(data["start_ns"].min())
        last_ns = int(data["end_ns"].max())
    elif sample_t.size:
        origin_ns, last_ns = int(sample_t.min()), int(sample_t.max())
    else:
        return SteadyAnalysis(window_s=window_s, notes=["no records and no telemetry samples"])
    window_ns = int(window_s * NS_PER_S)
    count = max(1, int((last_ns - origin_ns) // window_ns) + 1)
    record_window = (data["end_ns"] - origin_ns) // window_ns
    sample_window = (sample_t - origin_ns) // window_ns

    def sample_series(attribute: str, fallback: str | None = None) -> np.ndarray:
        values = []
        for sample in samples:
            value = getattr(sample, attribute)
            if value is None and fallback is not None:
                value = getattr(sample, fallback)
            values.append(np.nan if value is None else value / BYTES_PER_MB)
        return np.asarray(values, dtype=np.float64)

    gpu_mb = sample_series("gpu_memory_used_bytes", "process_gpu_memory_bytes")
    rss_mb = sample_series("host_rss_bytes")
    windows: list[dict[str, Any]] = []
    p99_series, gpu_series, rss_series = [], [], []
    for index in range(count):
        in_window = record_window == index
        ok_e2e = data["e2e_ms"][in_window & data["ok"]]
        p99 = _p99(ok_e2e)
        samples_here = sample_window == index

        def window_mean(series: np.ndarray, here: np.ndarray = samples_here) -> float | None:
            values = series[here]
            values = values[~np.isnan(values)]
            return float(values.mean()) if values.size else None

        gpu, rss = window_mean(gpu_mb), window_mean(rss_mb)
        windows.append(
            {
                "t_s": index * window_s,
                "requests": int(in_window.sum()),
                "errors": int((in_window & ~data["ok"]).sum()),
                "p99_e2e_ms": p99,
                "gpu_memory_mb": gpu,
                "host_rss_mb": rss,
            }
        )
        p99_series.append(np.nan if p99 is None else p99)
        gpu_series.append(np.nan if gpu is None else gpu)
        rss_series.append(np.nan if rss is None else rss)
    mid_hours = (np.arange(count) + 0.5) * window_s / 3600
    run_hours = (last_ns - origin_ns) / NS_PER_S / 3600
    # A partial last window holds few requests and would tilt the fit: leave it out.
    full = count if (last_ns - origin_ns) % window_ns == 0 or count == 1 else count - 1
    fits = SoakFits(
        p99_e2e_ms=_fit(mid_hours[:full], np.asarray(p99_series[:full]), run_hours),
        gpu_memory_mb=_fit(mid_hours[:full], np.asarray(gpu_series[:full]), run_hours),
        host_rss_mb=_fit(mid_hours[:full], np.asarray(rss_series[:full]), run_hours),
    )
    notes = []
    if np.isnan(gpu_mb).all():
        notes.append("no GPU memory readings: GPU leak check not possible")
    return SteadyAnalysis(
        window_s=window_s,
        duration_s=(last_ns - origin_ns) / NS_PER_S,
        windows=windows,
        fits=fits,
        leak_suspected=fits.gpu_memory_mb.flagged or fits.host_rss_mb.flagged,
        latency_drift=fits.p99_e2e_ms.flagged,
        rule=f"flag = p < {SIGNIFICANCE_P} and fitted growth over the run >= "
        f"{MATERIAL_GROWTH_FRACTION:.0%} of the start level",
        notes=notes,
    )


def max_in_flight(start_ns: np.ndarray, end_ns: np.ndarray) -> int:
    """Most requests in flight at once (a sweep over start/end events; an end at the same
    instant as a start is processed first)."""
    if start_ns.size == 0:
        return 0
    times = np.concatenate([start_ns, end_ns])
    deltas = np.concatenate([np.ones(start_ns.size, np.int64), -np.ones(end_ns.size, np.int64)])
    order = np.lexsort((deltas, times))  # by time, then -1 before +1
    return int(np.cumsum(deltas[order]).max())


def pulse_report(
    records: Iterable[RequestRecord], burst_start_ns: int, burst_end_ns: int, window_s: float
) -> PulseAnalysis:
    """Errors, peak latency, queue depth and recovery time of a burst.

    Requests are placed by start time (what a request sent then experiences). Baseline =
    successful requests started and ended before the burst; its p99 E2E is the reference.
    Windows of `window_s` tile the time from the burst start on. recovery_s = start of the first
    window after the burst end whose p99 E2E <= (1 + 10%) x baseline p99 and with no failed
    request, measured from the burst end (resolution window_s); None if never (or no baseline).
    Queue depth = requests in flight (sent, not finished), from start/end times.
    """
    if window_s <= 0:
        raise ValueError("window_s must be > 0")
    data = _record_arrays(records)
    start, end, e2e, ok = data["start_ns"], data["end_ns"], data["e2e_ms"], data["ok"]
    before = start < burst_start_ns
    during = (start >= burst_start_ns) & (start < burst_end_ns)
    after = start >= burst_end_ns
    baseline = before & ok & (end <= burst_start_ns)
    baseline_p99 = _p99(e2e[baseline])
    window_ns = int(window_s * NS_PER_S)
    windows: list[dict[str, Any]] = []
    recovery_s: float | None = None
    from_burst = start >= burst_start_ns
    if from_burst.any():
        last_start = int(start[from_burst].max())
        count = int((last_start - burst_start_ns) // window_ns) + 1
        index_of = (start - burst_start_ns) // window_ns
        for index in range(count):
            window_start_ns = burst_start_ns + index * window_ns
            here = from_burst & (index_of == index)
            p99 = _p99(e2e[here & ok])
            errors = int((here & ~ok).sum())
            windows.append(
                {
                    "t_s": index * window_s,
                    "requests": int(here.sum()),
                    "errors": errors,
                    "p99_e2e_ms": p99,
                    "in_burst": window_start_ns < burst_end_ns,
                }
            )
            if (
                recovery_s is None
                and window_start_ns >= burst_end_ns
                and baseline_p99 is not None
                and p99 is not None
                and errors == 0
                and p99 <= (1 + RECOVERY_TOLERANCE) * baseline_p99
            ):
                recovery_s = (window_start_ns - burst_end_ns) / NS_PER_S
    window_p99s = [w["p99_e2e_ms"] for w in windows if w["p99_e2e_ms"] is not None]
    burst_mask = during
    return PulseAnalysis(
        window_s=window_s,
        burst_s=(burst_end_ns - burst_start_ns) / NS_PER_S,
        baseline_requests=before.sum(),
        baseline_p99_e2e_ms=baseline_p99,
        errors_before_burst=(before & ~ok).sum(),
        errors_during_burst=(during & ~ok).sum(),
        errors_after_burst=(after & ~ok).sum(),
        peak_window_p99_e2e_ms=max(window_p99s) if window_p99s else None,
        peak_e2e_ms=e2e[from_burst & ok].max() if (from_burst & ok).any() else None,
        max_queue_depth=max_in_flight(start, end),
        max_queue_depth_burst=max_in_flight(start[burst_mask], end[burst_mask]),
        recovery_s=recovery_s,
        recovered=recovery_s is not None,
        rule=f"recovered = first window after the burst with p99 E2E within "
        f"{RECOVERY_TOLERANCE:.0%} of baseline and no errors",
        windows=windows,
    )


def finish_pattern_report(
    report: PatternReportBase,
    records: Iterable[RequestRecord],
    samples: list[TelemetrySample],
) -> PatternReportBase:
    """The runner's report with the steady or pulse analysis added (other patterns, and a held
    load whose phase never ran, come back unchanged).

    `records` may be every record of the run: only those of the analysed phase are used.
    """
    if (
        isinstance(report, SteadyReport)
        and report.steady_start_ns is not None
        and report.steady_end_ns is not None
        and report.window_s is not None
    ):
        steady = (r for r in records if r.phase == "steady")
        start, end = report.steady_start_ns, report.steady_end_ns
        in_phase = [s for s in samples if start <= s.t_ns <= end + int(report.window_s * 1e9)]
        analysis = steady_report(steady, in_phase, report.window_s)
        return report.model_copy(update={"analysis": analysis})
    if (
        isinstance(report, PulseReport)
        and report.burst_start_ns is not None
        and report.burst_end_ns is not None
        and report.window_s is not None
    ):
        pulse = (r for r in records if r.phase.startswith("pulse-"))
        analysis = pulse_report(pulse, report.burst_start_ns, report.burst_end_ns, report.window_s)
        return report.model_copy(update={"analysis": analysis})
    return report
