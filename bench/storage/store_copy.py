"""`python -m bench store copy SRC DST`: copy finished runs, with their records and telemetry,
from one results store to another (how a user moves from the embedded SQLite file to a team's
PostgreSQL). Idempotent: a run already in the destination, identical, is left alone; one that
differs (re-copied after an edit) is replaced whole; copying twice duplicates nothing. A source
row this version cannot read is skipped and named; the readable runs are still copied.
"""

from __future__ import annotations

from pydantic import Field

from bench.core.errors import UserError
from bench.core.schema import RunStatus
from bench.core.strict import Strict
from bench.storage.store import Store, UnreadableRow, UnreadableRun

FINISHED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STOPPED)


class CopyReport(Strict):
    """What one copy did, in runs and records."""

    copied: int = Field(0, description="Runs new in the destination.")
    updated: int = Field(0, description="Runs that differed in the destination and were replaced.")
    unchanged: int = Field(0, description="Runs already in the destination, identical.")
    unfinished: int = Field(0, description="Runs still QUEUED or RUNNING in the source: left out.")
    records: int = Field(0, description="Request records written to the destination.")
    skipped: list[UnreadableRow] = Field(
        default_factory=list, description="Source rows this version cannot read: not copied."
    )


def copy_runs(source: Store, destination: Store) -> CopyReport:
    """Copy every finished run of `source` (result JSON with telemetry, and its records, warm-up
    included) into `destination`, each run in one destination transaction."""
    if source.location.identity == destination.location.identity:
        raise UserError(
            f"store copy: source and destination are the same store ({source.location.display})"
        )
    scan = source.scan_runs()
    report = CopyReport(skipped=scan.unreadable)
    for run in scan.runs:
        if run.status not in FINISHED:
            # Its runner is still writing to the source; copy it once it has finished.
            report.unfinished += 1
            continue
        record_count = source.count_records(run.run_id)
        if destination.has_run(run.run_id):
            try:
                same = (
                    destination.get_run(run.run_id) == run
                    and destination.count_records(run.run_id) == record_count
                )
            except UnreadableRun:  # the destination's copy is unreadable: replace it
                same = False
            if same:
                report.unchanged += 1
                continue
            report.updated += 1
        else:
            report.copied += 1
        destination.put_run(run, source.iter_records(run.run_id, include_warmup=True))
        report.records += record_count
    return report
