"""The results store's tables (SQLAlchemy Core, one definition for SQLite and PostgreSQL) and the
numbered migrations that bring an older store up to STORE_SCHEMA_VERSION.

Why a small versioned-migration table rather than Alembic: the store is opened by every CLI
command, worker, job runner and the app, on a user's laptop as often as on a team server, and
must upgrade itself in-process without an `alembic.ini`, a script folder or a separate upgrade
step; the previous release already marks its layout with `meta.schema_version` (which that
release checks, so it refuses a store we upgraded instead of misreading it). A migration here is
a few portable DDL statements run in the same write transaction that bumps `meta`, and each
applied step is logged in `schema_migrations`. Alembic's autogenerate and branching would buy
nothing for a linear history of a handful of steps.

Versions:
1. The previous release's layout (SQLite only): meta, runs, records, jobs.
2. jobs.runner (which runner, host:pid, claimed the job), jobs.current_run_id (the run a job is
   executing, so a dead runner's run is failed with its job), and schema_migrations.
3. runs.group_id (nullable): the measurement group a run is a repeat of (RunResult.group), so a
   group's runs are found without reading every run's JSON; older runs stay NULL (alone).
4. The owner of a RUNNING run: runs.owner_host (host name, shown), runs.owner_pid,
   runs.owner_node (boot id and pid namespace: which kernel that pid belongs to) and
   runs.owner_started_at (the process's start time, so a reused pid is not taken for it), so a
   store opened on the owner's host fails a run whose process is gone at once, instead of after
   the heartbeat grace.
5. calibrations: the calibration records `bench calibrate` writes (bench/core/calibration.py),
   one row per record with the columns a reader filters on and the record's versioned JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    insert,
    text,
)

STORE_SCHEMA_VERSION = 5
"""Version of the store's table layout (each RunResult's JSON carries its own schema_version)."""

metadata = MetaData()

meta = Table(
    "meta",
    metadata,
    Column("key", Text, primary_key=True),
    Column("value", Text, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("status", Text, nullable=False),
    Column("backend", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("pattern", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("validity", Text),
    Column("gpu_name", Text),
    Column("label", Text),
    Column("group_id", Text),
    Column("heartbeat_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    # Who writes a RUNNING run (NULL for copied runs and those of schema 1-2).
    Column("owner_host", Text),
    Column("owner_pid", Integer),
    Column("owner_node", Text),
    Column("owner_started_at", Float),
    # Parallelism, precision and everything else of the run stay inside the versioned JSON;
    # columns exist only for what the store filters or sorts on.
    Column("result_json", Text, nullable=False),
)
Index("runs_by_backend_model", runs.c.backend, runs.c.model)
Index("runs_by_status", runs.c.status)
Index("runs_by_created", runs.c.created_at)
Index("runs_by_group", runs.c.group_id)

records = Table(
    "records",
    metadata,
    # INTEGER PRIMARY KEY is SQLite's rowid alias (what schema 1 used); BIGSERIAL on PostgreSQL.
    Column(
        "record_id",
        BigInteger().with_variant(Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("run_id", Text, ForeignKey("runs.run_id", ondelete="CASCADE"), nullable=False),
    Column("request_id", Text, nullable=False),
    Column("phase", Text, nullable=False),
    Column("warmup", Integer, nullable=False),
    Column("start_ns", BigInteger, nullable=False),
    Column("first_chunk_ns", BigInteger),
    Column("end_ns", BigInteger, nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("output_tokens", Integer, nullable=False),
    Column("error", Text),
    Column("record_json", Text, nullable=False),
)
Index("records_by_run", records.c.run_id, records.c.record_id)

jobs = Table(
    "jobs",
    metadata,
    Column("job_id", Text, primary_key=True),
    Column("created_at", Text, nullable=False),
    Column("label", Text),
    Column("status", Text, nullable=False),
    Column("config", Text, nullable=False),
    Column("run_ids", Text, nullable=False),
    Column("progress", Text, nullable=False),
    Column("pid", Integer),
    Column("stop_requested", Integer, nullable=False, server_default=text("0")),
    Column("error", Text),
    Column("heartbeat_at", Float),
    Column("updated_at", Float, nullable=False),
    Column("runner", Text),
    Column("current_run_id", Text),
)
Index("jobs_by_status", jobs.c.status, jobs.c.created_at)

calibrations = Table(
    "calibrations",
    metadata,
    Column("calibration_id", Text, primary_key=True),
    Column("created_at", Text, nullable=False),
    Column("engine", Text, nullable=False),
    Column("model", Text, nullable=False),
    Column("device_type", Text, nullable=False),
    Column("precision_class", Text, nullable=False),
    Column("record_json", Text, nullable=False),
)
Index("calibrations_by_key", calibrations.c.engine, calibrations.c.device_type)

schema_migrations = Table(
    "schema_migrations",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("applied_at", Text, nullable=False),
    Column("description", Text, nullable=False),
)

OWN_TABLES = frozenset(metadata.tables)


@dataclass(frozen=True)
class Migration:
    """One step: `apply` turns a store of version `version - 1` into `version`."""

    version: int
    description: str
    apply: Callable[[Connection], None]


def _to_2(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE jobs ADD COLUMN runner TEXT"))
    conn.execute(text("ALTER TABLE jobs ADD COLUMN current_run_id TEXT"))
    schema_migrations.create(conn)


def _to_3(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE runs ADD COLUMN group_id TEXT"))
    conn.execute(text("CREATE INDEX runs_by_group ON runs (group_id)"))


def _to_4(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE runs ADD COLUMN owner_host TEXT"))
    conn.execute(text("ALTER TABLE runs ADD COLUMN owner_pid INTEGER"))
    conn.execute(text("ALTER TABLE runs ADD COLUMN owner_node TEXT"))
    conn.execute(text("ALTER TABLE runs ADD COLUMN owner_started_at FLOAT"))


def _to_5(conn: Connection) -> None:
    calibrations.create(conn)  # the table and its index, as a fresh store has them


MIGRATIONS = (
    Migration(2, "jobs.runner, jobs.current_run_id, schema_migrations", _to_2),
    Migration(3, "runs.group_id (measurement groups of repeats)", _to_3),
    Migration(4, "runs.owner_host, owner_pid, owner_node, owner_started_at", _to_4),
    Migration(5, "calibrations (bench calibrate records)", _to_5),
)
assert [m.version for m in MIGRATIONS] == list(range(2, STORE_SCHEMA_VERSION + 1))


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def create_fresh(conn: Connection, application: str) -> None:
    """Create every table of the current layout in an empty database and stamp its version."""
    metadata.create_all(conn)
    conn.execute(
        insert(meta),
        [
            {"key": "application", "value": application},
            {"key": "schema_version", "value": str(STORE_SCHEMA_VERSION)},
            {"key": "created_at", "value": now_iso()},
        ],
    )
    conn.execute(
        insert(schema_migrations),
        {
            "version": STORE_SCHEMA_VERSION,
            "applied_at": now_iso(),
            "description": "created at this version",
        },
    )


def migrate(conn: Connection, from_version: int) -> list[int]:
    """Apply every migration after `from_version` in order (inside the caller's transaction)."""
    applied = []
    for migration in MIGRATIONS:
        if migration.version <= from_version:
            continue
        migration.apply(conn)
        conn.execute(
            insert(schema_migrations),
            {
                "version": migration.version,
                "applied_at": now_iso(),
                "description": migration.description,
            },
        )
        conn.execute(
            meta.update().where(meta.c.key == "schema_version").values(value=str(migration.version))
        )
        applied.append(migration.version)
    return applied
