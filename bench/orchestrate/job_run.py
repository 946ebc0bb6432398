"""One job's runs, in this process: `run_job` launches every RunConfig of a claimed job in order,
writes throttled progress into the job row and turns its stop flag into the run's stop Event.

The runner process (bench/orchestrate/jobs.py) and both executors call it: `local` here, `ray` on
the node a task lands on (bench/orchestrate/ray_node.py). It sits below them so neither imports the
other for it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.core.config import RunConfig
from bench.core.job_progress import JobProgressState, JobRunProgress
from bench.core.progress import ProgressPoint, RunProgress
from bench.core.schema import RunStatus

if TYPE_CHECKING:  # bench.storage.store pulls in SQLAlchemy; only its types are needed here
    from bench.storage.store import Job, JobRunStore, JobWriter

log = logging.getLogger("bench.orchestrate.jobs")

PROGRESS_MIN_INTERVAL_S = 0.5
"""At most ~2 progress writes per second per job (stage changes are written at once)."""
STOP_POLL_S = 0.5
"""How often the runner reads the job's stop flag."""
HEARTBEAT_S = 2.0
"""How often the runner heartbeats the job and the run in progress."""
HISTORY_POINTS = 240
"""Progress samples kept per run for the live charts (halved when full, so it spans the run)."""

# --------------------------------------------------------------------------- progress


def queued_runs(configs: list[RunConfig]) -> list[JobRunProgress]:
    """The `runs` of a job none of whose runs has started yet."""
    return [
        JobRunProgress(
            index=index,
            backend=config.backend,
            model=config.model,
            pattern=config.load.pattern,
            label=config.label,
        )
        for index, config in enumerate(configs)
    ]


class JobProgress:
    """Builds the job's `JobProgressState`: one entry per run with its latest `RunProgress` and a
    short history of `ProgressPoint`s, and hands a copy of it to `write` (throttled)."""

    def __init__(self, configs: list[RunConfig], write: Callable[[JobProgressState], None]) -> None:
        self.write = write
        self.lock = threading.Lock()
        self.last_write = 0.0
        self.state = JobProgressState(runs=queued_runs(configs), updated=time.time())

    def start_run(self, index: int) -> None:
        with self.lock:
            self.state.current = index
            run = self.state.runs[index]
            run.status = RunStatus.RUNNING
            run.started_at = run.stage_since = time.time()
        self.flush(force=True)

    def finish_run(
        self, index: int, status: RunStatus, run_id: str | None, error: str | None
    ) -> None:
        with self.lock:
            run = self.state.runs[index]
            run.status = status
            run.run_id = run_id or run.run_id
            if error:
                run.error = error
        self.flush(force=True)

    def started(self, index: int) -> tuple[str | None, int | None]:
        """Run `index`'s stored run id and its engine worker's pid, as its progress last said:
        `launch` reports the id right after the run's row is written, the pid once the worker
        is up; (None, None) for a run that never got that far."""
        with self.lock:
            run = self.state.runs[index]
            return run.run_id, run.latest.worker_pid if run.latest is not None else None

    def on_progress(self, index: int, progress: RunProgress) -> None:
        """`launch`'s on_progress for run `index`: keep the latest, append history, throttle."""
        with self.lock:
            run = self.state.runs[index]
            stage_changed = run.latest is None or progress.stage != run.latest.stage
            if stage_changed:  # the app times a stage (the model's load) from here
                run.stage_since = time.time()
            # A copy: the caller's update must not change what the next write stores.
            run.latest = progress.model_copy(deep=True)
            run.run_id = progress.run_id or run.run_id
            if progress.stage == "running" and progress.elapsed_s is not None:
                point = ProgressPoint.of(progress)
                history = run.history
                if history and history[-1].elapsed_s == point.elapsed_s:
                    history[-1] = point
                else:
                    history.append(point)
                if len(history) > HISTORY_POINTS:  # keep the whole run's span, coarser
                    run.history = history[::2]
        self.flush(force=stage_changed)

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        with self.lock:
            if not force and now - self.last_write < PROGRESS_MIN_INTERVAL_S:
                return
            self.last_write = now
            self.state.updated = time.time()
            # A copy: a Ray node's write is sent on later, while this state keeps changing.
            snapshot = self.state.model_copy(deep=True)
        self.write(snapshot)


# --------------------------------------------------------------------------- one job


def failed_runs_line(failed: int, total: int) -> str:
    """The head of a FAILED job's error, before each failed run's `backend: cause`. The Benchmark
    page reads it to tell a job whose failures its run panels already say (ui/run_card.py)."""
    return f"{failed} of {total} runs failed"


