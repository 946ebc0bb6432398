"""The job runner: throttled progress, queueing one job at a time, stop, and the detached runner.

Runs go through the real `bench.run.api.launch` (worker processes) with the `fake` backend, a
labelled test double, except the one slow test that runs the real PyTorch engine on the CPU.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil
import pytest

from bench.core.config import ConcurrencyLoad, GenerateWorkload, LengthDistribution, RunConfig
from bench.core.job_progress import JobProgressState
from bench.core.progress import RunProgress
from bench.core.schema import RunStatus
from bench.orchestrate import jobs
from bench.storage.store import ResultStore


def fake_config(duration_s: float = 2.0, itl_s: float = 0.002, **load) -> RunConfig:
    """A short run on the fake backend (test double: timed fake tokens, no inference)."""
    return RunConfig(
        backend="fake",
        model="tiny-llama",
        engine_args={"ttft_s": 0.005, "itl_s": itl_s},
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=8), output_tokens=LengthDistribution(mean=16)
        ),
        load=ConcurrencyLoad(concurrency=2, duration_s=duration_s, warmup_requests=1, **load),
        validity={"min_duration_s": 0.5, "min_requests": 1},
        device="cpu",
    )


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ResultStore:
    path = tmp_path / "store.sqlite"
    monkeypatch.setenv("ADVISOR_STORE", str(path))
    return ResultStore(path)


def serve_in_thread(store: ResultStore, tmp_path: Path) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()
    thread = threading.Thread(
        target=jobs.serve,
        args=(str(store.path),),
        kwargs={"idle_exit_s": 60, "log_dir": tmp_path / "logs", "stop": stop},
        daemon=True,
    )
    thread.start()
    return thread, stop


def wait_for(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_progress_writes_are_throttled_and_stage_changes_forced():
    writes: list[JobProgressState] = []
    progress = jobs.JobProgress([fake_config()], writes.append)
    progress.start_run(0)
    started = len(writes)
    for step in range(50):  # 50 updates in a burst: at most one unforced write gets through
        progress.on_progress(
            0, RunProgress(stage="running", phase="p", elapsed_s=step * 0.01, output_tokens=step)
        )
    assert len(writes) - started <= 2
    progress.on_progress(0, RunProgress(stage="cooldown", run_id="r1"))  # written at once
    assert writes[-1].runs[0].latest == RunProgress(stage="cooldown", run_id="r1")
    assert writes[-1].runs[0].run_id == "r1"
    assert len(progress.state.runs[0].history) == 50
    # Each write is a copy: the state written before the cooldown still says "running".
    assert writes[started].runs[0].latest is not None
    assert writes[started].runs[0].latest.stage == "running"


def test_history_is_bounded_but_spans_the_run():
    progress = jobs.JobProgress([fake_config()], lambda _s: None)
    for step in range(jobs.HISTORY_POINTS * 3):
        progress.on_progress(0, RunProgress(stage="running", elapsed_s=float(step), phase="p"))
    history = progress.state.runs[0].history
    assert len(history) <= jobs.HISTORY_POINTS
    assert history[0].elapsed_s == 0.0
    assert history[-1].elapsed_s >= jobs.HISTORY_POINTS * 3 - 3


def test_jobs_queue_and_run_one_at_a_time(store, tmp_path):
    first = store.create_job([fake_config(), fake_config()], label="first")
    second = store.create_job([fake_config()], label="second")
    thread, stop = serve_in_thread(store, tmp_path)
    seen_running_together = False
    try:

        def both_done():
            nonlocal seen_running_together
            states = [store.get_job(job_id).status for job_id in (first, second)]
            if states.count(RunStatus.RUNNING) > 1:
                seen_running_together = True
            return all(state == RunStatus.COMPLETED for state in states)

        wait_for(both_done, 120, "both jobs to complete")
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not seen_running_together
    job = store.get_job(first)
    assert len(job.run_ids) == 2
    runs = [store.get_run(run_id) for run_id in job.run_ids]
    assert all(run.status == RunStatus.COMPLETED for run in runs)
    assert runs[0].created_at < store.get_run(store.get_job(second).run_ids[0]).created_at
    progress_runs = job.progress.runs
    assert [r.status for r in progress_runs] == [RunStatus.COMPLETED, RunStatus.COMPLETED]
    assert progress_runs[0].history, "live progress reached the job row"
    assert [r.run_id for r in progress_runs] == job.run_ids
    assert store.count_records(job.run_ids[0]) > 0


def test_stop_request_ends_the_engine_and_the_job(store, tmp_path):
    # A long run with slow fake tokens: it only ends this quickly if Stop really stops it.
    job_id = store.create_job([fake_config(duration_s=120, itl_s=0.05), fake_config()])
    thread, stop = serve_in_thread(store, tmp_path)
    try:
        wait_for(
            lambda: any(  # the first run (no runs until the runner claims the job)
                run.latest is not None and run.latest.stage == "running"
                for run in store.get_job(job_id).progress.runs[:1]
            ),
            90,
            "the run to start",
        )
        requested = time.monotonic()
        store.request_stop(job_id)
        wait_for(lambda: store.get_job(job_id).finished, 60, "the job to stop")
        stopped_after_s = time.monotonic() - requested
    finally:
        stop.set()
        thread.join(timeout=30)
    job = store.get_job(job_id)
    assert job.status == RunStatus.STOPPED
    assert stopped_after_s < 30
    assert len(job.run_ids) == 1, "the second run never started"
    run = store.get_run(job.run_ids[0])
    assert run.status == RunStatus.STOPPED
    workers = [
        child
        for child in psutil.Process().children(recursive=True)
        if child.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(child.cmdline())
    ]
    assert not workers, f"engine worker processes left running: {workers}"


def test_unrunnable_config_fails_its_run_and_the_next_still_runs(store, tmp_path):
    bad = fake_config().model_copy(update={"engine_args": {"no_such_option": 1}})
    job_id = store.create_job([bad, fake_config()])
    thread, stop = serve_in_thread(store, tmp_path)
    try:
        wait_for(lambda: store.get_job(job_id).finished, 90, "the job to finish")
    finally:
        stop.set()
        thread.join(timeout=30)
    job = store.get_job(job_id)
    assert job.status == RunStatus.FAILED
    assert "no_such_option" in (job.error or "")
    assert len(job.run_ids) == 1
    assert store.get_run(job.run_ids[0]).status == RunStatus.COMPLETED


def test_ensure_runner_starts_one_detached_runner_that_exits_when_idle(store, tmp_path):
    log = tmp_path / "runner.log"
    pid = jobs.ensure_runner(str(store.path), log_path=log, idle_exit_s=3)
    try:
        wait_for(lambda: jobs.runner_pid(str(store.path)) == pid, 30, "the runner to take its lock")
        assert jobs.ensure_runner(str(store.path), log_path=log, idle_exit_s=3) == pid
        assert os.getsid(pid) == pid != os.getsid(0), "detached: its own session"
        wait_for(lambda: jobs.runner_pid(str(store.path)) is None, 60, "the idle runner to exit")
    finally:
        if psutil.pid_exists(pid):
            process = psutil.Process(pid)
            if process.status() != psutil.STATUS_ZOMBIE:
                process.terminate()
            process.wait(timeout=10)
    assert "idle" in log.read_text()


@pytest.mark.slow
def test_real_cpu_engine_job(store, tmp_path):
    """The runner drives the real PyTorch engine on tiny-llama (CPU) through a job."""
    config = RunConfig(
        backend="pytorch",
        model="tiny-llama",
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=8)
        ),
        load=ConcurrencyLoad(concurrency=2, duration_s=4, warmup_requests=1),
        validity={"min_duration_s": 1, "min_requests": 1},
        precision={"dtype": "float32"},
        device="cpu",
    )
    job_id = store.create_job([config], label="real cpu engine")
    thread, stop = serve_in_thread(store, tmp_path)
    try:
        wait_for(lambda: store.get_job(job_id).finished, 180, "the real engine job")
    finally:
        stop.set()
        thread.join(timeout=30)
    job = store.get_job(job_id)
    assert job.status == RunStatus.COMPLETED, job.error
    run = store.get_run(job.run_ids[0])
    assert run.summary is not None and run.summary.successful > 0
    assert run.summary.output_throughput_tok_s > 0


class JobRowRefusedOnce(ResultStore):
    """A test double of the store: its first progress write of a run that is measuring fails as
    a store locked past its busy timeout by another writer does (sqlite3.OperationalError);
    every other read and write is the real store's."""

    refused = False

    def update_job(self, job_id: str, **fields) -> None:
        state = fields.get("progress")
        latest = state.runs[0].latest if state is not None else None
        if not self.refused and latest is not None and latest.stage == "running":
            import sqlite3

            self.refused = True
            raise sqlite3.OperationalError("database is locked")
        super().update_job(job_id, **fields)


