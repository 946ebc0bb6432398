"""Benchmark job runner: a detached process that runs the store's queued jobs one at a time.

The web app only writes jobs (`ResultStore.create_job`) and reads their progress; this process
claims them, calls `bench.run.api.launch` for every RunConfig, writes throttled progress into the
job row, turns the job's `stop_requested` flag into the stop Event that ends the engine, and exits
after being idle. Reruns, page switches, a closed tab or a reconnect therefore lose nothing.
Start it with `python -m bench.orchestrate.jobs --store URL` or `ensure_runner(URL)`.

One runner per host and store (a lock file); on a shared PostgreSQL store the runners of several
hosts take jobs from one queue, each job claimed by exactly one of them. A runner heartbeats its
job and run; one that dies is failed by the next runner to look after the grace period.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from bench.core.schema import RunStatus

# One job's body lives below the runner and the executors (bench/orchestrate/job_run.py); the app
# and the tests find it here too.
from bench.orchestrate.job_run import HISTORY_POINTS, JobProgress, queued_runs, run_job

if TYPE_CHECKING:  # bench.storage.store pulls in SQLAlchemy; only its types are needed here
    from bench.orchestrate.executors import Executor, ExecutorSettings
    from bench.storage.store import Job, Store

log = logging.getLogger("bench.orchestrate.jobs")

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
REPO_ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- the runner process


def _lock_path(store_location: str | None) -> Path:
    """One lock file per store and host: the runner holds an flock on it and writes its pid."""
    from bench.storage.store_url import parse_store_url

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

    The executor (`bench.orchestrate.executors`; default local) runs the claimed jobs: `local` one
    at a time in this loop, `ray` up to its `max_jobs` at once, each supervised from its own thread.
    Returns the number of jobs run. Exits at once (0 jobs) when another runner holds the lock.
    A store that cannot be reached for a while (UserError after its own retries) is logged in
    one line and tried again; it never ends the runner with a traceback.
    """
    from bench.core.errors import UserError
    from bench.orchestrate.executor_registry import open_executor
    from bench.orchestrate.executors import ExecutorSettings
    from bench.storage.store import ResultStore

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


FAILED_MARK_RETRY_S = 600.0
"""How long a runner keeps trying to record a job's failure in a store that cannot be written
(a full disk, a lost database) before it leaves the job to the heartbeat grace of the next."""


def _run_claimed(executor: Executor, store: Store, job: Job, log_dir: Path | None) -> None:
    """Run one claimed job; never leave it RUNNING with a live, heartbeat-less runner."""
    from bench.core.errors import UserError

    try:
        status = executor.run_job(store, job, log_dir=log_dir)
        log.info("job %s: %s", job.job_id, status.value)
    except Exception as error:
        log.exception("job %s crashed", job.job_id)
        # A store problem is the user's one line (its cause and where); only a harness bug
        # carries the end of its traceback, for the report.
        reason = (
            str(error)
            if isinstance(error, UserError)
            else "job runner error: " + traceback.format_exc(limit=3)[-1500:]
        )
        _mark_failed(store, job.job_id, reason)


def _mark_failed(store: Store, job_id: str, reason: str) -> None:
    """Record the job FAILED with `reason`, and its run in progress with it, retrying while
    the store cannot be written (it is often the cause): once a user frees the disk the job
    reads FAILED with why, instead of RUNNING until another runner's grace period ends."""
    from bench.core.schema import Failure

    deadline = time.monotonic() + FAILED_MARK_RETRY_S
    delay_s = 1.0
    while True:
        try:
            run_id = store.get_job(job_id).current_run_id
            if run_id:
                store.fail_run(run_id, Failure(cause=reason))  # False when it ended already
            store.update_job(job_id, status=RunStatus.FAILED.value, error=reason)
            return
        except Exception as error:
            if time.monotonic() > deadline:
                log.error("job %s left for the grace period: %s", job_id, error)
                return
            log.warning("cannot mark job %s FAILED yet (%s); retrying", job_id, error)
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, 30.0)


def ensure_runner(
    store_location: str | None = None,
    log_path: Path | None = None,
    idle_exit_s: float = IDLE_EXIT_S,
    executor_settings: ExecutorSettings | None = None,
) -> int:
    """Start a detached runner for this store unless one runs already; return its pid.

    The child gets its own session (a closed tab or a stopped app does not kill a benchmark) and
    logs to a file, never to an unread pipe. The executor comes from `executor_settings`, else
    from `ADVISOR_EXECUTOR` / `RAY_ADDRESS`
    (`bench.orchestrate.executors.ExecutorSettings.from_env`). The store URL goes in the child's
    environment ($ADVISOR_STORE), not its argv, which any user on the host can read with `ps` (a
    password in it would leak); no user value reaches a shell. Two racing calls are safe: the
    loser's child sees the lock, exits.
    """
    pid = runner_pid(store_location)
    if pid is not None and pid > 0:
        return pid
    if log_path is None:
        log_path = _lock_path(store_location).with_suffix(".log")
    from bench.orchestrate.executors import ExecutorSettings

    settings = executor_settings or ExecutorSettings.from_env()
    args = [sys.executable, "-m", "bench.orchestrate.jobs", "--idle-exit-s", str(idle_exit_s)]
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
        prog="python -m bench.orchestrate.jobs",
        description="Run queued benchmark jobs from the store.",
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
    from bench.core.errors import RunInterrupted, UserError
    from bench.orchestrate.executors import ExecutorSettings, parse_settings

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


__all__ = [
    "HISTORY_POINTS",
    "JobProgress",
    "ensure_runner",
    "queued_runs",
    "run_job",
    "runner_pid",
    "serve",
]
