"""One open-loop phase driven from several client processes (`load.client_processes` = N).

Why: one asyncio loop sends about 2,000 text-prompt requests/s over HTTP on one core (issue 51);
processes on further cores take one run further. How:

- The schedule stays global: arrival i of the phase's seeded Poisson or constant schedule goes to
  process i mod N (`StridedIntervals`), every process starting from one common instant
  (`PhaseSpec.start_at_ns`; CLOCK is CLOCK_MONOTONIC, one clock for every process of a host).
- So do the requests: the run's prepared requests, in order, request i to process i mod N. A
  helper's share is taken from the prepared buffer and sent to it before the phase clock starts
  (the helper acknowledges, then every process gets the start time), so no process prepares or
  receives requests while it sends.
- Process 0 is the worker itself (its own loop and backend); helpers 1..N-1 are spawned once per
  run, each with its own event loop and its own backend client. Only the openai backend is split
  (an HTTP client opens anywhere; an in-process engine cannot be shared), which RunConfig checks.
- Helper records come back over a pipe in batches and join the phase's outcome and the run's
  records in the worker, so the run holds every request once; lag and achieved rate are kept per
  process (`ClientProcessOverhead`) and in all (`HarnessOverhead`).

Only drained open-loop phases over the run's own requests are split; closed-loop phases (warm-up,
concurrency levels), pulse phases (not drained) and trace replays run in the worker alone.
A phase's `end_early` check sees the worker's share only (a 1/N sample of the same schedule).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import multiprocessing as mp
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.core.clock import CLOCK
from bench.core.config import RunConfig
from bench.core.metrics import NS_PER_MS, percentiles_ms
from bench.core.pattern_reports import ClientProcessOverhead
from bench.core.schema import ModelInfo, RequestRecord
from bench.engines.backends.base import Request
from bench.run.load.driver import PhaseOutcome, PhaseSpec, SendFunction, run_phase
from bench.run.load.strategies import StridedIntervals, make_intervals

START_LEAD_S = 0.05
"""Between the last helper's acknowledgement and the common start: time for the start message."""
HELPER_START_TIMEOUT_S = 120.0
"""How long a helper may take to start (import, open its client) before the run fails."""
RECORD_BATCH = 256
RECORD_FLUSH_S = 0.05


def splits(spec: PhaseSpec, processes: int) -> bool:
    """Whether this phase is split across the client processes (see the module docstring)."""
    return (
        processes > 1
        and spec.strategy == "rate"
        and spec.drain
        and spec.intervals is None
        and spec.requests is None
    )


def share_count(total: int, processes: int, index: int) -> int:
    """How many of arrivals 0..total-1 go to process `index` (arrival i to i mod processes)."""
    return (total - index + processes - 1) // processes