class _StopWatcher(threading.Thread):
    """Sets `stop` once the job's stop flag is seen; heartbeats the job and its current run.

    The run is heartbeaten here too (as `launch` does from its own thread): the job's row
    names its current run, so a runner that stops beating fails both after the grace period.
    """

    def __init__(self, store: JobWriter, job_id: str, stop: threading.Event) -> None:
        super().__init__(name=f"stop-watcher-{job_id}", daemon=True)
        self.store = store
        self.job_id = job_id
        self.stop = stop
        self.done = threading.Event()
        self.current_run_id: str | None = None

    def run(self) -> None:
        last_heartbeat = 0.0
        while not self.done.wait(STOP_POLL_S):
            try:
                if self.store.get_job(self.job_id).stop_requested:
                    self.stop.set()
                if time.monotonic() - last_heartbeat >= HEARTBEAT_S:
                    last_heartbeat = time.monotonic()
                    self.store.job_heartbeat(self.job_id, run_id=self.current_run_id)
            except Exception as error:  # an unreachable store must not kill the job: next tick
                log.warning("stop watcher: store access failed: %s", error)


def run_job(store: JobRunStore, job: Job, log_dir: Path | None = None) -> RunStatus:
    """Run every RunConfig of a claimed job in order and mark the job finished.

    Job status: STOPPED when a stop was requested, FAILED when any run failed (its error names
    them), COMPLETED otherwise. A run that cannot start (unavailable backend, bad engine argument)
    counts as failed and the next run still goes; so does one that raises after its row was
    written (a harness or store error: launch marks the row FAILED), which the job keeps among
    its `run_ids` and its log line says started.
    """
    from bench.core.errors import RunInterrupted
    from bench.run.api import launch

    job_id = job.job_id
    configs = list(job.configs)
    progress = JobProgress(configs, lambda state: store.update_job(job_id, progress=state))
    stop = threading.Event()
    watcher = _StopWatcher(store, job_id, stop)
    watcher.start()

    def on_progress(index: int, update: RunProgress) -> None:
        watcher.current_run_id = update.run_id or watcher.current_run_id
        progress.on_progress(index, update)

    run_ids: list[str] = []
    failures: list[str] = []
    try:
        for index, config in enumerate(configs):
            if stop.is_set() or store.get_job(job_id).stop_requested:
                stop.set()
                break
            progress.start_run(index)
            try:
                result = launch(
                    config,
                    store=store,
                    on_progress=lambda update, index=index: on_progress(index, update),
                    stop=stop,
                    log_dir=log_dir,
                )
            except RunInterrupted as interrupted:  # this runner got SIGINT/SIGTERM: stop here
                run_id = getattr(interrupted.result, "run_id", None)
                progress.finish_run(index, RunStatus.FAILED, run_id, str(interrupted))
                store.update_job(
                    job_id,
                    status=RunStatus.FAILED.value,
                    run_ids=[*run_ids, *([run_id] if run_id else [])],
                    error=f"job runner interrupted by signal {interrupted.signal_number}",
                )
                raise
            except Exception as exc:  # UserError before start, or a harness bug: keep going
                message = f"{config.backend}: {type(exc).__name__}: {exc}"
                # Started or not is read from what the run left, not assumed: its row exists
                # once launch reported its id, or the error carries the stored result.
                run_id, worker_pid = progress.started(index)
                run_id = getattr(getattr(exc, "result", None), "run_id", None) or run_id
                if run_id is None:
                    log.warning("run %d of job %s did not start: %s", index, job_id, message)
                else:  # its row is FAILED (launch marks it); the job keeps it as one of its runs
                    worker = "was up" if worker_pid else "had not come up"
                    log.warning(
                        "run %d of job %s failed after it started (run %s, engine worker %s): %s",
                        index, job_id, run_id, worker, message,
                    )  # fmt: skip
                    run_ids.append(run_id)
                failures.append(message)
                watcher.current_run_id = None
                progress.finish_run(index, RunStatus.FAILED, run_id, message)
                continue
            watcher.current_run_id = None
            run_ids.append(result.run_id)
            store.update_job(job_id, run_ids=list(run_ids))
            error = None
            if result.status == RunStatus.FAILED:
                error = result.failure.cause if result.failure else "failed"
                failures.append(f"{config.backend}: {error}")
            progress.finish_run(index, result.status, result.run_id, error)
    finally:
        watcher.done.set()
        watcher.join(timeout=5)

    if stop.is_set():
        status, error = RunStatus.STOPPED, "stopped on request"
    elif failures:
        status = RunStatus.FAILED
        error = f"{failed_runs_line(len(failures), len(configs))}: " + "; ".join(failures)
    else:
        status, error = RunStatus.COMPLETED, None
    store.update_job(job_id, status=status.value, run_ids=run_ids, error=error)
    return status
