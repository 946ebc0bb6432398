"""Load patterns as phase generators: knee rules on synthetic summaries and on a saturating fake."""

from __future__ import annotations

import pytest

from bench.core.config import (
    SLO,
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    Precision,
    PulseLoad,
    RateLoad,
    SteadyLoad,
    StepLoad,
    ValidityRules,
)
from bench.core.schema import MetricsSummary, ModelInfo, Percentiles
from bench.engines.backends.fake import FakeBackend
from bench.run.load.driver import run_phase
from bench.run.load.patterns import CAPACITY_LADDER, plan, slo_breaches
from bench.run.workload import RequestFactory

RULES = ValidityRules(max_error_rate=0.01)


def summary(rps: float, tokens_per_request: int = 10, p99_e2e: float = 100.0, errors: float = 0):
    latency = Percentiles(mean=p99_e2e / 2, p50=p99_e2e / 2, p90=p99_e2e, p99=p99_e2e)
    return MetricsSummary(
        requests=100,
        successful=round(100 * (1 - errors)),
        failed=round(100 * errors),
        duration_s=10,
        request_throughput_rps=rps,
        output_throughput_tok_s=rps * tokens_per_request,
        error_rate=errors,
        ttft_ms=latency,
        e2e_ms=latency,
    )


def drive(generator, summaries):
    """Feed summaries to a plan; return (specs, report)."""
    specs = []
    feed = iter(summaries)
    try:
        spec = next(generator)
        while True:
            specs.append(spec)
            spec = generator.send(next(feed))
    except StopIteration as finished:
        return specs, finished.value


def test_single_phase_patterns():
    specs, report = drive(
        plan(ConcurrencyLoad(concurrency=7, duration_s=5), SLO(), RULES), [summary(1)]
    )
    assert [(s.strategy, s.target, s.duration_s) for s in specs] == [("concurrency", 7, 5)]
    assert report.pattern == "concurrency"
    load = RateLoad(rate_rps=3, arrival="constant", seed=9, max_concurrency=4)
    specs, report = drive(plan(load, SLO(), RULES), [summary(1)])
    assert (specs[0].strategy, specs[0].target, specs[0].arrival) == ("rate", 3, "constant")
    assert (specs[0].seed, specs[0].max_concurrency) == (9, 4)


def test_step_knee_on_throughput_gain():
    load = StepLoad(start=10, step=10, max=60, stage_duration_s=5)
    rps = [100, 200, 250, 255, 300, 300]  # 255 vs 250 is a 2% gain: the knee
    specs, report = drive(plan(load, SLO(), RULES), [summary(r) for r in rps])
    assert [s.target for s in specs] == [10, 20, 30, 40]  # stop_at_knee
    assert [s.name for s in specs][:2] == ["step-c10", "step-c20"]
    assert report.knee_stage == 3 and report.knee_concurrency == 40
    assert report.capacity_concurrency == 30 and report.capacity_rps == 250
    assert report.stages[1].gain == pytest.approx(1.0)
    assert "throughput gain 2.0% < 5%" in report.knee_reasons[0]
    assert report.capacity_is_lower_bound is False


def test_step_knee_on_slo_and_errors():
    load = StepLoad(start=1, step=1, max=5, stage_duration_s=5)
    slo = SLO(e2e_ms=500)
    stages = [summary(10), summary(20), summary(30, p99_e2e=650), summary(40)]
    specs, report = drive(plan(load, slo, RULES), stages)
    assert [s.target for s in specs] == [1, 2, 3]  # stopped at the knee
    assert report.knee_concurrency == 3 and report.capacity_concurrency == 2
    assert report.knee_reasons == ["p99 e2e 650.0 ms > SLO 500 ms"]
    stages = [summary(10), summary(20, errors=0.05)]
    _, report = drive(plan(load, SLO(), RULES), stages)
    assert report.knee_concurrency == 2 and report.capacity_rps == 10
    assert "error rate 5.00% > budget 1.00%" in report.knee_reasons
    # A knee at the very first stage leaves no capacity.
    _, report = drive(plan(load, slo, RULES), [summary(10, p99_e2e=900)])
    assert report.knee_stage == 0 and report.capacity_rps is None