def share_spec(spec: PhaseSpec, processes: int, index: int, start_at_ns: int) -> PhaseSpec:
    """Process `index`'s part of `spec`: every processes-th arrival from arrival `index`, from the
    common start; a client-side cap on requests in flight is split too."""
    cap = spec.max_concurrency
    return PhaseSpec(
        name=spec.name,
        strategy="rate",
        target=spec.target,
        duration_s=spec.duration_s,
        max_requests=None
        if spec.max_requests is None
        else share_count(spec.max_requests, processes, index),
        arrival=spec.arrival,
        seed=spec.seed,
        max_concurrency=None if cap is None else max(1, -(-cap // processes)),
        warmup=spec.warmup,
        drain=True,
        intervals=StridedIntervals(
            make_intervals(spec.arrival, spec.target, spec.seed), processes, index
        ),
        start_at_ns=start_at_ns,
        end_early=spec.end_early if index == 0 else None,
    )


@dataclass
class _ProcessFigures:
    sent: int = 0
    lag_ns: array = field(default_factory=lambda: array("q"))
    cpu_s: float = 0.0
    wall_ns: int = 0  # from the common start to this process's last request's end


@dataclass
class _HelperDone:
    sent: int
    start_ns: int
    end_ns: int
    issue_end_ns: int | None
    lag: bytes
    cpu_s: float
    stopped: bool
    deadline_reached: bool


class ClientProcesses:
    """The worker's side: spawns the helpers (once, at the first split phase), hands each phase
    out and merges what comes back. `close()` ends the helpers."""

    def __init__(self, config: RunConfig, model: Any, backend: Any) -> None:
        self.count = config.load.client_processes
        self.config = config
        self.model = model
        self.backend = backend
        self.helpers: list[_Helper] = []
        self.figures = [_ProcessFigures() for _ in range(self.count)]
        self.measured_wall_ns = 0

    def start(self) -> None:
        """Spawn the helpers and wait until each has opened its client (before any clock)."""
        if self.helpers:
            return
        engine_args = dict(self.config.engine_args)
        # Helpers talk to the server the worker found or started; they never start one.
        for key in ("launch", "server_args", "server_env", "server_log_path"):
            engine_args.pop(key, None)
        engine_args.update(
            base_url=self.backend.base_url, model=self.backend.served_model, scrape_metrics=False
        )
        config = self.config.model_copy(update={"engine_args": engine_args})
        model_json = (
            ModelInfo.model_validate(self.model).model_dump_json()
            if not isinstance(self.model, ModelInfo)
            else self.model.model_dump_json()
        )
        context = mp.get_context("spawn")
        for index in range(1, self.count):
            to_helper, helper_in = context.Pipe()
            helper_out, from_helper = context.Pipe()
            process = context.Process(
                target=helper_main,
                args=(index, config.model_dump_json(), model_json, helper_in, helper_out),
                name=f"bench-client-{index}",
                daemon=True,
            )
            process.start()
            self.helpers.append(_Helper(index, process, to_helper, from_helper))
        for helper in self.helpers:
            if not helper.incoming.poll(HELPER_START_TIMEOUT_S):
                raise RuntimeError(f"client process {helper.index} did not start")
            message = helper.incoming.recv()
            if message[0] != "ready":
                raise RuntimeError(f"client process {helper.index}: {message[1]}")

    async def run_phase(
        self,
        spec: PhaseSpec,
        source: Iterator[Request],
        send: SendFunction,
        on_record: Callable[[RequestRecord], None],
        request_timeout_s: float,
        stop: asyncio.Event,
        deadline_ns: int,
        outcome: PhaseOutcome,
        total: int,
    ) -> PhaseOutcome:
        """Run `spec` split across the processes; `outcome` ends up holding all of them."""
        self.start()
        loop = asyncio.get_running_loop()
        taken = list(itertools.islice(source, total))  # prepared already (the caller filled)
        shares = [taken[index :: self.count] for index in range(self.count)]
        del taken
        done: list[asyncio.Future[_HelperDone]] = []
        for helper in self.helpers:
            future: asyncio.Future[_HelperDone] = loop.create_future()
            helper.arm(loop, future, outcome, on_record)
            helper.outgoing.send(("phase", spec.name, shares[helper.index]))
            done.append(future)
        for helper in self.helpers:  # each has unpacked its share
            message = helper.incoming.recv()
            if message[0] != "armed":
                raise RuntimeError(f"client process {helper.index}: {message[1]}")
        for helper in self.helpers:
            helper.listen()
        start_at_ns = CLOCK.now_ns() + int(START_LEAD_S * 1e9)
        fields = {
            "target": spec.target,
            "duration_s": spec.duration_s,
            "max_requests": spec.max_requests,
            "arrival": spec.arrival,
            "seed": spec.seed,
            "max_concurrency": spec.max_concurrency,
            "warmup": spec.warmup,
            "processes": self.count,
            "start_at_ns": start_at_ns,
            "deadline_ns": deadline_ns,
            "timeout_s": request_timeout_s,
        }
        for helper in self.helpers:
            helper.outgoing.send(("go", fields))

        async def forward_stop() -> None:
            await stop.wait()
            for helper in self.helpers:
                helper.outgoing.send(("stop",))

        stopper = loop.create_task(forward_stop())
        cpu_before = time.process_time()
        try:
            own = share_spec(spec, self.count, 0, start_at_ns)
            own_lag_before = len(outcome.lag_ns)
            await run_phase(
                own,
                send,
                iter(shares[0]),
                on_record,
                request_timeout_s,
                stop,
                deadline_ns,
                outcome,
            )
            own_sent = outcome.sent
            own_end_ns = outcome.end_ns
            own_lag = outcome.lag_ns[own_lag_before:]
            results = await asyncio.gather(*done)
        finally:
            stopper.cancel()
            for helper in self.helpers:
                helper.disarm()
        own_cpu = time.process_time() - cpu_before
        outcome.start_ns = start_at_ns
        for helper, result in zip(self.helpers, results, strict=True):
            outcome.sent += result.sent
            outcome.lag_ns.frombytes(result.lag)
            outcome.end_ns = max(outcome.end_ns, result.end_ns)
            if result.issue_end_ns is not None and outcome.issue_end_ns is not None:
                outcome.issue_end_ns = max(outcome.issue_end_ns, result.issue_end_ns)
            outcome.stopped = outcome.stopped or result.stopped
            outcome.deadline_reached = outcome.deadline_reached or result.deadline_reached
            if not spec.warmup:
                figures = self.figures[helper.index]
                figures.sent += result.sent
                figures.lag_ns.frombytes(result.lag)
                figures.cpu_s += result.cpu_s
                figures.wall_ns += max(0, result.end_ns - start_at_ns)
        if not spec.warmup:
            self.figures[0].sent += own_sent
            self.figures[0].lag_ns.extend(own_lag)
            self.figures[0].cpu_s += own_cpu
            self.figures[0].wall_ns += max(0, own_end_ns - start_at_ns)
            self.measured_wall_ns += max(0, outcome.end_ns - outcome.start_ns)
        return outcome

    def helper_cpu_s(self) -> float:
        return sum(figures.cpu_s for figures in self.figures[1:])

    def report(self) -> list[ClientProcessOverhead]:
        """Per-process figures over the measured split phases."""
        import numpy as np

        rows = []
        for index, figures in enumerate(self.figures):
            lag = (
                percentiles_ms(np.frombuffer(figures.lag_ns, dtype=np.int64) / NS_PER_MS)
                if figures.lag_ns
                else None
            )
            rows.append(
                ClientProcessOverhead(
                    process=index,
                    sent=figures.sent,
                    achieved_rps=(
                        round(figures.sent / (figures.wall_ns / 1e9), 1) if figures.wall_ns else 0.0
                    ),
                    scheduling_lag_p50_ms=None if lag is None else lag.p50,
                    scheduling_lag_p99_ms=None if lag is None else lag.p99,
                    cpu_s=round(figures.cpu_s, 3),
                )
            )
        return rows

    def close(self) -> None:
        for helper in self.helpers:
            helper.close()
        self.helpers = []


class _Helper:
    """The worker's handle on one helper: its pipes, and a reader thread that hands its records
    to the worker's loop while a phase runs."""

    def __init__(self, index: int, process: Any, outgoing: Any, incoming: Any) -> None:
        self.index = index
        self.process = process
        self.outgoing = outgoing
        self.incoming = incoming
        self.reader: threading.Thread | None = None

    def arm(
        self,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[_HelperDone],
        outcome: PhaseOutcome,
        on_record: Callable[[RequestRecord], None],
    ) -> None:
        self.loop, self.future, self.outcome, self.on_record = loop, future, outcome, on_record

    def listen(self) -> None:
        self.reader = threading.Thread(
            target=self._read, name=f"client-{self.index}-records", daemon=True
        )
        self.reader.start()

    def _read(self) -> None:
        """Until the helper's "done": records to the loop in order, then the result."""
        loop = self.loop
        try:
            while True:
                message = self.incoming.recv()
                if message[0] == "records":
                    loop.call_soon_threadsafe(self._deliver, message[1])
                elif message[0] == "done":
                    loop.call_soon_threadsafe(self._resolve, _HelperDone(**message[1]), None)
                    return
                else:
                    raise RuntimeError(f"client process {self.index}: {message[1]}")
        except BaseException as exc:  # a dead helper fails the phase, it never hangs it
            loop.call_soon_threadsafe(self._resolve, None, exc)

    def _deliver(self, records: list[RequestRecord]) -> None:
        outcome = self.outcome
        for record in records:
            outcome.completed += 1
            if record.error is None:
                outcome.output_tokens += record.output_tokens
            else:
                outcome.failed += 1
            outcome.accumulator.add(record)
            self.on_record(record)

    def _resolve(self, result: _HelperDone | None, error: BaseException | None) -> None:
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(RuntimeError(f"client process {self.index}: {error}"))
        else:
            self.future.set_result(result)  # type: ignore[arg-type]

    def disarm(self) -> None:
        if self.reader is not None:
            self.reader.join(timeout=5.0)
            self.reader = None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.outgoing.send(("close",))
        self.process.join(timeout=10.0)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=5.0)


# --------------------------------------------------------------------------- helper process


class _NoEvents:
    """`load_backend` reports loading progress; a helper has no one to tell."""

    def put(self, event: Any) -> None:
        pass


def helper_main(
    index: int, config_json: str, model_json: str, incoming: Any, outgoing: Any
) -> None:
    """A helper process (spawned): open the backend client, then run phase shares until told
    to close."""
    config = RunConfig.model_validate_json(config_json)
    run_loop = asyncio.run
    if config.event_loop == "uvloop":
        import uvloop

        run_loop = uvloop.run
    try:
        run_loop(_helper(index, config, model_json, incoming, outgoing))
    except BaseException as exc:
        outgoing.send(("error", f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from None


async def _helper(
    index: int, config: RunConfig, model_json: str, incoming: Any, outgoing: Any
) -> None:
    from bench.run.backend_load import load_backend

    model = ModelInfo.model_validate_json(model_json)
    backend = await load_backend(config, model, _NoEvents())
    loop = asyncio.get_running_loop()
    messages: asyncio.Queue[tuple] = asyncio.Queue()
    stop = asyncio.Event()

    def read() -> None:  # a thread: a "stop" must reach a running phase at once
        while True:
            try:
                message = incoming.recv()
            except (EOFError, OSError):
                message = ("close",)
            if message[0] == "stop":
                loop.call_soon_threadsafe(stop.set)
                continue
            loop.call_soon_threadsafe(messages.put_nowait, message)
            if message[0] == "close":
                return

    threading.Thread(target=read, name="client-messages", daemon=True).start()
    outgoing.send(("ready",))
    try:
        while True:
            message = await messages.get()
            if message[0] == "close":
                return
            _, name, requests = message
            outgoing.send(("armed",))
            go = await messages.get()
            if go[0] == "close":
                return
            gc.freeze()  # as the worker does for a phase (bench/run/runner.py)
            try:
                await _helper_phase(index, name, requests, go[1], backend.stream, stop, outgoing)
            finally:
                gc.unfreeze()
    finally:
        await backend.close()


async def _helper_phase(
    index: int,
    name: str,
    requests: list[Request],
    fields: dict,
    send: SendFunction,
    stop: asyncio.Event,
    outgoing: Any,
) -> None:
    """Run this helper's share of one phase, streaming its records, then report "done"."""
    spec = PhaseSpec(
        name=name,
        strategy="rate",
        target=fields["target"],
        duration_s=fields["duration_s"],
        max_requests=fields["max_requests"],
        arrival=fields["arrival"],
        seed=fields["seed"],
        max_concurrency=fields["max_concurrency"],
        warmup=fields["warmup"],
    )
    spec = share_spec(spec, fields["processes"], index, fields["start_at_ns"])
    pending: list[RequestRecord] = []
    last_flush = time.monotonic()

    def flush() -> None:
        nonlocal last_flush
        if pending:
            outgoing.send(("records", list(pending)))
            pending.clear()
        last_flush = time.monotonic()

    def on_record(record: RequestRecord) -> None:
        pending.append(record)
        if len(pending) >= RECORD_BATCH or time.monotonic() - last_flush > RECORD_FLUSH_S:
            flush()

    async def flusher() -> None:
        while True:
            await asyncio.sleep(RECORD_FLUSH_S * 5)
            flush()

    cpu_before = time.process_time()
    task = asyncio.get_running_loop().create_task(flusher())
    try:
        outcome = await run_phase(
            spec,
            send,
            iter(requests),
            on_record,
            fields["timeout_s"],
            stop,
            fields["deadline_ns"],
        )
    finally:
        task.cancel()
        flush()
    outgoing.send(
        (
            "done",
            {
                "sent": outcome.sent,
                "start_ns": outcome.start_ns,
                "end_ns": outcome.end_ns,
                "issue_end_ns": outcome.issue_end_ns,
                "lag": outcome.lag_ns.tobytes(),
                "cpu_s": time.process_time() - cpu_before,
                "stopped": outcome.stopped,
                "deadline_reached": outcome.deadline_reached,
            },
        )
    )
