"""Requests prepared ahead of the sending loop (bench/run/request_producer.py, issue 51): by a
worker thread, never on the loop's thread, in order, within the memory bound, and the run loop
reports its own overhead with every run."""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import replace

import pytest

from bench.core.config import GenerateWorkload, LengthDistribution, RateLoad, RunConfig
from bench.core.pattern_reports import HarnessOverhead
from bench.core.schema import ModelInfo
from bench.engines.backends.base import GenerateRequest
from bench.engines.backends.fake import FakeBackend
from bench.run import request_producer
from bench.run.load.patterns import validity_reasons
from bench.run.request_producer import PreparedRequests
from bench.run.runner import RunEvents, execute


def requests(prompt_tokens: int = 4):
    for index in itertools.count():
        yield GenerateRequest(id=f"r{index}", prompt_token_ids=[1] * prompt_tokens, output_tokens=1)


class Preparer:
    """Marks each request with its text and remembers which threads prepared."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.threads: set[int] = set()
        self.count = 0
        self.fail_after = fail_after

    def one(self, request):
        return self.many([request])[0]

    def many(self, batch):
        self.threads.add(threading.get_ident())
        self.count += len(batch)
        if self.fail_after is not None and self.count > self.fail_after:
            raise ValueError("tokenizer broke")
        return [replace(request, prompt_text=f"text {request.id}") for request in batch]


def test_fill_prepares_exactly_what_was_asked_on_a_worker_thread() -> None:
    preparer = Preparer()
    source = PreparedRequests(requests(), preparer.one, preparer.many)
    try:
        assert source.fill(300) == 300
        assert source.produced == 300  # nothing prepared that no phase asked for
        taken = [next(source) for _ in range(300)]
        assert [request.id for request in taken] == [f"r{i}" for i in range(300)]
        assert all(request.prompt_text == f"text {request.id}" for request in taken)
        assert source.waits == 0
        assert threading.get_ident() not in preparer.threads
        # Past what was filled: the loop waits for the worker, it never prepares itself.
        more = [next(source) for _ in range(10)]
        assert [request.id for request in more] == [f"r{i}" for i in range(300, 310)]
        assert source.waits >= 1 and threading.get_ident() not in preparer.threads
    finally:
        source.close()


def test_a_finite_source_ends_and_an_error_reaches_the_loop() -> None:
    preparer = Preparer()
    finite = PreparedRequests(itertools.islice(requests(), 5), preparer.one, preparer.many)
    assert finite.fill(100) == 5
    assert [request.id for request in finite] == [f"r{i}" for i in range(5)]
    finite.close()
    broken = Preparer(fail_after=256)
    failing = PreparedRequests(requests(), broken.one, broken.many)
    with pytest.raises(ValueError, match="tokenizer broke"):
        failing.fill(1000)
    failing.close()


def test_the_buffer_holds_what_fits_its_memory_bound(monkeypatch) -> None:
    per_request = request_producer.request_bytes(next(requests(1000)))
    assert per_request == 200 + 36 * 1000  # a list of 1,000 IDs
    monkeypatch.setattr(request_producer, "PREPARED_MAX_BYTES", per_request * 300)
    preparer = Preparer()
    source = PreparedRequests(requests(1000), preparer.one, preparer.many)
    try:
        # The prepared text adds a few bytes to each: 299 fit, not 5,000.
        assert source.fill(5000) == source.capacity == 299
    finally:
        source.close()


def test_conversations_are_prepared_as_they_are_taken() -> None:
    preparer = Preparer()
    source = PreparedRequests(requests(), preparer.one, preparer.many, ahead=False)
    assert source.fill(100) == 0
    assert next(source).prompt_text == "text r0"
    assert preparer.threads == {threading.get_ident()}


class PreparingFake(FakeBackend):
    """The fake backend (a test double) with a batch preparation like the openai client's."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.preparer = Preparer()

    def prepare_request(self, request):
        return self.preparer.one(request)

    def prepare_requests(self, batch):
        return self.preparer.many(batch)


async def test_a_run_prepares_off_the_loop_and_reports_its_overhead() -> None:
    model = ModelInfo(name="tiny", path="tiny", vocab_size=1000)
    config = RunConfig(
        backend="fake",
        model="tiny",
        workload=GenerateWorkload(output_tokens=LengthDistribution(mean=2)),
        load=RateLoad(rate_rps=400, duration_s=1.0, arrival="constant", warmup_requests=2),
    )
    backend = PreparingFake({})
    await backend.load(model, config.workload, config.precision, "cpu")
    records = []
    events = RunEvents(
        on_record=records.append, on_phase=lambda _: None, on_progress=lambda _: None
    )
    outcome = await execute(config, backend, model, events, asyncio.Event())
    assert len(records) >= 400 and all(r.error is None for r in records)
    assert threading.get_ident() not in backend.preparer.threads
    harness = outcome.pattern_report.harness
    assert harness is not None and harness.timed_sends == len(records) - 2
    assert harness.scheduling_lag_p99_ms is not None and harness.client_cpu_s > 0
    assert harness.measured_wall_s == pytest.approx(1.0, abs=0.2)
    assert validity_reasons(config.load, outcome.pattern_report) == []


def test_a_lag_over_the_bound_makes_the_run_invalid() -> None:
    late = HarnessOverhead(
        scheduling_lag_p50_ms=3000.0,
        scheduling_lag_p99_ms=6000.0,
        timed_sends=10,
        client_cpu_s=1.0,
        measured_wall_s=1.0,
    )
    reason = late.invalid_reason()
    assert reason is not None and "harness-limited" in reason and "6,000.0 ms > 200 ms" in reason
    on_time = late.model_copy(update={"scheduling_lag_p99_ms": 12.0})
    assert on_time.invalid_reason() is None
    assert HarnessOverhead.model_validate_json(late.model_dump_json()) == late
