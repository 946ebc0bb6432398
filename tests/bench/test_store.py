"""Tests of the SQLite results store: round trips, concurrency across processes, refusals, jobs."""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from pathlib import Path

import pytest

from bench import store as store_module
from bench.config import RunConfig, StepLoad
from bench.errors import UserError
from bench.schema import (
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
from bench.store import STORE_SCHEMA_VERSION, ResultStore, resolve_location

RECORDS_PER_WRITER = 2000


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


@pytest.fixture
def store(tmp_path: Path):
    with ResultStore(tmp_path / "results.sqlite") as opened:
        yield opened


# --------------------------------------------------------------------------- location


def test_location_from_env_and_default(tmp_path, monkeypatch):
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "env.sqlite"))
    assert resolve_location(None) == tmp_path / "env.sqlite"
    monkeypatch.delenv("ADVISOR_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert resolve_location(None) == tmp_path / "data" / "inference-advisor" / "results.sqlite"
    with ResultStore() as opened:
        assert opened.path.exists()


def test_sqlite_urls_and_other_schemes(tmp_path):
    assert resolve_location(f"sqlite:///{tmp_path}/a.sqlite") == Path(f"{tmp_path}/a.sqlite")
    assert resolve_location("sqlite:///rel/b.sqlite") == Path("rel/b.sqlite")
    with ResultStore(f"sqlite:///{tmp_path}/c.sqlite") as opened:
        assert opened.path == tmp_path / "c.sqlite"
    with pytest.raises(UserError, match="only sqlite"):
        ResultStore("postgresql://team-db/results")
    with pytest.raises(UserError, match="names no file"):
        ResultStore("sqlite://")


def test_wal_and_busy_timeout(store):
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000


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
    row = store._conn.execute(
        "SELECT status, backend, model, pattern, validity, gpu_name, label FROM runs"
    ).fetchone()
    assert row == ("COMPLETED", "vllm", "llama-2-13b", "step", "INVALID", "NVIDIA H200", "night")


def test_unknown_run_is_a_user_error(store):
    with pytest.raises(UserError, match="no run nope"):
        store.get_run("nope")
    with pytest.raises(UserError):
        store.update_run(make_result())
    with pytest.raises(UserError):
        store.add_records("nope", make_records(1))
    with pytest.raises(UserError):
        store.delete_run("nope")


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
    compact = store._conn.execute(
        "SELECT first_chunk_ns, output_tokens, error FROM records WHERE request_id = 'r3'"
    ).fetchone()
    assert compact == (3_000_010, 4, "boom")


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
    assert store.get_run(alive.run_id).status == RunStatus.RUNNING
    assert store.get_run(done.run_id).status == RunStatus.COMPLETED  # never reaped when finished
    assert store.reap_stale(grace_s=150) == []


# --------------------------------------------------------------------------- refusals


def test_newer_schema_is_refused_and_file_unchanged(tmp_path):
    path = tmp_path / "results.sqlite"
    ResultStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE meta SET value = ? WHERE key = 'schema_version'",
            (str(STORE_SCHEMA_VERSION + 1),),
        )
    conn.close()
    before = path.read_bytes()
    with pytest.raises(UserError, match="newer version") as caught:
        ResultStore(path)
    assert "\n" not in str(caught.value)
    assert path.read_bytes() == before
    assert not (tmp_path / "results.sqlite-wal").exists() or (
        (tmp_path / "results.sqlite-wal").stat().st_size == 0
    )


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


def test_other_programs_database_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(UserError, match="another program"):
        ResultStore(path)
    assert path.read_bytes() == before


# --------------------------------------------------------------------------- two processes


def _write_records(path: str, writer: int, ready, go, errors) -> None:
    """Child process: create a run and insert RECORDS_PER_WRITER records in small batches."""
    try:
        with ResultStore(path) as child_store:
            result = RunResult(
                run_id=f"writer-{writer}", config=RunConfig(backend="fake", model="tiny")
            )
            ready.put(writer)
            go.wait(30)
            child_store.create_run(result)
            records = make_records(RECORDS_PER_WRITER, prefix=f"w{writer}-")
            for start in range(0, RECORDS_PER_WRITER, 20):  # many transactions, interleaved
                child_store.add_records(result.run_id, records[start : start + 20])
                child_store.heartbeat(result.run_id)
            result.status = RunStatus.COMPLETED
            child_store.update_run(result)
    except Exception as error:  # reported to the parent, which fails the test
        errors.put(f"{type(error).__name__}: {error}")


