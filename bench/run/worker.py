"""Process isolation: each engine runs in its own spawned process, in a session of its own.

The child (bench/run/worker_child.py) loads the backend and runs the load pattern
(bench/run/runner.py) in-process, so no IPC sits between a request and its timestamps; it streams
records, progress and the outcome to the parent over a multiprocessing queue as the typed events of
bench/run/worker_events.py. This module is the parent side. The parent never shares the engine's
fate: a crash, an out-of-memory error or a hang (no token progress within the watchdog interval)
ends the child, and the parent reports FAILED with the cause and keeps the records it already
received.
Stop = polite stop event, grace period, SIGTERM to the whole process group, then SIGKILL.
Engine output (stdout/stderr, vLLM's engine-core children included) goes to a log file per run.
Engine scratch files (vLLM's ZeroMQ IPC sockets, which vLLM never unlinks: seven per engine in the
system temp folder) go to a folder per worker, which the parent removes once the worker's process
tree is gone (a parent killed with SIGKILL leaves it behind).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.core.config import RunConfig
from bench.core.metrics import cancelled_by_the_harness
from bench.core.progress import RunProgress
from bench.core.schema import Failure, ModelInfo, RequestRecord
from bench.engines.engine_log import with_root_cause
from bench.run.proctree import TREE_MARKER, ProcessTree
from bench.run.worker_boot import boot
from bench.run.worker_child import LOG_TAIL_BYTES
from bench.run.worker_events import (
    Closed,
    Loaded,
    Outcome,
    PhaseDone,
    Progress,
    Records,
    WorkerError,
    WorkerEvent,
    WorkerOutcome,
)

ROOT_CAUSE_SCAN_BYTES = 256 * 1024
"""How much of the engine log's end is searched for the engine's own error line."""
STOP_GRACE_S = 10.0
"""After a stop request, how long the worker may take to end its pattern and close its engine
before its process group is killed."""
SCRATCH_ENV = ("VLLM_RPC_BASE_PATH",)
"""Where an engine puts its IPC files: set to the worker's scratch folder unless the user set it."""
CONSECUTIVE_FAILURES_FATAL = 200
"""A dead engine fails every request instantly; after this many failures in a row with none
succeeding in between, the run is stopped as FAILED with the first error as its cause."""


# --------------------------------------------------------------------------- parent side


_STDERR_SWAP = threading.Lock()


