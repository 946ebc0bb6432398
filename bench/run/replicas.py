"""Several engine replicas behind one load generator: a run with `parallelism.replicas > 1`.

Each replica is an isolated worker (bench/run/worker.py: spawned, own session, whole-tree kill) on
its own GPUs (CUDA_VISIBLE_DEVICES from bench/run/placement.py) that serves requests sent to it
(`serve_requests` in bench/run/worker_child.py); the
parent runs the load pattern once (bench/run/runner.py) against `ReplicaPool`, which sends each
request to the live replica with the fewest outstanding requests (ties in turn) and tags the
record with it. Timing: the record's start and end are taken in the parent, chunk arrival
times in the replica as the engine yields them; both are `time.perf_counter_ns`, which on Linux
is CLOCK_MONOTONIC, one clock for every process of the machine. The hop to the replica is
inside TTFT (as a network hop is for a server's client); a replica sends a request's chunks when
the request ends (one message per request), so the hop back adds to E2E only.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core.config import RunConfig
from bench.core.progress import RunProgress
from bench.core.schema import (
    Failure,
    ModelInfo,
    PhaseResult,
    ReplicaResult,
    RequestRecord,
    RunStatus,
)
from bench.engines.backends.base import Chunk, Request
from bench.run.placement import Placement
from bench.run.worker import Worker, advice_for
from bench.run.worker_events import (
    Closed,
    Exited,
    Loaded,
    ReplicaEvent,
    RequestDone,
    WorkerError,
    WorkerOutcome,
)

CLOSE_GRACE_S = 60.0
"""How long replicas get to close their engines cleanly before their trees are killed."""


# --------------------------------------------------------------------------- parent side


class ReplicaError(RuntimeError):
    """A request a replica failed (engine error) or could not serve (replica gone)."""


@dataclass
class _Replica:
    index: int
    worker: Worker
    outstanding: int = 0
    loaded: Loaded | None = None
    failure: Failure | None = None
    closed: bool = False
    exit_code: int | None = None

    @property
    def live(self) -> bool:
        return self.loaded is not None and self.failure is None and not self.closed


class ReplicaStream:
    """One request's chunks from the replica that serves it; `replica` says which (the load
    driver tags the record with it)."""

    def __init__(self, pool: ReplicaPool, request: Request) -> None:
        self.pool = pool
        self.key = next(pool.keys)
        self.replica, self.future = pool.send(self.key, request)
        self._chunks: Any = None
        self._settled = False

    def __aiter__(self) -> ReplicaStream:
        return self

    async def __anext__(self) -> Chunk:
        if self._chunks is None:
            chunks, error = await self.future
            self._settled = True
            if error is not None:
                raise ReplicaError(error)
            self._chunks = iter(chunks)
        try:
            t_ns, tokens, usage_output, usage_input = next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None
        return Chunk(t_ns, tokens, usage_output, usage_input)

    async def aclose(self) -> None:
        """The driver gave up on the request (time-out, stop): tell the replica."""
        if not self._settled:
            self.pool.cancel(self.key)


class ReplicaPool:
    """N replica workers seen as one backend: `stream(request)` picks the replica.

    Routing: least outstanding requests first among live replicas; ties go in turn (so one
    request at a time alternates). A replica that fails or exits fails its outstanding
    requests; the others keep serving, and `failed` is set so the run ends as FAILED.
    """

    def __init__(
        self,
        config: RunConfig,
        model: ModelInfo,
        placement: Placement,
        log_paths: list[Path],
    ) -> None:
        self.replicas = [
            _Replica(
                index,
                Worker(config, model, log_paths[index], env=placement.env(index), serve=True),
            )
            for index in range(placement.replicas)
        ]
        self.keys = itertools.count()
        self.pending: dict[int, tuple[int, asyncio.Future]] = {}
        self.failed = asyncio.Event()
        self.changed = asyncio.Event()
        self._turn = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._readers: list[threading.Thread] = []
        self._reading = threading.Event()

    # -- lifecycle

    def prepare_request(self, request: Any) -> Any:
        """Unchanged: each replica's own backend prepares the request in its worker (an openai
        replica decodes a text prompt there, inside the request's time; no tokenizer here)."""
        return request

    def text_codec(self) -> Any:
        """None: conversation histories are built from token IDs; each replica's backend turns
        them into text if it sends text."""
        return None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._reading.set()
        for replica in self.replicas:
            replica.worker.start()
            reader = threading.Thread(
                target=self._read, args=(replica,), name=f"replica-{replica.index}", daemon=True
            )
            reader.start()
            self._readers.append(reader)

    def pids(self) -> list[int]:
        """Every process of every replica the parent knows of (for telemetry)."""
        found: list[int] = []
        for replica in self.replicas:
            if replica.worker.pid is not None:
                found.append(replica.worker.pid)
            if replica.worker.tree is not None:
                found.extend(replica.worker.tree.known)
        return found

    async def wait_loaded(self, timeout_s: float) -> Failure | None:
        """Until every replica has loaded (None) or one failed or the time ran out (why)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for replica in self.replicas:
                if replica.failure is not None:
                    return Failure(
                        cause=f"replica {replica.index}: {replica.failure.cause}",
                        advice=replica.failure.advice,
                        log_tail=replica.failure.log_tail,
                    )
            if all(replica.loaded is not None for replica in self.replicas):
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return Failure(cause=f"replicas not loaded after {timeout_s:.0f} s (watchdog)")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(remaining, 1.0))

    async def sample_counters(self) -> None:
        """Nothing to read: a replica run does not collect its servers' counters (each replica
        worker would need its own window)."""

    async def close(self) -> None:
        """Ask every live replica to close its engine, wait, then stop every worker tree."""
        for replica in self.replicas:
            if replica.worker.requests is not None and replica.failure is None:
                with contextlib.suppress(Exception):
                    replica.worker.requests.put(("close",))
        deadline = time.monotonic() + CLOSE_GRACE_S
        while time.monotonic() < deadline and not all(
            replica.closed or replica.failure is not None or not replica.worker.is_alive()
            for replica in self.replicas
        ):
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 0.5)
        self._reading.clear()
        await asyncio.gather(
            *(asyncio.to_thread(replica.worker.shutdown) for replica in self.replicas)
        )
        for replica in self.replicas:
            replica.exit_code = replica.worker.exitcode

    def kill(self) -> None:
        for replica in self.replicas:
            replica.worker.kill()

    # -- routing

    def stream(self, request: Request) -> ReplicaStream:
        return ReplicaStream(self, request)

    def send(self, key: int, request: Request) -> tuple[int, asyncio.Future]:
        loop = self._loop or asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        count = len(self.replicas)
        order = [(self._turn + offset) % count for offset in range(count)]
        live = [index for index in order if self.replicas[index].live]
        if not live:
            future.set_result(([], "no replica is serving (all failed or closed)"))
            return 0, future
        index = min(live, key=lambda i: self.replicas[i].outstanding)  # first in turn wins ties
        self._turn = (index + 1) % count
        replica = self.replicas[index]
        replica.outstanding += 1
        self.pending[key] = (index, future)
        replica.worker.requests.put(("request", key, request))  # type: ignore[union-attr]
        return index, future

    def cancel(self, key: int) -> None:
        entry = self.pending.pop(key, None)
        if entry is None:
            return
        index, _future = entry
        replica = self.replicas[index]
        replica.outstanding -= 1
        if replica.live:
            with contextlib.suppress(Exception):
                replica.worker.requests.put(("cancel", key))  # type: ignore[union-attr]

    # -- events from the replicas (reader threads hand them to the loop)

    def _read(self, replica: _Replica) -> None:
        worker = replica.worker
        while self._reading.is_set():
            worker.snapshot_tree()
            try:
                event = worker.events.get(timeout=0.2)
            except queue.Empty:
                if not worker.is_alive():
                    self._deliver(replica, Exited(exit_code=worker.exitcode))
                    return
                continue
            except (EOFError, OSError):
                return
            self._deliver(replica, event)

    def _deliver(self, replica: _Replica, event: ReplicaEvent) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._on_event, replica, event)

    def _on_event(self, replica: _Replica, event: ReplicaEvent) -> None:
        if isinstance(event, RequestDone):
            entry = self.pending.pop(event.key, None)
            if entry is not None:
                replica.outstanding -= 1
                if not entry[1].done():
                    entry[1].set_result((event.chunks, event.error))
        elif isinstance(event, Loaded):
            replica.loaded = event
        elif isinstance(event, Closed):
            replica.closed = True
        elif isinstance(event, WorkerError):
            failure = Failure(
                cause=event.cause, advice=advice_for(event.cause), log_tail=event.log_tail
            )
            self._fail(replica, failure)
        elif isinstance(event, Exited):
            replica.exit_code = event.exit_code
            if not replica.closed:
                cause = f"worker exited with code {event.exit_code} before finishing"
                self._fail(replica, Failure(cause=cause, advice=advice_for(cause)))
        # Progress ("loading") needs nothing here: the pool's watchdog is the load time-out.
        self.changed.set()

    def _fail(self, replica: _Replica, failure: Failure) -> None:
        if replica.failure is None:
            replica.failure = failure
            if replica.failure.log_tail is None:
                replica.failure.log_tail = replica.worker.log_tail() or None
        for key, (index, future) in list(self.pending.items()):
            if index == replica.index:
                self.pending.pop(key)
                replica.outstanding -= 1
                if not future.done():
                    future.set_result(([], f"replica {index} failed: {failure.cause}"))
        self.failed.set()


# --------------------------------------------------------------------------- one run


def run_replicas(
    config: RunConfig,
    model: ModelInfo,
    placement: Placement,
    log_paths: list[Path],
    on_records: Callable[[list[RequestRecord]], None],
    on_progress: Callable[[RunProgress], None],
    stop: threading.Event | None = None,
    on_pool: Callable[[ReplicaPool], None] | None = None,
    load_timeout_s: float = 3600.0,
) -> WorkerOutcome:
    """Start the replicas, run the load pattern against them once, stop them all.

    Engine failures never raise: they come back as a FAILED outcome with the cause.
    `on_pool` receives the pool once its workers started (telemetry reads its pids).
    """
    run = asyncio.run
    if config.event_loop == "uvloop":
        import uvloop

        run = uvloop.run
    return run(
        _run(config, model, placement, log_paths, on_records, on_progress, stop, on_pool,
             load_timeout_s)
    )  # fmt: skip


async def _run(
    config: RunConfig,
    model: ModelInfo,
    placement: Placement,
    log_paths: list[Path],
    on_records: Callable[[list[RequestRecord]], None],
    on_progress: Callable[[RunProgress], None],
    stop: threading.Event | None,
    on_pool: Callable[[ReplicaPool], None] | None,
    load_timeout_s: float,
) -> WorkerOutcome:
    from bench.run.runner import RunEvents, execute

    pool = ReplicaPool(config, model, placement, log_paths)
    outcome = WorkerOutcome(status="FAILED")
    stopping = asyncio.Event()
    user_stopped = False

    async def watch() -> None:
        nonlocal user_stopped
        while not stopping.is_set():
            if stop is not None and stop.is_set():
                user_stopped = True
                stopping.set()
            if pool.failed.is_set():
                stopping.set()
            await asyncio.sleep(0.1)

    pool.start()
    if on_pool is not None:
        on_pool(pool)
    watcher = asyncio.create_task(watch())
    try:
        on_progress(RunProgress(stage="loading"))
        load_failure = await pool.wait_loaded(load_timeout_s)
        if load_failure is not None:
            outcome.failure = load_failure
        elif stopping.is_set():
            outcome.status = "STOPPED"
        else:
            on_progress(RunProgress(stage="loaded"))
            phases: list[PhaseResult] = []
            events = RunEvents(
                on_record=lambda record: on_records([record]),
                on_phase=phases.append,
                on_progress=on_progress,  # the run loop's snapshots are stage "running"
            )
            executed = await execute(config, pool, model, events, stopping, placement.gpus)
            outcome.phases = phases
            outcome.pattern_report = executed.pattern_report
            outcome.warmup_s = executed.warmup_s
            outcome.status = "STOPPED" if user_stopped else "COMPLETED"
        failed = [replica for replica in pool.replicas if replica.failure is not None]
        if failed and outcome.failure is None:
            first = failed[0]
            outcome.status = "FAILED"
            outcome.failure = Failure(
                cause=f"replica {first.index}: {first.failure.cause}",  # type: ignore[union-attr]
                advice=first.failure.advice,  # type: ignore[union-attr]
                log_tail=first.failure.log_tail,  # type: ignore[union-attr]
            )
        if outcome.status == "STOPPED" and outcome.failure is None:
            outcome.failure = Failure(cause="stopped by user")
    finally:
        stopping.set()
        watcher.cancel()
        await pool.close()
    outcome.loaded = pool.replicas[0].loaded or Loaded()
    for replica in pool.replicas:
        outcome.survivors += replica.worker.survivors
        loaded = replica.loaded or Loaded()
        status = RunStatus.FAILED if replica.failure is not None else RunStatus(outcome.status)
        outcome.replicas.append(
            ReplicaResult(
                replica=replica.index,
                cuda_visible_devices=placement.env(replica.index).get("CUDA_VISIBLE_DEVICES"),
                pid=replica.worker.pid,
                status=status,
                exit_code=replica.exit_code,
                failure=replica.failure,
                load_s=loaded.load_s,
                log_path=str(replica.worker.log_path),
                engine=loaded.engine,
            )
        )
    return outcome
