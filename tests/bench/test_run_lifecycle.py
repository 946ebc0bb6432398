"""A run is never left half-written: signals, a full store, a killed CLI, a busy Prometheus port,
unwritable or reused output folders (bench/run/api.py's lifecycle, bench/core/outputs.py).

The engine is the `fake` backend (a test double: timed fake tokens, no inference); the CLI, the
worker process, its signals and the SQLite store are real.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from sqlalchemy import event

from bench.cli import main
from bench.core.config import ConcurrencyLoad, GenerateWorkload, LengthDistribution, RunConfig
from bench.core.errors import RunAborted, UserError
from bench.core.schema import RunStatus
from bench.engines.models import resolve_model
from bench.run.api import launch
from bench.run.worker import Worker
from bench.run.worker_events import Records
from bench.storage.store import open_store

REPO = Path(__file__).resolve().parents[2]


def fake_config(duration_s: float = 1.0) -> RunConfig:
    return RunConfig(
        backend="fake",
        model="tiny-llama",
        precision={"dtype": "float32"},
        engine_args={"ttft_s": 0.002, "itl_s": 0.002},
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=8), output_tokens=LengthDistribution(mean=8)
        ),
        load=ConcurrencyLoad(concurrency=4, duration_s=duration_s, warmup_requests=2),
        validity={"min_duration_s": 0.5, "min_requests": 1},
        device="cpu",
    )


def start_cli_run(store: Path, out: Path, duration_s: float = 120) -> subprocess.Popen:
    """`python -m bench run` in a session of its own, as a terminal's foreground job is."""
    command = [sys.executable, "-m", "bench", "run", "--backend", "fake", "--model", "tiny-llama"]
    command += ["--duration-s", str(duration_s), "--store", str(store), "--out", str(out)]
    command += ["--engine-arg", "itl_s=0.002", "--device", "cpu"]
    return subprocess.Popen(
        command,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def wait_for_records(store_path: Path, deadline_s: float = 120) -> str:
    """The id of the running run once it has stored records (the worker is measuring)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with open_store(store_path, create=False) as store:
                running = store.list_runs(status=RunStatus.RUNNING)
                if running and store.count_records(running[0].run_id) > 0:
                    return running[0].run_id
        except UserError:  # "no store at ...": the CLI has not created its tables yet
            pass
        time.sleep(0.3)
    raise AssertionError("the run never stored a record")


@pytest.mark.parametrize(("signal_name", "times"), [("SIGINT", 1), ("SIGTERM", 1), ("SIGINT", 2)])
def test_a_signal_stops_the_worker_and_fails_the_run(tmp_path, signal_name, times):
    number = getattr(signal, signal_name)
    store_path, out = tmp_path / "results.sqlite", tmp_path / "out"
    cli = start_cli_run(store_path, out)
    try:
        run_id = wait_for_records(store_path)
        family = psutil.Process(cli.pid).children(recursive=True)  # the worker among them
        assert family
        for _ in range(times):  # a terminal's Ctrl-C goes to the whole foreground group
            os.killpg(cli.pid, number)
            time.sleep(0.2)
        sent = time.monotonic()
        _, stderr = cli.communicate(timeout=60)
        stopped_s = time.monotonic() - sent
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    assert cli.returncode == 128 + number
    assert stopped_s < 30  # the 120 s run did not go on
    assert "Traceback" not in stderr
    [line] = stderr.strip().splitlines()
    assert line.startswith(f"error: run {run_id} interrupted by {signal_name}: worker stopped")
    _, alive = psutil.wait_procs(family, timeout=15)
    assert alive == []  # no worker, no engine child left
    with open_store(store_path, create=False) as store:
        run = store.get_run(run_id)
        stored = store.count_records(run_id)
    assert run.status == RunStatus.FAILED
    assert run.failure is not None and run.failure.cause == f"interrupted by {signal_name}"
    assert stored > 0 and f"{stored} in the store" in line
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == stored  # the file holds exactly what the store holds
    on_disk = json.loads((out / "result.json").read_text())
    assert on_disk["run_id"] == run_id and on_disk["status"] == "FAILED"


def test_a_killed_cli_leaves_no_running_row(tmp_path):
    store_path, out = tmp_path / "results.sqlite", tmp_path / "out"
    cli = start_cli_run(store_path, out)
    try:
        run_id = wait_for_records(store_path)
        family = psutil.Process(cli.pid).children(recursive=True)
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(30)
    finally:
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(family, timeout=30)  # the worker dies with its parent
    assert alive == []
    with open_store(store_path, create=False) as store:  # the open reaps the dead owner's run
        run = store.get_run(run_id)
        assert store.count_records(run_id) > 0
    assert run.status == RunStatus.FAILED
    assert run.failure is not None
    assert run.failure.cause == f"owner process gone (pid {cli.pid} on {socket.gethostname()})"


def test_a_busy_prometheus_port_is_refused_before_the_run_exists(tmp_path, capsys):
    store_path = tmp_path / "results.sqlite"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        argv = ["run", "--backend", "fake", "--model", "tiny-llama", "--duration-s", "1"]
        argv += ["--store", str(store_path), "--prometheus-port", str(port)]
        assert main(argv) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: --prometheus-port {port}: cannot serve metrics there")
    with open_store(store_path, create=False) as store:
        assert store.list_runs() == []  # no row, RUNNING or otherwise


def test_a_full_store_stops_the_run_and_keeps_the_records(tmp_path):
    """SQLite's own "database or disk is full" (SQLITE_FULL), reached through max_page_count."""
    store = open_store(tmp_path / "results.sqlite")
    pages = store._engine.connect().exec_driver_sql("PRAGMA page_count").scalar()

    @event.listens_for(store._engine, "connect")
    def _cap(dbapi_connection, _record):  # room for the run's row and a few record batches
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages + 40}")

    store._engine.dispose()  # every connection from now on is capped
    out = tmp_path / "out"
    started = time.monotonic()
    with pytest.raises(RunAborted) as caught:
        launch(fake_config(duration_s=120), store=store, out_dir=out)
    assert time.monotonic() - started < 60  # stopped, not run for its 120 s
    message = str(caught.value)
    assert "\n" not in message and "database or disk is full" in message
    assert message.count(f"results store {store.display}") == 1  # the store is named once
    assert "worker stopped" in message
    result = caught.value.result
    assert result.status == RunStatus.FAILED and "database or disk is full" in result.failure.cause
    in_file = len((out / "records.jsonl").read_text().splitlines())
    stored = store.count_records(result.run_id)
    assert in_file > stored > 0  # what the store could not take is in the file
    assert f"{in_file} in {out / 'records.jsonl'}" in message
    stored_run = store.get_run(result.run_id)
    if "stored as FAILED" in message or "row marked FAILED" in message:
        assert stored_run.status == RunStatus.FAILED
    else:  # no room even for the small write: this process still owns the row
        assert stored_run.status == RunStatus.RUNNING
    assert json.loads((out / "result.json").read_text())["status"] == "FAILED"
    store.close()


