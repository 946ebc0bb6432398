"""The fault matrix of `bench campaign`: SIGINT, SIGTERM and SIGHUP to the campaign (as a
terminal sends them, to its whole foreground group), a SIGKILL of the campaign process and a
SIGKILL of its engine worker, each mid-load. Each case ends with at most one line on stderr
(no traceback), the stored row FAILED or COMPLETED when the next command opens the store (never
RUNNING), the records kept, and no process left behind, checked by pid.

Real engine throughout: a one-step plan running tiny-llama (random weights) through the pytorch
backend on the CPU; the campaign CLI, its spawned worker, the signals and the SQLite store are
real. The helpers are those of tests/bench/test_fault_matrix.py (`bench run`'s matrix).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.core.schema import RunStatus
from tests.bench.test_fault_matrix import family_of, gone, only_run, wait_for_worker
from tests.bench.test_run_lifecycle import REPO, wait_for_records

pytestmark = pytest.mark.slow

STEP = "pytorch tiny-llama c2"
PLAN = {
    "name": "fault-matrix",
    "description": "one pytorch tiny-llama step on the CPU, long enough to be hit mid-load",
    "steps": [
        {
            "kind": "run",
            "name": STEP,
            "config": {
                "backend": "pytorch",
                "model": "tiny-llama",
                "engine_args": {"max_batch_size": 2},
                "workload": {
                    "kind": "generate",
                    "prompt_tokens": {"mean": 16},
                    "output_tokens": {"mean": 8},
                },
                # Long enough that every signal lands mid-load; each case ends it early.
                "load": {
                    "pattern": "concurrency",
                    "concurrency": 2,
                    "duration_s": 60,
                    "warmup_requests": 1,
                },
                "precision": {"dtype": "float32"},
                "device": "cpu",
            },
        }
    ],
}


def start_campaign(tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    """`python -m bench campaign` in a session of its own, as a terminal's foreground job is.
    Returns the process, its store and its out folder."""
    plan, out = tmp_path / "plan.yaml", tmp_path / "out"
    plan.write_text(yaml.safe_dump(PLAN))
    cli = subprocess.Popen(
        [sys.executable, "-m", "bench", "campaign", str(plan), "--out", str(out)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    return cli, out / "results.sqlite", out


def finish(cli: subprocess.Popen, timeout_s: float = 120) -> tuple[str, str]:
    """stdout and stderr once the campaign ends (its group killed if it does not)."""
    try:
        return cli.communicate(timeout=timeout_s)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)


def records_file(out: Path) -> Path:
    [path] = (out / "steps").rglob("records.jsonl")
    return path


def step_outcome(out: Path) -> dict:
    """The step's outcome as campaign.json holds it (written after each step)."""
    campaign = json.loads((out / "campaign.json").read_text())
    [outcome] = [o for o in campaign["steps"] if o["name"] == STEP]
    return outcome


def assert_no_traceback(stdout: str, stderr: str) -> None:
    assert "Traceback" not in stdout + stderr and "KeyboardInterrupt" not in stderr


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_to_the_campaign_fails_its_run_in_one_line(tmp_path, signal_name):
    number = getattr(signal, signal_name)
    cli, store_path, out = start_campaign(tmp_path)
    try:
        worker = wait_for_worker(cli, deadline_s=120)
        wait_for_records(store_path)
        family = family_of(cli)
        assert worker.pid in {p.pid for p in family}
        os.killpg(cli.pid, number)  # as a terminal does: to the whole foreground group
    finally:
        stdout, stderr = finish(cli)
    assert cli.returncode == 128 + number, stderr
    assert_no_traceback(stdout, stderr)
    [line] = stderr.strip().splitlines()
    assert f"interrupted by {signal_name}: worker stopped, run marked FAILED" in line
    assert gone(family) == []
    run, stored = only_run(store_path)
    assert run.status == RunStatus.FAILED
    assert run.failure is not None and run.failure.cause == f"interrupted by {signal_name}"
    assert stored > 0 and f"{stored} in the store" in line
    assert len(records_file(out).read_text().splitlines()) == stored


def test_a_killed_campaign_takes_its_worker_with_it(tmp_path):
    """kill -9 of the campaign: nothing of it can speak, so stderr is empty; the worker sees its
    parent gone and ends, and the next command to open the store marks the row FAILED."""
    cli, store_path, out = start_campaign(tmp_path)
    try:
        worker = wait_for_worker(cli, deadline_s=120)
        wait_for_records(store_path)
        family = family_of(cli)
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(30)
    finally:
        _, stderr = finish(cli)
    assert stderr.strip() == ""
    assert gone([worker], timeout_s=10) == [], "the worker outlived its parent"
    assert gone(family) == []
    run, stored = only_run(store_path)
    assert run.status == RunStatus.FAILED
    assert run.failure.cause == f"owner process gone (pid {cli.pid} on {socket.gethostname()})"
    assert stored > 0
    assert len(records_file(out).read_text().splitlines()) == stored


def test_a_killed_worker_fails_its_run_and_the_campaign_goes_on_to_its_end(tmp_path):
    """SIGKILL of the engine worker (the OOM killer's way): the run is FAILED naming it, the
    step's one line on stderr says so, and the campaign ends with exit 1 naming the failed run
    (the step itself completed: it ran; its run failed)."""
    cli, store_path, out = start_campaign(tmp_path)
    try:
        worker = wait_for_worker(cli, deadline_s=120)
        wait_for_records(store_path)
        family = family_of(cli)
        worker.kill()
    finally:
        stdout, stderr = finish(cli)
    assert cli.returncode == 1, stderr
    assert_no_traceback(stdout, stderr)
    [line] = stderr.strip().splitlines()
    assert line == f"{STEP}: completed in {line.split(' in ')[1].split()[0]} s - pytorch FAILED " \
        "worker exited with code -9 before finishing", line  # fmt: skip
    assert "exited with code -9" in stdout
    assert gone(family) == []
    run, stored = only_run(store_path)
    assert run.status == RunStatus.FAILED and "exited with code -9" in run.failure.cause
    assert stored > 0
    assert len(records_file(out).read_text().splitlines()) == stored
    [stored_run] = step_outcome(out)["runs"]
    assert stored_run["status"] == "FAILED"
