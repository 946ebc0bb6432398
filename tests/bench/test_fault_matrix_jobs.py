"""The fault matrix's cells for the app's job runner (`python -m bench.orchestrate.jobs`): the
engine worker of a job killed mid-load, a store whose write lock another process holds when the
runner looks for work, and the store's disk filling up mid-load (a real 16 MiB tmpfs, as in
tests/bench/test_fault_matrix_store.py; skipped where this process cannot mount one). Each ends
with the job FAILED naming the reason, or COMPLETED once the fault is gone, never RUNNING or
lost; the runner goes on; no process is left behind (checked by pid); and the Benchmark page
shows the failed job with its reason.

A killed runner and a SIGTERM to it are tests/bench/test_store_jobs.py's. The engine is the
`fake` backend (a test double: timed fake tokens, no inference); the runner process, its
spawned worker, the SIGKILL, the other writer's lock and the SQLite store are real.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import psutil
import pytest

from bench.core.schema import RunStatus
from bench.storage.store import open_store
from tests.bench.test_fault_matrix import gone
from tests.bench.test_fault_matrix_store import hold_write_lock, small_disk  # noqa: F401
from tests.bench.test_jobs import fake_config, wait_for
from tests.bench.test_store_jobs import start_runner, stop_runner

pytestmark = pytest.mark.slow


def engine_worker(runner) -> psutil.Process | None:
    """The runner's engine worker (multiprocessing's spawned child), once it exists."""
    for child in psutil.Process(runner.pid).children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


def test_a_killed_engine_worker_fails_its_job_with_the_reason_and_the_next_job_runs(tmp_path):
    store_path = tmp_path / "results.sqlite"
    store_url = f"sqlite:///{store_path}"
    with open_store(store_url) as store:
        doomed = store.create_job([fake_config(duration_s=120, itl_s=0.01)], label="doomed")
        after = store.create_job([fake_config(duration_s=1.0)], label="after")
        runner, log = start_runner(store_url, tmp_path / "host", "--idle-exit-s", "30")
        try:
            job = wait_for(
                lambda: (
                    (found := store.get_job(doomed)).current_run_id
                    and store.count_records(found.current_run_id, include_warmup=False) > 0
                    and found
                ),
                120,
                "the doomed job's run to record measured requests (mid-load)",
            )
            worker = wait_for(lambda: engine_worker(runner), 30, "the engine worker")
            family = [worker, *worker.children(recursive=True)]
            worker.kill()
            failed = wait_for(
                lambda: (found := store.get_job(doomed)).finished and found, 60, "the job's end"
            )
            done = wait_for(
                lambda: (found := store.get_job(after)).finished and found, 120, "the next job"
            )
            assert gone(family) == []
            assert runner.poll() is None  # the runner itself lives on
        finally:
            stop_runner(runner)
        assert failed.status == RunStatus.FAILED
        assert failed.error is not None and "exited with code -9" in failed.error
        assert failed.run_ids == [job.current_run_id]
        run = store.get_run(job.current_run_id)
        assert run.status == RunStatus.FAILED and "exited with code -9" in run.failure.cause
        assert store.count_records(run.run_id, include_warmup=False) > 0  # measured, kept
        assert done.status == RunStatus.COMPLETED and len(done.run_ids) == 1
    assert "Traceback" not in log.read_text()
    page_shows_the_failure(store_path, doomed, "exited with code -9")


def page_shows_the_failure(store_path: Path, job_id: str, reason: str) -> None:
    """The Benchmark page, opened on the failed job: FAILED, and the reason said on the page
    (the job's line says how many runs failed; the run's panel says why, with its log, in the
    page's one red box)."""
    import os

    from streamlit.testing.v1 import AppTest

    repo = Path(__file__).resolve().parents[2]
    previous = os.environ.get("ADVISOR_STORE")
    os.environ["ADVISOR_STORE"] = str(store_path)
    try:
        at = AppTest.from_file(str(repo / "app.py"), default_timeout=120)
        at.switch_page("ui/benchmark_page.py")
        at.query_params["job"] = job_id
        at.run(timeout=120)
    finally:
        if previous is None:
            os.environ.pop("ADVISOR_STORE", None)
        else:
            os.environ["ADVISOR_STORE"] = previous
    assert not at.exception
    errors = [element.value for element in at.error]
    assert len(errors) == 1 and reason in errors[0], errors  # the cause, once
    assert not [e for e in errors if "Traceback" in e]
    markdown = " ".join(str(element.value) for element in at.markdown)
    assert ":material/error: Failed" in markdown  # the job's badge (st.badge is markdown)


def test_a_store_locked_by_another_writer_keeps_the_job_queued_until_it_is_free(tmp_path):
    """Another process holds the SQLite write lock past the busy timeout while the runner looks
    for work: the runner says so in one log line per try and goes on trying; the job stays
    QUEUED (not claimed, not lost); once the lock is let go the job runs once and completes."""
    store_path = tmp_path / "results.sqlite"
    store_url = f"sqlite:///{store_path}"
    with open_store(store_url) as store:
        job_id = store.create_job([fake_config(duration_s=1.0)], label="locked out")
    holder = hold_write_lock(store_path)
    runner, log = start_runner(store_url, tmp_path / "host", "--idle-exit-s", "30")
    try:
        try:
            wait_for(lambda: "cannot claim a job" in log.read_text(), 150, "the runner's try")
            with open_store(store_url, create=False) as store:
                assert store.get_job(job_id).status == RunStatus.QUEUED
            assert runner.poll() is None  # it keeps trying, it does not give up
        finally:
            holder.execute("COMMIT")
            holder.close()
        started = time.monotonic()
        with open_store(store_url, create=False) as store:
            job = wait_for(
                lambda: (found := store.get_job(job_id)).finished and found, 120, "the job's end"
            )
            assert job.status == RunStatus.COMPLETED and len(job.run_ids) == 1
            assert [run.run_id for run in store.list_runs()] == job.run_ids
        assert time.monotonic() - started < 120
    finally:
        stop_runner(runner)
    text = log.read_text()
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if "cannot claim a job" in line]
    assert lines and all("locked" in line for line in lines), lines


