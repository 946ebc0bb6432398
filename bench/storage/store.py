"""The results store: runs, their per-request records and the job queue, in SQLite or PostgreSQL.

One interface (`Store`), chosen by URL (see bench/storage/store_url.py): `sqlite:///path` or a plain
path is the zero-setup embedded default; `postgresql://user@host:port/db` is a database a team
shares. Both are served by `ResultStore`, written once in SQLAlchemy 2 Core over the tables of
bench/storage/store_schema.py, with the two backends differing only where the databases do
(`_SQLite`, `_Postgres`): how a connection is set up, how a write transaction takes its lock,
and what counts as a transient error.

- SQLite: WAL, a busy timeout, every write one `BEGIN IMMEDIATE` transaction (the write lock up
  front, so several processes write without "database is locked"). A file that is not SQLite,
  another program's database, or a store of a newer layout is refused before anything is
  written. Keep the file on a local disk (WAL needs shared memory, which NFS lacks).
- PostgreSQL (psycopg 3): a job is claimed with `SELECT ... FOR UPDATE SKIP LOCKED`, so runners
  on several hosts share one queue and each job is claimed once; schema creation and migration
  hold an advisory lock. A connection lost mid-operation (the server restarted, a fail-over) is
  retried with back-off for up to RECONNECT_S, so a run outlives a database restart.

The layout is versioned (meta.schema_version) and migrated forward on open; a newer one is
refused with one line. Passwords never leave the URL object: messages use the masked display.

Nothing is stored that this version cannot read back (every result is round-tripped before it
is written), and one unreadable row never locks the store: readers skip it and name it in one
warning line (`scan_runs` says which and why). A read (`create=False`) never creates a store,
and reads a read-only SQLite file in place. A RUNNING run records its owner (host, pid, start
time); opening a store fails the runs whose owner died on this host at once, and those of other
hosts once their heartbeat is older than RUN_GRACE_S.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable
from urllib.parse import quote

import psutil
from pydantic import Field, ValidationError
from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from bench import SCHEMA_VERSION
from bench.core.config import RunConfig, legacy_axes_moved
from bench.core.errors import UserError
from bench.core.job_progress import JobProgressState
from bench.core.schema import Failure, RequestRecord, RunResult, RunStatus, ValidityStatus
from bench.core.strict import Strict, describe_validation_error
from bench.storage.store_schema import (
    OWN_TABLES,
    STORE_SCHEMA_VERSION,
    create_fresh,
    jobs,
    meta,
    migrate,
    records,
    runs,
)
from bench.storage.store_url import STORE_APPLICATION, StoreURL, default_location, parse_store_url

__all__ = [
    "STORE_SCHEMA_VERSION",
    "Job",
    "JobRunStore",
    "JobStatus",
    "JobWriter",
    "ResultStore",
    "RunScan",
    "RunWriter",
    "Store",
    "StoreInfo",
    "StoreURL",
    "StoreUnavailable",
    "UnreadableRun",
    "UnstorableRun",
    "default_location",
    "open_store",
    "parse_store_url",
]

log = logging.getLogger("bench.storage.store")

BUSY_TIMEOUT_S = 30.0
RECORD_BATCH = 500
"""Records per INSERT transaction: large enough to be fast, small enough not to block others."""
RECONNECT_S = 60.0
"""How long an operation retries a lost PostgreSQL connection before giving up (one line)."""
CONNECT_TIMEOUT_S = 5
"""Opening a store fails after this long on an unreachable host (no retries at open)."""
RUN_GRACE_S = 300.0
"""A RUNNING run of another host silent this long is failed when a store is opened (its owner
heartbeats every few seconds from `bench.run.api.launch`, loading included; generous because a
database restart can hold writes back for RECONNECT_S)."""
OWNER_START_TOLERANCE_S = 1.0
"""A process with the owner's pid but a start time further off than this is another process."""

SQLITE_HEADER = b"SQLite format 3\x00"

JobStatus = RunStatus
"""Jobs move through the same states as runs: QUEUED, RUNNING, COMPLETED, FAILED, STOPPED."""

_TERMINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STOPPED)
_T = TypeVar("_T")


class StoreUnavailable(UserError):
    """The database could not be reached (for longer than RECONNECT_S during an operation)."""


class UnstorableRun(UserError):
    """A result that would not load back (e.g. a non-finite number JSON cannot hold): refused
    before it is written, so the store never holds a row its own reader refuses."""


class UnreadableRun(UserError):
    """A stored run this version cannot read (corrupt JSON, a newer result schema, a row that
    fails validation); `reason` says which."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"run {run_id} cannot be read by this version ({reason})")
        self.run_id = run_id
        self.reason = reason


class UnreadableRow(Strict):
    """One run a reader skipped, and why."""

    run_id: str
    status: str = Field(description="The row's status column (readable without the JSON).")
    reason: str


class RunScan(Strict):
    """What `scan_runs` read: the runs this version reads, and the rows it skipped."""

    runs: list[RunResult] = Field(default_factory=list)
    unreadable: list[UnreadableRow] = Field(default_factory=list)


class Job(Strict):
    """One entry of the job queue: a list of runs the web app asked for, run by a job runner."""

    job_id: str
    created_at: str
    label: str | None = None
    status: RunStatus
    configs: list[RunConfig] = Field(description="The runs this job performs, in order.")
    run_ids: list[str] = Field(default_factory=list, description="Runs finished so far.")
    progress: JobProgressState = Field(
        default_factory=JobProgressState, description="Its runs' progress; where it runs (Ray)."
    )
    pid: int | None = Field(None, description="Process id of the runner on its host.")
    runner: str | None = Field(None, description="The runner that claimed it: host:pid.")
    current_run_id: str | None = Field(None, description="The run it is executing now.")
    stop_requested: bool = False
    error: str | None = None
    heartbeat_at: float | None = Field(None, description="Unix time of the last heartbeat.")
    updated_at: float

    @property
    def finished(self) -> bool:
        return self.status in _TERMINAL


class StoreInfo(Strict):
    """What `python -m bench store info` and the Results page show about a store."""

    backend: str
    location: str = Field(description="The store's URL or path, password masked.")
    schema_version: int
    runs: int
    jobs: int


_JOB_UPDATABLE = {
    "status",
    "label",
    "run_ids",
    "progress",
    "pid",
    "stop_requested",
    "error",
    "current_run_id",
}


class RunWriter(Protocol):
    """What `bench.run.api.launch` needs from a store: register one run, stream its records,
    store the result (or the small FAILED mark), and read the run back for the analysis. A Ray
    node's `ForwardingStore` meets it as well as a `ResultStore` does."""

    @property
    def display(self) -> str: ...
    def create_run(self, result: RunResult) -> None: ...
    def update_run(self, result: RunResult) -> None: ...
    def heartbeat(self, run_id: str) -> None: ...
    def add_records(self, run_id: str, records: Sequence[RequestRecord]) -> None: ...
    def fail_run(self, run_id: str, failure: Failure) -> bool: ...
    def get_run(self, run_id: str) -> RunResult: ...
    def iter_records(
        self, run_id: str, include_warmup: bool = False
    ) -> Iterator[RequestRecord]: ...


