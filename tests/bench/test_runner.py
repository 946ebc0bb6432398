"""The in-process run loop end to end with the fake backend (a test double), in virtual time."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from bench.core.clock import CLOCK
from bench.core.config import (
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    PulseLoad,
    RateLoad,
    RunConfig,
    SteadyLoad,
    StepLoad,
)
from bench.core.metrics import DEADLINE_REACHED
from bench.core.progress import RunProgress
from bench.core.schema import ModelInfo, TelemetrySample
from bench.engines.backends.fake import FakeBackend
from bench.run.load.analysis import finish_pattern_report
from bench.run.runner import RunEvents, execute

MODEL = ModelInfo(name="tiny", path="tiny", vocab_size=1000)
PROGRESS_FIELDS = {  # the run-loop fields every snapshot fills (the rest are launch's)
    "phase",
    "phases_total",
    "completed",
    "failed",
    "elapsed_s",
    "phase_elapsed_s",
    "output_tokens",
    "in_flight",
    "run_completed",
    "run_failed",
}


class Collected:
    def __init__(self) -> None:
        self.records = []
        self.phases = []
        self.progress = []
        self.events = RunEvents(
            on_record=self.records.append,
            on_phase=self.phases.append,
            on_progress=lambda p: self.progress.append((CLOCK.now_ns(), p)),
        )


async def run(load, engine_args=None, output_tokens=11, stop=None, workload=None):
    config = RunConfig(
        backend="fake",
        model="tiny",
        engine_args=engine_args or {"ttft_s": 0.1, "itl_s": 0.01},
        workload=workload or GenerateWorkload(output_tokens=LengthDistribution(mean=output_tokens)),
        load=load,
    )
    backend = FakeBackend(config.engine_args)
    await backend.load(MODEL, config.workload, config.precision, "cpu")
    collected = Collected()
    outcome = await execute(config, backend, MODEL, collected.events, stop or asyncio.Event())
    return outcome, collected


async def test_concurrency_run_with_warmup_and_progress(time_travel):
    load = ConcurrencyLoad(concurrency=4, duration_s=10, warmup_requests=3)
    outcome, got = await run(load)
    warmups = [r for r in got.records if r.warmup]
    assert len(warmups) == 3 and {r.phase for r in warmups} == {"warmup"}
    # Three 0.2 s requests in flight together (the closed loop's concurrency is 4).
    assert outcome.warmup_s == pytest.approx(0.2)
    assert len({r.start_ns for r in warmups}) == 1
    assert [p.name for p in got.phases] == ["concurrency"] == [p.name for p in outcome.phases]
    summary = outcome.phases[0].summary
    assert summary.requests == 200 == len(got.records) - 3  # warm-up not measured
    assert summary.e2e_ms.p99 == pytest.approx(200)
    assert outcome.summary == summary
    assert outcome.pattern_report.pattern == "concurrency"
    # Progress: the run-loop fields, at least once a second of (virtual) time, all run long.
    times = [t for t, _ in got.progress]
    assert all(isinstance(p, RunProgress) and p.stage == "running" for _, p in got.progress)
    assert all(p.model_dump(exclude_none=True).keys() >= PROGRESS_FIELDS for _, p in got.progress)
    assert max(b - a for a, b in itertools.pairwise(times)) <= 1_000_000_000
    assert got.progress[0][1].phase == "warmup"
    assert got.progress[0][1].phase_index is None
    measured = [p for _, p in got.progress if p.phase == "concurrency"]
    assert all(p.phase_index == 0 and p.phase_duration_s == 10 for p in measured)
    assert measured[0].phases_total == 1
    assert measured[-1].run_completed == 200
    assert any(p.in_flight == 4 for p in measured)
    assert measured[-1].elapsed_s == pytest.approx(10.2)


def test_warmup_concurrency_follows_the_closed_loop_and_is_sequential_for_open_loops():
    assert ConcurrencyLoad(concurrency=64, warmup_requests=64).warmup_concurrency() == 64
    assert ConcurrencyLoad(concurrency=4, warmup_requests=8).warmup_concurrency() == 4
    assert ConcurrencyLoad(concurrency=64, warmup_requests=2).warmup_concurrency() == 2
    assert StepLoad(start=10, warmup_requests=4).warmup_concurrency() == 4
    assert StepLoad(levels=[1, 16], warmup_requests=4).warmup_concurrency() == 1
    assert RateLoad(rate_rps=50, warmup_requests=8).warmup_concurrency() == 1


async def test_step_run_reports_knee(time_travel):
    load = StepLoad(start=10, step=10, max=100, stage_duration_s=10, warmup_requests=0)
    outcome, got = await run(load, {"ttft_s": 0.1, "max_parallel": 25}, output_tokens=1)
    report = outcome.pattern_report
    assert [p.name for p in got.phases] == ["step-c10", "step-c20", "step-c30", "step-c40"]
    assert report.knee_concurrency == 40 and report.capacity_concurrency == 30
    assert set(report.phase_windows) == {p.name for p in got.phases}
    assert outcome.summary.requests == sum(p.summary.requests for p in got.phases)


async def test_rate_run_reports_harness_lag(time_travel):
    load = RateLoad(rate_rps=50, duration_s=4, warmup_requests=1)
    outcome, got = await run(load)
    assert outcome.scheduling_lag_ms["rate"]["p99"] == 0  # virtual time: exact sends
    assert all(r.scheduled_ns is not None for r in got.records if not r.warmup)


async def test_pulse_run_and_analysis(time_travel):
    # Capacity given as 100 req/s; the fake serves 10 at a time, 0.1 s each = 100 req/s, so
    # the 2x burst builds a queue that the 50 req/s recovery drains.
    load = PulseLoad(
        capacity_rps=100, baseline_s=10, burst_s=3, recovery_s=20, window_s=1, warmup_requests=0
    )
    outcome, got = await run(load, {"ttft_s": 0.1, "max_parallel": 10}, output_tokens=1)
    report = outcome.pattern_report
    assert [p.name for p in got.phases] == ["pulse-baseline", "pulse-burst", "pulse-recovery"]
    burst = got.phases[1]
    assert (report.burst_start_ns, report.burst_end_ns) == (
        burst.start_ns,
        burst.start_ns + 3_000_000_000,
    )
    assert len(got.records) == sum(p.summary.requests for p in got.phases)
    finished = finish_pattern_report(report, got.records, [])
    analysis = finished.analysis
    assert analysis.baseline_p99_e2e_ms == pytest.approx(100, rel=0.1)  # Poisson: rare waits
    assert analysis.peak_e2e_ms > 1000  # ~300 queued requests at 100 req/s
    assert analysis.max_queue_depth > 100
    assert analysis.recovery_s is not None and 0 < analysis.recovery_s < 20


async def test_steady_run_measures_capacity_then_soaks(time_travel, monkeypatch):
    monkeypatch.setattr("bench.run.load.patterns.CAPACITY_STAGE_S", 5.0)
    load = SteadyLoad(fraction=0.5, duration_s=120, window_s=10, warmup_requests=0)
    outcome, got = await run(load, {"ttft_s": 0.1, "max_parallel": 8}, output_tokens=1)
    report = outcome.pattern_report
    names = [p.name for p in got.phases]
    assert names[:4] == ["capacity-c1", "capacity-c2", "capacity-c4", "capacity-c8"]
    assert names[-1] == "steady" and report.capacity_ladder.capacity_concurrency == 8
    assert report.capacity_rps == pytest.approx(80, rel=0.02)
    assert report.rate_rps == pytest.approx(40, rel=0.02)
    assert got.phases[-1].summary.request_throughput_rps == pytest.approx(40, rel=0.15)
    samples = [
        TelemetrySample(t_ns=report.steady_start_ns + i * 1_000_000_000, host_rss_bytes=2**30)
        for i in range(120)
    ]
    analysis = finish_pattern_report(report, got.records, samples).analysis
    assert len(analysis.windows) >= 12 and analysis.leak_suspected is False


async def test_max_duration_is_a_hard_bound(time_travel):
    load = ConcurrencyLoad(concurrency=2, duration_s=60, max_duration_s=5, warmup_requests=0)
    outcome, got = await run(load, {"ttft_s": 2.0})
    assert outcome.deadline_reached and not outcome.stopped
    assert outcome.pattern_report.incomplete == "max_duration_s reached"
    assert sorted(r.error or "ok" for r in got.records) == ["ok"] * 4 + [DEADLINE_REACHED] * 2
    assert max(r.end_ns for r in got.records) - min(r.start_ns for r in got.records) == 5 * 10**9


async def test_stop_ends_the_run(time_travel):
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(3.05, stop.set)
    load = StepLoad(start=1, step=1, max=5, stage_duration_s=2, warmup_requests=0)
    outcome, got = await run(load, {"ttft_s": 0.1}, output_tokens=1, stop=stop)
    assert outcome.stopped and outcome.pattern_report.incomplete == "stopped"
    assert [p.name for p in got.phases] == ["step-c1", "step-c2"]
    assert [r.error for r in got.records].count("stopped") == 2


class BatchPreparingFake(FakeBackend):
    """TEST DOUBLE: the fake backend with a batch `prepare_requests` (as the openai backend has)
    that notes when and how many requests it prepared."""

    def __init__(self, engine_args=None) -> None:
        super().__init__(engine_args)
        self.batches: list[tuple[int, int]] = []  # (clock ns, requests)
        self.singles = 0

    def prepare_requests(self, requests):
        self.batches.append((CLOCK.now_ns(), len(requests)))
        return list(requests)

    def prepare_request(self, request):
        self.singles += 1
        return request


async def test_phase_requests_are_prepared_before_the_phase_clock_starts(time_travel):
    config = RunConfig(
        backend="fake",
        model="tiny",
        engine_args={"ttft_s": 0.1, "itl_s": 0.01},
        workload=GenerateWorkload(output_tokens=LengthDistribution(mean=5)),
        load=ConcurrencyLoad(concurrency=8, max_requests=40, warmup_requests=3),
    )
    backend = BatchPreparingFake(config.engine_args)
    await backend.load(MODEL, config.workload, config.precision, "cpu")
    got = Collected()
    outcome = await execute(config, backend, MODEL, got.events, asyncio.Event())
    assert [count for _, count in backend.batches] == [3, 40]  # warm-up, then the phase
    assert backend.singles == 0  # nothing prepared one at a time inside a phase
    phase_start = outcome.phases[0].start_ns
    assert backend.batches[1][0] <= phase_start
    assert len([r for r in got.records if not r.warmup]) == 40


async def test_conversations_are_not_prepared_ahead(time_travel):
    from bench.core.config import ConversationSpec

    config = RunConfig(
        backend="fake",
        model="tiny",
        engine_args={"ttft_s": 0.01, "itl_s": 0.001},
        workload=GenerateWorkload(
            output_tokens=LengthDistribution(mean=3),
            conversation=ConversationSpec(turns=LengthDistribution(mean=2)),
        ),
        load=ConcurrencyLoad(concurrency=2, max_requests=6, warmup_requests=0),
    )
    backend = BatchPreparingFake(config.engine_args)
    await backend.load(MODEL, config.workload, config.precision, "cpu")
    got = Collected()
    await execute(config, backend, MODEL, got.events, asyncio.Event())
    assert backend.batches == [] and backend.singles == 6
