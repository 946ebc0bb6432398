"""The fault matrix of `bench run`: a signal to the CLI (SIGINT, SIGTERM, SIGHUP), a SIGKILL of
the CLI or of its engine worker, at the worker's start and mid-load, and a store held by another
writer. Each case ends with one line on stderr, the stored row FAILED or COMPLETED (a killed CLI's
row is marked FAILED by the next command that opens the store), the records kept, and no process
left behind, checked by pid.

The engine is the `fake` backend (a test double: timed fake tokens, no inference) except in the
one case marked pytorch, which loads tiny-llama (random weights) in the worker; the CLI, the
spawned worker, its signals and the SQLite store are real. Mid-load signals to a running CLI are
also covered by tests/bench/test_run_lifecycle.py; this file adds the worker's start, SIGHUP and
the kills.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from bench.core.schema import RunStatus
from bench.storage.store import open_store
from tests.bench.test_run_lifecycle import REPO, start_cli_run, wait_for_records

pytestmark = pytest.mark.slow

IMPORTING_S = 0.3
"""How long after the worker's exec a signal lands "at start": its interpreter is up (a signal
before that ends it quietly, proving nothing) and it is importing the run's modules."""


def wait_for_worker(cli: subprocess.Popen, deadline_s: float = 60) -> psutil.Process:
    """The CLI's engine worker as soon as it exists (multiprocessing's spawned child, not its
    resource tracker): the moment it is still importing, before it has left the CLI's session."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with_spawn = []
        for child in psutil.Process(cli.pid).children(recursive=True):
            try:
                if "spawn_main" in " ".join(child.cmdline()):
                    with_spawn.append(child)
            except psutil.Error:
                continue
        if with_spawn:
            return with_spawn[0]
        if cli.poll() is not None:
            raise AssertionError(f"the CLI ended first: {cli.communicate()}")
        time.sleep(0.01)
    raise AssertionError("no worker started")


def family_of(cli: subprocess.Popen) -> list[psutil.Process]:
    return psutil.Process(cli.pid).children(recursive=True)


def only_run(store_path: Path):
    """The store's one run, read by a fresh open (which marks a dead owner's row FAILED)."""
    with open_store(store_path, create=False) as store:
        [run] = store.list_runs()
        return run, store.count_records(run.run_id)


def finish(cli: subprocess.Popen, timeout_s: float = 60) -> str:
    try:
        _, stderr = cli.communicate(timeout=timeout_s)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    return stderr


def gone(processes: list[psutil.Process], timeout_s: float = 15) -> list[int]:
    """Pids of `processes` still running after `timeout_s`."""
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    return [p.pid for p in alive]


@pytest.mark.parametrize("when", ["start", "mid-load"])
@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_to_the_cli_fails_the_run_in_one_line(tmp_path, signal_name, when):
    number = getattr(signal, signal_name)
    store_path, out = tmp_path / "results.sqlite", tmp_path / "out"
    cli = start_cli_run(store_path, out)
    try:
        worker = wait_for_worker(cli)
        if when == "mid-load":
            wait_for_records(store_path)
        else:  # inside the worker's imports (its Python is up, its engine not yet loaded)
            time.sleep(IMPORTING_S)
        family = family_of(cli)
        assert worker.pid in {p.pid for p in family}
        os.killpg(cli.pid, number)  # as a terminal does: to the whole foreground group
    finally:
        stderr = finish(cli)
    assert cli.returncode == 128 + number, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    [line] = stderr.strip().splitlines()
    assert f"interrupted by {signal_name}: worker stopped, run marked FAILED" in line
    assert gone(family) == []
    run, stored = only_run(store_path)
    assert run.status == RunStatus.FAILED
    assert run.failure is not None and run.failure.cause == f"interrupted by {signal_name}"
    assert f"{stored} in the store" in line
    if when == "mid-load":
        assert stored > 0
    assert len((out / "records.jsonl").read_text().splitlines()) == stored


@pytest.mark.parametrize("when", ["start", "mid-load"])
def test_a_killed_cli_takes_its_worker_with_it(tmp_path, when):
    """kill -9 of the CLI: at the worker's start the worker used to run its whole load with no
    parent (it watched PID 1). Now it is gone within seconds, found by its own pid."""
    store_path, out = tmp_path / "results.sqlite", tmp_path / "out"
    cli = start_cli_run(store_path, out)
    try:
        worker = wait_for_worker(cli)
        if when == "mid-load":
            wait_for_records(store_path)
        family = family_of(cli)
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(30)
    finally:
        finish(cli)
    assert gone([worker], timeout_s=10) == [], "the worker outlived its parent"
    assert gone(family) == []
    run, stored = only_run(store_path)
    assert run.status == RunStatus.FAILED
    assert run.failure.cause == f"owner process gone (pid {cli.pid} on {socket.gethostname()})"
    if when == "mid-load":
        assert stored > 0


@pytest.mark.parametrize("when", ["start", "mid-load"])
def test_a_killed_worker_fails_the_run_in_one_line(tmp_path, when):
    store_path, out = tmp_path / "results.sqlite", tmp_path / "out"
    cli = start_cli_run(store_path, out)
    try:
        worker = wait_for_worker(cli)
        if when == "mid-load":
            wait_for_records(store_path)
        family = family_of(cli)
        worker.kill()
        stdout, stderr = cli.communicate(timeout=60)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    # A failed run is reported as a run (its report on stdout, exit 1), not as an error line.
    assert cli.returncode == 1, stderr
    assert "Traceback" not in stderr + stdout
    head, failure = stdout.splitlines()[:2]
    assert head.endswith("FAILED (INVALID)") and "exited with code -9" in failure
    assert gone(family) == []
    run, stored = only_run(store_path)
    assert run.status == RunStatus.FAILED and "exited with code -9" in run.failure.cause
    assert len((out / "records.jsonl").read_text().splitlines()) == stored
    if when == "mid-load":
        assert stored > 0


def test_a_store_held_by_another_writer_waits_and_completes(tmp_path):
    """Another process holds the SQLite write lock for a few seconds as the run starts and ends:
    the run waits for it (busy timeout) and completes; nothing is lost."""
    store_path, out = tmp_path / "results.sqlite", tmp_path / "out"
    with open_store(store_path):  # the tables exist, so the other writer has a file to lock
        pass
    holder = sqlite3.connect(store_path, isolation_level=None, timeout=30, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    cli = start_cli_run(store_path, out, duration_s=2)
    release = threading.Timer(3.0, holder.execute, args=("COMMIT",))
    release.start()
    try:
        family = [wait_for_worker(cli, deadline_s=120)] if cli.poll() is None else []
        stderr = finish(cli, timeout_s=120)
    finally:
        release.join()
        holder.close()
    assert cli.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert gone(family) == []
    run, stored = only_run(store_path)
    assert run.status == RunStatus.COMPLETED and stored > 0
    assert len((out / "records.jsonl").read_text().splitlines()) == stored


def test_a_signal_at_the_start_of_a_real_engine_fails_the_run_in_one_line(tmp_path):
    """The same Ctrl-C at the worker's start, with the pytorch backend loading tiny-llama."""
    store_path, out = tmp_path / "results.sqlite", tmp_path / "out"
    command = [sys.executable, "-m", "bench", "run", "--backend", "pytorch"]
    command += ["--model", "tiny-llama", "--device", "cpu", "--duration-s", "60"]
    command += ["--store", str(store_path), "--out", str(out)]
    cli = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        worker = wait_for_worker(cli)
        time.sleep(IMPORTING_S)
        family = family_of(cli)
        os.killpg(cli.pid, signal.SIGINT)
    finally:
        stderr = finish(cli, timeout_s=120)
    assert cli.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    [line] = stderr.strip().splitlines()
    assert "interrupted by SIGINT" in line
    assert gone([worker, *family]) == []
    run, _ = only_run(store_path)
    assert run.status == RunStatus.FAILED
