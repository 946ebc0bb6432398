"""The forward kind's dynamic batcher: grouping by max batch and queue delay, shapes kept apart,
failures; then through the real PyTorch and ONNX Runtime backends on tiny-bert (CPU)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time

import pytest

from bench.core.config import ForwardWorkload, LengthDistribution, Precision
from bench.core.errors import UserError
from bench.engines.backends import get_backend
from bench.engines.backends.base import ForwardRequest
from bench.engines.backends.forward_batcher import ForwardBatcher

FP32 = Precision(dtype="float32")


class StandInForward:
    """Test double for an engine's forward pass: records each batch, takes `batch_s`."""

    def __init__(self, batch_s: float = 0.005, fail: bool = False) -> None:
        self.batch_s = batch_s
        self.fail = fail
        self.batches: list[tuple[int, int | None]] = []

    def __call__(self, request: ForwardRequest) -> int:
        self.batches.append((request.batch_size, request.sequence_length))
        if self.fail:
            raise RuntimeError("engine exploded (stand-in)")
        time.sleep(self.batch_s)
        return time.perf_counter_ns()


def one(index: int, sequence: int = 16, samples: int = 1) -> ForwardRequest:
    return ForwardRequest(f"r{index}", samples, sequence)


@pytest.fixture
def executor():
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    yield pool
    pool.shutdown(wait=True)


async def test_waiting_requests_join_up_to_max_batch_samples(executor) -> None:
    engine = StandInForward()
    batcher = ForwardBatcher(engine, executor, max_batch_size=4, max_queue_delay_ms=50)
    ends = await asyncio.gather(*(batcher.run(one(i)) for i in range(10)))
    await batcher.close()
    assert [size for size, _ in engine.batches] == [4, 4, 2]
    assert batcher.stats.batch_samples == [4, 4, 2] and batcher.stats.requests == 10
    assert len(set(ends[:4])) == 1 and ends[3] < ends[4]  # one batch ends once for all of it


async def test_a_lone_request_waits_the_queue_delay_then_runs_alone(executor) -> None:
    engine = StandInForward(batch_s=0.001)
    batcher = ForwardBatcher(engine, executor, max_batch_size=8, max_queue_delay_ms=100)
    start = time.perf_counter_ns()
    end = await batcher.run(one(0))
    await batcher.close()
    assert 90 <= (end - start) / 1e6 < 1000
    assert engine.batches == [(1, 16)]


async def test_zero_delay_runs_at_once_but_batches_what_queued_meanwhile(executor) -> None:
    engine = StandInForward(batch_s=0.05)
    batcher = ForwardBatcher(engine, executor, max_batch_size=8, max_queue_delay_ms=0)
    first = asyncio.ensure_future(batcher.run(one(0)))
    await asyncio.sleep(0.01)  # the first batch is running now
    rest = [asyncio.ensure_future(batcher.run(one(i))) for i in range(1, 4)]
    await asyncio.gather(first, *rest)
    await batcher.close()
    assert [size for size, _ in engine.batches] == [1, 3]


async def test_other_shapes_wait_for_their_own_batch(executor) -> None:
    engine = StandInForward()
    batcher = ForwardBatcher(engine, executor, max_batch_size=8, max_queue_delay_ms=20)
    requests = [one(0, 16), one(1, 32), one(2, 16), one(3, 32, samples=2)]
    await asyncio.gather(*(batcher.run(request) for request in requests))
    await batcher.close()
    assert engine.batches == [(2, 16), (3, 32)]


async def test_engine_failure_fails_every_request_of_the_batch(executor) -> None:
    batcher = ForwardBatcher(
        StandInForward(fail=True), executor, max_batch_size=4, max_queue_delay_ms=20
    )
    results = await asyncio.gather(*(batcher.run(one(i)) for i in range(3)), return_exceptions=True)
    await batcher.close()
    assert all(isinstance(result, RuntimeError) for result in results)


def test_bad_limits_are_refused(executor) -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        ForwardBatcher(StandInForward(), executor, max_batch_size=0, max_queue_delay_ms=1)
    with pytest.raises(ValueError, match="max_queue_delay_ms"):
        ForwardBatcher(StandInForward(), executor, max_batch_size=2, max_queue_delay_ms=-1)


