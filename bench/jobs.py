"""Benchmark job runner: a detached process that runs the store's queued jobs one at a time.

The web app only writes jobs (`ResultStore.create_job`) and reads their progress; this process
claims them, calls `bench.api.launch` for every RunConfig, writes throttled progress into the job
row, turns the job's `stop_requested` flag into the stop Event that ends the engine, and exits
after being idle. Reruns, page switches, a closed tab or a reconnect therefore lose nothing.
Start it with `python -m bench.jobs --store URL` or `ensure_runner(URL)`.

One runner per host and store (a lock file); on a shared PostgreSQL store the runners of several
hosts take jobs from one queue, each job claimed by exactly one of them. A runner heartbeats its
job and run; one that dies is failed by the next runner to look after the grace period.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.config import RunConfig
from bench.schema import RunStatus

if TYPE_CHECKING:  # bench.store pulls in SQLAlchemy; executors import this module's run_job
    from bench.executors import Executor, ExecutorSettings
    from bench.store import Job, Store

log = logging.getLogger("bench.jobs")

PROGRESS_MIN_INTERVAL_S = 0.5
"""At most ~2 progress writes per second per job (stage changes are written at once)."""
STOP_POLL_S = 0.5
"""How often the runner reads the job's stop flag."""
HEARTBEAT_S = 2.0
"""How often the runner heartbeats the job and the run in progress."""
IDLE_EXIT_S = 120.0
"""A runner with nothing to do for this long exits; the app starts a new one on demand."""
QUEUE_POLL_S = 1.0
STALE_GRACE_S = 300.0
"""A RUNNING run whose heartbeat is older than this is reaped (its process died). Generous: a
store that lost its database retries writes (heartbeats included) for up to a minute. A run
whose owner process is gone from this host is reaped at once (store.reap_stale)."""
JOB_GRACE_S = 120.0
"""A RUNNING job (and the run it executes) silent this long is FAILED: its runner heartbeats
every HEARTBEAT_S, loading included, so silence means the runner died."""
HISTORY_POINTS = 240
"""Progress samples kept per run for the live charts (halved when full, so it spans the run)."""
REPO_ROOT = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- progress


def queued_runs(configs: list[RunConfig]) -> list[dict[str, Any]]:
    """The `progress["runs"]` entries of a job none of whose runs has started yet."""
    return [
        {
            "index": index,
            "backend": config.backend,
            "model": config.model,
            "pattern": config.load.pattern,
            "label": config.label,
            "status": RunStatus.QUEUED.value,
            "run_id": None,
            "latest": {},
            "history": [],
        }
        for index, config in enumerate(configs)
    ]


