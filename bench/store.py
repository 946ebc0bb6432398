"""The results store: runs, their per-request records and the web app's job registry, in SQLite.

One SQLite file (stdlib sqlite3) in WAL mode with a busy timeout; every write is one
`BEGIN IMMEDIATE` transaction, so several processes (a worker per engine, the web app, the CLI)
can write at once without "database is locked" errors. The layout is versioned in a `meta` table
and checked at open: a newer or unknown layout, or a file that is not SQLite, is refused with a
one-line UserError and never modified.

Location: `ResultStore(location)`; None = `$ADVISOR_STORE`, else
`$XDG_DATA_HOME/inference-advisor/results.sqlite` (default `~/.local/share/...`). A location is a
path or a `sqlite:///relative/path` / `sqlite:////absolute/path` URL (SQLAlchemy's spelling), so
a team can point every member at one shared database by URL. Only SQLite is built in: keep the
shared file on a local disk of the shared host (SQLite's WAL needs shared memory, which network
file systems such as NFS do not provide); other schemes (postgresql://...) raise UserError.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.config import RunConfig
from bench.environment import primary_gpu_name
from bench.errors import UserError
from bench.schema import Failure, RequestRecord, RunResult, RunStatus

STORE_SCHEMA_VERSION = 1
"""Version of the store's table layout (each RunResult's JSON carries its own schema_version)."""

STORE_APPLICATION = "inference-advisor"
BUSY_TIMEOUT_S = 30.0
RECORD_BATCH = 500
"""Records per INSERT transaction: large enough to be fast, small enough not to block others."""

SQLITE_HEADER = b"SQLite format 3\x00"

JobStatus = RunStatus
"""Jobs move through the same states as runs: QUEUED, RUNNING, COMPLETED, FAILED, STOPPED."""

_SCHEMA = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    backend TEXT NOT NULL,
    model TEXT NOT NULL,
    pattern TEXT NOT NULL,
    created_at TEXT NOT NULL,
    validity TEXT,
    gpu_name TEXT,
    label TEXT,
    heartbeat_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    result_json TEXT NOT NULL
);
CREATE INDEX runs_by_backend_model ON runs (backend, model);
CREATE INDEX runs_by_status ON runs (status);
CREATE INDEX runs_by_created ON runs (created_at);
CREATE TABLE records (
    record_id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    request_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    warmup INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    first_chunk_ns INTEGER,
    end_ns INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    error TEXT,
    record_json TEXT NOT NULL
);
CREATE INDEX records_by_run ON records (run_id, record_id);
CREATE TABLE jobs (
    job_id TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    label TEXT,
    status TEXT NOT NULL,
    config TEXT NOT NULL,
    run_ids TEXT NOT NULL,
    progress TEXT NOT NULL,
    pid INTEGER,
    stop_requested INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    heartbeat_at REAL,
    updated_at REAL NOT NULL
);
CREATE INDEX jobs_by_status ON jobs (status, created_at);
"""

_TERMINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STOPPED)


class Job(BaseModel):
    """One entry of the job registry: a list of runs the web app asked for, run by a worker."""

    model_config = ConfigDict(extra="forbid")

    job_id: str
    created_at: str
    label: str | None = None
    status: RunStatus
    configs: list[RunConfig] = Field(description="The runs this job performs, in order.")
    run_ids: list[str] = Field(default_factory=list, description="Runs started so far.")
    progress: dict[str, Any] = Field(default_factory=dict, description="Free-form progress.")
    pid: int | None = Field(None, description="Process running the job.")
    stop_requested: bool = False
    error: str | None = None
    heartbeat_at: float | None = Field(None, description="Unix time of the last heartbeat.")
    updated_at: float

    @property
    def finished(self) -> bool:
        return self.status in _TERMINAL


_JOB_UPDATABLE = {"status", "label", "run_ids", "progress", "pid", "stop_requested", "error"}


def default_location() -> Path:
    """`$XDG_DATA_HOME/inference-advisor/results.sqlite`, else under ~/.local/share."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / STORE_APPLICATION / "results.sqlite"


def resolve_location(location: str | Path | None = None) -> Path:
    """The database file for a location: a path, a sqlite:/// URL, $ADVISOR_STORE or default."""
    if location is None or str(location) == "":
        location = os.environ.get("ADVISOR_STORE") or default_location()
    text = str(location)
    if "://" in text:
        scheme, _, rest = text.partition("://")
        if scheme.lower() != "sqlite":
            raise UserError(
                f"store URL scheme {scheme!r} is not supported: only sqlite:///path is built in"
            )
        if not rest.startswith("/") or rest == "/":
            raise UserError(f"store URL {text!r} names no file: use sqlite:///path/to/file")
        text = rest[1:]  # sqlite:///rel -> rel, sqlite:////abs -> /abs
    return Path(text).expanduser()


