"""Dynamic batcher for the forward kind (encoders, vision): what Triton's and TEI's batchers do.

Requests (each of `batch_size` samples, usually one) wait in a queue; a batch closes when it
holds `max_batch_size` samples or its oldest request has waited `max_queue_delay_ms`, runs as
one forward pass of the summed batch in the engine's single worker thread, and every request of
it completes at the batch's end. One batch runs at a time: requests that arrive while it runs
wait for the next one (with a delay of 0 they still batch, as Triton's do). Requests of another
shape (sequence length, image size) than the oldest's wait for a later batch. A request larger
than `max_batch_size` runs alone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.core.clock import CLOCK
from bench.engines.backends.base import ForwardRequest

RunBatch = Callable[[ForwardRequest], int]
"""Runs one forward pass of the request's shape in the engine thread; returns its end (ns)."""


@dataclass
class _Waiting:
    request: ForwardRequest
    done: asyncio.Future
    arrived_ns: int


@dataclass
class ForwardBatchStats:
    """Batches run and their sizes in samples (tests and the engine facts read them)."""

    batches: int = 0
    requests: int = 0
    samples: int = 0
    batch_samples: list[int] = field(default_factory=list)

    @property
    def mean_batch_samples(self) -> float:
        return self.samples / self.batches if self.batches else 0.0


class ForwardBatcher:
    """Joins concurrent `run()` calls into batches of up to `max_batch_size` samples."""

    def __init__(
        self,
        run_batch: RunBatch,
        executor: concurrent.futures.Executor,
        max_batch_size: int,
        max_queue_delay_ms: float,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if max_queue_delay_ms < 0:
            raise ValueError("max_queue_delay_ms must be >= 0")
        self.run_batch = run_batch
        self.executor = executor
        self.max_batch_size = max_batch_size
        self.delay_ns = int(max_queue_delay_ms * 1e6)
        self.stats = ForwardBatchStats()
        self._waiting: list[_Waiting] = []
        self._wakeup: asyncio.Event | None = None
        self._scheduler: asyncio.Task | None = None
        self._closed = False

    async def run(self, request: ForwardRequest) -> int:
        """Queue `request`; return the end (ns) of the batch that ran it."""
        if self._closed:
            raise RuntimeError("batcher is closed")
        loop = asyncio.get_running_loop()
        if self._scheduler is None or self._scheduler.done():
            self._wakeup = asyncio.Event()
            self._scheduler = loop.create_task(self._schedule())
        entry = _Waiting(request, loop.create_future(), CLOCK.now_ns())
        self._waiting.append(entry)
        assert self._wakeup is not None
        self._wakeup.set()
        return await entry.done

    async def close(self) -> None:
        self._closed = True
        if self._scheduler is not None:
            self._scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._scheduler
        for entry in self._waiting:
            if not entry.done.done():
                entry.done.set_exception(RuntimeError("engine closed"))
        self._waiting.clear()

    @staticmethod
    def _shape(request: ForwardRequest) -> tuple[int | None, int | None]:
        return request.sequence_length, request.image_size

    def _take(self) -> list[_Waiting]:
        """The oldest request and those of its shape behind it, up to max_batch_size samples."""
        first = self._waiting[0]
        batch, samples = [first], first.request.batch_size
        for entry in self._waiting[1:]:
            if self._shape(entry.request) != self._shape(first.request):
                continue
            if samples + entry.request.batch_size > self.max_batch_size:
                break
            batch.append(entry)
            samples += entry.request.batch_size
        taken = {id(entry) for entry in batch}
        self._waiting = [entry for entry in self._waiting if id(entry) not in taken]
        return batch

    def _ready_samples(self) -> int:
        first = self._waiting[0]
        return sum(
            entry.request.batch_size
            for entry in self._waiting
            if self._shape(entry.request) == self._shape(first.request)
        )

    async def _schedule(self) -> None:
        assert self._wakeup is not None
        while True:
            # A caller that gave up (time-out) frees its place before its batch starts.
            self._waiting = [entry for entry in self._waiting if not entry.done.done()]
            if not self._waiting:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            # The delay counts from the oldest request's arrival: requests that queued while the
            # previous batch ran have usually waited long enough already.
            deadline_ns = self._waiting[0].arrived_ns + self.delay_ns
            while self._ready_samples() < self.max_batch_size:
                remaining_s = (deadline_ns - CLOCK.now_ns()) / 1e9
                if remaining_s <= 0:
                    break
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), remaining_s)
            self._waiting = [entry for entry in self._waiting if not entry.done.done()]
            if not self._waiting:
                continue
            await self._run(self._take())

    async def _run(self, batch: list[_Waiting]) -> None:
        first = batch[0].request
        samples = sum(entry.request.batch_size for entry in batch)
        stats = self.stats
        stats.batches += 1
        stats.requests += len(batch)
        stats.samples += samples
        stats.batch_samples.append(samples)
        joined = ForwardRequest(
            f"batch-{stats.batches}", samples, first.sequence_length, first.image_size
        )
        loop = asyncio.get_running_loop()
        try:
            end_ns = await loop.run_in_executor(self.executor, self.run_batch, joined)
        except Exception as exc:  # the batch failed: each of its requests fails with it
            for entry in batch:
                if not entry.done.done():
                    entry.done.set_exception(exc)
            return
        for entry in batch:
            if not entry.done.done():
                entry.done.set_result(end_ns)
