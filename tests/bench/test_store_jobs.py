"""Job runners on a shared store, as separate processes (`python -m bench.orchestrate.jobs`), on
SQLite and a real PostgreSQL: two runners drain one queue with every job run exactly once; a runner
killed with SIGKILL has its job and run FAILED after the grace period, records kept; a PostgreSQL
restart in the middle of a run costs nothing. Runs use the `fake` backend (a labelled test
double: timed fake tokens, no inference) through the real launch and worker processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bench.core.schema import RunStatus
from bench.storage.store import open_store
from tests.bench.test_jobs import fake_config, wait_for

REPO = Path(__file__).resolve().parents[2]


def start_runner(store_url: str, host_dir: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    """A runner process. Each `host_dir` is its own temp folder (where the per-host runner lock
    lives), so two runners on this machine stand for runners on two hosts."""
    host_dir.mkdir(parents=True, exist_ok=True)
    log = host_dir / "runner.log"
    env = {**os.environ, "TMPDIR": str(host_dir), "ADVISOR_STORE": store_url}
    with open(log, "ab") as handle:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.orchestrate.jobs",
                "--log-dir",
                str(host_dir / "logs"),
                *args,
            ],
            cwd=REPO,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process, log


def stop_runner(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def test_two_runners_one_queue_every_job_once(store_url, tmp_path):
    jobs_queued = 6
    with open_store(store_url) as store:
        job_ids = [
            store.create_job([fake_config(duration_s=1.0)], label=f"job {n}")
            for n in range(jobs_queued)
        ]
        runners = [
            start_runner(store_url, tmp_path / name, "--idle-exit-s", "3")
            for name in ("host-a", "host-b")
        ]
        try:
            wait_for(
                lambda: all(store.get_job(job_id).finished for job_id in job_ids),
                240,
                "every job to finish",
            )
            for process, _ in runners:
                process.wait(60)  # idle runners exit by themselves
        finally:
            for process, _ in runners:
                stop_runner(process)
        jobs = [store.get_job(job_id) for job_id in job_ids]
        assert [job.status for job in jobs] == [RunStatus.COMPLETED] * jobs_queued
        run_ids = [run_id for job in jobs for run_id in job.run_ids]
        assert len(run_ids) == len(set(run_ids)) == jobs_queued  # each job ran exactly once
        assert len(store.list_runs()) == jobs_queued  # and no run happened twice
        assert all(store.count_records(run_id) > 0 for run_id in run_ids)
        claimed_by = {job.runner for job in jobs}
        assert len({pid for pid in (job.pid for job in jobs)}) == len(claimed_by) == 2
    for _, log in runners:
        assert "Traceback" not in log.read_text()


def test_killed_runner_fails_after_the_grace_period_records_kept(store_url, tmp_path):
    with open_store(store_url) as store:
        job_id = store.create_job([fake_config(duration_s=120, itl_s=0.01)])
        doomed, _ = start_runner(store_url, tmp_path / "host-a", "--idle-exit-s", "60")
        try:
            job = wait_for(
                lambda: (
                    (found := store.get_job(job_id)).current_run_id
                    and store.count_records(found.current_run_id) > 0
                    and found
                ),
                120,
                "the run to be recorded as the job's current run",
            )
            run_id = job.current_run_id
            family = [psutil.Process(doomed.pid), *psutil.Process(doomed.pid).children(True)]
            os.kill(doomed.pid, signal.SIGKILL)
            doomed.wait(10)
            psutil.wait_procs(family, timeout=30)  # its engine worker follows its parent
            written = store.count_records(run_id)
            last_beat = store.get_job(job_id).heartbeat_at
            assert store.get_job(job_id).status == RunStatus.RUNNING  # nobody noticed yet
        finally:
            stop_runner(doomed)
        grace_s = 3
        survivor, log = start_runner(
            store_url, tmp_path / "host-b", "--idle-exit-s", "2", "--grace-s", str(grace_s)
        )
        try:
            wait_for(lambda: store.get_job(job_id).finished, 90, "the lost job to be failed")
        finally:
            stop_runner(survivor)
        job = store.get_job(job_id)
        assert job.updated_at - last_beat >= grace_s  # failed only after the grace period
        assert job.status == RunStatus.FAILED
        assert job.error.startswith("worker lost: no heartbeat for")
        run = store.get_run(run_id)
        assert run.status == RunStatus.FAILED
        # The run was the dead runner's own, on this host: failed as soon as a store was
        # opened here, without waiting for the heartbeat grace (the job row waits for it).
        assert run.failure is not None
        assert (
            run.failure.cause == f"owner process gone (pid {doomed.pid} on {socket.gethostname()})"
        )
        assert store.count_records(run_id) == written > 0  # partial records kept
    assert "Traceback" not in log.read_text()


def test_postgres_restart_mid_run(postgres, tmp_path):
    url = postgres.create_database()
    with open_store(url) as store:
        job_id = store.create_job([fake_config(duration_s=8, itl_s=0.01)])
        runner, log = start_runner(url, tmp_path / "host-a", "--idle-exit-s", "2")
        try:
            job = wait_for(
                lambda: (
                    (found := store.get_job(job_id)).current_run_id
                    and store.count_records(found.current_run_id) > 0
                    and found
                ),
                120,
                "the run to write records",
            )
            before = store.count_records(job.current_run_id)
            # Every connection is cut and the server stays down 3 s: the runner writes its
            # heartbeat every 2 s and progress twice a second, so it meets the outage.
            postgres.restart(down_s=3.0)
            wait_for(lambda: store.get_job(job_id).finished, 120, "the job to finish")
            runner.wait(60)
        finally:
            stop_runner(runner)
        job = store.get_job(job_id)
        [run_id] = job.run_ids
        run = store.get_run(run_id)
        after = store.count_records(run_id)
        print(f"restart mid-run: job {job.status}, run {run.status}, records {before} -> {after}")
        assert job.status == run.status
        if run.status == RunStatus.COMPLETED:
            assert after > before
            assert run.summary is not None and run.summary.requests > 0
        else:  # the other allowed outcome: FAILED with what was written
            assert run.status == RunStatus.FAILED and after >= before
    text = log.read_text()
    assert "connection lost" in text  # the restart was felt by the runner, and survived
    assert "Traceback" not in text
    assert postgres.password not in text


@pytest.fixture(autouse=True)
def _no_stray_runners():
    yield
    stray = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):  # it may exit while we look
            if "bench.orchestrate.jobs" in " ".join(child.cmdline()):
                stray.append(child)
    assert not stray, f"runner processes left behind: {stray}"


def test_app_runner_gets_the_store_url_in_its_environment_not_argv(postgres, tmp_path, monkeypatch):
    """`ps` shows every user a process's argv: a password must never be there."""
    import tempfile

    from bench.orchestrate import jobs

    url = postgres.create_database()
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # this test's own runner lock, here and in
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the child (which reads TMPDIR)
    log = tmp_path / "runner.log"
    # Idle for 10 s before it exits: a runner that had already idled out (a zombie) shows an
    # empty environment.
    pid = jobs.ensure_runner(url, log_path=log, idle_exit_s=10)
    try:
        process = psutil.Process(pid)
        # Between fork and exec the child still shows the parent's environment (no
        # ADVISOR_STORE: KeyError on a loaded machine even with the 10 s idle exit); the runner's
        # own argv marks the exec.
        wait_for(lambda: "bench.orchestrate.jobs" in process.cmdline(), 30, "the runner's exec")
        assert postgres.password not in " ".join(process.cmdline())
        assert process.environ()["ADVISOR_STORE"] == url
        wait_for(lambda: jobs.runner_pid(url) == pid, 30, "the runner to take its lock")
        wait_for(lambda: jobs.runner_pid(url) is None, 60, "the idle runner to exit")
    finally:
        if psutil.pid_exists(pid):
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                process.terminate()
            process.wait(timeout=10)
    text = log.read_text()
    assert "idle" in text and postgres.password not in text