def _now() -> float:
    # Heartbeats compare across processes (and machines on a shared store): wall-clock time,
    # not perf_counter, whose origin differs between boots.
    return time.time()


class ResultStore:
    """Runs, per-request records and jobs in one SQLite file; safe across processes and threads."""

    def __init__(self, location: str | Path | None = None) -> None:
        self.path = resolve_location(location)
        self._lock = threading.RLock()
        self._conn = self._open(self.path)

    # ------------------------------------------------------------------ opening

    @staticmethod
    def _refuse(path: Path, problem: str) -> UserError:
        return UserError(
            f"results store {path}: {problem}; it was left untouched "
            "(choose another file with --store or $ADVISOR_STORE)"
        )

    def _open(self, path: Path) -> sqlite3.Connection:
        exists = path.exists() and path.stat().st_size > 0
        if path.exists() and path.is_dir():
            raise self._refuse(path, "is a directory, not a file")
        if exists:
            # Checked before SQLite opens it: a garbage file must never be touched.
            with path.open("rb") as handle:
                if handle.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                    raise self._refuse(path, "is not a SQLite database (or is corrupt)")
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise UserError(
                    f"results store {path}: cannot create its folder: {error}"
                ) from None
        try:
            conn = sqlite3.connect(
                path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as error:
            raise UserError(f"results store {path}: cannot open: {error}") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self._check_schema(conn, path)  # read-only: nothing is written before this passes
            self._enable_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable at checkpoints
            conn.execute("PRAGMA foreign_keys = ON")
            self._create_schema(conn, path)
        except sqlite3.DatabaseError as error:
            conn.close()
            raise self._refuse(path, f"cannot be read as a SQLite database ({error})") from None
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _enable_wal(conn: sqlite3.Connection) -> None:
        """Switch to WAL; retried, because the switch can report "locked" without waiting while
        another process opens the same new file."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _check_schema(self, conn: sqlite3.Connection, path: Path) -> bool:
        """True if the file is a store of a layout this code reads, False if it is empty."""
        tables = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not tables:
            return False
        if "meta" not in tables:
            shown = ", ".join(sorted(tables)[:5])
            raise self._refuse(path, f"is a SQLite database of another program (tables: {shown})")
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        if meta.get("application") != STORE_APPLICATION:
            raise self._refuse(path, "is not an inference-advisor results store")
        try:
            version = int(meta.get("schema_version", ""))
        except ValueError:
            raise self._refuse(
                path, f"has an unknown schema version {meta.get('schema_version')!r}"
            ) from None
        if version > STORE_SCHEMA_VERSION:
            raise self._refuse(
                path,
                f"was written by a newer version (store schema {version}; this one reads up "
                f"to {STORE_SCHEMA_VERSION}): upgrade inference-advisor",
            )
        if version < 1:
            raise self._refuse(path, f"has an unknown schema version {version}")
        return True

    def _create_schema(self, conn: sqlite3.Connection, path: Path) -> None:
        """Create the tables of an empty file (serialised: two processes may open it at once)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if not self._check_schema(conn, path):
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [
                        ("application", STORE_APPLICATION),
                        ("schema_version", str(STORE_SCHEMA_VERSION)),
                        ("created_at", datetime.now(UTC).isoformat()),
                    ],
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transactions

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; BEGIN IMMEDIATE takes the write lock up front, so the busy
        timeout applies (a deferred transaction upgrading to write can fail at once instead)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            return self._conn.execute(sql, parameters).fetchall()

    # ------------------------------------------------------------------ runs

    @staticmethod
    def _run_columns(result: RunResult) -> dict[str, Any]:
        return {
            "run_id": result.run_id,
            "status": str(result.status),
            "backend": result.config.backend,
            "model": result.config.model,
            "pattern": result.config.load.pattern,
            "created_at": result.created_at,
            "validity": str(result.validity.status) if result.validity else None,
            "gpu_name": primary_gpu_name(result.environment),
            "label": result.config.label,
            "result_json": result.model_dump_json(),
        }

    def create_run(self, result: RunResult) -> None:
        """Store a new run as RUNNING with a heartbeat now (the caller's object is not changed)."""
        running = result.model_copy(update={"status": RunStatus.RUNNING})
        columns = self._run_columns(running)
        now = _now()
        columns.update(heartbeat_at=now, updated_at=now)
        names = ", ".join(columns)
        marks = ", ".join(f":{name}" for name in columns)
        try:
            with self._write() as conn:
                conn.execute(f"INSERT INTO runs ({names}) VALUES ({marks})", columns)
        except sqlite3.IntegrityError:
            raise UserError(f"run {result.run_id} already exists in the store") from None

    def update_run(self, result: RunResult) -> None:
        """Replace a run's stored result (JSON and indexed columns); also counts as a heartbeat."""
        columns = self._run_columns(result)
        now = _now()
        columns.update(heartbeat_at=now, updated_at=now)
        assignments = ", ".join(f"{name} = :{name}" for name in columns if name != "run_id")
        with self._write() as conn:
            cursor = conn.execute(f"UPDATE runs SET {assignments} WHERE run_id = :run_id", columns)
        if cursor.rowcount == 0:
            raise UserError(f"no run {result.run_id} in the store")

    def heartbeat(self, run_id: str) -> None:
        """Mark a run's worker alive now (see reap_stale)."""
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE runs SET heartbeat_at = ? WHERE run_id = ?", (_now(), run_id)
            )
        if cursor.rowcount == 0:
            raise UserError(f"no run {run_id} in the store")

    def add_records(self, run_id: str, records: Sequence[RequestRecord]) -> None:
        """Append per-request records to a run, RECORD_BATCH per transaction."""
        rows = [
            (
                run_id,
                record.id,
                record.phase,
                int(record.warmup),
                record.start_ns,
                record.chunk_ns[0] if record.chunk_ns else None,
                record.end_ns,
                record.input_tokens,
                record.output_tokens,
                record.error,
                record.model_dump_json(),
            )
            for record in records
        ]
        for start in range(0, len(rows), RECORD_BATCH):
            try:
                with self._write() as conn:
                    conn.executemany(
                        "INSERT INTO records (run_id, request_id, phase, warmup, start_ns, "
                        "first_chunk_ns, end_ns, input_tokens, output_tokens, error, record_json)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        rows[start : start + RECORD_BATCH],
                    )
            except sqlite3.IntegrityError:
                raise UserError(f"no run {run_id} in the store to add records to") from None

    def _result_from_json(self, run_id: str, text: str) -> RunResult:
        try:
            return RunResult.model_validate_json(text)
        except ValidationError as error:
            first = error.errors()[0]
            raise UserError(
                f"run {run_id} cannot be read by this version ({first['loc']}: {first['msg']})"
            ) from None

    def get_run(self, run_id: str) -> RunResult:
        rows = self._read("SELECT result_json, status FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            raise UserError(f"no run {run_id} in the store")
        return self._result_from_json(run_id, rows[0][0])

    def list_runs(
        self,
        backend: str | None = None,
        model: str | None = None,
        status: str | RunStatus | None = None,
        limit: int | None = None,
    ) -> list[RunResult]:
        """Stored runs, newest first, filtered by backend, model and status."""
        clauses, parameters = [], []
        for column, value in (("backend", backend), ("model", model), ("status", status)):
            if value is not None:
                clauses.append(f"{column} = ?")
                parameters.append(str(value))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT run_id, result_json FROM runs {where} ORDER BY created_at DESC, rowid DESC"
        if limit is not None:
            sql += " LIMIT ?"
            parameters.append(int(limit))
        return [self._result_from_json(row[0], row[1]) for row in self._read(sql, parameters)]

    def iter_records(self, run_id: str, include_warmup: bool = False) -> Iterator[RequestRecord]:
        """A run's records in insertion order, read in pages (no long-held read transaction)."""
        warmup_clause = "" if include_warmup else " AND warmup = 0"
        last_id = -1
        while True:
            rows = self._read(
                "SELECT record_id, record_json FROM records WHERE run_id = ? AND record_id > ?"
                f"{warmup_clause} ORDER BY record_id LIMIT ?",
                (run_id, last_id, RECORD_BATCH),
            )
            if not rows:
                return
            for record_id, text in rows:
                yield RequestRecord.model_validate_json(text)
                last_id = record_id

    def latest_records(self, run_id: str, limit: int) -> list[RequestRecord]:
        """The last `limit` measured records of a run, in insertion order.

        For live charts of long runs: reads only what is shown, not the whole run (a one-hour
        soak at 100 req/s holds 360k records).
        """
        rows = self._read(
            "SELECT record_json FROM records WHERE run_id = ? AND warmup = 0 "
            "ORDER BY record_id DESC LIMIT ?",
            (run_id, limit),
        )
        return [RequestRecord.model_validate_json(text) for (text,) in reversed(rows)]

    def count_records(self, run_id: str, include_warmup: bool = True) -> int:
        warmup_clause = "" if include_warmup else " AND warmup = 0"
        rows = self._read(
            f"SELECT COUNT(*) FROM records WHERE run_id = ?{warmup_clause}", (run_id,)
        )
        return int(rows[0][0])

    def reap_stale(self, grace_s: float = 120) -> list[str]:
        """Mark RUNNING runs whose heartbeat is older than `grace_s` FAILED; returns their ids."""
        now = _now()
        reaped: list[str] = []
        with self._write() as conn:
            rows = conn.execute(
                "SELECT run_id, heartbeat_at, result_json FROM runs "
                "WHERE status = ? AND heartbeat_at < ?",
                (str(RunStatus.RUNNING), now - grace_s),
            ).fetchall()
            for run_id, heartbeat_at, text in rows:
                try:
                    result = RunResult.model_validate_json(text)
                except ValidationError:
                    continue  # written by a newer version: not ours to rewrite
                silence_s = int(now - heartbeat_at)
                result.status = RunStatus.FAILED
                result.failure = Failure(
                    cause=f"worker lost: no heartbeat for {silence_s} s",
                    advice="The worker process died or hung without reporting (killed, "
                    "out of host memory, machine restarted); see the run's log file.",
                )
                conn.execute(
                    "UPDATE runs SET status = ?, result_json = ?, updated_at = ? WHERE run_id = ?",
                    (str(RunStatus.FAILED), result.model_dump_json(), now, run_id),
                )
                reaped.append(run_id)
        return reaped

    def delete_run(self, run_id: str) -> None:
        """Delete a run and its records."""
        with self._write() as conn:
            conn.execute("DELETE FROM records WHERE run_id = ?", (run_id,))
            cursor = conn.execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
        if cursor.rowcount == 0:
            raise UserError(f"no run {run_id} in the store")

    # ------------------------------------------------------------------ jobs

    @staticmethod
    def _job_from_row(row: Sequence[Any]) -> Job:
        (
            job_id,
            created_at,
            label,
            status,
            config,
            run_ids,
            progress,
            pid,
            stop,
            error,
            beat,
            upd,
        ) = row
        return Job(
            job_id=job_id,
            created_at=created_at,
            label=label,
            status=RunStatus(status),
            configs=[RunConfig.model_validate(item) for item in json.loads(config)],
            run_ids=json.loads(run_ids),
            progress=json.loads(progress),
            pid=pid,
            stop_requested=bool(stop),
            error=error,
            heartbeat_at=beat,
            updated_at=upd,
        )

    _JOB_COLUMNS = (
        "job_id, created_at, label, status, config, run_ids, progress, pid, stop_requested, "
        "error, heartbeat_at, updated_at"
    )

    def create_job(self, configs: list[RunConfig], label: str | None = None) -> str:
        """Queue a job of one or more runs; returns its id."""
        if not configs:
            raise UserError("a job needs at least one run configuration")
        job_id = datetime.now(UTC).strftime("job-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]
        config_json = json.dumps([config.model_dump(mode="json") for config in configs])
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO jobs ({self._JOB_COLUMNS}) VALUES ({', '.join('?' * 12)})",
                (
                    job_id,
                    datetime.now(UTC).isoformat(),
                    label,
                    str(RunStatus.QUEUED),
                    config_json,
                    "[]",
                    "{}",
                    None,
                    0,
                    None,
                    None,
                    _now(),
                ),
            )
        return job_id

    def _reap_stale_jobs(self, conn: sqlite3.Connection, grace_s: float) -> list[str]:
        now = _now()
        rows = conn.execute(
            "SELECT job_id, heartbeat_at FROM jobs WHERE status = ? "
            "AND (heartbeat_at IS NULL OR heartbeat_at < ?)",
            (str(RunStatus.RUNNING), now - grace_s),
        ).fetchall()
        for job_id, heartbeat_at in rows:
            silence_s = int(now - (heartbeat_at or now))
            conn.execute(
                "UPDATE jobs SET status = ?, error = ?, updated_at = ? WHERE job_id = ?",
                (
                    str(RunStatus.FAILED),
                    f"worker lost: no heartbeat for {silence_s} s",
                    now,
                    job_id,
                ),
            )
        return [row[0] for row in rows]

    def reap_stale_jobs(self, grace_s: float = 120) -> list[str]:
        """Mark RUNNING jobs whose heartbeat is older than `grace_s` FAILED; returns their ids."""
        with self._write() as conn:
            return self._reap_stale_jobs(conn, grace_s)

    def claim_next_job(self, pid: int, grace_s: float = 120) -> Job | None:
        """Atomically take the oldest QUEUED job for process `pid`, marking it RUNNING.

        Returns None when another job is RUNNING with a live heartbeat (one GPU job at a time)
        or nothing is queued. A RUNNING job silent for over `grace_s` is marked FAILED first;
        queued jobs whose stop was requested become STOPPED instead of running.
        """
        now = _now()
        with self._write() as conn:
            self._reap_stale_jobs(conn, grace_s)
            busy = conn.execute(
                "SELECT 1 FROM jobs WHERE status = ? LIMIT 1", (str(RunStatus.RUNNING),)
            ).fetchone()
            if busy:
                return None
            conn.execute(
                "UPDATE jobs SET status = ?, updated_at = ? "
                "WHERE status = ? AND stop_requested = 1",
                (str(RunStatus.STOPPED), now, str(RunStatus.QUEUED)),
            )
            row = conn.execute(
                "SELECT job_id FROM jobs WHERE status = ? ORDER BY created_at, rowid LIMIT 1",
                (str(RunStatus.QUEUED),),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE jobs SET status = ?, pid = ?, heartbeat_at = ?, updated_at = ? "
                "WHERE job_id = ?",
                (str(RunStatus.RUNNING), pid, now, now, row[0]),
            )
            claimed = conn.execute(
                f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE job_id = ?", (row[0],)
            ).fetchone()
        return self._job_from_row(claimed)

    def update_job(self, job_id: str, **fields: Any) -> None:
        """Set job fields: status, label, run_ids, progress, pid, stop_requested, error."""
        unknown = set(fields) - _JOB_UPDATABLE
        if unknown:
            raise TypeError(f"update_job: unknown field(s) {sorted(unknown)}")
        columns: dict[str, Any] = {}
        for name, value in fields.items():
            if name == "status":
                value = str(RunStatus(value))
            elif name in ("run_ids", "progress"):
                value = json.dumps(value)
            elif name == "stop_requested":
                value = int(bool(value))
            columns[name] = value
        columns["updated_at"] = _now()
        assignments = ", ".join(f"{name} = :{name}" for name in columns)
        with self._write() as conn:
            cursor = conn.execute(
                f"UPDATE jobs SET {assignments} WHERE job_id = :job_id",
                {**columns, "job_id": job_id},
            )
        if cursor.rowcount == 0:
            raise UserError(f"no job {job_id} in the store")

    def job_heartbeat(self, job_id: str) -> None:
        now = _now()
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET heartbeat_at = ?, updated_at = ? WHERE job_id = ?",
                (now, now, job_id),
            )
        if cursor.rowcount == 0:
            raise UserError(f"no job {job_id} in the store")

    def request_stop(self, job_id: str) -> None:
        """Ask a job to stop: a queued job becomes STOPPED now, a running one is told to stop
        (its worker polls `get_job(...).stop_requested`)."""
        now = _now()
        with self._write() as conn:
            cursor = conn.execute(
                "UPDATE jobs SET stop_requested = 1, updated_at = ? WHERE job_id = ?", (now, job_id)
            )
            conn.execute(
                "UPDATE jobs SET status = ? WHERE job_id = ? AND status = ?",
                (str(RunStatus.STOPPED), job_id, str(RunStatus.QUEUED)),
            )
        if cursor.rowcount == 0:
            raise UserError(f"no job {job_id} in the store")

    def get_job(self, job_id: str) -> Job:
        rows = self._read(f"SELECT {self._JOB_COLUMNS} FROM jobs WHERE job_id = ?", (job_id,))
        if not rows:
            raise UserError(f"no job {job_id} in the store")
        return self._job_from_row(rows[0])

    def list_jobs(self, limit: int = 50) -> list[Job]:
        """Jobs, newest first."""
        rows = self._read(
            f"SELECT {self._JOB_COLUMNS} FROM jobs ORDER BY created_at DESC, rowid DESC LIMIT ?",
            (int(limit),),
        )
        return [self._job_from_row(row) for row in rows]