def test_two_writer_processes_lose_no_rows(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    ResultStore(path).close()
    context = multiprocessing.get_context("spawn")
    ready, errors, go = context.Queue(), context.Queue(), context.Event()
    writers = [
        context.Process(target=_write_records, args=(path, n, ready, go, errors)) for n in (1, 2)
    ]
    for process in writers:
        process.start()
    for _ in writers:
        ready.get(timeout=60)
    go.set()
    for process in writers:
        process.join(120)
        assert process.exitcode == 0
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    assert problems == []  # no "database is locked", nothing else
    with ResultStore(path) as reader:
        for n in (1, 2):
            assert reader.count_records(f"writer-{n}") == RECORDS_PER_WRITER
            assert reader.get_run(f"writer-{n}").status == RunStatus.COMPLETED
            ids = [record.id for record in reader.iter_records(f"writer-{n}")]
            assert ids == [f"w{n}-{i}" for i in range(RECORDS_PER_WRITER)]


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

    store.update_job(job_id, run_ids=["run-a"], progress={"run": 1, "of": 2, "phase": "warmup"})
    store.job_heartbeat(job_id)
    store.request_stop(job_id)
    job = store.get_job(job_id)
    assert job.run_ids == ["run-a"]
    assert job.progress == {"run": 1, "of": 2, "phase": "warmup"}
    assert job.stop_requested
    assert job.status == RunStatus.RUNNING  # the worker sees the request and stops the engine
    store.update_job(job_id, status="STOPPED")
    assert store.get_job(job_id).finished
    with pytest.raises(TypeError):
        store.update_job(job_id, configs=[])
    with pytest.raises(UserError):
        store.get_job("job-nope")
    with pytest.raises(UserError):
        store.create_job([])


def test_one_job_at_a_time_and_fifo(store):
    first = store.create_job([RunConfig(backend="fake", model="a")])
    second = store.create_job([RunConfig(backend="fake", model="b")])
    third = store.create_job([RunConfig(backend="fake", model="c")])
    assert store.claim_next_job(pid=1).job_id == first
    assert store.claim_next_job(pid=2) is None  # first is running with a live heartbeat
    store.request_stop(second)  # queued and stopped: never runs
    assert store.get_job(second).status == RunStatus.STOPPED
    store.update_job(first, status=RunStatus.COMPLETED)
    assert store.claim_next_job(pid=3).job_id == third
    assert [job.job_id for job in store.list_jobs()] == [third, second, first]
    assert len(store.list_jobs(limit=1)) == 1


def test_stale_running_job_is_reaped_on_claim(store, monkeypatch):
    lost = store.create_job([RunConfig(backend="fake", model="a")])
    waiting = store.create_job([RunConfig(backend="fake", model="b")])
    assert store.claim_next_job(pid=1).job_id == lost
    clock = [time.time() + 500]
    monkeypatch.setattr(store_module, "_now", lambda: clock[0])
    assert store.claim_next_job(pid=2, grace_s=120).job_id == waiting
    reaped = store.get_job(lost)
    assert reaped.status == RunStatus.FAILED
    assert reaped.error.startswith("worker lost: no heartbeat for")


def _claim(path: str, pid: int, ready, go, results) -> None:
    with ResultStore(path) as child_store:
        ready.put(pid)
        go.wait(30)
        job = child_store.claim_next_job(pid=pid)
        results.put((pid, job.job_id if job else None))


def test_job_claim_is_atomic_across_processes(tmp_path):
    path = str(tmp_path / "jobs.sqlite")
    with ResultStore(path) as parent_store:
        job_ids = [
            parent_store.create_job([RunConfig(backend="fake", model=m)]) for m in ("a", "b")
        ]
    context = multiprocessing.get_context("spawn")
    ready, go, results = context.Queue(), context.Event(), context.Queue()
    claimers = [
        context.Process(target=_claim, args=(path, pid, ready, go, results)) for pid in (11, 12)
    ]
    for process in claimers:
        process.start()
    for _ in claimers:  # both children have opened the store; now they race
        ready.get(timeout=60)
    go.set()
    outcomes = dict(results.get(timeout=60) for _ in claimers)
    for process in claimers:
        process.join(60)
    claimed = [job_id for job_id in outcomes.values() if job_id is not None]
    assert claimed == [job_ids[0]]  # exactly one claimed, and it was the oldest
    with ResultStore(path) as reader:
        running = [job for job in reader.list_jobs() if job.status == RunStatus.RUNNING]
        assert len(running) == 1
        assert running[0].pid in (11, 12)
        assert outcomes[running[0].pid] == job_ids[0]


def test_failure_round_trip(store):
    result = make_result(status=RunStatus.FAILED, failure=Failure(cause="OOM", advice="lower"))
    store.create_run(result)
    store.update_run(result)
    assert store.get_run(result.run_id).failure == Failure(cause="OOM", advice="lower")
