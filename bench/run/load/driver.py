"""Runs one load phase against a `send` function: closed loop (N in flight) or open loop (rate).

Records stream to `on_record` as each request completes; the driver itself keeps only counters,
a `MetricsAccumulator` and the scheduling lag, so long phases use constant-ish memory. All time
comes from `bench.core.clock.CLOCK` so tests can travel in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from array import array
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from bench.core.clock import CLOCK
from bench.core.config import SLO
from bench.core.metrics import (
    DEADLINE_REACHED,
    NS_PER_MS,
    SINK_FAILED,
    STOPPED,
    MetricsAccumulator,
    percentiles_ms,
)
from bench.core.schema import MetricsSummary, Percentiles, RequestRecord
from bench.engines.backends.base import Chunk, Request
from bench.run.load.strategies import IntervalStrategy, make_intervals
from bench.run.workload import request_input_tokens

TIMER_SLACK_NS = 2_000_000
"""asyncio timers on Linux wake up to ~1 ms late (epoll rounds its timeout up to whole ms), so
the open loop sleeps until this long before a planned send and yields in a loop for the rest.
A virtual clock (tests' `time_travel`) has exact timers and sets this to 0."""

_yield_cpu: Callable[[], None] = getattr(os, "sched_yield", lambda: None)
"""Called on every turn of that wait: the wait keeps the core only while nothing else wants it
(another client process, the server, the parent writing records), so a client that is ahead of
its schedule no longer takes the CPU from one that is behind on a small machine."""


class PlanInterrupted(Exception):
    """Thrown into a pattern's plan generator when the run stops before the plan finished; a
    plan that can say what it found so far (the capacity search) returns its partial report."""


END_EARLY_CHECK_S = 0.25
"""How often a phase's `end_early` check runs (clock seconds)."""

SendFunction = Callable[[Request], AsyncIterator[Chunk]]


@dataclass
class PhaseSpec:
    """One phase of a load pattern.

    strategy "concurrency": `target` requests in flight (closed loop); "rate": `target`
    requests/s (open loop, `arrival` poisson or constant, seeded). The phase stops issuing at
    `duration_s` or `max_requests`, whichever comes first; a closed loop with `min_requests`
    keeps issuing past `duration_s` until that many were sent. `drain=False` (pulse phases) returns
    at the phase end without waiting for in-flight requests: they finish in the background,
    still reported, so the next phase starts on a loaded system. `end_early`, when given, is
    asked every END_EARLY_CHECK_S while the phase runs; a reason it returns ends the phase at
    once (issuing stops, requests in flight are cancelled and recorded with that reason as their
    error) without stopping the run: the capacity search ends a probe that can no longer pass.
    """

    name: str
    strategy: Literal["concurrency", "rate"]
    target: float
    duration_s: float | None
    max_requests: int | None = None
    min_requests: int | None = None
    arrival: str = "poisson"
    seed: int = 0
    max_concurrency: int | None = None
    warmup: bool = False
    drain: bool = True
    intervals: IntervalStrategy | None = None
    """Open loop: this schedule instead of `arrival` (trace replay: the trace's gaps)."""
    requests: Iterator[Request] | None = None
    """This phase's own requests instead of the run's (trace replay: the trace's rows)."""
    end_early: Callable[[PhaseOutcome], str | None] | None = None
    start_at_ns: int | None = None
    """Start the phase clock at this CLOCK time (a share of a schedule split across client
    processes: every process starts from the same instant; bench/run/client_processes.py)."""


@dataclass
class PhaseOutcome:
    """What a phase did; live while it runs (the runner reads it for progress)."""

    name: str
    strategy: Literal["concurrency", "rate"]
    target: float
    start_ns: int = 0
    end_ns: int = 0
    issue_end_ns: int | None = None
    accumulator: MetricsAccumulator = field(default_factory=MetricsAccumulator)
    sent: int = 0
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    stopped: bool = False
    deadline_reached: bool = False
    ended_early: str | None = None
    pending: set[asyncio.Task] = field(default_factory=set)
    lag_ns: array = field(default_factory=lambda: array("q"))
    _cancel: Callable[[str], None] | None = field(default=None, repr=False)

    @classmethod
    def for_spec(cls, spec: PhaseSpec) -> PhaseOutcome:
        return cls(name=spec.name, strategy=spec.strategy, target=spec.target)

    def summary(self, slo: SLO | None = None, gpus: int | None = None) -> MetricsSummary:
        return self.accumulator.summary(slo, gpus)

    def scheduling_lag_ms(self) -> Percentiles | None:
        """Open loop: actual send time minus planned send time, in ms (harness overhead)."""
        if not self.lag_ns:
            return None
        return percentiles_ms(np.frombuffer(self.lag_ns, dtype=np.int64) / NS_PER_MS)

    def cancel_pending(self, reason: str = STOPPED) -> None:
        """Cancel requests still in flight after a non-draining phase; each is recorded."""
        if self._cancel is not None:
            self._cancel(reason)

    async def wait_pending(self, timeout_s: float | None = None) -> None:
        if self.pending:
            await asyncio.wait(set(self.pending), timeout=timeout_s)


_RECORD_FIELDS = frozenset(RequestRecord.model_fields)


def build_record(values: dict) -> RequestRecord:
    """A RequestRecord from already-typed values, without validation (the driver's hot path).

    Same result as `RequestRecord.model_construct(**values)` with every field given, at a third
    of its cost; `values` holds every field of the model (tests check the equivalence), else
    it falls back to model_construct so defaults of newer fields are filled in.
    """
    if len(values) != len(_RECORD_FIELDS):  # the schema gained a field: take the safe path
        return RequestRecord.model_construct(**values)
    record = object.__new__(RequestRecord)
    object.__setattr__(record, "__dict__", values)
    object.__setattr__(record, "__pydantic_fields_set__", set(_RECORD_FIELDS))
    object.__setattr__(record, "__pydantic_extra__", None)
    object.__setattr__(record, "__pydantic_private__", None)
    return record


class _PhaseRun:
    """State of one running phase; `send_one` is the per-request hot path."""

    def __init__(
        self,
        spec: PhaseSpec,
        send: SendFunction,
        requests: Iterator[Request],
        on_record: Callable[[RequestRecord], None],
        request_timeout_s: float,
        outcome: PhaseOutcome,
        deadline_ns: int | None,
    ) -> None:
        self.spec = spec
        self.send = send
        self.requests = requests
        self.on_record = on_record
        self.request_timeout_s = request_timeout_s
        self.timeout_text = f"timeout after {request_timeout_s:g} s"
        self.outcome = outcome
        self.deadline_ns = deadline_ns
        self.issue_end_ns: int | None = None
        self.cancel_reason: str | None = None
        self.sink_error: BaseException | None = None
        self.requests_exhausted = False
        self.workers: list[asyncio.Task] = []
        self.issuer: asyncio.Task | None = None
        self.slots = (
            asyncio.Semaphore(spec.max_concurrency)
            if spec.strategy == "rate" and spec.max_concurrency
            else None
        )
        self.loop = asyncio.get_running_loop()
        outcome._cancel = self.cancel_all

    # ---------------------------------------------------------------- shared

    def cancel_all(self, reason: str, *, whole_run: bool = True) -> None:
        """Stop issuing and cancel what is in flight; `whole_run=False` ends only this phase
        (PhaseSpec.end_early): the outcome is marked ended_early, not stopped."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if not whole_run:
            self.outcome.ended_early = reason
        elif reason == DEADLINE_REACHED:
            self.outcome.deadline_reached = True
        else:
            self.outcome.stopped = True
        if self.issuer is not None:
            self.issuer.cancel()
        for worker in self.workers:
            worker.cancel()
        for task in list(self.outcome.pending):
            task.cancel()

    def next_request(self) -> Request | None:
        """The next request to send, or None when the phase must stop issuing."""
        outcome = self.outcome
        spec = self.spec
        if self.cancel_reason is not None or self.requests_exhausted:
            return None
        if spec.max_requests is not None and outcome.sent >= spec.max_requests:
            return None
        try:
            request = next(self.requests)
        except StopIteration:
            self.requests_exhausted = True
            return None
        return request

    async def send_one(self, request: Request, start_ns: int, scheduled_ns: int | None) -> None:
        """Send one request and record it, whatever happens (timeout, error, cancellation)."""
        outcome = self.outcome
        chunk_ns: list[int] = []
        chunk_tokens: list[int] = []
        error: str | None = None
        stream: AsyncIterator[Chunk] | None = None
        usage_output_tokens: int | None = None  # a server's usage count, when it reports one
        usage_input_tokens: int | None = None  # the prompt as the server tokenised it
        replica = 0  # which engine replica served it (bench/run/replicas.py streams say)
        slots = self.slots
        holding_slot = False
        counted = False
        now_ns = CLOCK.now_ns
        # The time-out runs from start_ns, so client-side queueing (max_concurrency) counts.
        timeout_at = self.loop.time() + self.request_timeout_s - (now_ns() - start_ns) / 1e9
        deadline = asyncio.timeout_at(timeout_at)
        try:
            async with deadline:
                if slots is not None:
                    await slots.acquire()
                    holding_slot = True
                counted = True
                outcome.in_flight += 1
                if outcome.in_flight > outcome.max_in_flight:
                    outcome.max_in_flight = outcome.in_flight
                stream = self.send(request)
                replica = getattr(stream, "replica", 0)
                async for chunk in stream:
                    chunk_ns.append(chunk.t_ns)
                    chunk_tokens.append(chunk.tokens)
                    if chunk.usage_output_tokens is not None:
                        usage_output_tokens = chunk.usage_output_tokens
                    if chunk.usage_input_tokens is not None:
                        usage_input_tokens = chunk.usage_input_tokens
                stream = None
        except TimeoutError as exc:
            error = self.timeout_text if deadline.expired() else f"TimeoutError: {exc}".strip()
        except asyncio.CancelledError:
            error = self.cancel_reason or STOPPED
            self._finish(
                request, start_ns, scheduled_ns, chunk_ns, chunk_tokens, error, None, replica
            )
            raise
        except Exception as exc:  # an engine error is a failed request, not a harness crash
            error = f"{type(exc).__name__}: {exc}".strip()
        finally:
            if counted:
                outcome.in_flight -= 1
            if holding_slot:
                slots.release()  # type: ignore[union-attr]
            if stream is not None:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception, asyncio.CancelledError):
                        await aclose()
        self._finish(
            request,
            start_ns,
            scheduled_ns,
            chunk_ns,
            chunk_tokens,
            error,
            usage_output_tokens,
            replica,
            usage_input_tokens,
        )

    def _finish(
        self,
        request: Request,
        start_ns: int,
        scheduled_ns: int | None,
        chunk_ns: list[int],
        chunk_tokens: list[int],
        error: str | None,
        usage_output_tokens: int | None = None,
        replica: int = 0,
        usage_input_tokens: int | None = None,
    ) -> None:
        """Build, count and hand on the record. A server's usage counts (OpenAI `usage`) are
        authoritative: for output_tokens, since streamed events need not carry one token each,
        and for input_tokens, since a text prompt is tokenised by the server, not here."""
        streamed_tokens = sum(chunk_tokens)
        output_tokens = streamed_tokens if usage_output_tokens is None else usage_output_tokens
        record = build_record(
            {
                "id": request.id,
                "start_ns": start_ns,
                "chunk_ns": chunk_ns,
                # The schema's "empty = one token per chunk" keeps the common case small.
                "chunk_tokens": [] if streamed_tokens == len(chunk_tokens) else chunk_tokens,
                "end_ns": CLOCK.now_ns(),
                "input_tokens": (
                    request_input_tokens(request)
                    if usage_input_tokens is None
                    else usage_input_tokens
                ),
                "output_tokens": output_tokens,
                "error": error,
                "phase": self.spec.name,
                "scheduled_ns": scheduled_ns,
                "warmup": self.spec.warmup,
                "replica": replica,
                # Traffic shape (GenerateRequest fields; a ForwardRequest has none).
                "prefix_id": getattr(request, "prefix_id", None),
                "prefix_tokens": getattr(request, "prefix_tokens", 0),
                "conversation": getattr(request, "conversation", None),
                "turn": getattr(request, "turn", None),
            }
        )
        outcome = self.outcome
        outcome.completed += 1
        if error is None:
            outcome.output_tokens += output_tokens
        else:
            outcome.failed += 1
        outcome.accumulator.add(record)
        try:
            self.on_record(record)
        except Exception as exc:
            if self.sink_error is None:
                self.sink_error = exc
                self.loop.call_soon(self.cancel_all, SINK_FAILED)

    # ---------------------------------------------------------------- closed loop

    async def run_closed(self) -> None:
        concurrency = max(1, round(self.spec.target))
        self.workers = [self.loop.create_task(self._worker()) for _ in range(concurrency)]
        await asyncio.gather(*self.workers, return_exceptions=True)

    def _closed_may_issue(self) -> bool:
        now = CLOCK.now_ns()
        if self.issue_end_ns is not None and now >= self.issue_end_ns:
            wanted = self.spec.min_requests
            if wanted is None or self.outcome.sent >= wanted:
                return False
        if self.deadline_ns is not None and now >= self.deadline_ns:
            self.outcome.deadline_reached = True
            return False
        return True

    async def _worker(self) -> None:
        now_ns = CLOCK.now_ns
        while self._closed_may_issue():
            request = self.next_request()
            if request is None:
                return
            think_s = getattr(request, "think_time_s", 0.0)
            if think_s:  # a conversation's pause between turns: before its clock starts
                await CLOCK.sleep(think_s)
            self.outcome.sent += 1
            await self.send_one(request, now_ns(), None)
            # Yield even when the backend never suspends, so timers and the stop watcher run.
            await asyncio.sleep(0)

    # ---------------------------------------------------------------- open loop

    async def run_open(self) -> None:
        spec = self.spec
        intervals = spec.intervals or make_intervals(spec.arrival, spec.target, spec.seed)
        now_ns = CLOCK.now_ns
        # A process's share of a split schedule starts at its first arrival, not at zero.
        planned_ns = self.outcome.start_ns + int(getattr(intervals, "first_offset_s", 0.0) * 1e9)
        end_ns = self.issue_end_ns
        deadline_ns = self.deadline_ns
        slack_ns = TIMER_SLACK_NS
        yield_cpu = _yield_cpu
        create_task = self.loop.create_task
        pending = self.outcome.pending
        first = True
        while True:
            if not first:
                planned_ns += int(intervals.next_interval() * 1e9)
            first = False
            if end_ns is not None and planned_ns >= end_ns:
                # The phase lasts its full duration, so the next phase starts on time.
                await CLOCK.sleep_until_ns(end_ns)
                return
            if deadline_ns is not None and planned_ns >= deadline_ns:
                self.outcome.deadline_reached = True
                return
            request = self.next_request()  # prepared before the wait: not part of the lag
            if request is None:
                return
            delay_ns = planned_ns - now_ns()
            yielded = False
            if delay_ns > slack_ns:
                await asyncio.sleep((delay_ns - slack_ns) / 1e9)
                yielded = True
            if slack_ns:
                while now_ns() < planned_ns:
                    yield_cpu()
                    await asyncio.sleep(0)
                    yielded = True
            if not yielded:
                # Behind schedule: yield once anyway, so tasks already created start now rather
                # than after a backlog of further sends.
                await asyncio.sleep(0)
            self.outcome.sent += 1
            task = create_task(self._open_request(request, planned_ns))
            pending.add(task)
            task.add_done_callback(pending.discard)

    async def _open_request(self, request: Request, scheduled_ns: int) -> None:
        actual_ns = CLOCK.now_ns()
        self.outcome.lag_ns.append(actual_ns - scheduled_ns)
        # With a client-side cap, waiting for a slot is latency the user sees: start at the
        # planned time (no coordinated omission). Without one, start when actually sent.
        start_ns = scheduled_ns if self.slots is not None else actual_ns
        await self.send_one(request, start_ns, scheduled_ns)


async def run_phase(
    spec: PhaseSpec,
    send: SendFunction,
    requests: Iterator[Request],
    on_record: Callable[[RequestRecord], None],
    request_timeout_s: float,
    stop: asyncio.Event | None = None,
    deadline_ns: int | None = None,
    outcome: PhaseOutcome | None = None,
) -> PhaseOutcome:
    """Run one phase and return its outcome; every request sent is handed to `on_record`.

    - Closed loop ("concurrency"): `target` workers each send a request as soon as their
      previous one finished, so exactly `target` are in flight.
    - Open loop ("rate"): sends happen at planned times (first at the phase start, then after
      each `next_interval()`), each in its own task so slow requests never delay the schedule;
      `scheduled_ns` is the planned time and `start_ns - scheduled_ns` the harness lag. With
      `max_concurrency`, a request waits for a client slot and `start_ns` = its planned time.
    - A request over `request_timeout_s` is cancelled and recorded with error
      "timeout after X s"; an exception from `send` becomes the record's error text.
    - `stop` set or `deadline_ns` reached: issuing ends, in-flight requests are cancelled and
      recorded as errors ("stopped" / "stopped: run deadline reached ..."), then it returns.
    Pass `outcome` (from `PhaseOutcome.for_spec`) to watch counters while the phase runs.
    """
    if spec.strategy not in ("concurrency", "rate"):
        raise ValueError(f"unknown strategy {spec.strategy!r}")
    if spec.target <= 0:
        raise ValueError("target must be > 0")
    outcome = outcome or PhaseOutcome.for_spec(spec)
    if spec.start_at_ns is not None:
        await CLOCK.sleep_until_ns(spec.start_at_ns)
    outcome.start_ns = CLOCK.now_ns() if spec.start_at_ns is None else spec.start_at_ns
    phase = _PhaseRun(spec, send, requests, on_record, request_timeout_s, outcome, deadline_ns)
    if spec.duration_s is not None:
        phase.issue_end_ns = outcome.start_ns + int(spec.duration_s * 1e9)
    loop = asyncio.get_running_loop()
    watcher = loop.create_task(_watch(phase, stop, deadline_ns)) if (stop or deadline_ns) else None
    ender = loop.create_task(_watch_end_early(phase)) if spec.end_early is not None else None
    body = phase.run_closed() if spec.strategy == "concurrency" else phase.run_open()
    phase.issuer = loop.create_task(body)
    try:
        await asyncio.wait({phase.issuer})
        outcome.issue_end_ns = CLOCK.now_ns()
        if spec.strategy == "rate" and (spec.drain or phase.cancel_reason is not None):
            while outcome.pending:
                await asyncio.wait(set(outcome.pending))
    except asyncio.CancelledError:
        phase.cancel_all(STOPPED)  # our caller was cancelled: record what was in flight
        tasks = [*outcome.pending, *phase.workers, phase.issuer]
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
        if ender is not None:
            ender.cancel()
    outcome.end_ns = CLOCK.now_ns()
    if phase.sink_error is not None:
        raise phase.sink_error
    return outcome


async def _watch_end_early(phase: _PhaseRun) -> None:
    """Ask the spec's `end_early` periodically; end the phase (only) when it gives a reason."""
    check = phase.spec.end_early
    assert check is not None
    while phase.cancel_reason is None:
        await CLOCK.sleep(END_EARLY_CHECK_S)
        reason = check(phase.outcome)
        if reason:
            phase.cancel_all(reason, whole_run=False)
            return


async def _watch(phase: _PhaseRun, stop: asyncio.Event | None, deadline_ns: int | None) -> None:
    """Cancel the phase when `stop` is set or the run deadline passes."""
    timeout_s = None if deadline_ns is None else max(0.0, (deadline_ns - CLOCK.now_ns()) / 1e9)
    if stop is None:
        await asyncio.sleep(timeout_s or 0.0)
        reason = DEADLINE_REACHED
    else:
        try:
            await asyncio.wait_for(stop.wait(), timeout_s)
            reason = STOPPED
        except TimeoutError:
            reason = DEADLINE_REACHED
    phase.cancel_all(reason)