class JobProgress:
    """The job's `progress` JSON: one entry per run with its latest progress and a short history.

    Shape: {"runs": [{"index", "backend", "model", "pattern", "status", "run_id", "latest",
    "history": [{"elapsed_s", "completed", "failed", "output_tokens", "in_flight", "phase",
    "gpu_memory_used_bytes", "power_w", "host_rss_bytes"}]}], "current": index, "updated": epoch s}
    """

    def __init__(self, configs: list[RunConfig], write: Callable[[dict], None]) -> None:
        self.write = write
        self.lock = threading.Lock()
        self.last_write = 0.0
        self.state: dict[str, Any] = {
            "runs": queued_runs(configs),
            "current": None,
            "updated": time.time(),
        }

    def start_run(self, index: int) -> None:
        with self.lock:
            self.state["current"] = index
            self.state["runs"][index]["status"] = RunStatus.RUNNING.value
        self.flush(force=True)

    def finish_run(self, index: int, status: str, run_id: str | None, error: str | None) -> None:
        with self.lock:
            run = self.state["runs"][index]
            run["status"] = status
            run["run_id"] = run_id or run["run_id"]
            if error:
                run["error"] = error
        self.flush(force=True)

    def on_progress(self, index: int, progress: dict) -> None:
        """`launch`'s on_progress for run `index`: keep the latest, append history, throttle."""
        with self.lock:
            run = self.state["runs"][index]
            stage_changed = progress.get("stage") != run["latest"].get("stage")
            run["latest"] = _jsonable(progress)
            run["run_id"] = progress.get("run_id") or run["run_id"]
            if progress.get("stage") == "running" and "elapsed_s" in progress:
                telemetry = progress.get("telemetry") or {}
                point = {
                    "elapsed_s": progress.get("elapsed_s"),
                    "completed": progress.get("completed"),
                    "failed": progress.get("failed"),
                    "output_tokens": progress.get("output_tokens"),
                    "in_flight": progress.get("in_flight"),
                    "phase": progress.get("phase"),
                    "gpu_memory_used_bytes": telemetry.get("gpu_memory_used_bytes"),
                    "power_w": telemetry.get("power_w"),
                    "host_rss_bytes": telemetry.get("host_rss_bytes"),
                }
                history = run["history"]
                if history and history[-1].get("elapsed_s") == point["elapsed_s"]:
                    history[-1] = point
                else:
                    history.append(point)
                if len(history) > HISTORY_POINTS:  # keep the whole run's span, coarser
                    run["history"] = history[::2]
        self.flush(force=stage_changed)

    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        with self.lock:
            if not force and now - self.last_write < PROGRESS_MIN_INTERVAL_S:
                return
            self.last_write = now
            self.state["updated"] = time.time()
            snapshot = json.loads(json.dumps(self.state))
        self.write(snapshot)


def _jsonable(value: Any) -> Any:
    """Progress dicts come from another process; keep only what JSON can hold."""
    return json.loads(json.dumps(value, default=str))


# --------------------------------------------------------------------------- one job


class _StopWatcher(threading.Thread):
    """Sets `stop` once the job's stop flag is seen; heartbeats the job and its current run.

    The run is heartbeaten here too (as `launch` does from its own thread): the job's row
    names its current run, so a runner that stops beating fails both after the grace period.
    """

    def __init__(self, store: Store, job_id: str, stop: threading.Event) -> None:
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


def run_job(store: Store, job: Job, log_dir: Path | None = None) -> RunStatus:
    """Run every RunConfig of a claimed job in order and mark the job finished.

    Job status: STOPPED when a stop was requested, FAILED when any run failed (its error names
    them), COMPLETED otherwise. A run that cannot start (unavailable backend, bad engine argument)
    counts as failed and the next run still goes.
    """
    from bench.api import launch
    from bench.errors import RunInterrupted

    job_id = job.job_id
    configs = list(job.configs)
    progress = JobProgress(configs, lambda state: store.update_job(job_id, progress=state))
    stop = threading.Event()
    watcher = _StopWatcher(store, job_id, stop)
    watcher.start()

    def on_progress(index: int, update: dict) -> None:
        watcher.current_run_id = update.get("run_id") or watcher.current_run_id
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
                progress.finish_run(index, RunStatus.FAILED.value, run_id, str(interrupted))
                store.update_job(
                    job_id,
                    status=RunStatus.FAILED.value,
                    run_ids=[*run_ids, *([run_id] if run_id else [])],
                    error=f"job runner interrupted by signal {interrupted.signal_number}",
                )
                raise
            except Exception as exc:  # UserError before start, or a harness bug: keep going
                message = f"{config.backend}: {type(exc).__name__}: {exc}"
                log.warning("run %d of job %s did not start: %s", index, job_id, message)
                failures.append(message)
                watcher.current_run_id = None
                progress.finish_run(index, RunStatus.FAILED.value, None, message)
                continue
            watcher.current_run_id = None
            run_ids.append(result.run_id)
            store.update_job(job_id, run_ids=list(run_ids))
            error = None
            if result.status == RunStatus.FAILED:
                error = result.failure.cause if result.failure else "failed"
                failures.append(f"{config.backend}: {error}")
            progress.finish_run(index, result.status.value, result.run_id, error)
    finally:
        watcher.done.set()
        watcher.join(timeout=5)

    if stop.is_set():
        status, error = RunStatus.STOPPED, "stopped on request"
    elif failures:
        status = RunStatus.FAILED
        error = f"{len(failures)} of {len(configs)} runs failed: " + "; ".join(failures)
    else:
        status, error = RunStatus.COMPLETED, None
    store.update_job(job_id, status=status.value, run_ids=run_ids, error=error)
    return status