class JobWriter(Protocol):
    """What a job's runner needs of its row: read it (the stop flag), beat, record progress."""

    def get_job(self, job_id: str) -> Job: ...
    def job_heartbeat(self, job_id: str, run_id: str | None = None) -> None: ...
    def update_job(self, job_id: str, **fields: Any) -> None: ...


class JobRunStore(RunWriter, JobWriter, Protocol):
    """What `bench.orchestrate.job_run.run_job` needs: the job's row and its runs (a Ray node's
    `PlacedStore` and `ForwardingStore` meet it)."""


@runtime_checkable
class Store(JobRunStore, Protocol):
    """What the bench, the advisor, the job runner and the app need from a results store."""

    location: StoreURL

    def close(self) -> None: ...
    def info(self) -> StoreInfo: ...
    def has_run(self, run_id: str) -> bool: ...
    def list_runs(
        self,
        backend: str | None = None,
        model: str | None = None,
        status: str | RunStatus | None = None,
        limit: int | None = None,
    ) -> list[RunResult]: ...
    def scan_runs(
        self,
        backend: str | None = None,
        model: str | None = None,
        status: str | RunStatus | None = None,
        limit: int | None = None,
    ) -> RunScan: ...
    def group_runs(self, group_id: str) -> list[RunResult]: ...
    def latest_records(self, run_id: str, limit: int) -> list[RequestRecord]: ...
    def count_records(self, run_id: str, include_warmup: bool = True) -> int: ...
    def put_run(self, result: RunResult, records: Iterable[RequestRecord]) -> None: ...
    def reap_stale(self, grace_s: float = 120) -> list[str]: ...
    def delete_run(self, run_id: str) -> None: ...
    def create_job(self, configs: list[RunConfig], label: str | None = None) -> str: ...
    def claim_next_job(
        self, pid: int, grace_s: float = 120, runner: str | None = None
    ) -> Job | None: ...
    def reap_stale_jobs(self, grace_s: float = 120) -> list[str]: ...
    def request_stop(self, job_id: str) -> None: ...
    def list_jobs(self, limit: int = 50) -> list[Job]: ...


def _now() -> float:
    # Heartbeats compare across processes and hosts sharing a store: wall-clock time, not
    # perf_counter, whose origin differs between boots. Hosts are assumed NTP-synchronised.
    return time.time()


@functools.cache
def _node_identity(_pid: int) -> str:
    """Which kernel's pids an owner pid belongs to: the boot id and the pid namespace (containers
    of one host may share a host name, never a pid namespace). Cached per process id."""
    parts = []
    for read in (
        lambda: Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        lambda: os.readlink("/proc/self/ns/pid"),
    ):
        try:
            parts.append(read())
        except OSError:  # no /proc (macOS): the host name alone identifies the host
            parts.append("-")
    return "/".join(parts)