def test_a_full_disk_under_the_store_fails_the_job_and_leaves_nothing_running(
    tmp_path,
    small_disk,  # noqa: F811 (the fixture imported above)
):
    """The store's disk fills while a job's run is recording: the run stops, and once there is
    room again (a user frees the disk) the job and its run read FAILED with the reason, the
    measured records kept, the runner alive for the next job."""
    store_path = small_disk / "results.sqlite"
    store_url = f"sqlite:///{store_path}"
    with open_store(store_url) as store:
        job_id = store.create_job([fake_config(duration_s=120, itl_s=0.01)], label="full")
    runner, log = start_runner(store_url, tmp_path / "host", "--idle-exit-s", "60")
    filler = small_disk / "fill"
    try:
        with open_store(store_url, create=False) as store:
            job = wait_for(
                lambda: (
                    (found := store.get_job(job_id)).current_run_id
                    and store.count_records(found.current_run_id, include_warmup=False) > 0
                    and found
                ),
                120,
                "the job's run to record measured requests",
            )
        worker = wait_for(lambda: engine_worker(runner), 30, "the engine worker")
        family = [worker, *worker.children(recursive=True)]
        with open(filler, "wb", buffering=0) as handle:
            for chunk in (1 << 16, 1 << 12, 1):
                try:
                    while True:
                        handle.write(bytes(chunk))
                except OSError:
                    pass
        assert gone(family, timeout_s=90) == []  # the run stopped: its worker is gone
        time.sleep(3)
        filler.unlink()  # room again
        with open_store(store_url, create=False) as store:
            ended = wait_for(
                lambda: (found := store.get_job(job_id)).finished and found, 180, "the job's end"
            )
            run = store.get_run(job.current_run_id)
            assert ended.status == RunStatus.FAILED
            assert ended.error == f"results store {store_path}: database or disk is full"
            assert run.status == RunStatus.FAILED and run.failure.cause == ended.error
            assert store.count_records(run.run_id, include_warmup=False) > 0
        assert runner.poll() is None
    finally:
        with contextlib.suppress(FileNotFoundError):
            filler.unlink()
        stop_runner(runner)
    # The runner's log keeps the crash's traceback for whoever reads it; the job says one line.
    assert "cannot mark job" in log.read_text()
