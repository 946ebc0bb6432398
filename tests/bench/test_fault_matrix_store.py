"""The fault matrix's store and disk cells for `bench run`: a SQLite store whose write lock
another process holds (past the busy timeout: refused in one line, exit 2; within it: the run
waits and completes), and a disk that is full when the run's result is written (a real tmpfs
filled to its last byte): one line, exit 1, the row FAILED, no result.json presented as
complete, the records kept whole.

The engine is the `fake` backend (a test double: timed fake tokens, no inference); the CLI, its
spawned worker, the other writer, the SQLite store and the full file system are real. The disk
is filled at the moment the result is written by a wrapper of `bench.run.api._persist` in the
CLI's process (`FILL_AT_RESULT_WRITE`): the ENOSPC is the kernel's, only its timing is
arranged. The tmpfs needs root and a kernel that lets this process mount; elsewhere the disk
cases skip, saying why.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.core.schema import RunStatus
from bench.storage.store import BUSY_TIMEOUT_S, open_store
from tests.bench.test_fault_matrix import gone, only_run, wait_for_worker
from tests.bench.test_run_lifecycle import REPO, start_cli_run, wait_for_records

pytestmark = pytest.mark.slow

SMALL_RUN = ["run", "--backend", "fake", "--model", "tiny-llama", "--device", "cpu"]
SMALL_RUN += ["--max-requests", "6", "--warmup-requests", "1", "--output-tokens", "4"]
SMALL_RUN += ["--prompt-tokens", "8", "--engine-arg", "itl_s=0.002"]


def run_cli(args: list[str], timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr + done.stdout
    [line] = done.stderr.strip().splitlines()
    return line


def whole_records(path: Path) -> int:
    """Records in a records.jsonl, each line one whole JSON record (none cut short)."""
    data = path.read_bytes()
    assert data == b"" or data.endswith(b"\n"), "the file ends in half a record"
    lines = data.decode().splitlines()
    for line in lines:
        json.loads(line)
    return len(lines)


# --------------------------------------------------------------------------- a locked store


def hold_write_lock(store_path: Path) -> sqlite3.Connection:
    """Another process's writer, as a sqlite3 shell or a DB browser with an open write
    transaction is: the store exists, and its write lock is held from now on."""
    with open_store(store_path):  # the tables exist, so the other writer has a file to lock
        pass
    holder = sqlite3.connect(store_path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    return holder


def test_a_store_locked_past_the_busy_timeout_refuses_the_run_in_one_line(tmp_path):
    store_path, out = tmp_path / "results.sqlite", tmp_path / "out"
    holder = hold_write_lock(store_path)
    try:
        started = time.monotonic()
        done = run_cli([*SMALL_RUN, "--store", str(store_path), "--out", str(out)])
        waited_s = time.monotonic() - started
    finally:
        holder.execute("COMMIT")
        holder.close()
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert line == (
        f"error: results store {store_path}: database is locked (another process held its "
        f"write lock for longer than the {BUSY_TIMEOUT_S:g} s busy timeout)"
    )
    assert waited_s >= BUSY_TIMEOUT_S  # it waited the busy timeout before giving up
    with open_store(store_path, create=False) as store:
        assert store.list_runs() == []  # refused before its row: nothing half-made, nothing lost
    assert not (out / "result.json").exists()


def test_a_store_locked_mid_load_within_the_busy_timeout_waits_and_completes(tmp_path):
    """The other writer takes the lock while records are being stored and keeps it a few
    seconds: the run's writes wait (busy timeout), then every record is stored."""
    store_path, out = tmp_path / "results.sqlite", tmp_path / "out"
    cli = start_cli_run(store_path, out, duration_s=6)
    holder = sqlite3.connect(store_path, isolation_level=None, timeout=30, check_same_thread=False)
    try:
        family = [wait_for_worker(cli)]
        wait_for_records(store_path)
        holder.execute("BEGIN EXCLUSIVE")
        held_at = time.monotonic()
        time.sleep(4.0)
        holder.execute("COMMIT")
        held_s = time.monotonic() - held_at
        _, stderr = cli.communicate(timeout=120)
    finally:
        holder.close()
        if cli.poll() is None:
            os.killpg(cli.pid, signal.SIGKILL)
    assert held_s < BUSY_TIMEOUT_S
    assert cli.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert gone(family) == []
    run, stored = only_run(store_path)
    assert run.status == RunStatus.COMPLETED
    assert stored == whole_records(out / "records.jsonl") > 0


# --------------------------------------------------------------------------- a full disk

