"""AppTest of the Benchmark page on a failed job: the cause is said once, in one red box.

The job rows are the job runner's own: `run_job` (bench/orchestrate/job_run.py, what the runner
process calls for each claimed job) runs here in the test's process on the `fake` backend (a
test double of the engine: timed fake tokens, no inference); its engine worker process, the
SIGKILL and the SQLite store are real. The page then reads the FAILED rows it wrote.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from bench.core.schema import RunStatus
from bench.orchestrate.job_run import run_job
from bench.storage.store import ResultStore
from tests.bench.test_jobs import fake_config

PAGE = "ui/benchmark_page.py"


def kill_worker_mid_load(store_path: Path, job_id: str, timeout_s: float = 60.0) -> None:
    """SIGKILL the job's engine worker once its run has stored measured requests."""
    store = ResultStore(store_path)  # its own connection: this runs beside run_job's thread
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            time.sleep(0.1)
            job = store.get_job(job_id)
            runs = job.progress.runs
            pid = runs[0].latest.worker_pid if runs and runs[0].latest else None
            run_id = job.current_run_id
            if pid and run_id and store.count_records(run_id, include_warmup=False) > 0:
                os.kill(pid, signal.SIGKILL)
                return
    finally:
        store.close()


def failed_job(store_path: Path, tmp_path: Path, config, kill: bool) -> str:
    """A job the real job runner ran and marked FAILED; its id."""
    store = ResultStore(store_path)
    try:
        job_id = store.create_job([config], label="failed job")
        job = store.claim_next_job(pid=os.getpid(), runner="test")
        killer = threading.Thread(target=kill_worker_mid_load, args=(store_path, job_id))
        if kill:
            killer.start()
        assert run_job(store, job, log_dir=tmp_path / "logs") == RunStatus.FAILED
        if kill:
            killer.join(timeout=10)
    finally:
        store.close()
    return job_id


def open_job(app_test, job_id: str):
    at = app_test(PAGE)
    at.query_params["job"] = job_id
    at.run(timeout=120)
    assert not at.exception
    return at


def test_a_killed_engine_worker_is_said_once_in_one_red_box(app_test, store_path, tmp_path):
    job_id = failed_job(store_path, tmp_path, fake_config(duration_s=60, itl_s=0.01), kill=True)
    store = ResultStore(store_path)
    job = store.get_job(job_id)
    run = store.get_run(job.run_ids[0])
    store.close()
    # The record the page reads: the job's summary and the run's failure name the same cause,
    # and the run's verdict repeats that it failed (what used to make three red boxes).
    assert job.error == "1 of 1 runs failed: fake: worker exited with code -9 before finishing"
    assert run.failure is not None and run.failure.cause in job.error
    assert run.validity is not None and "run failed" in run.validity.reasons

    at = open_job(app_test, job_id)
    errors = [element.value for element in at.error]
    assert len(errors) == 1, errors
    assert "worker exited with code -9" in errors[0] and run.failure.advice in errors[0]
    captions = [str(element.value) for element in at.caption]
    assert "1 of 1 runs failed: its panel below says why." in captions
    verdicts = [text for text in captions if "INVALID" in text]
    assert len(verdicts) == 1 and "the run failed" in verdicts[0], verdicts
    assert "run failed;" not in verdicts[0] and "exited with code -9" not in verdicts[0]
    markdown = " ".join(str(element.value) for element in at.markdown)
    assert markdown.count(":material/error: Failed") == 2  # the job's badge and the run's


def test_a_run_that_could_not_start_is_said_once_in_one_red_box(app_test, store_path, tmp_path):
    """A run refused before it starts (a model the harness does not know): no run row, the
    job runner's progress carries its cause; the page says it once."""
    config = fake_config(duration_s=1).model_copy(update={"model": str(tmp_path / "no-model")})
    job_id = failed_job(store_path, tmp_path, config, kill=False)
    store = ResultStore(store_path)
    job = store.get_job(job_id)
    store.close()
    assert job.run_ids == [] and job.progress.runs[0].error
    cause = job.progress.runs[0].error

    at = open_job(app_test, job_id)
    errors = [element.value for element in at.error]
    assert errors == [cause]
    assert "1 of 1 runs failed: its panel below says why." in [c.value for c in at.caption]