def test_step_without_knee_and_without_stop():
    load = StepLoad(start=10, step=10, max=30, stage_duration_s=5, stop_at_knee=False)
    assert load.phase_count() == 3
    specs, report = drive(plan(load, SLO(), RULES), [summary(1), summary(2), summary(3)])
    assert len(specs) == 3 and report.knee_stage is None
    assert report.capacity_concurrency == 30 and report.capacity_is_lower_bound is True
    specs, report = drive(plan(load, SLO(), RULES), [summary(1), summary(1), summary(3)])
    assert len(specs) == 3 and report.knee_concurrency == 20  # climbed on, knee kept


def test_slo_breaches_rule():
    assert slo_breaches(summary(1), SLO(ttft_ms=200, tpot_ms=1, e2e_ms=200), RULES) == []
    assert slo_breaches(summary(1, errors=1.0), SLO(), RULES) == ["no successful requests"]


def test_steady_with_given_capacity():
    load = SteadyLoad(capacity_rps=50, fraction=0.8, duration_s=120, window_s=10)
    assert load.phase_count() == 1
    specs, report = drive(plan(load, SLO(), RULES), [summary(40)])
    assert [(s.name, s.strategy, s.target, s.duration_s) for s in specs] == [
        ("steady", "rate", 40, 120)
    ]
    assert report.capacity_source == "config" and report.rate_rps == 40


def test_steady_measures_capacity_first():
    load = SteadyLoad(fraction=0.5, duration_s=60)
    assert load.phase_count() is None
    # Throughput doubles up to concurrency 8, then flat: knee at 16, capacity at 8 (80 req/s).
    ladder = [summary(10), summary(20), summary(40), summary(80), summary(81)]
    specs, report = drive(plan(load, SLO(), RULES), [*ladder, summary(40)])
    assert [s.target for s in specs[:5]] == list(CAPACITY_LADDER[:5])
    assert specs[0].name == "capacity-c1"
    assert specs[-1].name == "steady" and specs[-1].target == pytest.approx(40)
    assert report.capacity_source == "capacity ladder" and report.capacity_rps == 80
    assert report.capacity_ladder.capacity_concurrency == 8


def test_pulse_phases():
    load = PulseLoad(capacity_rps=100, baseline_s=5, burst_s=2, recovery_s=8)
    specs, report = drive(plan(load, SLO(), RULES), [summary(50), summary(90), summary(50)])
    assert [(s.name, s.target, s.duration_s, s.drain) for s in specs] == [
        ("pulse-baseline", 50, 5, False),
        ("pulse-burst", 200, 2, False),
        ("pulse-recovery", 50, 8, True),
    ]
    assert report.burst_rps == 200 and report.baseline_rps == 50


async def test_step_finds_the_knee_of_a_saturating_fake(time_travel):
    # Each request takes 0.1 s and the fake serves 25 at a time: 10 in flight -> 100 req/s,
    # 20 -> 200, 30 -> 250 (saturated), 40 -> 250 (gain 0): knee at 40, capacity 30.
    backend = FakeBackend({"ttft_s": 0.1, "max_parallel": 25})
    model = ModelInfo(name="tiny", path="tiny", vocab_size=1000)
    workload = GenerateWorkload(output_tokens=LengthDistribution(mean=1))
    await backend.load(model, workload, Precision(), "cpu")
    requests = RequestFactory(workload, 1000)
    generator = plan(StepLoad(start=10, step=10, max=100, stage_duration_s=20), SLO(), RULES)
    spec = next(generator)
    try:
        while True:
            outcome = await run_phase(spec, backend.stream, requests, lambda r: None, 30)
            spec = generator.send(outcome.summary())
    except StopIteration as finished:
        report = finished.value
    throughput = [stage.request_throughput_rps for stage in report.stages]
    # Saturated stages drain a queue past the stage end, hence approx.
    assert throughput == pytest.approx([100, 200, 250, 250], rel=0.01)
    assert report.knee_concurrency == 40
    assert report.capacity_concurrency == 30
    assert report.capacity_rps == pytest.approx(250, rel=0.01)