WORKLOAD = ForwardWorkload(
    batch_size=1, sequence_length=LengthDistribution(mean=16), dynamic_shapes=True
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend_name", "args"),
    [
        ("pytorch", {"intra_op_num_threads": 1}),
        ("onnxruntime", {"provider": "cpu", "intra_op_num_threads": 1}),
    ],
)
def test_real_backends_batch_one_sample_requests(tiny_bert, backend_name, args) -> None:
    backend = get_backend(backend_name)({**args, "max_batch_size": 4, "max_queue_delay_ms": 50})

    async def scenario():
        info = await backend.load(tiny_bert, WORKLOAD, FP32, "cpu")
        requests = [ForwardRequest(f"r{i}", 1, 16) for i in range(6)]

        async def run(request):
            return [chunk async for chunk in backend.stream(request)]

        outputs = await asyncio.gather(*(run(request) for request in requests))
        batcher = backend.forward_batcher if backend_name == "pytorch" else backend._runner.batcher
        sizes = list(batcher.stats.batch_samples)
        await backend.close()
        return info, outputs, sizes

    info, outputs, sizes = asyncio.run(scenario())
    assert info.engine.extra["max_queue_delay_ms"] == 50
    assert info.engine.extra["intra_op_num_threads"] == 1
    # every size the batcher can form ran once during load (a GPU picks kernels per size)
    assert info.engine.extra["warmed_batch_sizes"] == 4
    assert sizes == [4, 2]  # six one-sample requests at once: a full batch, then the rest
    assert all(len(chunks) == 1 and chunks[0].tokens == 1 for chunks in outputs)
    ends = [chunks[0].t_ns for chunks in outputs]
    assert len(set(ends[:4])) == 1 and ends[4] == ends[5] > ends[0]


def test_onnxruntime_batcher_needs_dynamic_shapes(tiny_bert) -> None:
    backend = get_backend("onnxruntime")(
        {"provider": "cpu", "max_batch_size": 4, "max_queue_delay_ms": 2}
    )
    fixed = ForwardWorkload(batch_size=1, sequence_length=LengthDistribution(mean=16))
    with pytest.raises(UserError, match="dynamic_shapes"):
        asyncio.run(backend.load(tiny_bert, fixed, FP32, "cpu"))


@pytest.mark.slow
def test_torch_compile_behind_the_batcher_pads_to_buckets_compiled_at_load(tiny_bert) -> None:
    """Batches of any size run on the graphs compiled during load: a batch of 2 is padded to
    the 4 bucket and nothing compiles while requests wait."""
    from bench.engines.backends.torch_compile import _unique_graphs

    backend = get_backend("torch_compile")(
        {"intra_op_num_threads": 1, "max_batch_size": 4, "max_queue_delay_ms": 50}
    )

    async def scenario():
        info = await backend.load(tiny_bert, WORKLOAD, FP32, "cpu")
        graphs_after_load = _unique_graphs()
        requests = [ForwardRequest(f"r{i}", 1, 16) for i in range(6)]

        async def run(request):
            return [chunk async for chunk in backend.stream(request)]

        outputs = await asyncio.gather(*(run(request) for request in requests))
        sizes = list(backend.forward_batcher.stats.batch_samples)
        graphs_after_serving = _unique_graphs()
        await backend.close()
        return info, outputs, sizes, graphs_after_load, graphs_after_serving

    info, outputs, sizes, after_load, after_serving = asyncio.run(scenario())
    assert info.engine.extra["batch_buckets"] == [1, 4]
    assert info.engine.extra["dynamic_shapes"] is False
    assert info.compile_s is not None and info.engine.extra["compiled_graphs"] >= 2
    assert sizes == [4, 2]  # the batcher's sizes in samples; the 2 ran padded to 4
    assert after_serving == after_load, "a batch size compiled while requests waited"
    assert all(len(chunks) == 1 and chunks[0].tokens == 1 for chunks in outputs)
