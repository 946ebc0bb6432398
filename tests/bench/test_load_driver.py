"""The load driver under virtual time: closed/open loop, lag, time-outs, stop and deadline."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from bench.core.clock import CLOCK
from bench.core.config import GenerateWorkload, LengthDistribution, Precision
from bench.core.metrics import DEADLINE_REACHED
from bench.core.schema import ModelInfo, RequestRecord
from bench.engines.backends.base import GenerateRequest
from bench.engines.backends.fake import FakeBackend
from bench.run.load.analysis import max_in_flight
from bench.run.load.driver import PhaseOutcome, PhaseSpec, build_record, run_phase
from bench.run.load.strategies import ConstantIntervals, PoissonIntervals, make_intervals
from bench.run.workload import RequestFactory

MODEL = ModelInfo(name="tiny", path="tiny", vocab_size=1000)
MS = 1_000_000


async def fake(**options) -> FakeBackend:
    backend = FakeBackend(options)
    await backend.load(MODEL, GenerateWorkload(), Precision(), "cpu")
    return backend


def requests(output_tokens: int = 11, seed: int = 0) -> RequestFactory:
    workload = GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=16),
        output_tokens=LengthDistribution(mean=output_tokens),
    )
    return RequestFactory(workload, 1000, seed)


def in_flight(records) -> int:
    return max_in_flight(
        np.array([r.start_ns for r in records]), np.array([r.end_ns for r in records])
    )


# --------------------------------------------------------------------------- strategies


def test_constant_intervals():
    strategy = ConstantIntervals(4.0)
    assert [strategy.next_interval() for _ in range(3)] == [0.25, 0.25, 0.25]
    with pytest.raises(ValueError):
        ConstantIntervals(0)


def test_poisson_intervals_seeded():
    first = [PoissonIntervals(100, seed=3).next_interval() for _ in range(1)]
    a, b, c = PoissonIntervals(100, seed=3), PoissonIntervals(100, seed=3), PoissonIntervals(100, 4)
    seq_a = [a.next_interval() for _ in range(10_000)]
    assert seq_a == [b.next_interval() for _ in range(10_000)]
    assert seq_a != [c.next_interval() for _ in range(10_000)]
    assert seq_a[0] == first[0]
    assert np.mean(seq_a) == pytest.approx(0.01, rel=0.03)
    assert np.std(seq_a) == pytest.approx(0.01, rel=0.05)  # exponential: std = mean
    assert isinstance(make_intervals("constant", 2), ConstantIntervals)
    with pytest.raises(ValueError, match="unknown arrival"):
        make_intervals("bursty", 2)


# --------------------------------------------------------------------------- closed loop


async def test_closed_loop_keeps_n_in_flight(time_travel):
    backend = await fake(ttft_s=0.1, itl_s=0.01)  # 11 tokens -> 200 ms per request
    records = []
    outcome = await run_phase(
        PhaseSpec("c", "concurrency", 4, 10.0), backend.stream, requests(), records.append, 30
    )
    assert outcome.max_in_flight == 4 and backend.max_active == 4
    assert in_flight(records) == 4
    assert len(records) == outcome.completed == outcome.sent == 200  # 4 x 10 s / 0.2 s
    summary = outcome.summary()
    assert summary.request_throughput_rps == pytest.approx(20.0)
    assert summary.ttft_ms.p99 == pytest.approx(100.0)
    assert summary.tpot_ms.mean == pytest.approx(10.0)
    assert summary.e2e_ms.p50 == pytest.approx(200.0)
    assert all(r.phase == "c" and r.scheduled_ns is None and not r.warmup for r in records)
    assert outcome.end_ns - outcome.start_ns == 10_000 * MS


async def test_closed_loop_max_requests_and_warmup(time_travel):
    backend = await fake(ttft_s=0.05)
    records = []
    spec = PhaseSpec("warmup", "concurrency", 3, None, max_requests=7, warmup=True)
    outcome = await run_phase(spec, backend.stream, requests(), records.append, 30)
    assert len(records) == 7 and all(r.warmup for r in records)
    assert outcome.accumulator.requests == 0 and outcome.accumulator.warmup_skipped == 7


async def test_closed_loop_min_requests_runs_past_the_window(time_travel):
    """A window too short for the request minimum runs on until that many were sent (the CPU
    quick plan's rule), then stops issuing; without it the window alone decides."""
    backend = await fake(ttft_s=1.0)  # 1 s a request, 2 in flight: 2 sent in a 1 s window
    records = []
    spec = PhaseSpec("c", "concurrency", 2, 1.0, min_requests=9)
    outcome = await run_phase(spec, backend.stream, requests(), records.append, 30)
    assert outcome.sent == 9 and len(records) == 9
    assert outcome.end_ns - outcome.start_ns == 5_000 * MS  # 5 waves of 1 s
    plain = await run_phase(
        PhaseSpec("c", "concurrency", 2, 1.0), backend.stream, requests(), [].append, 30
    )
    assert plain.sent == 2


async def test_records_stream_as_they_complete(time_travel):
    backend = await fake(ttft_s=0.1, itl_s=0.01)
    seen_at = []

    def on_record(record):
        seen_at.append((CLOCK.now_ns(), record.end_ns))

    outcome = await run_phase(
        PhaseSpec("c", "concurrency", 2, 1.0), backend.stream, requests(), on_record, 30
    )
    assert all(now == end for now, end in seen_at)  # handed over on completion, not at the end
    assert seen_at[0][0] < outcome.end_ns


# --------------------------------------------------------------------------- open loop


async def test_open_loop_constant_spacing_and_zero_lag(time_travel):
    backend = await fake(ttft_s=0.02)
    records = []
    outcome = await run_phase(
        PhaseSpec("r", "rate", 10, 1.0, arrival="constant"),
        backend.stream,
        requests(),
        records.append,
        30,
    )
    scheduled = sorted(r.scheduled_ns - outcome.start_ns for r in records)
    assert scheduled == [i * 100 * MS for i in range(10)]
    assert all(r.start_ns == r.scheduled_ns for r in records)  # virtual time: no harness lag
    assert outcome.scheduling_lag_ms().p99 == 0


async def test_open_loop_poisson_is_seeded(time_travel):
    backend = await fake(ttft_s=0.001)

    async def offsets(seed: int) -> list[int]:
        records = []
        spec = PhaseSpec("r", "rate", 200, 20.0, arrival="poisson", seed=seed)
        outcome = await run_phase(spec, backend.stream, requests(1), records.append, 30)
        return sorted(r.scheduled_ns - outcome.start_ns for r in records)

    first, again, other = await offsets(1), await offsets(1), await offsets(2)
    assert first == again and first != other
    assert len(first) == pytest.approx(4000, rel=0.05)
    gaps = np.diff(first) / 1e9
    assert gaps.mean() == pytest.approx(1 / 200, rel=0.05)


async def test_open_loop_is_not_delayed_by_slow_requests(time_travel):
    backend = await fake(ttft_s=5.0)  # every request takes 5 s
    records = []
    outcome = await run_phase(
        PhaseSpec("r", "rate", 10, 1.0, arrival="constant"),
        backend.stream,
        requests(1),
        records.append,
        30,
    )
    assert outcome.max_in_flight == 10
    assert all(r.start_ns - r.scheduled_ns == 0 for r in records)
    assert outcome.issue_end_ns - outcome.start_ns == 1_000 * MS  # issuing ended on time
    assert outcome.end_ns - outcome.start_ns == 5_900 * MS  # drained: last sent at 0.9 s + 5 s


async def test_open_loop_max_concurrency_counts_queueing(time_travel):
    backend = await fake(ttft_s=0.5)
    records = []
    spec = PhaseSpec("r", "rate", 10, 1.0, arrival="constant", max_concurrency=2)
    outcome = await run_phase(spec, backend.stream, requests(1), records.append, 30)
    assert outcome.max_in_flight == 2 and backend.max_active == 2
    assert all(r.start_ns == r.scheduled_ns for r in records)
    e2e_ms = sorted((r.end_ns - r.start_ns) / MS for r in records)
    # Two served at a time, 0.5 s each: the tenth waits for four rounds before its own.
    assert e2e_ms[0] == pytest.approx(500)
    assert e2e_ms[-1] == pytest.approx(2600 - 900)  # planned at 0.9 s, served 2.1-2.6 s
    assert len(records) == 10


# --------------------------------------------------------------------------- failures


async def test_timeout_is_a_failed_record(time_travel):
    backend = await fake(ttft_s=5.0)
    records = []
    outcome = await run_phase(
        PhaseSpec("c", "concurrency", 2, None, max_requests=4),
        backend.stream,
        requests(),
        records.append,
        1.5,
    )
    assert [r.error for r in records] == ["timeout after 1.5 s"] * 4
    assert all(r.end_ns - r.start_ns == 1_500 * MS for r in records)
    assert outcome.failed == 4 and outcome.summary().error_rate == 1.0
    assert backend.active == 0  # the engine's stream was closed


async def test_send_exception_is_recorded(time_travel):
    async def broken(request: GenerateRequest):
        await CLOCK.sleep(0.01)
        yield  # pragma: no cover
        raise AssertionError

    async def failing(request: GenerateRequest):
        await CLOCK.sleep(0.01)
        raise ConnectionError("engine went away")
        yield  # pragma: no cover - makes this an async generator

    records = []
    await run_phase(
        PhaseSpec("c", "concurrency", 1, None, max_requests=2),
        failing,
        requests(),
        records.append,
        5,
    )
    assert [r.error for r in records] == ["ConnectionError: engine went away"] * 2


async def test_stop_cancels_in_flight_and_records_them(time_travel):
    backend = await fake(ttft_s=0.1, itl_s=0.1)  # 11 tokens -> 1.1 s each
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.35, stop.set)
    records = []
    outcome = await run_phase(
        PhaseSpec("r", "rate", 10, 60.0, arrival="constant"),
        backend.stream,
        requests(),
        records.append,
        30,
        stop=stop,
    )
    assert outcome.stopped and not outcome.deadline_reached
    assert len(records) == outcome.sent == 4  # sent at 0, 0.1, 0.2, 0.3 s
    assert [r.error for r in records] == ["stopped"] * 4
    assert all(r.end_ns - outcome.start_ns == 350 * MS for r in records)
    assert outcome.end_ns - outcome.start_ns == 350 * MS
    assert backend.active == 0
    # Tokens that arrived before the stop are kept on the record.
    assert [len(r.chunk_ns) for r in sorted(records, key=lambda r: r.id)] == [3, 2, 1, 0]


