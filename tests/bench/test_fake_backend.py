"""The fake backend (a test double): labelled as such, options checked, timing and failures."""

from __future__ import annotations

import asyncio

import pytest

from bench.core.clock import CLOCK
from bench.core.config import GenerateWorkload, Precision
from bench.core.errors import UserError
from bench.core.schema import ModelInfo
from bench.engines.backends import get_backend
from bench.engines.backends.base import ForwardRequest, GenerateRequest
from bench.engines.backends.fake import FakeBackend, FakeInjectedError

MODEL = ModelInfo(name="tiny", path="tiny", vocab_size=100)
MS = 1_000_000


async def loaded(**options) -> FakeBackend:
    backend = FakeBackend(options)
    info = await backend.load(MODEL, GenerateWorkload(), Precision(), "cpu")
    assert info.engine.extra["test_double"] is True
    return backend


async def collect(backend: FakeBackend, request):
    return [chunk async for chunk in backend.stream(request)]


def test_registered_and_labelled_as_test_double():
    assert get_backend("fake") is FakeBackend
    availability = FakeBackend.availability()
    assert availability.available
    assert "test double" in availability.reason
    assert availability.details["test_double"] is True
    import bench.engines.backends.fake as module

    assert "TEST DOUBLE" in module.__doc__
    assert FakeBackend.kinds == {"generate", "forward"}


@pytest.mark.parametrize(
    "options",
    [{"ttft_s": -1}, {"itl_s": -0.1}, {"error_rate": 1.5}, {"seed": -1}, {"colour": 1}],
)
def test_bad_options_are_user_errors(options):
    with pytest.raises(UserError, match="bad engine argument for fake"):
        FakeBackend(options)


async def test_generate_timing(time_travel):
    backend = await loaded(ttft_s=0.2, itl_s=0.05)
    start = CLOCK.now_ns()
    chunks = await collect(backend, GenerateRequest("r", [1, 2, 3], output_tokens=5))
    assert [chunk.tokens for chunk in chunks] == [1] * 5
    assert [chunk.t_ns - start for chunk in chunks] == [200 * MS + i * 50 * MS for i in range(5)]


async def test_forward_is_one_chunk_of_the_batch(time_travel):
    backend = await loaded(ttft_s=0.01)
    chunks = await collect(backend, ForwardRequest("f", batch_size=8, sequence_length=64))
    assert len(chunks) == 1 and chunks[0].tokens == 8


async def test_zero_delay_never_waits():
    backend = await loaded()
    before = CLOCK.now_ns()
    chunks = await collect(backend, GenerateRequest("r", [1], output_tokens=1000))
    assert len(chunks) == 1000
    assert (CLOCK.now_ns() - before) < 1_000 * MS  # no sleeping on the real clock


async def test_error_rate_is_seeded(time_travel):
    async def outcomes(seed: int) -> list[bool]:
        backend = await loaded(error_rate=0.3, seed=seed)
        results = []
        for index in range(400):
            try:
                await collect(backend, GenerateRequest(str(index), [1], output_tokens=2))
                results.append(True)
            except FakeInjectedError:
                results.append(False)
        return results

    first = await outcomes(1)
    assert first == await outcomes(1)
    assert first != await outcomes(2)
    assert 0.22 < first.count(False) / len(first) < 0.38


async def test_max_parallel_queues(time_travel):
    backend = await loaded(ttft_s=1.0, max_parallel=2)
    start = CLOCK.now_ns()
    requests = [GenerateRequest(str(i), [1], output_tokens=1) for i in range(5)]
    results = await asyncio.gather(*(collect(backend, r) for r in requests))
    first_token_s = sorted((chunks[0].t_ns - start) / 1e9 for chunks in results)
    assert first_token_s == [1, 1, 2, 2, 3]
    assert backend.max_active == 2


async def test_latency_drift_knob_grows_ttft_with_time_since_load(time_travel):
    backend = await loaded(ttft_s=0.1, ttft_growth_s_per_s=0.01)
    first = CLOCK.now_ns()
    chunks = await collect(backend, GenerateRequest("a", [1], output_tokens=1))
    assert chunks[0].t_ns - first == 100 * MS  # at load time: no growth yet
    await CLOCK.sleep(9.9)  # 10 s after load: 0.1 s more
    later = CLOCK.now_ns()
    chunks = await collect(backend, GenerateRequest("b", [1], output_tokens=1))
    assert chunks[0].t_ns - later == pytest.approx(200 * MS, abs=MS)


async def test_leak_knob_keeps_memory_per_request_until_close():
    backend = await loaded(leak_bytes_per_request=1024)
    for index in range(3):
        await collect(backend, GenerateRequest(f"r{index}", [1], output_tokens=1))
    assert sum(len(block) for block in backend._leaked) == 3 * 1024
    await backend.close()
    assert backend._leaked == []
