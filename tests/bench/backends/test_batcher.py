"""DynamicBatcher grouping, wait window and streaming, driven by a stand-in batch function."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest

from bench.engines.backends.base import GenerateRequest
from bench.engines.backends.batcher import DynamicBatcher


class StandInBatchFunction:
    """Test double for an engine: records each batch and reports one step every `step_s`."""

    def __init__(self, step_s: float = 0.001, fail: bool = False, short_by: int = 0) -> None:
        self.step_s = step_s
        self.fail = fail
        self.short_by = short_by
        self.batches: list[list[str]] = []
        self.reported_ns: list[list[int]] = []  # per batch, the step times handed to on_step

    def __call__(self, requests: list[GenerateRequest], on_step) -> None:
        self.batches.append([r.id for r in requests])
        self.reported_ns.append([])
        if self.fail:
            raise RuntimeError("engine exploded (stand-in)")
        for _ in range(max(r.output_tokens for r in requests) - self.short_by):
            time.sleep(self.step_s)
            t_ns = time.perf_counter_ns()
            self.reported_ns[-1].append(t_ns)
            on_step(t_ns)


def request(request_id: str, output_tokens: int) -> GenerateRequest:
    return GenerateRequest(id=request_id, prompt_token_ids=[5, 6, 7], output_tokens=output_tokens)


async def collect(batcher: DynamicBatcher, req: GenerateRequest) -> list[int]:
    return [chunk.t_ns async for chunk in batcher.stream(req)]


@pytest.fixture
def executor():
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    yield pool
    pool.shutdown(wait=True)


async def test_concurrent_requests_form_one_batch_each_gets_its_own_length(executor) -> None:
    engine = StandInBatchFunction()
    batcher = DynamicBatcher(engine, executor, max_batch_size=4, batch_wait_ms=50)
    lengths = {"a": 3, "b": 7, "c": 1, "d": 5}
    results = await asyncio.gather(*(collect(batcher, request(i, n)) for i, n in lengths.items()))
    await batcher.close()
    assert engine.batches == [["a", "b", "c", "d"]]
    assert [len(times) for times in results] == list(lengths.values())
    for times in results:
        assert times == sorted(times) and len(set(times)) == len(times)
    assert batcher.stats.batch_sizes == [4]


async def test_max_batch_size_splits_and_late_requests_wait_for_next_batch(executor) -> None:
    engine = StandInBatchFunction(step_s=0.01)
    batcher = DynamicBatcher(engine, executor, max_batch_size=2, batch_wait_ms=20)
    results = await asyncio.gather(*(collect(batcher, request(f"r{i}", 4)) for i in range(5)))
    await batcher.close()
    assert [len(batch) for batch in engine.batches] == [2, 2, 1]
    assert all(len(times) == 4 for times in results)
    assert batcher.stats.requests == 5


async def test_wait_window_bounds_the_wait_of_a_lone_request(executor) -> None:
    engine = StandInBatchFunction()
    batcher = DynamicBatcher(engine, executor, max_batch_size=8, batch_wait_ms=100)
    start = time.perf_counter_ns()
    times = await collect(batcher, request("lone", 2))
    await batcher.close()
    waited_ms = (times[0] - start) / 1e6
    assert 90 <= waited_ms < 1000  # waited for company, then ran alone
    assert engine.batches == [["lone"]]


async def test_zero_wait_runs_immediately(executor) -> None:
    engine = StandInBatchFunction()
    batcher = DynamicBatcher(engine, executor, max_batch_size=8, batch_wait_ms=0)
    start = time.perf_counter_ns()
    times = await collect(batcher, request("now", 1))
    await batcher.close()
    assert (times[0] - start) / 1e6 < 80


async def test_engine_failure_reaches_every_stream(executor) -> None:
    batcher = DynamicBatcher(StandInBatchFunction(fail=True), executor, 4, 10)
    outcomes = await asyncio.gather(
        collect(batcher, request("x", 2)),
        collect(batcher, request("y", 3)),
        return_exceptions=True,
    )
    await batcher.close()
    assert all(isinstance(o, RuntimeError) and "exploded" in str(o) for o in outcomes)


async def test_short_engine_output_is_an_error_not_a_silent_short_stream(executor) -> None:
    batcher = DynamicBatcher(StandInBatchFunction(short_by=1), executor, 4, 10)
    with pytest.raises(RuntimeError, match="2 of 3 tokens"):
        await collect(batcher, request("short", 3))
    await batcher.close()


async def test_cancelled_request_is_dropped_before_its_batch(executor) -> None:
    engine = StandInBatchFunction()
    batcher = DynamicBatcher(engine, executor, max_batch_size=4, batch_wait_ms=200)
    doomed = asyncio.create_task(collect(batcher, request("doomed", 2)))
    await asyncio.sleep(0.02)
    doomed.cancel()
    await asyncio.sleep(0.01)
    times = await collect(batcher, request("kept", 2))
    await batcher.close()
    assert len(times) == 2
    assert engine.batches == [["kept"]]


async def test_coalesced_delivery_keeps_every_step_time_and_token_count(executor) -> None:
    """A long delivery interval batches the wake-ups, never the per-step timestamps."""
    engine = StandInBatchFunction(step_s=0.002)
    batcher = DynamicBatcher(engine, executor, 4, batch_wait_ms=50, delivery_interval_ms=10_000)
    lengths = {"a": 40, "b": 17, "c": 1, "d": 40}
    chunks = await asyncio.gather(
        *(collect_chunks(batcher, request(i, n)) for i, n in lengths.items())
    )
    await batcher.close()
    (steps_ns,) = engine.reported_ns
    for (_, wanted), got in zip(lengths.items(), chunks, strict=True):
        assert [chunk.t_ns for chunk in got] == steps_ns[:wanted]  # exact engine step times
        assert [chunk.tokens for chunk in got] == [1] * wanted
    # First step, then once per distinct final step (1, 17, 40): not once per step.
    assert batcher.stats.deliveries <= 4 < len(steps_ns)


async def test_zero_interval_delivers_every_step_as_it_happens(executor) -> None:
    engine = StandInBatchFunction(step_s=0.005)
    batcher = DynamicBatcher(engine, executor, 2, batch_wait_ms=20, delivery_interval_ms=0)
    arrivals_ns: list[int] = []
    async for _chunk in batcher.stream(request("live", 10)):
        arrivals_ns.append(time.perf_counter_ns())
    await batcher.close()
    (steps_ns,) = engine.reported_ns
    # Each chunk arrives soon after its step (long before the batch's last step) ...
    assert arrivals_ns[0] < steps_ns[-1]
    # ... in at least a few separate deliveries (a loaded CI machine may merge some).
    assert batcher.stats.deliveries >= 3


async def test_a_request_that_finishes_early_ends_without_waiting_for_the_interval(
    executor,
) -> None:
    engine = StandInBatchFunction(step_s=0.01)
    batcher = DynamicBatcher(engine, executor, 2, batch_wait_ms=20, delivery_interval_ms=10_000)
    ended_ns: dict[str, int] = {}

    async def run(req: GenerateRequest) -> None:
        await collect(batcher, req)
        ended_ns[req.id] = time.perf_counter_ns()

    await asyncio.gather(run(request("short", 3)), run(request("long", 40)))
    await batcher.close()
    (steps_ns,) = engine.reported_ns
    # The short stream ended right after step 3, not when the 40-step batch finished.
    assert ended_ns["short"] < steps_ns[-1]


async def test_stats_record_each_batch_engine_time(executor) -> None:
    engine = StandInBatchFunction(step_s=0.005)
    batcher = DynamicBatcher(engine, executor, 2, batch_wait_ms=10)
    await asyncio.gather(*(collect(batcher, request(f"r{i}", 6)) for i in range(3)))
    # The engine thread appends the end after its last step: wait until it is idle.
    await asyncio.get_running_loop().run_in_executor(executor, lambda: None)
    await batcher.close()
    stats = batcher.stats
    assert stats.batch_sizes == [2, 1]
    assert len(stats.batch_start_ns) == len(stats.batch_end_ns) == 2
    for start_ns, end_ns, steps_ns in zip(
        stats.batch_start_ns, stats.batch_end_ns, engine.reported_ns, strict=True
    ):
        assert start_ns < steps_ns[0] and steps_ns[-1] <= end_ns
    assert stats.batch_end_ns[0] <= stats.batch_start_ns[1]


async def collect_chunks(batcher: DynamicBatcher, req: GenerateRequest) -> list:
    return [chunk async for chunk in batcher.stream(req)]
