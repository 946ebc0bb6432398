"""Intervals and verdicts (bench/core/stats.py) on runs of the fake backend (a labelled TEST DOUBLE)
driven by the real load driver under virtual time, so every timestamp is exact and the fake's
seeded jitter gives a known true distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.core.config import (
    GenerateWorkload,
    LengthDistribution,
    Precision,
    RunConfig,
    ValidityRules,
)
from bench.core.metrics import judge_validity, min_samples, percentile_notes, summarize
from bench.core.schema import ModelInfo, RunResult, RunStatus
from bench.core.stats import (
    Interval,
    compare_samples,
    judge,
    relative_width,
    run_sample,
    summarize_group,
)
from bench.engines.backends.fake import FakeBackend
from bench.run.load.driver import PhaseSpec, run_phase
from bench.run.workload import RequestFactory

MODEL = ModelInfo(name="tiny", path="tiny", vocab_size=1000)
TTFT_S = 0.05
JITTER_S = 0.02
TRUE_TTFT_P50_MS = (TTFT_S + JITTER_S / 2) * 1000  # median of TTFT_S + U(0, JITTER_S)
TRUE_TTFT_P90_MS = (TTFT_S + 0.9 * JITTER_S) * 1000


async def fake_run(requests: int, seed: int, slowdown: float = 1.0, concurrency: int = 1):
    """One run of the fake backend: (RunResult with the real summary, its records)."""
    options = {
        "ttft_s": TTFT_S * slowdown,
        "itl_s": 0.002 * slowdown,
        "ttft_jitter_s": JITTER_S * slowdown,
        "seed": seed,
    }
    backend = FakeBackend(options)
    await backend.load(MODEL, GenerateWorkload(), Precision(), "cpu")
    workload = GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=8)
    )
    records = []
    spec = PhaseSpec("c", "concurrency", concurrency, None, max_requests=requests)
    await run_phase(spec, backend.stream, RequestFactory(workload, 1000, seed), records.append, 30)
    config = RunConfig(backend="fake", model="tiny", engine_args=options)
    result = RunResult(config=config, status=RunStatus.COMPLETED, summary=summarize(records))
    return result, records


async def sample(requests: int, seed: int, **kwargs):
    result, records = await fake_run(requests, seed, **kwargs)
    return run_sample(result, records)


async def test_single_run_interval_covers_the_known_median_and_shrinks(time_travel):
    small = summarize_group([await sample(100, seed=1)])
    large = summarize_group([await sample(1600, seed=1)])
    for summary in (small, large):
        p50 = summary.metric("ttft_ms_p50")
        assert p50.interval.low <= TRUE_TTFT_P50_MS <= p50.interval.high
        rate = summary.metric("output_throughput_tok_s")  # blocks average to the run's figure
        assert rate.interval.low < rate.value < rate.interval.high
        assert summary.single_run and summary.notes[0].startswith("single run")
    width_small = small.metric("ttft_ms_p50").interval
    width_large = large.metric("ttft_ms_p50").interval
    # 16x the requests: about a quarter of the width (1/sqrt(16)); allow up to a half.
    assert (width_large.high - width_large.low) < 0.5 * (width_small.high - width_small.low)


async def test_intervals_cover_the_true_value_at_about_their_level(time_travel):
    """Over 20 independent seeded runs, the 95% interval of TTFT p50 and p90 should miss the
    true value rarely (expected ~1 miss each; 4 or more would mean the method is too narrow)."""
    misses = {"ttft_ms_p50": 0, "ttft_ms_p90": 0}
    truth = {"ttft_ms_p50": TRUE_TTFT_P50_MS, "ttft_ms_p90": TRUE_TTFT_P90_MS}
    for seed in range(20):
        summary = summarize_group(
            [await sample(200, seed=100 + seed)], bootstrap=400, seed=seed, metrics=list(truth)
        )
        for name, value in truth.items():
            interval = summary.metric(name).interval
            misses[name] += not (interval.low <= value <= interval.high)
    assert misses["ttft_ms_p50"] <= 3 and misses["ttft_ms_p90"] <= 3, misses


async def test_repeats_use_the_two_level_bootstrap(time_travel):
    repeats = [await sample(150, seed=seed) for seed in (1, 2, 3)]
    summary = summarize_group(repeats, group_id="grp-test")
    assert summary.repeats == 3 and not summary.single_run
    assert "two-level" in summary.method
    estimate = summary.metric("ttft_ms_p50")
    assert estimate.value == pytest.approx(float(np.median(estimate.run_values)))
    assert estimate.cv is not None and 0 < estimate.cv < 0.1
    assert estimate.interval.low <= estimate.value <= estimate.interval.high
    assert estimate.interval.low <= TRUE_TTFT_P50_MS <= estimate.interval.high
    # Reproducible: same seed, same interval.
    again = summarize_group(repeats, group_id="grp-test")
    assert again.metric("ttft_ms_p50").interval == estimate.interval


async def test_identical_configs_indistinguishable_and_20_percent_slower_significant(
    time_travel,
):
    a = [await sample(120, seed=seed, concurrency=4) for seed in (1, 2, 3)]
    same = [await sample(120, seed=seed, concurrency=4) for seed in (4, 5, 6)]
    slower = [await sample(120, seed=seed, slowdown=1.2, concurrency=4) for seed in (7, 8, 9)]

    names = ["output_throughput_tok_s", "ttft_ms_p50", "tpot_ms_p50", "e2e_ms_p50"]
    twin = compare_samples(a, same, bootstrap=500, metrics=names)
    for name in names:
        row = twin.metric(name)
        assert row.verdict == "indistinguishable" and not row.significant, row

    versus = compare_samples(a, slower, bootstrap=500, metrics=names)
    throughput = versus.metric("output_throughput_tok_s")
    assert throughput.verdict == "faster" and throughput.significant
    assert throughput.interval.low > 1.05
    assert throughput.ratio == pytest.approx(1.2, rel=0.05)
    ttft = versus.metric("ttft_ms_p50")
    assert ttft.verdict == "faster" and ttft.interval.high < 1 / 1.05
    mirrored = compare_samples(slower, a, bootstrap=500, metrics=names)
    mirrored = mirrored.metric("output_throughput_tok_s")
    assert mirrored.verdict == "slower"


def test_judge_uses_the_practical_threshold_on_both_sides():
    assert judge(Interval(low=1.06, high=1.2), "higher") == "faster"
    assert judge(Interval(low=1.02, high=1.2), "higher") == "indistinguishable"  # not surely 5%
    assert judge(Interval(low=0.8, high=0.94), "higher") == "slower"
    assert judge(Interval(low=0.8, high=0.94), "lower") == "faster"  # lower latency
    assert judge(Interval(low=1.02, high=1.2), "higher", threshold=0.01) == "faster"
    assert judge(None, "higher") == "unknown"


def test_minimum_sample_rule():
    assert [min_samples(q) for q in (0.5, 0.9, 0.99)] == [20, 100, 1000]


async def test_short_run_says_its_p99_is_not_one(time_travel):
    result, records = await fake_run(60, seed=1)
    assert result.summary.ttft_ms.count == 60
    notes = percentile_notes(result.summary)
    assert any(note.startswith("TTFT p90/p99 from 60 values") for note in notes)
    validity = judge_validity(result.summary, ValidityRules(min_duration_s=0, min_requests=1))
    assert validity.status == "VALID" and validity.notes == notes
    summary = summarize_group([run_sample(result, records)])
    p99 = summary.metric("ttft_ms_p99")
    assert not p99.reliable and "fewer than the 1000" in p99.note
    assert summary.metric("ttft_ms_p50").reliable


def test_summary_only_run_has_no_interval_and_says_so(tiny_records):
    result = RunResult(
        config=RunConfig(backend="fake", model="tiny"), summary=summarize(tiny_records)
    )
    summary = summarize_group([run_sample(result, None)])
    assert all(m.interval is None for m in summary.metrics)
    assert "no interval" in summary.method
    comparison = compare_samples([run_sample(result, None)], [run_sample(result, None)])
    assert {m.verdict for m in comparison.metrics} == {"unknown"}


async def test_relative_width_for_convergence(time_travel):
    summary = summarize_group([await sample(400, seed=3)])
    width = relative_width(summary, "ttft_ms_p50")
    estimate = summary.metric("ttft_ms_p50")
    assert width == pytest.approx((estimate.interval.high - estimate.interval.low) / estimate.value)
    assert relative_width(summary, "goodput_rps") is None  # no SLO: not in the summary
    assert not math.isnan(width)


async def test_candidate_verdict_for_the_advisor(time_travel):
    from bench.core.stats import MeasuredRun, candidate_verdict

    async def group(seeds, slowdown=1.0):
        runs = []
        for seed in seeds:
            result, records = await fake_run(120, seed, slowdown=slowdown, concurrency=4)
            runs.append(MeasuredRun(result, records))
        return runs

    leader, twin, slower = await group((1, 2)), await group((3, 4)), await group((5, 6), 1.2)
    ahead = candidate_verdict(leader, slower, leader_name="A", alternative_name="B", bootstrap=300)
    assert ahead.verdict == "faster" and not ahead.indistinguishable
    assert ahead.interval.low > 1.05 and ahead.leader_repeats == 2
    tie = candidate_verdict(leader, twin, bootstrap=300)
    assert tie.indistinguishable and tie.verdict == "indistinguishable"
    assert tie.leader == tie.alternative == "fake"
    blind = candidate_verdict([MeasuredRun(leader[0].result)], [MeasuredRun(slower[0].result)])
    assert blind.verdict == "unknown" and not blind.indistinguishable and blind.single_run
    with pytest.raises(ValueError, match="unknown metric"):
        candidate_verdict(leader, twin, metric="speed")


def test_candidate_verdict_on_shipped_reference_runs():
    """The asyncio/uvloop fidelity reference runs (data/reference, records from the campaign
    archives): vLLM on asyncio vs uvloop at 1,024 requests, single runs, within 1%:
    indistinguishable."""
    import json
    from pathlib import Path

    from bench.core.stats import MeasuredRun, candidate_verdict
    from bench.orchestrate.compare import reference_records

    reference = Path(__file__).resolve().parents[2] / "data" / "reference"
    name = "h200_llama2-7b_fidelity_event_loop_paired"
    records = reference_records(reference / name)
    data = json.loads((reference / f"{name}_runs.json").read_text())
    runs = [RunResult.model_validate(run) for run in data["runs"]]
    assert {run.run_id for run in runs} == set(records)
    first = [r for r in runs if r.config.backend == "vllm"][:2]
    asyncio_run = next(r for r in first if r.config.event_loop == "asyncio")
    uvloop_run = next(r for r in first if r.config.event_loop == "uvloop")
    verdict = candidate_verdict(
        [MeasuredRun(asyncio_run, records[asyncio_run.run_id])],
        [MeasuredRun(uvloop_run, records[uvloop_run.run_id])],
        bootstrap=200,
    )
    assert verdict.single_run and verdict.indistinguishable
    assert any("single run" in note for note in verdict.notes)


async def test_ladder_phases_get_their_own_percentile_notes(time_travel):
    from bench.core.schema import PhaseResult

    short, _ = await fake_run(30, seed=1)
    long, _ = await fake_run(1200, seed=2)
    phases = [
        PhaseResult(name=name, strategy="concurrency", target=1, start_ns=0, end_ns=1,
                    summary=run.summary)
        for name, run in (("step-c1", short), ("step-c16", long))
    ]  # fmt: skip
    validity = judge_validity(long.summary, ValidityRules(), phases)
    assert any(n.startswith("phase step-c1: TTFT p90/p99 from 30 values") for n in validity.notes)
    assert not any(n.startswith("phase step-c16") for n in validity.notes)


def test_a_rates_only_sample_draws_the_same_rate_intervals():
    """`run_sample(rates_only=True)` (the report's throughput intervals) skips the latency and
    gap arrays: on a shipped run with its archived records, each phase's rate intervals equal
    the full sample's, to the last bit, and the skipped arrays are absent."""
    import json
    from pathlib import Path

    from bench.core.stats import run_sample, summarize_group
    from bench.orchestrate.compare import reference_records

    reference = Path(__file__).resolve().parents[2] / "data" / "reference"
    name = "h200_llama2-7b_capacity_chat_slo"
    records = reference_records(reference / name)
    data = json.loads((reference / f"{name}_runs.json").read_text())
    run = next(RunResult.model_validate(r) for r in data["runs"] if r["run_id"] in records)
    rates = ["output_throughput_tok_s", "request_throughput_rps", "goodput_rps"]
    phases = [None] + [phase.name for phase in run.phases]
    for phase in phases[:3]:
        full = run_sample(run, records[run.run_id], phase)
        light = run_sample(run, records[run.run_id], phase, rates_only=True)
        assert not light.latencies and light.itl_sorted is None and full.latencies
        assert np.array_equal(light.block_rates["output_throughput_tok_s"],
                              full.block_rates["output_throughput_tok_s"])  # fmt: skip
        one = summarize_group([full], bootstrap=200, metrics=rates)
        other = summarize_group([light], bootstrap=200, metrics=rates)
        assert one.metric("output_throughput_tok_s").interval is not None  # not vacuous
        for metric in rates:
            a, b = one.metric(metric), other.metric(metric)
            assert (a is None) == (b is None)
            if a is not None:
                assert a.interval == b.interval and a.value == b.value