async def test_stop_closed_loop(time_travel):
    backend = await fake(ttft_s=1.0)
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(2.5, stop.set)
    records = []
    outcome = await run_phase(
        PhaseSpec("c", "concurrency", 3, 60.0),
        backend.stream,
        requests(1),
        records.append,
        30,
        stop=stop,
    )
    assert outcome.stopped
    assert sorted(r.error or "ok" for r in records) == ["ok"] * 6 + ["stopped"] * 3


async def test_deadline_is_a_hard_bound(time_travel):
    backend = await fake(ttft_s=2.0)
    records = []
    deadline_ns = CLOCK.now_ns() + 3_000 * MS
    outcome = await run_phase(
        PhaseSpec("c", "concurrency", 2, 60.0),
        backend.stream,
        requests(1),
        records.append,
        30,
        deadline_ns=deadline_ns,
    )
    assert outcome.deadline_reached
    assert outcome.end_ns == deadline_ns
    assert sorted(r.error or "ok" for r in records) == ["ok", "ok"] + [DEADLINE_REACHED] * 2


async def test_outcome_is_live_and_sink_errors_surface(time_travel):
    backend = await fake(ttft_s=0.1)
    spec = PhaseSpec("c", "concurrency", 2, 1.0)
    outcome = PhaseOutcome.for_spec(spec)
    seen = []

    def on_record(record):
        seen.append((outcome.in_flight, outcome.completed))

    await run_phase(spec, backend.stream, requests(1), on_record, 30, outcome=outcome)
    assert seen[0][1] == 1 and len(seen) == 20

    def broken_sink(record):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        await run_phase(spec, backend.stream, requests(1), broken_sink, 30)