FILL_AT_RESULT_WRITE = """
import sys
from pathlib import Path

import bench.run.api as api

filler, real_persist = Path(sys.argv[1]), api._persist


def fill_then_persist(*args, **kwargs):
    # Every byte of the file system taken, once, just before the run's result is written.
    if not filler.exists():
        with open(filler, "wb", buffering=0) as handle:
            for chunk in (1 << 16, 1 << 12, 1):
                try:
                    while True:
                        handle.write(bytes(chunk))
                except OSError:
                    pass
    return real_persist(*args, **kwargs)


api._persist = fill_then_persist

from bench.cli import main
from bench.run.interrupts import hold_repeated_signals

hold_repeated_signals()
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs of this test's own, unmounted at the end whatever happens."""
    mount_point = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        if subprocess.run(["umount", str(mount_point)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def run_filling_the_disk(filler: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", FILL_AT_RESULT_WRITE, str(filler), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def no_result_file(out: Path) -> None:
    """Neither result.json nor the temporary file it is written through."""
    assert not (out / "result.json").exists()
    assert not list(out.glob(".result.json.*"))


def test_a_full_disk_at_the_result_write_fails_the_run_in_one_line(tmp_path, small_disk):
    """--out on the full disk, the store elsewhere: the result is stored, result.json cannot
    be written, and the row, stored COMPLETED a moment before, is stored again as FAILED (the
    line says FAILED; `bench runs` must not say COMPLETED)."""
    store_path, out, filler = tmp_path / "results.sqlite", small_disk / "out", small_disk / "fill"
    done = run_filling_the_disk(filler, [*SMALL_RUN, "--store", str(store_path), "--out", str(out)])
    assert filler.exists(), "the disk was never filled"
    assert done.returncode == 1, done.stderr
    line = one_line(done)
    assert f"cannot write {out / 'result.json'} (No space left on device)" in line
    assert "; stored as FAILED" in line and "worker stopped" not in line
    no_result_file(out)
    filler.unlink()
    run, stored = only_run(store_path)
    assert run.status == RunStatus.FAILED
    assert run.failure.cause.startswith("result not written: cannot write")
    assert run.summary is not None  # what was measured is still stored
    kept = whole_records(out / "records.jsonl")
    assert stored == kept > 0 and f"{kept} in the store, {kept} in {out}" in line


def test_a_full_disk_under_the_store_at_the_result_write_fails_the_run(tmp_path, small_disk):
    """The store and --out both on the full disk: neither the result nor the FAILED mark fits;
    the line says where the records are, and the next command to open the store (with room
    again) finds the row FAILED (its owner is gone)."""
    store_path, out, filler = small_disk / "results.sqlite", small_disk / "out", small_disk / "fill"
    done = run_filling_the_disk(filler, [*SMALL_RUN, "--store", str(store_path), "--out", str(out)])
    assert filler.exists(), "the disk was never filled"
    assert done.returncode == 1, done.stderr
    line = one_line(done)
    assert f"results store {store_path}: database or disk is full" in line
    assert f"cannot write {out / 'result.json'} (No space left on device)" in line
    no_result_file(out)
    filler.unlink()  # room again, as after a user frees the disk
    run, stored = only_run(store_path)
    assert run.status == RunStatus.FAILED
    kept = whole_records(out / "records.jsonl")
    assert stored == kept > 0 and f"records kept: {kept} in the store, {kept} in {out}" in line


def test_a_full_disk_under_the_store_before_the_run_refuses_it_in_one_line(tmp_path, small_disk):
    """Full before the run's row could be written: one line, exit 2, nothing started."""
    store_path, out, filler = small_disk / "results.sqlite", tmp_path / "out", small_disk / "fill"
    with open_store(store_path):
        pass
    with open(filler, "wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(bytes(1 << 12))
    done = run_cli([*SMALL_RUN, "--store", str(store_path), "--out", str(out)])
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert f"results store {store_path}" in line and "full" in line
    filler.unlink()
    with open_store(store_path, create=False) as store:
        assert store.list_runs() == []
    assert not (out / "result.json").exists()


def test_a_record_batch_that_does_not_fit_leaves_no_half_record(small_disk):
    """The records file on a disk with one page left: the first batch fits, the next takes
    what is left and fails; the file is cut back to the first batch, so a reader never meets a
    record cut short, and the sink claims only what the file holds."""
    from bench.core.schema import RequestRecord
    from bench.run.api import _RecordSink

    def batch(first: int, count: int) -> list[RequestRecord]:
        return [
            RequestRecord(id=f"r{i}", start_ns=i, chunk_ns=[i + 1] * 50, end_ns=i + 2)
            for i in range(first, first + count)
        ]

    path, filler = small_disk / "records.jsonl", small_disk / "fill"
    with open(filler, "wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(bytes(1 << 12))
    filler.write_bytes(b"\0" * (filler.stat().st_size - (1 << 12)))  # one page free again
    sink = _RecordSink(None, "run", path)
    sink.buffer = batch(0, 1)
    sink._flush()
    whole = path.read_bytes()
    sink.buffer = batch(1, 40)  # about 20 KB: more than the page left
    sink._flush()
    sink.close()
    assert sink.failure is not None and "No space left on device" in sink.failure
    assert path.read_bytes() == whole and whole_records(path) == 1
    assert sink.kept["jsonl"] == 1