def test_sigterm_to_a_runner_fails_its_run_and_job(tmp_path):
    """A scheduler's SIGTERM (or a Ctrl-C) to a runner running a job: the run is stopped and
    marked FAILED 'interrupted by SIGTERM', the job FAILED, and the runner exits 143."""
    store_url = f"sqlite:///{tmp_path}/results.sqlite"
    with open_store(store_url) as store:
        job_id = store.create_job([fake_config(duration_s=120, itl_s=0.01)])
        runner, log = start_runner(store_url, tmp_path / "host", "--idle-exit-s", "60")
        try:
            job = wait_for(
                lambda: (
                    (found := store.get_job(job_id)).current_run_id
                    and store.count_records(found.current_run_id) > 0
                    and found
                ),
                120,
                "the job's run to record requests",
            )
            runner.send_signal(signal.SIGTERM)
            assert runner.wait(60) == 143
        finally:
            stop_runner(runner)
        run = store.get_run(job.current_run_id)
        assert run.status == RunStatus.FAILED and run.failure.cause == "interrupted by SIGTERM"
        assert store.count_records(run.run_id) > 0
        job = store.get_job(job_id)
        assert job.status == RunStatus.FAILED
        assert job.error == f"job runner interrupted by signal {int(signal.SIGTERM)}"
    text_ = log.read_text()
    assert "Traceback" not in text_ and "interrupted by SIGTERM" in text_
