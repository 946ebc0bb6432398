"""Tests of the results store on both backends (SQLite file, real PostgreSQL server): round trips,
versioned layout and migrations, refusals, concurrency across processes, the job queue, copy."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import socket
import sqlite3
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy import event as sqlalchemy_event

from bench.core.config import RunConfig, StepLoad
from bench.core.errors import UserError
from bench.core.job_progress import JobProgressState
from bench.core.metrics import summarize
from bench.core.schema import (
    Failure,
    MetricsSummary,
    Percentiles,
    RequestRecord,
    RunResult,
    RunStatus,
    TelemetrySample,
    TelemetrySummary,
    Validity,
    ValidityStatus,
)
from bench.storage import store as store_module
from bench.storage.store import (
    STORE_SCHEMA_VERSION,
    ResultStore,
    UnreadableRun,
    UnstorableRun,
    open_store,
    parse_store_url,
)
from bench.storage.store_copy import copy_runs
from bench.storage.store_url import redact_urls

V1_FIXTURE = Path(__file__).parent / "data" / "store_v1.sqlite"
"""Written by bench/storage/store.py of commit 852060c (store schema 1, the previous release): two
runs (one COMPLETED with 5 records and 3 telemetry samples, one RUNNING with 2) and one QUEUED
job."""

OWNER_COLUMNS = ("owner_host", "owner_pid", "owner_node", "owner_started_at")
"""What store schema 3 added to the runs table."""

WRITERS = 4
RUNS_PER_WRITER = 250
RECORDS_PER_RUN = 3


def make_result(backend: str = "fake", model: str = "tiny-llama", **changes) -> RunResult:
    changes.setdefault("config", RunConfig(backend=backend, model=model))
    return RunResult(**changes)


def make_records(count: int, prefix: str = "r", warmup_every: int = 0) -> list[RequestRecord]:
    records = []
    for i in range(count):
        start = 1_000_000 * i
        records.append(
            RequestRecord(
                id=f"{prefix}{i}",
                start_ns=start,
                chunk_ns=[start + 10, start + 20],
                chunk_tokens=[1, 3],
                end_ns=start + 30,
                input_tokens=5,
                output_tokens=4,
                error="boom" if i % 7 == 3 else None,
                phase="main",
                warmup=bool(warmup_every) and i % warmup_every == 0,
            )
        )
    return records


def sql(store: ResultStore, query: str, **parameters) -> list[tuple]:
    """Read the store's tables directly (what the store wrote, not what it reads back)."""
    with store._engine.connect() as conn:
        return [tuple(row) for row in conn.execute(text(query), parameters)]


def raw_execute(url: str, *statements: str) -> None:
    """Change a store behind its back (a newer release, another program) with plain SQL."""
    engine = create_engine(parse_store_url(url).url)
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(text(statement))
    engine.dispose()


@pytest.fixture
def store(store_url):
    with open_store(store_url) as opened:
        yield opened


# --------------------------------------------------------------------------- locations