# --------------------------------------------------------------------------- the runner process


def _lock_path(store_location: str | None) -> Path:
    """One lock file per store and host: the runner holds an flock on it and writes its pid."""
    from bench.store_url import parse_store_url

    key = parse_store_url(store_location).identity  # no password in it
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"bench-job-runner-{os.getuid()}-{digest}.lock"


def runner_pid(store_location: str | None = None) -> int | None:
    """The pid of the runner serving this store, or None when none is running."""
    path = _lock_path(store_location)
    if not path.exists():
        return None
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


def serve(
    store_location: str | None,
    idle_exit_s: float = IDLE_EXIT_S,
    log_dir: Path | None = None,
    stop: threading.Event | None = None,
    executor_settings: ExecutorSettings | None = None,
    grace_s: float = JOB_GRACE_S,
) -> int:
    """The runner loop: reap stale jobs, claim the next one, run it; exit after idling.

    The executor (`bench.executors`; default local) runs the claimed jobs: `local` one at a time
    in this loop, `ray` up to its `max_jobs` at once, each supervised from its own thread.
    Returns the number of jobs run. Exits at once (0 jobs) when another runner holds the lock.
    A store that cannot be reached for a while (UserError after its own retries) is logged in
    one line and tried again; it never ends the runner with a traceback.
    """
    from bench.errors import UserError
    from bench.executors import ExecutorSettings, open_executor
    from bench.store import ResultStore

    # ensure_runner hands the URL over in $ADVISOR_STORE (never argv): resolve it once here, so
    # the executor is told the same store this loop opens.
    store_location = store_location or os.environ.get("ADVISOR_STORE") or None
    lock_handle = open(_lock_path(store_location), "a+", encoding="utf-8")  # noqa: SIM115
    try:
        fcntl.flock(lock_handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock_handle.close()
        log.info("another job runner serves this store; exiting")
        return 0
    lock_handle.seek(0)
    lock_handle.truncate()
    lock_handle.write(str(os.getpid()))
    lock_handle.flush()

    jobs_run = 0
    active: list[threading.Thread] = []
    executor = None
    try:
        store = ResultStore(store_location)
        executor = open_executor(executor_settings or ExecutorSettings(), store_location)
        idle_since = time.monotonic()
        while not (stop is not None and stop.is_set()):
            active = [thread for thread in active if thread.is_alive()]
            if active:
                idle_since = time.monotonic()
            with contextlib.suppress(Exception):
                store.reap_stale(max(STALE_GRACE_S, grace_s))
            try:
                job = (
                    store.claim_next_job(os.getpid(), grace_s=grace_s)
                    if len(active) < executor.max_jobs
                    else None
                )
            except UserError as error:
                log.warning("cannot claim a job: %s", error)
                time.sleep(QUEUE_POLL_S)
                continue
            if job is None:
                if not active and time.monotonic() - idle_since > idle_exit_s:
                    log.info("idle for %.0f s; exiting", idle_exit_s)
                    break
                time.sleep(QUEUE_POLL_S)
                continue
            log.info(
                "job %s: %d run(s) on the %s executor", job.job_id, len(job.configs), executor.name
            )
            if executor.max_jobs == 1:
                _run_claimed(executor, store, job, log_dir)
            else:
                thread = threading.Thread(
                    target=_run_claimed, args=(executor, store, job, log_dir), daemon=True
                )
                thread.start()
                active.append(thread)
            jobs_run += 1
            idle_since = time.monotonic()
        for thread in active:  # a stopped runner lets its jobs' supervisors finish
            thread.join()
    finally:
        if executor is not None:
            executor.close()
        lock_handle.close()
    return jobs_run


def _run_claimed(executor: Executor, store: Store, job: Job, log_dir: Path | None) -> None:
    """Run one claimed job; never leave it RUNNING with a live, heartbeat-less runner."""
    try:
        status = executor.run_job(store, job, log_dir=log_dir)
        log.info("job %s: %s", job.job_id, status.value)
    except Exception:
        log.exception("job %s crashed", job.job_id)
        with contextlib.suppress(Exception):
            store.update_job(
                job.job_id,
                status=RunStatus.FAILED.value,
                error="job runner error: " + traceback.format_exc(limit=3)[-1500:],
            )


def ensure_runner(
    store_location: str | None = None,
    log_path: Path | None = None,
    idle_exit_s: float = IDLE_EXIT_S,
    executor_settings: ExecutorSettings | None = None,
) -> int:
    """Start a detached runner for this store unless one runs already; return its pid.

    The child gets its own session (a closed tab or a stopped app does not kill a benchmark) and
    logs to a file, never to an unread pipe. The executor comes from `executor_settings`, else
    from `ADVISOR_EXECUTOR` / `RAY_ADDRESS` (`bench.executors.ExecutorSettings.from_env`).
    The store URL goes in the child's environment ($ADVISOR_STORE), not its argv, which any
    user on the host can read with `ps` (a password in it would leak); no user value reaches a
    shell. Two racing calls are safe: the loser's child sees the lock, exits.
    """
    pid = runner_pid(store_location)
    if pid is not None and pid > 0:
        return pid
    if log_path is None:
        log_path = _lock_path(store_location).with_suffix(".log")
    from bench.executors import ExecutorSettings

    settings = executor_settings or ExecutorSettings.from_env()
    args = [sys.executable, "-m", "bench.jobs", "--idle-exit-s", str(idle_exit_s)]
    args += settings.runner_args()
    environment = dict(os.environ)
    if store_location:
        environment["ADVISOR_STORE"] = str(store_location)
    with open(log_path, "ab") as log_file:
        child = subprocess.Popen(  # argument list, no shell
            args,
            cwd=REPO_ROOT,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    return child.pid


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.jobs", description="Run queued benchmark jobs from the store."
    )
    parser.add_argument(
        "--store",
        default=None,
        help="Store URL or SQLite path (default: $ADVISOR_STORE, else the user data folder).",
    )
    parser.add_argument("--idle-exit-s", type=float, default=IDLE_EXIT_S)
    parser.add_argument(
        "--grace-s",
        type=float,
        default=JOB_GRACE_S,
        help="Fail a running job whose runner has been silent this long.",
    )
    parser.add_argument("--log-dir", type=Path, default=None, help="Engine log folder.")
    parser.add_argument(
        "--executor",
        default=None,
        help="local (default: this host, one job at a time) or ray (default: $ADVISOR_EXECUTOR).",
    )
    parser.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster to join (default: $RAY_ADDRESS; none = start a local Ray instance).",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from bench.errors import RunInterrupted, UserError
    from bench.executors import ExecutorSettings, parse_settings

    try:
        env = ExecutorSettings.from_env()
        settings = parse_settings(args.executor or env.name, args.ray_address or env.ray_address)
        serve(
            args.store,
            idle_exit_s=args.idle_exit_s,
            log_dir=args.log_dir,
            executor_settings=settings,
            grace_s=args.grace_s,
        )
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except RunInterrupted as interrupted:  # the run and its job are marked FAILED already
        print(f"error: {interrupted}", file=sys.stderr)
        return interrupted.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