def test_a_result_write_that_landed_but_raised_keeps_the_run(tmp_path, monkeypatch):
    """SQLite can report a full disk after the row's update has gone in: the run stands as
    stored (it was called FAILED, 'the row could not be marked FAILED', while the row read
    COMPLETED). Test double: the real update_run runs, then raises what a full disk raises."""
    from sqlalchemy.exc import OperationalError

    store = open_store(tmp_path / "results.sqlite")
    real_update = store.update_run

    def update_then_raise(result):
        real_update(result)
        raise OperationalError("COMMIT", {}, Exception("database or disk is full"))

    monkeypatch.setattr(store, "update_run", update_then_raise)
    result = launch(fake_config(), store=store, out_dir=tmp_path / "out")
    assert result.status == RunStatus.COMPLETED
    assert store.get_run(result.run_id).status == RunStatus.COMPLETED
    assert store.count_records(result.run_id) > 0
    assert json.loads((tmp_path / "out" / "result.json").read_text())["status"] == "COMPLETED"
    store.close()


def test_an_unwritable_out_folder_fails_before_the_run(tmp_path):
    with open_store(tmp_path / "results.sqlite") as store:
        with pytest.raises(UserError, match=r"^--out /proc/x: cannot create the folder"):
            launch(fake_config(), store=store, out_dir=Path("/proc/x"))
        assert store.list_runs() == []


def test_fidelity_checks_its_out_folder_before_any_work(tmp_path, capsys):
    started = time.monotonic()
    argv = ["fidelity", "--engine", "pytorch", "--model", "tiny-llama", "--out", "/proc/x"]
    assert main([*argv, "--store", str(tmp_path / "results.sqlite")]) == 2
    assert time.monotonic() - started < 20  # no engine was loaded, no pair measured
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: --out /proc/x: cannot create the folder")


def test_a_reused_out_folder_holds_only_the_latest_run(tmp_path):
    out = tmp_path / "out"
    with open_store(tmp_path / "results.sqlite") as store:
        launch(fake_config(), store=store, out_dir=out)
        second = launch(fake_config(), store=store, out_dir=out)
        lines = (out / "records.jsonl").read_text().splitlines()
        assert len(lines) == store.count_records(second.run_id)  # not both runs' records
    assert json.loads((out / "result.json").read_text())["run_id"] == second.run_id
    assert not list(out.glob(".*.tmp"))  # atomic writes leave no temporary file


def test_stopping_a_worker_that_died_returns(tmp_path):
    """A stop asked after the worker died (the store filled up as it crashed) must not hang:
    multiprocessing's Event.set() waits for every process asleep in wait(), a dead one too."""
    config = fake_config(duration_s=120)
    model = resolve_model(config.model, dtype=config.precision.dtype)
    worker = Worker(config, model, tmp_path / "engine.log")
    worker.start()
    deadline = time.monotonic() + 120
    measuring = False
    while time.monotonic() < deadline:  # until it measures: its stop watcher is waiting
        if isinstance(worker.events.get(timeout=120), Records):
            measuring = True
            break
    assert measuring, "the worker sent no records within 120 s"
    os.kill(worker.pid, signal.SIGKILL)
    stop = threading.Event()
    stop.set()
    outcomes = []
    driver = threading.Thread(
        target=lambda: outcomes.append(worker.run(lambda _r: None, lambda _p: None, stop=stop)),
        daemon=True,
    )
    driver.start()
    driver.join(60)
    assert not driver.is_alive()
    [outcome] = outcomes
    assert outcome.status == "FAILED" and "exited with code -9" in outcome.failure.cause