def test_location_from_env_and_default(tmp_path, monkeypatch):
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "env.sqlite"))
    assert parse_store_url(None).path == tmp_path / "env.sqlite"
    monkeypatch.delenv("ADVISOR_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    expected = tmp_path / "data" / "inference-advisor" / "results.sqlite"
    assert parse_store_url(None).path == expected
    with ResultStore() as opened:
        assert opened.path == expected
        assert expected.exists()


def test_sqlite_urls(tmp_path):
    assert parse_store_url(f"sqlite:///{tmp_path}/a.sqlite").path == Path(f"{tmp_path}/a.sqlite")
    assert parse_store_url("sqlite:///rel/b.sqlite").path == Path("rel/b.sqlite")
    with ResultStore(f"sqlite:///{tmp_path}/c.sqlite") as opened:
        assert opened.path == tmp_path / "c.sqlite"
        assert opened.backend == "sqlite"
    with pytest.raises(UserError, match="names no file"):
        ResultStore("sqlite://")


def test_postgres_urls_mask_the_password(monkeypatch):
    monkeypatch.delenv("PGPASSWORD", raising=False)
    location = parse_store_url("postgresql://alice:s3cret-pw@db.example:6432/results")
    assert location.backend == "postgresql"
    assert location.path is None
    assert location.url.drivername == "postgresql+psycopg"
    assert location.url.password == "s3cret-pw"
    assert location.display == "postgresql://alice:***@db.example:6432/results"
    assert "s3cret-pw" not in repr(location)
    assert location.scrub("FATAL: no s3cret-pw here") == "FATAL: no *** here"
    assert parse_store_url("postgres://bob@h/db").display == "postgresql://bob@h/db"
    monkeypatch.setenv("PGPASSWORD", "from-env-pw")  # libpq's variable: scrubbed too
    assert parse_store_url("postgresql:///db").scrub("x from-env-pw y") == "x *** y"


def test_redact_urls_in_command_lines():
    line = (
        "python -m bench campaign p --store postgresql://alice:s3cr@t@h:5/db "
        "--store=postgres://bob:pw/x@h/db sqlite:///a.sqlite postgresql://carol@h/db"
    )
    assert redact_urls(line) == (
        "python -m bench campaign p --store postgresql://alice:***@h:5/db "
        "--store=postgres://bob:***@h/db sqlite:///a.sqlite postgresql://carol@h/db"
    )
    assert redact_urls("postgresql://h:5432/db and more") == "postgresql://h:5432/db and more"


@pytest.mark.parametrize(
    "url, message",
    [
        ("postgresql://alice:s3cret-pw@host:notaport/db", "malformed"),
        ("postgresql://alice:s3cret-pw@host:99999/db", "malformed"),
        ("mysql://alice:s3cret-pw@host/db", "not supported"),
    ],
)
def test_malformed_urls_are_one_line_without_the_password(url, message):
    with pytest.raises(UserError, match=message) as caught:
        parse_store_url(url)
    assert "\n" not in str(caught.value)
    assert "s3cret-pw" not in str(caught.value)


def test_sqlite_wal_and_busy_timeout(tmp_path):
    with ResultStore(tmp_path / "results.sqlite") as opened:
        assert sql(opened, "PRAGMA journal_mode") == [("wal",)]
        assert sql(opened, "PRAGMA busy_timeout") == [(30_000,)]
        assert sql(opened, "PRAGMA foreign_keys") == [(1,)]


# --------------------------------------------------------------------------- runs


def test_run_round_trip_through_the_store(store):
    result = make_result(
        environment={"gpus": [{"name": "NVIDIA H200"}], "driver_version": "570.1"},
        summary=MetricsSummary(
            requests=3,
            successful=2,
            failed=1,
            duration_s=1.5,
            request_throughput_rps=2.0,
            output_throughput_tok_s=100.0,
            error_rate=1 / 3,
            ttft_ms=Percentiles(mean=1.0, p50=1.0, p90=2.0, p99=3.0),
        ),
        telemetry=TelemetrySummary(
            gpu_available=True,
            peak_gpu_memory_gb=28.7,
            samples=[TelemetrySample(t_ns=1, gpu_memory_used_bytes=5, energy_mj=7)],
        ),
        validity=Validity(status=ValidityStatus.INVALID, reasons=["too short"]),
        config=RunConfig(backend="vllm", model="llama-2-13b", load=StepLoad(), label="night"),
    )
    store.create_run(result)
    stored = store.get_run(result.run_id)
    assert stored.status == RunStatus.RUNNING  # create_run stores it as running
    assert result.status == RunStatus.QUEUED  # the caller's object is left alone
    assert stored.model_copy(update={"status": RunStatus.QUEUED}) == result

    result.status = RunStatus.COMPLETED
    store.update_run(result)
    assert store.get_run(result.run_id) == result
    assert store.has_run(result.run_id) and not store.has_run("nope")
    row = sql(store, "SELECT status, backend, model, pattern, validity, gpu_name, label FROM runs")
    assert row == [("COMPLETED", "vllm", "llama-2-13b", "step", "INVALID", "NVIDIA H200", "night")]


def test_unknown_run_is_a_user_error(store):
    with pytest.raises(UserError, match="no run nope"):
        store.get_run("nope")
    with pytest.raises(UserError):
        store.update_run(make_result())
    with pytest.raises(UserError):
        store.add_records("nope", make_records(1))
    with pytest.raises(UserError):
        store.delete_run("nope")
    with pytest.raises(UserError):
        store.heartbeat("nope")


def test_duplicate_run_is_refused(store):
    result = make_result()
    store.create_run(result)
    with pytest.raises(UserError, match="already exists"):
        store.create_run(result)


def test_records_round_trip_and_warmup_filter(store):
    result = make_result()
    store.create_run(result)
    records = make_records(1203, warmup_every=10)  # spans several insert batches
    store.add_records(result.run_id, records)
    assert store.count_records(result.run_id) == 1203
    assert list(store.iter_records(result.run_id, include_warmup=True)) == records
    measured = [record for record in records if not record.warmup]
    assert list(store.iter_records(result.run_id)) == measured
    assert store.count_records(result.run_id, include_warmup=False) == len(measured)
    assert store.latest_records(result.run_id, 7) == measured[-7:]
    assert store.latest_records(result.run_id, 10**6) == measured
    compact = sql(
        store, "SELECT first_chunk_ns, output_tokens, error FROM records WHERE request_id = 'r3'"
    )
    assert compact == [(3_000_010, 4, "boom")]


def test_nanosecond_timestamps_beyond_32_bits(store):
    result = make_result()
    store.create_run(result)
    start = 9 * 10**17
    late = RequestRecord(id="x", start_ns=start, chunk_ns=[start + 1], end_ns=start + 2)
    store.add_records(result.run_id, [late])
    assert list(store.iter_records(result.run_id)) == [late]


def test_list_runs_filters_newest_first(store):
    first = make_result(backend="vllm", created_at="2026-01-01T00:00:00+00:00")
    second = make_result(backend="vllm", created_at="2026-01-02T00:00:00+00:00")
    other = make_result(backend="onnxruntime", model="bert")
    for result in (first, second, other):
        store.create_run(result)
    second.status = RunStatus.COMPLETED
    store.update_run(second)
    assert [r.run_id for r in store.list_runs(backend="vllm")] == [second.run_id, first.run_id]
    assert [r.run_id for r in store.list_runs(model="bert")] == [other.run_id]
    assert [r.run_id for r in store.list_runs(status="COMPLETED")] == [second.run_id]
    assert len(store.list_runs(limit=2)) == 2
    assert store.info().runs == 3


def test_delete_run_removes_records(store):
    result = make_result()
    store.create_run(result)
    store.add_records(result.run_id, make_records(5))
    store.delete_run(result.run_id)
    assert store.count_records(result.run_id) == 0
    assert store.list_runs() == []


def test_reap_stale_marks_silent_runs_failed(store, monkeypatch):
    silent, alive, done = make_result(), make_result(), make_result()
    for result in (silent, alive, done):
        store.create_run(result)
    store.add_records(silent.run_id, make_records(4))
    done.status = RunStatus.COMPLETED
    store.update_run(done)
    clock = [time.time()]
    monkeypatch.setattr(store_module, "_now", lambda: clock[0])
    clock[0] += 100
    store.heartbeat(alive.run_id)
    store.update_run(done)
    clock[0] += 100  # silent: 200 s without heartbeat; alive and done: 100 s
    assert store.reap_stale(grace_s=150) == [silent.run_id]
    reaped = store.get_run(silent.run_id)
    assert reaped.status == RunStatus.FAILED
    assert reaped.failure is not None
    assert reaped.failure.cause.startswith("worker lost: no heartbeat for 20")
    assert store.count_records(silent.run_id) == 4  # what it wrote is kept
    assert store.get_run(alive.run_id).status == RunStatus.RUNNING
    assert store.get_run(done.run_id).status == RunStatus.COMPLETED  # never reaped when finished
    assert store.reap_stale(grace_s=150) == []


def test_failure_round_trip(store):
    result = make_result(status=RunStatus.FAILED, failure=Failure(cause="OOM", advice="lower"))
    store.create_run(result)
    store.update_run(result)
    assert store.get_run(result.run_id).failure == Failure(cause="OOM", advice="lower")


# --------------------------------------------------------------------------- layout versions


def layout(url: str) -> dict[str, tuple[list[str], list[str]]]:
    """Each table's column names and index names, as the database reports them."""
    engine = create_engine(parse_store_url(url).url)
    with engine.connect() as conn:
        inspector = inspect(conn)
        shape = {
            table: (
                sorted(column["name"] for column in inspector.get_columns(table)),
                sorted(index["name"] for index in inspector.get_indexes(table)),
            )
            for table in inspector.get_table_names()
        }
    engine.dispose()
    return shape


def test_previous_release_store_opens_and_upgrades(tmp_path):
    path = tmp_path / "old.sqlite"
    shutil.copy(V1_FIXTURE, path)
    assert layout(f"sqlite:///{path}")["jobs"][0].count("runner") == 0  # really schema 1
    with ResultStore(path) as upgraded:
        assert upgraded.schema_version == STORE_SCHEMA_VERSION == 5
        completed = upgraded.get_run("v1-run-completed")
        assert completed.status == RunStatus.COMPLETED
        assert completed.config.label == "written by store schema 1"
        assert [s.power_w for s in completed.telemetry.samples] == [100.0, 101.0, 102.0]
        assert upgraded.count_records("v1-run-completed") == 5
        assert [r.id for r in upgraded.iter_records("v1-run-completed")] == ["r1", "r2", "r3", "r4"]
        assert upgraded.count_records("v1-run-running") == 2
        [job] = upgraded.list_jobs()
        assert job.label == "queued by schema 1" and job.status == RunStatus.QUEUED
        claimed = upgraded.claim_next_job(pid=7, runner="host-a:7")
        assert claimed is not None and claimed.runner == "host-a:7"  # a column schema 2 added
        history = sql(upgraded, "SELECT version, description FROM schema_migrations")
        assert [version for version, _ in history] == [2, 3, 4, 5]
        assert sql(upgraded, "SELECT value FROM meta WHERE key = 'schema_version'") == [("5",)]
    # The upgraded file has exactly the layout of a store created at this version.
    with ResultStore(tmp_path / "fresh.sqlite"):
        pass
    assert layout(f"sqlite:///{path}") == layout(f"sqlite:///{tmp_path}/fresh.sqlite")
    with ResultStore(path) as reopened:  # a second open migrates nothing
        assert len(sql(reopened, "SELECT version FROM schema_migrations")) == 4


def test_migration_runs_on_both_backends(store_url):
    """Take a fresh store back to schema 1 (what migrations 2 to 5 add, removed), reopen it."""
    ResultStore(store_url).close()
    fresh = layout(store_url)
    raw_execute(
        store_url,
        "DROP INDEX runs_by_group",
        "ALTER TABLE runs DROP COLUMN group_id",
        *(f"ALTER TABLE runs DROP COLUMN {column}" for column in OWNER_COLUMNS),
        "ALTER TABLE jobs DROP COLUMN runner",
        "ALTER TABLE jobs DROP COLUMN current_run_id",
        "DROP TABLE schema_migrations",
        "DROP TABLE calibrations",
        "UPDATE meta SET value = '1' WHERE key = 'schema_version'",
    )
    assert "schema_migrations" not in layout(store_url)
    with ResultStore(store_url) as upgraded:
        assert upgraded.schema_version == 5
        assert sql(upgraded, "SELECT version FROM schema_migrations ORDER BY 1") == [
            (2,),
            (3,),
            (4,),
            (5,),
        ]
    assert layout(store_url) == fresh


def test_newer_schema_is_refused_and_left_unchanged(store_url, tmp_path):
    ResultStore(store_url).close()
    raw_execute(
        store_url,
        f"UPDATE meta SET value = '{STORE_SCHEMA_VERSION + 1}' WHERE key = 'schema_version'",
    )
    path = parse_store_url(store_url).path
    before = path.read_bytes() if path else layout(store_url)
    with pytest.raises(UserError, match="newer version") as caught:
        ResultStore(store_url)
    assert "\n" not in str(caught.value)
    assert (path.read_bytes() if path else layout(store_url)) == before


@pytest.mark.parametrize(
    "content",
    [b"this is not a database, just some notes\n" * 50, b"SQLite format 3\x00" + b"\xff" * 4000],
    ids=["garbage", "corrupt-after-header"],
)
def test_non_sqlite_file_is_refused_and_unchanged(tmp_path, content):
    path = tmp_path / "results.sqlite"
    path.write_bytes(content)
    with pytest.raises(UserError, match="untouched") as caught:
        ResultStore(path)
    assert "\n" not in str(caught.value)
    assert path.read_bytes() == content


def test_other_programs_database_is_refused(store_url):
    raw_execute(store_url, "CREATE TABLE invoices (id INTEGER)")
    with pytest.raises(UserError, match="another program"):
        ResultStore(store_url)
    assert set(layout(store_url)) == {"invoices"}


# --------------------------------------------------------------------------- writer processes


def _write_runs(url: str, writer: int, ready, go, errors) -> None:
    """Child process: open the (maybe not yet created) store, write RUNS_PER_WRITER runs."""
    try:
        ready.put(writer)
        go.wait(60)
        with open_store(url) as child_store:
            for index in range(RUNS_PER_WRITER):
                result = RunResult(
                    run_id=f"w{writer}-{index}", config=RunConfig(backend="fake", model="tiny")
                )
                child_store.create_run(result)
                child_store.add_records(
                    result.run_id, make_records(RECORDS_PER_RUN, prefix=f"w{writer}-{index}-")
                )
                result.status = RunStatus.COMPLETED
                child_store.update_run(result)
    except Exception as error:  # reported to the parent, which fails the test
        errors.put(f"{type(error).__name__}: {error}")


def test_four_writer_processes_lose_and_duplicate_nothing(store_url):
    """4 processes x 250 runs with records, all opening a new store at once."""
    context = multiprocessing.get_context("spawn")
    ready, errors, go = context.Queue(), context.Queue(), context.Event()
    writers = [
        context.Process(target=_write_runs, args=(store_url, n, ready, go, errors))
        for n in range(WRITERS)
    ]
    for process in writers:
        process.start()
    for _ in writers:
        ready.get(timeout=120)
    started = time.monotonic()
    go.set()
    for process in writers:
        process.join(300)
    elapsed_s = time.monotonic() - started
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert problems == []  # no "database is locked", no duplicate-table race, nothing else
    assert [process.exitcode for process in writers] == [0] * WRITERS
    with open_store(store_url) as reader:
        run_rows = sql(reader, "SELECT run_id, status FROM runs")
        run_ids = [run_id for run_id, _ in run_rows]
        assert len(run_ids) == len(set(run_ids)) == WRITERS * RUNS_PER_WRITER
        assert {status for _, status in run_rows} == {"COMPLETED"}
        record_rows = sql(reader, "SELECT run_id, request_id FROM records")
        expected = WRITERS * RUNS_PER_WRITER * RECORDS_PER_RUN
        assert len(record_rows) == len(set(record_rows)) == expected
        assert reader.count_records("w3-249") == RECORDS_PER_RUN
    print(f"{WRITERS}x{RUNS_PER_WRITER} runs on {store_url.split(':')[0]}: {elapsed_s:.1f} s")


# --------------------------------------------------------------------------- jobs


def test_job_lifecycle(store):
    configs = [RunConfig(backend="fake", model="tiny-llama"), RunConfig(backend="vllm", model="x")]
    job_id = store.create_job(configs, label="quick plan")
    job = store.get_job(job_id)
    assert job.status == RunStatus.QUEUED
    assert job.configs == configs
    assert job.label == "quick plan"

    claimed = store.claim_next_job(pid=4242)
    assert claimed is not None
    assert claimed.job_id == job_id
    assert claimed.status == RunStatus.RUNNING
    assert claimed.pid == 4242
    assert claimed.runner.endswith(":4242")

    progress = JobProgressState(current=0, updated=1234.5)
    store.update_job(job_id, run_ids=["run-a"], progress=progress)
    store.job_heartbeat(job_id)
    store.request_stop(job_id)
    job = store.get_job(job_id)
    assert job.run_ids == ["run-a"]
    assert job.progress == progress
    assert job.stop_requested
    assert job.status == RunStatus.RUNNING  # the runner sees the request and stops the engine
    store.update_job(job_id, status="STOPPED")
    assert store.get_job(job_id).finished
    with pytest.raises(TypeError):
        store.update_job(job_id, configs=[])
    with pytest.raises(TypeError):  # progress is the model, never a free-form dict
        store.update_job(job_id, progress={"runs": []})
    with pytest.raises(UserError):
        store.get_job("job-nope")
    with pytest.raises(UserError):
        store.create_job([])


def test_jobs_are_claimed_oldest_first_once_each(store):
    first = store.create_job([RunConfig(backend="fake", model="a")])
    second = store.create_job([RunConfig(backend="fake", model="b")])
    third = store.create_job([RunConfig(backend="fake", model="c")])
    assert store.claim_next_job(pid=1).job_id == first
    store.request_stop(second)  # queued and stopped: never runs
    assert store.get_job(second).status == RunStatus.STOPPED
    assert store.claim_next_job(pid=2).job_id == third  # a second runner takes the next one
    assert store.claim_next_job(pid=3) is None
    assert [job.job_id for job in store.list_jobs()] == [third, second, first]
    assert len(store.list_jobs(limit=1)) == 1


def test_silent_job_and_its_run_are_failed_records_kept(store, monkeypatch):
    lost = store.create_job([RunConfig(backend="fake", model="a")])
    waiting = store.create_job([RunConfig(backend="fake", model="b")])
    assert store.claim_next_job(pid=1).job_id == lost
    run = make_result()
    store.create_run(run)
    store.add_records(run.run_id, make_records(6))
    store.job_heartbeat(lost, run_id=run.run_id)  # the runner says which run it executes
    assert store.get_job(lost).current_run_id == run.run_id
    clock = [time.time() + 500]
    monkeypatch.setattr(store_module, "_now", lambda: clock[0])
    assert store.claim_next_job(pid=2, grace_s=120).job_id == waiting
    reaped = store.get_job(lost)
    assert reaped.status == RunStatus.FAILED
    assert reaped.error.startswith("worker lost: no heartbeat for")
    failed_run = store.get_run(run.run_id)
    assert failed_run.status == RunStatus.FAILED
    assert "worker lost" in failed_run.failure.cause
    assert store.count_records(run.run_id) == 6


def _claim(url: str, pid: int, ready, go, results) -> None:
    with open_store(url) as child_store:
        ready.put(pid)
        go.wait(30)
        claimed = []
        while (job := child_store.claim_next_job(pid=pid)) is not None:
            claimed.append(job.job_id)
        results.put((pid, claimed))


def test_job_claims_are_exclusive_across_processes(store_url):
    """Two processes drain one queue as fast as they can: every job is claimed exactly once."""
    with open_store(store_url) as parent_store:
        job_ids = [
            parent_store.create_job([RunConfig(backend="fake", model=f"m{n}")]) for n in range(40)
        ]
    context = multiprocessing.get_context("spawn")
    ready, go, results = context.Queue(), context.Event(), context.Queue()
    claimers = [
        context.Process(target=_claim, args=(store_url, pid, ready, go, results))
        for pid in (11, 12)
    ]
    for process in claimers:
        process.start()
    for _ in claimers:  # both children have opened the store; now they race
        ready.get(timeout=60)
    go.set()
    outcomes = dict(results.get(timeout=120) for _ in claimers)
    for process in claimers:
        process.join(60)
    claimed = outcomes[11] + outcomes[12]
    assert sorted(claimed) == sorted(job_ids)  # each exactly once, none lost
    with open_store(store_url) as reader:
        jobs = reader.list_jobs(limit=100)
        assert all(job.status == RunStatus.RUNNING for job in jobs)
        for job in jobs:
            assert job.job_id in outcomes[job.pid]


# --------------------------------------------------------------------------- copy


def _fill(store: ResultStore) -> list[RunResult]:
    finished = []
    for index in range(3):
        result = make_result(
            telemetry=TelemetrySummary(
                gpu_available=True,
                samples=[TelemetrySample(t_ns=t, power_w=50.0 + t) for t in range(4)],
            ),
            config=RunConfig(backend="fake", model=f"m{index}"),
        )
        store.create_run(result)
        store.add_records(result.run_id, make_records(600 + index, warmup_every=5))
        result.status = RunStatus.COMPLETED if index else RunStatus.FAILED
        store.update_run(result)
        finished.append(result)
    store.create_run(make_result())  # still RUNNING: left out
    return finished


def test_copy_between_backends_is_idempotent(tmp_path, postgres):
    sqlite_url = f"sqlite:///{tmp_path}/laptop.sqlite"
    team_url = postgres.create_database()
    with open_store(sqlite_url) as laptop, open_store(team_url) as team:
        finished = _fill(laptop)
        first = copy_runs(laptop, team)
        assert (first.copied, first.unchanged, first.unfinished) == (3, 0, 1)
        assert first.records == 600 + 601 + 602
        again = copy_runs(laptop, team)
        assert (again.copied, again.updated, again.unchanged, again.records) == (0, 0, 3, 0)
        assert len(sql(team, "SELECT run_id FROM runs")) == 3
        assert len(sql(team, "SELECT record_id FROM records")) == 600 + 601 + 602
        for result in finished:
            assert team.get_run(result.run_id) == result  # telemetry samples included
            assert list(team.iter_records(result.run_id, include_warmup=True)) == list(
                laptop.iter_records(result.run_id, include_warmup=True)
            )
        # Back the other way into a fresh file, and a changed run is replaced whole.
        edited = finished[1].model_copy(update={"status": RunStatus.STOPPED})
        team.update_run(edited)
        back = copy_runs(team, laptop)
        assert (back.copied, back.updated, back.unchanged) == (0, 1, 2)
        assert laptop.get_run(edited.run_id).status == RunStatus.STOPPED
        assert laptop.count_records(edited.run_id) == 601
    with (
        pytest.raises(UserError, match="same store"),
        open_store(sqlite_url) as one,
        open_store(sqlite_url) as other,
    ):
        copy_runs(one, other)


def test_copy_of_the_previous_release_store(tmp_path, store_url):
    old = tmp_path / "old.sqlite"
    shutil.copy(V1_FIXTURE, old)
    with open_store(old) as source, open_store(store_url) as destination:
        if destination.path == source.path:
            pytest.skip("same file")
        report = copy_runs(source, destination)
        # The fixture's RUNNING run has been silent since it was written: opening the store
        # failed it (records kept), so it is copied as the finished run it now is.
        assert (report.copied, report.unfinished, report.records) == (2, 0, 7)
        assert destination.get_run("v1-run-completed") == source.get_run("v1-run-completed")
        lost = destination.get_run("v1-run-running")
        assert lost.status == RunStatus.FAILED
        assert lost.failure is not None and lost.failure.cause.startswith("worker lost")


def test_sqlite_connection_is_not_shared_with_sqlite3_locking(tmp_path):
    """A plain sqlite3 reader holding a read transaction does not block the store's writes."""
    path = tmp_path / "results.sqlite"
    with ResultStore(path) as opened:
        reader = sqlite3.connect(path)
        reader.execute("BEGIN")
        reader.execute("SELECT COUNT(*) FROM runs").fetchone()
        opened.create_run(make_result())  # WAL: readers never block the writer
        reader.rollback()
        reader.close()
        assert len(opened.list_runs()) == 1


def test_postgres_credentials_from_the_environment(postgres, monkeypatch):
    """No password in the URL: libpq's PGPASSWORD (or ~/.pgpass) supplies it; without one the
    open fails in one line that names the masked store."""
    with_password = postgres.create_database()
    without = with_password.replace(f":{postgres.password}@", "@")
    assert postgres.password not in without
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")
    with pytest.raises(UserError, match="cannot open") as caught:
        open_store(without)
    assert "\n" not in str(caught.value)
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    with open_store(without) as opened:
        assert opened.info().backend == "postgresql"
        assert postgres.password not in repr(opened) + opened.display


# --------------------------------------------------------------------------- unreadable rows


def _insert_row(store: ResultStore, run_id: str, result_json: str, status: str = "COMPLETED"):
    """A runs row written behind the store's back (a corrupt file, a newer release)."""
    now = time.time()
    with store._engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO runs (run_id, status, backend, model, pattern, created_at, "
                "heartbeat_at, updated_at, result_json) VALUES (:run_id, :status, 'fake', "
                "'tiny-llama', 'concurrency', '2026-01-01T00:00:00+00:00', :now, :now, :json)"
            ),
            {"run_id": run_id, "status": status, "now": now, "json": result_json},
        )