def test_the_log_says_whether_a_failed_run_had_started(tmp_path, caplog):
    """An error out of launch after the run's row exists (here the job row's progress write,
    raised through launch's progress callback while the worker measures) is logged as a run
    that failed after it started, naming the run, and the job keeps the FAILED run; a run
    refused before it starts (a model path that does not exist) is logged as not started."""
    from bench.orchestrate.job_run import run_job

    store = JobRowRefusedOnce(tmp_path / "store.sqlite")
    unknown = fake_config().model_copy(update={"model": str(tmp_path / "no-model")})
    job_id = store.create_job([fake_config(duration_s=5.0), unknown])
    job = store.claim_next_job(pid=os.getpid(), runner="test")
    with caplog.at_level("WARNING", logger="bench.orchestrate.jobs"):
        assert run_job(store, job, tmp_path / "logs") == RunStatus.FAILED
    assert store.refused
    done = store.get_job(job_id)
    [run] = store.list_runs()
    assert done.run_ids == [run.run_id]
    assert (
        run.status == RunStatus.FAILED and run.failure.cause == "harness error: database is locked"
    )
    lines = [record.getMessage() for record in caplog.records if "of job" in record.getMessage()]
    assert lines[0] == (
        f"run 0 of job {job_id} failed after it started (run {run.run_id}, engine worker was "
        "up): fake: OperationalError: database is locked"
    )
    assert lines[1].startswith(f"run 1 of job {job_id} did not start: fake: ")
    assert len(lines) == 2
    runs = done.progress.runs
    assert [r.run_id for r in runs] == [run.run_id, None]
    assert [r.status for r in runs] == [RunStatus.FAILED, RunStatus.FAILED]
