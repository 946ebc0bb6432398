"""Dynamic batcher for engines that run whole batches (transformers `generate`, ORT genai).

Waiting requests are grouped into one batch (up to `max_batch_size`, waiting at most
`batch_wait_ms` after the oldest one arrived); the batch runs in the engine's worker thread
while asyncio keeps serving. The engine function reports each decode step's completion time and
the batcher streams one token chunk per step to every request of the batch still short of its
own output length, then ends that request's stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from bench.backends.base import Chunk, GenerateRequest
from bench.clock import CLOCK

StepCallback = Callable[[int], None]
"""Called by the engine in its thread after each decode step with the step's time (ns)."""

BatchFunction = Callable[[list[GenerateRequest], StepCallback], None]
"""Runs one batch to max(output_tokens) steps, calling the step callback after every step."""

_END = object()


@dataclass
class _Pending:
    request: GenerateRequest
    queue: asyncio.Queue
    arrived_ns: int
    cancelled: bool = False
    delivered_tokens: int = 0
    done: bool = False


@dataclass
class BatcherStats:
    """What the batcher did: how many batches of which sizes (tests and engine info read it)."""

    batches: int = 0
    requests: int = 0
    batch_sizes: list[int] = field(default_factory=list)

    @property
    def mean_batch_size(self) -> float:
        return self.requests / self.batches if self.batches else 0.0


class DynamicBatcher:
    """Groups concurrent `stream()` calls into batches run one at a time by `run_batch`.

    `executor` is the single thread the engine lives in (torch.compile's CUDA graphs are bound to
    the thread that recorded them, so load, warm-up and every batch share one thread).
    """

    def __init__(
        self,
        run_batch: BatchFunction,
        executor: concurrent.futures.Executor,
        max_batch_size: int,
        batch_wait_ms: float,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        self.run_batch = run_batch
        self.executor = executor
        self.max_batch_size = max_batch_size
        self.batch_wait_ns = int(batch_wait_ms * 1e6)
        self.stats = BatcherStats()
        self._pending: list[_Pending] = []
        self._wakeup: asyncio.Event | None = None
        self._scheduler: asyncio.Task | None = None
        self._closed = False

    # ------------------------------------------------------------------ public

    async def stream(self, request: GenerateRequest) -> AsyncIterator[Chunk]:
        """Queue `request` and yield one Chunk per generated token as its batch decodes."""
        if self._closed:
            raise RuntimeError("batcher is closed")
        if request.output_tokens < 1:
            return
        self._ensure_scheduler()
        entry = _Pending(request, asyncio.Queue(), CLOCK.now_ns())
        self._pending.append(entry)
        assert self._wakeup is not None
        self._wakeup.set()
        try:
            while True:
                item = await entry.queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            # A consumer that gives up (time-out) frees its slot if its batch has not started.
            entry.cancelled = True

    async def close(self) -> None:
        self._closed = True
        if self._scheduler is not None:
            self._scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._scheduler
        for entry in self._pending:
            entry.queue.put_nowait(RuntimeError("engine closed"))
        self._pending.clear()

    # ------------------------------------------------------------------ scheduling

    def _ensure_scheduler(self) -> None:
        if self._scheduler is None or self._scheduler.done():
            self._wakeup = asyncio.Event()
            self._scheduler = asyncio.get_running_loop().create_task(self._schedule())

    async def _schedule(self) -> None:
        assert self._wakeup is not None
        while True:
            self._pending = [entry for entry in self._pending if not entry.cancelled]
            if not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if len(self._pending) < self.max_batch_size:
                # Wait window counted from the oldest waiting request: requests that queued up
                # while the previous batch ran have usually waited long enough already.
                deadline_ns = self._pending[0].arrived_ns + self.batch_wait_ns
                while len(self._pending) < self.max_batch_size:
                    remaining_s = (deadline_ns - CLOCK.now_ns()) / 1e9
                    if remaining_s <= 0:
                        break
                    self._wakeup.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wakeup.wait(), remaining_s)
                self._pending = [entry for entry in self._pending if not entry.cancelled]
                if not self._pending:
                    continue
            batch = self._pending[: self.max_batch_size]
            self._pending = self._pending[self.max_batch_size :]
            await self._run(batch)

    async def _run(self, batch: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        self.stats.batches += 1
        self.stats.requests += len(batch)
        self.stats.batch_sizes.append(len(batch))
        steps_done = 0

        def deliver(step: int, t_ns: int) -> None:  # on the event loop
            for entry in batch:
                if entry.done or step > entry.request.output_tokens:
                    continue
                entry.queue.put_nowait(Chunk(t_ns=t_ns, tokens=1))
                entry.delivered_tokens = step
                if step == entry.request.output_tokens:
                    entry.done = True
                    entry.queue.put_nowait(_END)

        def on_step(t_ns: int) -> None:  # in the engine thread
            nonlocal steps_done
            steps_done += 1
            loop.call_soon_threadsafe(deliver, steps_done, t_ns)

        requests = [entry.request for entry in batch]
        engine_error: Exception | None = None
        try:
            await loop.run_in_executor(self.executor, self.run_batch, requests, on_step)
        except Exception as exc:  # the batch failed: every unfinished request fails with it
            engine_error = exc
        # Step deliveries were queued before the executor's result, so they have all run by now;
        # the extra yield only makes that explicit.
        await asyncio.sleep(0)
        for entry in batch:
            if entry.done:
                continue
            entry.done = True
            entry.queue.put_nowait(
                engine_error
                or RuntimeError(
                    f"engine produced {entry.delivered_tokens} of "
                    f"{entry.request.output_tokens} tokens"
                )
            )