def _unreadable_rows(store: ResultStore, good: RunResult) -> dict[str, str]:
    """Three rows this version cannot read, each for another reason: run id -> reason start."""
    data = json.loads(good.model_dump_json())
    newer = {**data, "run_id": "newer", "schema_version": 99, "field_of_v99": 1}
    failing = {**data, "run_id": "failing"}
    failing["config"]["load"]["concurrency"] = None  # what a NaN/inf is written as: null
    _insert_row(store, "corrupt", '{"schema_version": 1, "run_id": "corr')
    _insert_row(store, "newer", json.dumps(newer))
    _insert_row(store, "failing", json.dumps(failing), status="FAILED")
    return {
        "corrupt": "corrupt JSON",
        "newer": "written by a newer version: result schema 99",
        "failing": "config.load.concurrency",
    }


def test_one_unreadable_row_never_locks_the_store(store, caplog, tmp_path):
    good = make_result(status=RunStatus.COMPLETED)
    store.create_run(good)
    store.add_records(good.run_id, make_records(3))
    store.update_run(good)
    expected = _unreadable_rows(store, good)

    with caplog.at_level(logging.WARNING, logger="bench.storage.store"):
        assert [run.run_id for run in store.list_runs()] == [good.run_id]
    [warning] = [r.getMessage() for r in caplog.records if r.name == "bench.storage.store"]
    assert "\n" not in warning and "skipped 3 run(s)" in warning
    for run_id, reason in expected.items():
        assert f"{run_id} ({reason}" in warning

    scan = store.scan_runs()
    assert [run.run_id for run in scan.runs] == [good.run_id]
    reasons = {row.run_id: row.reason for row in scan.unreadable}
    assert set(reasons) == set(expected)
    assert all(reasons[run_id].startswith(reason) for run_id, reason in expected.items())
    assert {row.run_id: row.status for row in scan.unreadable}["failing"] == "FAILED"

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bench.storage.store"):
        store.list_runs()  # the app lists every few seconds: named once per handle
    assert not [r for r in caplog.records if r.name == "bench.storage.store"]

    with pytest.raises(UnreadableRun, match="run newer cannot be read by this version") as caught:
        store.get_run("newer")
    assert "\n" not in str(caught.value)

    destination = tmp_path / "salvaged.sqlite"
    with open_store(destination) as salvage:
        report = copy_runs(store, salvage)
        assert (report.copied, report.records) == (1, 3)
        assert {row.run_id for row in report.skipped} == set(expected)
        assert salvage.get_run(good.run_id) == store.get_run(good.run_id)


