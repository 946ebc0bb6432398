"""Dynamic batcher for engines that run whole batches (transformers `generate`, ORT genai).

Waiting requests are grouped into one batch (up to `max_batch_size`, waiting at most
`batch_wait_ms` after the oldest one arrived); the batch runs in the engine's worker thread
while asyncio keeps serving. The engine function reports each decode step's completion time and
the batcher streams one token chunk per step (carrying that step's exact time) to every request
of the batch still short of its own output length, then ends that request's stream.

Delivery is coalesced: the engine thread only appends the step time to a list; the event loop is
woken at most every `delivery_interval_ms` (and at once on a step that completes a request), and
hands each request all its new chunks as one queue item. Per-step wake-ups of every consumer
(batch x steps of them) compete with the engine thread for the GIL, and eager `generate` is
CPU-bound on a GPU; timestamps and token counts are unchanged, only their delivery is batched.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from bench.core.clock import CLOCK
from bench.engines.backends.base import Chunk, GenerateRequest

StepCallback = Callable[[int], None]
"""Called by the engine in its thread after each decode step with the step's time (ns)."""

BatchFunction = Callable[[list[GenerateRequest], StepCallback], None]
"""Runs one batch to max(output_tokens) steps, calling the step callback after every step."""

DELIVERY_INTERVAL_MS = 50.0
"""Default longest wait before decoded steps reach the consumers (their timestamps are exact)."""

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
    batch_start_ns: list[int] = field(default_factory=list)
    """When the engine thread started each batch."""
    batch_end_ns: list[int] = field(default_factory=list)
    """When each batch's engine call returned, appended by the engine thread (it can trail the
    streams' ends: read it after the engine is idle)."""
    deliveries: int = 0
    """Event-loop wake-ups that handed decoded steps to the consumers."""

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
        delivery_interval_ms: float = DELIVERY_INTERVAL_MS,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if delivery_interval_ms < 0:
            raise ValueError("delivery_interval_ms must be >= 0")
        self.run_batch = run_batch
        self.executor = executor
        self.max_batch_size = max_batch_size
        self.batch_wait_ns = int(batch_wait_ms * 1e6)
        # 0 = wake the consumers after every step (still one wake-up per request per delivery).
        self.delivery_interval_ns = int(delivery_interval_ms * 1e6)
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
                for chunk in item:  # every step decoded since the last delivery
                    yield chunk
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
        stats = self.stats
        stats.batches += 1
        stats.requests += len(batch)
        stats.batch_sizes.append(len(batch))
        interval_ns = self.delivery_interval_ns
        # Steps after which some request has all its tokens: delivered at once, so a finished
        # request ends (end_ns) when its last token exists, not up to an interval later.
        final_steps = frozenset(entry.request.output_tokens for entry in batch)
        step_times_ns: list[int] = []  # appended by the engine thread only
        delivered_steps = 0  # touched by the event loop only
        flush_scheduled = False
        last_flush_ns = 0

        def deliver() -> None:  # on the event loop: every step decoded since the last call
            nonlocal delivered_steps, flush_scheduled
            # Cleared before reading the length: a step appended after this line schedules
            # its own delivery (or is picked up by the final one after the batch).
            flush_scheduled = False
            steps_now = len(step_times_ns)
            if steps_now <= delivered_steps:
                return
            stats.deliveries += 1
            first_step = delivered_steps + 1
            chunks = [Chunk(t_ns=t_ns, tokens=1) for t_ns in step_times_ns[delivered_steps:]]
            for entry in batch:
                if entry.done:
                    continue
                wanted = entry.request.output_tokens
                last_step = min(steps_now, wanted)
                entry.queue.put_nowait(chunks[: last_step - first_step + 1])
                entry.delivered_tokens = last_step
                if last_step == wanted:
                    entry.done = True
                    entry.queue.put_nowait(_END)
            delivered_steps = steps_now

        def on_step(t_ns: int) -> None:  # in the engine thread: kept cheap (it holds the GIL)
            nonlocal flush_scheduled, last_flush_ns
            step_times_ns.append(t_ns)
            if flush_scheduled:
                return
            if len(step_times_ns) in final_steps or t_ns - last_flush_ns >= interval_ns:
                flush_scheduled = True
                last_flush_ns = t_ns
                loop.call_soon_threadsafe(deliver)

        requests = [entry.request for entry in batch]
        engine_error: Exception | None = None

        def run_batch_timed() -> None:  # in the engine thread
            stats.batch_start_ns.append(CLOCK.now_ns())
            try:
                self.run_batch(requests, on_step)
            finally:
                stats.batch_end_ns.append(CLOCK.now_ns())

        try:
            await loop.run_in_executor(self.executor, run_batch_timed)
        except Exception as exc:  # the batch failed: every unfinished request fails with it
            engine_error = exc
        # Steps the engine reported after the last scheduled delivery (the executor's result
        # arrives after every callback it queued, so all steps are in the list by now).
        deliver()
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