def _process_started_at(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def this_owner() -> dict[str, Any]:
    """The owner columns of a run this process creates."""
    pid = os.getpid()
    return {
        "owner_host": socket.gethostname(),
        "owner_pid": pid,
        "owner_node": _node_identity(pid),
        "owner_started_at": _process_started_at(pid),
    }


def owner_gone(pid: int, started_at: float | None) -> bool:
    """True when no process of this host is the owner any more (exited, a zombie, or its pid
    reused by a process that started at another time)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return True
        if started_at is None:
            return False
        return abs(process.create_time() - started_at) > OWNER_START_TOLERANCE_S
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # access denied: it exists
        return False


def checked_result_json(result: RunResult) -> str:
    """`result` as the JSON the store keeps, after checking this version reads it back.

    JSON has no inf or NaN (pydantic writes them as null), so a run with `rate_rps=inf` or a NaN
    figure would be stored and then refused by every reader; it is refused here instead."""
    try:
        text_ = result.model_dump_json()
    except ValueError as error:  # PydanticSerializationError: a value JSON cannot hold
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise UnstorableRun(
            f"run {result.run_id} cannot be stored: it cannot be written as JSON ({reason})"
        ) from None
    try:
        RunResult.model_validate_json(text_)
    except ValidationError as error:
        message = describe_validation_error(error, RunResult)
        raise UnstorableRun(
            f"run {result.run_id} cannot be stored: it would not load back ({message})"
        ) from None
    return text_


def parse_result(run_id: str, text_: str) -> RunResult:
    """A stored result's JSON as a RunResult; UnreadableRun says why it is not one."""
    try:
        data = json.loads(text_)
    except (ValueError, TypeError) as error:
        raise UnreadableRun(run_id, f"corrupt JSON: {str(error).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UnreadableRun(run_id, "corrupt JSON: not an object")
    version = data.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise UnreadableRun(
            run_id,
            f"written by a newer version: result schema {version}, this one reads up to "
            f"{SCHEMA_VERSION}",
        )
    try:
        return RunResult.model_validate_json(text_)
    except ValidationError as error:
        raise UnreadableRun(run_id, describe_validation_error(error, RunResult)) from None


def first_line(error: BaseException) -> str:
    """The driver's own message (not SQLAlchemy's wrapper with SQL and links), first line."""
    original = getattr(error, "orig", None) or error
    lines = [line.strip() for line in str(original).splitlines() if line.strip()]
    return lines[0] if lines else type(original).__name__


# --------------------------------------------------------------------------- the two backends


class _Backend:
    """What differs between SQLite and PostgreSQL; everything else is shared SQL."""

    def __init__(self, location: StoreURL, create: bool = True) -> None:
        self.location = location
        self.create = create
        """False for a read: a missing store is an error, never created."""
        self.read_only = False
        """True when this process can only read the store (a read-only SQLite file)."""

    def missing(self, detail: str = "") -> UserError:
        shown = self.location.display
        return UserError(self.location.scrub(f"no store at {shown}{detail}"))

    def refuse(self, problem: str) -> UserError:
        return UserError(
            self.location.scrub(
                f"results store {self.location.display}: {problem}; it was left untouched "
                "(choose another with --store or $ADVISOR_STORE)"
            )
        )

    def before_open(self) -> None:
        """Checks before any connection is made (a garbage file must never be touched)."""

    def create_engine(self) -> Engine:
        raise NotImplementedError

    def after_check(self, engine: Engine) -> None:
        """Called once the layout was found readable, before anything is created or migrated."""

    def lock_schema(self, conn: Connection) -> None:
        """Serialise schema creation and migration between processes opening the store."""

    def transient(self, error: DBAPIError) -> bool:
        """True for a lost or refused connection that is worth retrying."""
        return False

    def reason(self, error: Exception) -> str:
        """The database's error in one line, for the user."""
        return first_line(error)


class _SQLite(_Backend):
    immutable = False
    """Read-only and in WAL mode without its -shm/-wal files beside it, in a folder this process
    cannot write: SQLite can read it only as an immutable file (a snapshot)."""

    def reason(self, error: Exception) -> str:
        line = first_line(error)
        if "database is locked" in line:  # SQLite's words do not say who or for how long
            return (
                f"{line} (another process held its write lock for longer than the "
                f"{BUSY_TIMEOUT_S:g} s busy timeout)"
            )
        return line

    def before_open(self) -> None:
        path = self.location.path
        assert path is not None
        try:
            if path.is_dir():
                raise self.refuse("is a directory, not a file")
            exists = path.exists()
            size = path.stat().st_size if exists else 0
            if size > 0:
                with path.open("rb") as handle:
                    header = handle.read(100)
                if header[: len(SQLITE_HEADER)] != SQLITE_HEADER:
                    raise self.refuse("is not a SQLite database (or is corrupt)")
        except OSError as error:
            raise UserError(
                f"results store {path}: cannot read it ({error.strerror or error})"
            ) from None
        if not self.create:
            if not exists or size == 0:
                raise self.missing()
            writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)
            if not writable:
                self.read_only = True
                wal_mode = header[18:20] == b"\x02\x02"
                sidecars = all(path.with_name(path.name + end).exists() for end in ("-shm", "-wal"))
                self.immutable = wal_mode and not sidecars
            return
        if exists and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)):
            raise self.refuse(
                "is read-only here (no write permission on the file or its folder): runs "
                "cannot be stored in it"
            )
        if not exists:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise UserError(
                    f"results store {path}: cannot create its folder: {error.strerror or error}"
                ) from None
            if not os.access(path.parent, os.W_OK | os.X_OK):
                raise UserError(
                    f"results store {path}: cannot create it (no write permission on {path.parent})"
                )

    def create_engine(self) -> Engine:
        if self.read_only:
            path = self.location.path
            assert path is not None
            uri = f"file:{quote(str(path.resolve()))}?mode=ro"
            uri += "&immutable=1" if self.immutable else ""
            engine = create_engine(
                "sqlite://",
                creator=lambda: sqlite3.connect(
                    uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False
                ),
            )
        else:
            engine = create_engine(
                self.location.url,
                connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False},
            )

        @event.listens_for(engine, "connect")
        def _configure(dbapi_connection: Any, _record: Any) -> None:
            # Driver autocommit: SQLAlchemy's "begin" hook below issues BEGIN itself, so writes
            # can say IMMEDIATE (pysqlite's implicit BEGIN would be DEFERRED).
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: durable at checkpoints
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            # BEGIN IMMEDIATE takes the write lock up front, so the busy timeout applies (a
            # deferred transaction upgrading to write can fail at once instead).
            write = conn.get_execution_options().get("store_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine

    def after_check(self, engine: Engine) -> None:
        """Switch to WAL (persistent in the file); retried, because the switch can report
        "locked" without waiting while another process opens the same new file."""
        if self.read_only:
            return
        raw = engine.raw_connection()
        try:
            deadline = time.monotonic() + BUSY_TIMEOUT_S
            while True:
                try:
                    raw.cursor().execute("PRAGMA journal_mode = WAL")
                    return
                except sqlite3.Error as error:  # not wrapped by SQLAlchemy here
                    if "locked" not in str(error) or time.monotonic() > deadline:
                        raise UserError(
                            f"results store {self.location.display}: cannot open it "
                            f"({self.reason(error)})"
                        ) from None
                    time.sleep(0.05)
        finally:
            raw.close()


class _Postgres(_Backend):
    SCHEMA_LOCK_KEY = 0x1F_AD_51_0E  # any constant: pg_advisory_xact_lock's key for migrations

    def create_engine(self) -> Engine:
        return create_engine(
            self.location.url,
            pool_pre_ping=True,  # a pooled connection that died with a server restart is replaced
            pool_size=4,
            max_overflow=4,
            connect_args={"connect_timeout": CONNECT_TIMEOUT_S, "application_name": "advisor"},
        )

    def lock_schema(self, conn: Connection) -> None:
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": self.SCHEMA_LOCK_KEY})

    def transient(self, error: DBAPIError) -> bool:
        # OperationalError covers refused connections, "the database system is starting up" and
        # "terminating connection due to administrator command"; connection_invalidated, a
        # connection that broke mid-statement.
        return error.connection_invalidated or isinstance(error, OperationalError)


# --------------------------------------------------------------------------- the store


def open_store(location: str | StoreURL | None = None, create: bool = True) -> ResultStore:
    """Open (creating or upgrading) the store a URL or path names; None = $ADVISOR_STORE or the
    default SQLite file. Raises UserError with one line for a bad, unreachable or newer store.

    `create=False` is for reading: a store that does not exist is the error "no store at ..."
    (nothing is created, no folder either), and a read-only SQLite file is read in place."""
    return ResultStore(location, create=create)


class ResultStore:
    """The results store on SQLite or PostgreSQL; safe across processes, threads and hosts."""

    def __init__(
        self, location: str | os.PathLike[str] | StoreURL | None = None, create: bool = True
    ) -> None:
        self.location = location if isinstance(location, StoreURL) else parse_store_url(location)
        self.path = self.location.path
        """The SQLite file, or None for a database server."""
        self.backend = self.location.backend
        backend_cls = _SQLite if self.backend == "sqlite" else _Postgres
        self._backend: _Backend = backend_cls(self.location, create=create)
        self.reconnect_s = RECONNECT_S
        self._warned_unreadable: set[str] = set()
        self._backend.before_open()
        self.read_only = self._backend.read_only
        """True when this process can only read the store (nothing is reaped or migrated)."""
        self._engine = self._backend.create_engine()
        try:
            self.schema_version = self._open()
        except BaseException:
            self._engine.dispose()
            raise
        self._reap_quietly()

    # ------------------------------------------------------------------ opening

    @property
    def display(self) -> str:
        """The store's location with any password masked."""
        return self.location.display

    def _open(self) -> int:
        try:
            with self._engine.connect() as conn:
                found = self._check_layout(conn)  # read-only: nothing written before it passes
            if found is None and not self._backend.create:
                raise self._backend.missing(" (an empty database)")
            self._backend.after_check(self._engine)
            if found == STORE_SCHEMA_VERSION or (found is not None and self.read_only):
                return found  # a read-only older store is read as it is

            def create_or_migrate(conn: Connection) -> None:
                self._backend.lock_schema(conn)
                version = self._check_layout(conn)  # again: another process may have won
                if version is None:
                    create_fresh(conn, STORE_APPLICATION)
                elif version < STORE_SCHEMA_VERSION:
                    migrate(conn, version)

            self._transaction(create_or_migrate, retry=False)
            return STORE_SCHEMA_VERSION
        except DBAPIError as error:
            if self.backend == "sqlite" and not isinstance(error, OperationalError):
                raise self._backend.refuse(
                    f"cannot be read as a SQLite database ({first_line(error)})"
                ) from None
            if "readonly database" in str(error.orig):
                raise self._backend.refuse(
                    "is read-only here (attempt to write a readonly database): runs cannot be "
                    "stored in it"
                ) from None
            raise StoreUnavailable(
                self.location.scrub(
                    f"results store {self.display}: cannot open: {self._backend.reason(error)}"
                )
            ) from None

    def _check_layout(self, conn: Connection) -> int | None:
        """The layout version of the database, None if it is empty; refuses what it can't read."""
        tables = set(inspect(conn).get_table_names())
        if not tables:
            return None
        if "meta" not in tables:
            shown = ", ".join(sorted(tables)[:5])
            raise self._backend.refuse(f"is a database of another program (tables: {shown})")
        values = dict(conn.execute(select(meta.c.key, meta.c.value)).tuples().all())
        if values.get("application") != STORE_APPLICATION:
            raise self._backend.refuse("is not an inference-advisor results store")
        try:
            version = int(values.get("schema_version", ""))
        except ValueError:
            raise self._backend.refuse(
                f"has an unknown schema version {values.get('schema_version')!r}"
            ) from None
        if version > STORE_SCHEMA_VERSION:
            raise self._backend.refuse(
                f"was written by a newer version (store schema {version}; this one reads up "
                f"to {STORE_SCHEMA_VERSION}): upgrade inference-advisor"
            )
        if version < 1:
            raise self._backend.refuse(f"has an unknown schema version {version}")
        missing = OWN_TABLES - tables if version == STORE_SCHEMA_VERSION else set()
        if missing:
            raise self._backend.refuse(f"lacks tables {sorted(missing)}")
        return version

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ResultStore({self.display!r})"

    # ------------------------------------------------------------------ transactions

    def _transaction(
        self,
        work: Callable[[Connection], _T],
        write: bool = True,
        retry: bool = True,
        retry_commit: bool = True,
    ) -> _T:
        """Run `work` in one transaction; a lost connection is retried until RECONNECT_S.

        Work that failed before COMMIT was rolled back, so running it again is safe. A failure
        during COMMIT leaves the outcome unknown: retried only when `retry_commit` (the work is
        idempotent, e.g. an UPDATE to fixed values); otherwise it becomes StoreUnavailable.
        """
        deadline = time.monotonic() + self.reconnect_s
        delay = 0.1
        while True:
            committing = False
            try:
                with self._engine.connect() as conn:
                    if write:
                        conn = conn.execution_options(store_write=True)
                    with conn.begin() as transaction:  # SQLite: IMMEDIATE when write
                        value = work(conn)
                        committing = True
                        transaction.commit()
                    return value
            except DBAPIError as error:
                if not self._backend.transient(error) or not retry:
                    if isinstance(error, OperationalError):
                        # A full disk, a read-only file, an I/O error: one line, never the
                        # SQL and its parameters (IntegrityError stays for the callers).
                        raise StoreUnavailable(
                            self.location.scrub(
                                f"results store {self.display}: {self._backend.reason(error)}"
                            )
                        ) from None
                    raise
                if (committing and not retry_commit) or time.monotonic() > deadline:
                    raise StoreUnavailable(
                        self.location.scrub(
                            f"results store {self.display}: lost the database ({first_line(error)})"
                        )
                    ) from None
                if delay == 0.1:  # once per outage, not per attempt
                    log.warning(
                        "%s",
                        self.location.scrub(
                            f"results store {self.display}: connection lost "
                            f"({first_line(error)}); retrying for up to {self.reconnect_s:.0f} s"
                        ),
                    )
                time.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _read(self, work: Callable[[Connection], _T]) -> _T:
        return self._transaction(work, write=False)

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
            "gpu_name": result.environment.primary_gpu_name if result.environment else None,
            "label": result.config.label,
            "group_id": result.group.group_id if result.group else None,
            "result_json": checked_result_json(result),
        }

    def info(self) -> StoreInfo:
        def count(conn: Connection) -> tuple[int, int]:
            run_count = conn.execute(select(func.count()).select_from(runs)).scalar_one()
            job_count = conn.execute(select(func.count()).select_from(jobs)).scalar_one()
            return int(run_count), int(job_count)

        run_count, job_count = self._read(count)
        return StoreInfo(
            backend=self.backend,
            location=self.display,
            schema_version=self.schema_version,
            runs=run_count,
            jobs=job_count,
        )

    def create_run(self, result: RunResult) -> None:
        """Store a new run as RUNNING with a heartbeat now, owned by this process (the caller's
        object is not changed). UnstorableRun when the result would not load back."""
        running = result.model_copy(update={"status": RunStatus.RUNNING})
        columns = self._run_columns(running)
        now = _now()
        columns.update(heartbeat_at=now, updated_at=now, **this_owner())
        try:
            # Not retried across a lost COMMIT: it may have landed, and a retry would then
            # report the run as a duplicate.
            self._transaction(lambda conn: conn.execute(insert(runs), columns), retry_commit=False)
        except IntegrityError:
            raise UserError(f"run {result.run_id} already exists in the store") from None

    def update_run(self, result: RunResult) -> None:
        """Replace a run's stored result (JSON and indexed columns); also counts as a heartbeat."""
        columns = self._run_columns(result)
        now = _now()
        columns.update(heartbeat_at=now, updated_at=now)
        run_id = columns.pop("run_id")
        changed = self._transaction(
            lambda conn: (
                conn.execute(update(runs).where(runs.c.run_id == run_id).values(**columns)).rowcount
            )
        )
        if changed == 0:
            raise UserError(f"no run {run_id} in the store")

    def heartbeat(self, run_id: str) -> None:
        """Mark a run's worker alive now (see reap_stale)."""
        changed = self._transaction(
            lambda conn: (
                conn.execute(
                    update(runs).where(runs.c.run_id == run_id).values(heartbeat_at=_now())
                ).rowcount
            )
        )
        if changed == 0:
            raise UserError(f"no run {run_id} in the store")

    @staticmethod
    def _record_rows(run_id: str, batch: Sequence[RequestRecord]) -> list[dict[str, Any]]:
        return [
            {
                "run_id": run_id,
                "request_id": record.id,
                "phase": record.phase,
                "warmup": int(record.warmup),
                "start_ns": record.start_ns,
                "first_chunk_ns": record.chunk_ns[0] if record.chunk_ns else None,
                "end_ns": record.end_ns,
                "input_tokens": record.input_tokens,
                "output_tokens": record.output_tokens,
                "error": record.error,
                "record_json": record.model_dump_json(),
            }
            for record in batch
        ]

    def add_records(self, run_id: str, records_: Sequence[RequestRecord]) -> None:
        """Append per-request records to a run, RECORD_BATCH per transaction."""
        for start in range(0, len(records_), RECORD_BATCH):
            rows = self._record_rows(run_id, records_[start : start + RECORD_BATCH])
            try:
                # A batch whose COMMIT was lost is not sent again: records are never duplicated.
                self._transaction(
                    lambda conn, rows=rows: conn.execute(insert(records), rows),
                    retry_commit=False,
                )
            except IntegrityError:
                raise UserError(f"no run {run_id} in the store to add records to") from None

    def get_run(self, run_id: str) -> RunResult:
        """One run; UserError when there is none, UnreadableRun when this version can't read it."""
        text_ = self._read(
            lambda conn: conn.execute(
                select(runs.c.result_json).where(runs.c.run_id == run_id)
            ).scalar_one_or_none()
        )
        if text_ is None:
            raise UserError(f"no run {run_id} in the store")
        return parse_result(run_id, text_)

    def has_run(self, run_id: str) -> bool:
        return self._read(
            lambda conn: (
                conn.execute(select(runs.c.run_id).where(runs.c.run_id == run_id)).first()
                is not None
            )
        )

    def list_runs(
        self,
        backend: str | None = None,
        model: str | None = None,
        status: str | RunStatus | None = None,
        limit: int | None = None,
    ) -> list[RunResult]:
        """Stored runs, newest first, filtered by backend, model and status. Rows this version
        cannot read are left out and named in one warning line (see `scan_runs`)."""
        scan = self.scan_runs(backend=backend, model=model, status=status, limit=limit)
        self._warn_unreadable(scan.unreadable)
        return scan.runs

    def _warn_unreadable(self, rows: list[UnreadableRow]) -> None:
        """One warning line naming the unreadable rows not yet named by this handle (the app
        lists runs every few seconds)."""
        new = [row for row in rows if row.run_id not in self._warned_unreadable]
        if not new:
            return
        self._warned_unreadable.update(row.run_id for row in new)
        named = "; ".join(f"{row.run_id} ({row.reason})" for row in new[:5])
        more = f"; and {len(new) - 5} more" if len(new) > 5 else ""
        log.warning(
            "warning: results store %s: skipped %d run(s) this version cannot read: %s%s",
            self.display,
            len(new),
            named,
            more,
        )

    def scan_runs(
        self,
        backend: str | None = None,
        model: str | None = None,
        status: str | RunStatus | None = None,
        limit: int | None = None,
    ) -> RunScan:
        """Like list_runs, and which rows were skipped as unreadable (no warning printed)."""
        query = select(runs.c.run_id, runs.c.status, runs.c.result_json)
        for column, value in ((runs.c.backend, backend), (runs.c.model, model)):
            if value is not None:
                query = query.where(column == str(value))
        if status is not None:
            query = query.where(runs.c.status == str(status))
        query = query.order_by(runs.c.created_at.desc(), runs.c.run_id.desc())
        if limit is not None:
            query = query.limit(int(limit))
        rows = self._read(lambda conn: conn.execute(query).tuples().all())
        scan = RunScan()
        for run_id, row_status, text_ in rows:
            try:
                scan.runs.append(parse_result(run_id, text_))
            except UnreadableRun as error:
                scan.unreadable.append(
                    UnreadableRow(run_id=run_id, status=row_status, reason=error.reason)
                )
        return scan

    def group_runs(self, group_id: str) -> list[RunResult]:
        """The runs of one measurement group (repeats), oldest first; [] for an unknown id.
        A row this version cannot read is left out with a warning, as in `scan_runs`."""
        query = (
            select(runs.c.run_id, runs.c.result_json)
            .where(runs.c.group_id == group_id)
            .order_by(runs.c.created_at, runs.c.run_id)
        )
        rows = self._read(lambda conn: conn.execute(query).tuples().all())
        readable: list[RunResult] = []
        for run_id, text_ in rows:
            try:
                readable.append(parse_result(run_id, text_))
            except UnreadableRun as error:
                log.warning("group %s: skipped run %s: %s", group_id, run_id, error.reason)
        return readable

    def iter_records(self, run_id: str, include_warmup: bool = False) -> Iterator[RequestRecord]:
        """A run's records in insertion order, read in pages (no long-held read transaction)."""
        last_id = -1
        while True:
            query = (
                select(records.c.record_id, records.c.record_json)
                .where(records.c.run_id == run_id, records.c.record_id > last_id)
                .order_by(records.c.record_id)
                .limit(RECORD_BATCH)
            )
            if not include_warmup:
                query = query.where(records.c.warmup == 0)
            rows = self._read(lambda conn, query=query: conn.execute(query).tuples().all())
            if not rows:
                return
            for record_id, text_ in rows:
                yield RequestRecord.model_validate_json(text_)
                last_id = record_id

    def latest_records(self, run_id: str, limit: int) -> list[RequestRecord]:
        """The last `limit` measured records of a run, in insertion order.

        For live charts of long runs: reads only what is shown, not the whole run (a one-hour
        soak at 100 req/s holds 360k records).
        """
        query = (
            select(records.c.record_json)
            .where(records.c.run_id == run_id, records.c.warmup == 0)
            .order_by(records.c.record_id.desc())
            .limit(int(limit))
        )
        texts = self._read(lambda conn: conn.execute(query).scalars().all())
        return [RequestRecord.model_validate_json(text_) for text_ in reversed(texts)]

    def count_records(self, run_id: str, include_warmup: bool = True) -> int:
        query = select(func.count()).select_from(records).where(records.c.run_id == run_id)
        if not include_warmup:
            query = query.where(records.c.warmup == 0)
        return int(self._read(lambda conn: conn.execute(query).scalar_one()))

    def put_run(self, result: RunResult, records_: Iterable[RequestRecord]) -> None:
        """Write a run and all its records as they are elsewhere, replacing any stored copy, in
        one transaction (a reader never sees a half-copied run). Used by `store copy`."""
        columns = self._run_columns(result)
        now = _now()
        columns.update(heartbeat_at=now, updated_at=now)
        batches: list[list[dict[str, Any]]] = []
        batch: list[RequestRecord] = []
        for record in records_:  # read before the write lock is taken: the source may be slow
            batch.append(record)
            if len(batch) == RECORD_BATCH:
                batches.append(self._record_rows(result.run_id, batch))
                batch = []
        if batch:
            batches.append(self._record_rows(result.run_id, batch))

        def replace(conn: Connection) -> None:
            conn.execute(delete(records).where(records.c.run_id == result.run_id))
            conn.execute(delete(runs).where(runs.c.run_id == result.run_id))
            conn.execute(insert(runs), columns)
            for rows in batches:
                conn.execute(insert(records), rows)

        self._transaction(replace)  # delete + insert: safe to run again after a lost COMMIT

    def _fail_running(
        self, conn: Connection, run_id: str, failure: Failure, now: float, cutoff: float | None
    ) -> bool:
        """Mark one RUNNING run FAILED with `failure` (only if its heartbeat is older than
        `cutoff`, when given); its stored result and records otherwise stay as they are."""
        row = conn.execute(
            select(runs.c.heartbeat_at, runs.c.result_json).where(
                runs.c.run_id == run_id, runs.c.status == str(RunStatus.RUNNING)
            )
        ).first()
        if row is None or (cutoff is not None and row.heartbeat_at >= cutoff):
            return False
        try:
            result = parse_result(run_id, row.result_json)
        except UnreadableRun:
            return False  # written by a newer version: not ours to rewrite
        result.status = RunStatus.FAILED
        result.failure = failure
        if result.validity is not None:
            result.validity.status = ValidityStatus.INVALID
            result.validity.reasons.append("run failed")
        condition = [runs.c.run_id == run_id, runs.c.status == str(RunStatus.RUNNING)]
        if cutoff is not None:
            condition.append(runs.c.heartbeat_at < cutoff)  # re-checked under the row lock
        changed = conn.execute(
            update(runs)
            .where(*condition)
            .values(
                status=str(RunStatus.FAILED),
                validity=str(ValidityStatus.INVALID) if result.validity else None,
                result_json=checked_result_json(result),
                updated_at=now,
            )
        ).rowcount
        return changed == 1

    def _fail_lost_run(self, conn: Connection, run_id: str, cutoff: float, now: float) -> bool:
        """Mark one RUNNING run silent since before `cutoff` FAILED; its records stay."""
        heartbeat_at = conn.execute(
            select(runs.c.heartbeat_at).where(runs.c.run_id == run_id)
        ).scalar_one_or_none()
        silence_s = int(now - heartbeat_at) if heartbeat_at is not None else 0
        failure = Failure(
            cause=f"worker lost: no heartbeat for {silence_s} s",
            advice="The worker or job runner died or hung without reporting (killed, out of "
            "host memory, machine restarted); the records it wrote are kept. See the run's "
            "log file.",
        )
        return self._fail_running(conn, run_id, failure, now, cutoff)

    def fail_run(self, run_id: str, failure: Failure) -> bool:
        """Mark a RUNNING run FAILED with `failure`, keeping what is stored of it (a small write,
        for when the finished result cannot be stored); False when it is not RUNNING."""
        return self._transaction(
            lambda conn: self._fail_running(conn, run_id, failure, _now(), cutoff=None)
        )

    def _lost_runs(self, conn: Connection, grace_s: float, now: float) -> tuple[list, list]:
        """RUNNING runs whose owner died on this host, and those silent for `grace_s`."""
        columns = [runs.c.run_id, runs.c.heartbeat_at]
        owned = self.schema_version >= 3
        if owned:
            columns += [
                runs.c.owner_host,
                runs.c.owner_pid,
                runs.c.owner_node,
                runs.c.owner_started_at,
            ]
        rows = conn.execute(select(*columns).where(runs.c.status == str(RunStatus.RUNNING))).all()
        host, node = socket.gethostname(), _node_identity(os.getpid())
        dead, silent = [], []
        for row in rows:
            if (
                owned
                and row.owner_pid is not None
                and row.owner_host == host
                and row.owner_node == node
                and owner_gone(row.owner_pid, row.owner_started_at)
            ):
                dead.append(row)
            elif row.heartbeat_at < now - grace_s:
                silent.append(row)
        return dead, silent

    def reap_stale(self, grace_s: float = 120) -> list[str]:
        """Mark FAILED the RUNNING runs whose owner process is gone from this host, and those
        (of any host) whose heartbeat is older than `grace_s`; returns their ids. Records stay.
        Only a read when there is nothing to reap (it runs whenever a store is opened)."""
        dead, silent = self._read(lambda conn: self._lost_runs(conn, grace_s, _now()))
        if not dead and not silent:
            return []

        def reap(conn: Connection) -> list[str]:
            now = _now()
            reaped = []
            for row in dead:
                failure = Failure(
                    cause=f"owner process gone (pid {row.owner_pid} on {row.owner_host})",
                    advice="The process running the benchmark ended without finishing the run "
                    "(killed, crashed, or the machine ran out of memory or disk); the records "
                    "it wrote are kept. See the run's log file.",
                )
                if self._fail_running(conn, row.run_id, failure, now, cutoff=None):
                    reaped.append(row.run_id)
            for row in silent:
                if self._fail_lost_run(conn, row.run_id, now - grace_s, now):
                    reaped.append(row.run_id)
            return reaped

        return self._transaction(reap)

    def _reap_quietly(self) -> None:
        """reap_stale at open (RUN_GRACE_S for other hosts); a failure to reap never fails the
        open: a busy or full store is still read, and reaped by the next open."""
        if self.read_only:
            return
        try:
            reaped = self.reap_stale(RUN_GRACE_S)
        except (DBAPIError, UserError) as error:
            log.debug("results store %s: reaping skipped: %s", self.display, first_line(error))
            return
        if reaped:
            log.info("results store %s: marked lost run(s) FAILED: %s", self.display, reaped)

    def delete_run(self, run_id: str) -> None:
        """Delete a run and its records."""

        def remove(conn: Connection) -> int:
            conn.execute(delete(records).where(records.c.run_id == run_id))
            return conn.execute(delete(runs).where(runs.c.run_id == run_id)).rowcount

        if self._transaction(remove) == 0:
            raise UserError(f"no run {run_id} in the store")

    # ------------------------------------------------------------------ jobs

    @staticmethod
    def _job_from_row(row: Any) -> Job:
        return Job(
            job_id=row.job_id,
            created_at=row.created_at,
            label=row.label,
            status=RunStatus(row.status),
            configs=[
                RunConfig.model_validate(legacy_axes_moved(item)) for item in json.loads(row.config)
            ],
            run_ids=json.loads(row.run_ids),
            progress=JobProgressState.from_stored(json.loads(row.progress)),
            pid=row.pid,
            runner=row.runner,
            current_run_id=row.current_run_id,
            stop_requested=bool(row.stop_requested),
            error=row.error,
            heartbeat_at=row.heartbeat_at,
            updated_at=row.updated_at,
        )

    def create_job(self, configs: list[RunConfig], label: str | None = None) -> str:
        """Queue a job of one or more runs; returns its id."""
        if not configs:
            raise UserError("a job needs at least one run configuration")
        job_id = datetime.now(UTC).strftime("job-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]
        row = {
            "job_id": job_id,
            "created_at": datetime.now(UTC).isoformat(),
            "label": label,
            "status": str(RunStatus.QUEUED),
            "config": json.dumps([config.model_dump(mode="json") for config in configs]),
            "run_ids": "[]",
            "progress": "{}",
            "stop_requested": 0,
            "updated_at": _now(),
        }
        self._transaction(lambda conn: conn.execute(insert(jobs), row), retry_commit=False)
        return job_id

    def _reap_stale_jobs(self, conn: Connection, grace_s: float) -> list[str]:
        """Fail RUNNING jobs silent for `grace_s`, and the run each was executing."""
        now = _now()
        cutoff = now - grace_s
        stale = (
            conn.execute(
                select(jobs.c.job_id, jobs.c.heartbeat_at, jobs.c.current_run_id)
                .where(
                    jobs.c.status == str(RunStatus.RUNNING),
                    (jobs.c.heartbeat_at.is_(None)) | (jobs.c.heartbeat_at < cutoff),
                )
                .with_for_update(skip_locked=True)  # another runner may be reaping it now
            )
            .tuples()
            .all()
        )
        for job_id, heartbeat_at, current_run_id in stale:
            silence_s = int(now - (heartbeat_at or now))
            conn.execute(
                update(jobs)
                .where(jobs.c.job_id == job_id)
                .values(
                    status=str(RunStatus.FAILED),
                    error=f"worker lost: no heartbeat for {silence_s} s",
                    updated_at=now,
                )
            )
            if current_run_id:
                # The runner heartbeat both; a run silent as long as its job died with it.
                self._fail_lost_run(conn, current_run_id, cutoff, now)
        return [job_id for job_id, _, _ in stale]

    def reap_stale_jobs(self, grace_s: float = 120) -> list[str]:
        """Mark RUNNING jobs whose heartbeat is older than `grace_s` FAILED (and the run each was
        executing, records kept); returns their ids."""
        return self._transaction(lambda conn: self._reap_stale_jobs(conn, grace_s))

    def claim_next_job(
        self, pid: int, grace_s: float = 120, runner: str | None = None
    ) -> Job | None:
        """Atomically take the oldest QUEUED job for this runner, marking it RUNNING.

        Exactly one runner gets each job: on PostgreSQL the row is locked with
        `FOR UPDATE SKIP LOCKED` (a concurrent claimer takes the next one instead of waiting);
        on SQLite the whole claim is one BEGIN IMMEDIATE transaction. RUNNING jobs silent for
        over `grace_s` are marked FAILED first; queued jobs whose stop was requested become
        STOPPED instead of running. Each runner runs one job at a time; several runners (one
        per host and store) run jobs side by side.
        """
        runner = runner or f"{socket.gethostname()}:{pid}"

        def claim(conn: Connection) -> Job | None:
            self._reap_stale_jobs(conn, grace_s)
            now = _now()
            conn.execute(
                update(jobs)
                .where(jobs.c.status == str(RunStatus.QUEUED), jobs.c.stop_requested == 1)
                .values(status=str(RunStatus.STOPPED), updated_at=now)
            )
            job_id = conn.execute(
                select(jobs.c.job_id)
                .where(jobs.c.status == str(RunStatus.QUEUED))
                .order_by(jobs.c.created_at, jobs.c.job_id)
                .limit(1)
                .with_for_update(skip_locked=True)
            ).scalar_one_or_none()
            if job_id is None:
                return None
            conn.execute(
                update(jobs)
                .where(jobs.c.job_id == job_id)
                .values(
                    status=str(RunStatus.RUNNING),
                    pid=pid,
                    runner=runner,
                    heartbeat_at=now,
                    updated_at=now,
                )
            )
            row = conn.execute(select(jobs).where(jobs.c.job_id == job_id)).one()
            return self._job_from_row(row)

        # A lost COMMIT is not retried: the job may be ours already, and a retry would take a
        # second one; the first is reaped after the grace period.
        return self._transaction(claim, retry_commit=False)

    def update_job(self, job_id: str, **fields: Any) -> None:
        """Set job fields: status, label, run_ids, progress (a `JobProgressState`), pid,
        stop_requested, error, current_run_id."""
        unknown = set(fields) - _JOB_UPDATABLE
        if unknown:
            raise TypeError(f"update_job: unknown field(s) {sorted(unknown)}")
        columns: dict[str, Any] = {}
        for name, value in fields.items():
            if name == "status":
                value = str(RunStatus(value))
            elif name == "run_ids":
                value = json.dumps(value)
            elif name == "progress":
                if not isinstance(value, JobProgressState):
                    raise TypeError(
                        f"update_job: progress is a JobProgressState, not {type(value).__name__}"
                    )
                value = value.model_dump_json()
            elif name == "stop_requested":
                value = int(bool(value))
            columns[name] = value
        columns["updated_at"] = _now()
        changed = self._transaction(
            lambda conn: (
                conn.execute(update(jobs).where(jobs.c.job_id == job_id).values(**columns)).rowcount
            )
        )
        if changed == 0:
            raise UserError(f"no job {job_id} in the store")

    def job_heartbeat(self, job_id: str, run_id: str | None = None) -> None:
        """Mark a job's runner alive now, and the run it executes (recorded on the job, so a
        dead runner's run is failed with its job)."""

        def beat(conn: Connection) -> int:
            now = _now()
            changed = conn.execute(
                update(jobs)
                .where(jobs.c.job_id == job_id)
                .values(heartbeat_at=now, updated_at=now, current_run_id=run_id)
            ).rowcount
            if run_id is not None:
                conn.execute(update(runs).where(runs.c.run_id == run_id).values(heartbeat_at=now))
            return changed

        if self._transaction(beat) == 0:
            raise UserError(f"no job {job_id} in the store")

    def request_stop(self, job_id: str) -> None:
        """Ask a job to stop: a queued job becomes STOPPED now, a running one is told to stop
        (its runner polls `get_job(...).stop_requested`)."""

        def stop(conn: Connection) -> int:
            now = _now()
            changed = conn.execute(
                update(jobs).where(jobs.c.job_id == job_id).values(stop_requested=1, updated_at=now)
            ).rowcount
            conn.execute(
                update(jobs)
                .where(jobs.c.job_id == job_id, jobs.c.status == str(RunStatus.QUEUED))
                .values(status=str(RunStatus.STOPPED))
            )
            return changed

        if self._transaction(stop) == 0:
            raise UserError(f"no job {job_id} in the store")

    def get_job(self, job_id: str) -> Job:
        row = self._read(
            lambda conn: conn.execute(select(jobs).where(jobs.c.job_id == job_id)).first()
        )
        if row is None:
            raise UserError(f"no job {job_id} in the store")
        return self._job_from_row(row)

    def list_jobs(self, limit: int = 50) -> list[Job]:
        """Jobs, newest first."""
        rows = self._read(
            lambda conn: conn.execute(
                select(jobs)
                .order_by(jobs.c.created_at.desc(), jobs.c.job_id.desc())
                .limit(int(limit))
            ).all()
        )
        return [self._job_from_row(row) for row in rows]