def test_a_result_that_would_not_load_back_is_never_stored(store):
    """JSON has no NaN or inf (pydantic writes null): refused before the write, not after."""
    result = make_result()
    store.create_run(result)
    broken = result.model_copy(
        update={
            "status": RunStatus.COMPLETED,
            "summary": summarize(make_records(5)).model_copy(update={"duration_s": float("nan")}),
        }
    )
    with pytest.raises(UnstorableRun, match="would not load back") as caught:
        store.update_run(broken)
    assert "\n" not in str(caught.value) and "summary.duration_s" in str(caught.value)
    assert store.get_run(result.run_id).status == RunStatus.RUNNING  # the row is unchanged
    # What the soak fits returned before they were typed (issue 21, 1): a numpy bool.
    numpy_bool = result.model_copy(update={"pattern_report": {"flagged": np.bool_(True)}})
    with pytest.raises(UnstorableRun, match="cannot be written as JSON") as caught:
        store.update_run(numpy_bool)
    assert "\n" not in str(caught.value)
    assert store.get_run(result.run_id).status == RunStatus.RUNNING
    infinite = make_result(
        config=RunConfig(backend="fake", model="tiny-llama").model_copy(
            update={"telemetry_interval_s": float("inf")}
        )
    )
    with pytest.raises(UnstorableRun):
        store.create_run(infinite)
    assert not store.has_run(infinite.run_id)
    assert store.fail_run(result.run_id, Failure(cause="result not stored"))
    failed = store.get_run(result.run_id)
    assert failed.status == RunStatus.FAILED and failed.failure.cause == "result not stored"
    assert not store.fail_run(result.run_id, Failure(cause="again"))  # only a RUNNING row