def test_build_record_matches_a_validated_record():
    values = {
        "id": "r1",
        "start_ns": 1,
        "chunk_ns": [2, 3],
        "chunk_tokens": [],
        "end_ns": 5,
        "input_tokens": 7,
        "output_tokens": 2,
        "error": None,
        "phase": "rate",
        "scheduled_ns": 0,
        "warmup": False,
        "replica": 1,
        "prefix_id": 3,
        "prefix_tokens": 4,
        "conversation": None,
        "turn": None,
    }
    fast = build_record(dict(values))
    validated = RequestRecord(**values)
    assert fast == validated and fast.model_dump_json() == validated.model_dump_json()
    assert fast.model_fields_set == validated.model_fields_set
    assert set(values) == set(RequestRecord.model_fields)  # else the slower fallback path runs


async def test_server_usage_counts_are_the_records_token_counts(time_travel):
    """A server's usage (OpenAI `usage.prompt_tokens` / `completion_tokens` on the last chunk)
    replaces the request's own lengths in the record: a text prompt is tokenised by the server,
    which may count differently (a plain decode of Llama-2 IDs: 140 for 128)."""
    from bench.engines.backends.base import Chunk

    async def send(request):
        yield Chunk(t_ns=CLOCK.now_ns(), tokens=1)
        await CLOCK.sleep(0.01)
        yield Chunk(t_ns=CLOCK.now_ns(), tokens=1, usage_output_tokens=2, usage_input_tokens=19)

    async def send_without_usage(request):
        yield Chunk(t_ns=CLOCK.now_ns(), tokens=1)

    for sender, expected in ((send, 19), (send_without_usage, 16)):
        records: list[RequestRecord] = []
        spec = PhaseSpec("c", "concurrency", 1, None, max_requests=2)
        await run_phase(spec, sender, requests(), records.append, 60.0)
        assert [record.input_tokens for record in records] == [expected, expected]
