"""Soak and burst analysis on synthetic records and telemetry samples (known answers)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.core.pattern_reports import (
    PulseAnalysis,
    PulseReport,
    SlopeFit,
    SteadyAnalysis,
    SteadyReport,
    StepReport,
)
from bench.core.schema import TelemetrySample
from bench.run.load.analysis import (
    finish_pattern_report,
    max_in_flight,
    pulse_report,
    steady_report,
)
from tests.conftest import make_record

S_NS = 1_000_000_000
MB = 1024 * 1024


def soak_records(duration_s: int, e2e_ms=lambda t: 100.0, every_s: float = 1.0):
    records = []
    for index, t in enumerate(np.arange(0, duration_s, every_s)):
        start_ms = t * 1000
        e2e = e2e_ms(t)
        records.append(make_record(f"r{index}", start_ms, [start_ms + e2e / 2], start_ms + e2e))
    return records


def soak_samples(duration_s: int, rss_mb=lambda t: 1000.0, gpu_mb=lambda t: 5000.0, seed=0):
    rng = np.random.default_rng(seed)
    return [
        TelemetrySample(
            t_ns=int(t * S_NS),
            host_rss_bytes=int((rss_mb(t) + rng.normal(0, 2)) * MB),
            gpu_memory_used_bytes=int((gpu_mb(t) + rng.normal(0, 2)) * MB),
        )
        for t in np.arange(0, duration_s, 5.0)
    ]


def test_steady_flags_a_host_memory_leak():
    # RSS grows 1000 -> 1100 MB over the hour (10%): significant and material.
    records = soak_records(3600)
    samples = soak_samples(3600, rss_mb=lambda t: 1000 + 100 * t / 3600)
    report = steady_report(records, samples, window_s=60)
    assert len(report.windows) == 60
    rss = report.fits.host_rss_mb
    assert rss.flagged and rss.p_value < 1e-10
    assert rss.slope_per_hour == pytest.approx(100, rel=0.05)
    assert rss.projected_change_fraction == pytest.approx(0.1, rel=0.1)
    assert not report.fits.gpu_memory_mb.flagged
    assert report.leak_suspected is True and report.latency_drift is False
    assert report.windows[0].p99_e2e_ms == pytest.approx(100)
    assert report.windows[0].requests == 60


def test_steady_no_leak_and_immaterial_growth():
    records = soak_records(3600)
    flat = steady_report(records, soak_samples(3600), window_s=60)
    assert flat.leak_suspected is False
    # 1% growth with tiny noise: statistically significant but below the 5% materiality bar.
    small = steady_report(records, soak_samples(3600, gpu_mb=lambda t: 5000 + 50 * t / 3600), 60)
    gpu = small.fits.gpu_memory_mb
    assert gpu.p_value < 0.01 and not gpu.flagged
    assert small.leak_suspected is False


def test_steady_latency_drift_and_missing_gpu():
    records = soak_records(1800, e2e_ms=lambda t: 100 + 100 * t / 1800)
    samples = [
        TelemetrySample(t_ns=int(t * S_NS), host_rss_bytes=500 * MB) for t in range(0, 1800, 5)
    ]
    report = steady_report(records, samples, window_s=60)
    assert report.latency_drift is True
    assert report.fits.p99_e2e_ms.slope_per_hour == pytest.approx(200, rel=0.05)
    assert report.fits.host_rss_mb.flagged is False  # flat line
    assert report.fits.gpu_memory_mb.note == "too few windows to fit"
    assert "no GPU memory readings" in report.notes[0]


def test_steady_too_short_and_empty():
    assert steady_report([], [], 10).windows == []
    short = steady_report(soak_records(20), soak_samples(20), window_s=10)
    assert short.fits.p99_e2e_ms.note == "too few windows to fit"


def pulse_records():
    """Baseline 0-10 s (100 ms latency), burst 10-12 s with a queue, recovery by 14 s."""
    records = []

    def add(start_s: float, e2e_ms: float, error: str | None = None):
        start_ms = start_s * 1000
        chunks = [] if error else [start_ms + e2e_ms]
        records.append(
            make_record(f"r{len(records)}", start_ms, chunks, start_ms + e2e_ms, error=error)
        )

    for t in np.arange(0, 10, 0.1):
        add(t, 100)
    for index, t in enumerate(np.arange(10, 12, 0.02)):
        add(t, 100 + (t - 10) * 400, error="overloaded" if index % 20 == 0 else None)
    for t in np.arange(12, 20, 0.1):
        add(t, max(105.0, 900 - (t - 12) * 400))
    return records


def test_pulse_recovery_errors_and_queue_depth():
    records = pulse_records()
    report = pulse_report(records, 10 * S_NS, 12 * S_NS, window_s=1.0)
    assert report.baseline_p99_e2e_ms == pytest.approx(100)
    assert report.errors_during_burst == 5
    assert report.errors_before_burst == 0 and report.errors_after_burst == 0
    # Windows from the burst start: [12,13) and [13,14) are still slow, [14,15) is at 105 ms.
    assert report.recovery_s == pytest.approx(2.0)
    assert report.recovered is True
    assert report.peak_e2e_ms == pytest.approx(900, abs=10)
    assert report.peak_window_p99_e2e_ms > 800
    starts = np.array([r.start_ns for r in records])
    ends = np.array([r.end_ns for r in records])
    brute = max(int(((starts <= t) & (ends > t)).sum()) for t in starts)
    assert report.max_queue_depth == brute == 33  # started after 11.34 s, still running at 12 s
    assert [w.in_burst for w in report.windows[:3]] == [True, True, False]


def test_pulse_never_recovers():
    records = [r for r in pulse_records() if r.start_ns < 12 * S_NS]
    records.append(make_record("late", 13_000, [13_500], 14_000))  # 1 s latency, not recovered
    report = pulse_report(records, 10 * S_NS, 12 * S_NS, window_s=1.0)
    assert report.recovery_s is None and report.recovered is False


def test_max_in_flight_end_before_start_at_same_instant():
    assert max_in_flight(np.array([0, 10]), np.array([10, 20])) == 1
    assert max_in_flight(np.array([], dtype=np.int64), np.array([], dtype=np.int64)) == 0


def test_finish_pattern_report_dispatches():
    records = [r.model_copy(update={"phase": "pulse-burst"}) for r in pulse_records()]
    report = PulseReport(burst_start_ns=10 * S_NS, burst_end_ns=12 * S_NS, window_s=1.0)
    finished = finish_pattern_report(report, records, [])
    assert isinstance(finished, PulseReport)
    assert finished.analysis.recovery_s == pytest.approx(2.0)
    soak = [r.model_copy(update={"phase": "steady"}) for r in soak_records(600)]
    report = SteadyReport(steady_start_ns=0, steady_end_ns=600 * S_NS, window_s=60.0)
    finished = finish_pattern_report(report, soak, soak_samples(600))
    assert len(finished.analysis.windows) == 10
    step = StepReport()
    assert finish_pattern_report(step, [], []) is step
    # A held load whose phase never ran (no capacity) has nothing to analyse.
    assert finish_pattern_report(SteadyReport(window_s=60.0), soak, []).analysis is None


def test_fits_are_python_values_that_serialise():
    """The soak fits were numpy values (numpy.bool `flagged`): the run was lost at
    serialisation (issue 21). Flagged and unflagged fits come back as Python values."""
    records = soak_records(1800, e2e_ms=lambda t: 100 + 100 * t / 1800)
    samples = soak_samples(1800, rss_mb=lambda t: 1000 + 100 * t / 1800)
    report = steady_report(records, samples, window_s=60)
    for fit in (report.fits.p99_e2e_ms, report.fits.host_rss_mb, report.fits.gpu_memory_mb):
        assert type(fit.flagged) is bool
        assert all(type(v) is float for v in (fit.p_value, fit.slope_per_hour, fit.intercept))
    assert report.fits.host_rss_mb.flagged and not report.fits.gpu_memory_mb.flagged
    assert SteadyAnalysis.model_validate_json(report.model_dump_json()) == report
    pulse = pulse_report(pulse_records(), 10 * S_NS, 12 * S_NS, window_s=1.0)
    assert type(pulse.peak_e2e_ms) is float and type(pulse.baseline_requests) is int
    assert PulseAnalysis.model_validate_json(pulse.model_dump_json()) == pulse


def test_report_models_convert_numpy_at_the_boundary():
    fit = SlopeFit(windows=np.int64(4), flagged=np.bool_(True), p_value=np.float64(0.001))
    assert (type(fit.windows), type(fit.flagged), type(fit.p_value)) == (int, bool, float)
    stage = StepReport(phase_windows={"step-c1": np.array([1, 2])}).phase_windows["step-c1"]
    assert stage == [1, 2] and all(type(v) is int for v in stage)