# --------------------------------------------------------------------------- reads create nothing


def test_a_read_never_creates_a_sqlite_store(tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "results.sqlite"
    with pytest.raises(UserError) as caught:
        open_store(missing, create=False)
    assert str(caught.value) == f"no store at {missing}"
    assert not (tmp_path / "no").exists()
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with pytest.raises(UserError, match=r"^no store at"):
        open_store(empty, create=False)
    assert empty.stat().st_size == 0


def test_a_read_never_creates_a_postgres_store(postgres):
    url = postgres.create_database()
    with pytest.raises(UserError, match=r"no store at .* \(an empty database\)"):
        open_store(url, create=False)
    assert layout(url) == {}  # no table created
    open_store(url).close()
    with open_store(url, create=False) as reader:
        assert reader.list_runs() == []


def _as_nobody(target, *args):
    """Run `target(*args)` in a forked child without root's rights; returns what it returned
    (or the UserError text it raised). As root a chmod alone would not restrict anything."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()

    def child() -> None:
        if os.geteuid() == 0:
            os.setgid(65534)
            os.setuid(65534)
        try:
            results.put(("ok", target(*args)))
        except UserError as error:
            results.put(("error", str(error)))
        except BaseException as error:  # a traceback would be the bug under test
            results.put(("crash", f"{type(error).__name__}: {error}"))

    process = context.Process(target=child)
    process.start()
    outcome = results.get(timeout=60)
    process.join(30)
    return outcome


def _run_ids(path: Path) -> list[str]:
    with open_store(path, create=False) as reader:
        return [run.run_id for run in reader.list_runs()]


def _write_a_run(path: Path) -> str:
    with open_store(path) as writer:
        writer.create_run(make_result())
    return "written"


def test_read_only_and_unreadable_sqlite_stores(tmp_path):
    # pytest's tmp_path is private to root (0700): a folder any user may enter, removed after.
    folder = Path(tempfile.mkdtemp(prefix="store-ro-"))
    folder.chmod(0o755)
    path = folder / "results.sqlite"
    with open_store(path) as store:
        result = make_result(status=RunStatus.COMPLETED)
        store.create_run(result)
        store.update_run(result)
    for leftover in folder.glob("results.sqlite-*"):
        leftover.unlink()  # WAL and shm gone: the read-only reader must cope without them
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        before = path.read_bytes()
        assert _as_nobody(_run_ids, path) == ("ok", [result.run_id])  # read in place
        kind, message = _as_nobody(_write_a_run, path)
        assert kind == "error" and "read-only" in message and "\n" not in message
        assert path.read_bytes() == before
        path.chmod(0o000)
        kind, message = _as_nobody(_run_ids, path)
        assert (kind, message) == (
            "error",
            f"results store {path}: cannot read it (Permission denied)",
        )
        if os.geteuid() == 0:  # pytest's tmp_path is root's own (0700): nobody cannot enter it
            hidden = tmp_path / "results.sqlite"
            shutil.copy(path, hidden)
            kind, message = _as_nobody(_run_ids, hidden)
            assert kind == "error" and "Permission denied" in message and "\n" not in message
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)
        shutil.rmtree(folder)


# --------------------------------------------------------------------------- owners of RUNNING rows


def _create_and_exit(url: str, run_id: str) -> None:
    """Child process: create a RUNNING run and die without finishing it (as kill -9 would)."""
    with open_store(url) as child_store:
        child_store.create_run(make_result(run_id=run_id))
        child_store.add_records(run_id, make_records(2))
    os._exit(0)


def test_runs_whose_owner_is_gone_are_failed_on_open(store_url, monkeypatch):
    context = multiprocessing.get_context("spawn")
    child = context.Process(target=_create_and_exit, args=(store_url, "orphan"))
    child.start()
    child.join(60)
    with open_store(store_url) as store:
        live = make_result()
        store.create_run(live)  # owned by this (live) process
        reused, elsewhere = make_result(), make_result()
        store.create_run(reused)
        store.create_run(elsewhere)
    with open_store(store_url) as store:
        owner = sql(store, "SELECT owner_host, owner_pid FROM runs WHERE run_id = 'orphan'")
        assert owner == [(socket.gethostname(), child.pid)]
    raw_execute(
        store_url,
        # This pid, but another start time: the pid was reused by another process.
        "UPDATE runs SET owner_started_at = owner_started_at - 1000 "
        f"WHERE run_id = '{reused.run_id}'",
        f"UPDATE runs SET owner_host = 'other-host' WHERE run_id = '{elsewhere.run_id}'",
    )
    with open_store(store_url) as store:  # opening reaps
        orphan = store.get_run("orphan")
        assert orphan.status == RunStatus.FAILED
        assert (
            orphan.failure.cause
            == f"owner process gone (pid {child.pid} on {socket.gethostname()})"
        )
        assert store.count_records("orphan") == 2  # what it wrote is kept
        assert store.get_run(reused.run_id).status == RunStatus.FAILED
        assert store.get_run(live.run_id).status == RunStatus.RUNNING
        # Another host's run: only its heartbeat tells, after RUN_GRACE_S.
        assert store.get_run(elsewhere.run_id).status == RunStatus.RUNNING
        clock = time.time() + store_module.RUN_GRACE_S + 10
        monkeypatch.setattr(store_module, "_now", lambda: clock)
        store.heartbeat(live.run_id)
        assert store.reap_stale(store_module.RUN_GRACE_S) == [elsewhere.run_id]
        lost = store.get_run(elsewhere.run_id)
        assert lost.failure.cause.startswith("worker lost: no heartbeat for 31")
        assert store.get_run(live.run_id).status == RunStatus.RUNNING


def test_a_full_sqlite_store_is_one_line_without_sql(tmp_path):
    """SQLite's own SQLITE_FULL (through max_page_count): the message has no SQL, no parameters."""
    with open_store(tmp_path / "results.sqlite") as store:
        pages = store._engine.connect().exec_driver_sql("PRAGMA page_count").scalar()

        @sqlalchemy_event.listens_for(store._engine, "connect")
        def _cap(dbapi_connection, _record):
            dbapi_connection.execute(f"PRAGMA max_page_count = {pages}")

        store._engine.dispose()
        big = make_result(caveats=["x" * 200_000])  # needs pages the file may not grow by
        with pytest.raises(store_module.StoreUnavailable) as caught:
            store.create_run(big)
        message = str(caught.value)
        assert message == f"results store {store.display}: database or disk is full"
        assert not store.has_run(big.run_id)