@contextlib.contextmanager
def _child_stderr_into(log_path: Path) -> Any:
    """While the worker is spawned, the process's stderr (fd 2, which the child inherits) is the
    worker's log: until the worker has left the terminal's session (worker_boot.boot), a Ctrl-C
    meant for this process reaches it too, and its KeyboardInterrupt traceback belongs in its log,
    not beside this process's one-line report. No signal handler changes, so none is lost; what
    another thread writes to stderr in that moment lands in the log. One start at a time (two
    threads swapping fd 2 at once could leave it pointing at a log)."""
    with _STDERR_SWAP:
        sys.stderr.flush()
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        saved = os.dup(2)
        os.dup2(log_fd, 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(log_fd)


def _start_resource_tracker(log_path: Path) -> None:
    """Start multiprocessing's resource tracker (one per process, shared by every worker it
    starts; nothing when it runs already) deaf to SIGHUP and writing to `log_path`.

    SIGHUP: the tracker ignores SIGINT and SIGTERM itself but not SIGHUP, and a closed terminal
    sends SIGHUP to the whole foreground group: the tracker died, was relaunched and printed a
    KeyError traceback per queue under the run's one-line report. The hang-up that stops the run
    is this process's to handle (bench/run/interrupts.py); one that arrives while the tracker
    starts (once per process) is lost.

    The log: the tracker inherits this process's stderr and, when its last user is gone, warns
    there of every semaphore it had to clean up: those of a worker killed with SIGKILL (tqdm's
    lock, made while the engine loads) and, after this process itself was killed, its queues',
    printed on the terminal after the process is gone. Its cleanup is right and its warning says
    nothing the run's report does not, so it goes to the log of the run whose worker started it
    (which then holds it for the process's later workers too)."""
    from multiprocessing import resource_tracker

    with _child_stderr_into(log_path):
        if threading.current_thread() is not threading.main_thread():
            resource_tracker.ensure_running()
            return
        previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            resource_tracker.ensure_running()
        finally:
            signal.signal(signal.SIGHUP, signal.SIG_DFL if previous is None else previous)


@dataclass
class _EventState:
    """What the parent tracks between a worker's events: the watchdog's and the
    consecutive-failure rule's inputs."""

    last_progress: float
    loaded: bool = False
    output_tokens_seen: int = -1
    failures_in_row: int = 0
    first_error: str | None = None


OOM_MARKERS = ("out of memory", "outofmemory", "cuda_error_out_of_memory", "oom")


def ran_out_of_memory(error: str) -> bool:
    """A request's error is a memory exhaustion: Python's MemoryError (numpy's included) in the
    worker, or an engine's "out of memory" (CUDA OOM, a server's 500 saying so)."""
    low = error.lower()
    return "memoryerror" in low or "out of memory" in low or "outofmemory" in low


def advice_for(cause: str) -> str | None:
    """Inference-correct advice for common failure causes (never training-time remedies)."""
    low = cause.lower()
    if "available memory on node" in low:  # vLLM's CPU platform: host memory, not a GPU's
        return (
            "Not enough free host memory for vLLM on the CPU: give the KV cache an explicit "
            "size (--engine-arg kv_cache_memory_bytes=N; unset, the backend sizes it from the "
            "workload), lower max_num_seqs / max_model_len, or free memory used by other "
            "processes."
        )
    if "out of memory while serving request" in low and "memoryerror" in low:
        return (
            "The worker process ran out of host memory: lower the concurrency, the prompt or "
            "prefix sizes (docs/limits.md), or free memory used by other processes."
        )
    if any(m in low for m in OOM_MARKERS):
        return (
            "Out of GPU memory: lower gpu_memory_utilization / max_num_seqs / max_model_len, "
            "use a smaller batch, quantise weights (AWQ, FP8) or the KV cache (FP8), or add "
            "tensor parallelism."
        )
    if "hung" in low or "watchdog" in low:
        return (
            "The engine stopped producing tokens: read the engine log; raise --watchdog-s "
            "only if the engine is legitimately slow (e.g. long compiles)."
        )
    if "exited with code -9" in low or "sigkill" in low:
        return (
            "The worker was killed (host out of memory or an external kill): check dmesg "
            "and the engine log."
        )
    return None


class Worker:
    """Parent-side handle of one isolated engine process."""

    def __init__(
        self,
        config: RunConfig,
        model: ModelInfo,
        log_path: Path,
        env: dict[str, str] | None = None,
        serve: bool = False,
        gpus: int | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.log_path = Path(log_path)
        ctx = mp.get_context("spawn")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        _start_resource_tracker(self.log_path)  # before the first queue registers with it
        self._events = ctx.Queue()
        # A lock-free shared byte, not an mp.Event: Event.set() waits for every process asleep
        # in wait() to wake, and one that died asleep (the worker that just crashed) never does,
        # so setting it would hang the parent forever.
        self._stop = ctx.RawValue("b", 0)
        self.requests = ctx.Queue() if serve else None
        """serve mode: the queue the parent's load generator sends requests through."""
        self.tree_token = uuid.uuid4().hex
        env = {**(env or {}), TREE_MARKER: self.tree_token}
        self.tree: ProcessTree | None = None
        self.survivors: list[int] = []
        """Pids of the worker's tree still running after shutdown (empty unless a kill failed)."""
        self._last_snapshot = 0.0
        self._env = dict(env)
        self.scratch: Path | None = None
        """The engine's scratch folder while the worker runs (made by start, gone at shutdown)."""
        self._process = ctx.Process(
            target=boot,
            args=(
                os.getpid(),  # the parent it watches from its first line (worker_boot.py)
                config.model_dump_json(),
                model.model_dump_json(),
                str(self.log_path),
                self._events,
                self._stop,
                self._env,  # pickled by start(), so the scratch folder it adds reaches the child
                self.requests,
                gpus,
            ),
            daemon=False,
        )

    @property
    def pid(self) -> int | None:
        return self._process.pid

    @property
    def events(self) -> Any:
        return self._events

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.scratch = Path(tempfile.mkdtemp(prefix="bench-engine-"))
        for name in SCRATCH_ENV:
            if name not in self._env and name not in os.environ:
                self._env[name] = str(self.scratch)
        with _child_stderr_into(self.log_path):
            self._process.start()
        self.tree = ProcessTree(self._process.pid, self.tree_token)

    def snapshot_tree(self, every_s: float = 0.5) -> None:
        """Remember the worker's descendants (at most every `every_s`), so the ones that leave
        its process group are still killed if the worker dies first."""
        now = time.monotonic()
        if self.tree is not None and now - self._last_snapshot >= every_s:
            self._last_snapshot = now
            self.tree.snapshot()

    def is_alive(self) -> bool:
        return self._process.is_alive()

    @property
    def exitcode(self) -> int | None:
        return self._process.exitcode

    def run(
        self,
        on_records: Callable[[list[RequestRecord]], None],
        on_progress: Callable[[RunProgress], None],
        stop: Any = None,
        load_timeout_s: float = 3600.0,
        kill_now: threading.Event | None = None,
    ) -> WorkerOutcome:
        """Drive the worker to the end; always returns (never raises for engine failures).

        `stop` (anything with `is_set()`) asks for a polite stop: the worker ends its load
        pattern and closes its engine, and is killed after STOP_GRACE_S. `kill_now` (a second
        Ctrl-C) kills its process group at once. Whatever happens here (a callback raising, a
        KeyboardInterrupt), the worker's process tree is gone when this returns or raises.
        """
        try:
            outcome = self._drive(on_records, on_progress, stop, load_timeout_s, kill_now)
        except BaseException:
            self.kill()
            self.shutdown(grace_s=0)
            raise
        self.shutdown()
        if outcome.failure is not None:
            # The engine's own error line (e.g. vLLM's engine core) leads the cause.
            outcome.failure.cause = with_root_cause(
                outcome.failure.cause, self.log_tail(ROOT_CAUSE_SCAN_BYTES)
            )
            if outcome.failure.advice is None:
                outcome.failure.advice = advice_for(outcome.failure.cause)
            tail = self.log_tail()
            if tail:
                outcome.failure.log_tail = tail
        return outcome

    def _drive(
        self,
        on_records: Callable[[list[RequestRecord]], None],
        on_progress: Callable[[RunProgress], None],
        stop: Any,
        load_timeout_s: float,
        kill_now: threading.Event | None,
    ) -> WorkerOutcome:
        """The event loop of `run`: until the worker finishes, fails, hangs or is stopped."""
        outcome = WorkerOutcome(status="FAILED")
        watch = _EventState(last_progress=time.monotonic())
        started = time.monotonic()
        stop_requested_at: float | None = None
        hard_deadline = started + load_timeout_s + self.config.load.max_duration_s + 60
        while True:
            if stop is not None and stop.is_set() and stop_requested_at is None:
                stop_requested_at = time.monotonic()
                self._stop.value = 1
            if kill_now is not None and kill_now.is_set():
                self.kill()
                self._drain(outcome, watch, on_records, on_progress)  # what it sent before
                outcome.status = "STOPPED"
                outcome.failure = Failure(cause="stopped: engine killed at once (second signal)")
                break
            self.snapshot_tree()
            try:
                event = self._events.get(timeout=0.2)
            except queue.Empty:
                now = time.monotonic()
                if not self._process.is_alive():
                    self._drain(outcome, watch, on_records, on_progress)
                    code = self._process.exitcode
                    outcome.exit_code = code
                    if outcome.failure is None and outcome.status != "COMPLETED":
                        outcome.failure = Failure(
                            cause=f"worker exited with code {code} before finishing"
                        )
                    break
                if stop_requested_at is not None and now - stop_requested_at > STOP_GRACE_S:
                    self.kill()
                    self._drain(outcome, watch, on_records, on_progress)
                    outcome.status = "STOPPED"
                    outcome.failure = Failure(cause="stopped by user; engine killed after grace")
                    break
                limit = self.config.watchdog_s if watch.loaded else load_timeout_s
                if now - watch.last_progress > limit or now > hard_deadline:
                    self.kill()
                    what = "token progress" if watch.loaded else "finished loading"
                    outcome.failure = Failure(
                        cause=f"engine hung: no {what} for {limit:.0f} s (watchdog)"
                    )
                    break
                continue
            if self._handle(event, outcome, watch, on_records, on_progress):
                break
        return outcome

    def _handle(
        self,
        event: WorkerEvent,
        outcome: WorkerOutcome,
        watch: _EventState,
        on_records: Callable[[list[RequestRecord]], None],
        on_progress: Callable[[RunProgress], None],
    ) -> bool:
        """Apply one event from the worker to `outcome`; True when the run is over."""
        if isinstance(event, Records):
            records = event.records
            on_records(records)
            for record in records:
                if record.error is None:
                    watch.failures_in_row, watch.first_error = 0, None
                elif ran_out_of_memory(record.error):
                    # A process that ran out of memory once is not measuring the workload any
                    # more: the run is FAILED with that cause, never COMPLETED (INVALID).
                    self.kill()
                    cause = f"out of memory while serving request {record.id}: {record.error}"
                    outcome.failure = Failure(cause=cause[:500], advice=advice_for(cause))
                    outcome.status = "FAILED"
                    return True
                elif not cancelled_by_the_harness(record.error):
                    # The harness's own cancellations (a probe ended early cancels hundreds at
                    # once) say nothing about the engine.
                    watch.failures_in_row += 1
                    watch.first_error = watch.first_error or record.error
            if watch.failures_in_row >= CONSECUTIVE_FAILURES_FATAL:
                self.kill()
                cause = f"engine failed {watch.failures_in_row} requests in a row: "
                outcome.failure = Failure(cause=(cause + str(watch.first_error))[:500])
                outcome.status = "FAILED"
                return True
            if any(r.error is None for r in records):
                watch.last_progress = time.monotonic()
        elif isinstance(event, Progress):
            progress = event.progress
            tokens = progress.output_tokens if progress.output_tokens is not None else -1
            if tokens != watch.output_tokens_seen or progress.stage != "running":
                watch.output_tokens_seen = tokens
                watch.last_progress = time.monotonic()
            on_progress(progress)
        elif isinstance(event, Loaded):
            watch.loaded = True
            outcome.loaded = event
            watch.last_progress = time.monotonic()
            on_progress(
                RunProgress(
                    stage="loaded",
                    load_s=event.load_s,
                    compile_s=event.compile_s,
                    build_s=event.build_s,
                )
            )
        elif isinstance(event, PhaseDone):
            outcome.phases.append(event.phase)
        elif isinstance(event, Outcome):
            outcome.pattern_report = event.pattern_report
            outcome.warmup_s = event.warmup_s
            outcome.server_metrics = event.server_metrics
            outcome.status = "STOPPED" if event.stopped else "COMPLETED"
            watch.last_progress = time.monotonic()
        elif isinstance(event, Closed):
            return True
        elif isinstance(event, WorkerError):
            outcome.status = "FAILED"
            outcome.failure = Failure(
                cause=event.cause, advice=advice_for(event.cause), log_tail=event.log_tail
            )
            return True
        return False

    def _drain(
        self,
        outcome: WorkerOutcome,
        watch: _EventState,
        on_records: Callable[[list[RequestRecord]], None],
        on_progress: Callable[[RunProgress], None],
    ) -> None:
        """Apply what a dead worker left in the queue (records, its outcome or error sent just
        before it died), through the same handler as a live one."""
        with contextlib.suppress(queue.Empty, EOFError, OSError):
            while True:
                event = self._events.get(timeout=0.1)
                self._handle(event, outcome, watch, on_records, on_progress)

    def log_tail(self, max_bytes: int = LOG_TAIL_BYTES) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - max_bytes))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the worker's whole process group and every process it started."""
        pid = self._process.pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        self._process.join(timeout=10)
        self.kill_tree()

    def kill_tree(self) -> list[int]:
        """Kill what the worker started that is still running, wherever it went; the pids that
        survived (empty when none did)."""
        if self.tree is None:
            return []
        return self.tree.kill()

    def shutdown(self, grace_s: float = 15.0) -> None:
        """Wait for a clean exit, then SIGTERM the group, then SIGKILL it."""
        pid = self._process.pid
        if pid is None:
            return
        self._process.join(timeout=grace_s)
        if self._process.is_alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
            self._process.join(timeout=grace_s)
        # Children of the group (vLLM engine core, compile workers) may outlive the leader, and
        # some (TP workers in a session of their own) may have left the group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        self._process.join(timeout=5)
        self.survivors = self.kill_tree()
        if not self.survivors and self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)  # a survivor may still use it
            self.scratch = None
        self._events.cancel_join_thread()
        if self.requests is not None:
            self.requests.cancel_join_thread()

    def group_alive(self) -> bool:
        """True while any process of the worker's group still exists."""
        pid = self._process.pid
        if pid is None:
            return False
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
