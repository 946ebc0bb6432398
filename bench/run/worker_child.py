"""What runs inside an engine's worker process: load the backend, then either run the load
pattern in-process (one engine) or serve the requests the parent's load generator sends (one
replica of several, bench/run/replicas.py), reporting through the typed events of
bench/run/worker_events.py.

The parent side (bench/run/worker.py) spawns bench/run/worker_boot.py, which calls `_child_main`
here; nothing here runs in the parent.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import traceback
from typing import Any

from bench.core.config import RunConfig
from bench.core.progress import RunProgress
from bench.core.schema import ModelInfo, PhaseResult, RequestRecord
from bench.engines.backends.base import Request
from bench.run.backend_load import load_backend
from bench.run.worker_events import (
    Closed,
    Outcome,
    PhaseDone,
    Progress,
    Records,
    RequestDone,
    StreamedChunk,
    WorkerError,
)

RECORD_FLUSH_S = 0.05
RECORD_FLUSH_COUNT = 256
LOG_TAIL_BYTES = 4000
STOP_POLL_S = 0.1
"""How often the worker looks at the stop flag the parent sets."""

# --------------------------------------------------------------------------- one engine


def _child_main(
    config_json: str,
    model_json: str,
    log_path: str,
    events: Any,
    stop: Any,
    env: dict[str, str] | None = None,
    requests: Any = None,
    gpus: int | None = None,
) -> None:
    """The worker proper, called by bench/run/worker_boot.py once the worker is in a session of
    its own and watches its parent (spawned, so it imports nothing from the parent).

    `env` (the replica's CUDA_VISIBLE_DEVICES) is applied before any framework is imported, so
    the engine and every process it starts see only the replica's GPUs. With a `requests`
    queue the worker serves requests sent by the parent's load generator (bench/run/replicas.py)
    instead of running the load pattern itself.
    """
    os.environ.update(env or {})
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    try:
        config = RunConfig.model_validate_json(config_json)
        run_loop = asyncio.run
        if config.event_loop == "uvloop":
            import uvloop

            run_loop = uvloop.run
        if requests is not None:
            run_loop(serve_requests(config, model_json, events, requests))
        else:
            run_loop(_child_async(config, model_json, events, stop, gpus))
    except BaseException as exc:  # report every failure, then exit non-zero
        traceback.print_exc()
        tail = traceback.format_exc()[-LOG_TAIL_BYTES:]
        events.put(WorkerError(cause=_describe(exc), log_tail=tail))
        raise SystemExit(1) from None


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return text.splitlines()[0][:500] if text else type(exc).__name__


async def _child_async(
    config: RunConfig, model_json: str, events: Any, stop_mp: Any, gpus: int | None
) -> None:
    from bench.run.runner import RunEvents, execute

    model = ModelInfo.model_validate_json(model_json)
    backend = await load_backend(config, model, events)

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def watch_stop() -> None:
        while not stop_mp.value:
            time.sleep(STOP_POLL_S)
        loop.call_soon_threadsafe(stop.set)

    threading.Thread(target=watch_stop, name="stop-flag", daemon=True).start()

    pending: list[RequestRecord] = []
    last_flush = time.monotonic()

    def flush() -> None:
        nonlocal last_flush
        if pending:
            events.put(Records.model_construct(records=list(pending)))
            pending.clear()
        last_flush = time.monotonic()

    def on_record(record: RequestRecord) -> None:
        pending.append(record)  # finished: the driver never changes a record it handed out
        if len(pending) >= RECORD_FLUSH_COUNT or time.monotonic() - last_flush > RECORD_FLUSH_S:
            flush()

    def on_phase(phase: PhaseResult) -> None:
        flush()
        events.put(PhaseDone(phase=phase))

    def on_progress(progress: RunProgress) -> None:
        flush()
        events.put(Progress(progress=progress))

    async def flusher() -> None:  # records of a slow run still reach the parent promptly
        while True:
            await asyncio.sleep(0.25)
            flush()

    flush_task = asyncio.create_task(flusher())
    try:
        outcome = await execute(
            config, backend, model, RunEvents(on_record, on_phase, on_progress), stop, gpus
        )
    finally:
        flush_task.cancel()
        flush()
    # The outcome goes out before close(): a close that hangs or fails must not lose the run.
    server_metrics = getattr(backend, "server_metrics", None)  # a served engine's /metrics
    events.put(
        Outcome(
            pattern_report=outcome.pattern_report,
            warmup_s=outcome.warmup_s,
            stopped=stop.is_set(),
            server_metrics=server_metrics() if server_metrics else [],
        )
    )
    await backend.close()
    events.put(Closed())


# --------------------------------------------------------------------------- one replica


async def serve_requests(config: RunConfig, model_json: str, events: Any, requests: Any) -> None:
    """In a replica worker: load the engine, then serve what the parent sends until "close".

    Messages in: ("request", key, Request), ("cancel", key), ("close",). Out: `Loaded`, then a
    `RequestDone` per request, and `Closed` after the engine is closed (bench/run/worker_events.py).
    """
    model = ModelInfo.model_validate_json(model_json)
    backend = await load_backend(config, model, events)
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple] = asyncio.Queue()

    def read() -> None:  # the multiprocessing queue blocks: read it in a thread
        while True:
            try:
                message = requests.get()
            except (EOFError, OSError):
                message = ("close",)
            loop.call_soon_threadsafe(inbox.put_nowait, message)
            if message[0] == "close":
                return

    threading.Thread(target=read, name="replica-inbox", daemon=True).start()
    tasks: dict[int, asyncio.Task] = {}

    async def serve(key: int, request: Request) -> None:
        chunks: list[StreamedChunk] = []
        error: str | None = None
        try:
            async for chunk in backend.stream(request):
                chunks.append(
                    (chunk.t_ns, chunk.tokens, chunk.usage_output_tokens, chunk.usage_input_tokens)
                )
        except asyncio.CancelledError:
            error = "cancelled by the load generator"
        except Exception as exc:  # an engine error fails the request, not the replica
            error = f"{type(exc).__name__}: {exc}".strip()
        finally:
            tasks.pop(key, None)
        events.put(RequestDone.model_construct(key=key, chunks=chunks, error=error))

    while True:
        message = await inbox.get()
        if message[0] == "request":
            _, key, request = message
            tasks[key] = asyncio.create_task(serve(key, request))
        elif message[0] == "cancel":
            task = tasks.get(message[1])
            if task is not None:
                task.cancel()
        elif message[0] == "close":
            break
    for task in list(tasks.values()):
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    await backend.close()
    events.put(Closed())
