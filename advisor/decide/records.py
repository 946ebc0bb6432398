"""The request records behind a run: read once per run id from the caller's records, the
store or the shipped reference archives (the verdicts compare them per request)."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.sizing.measured import ReferenceFiles
from bench.core.errors import UserError
from bench.core.schema import RequestRecord

if TYPE_CHECKING:
    from bench.storage.store import Store


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def shipped_records(folder: str) -> dict[str, list[RequestRecord]]:
    """Measured records by run id from the campaign archives of one reference folder
    (`bench.orchestrate.compare.reference_records`: it reads every archive there, so once per
    process). One reader per folder: the app's sessions build answers in threads, and
    `lru_cache` alone lets every thread that misses read the same archives at once (three
    reports opened together each read them); a folder already read is answered without
    waiting for another folder's read."""
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(folder, threading.Lock())
    with lock:
        return _read_archives(folder)


@lru_cache(maxsize=16)
def _read_archives(folder: str) -> dict[str, list[RequestRecord]]:
    from bench.orchestrate.compare import reference_records

    path = Path(folder)
    return reference_records(path) if path.is_dir() else {}


class RecordsLookup:
    """Where a run's per-request records are: given directly (tests, unsaved runs), in the
    store (`iter_records`), or in the archives beside a shipped reference file
    (`data/reference/NAME_runs.json` -> `data/reference/NAME/*.tgz`). None when nowhere: the
    verdict is then `unknown`, never a guess."""

    def __init__(
        self,
        store: Store | None = None,
        records: Mapping[str, Sequence[RequestRecord]] | None = None,
        reference: ReferenceFiles | None = None,
    ) -> None:
        self.store = store
        self.records = dict(records or {})
        self.archive_of: dict[str, str] = {}
        if reference is not None:
            for file_name, file_runs in reference.runs.items():
                folder = reference.folder / file_name.removesuffix(".json").removesuffix("_runs")
                for run in file_runs:
                    self.archive_of[run.run_id] = str(folder)
        self._read: dict[str, Sequence[RequestRecord] | None] = {}

    def __call__(self, run_id: str) -> Sequence[RequestRecord] | None:
        if run_id in self.records:
            return self.records[run_id]
        if run_id in self._read:
            return self._read[run_id]
        found: Sequence[RequestRecord] | None = None
        if run_id in self.archive_of:
            found = shipped_records(self.archive_of[run_id]).get(run_id)
        elif self.store is not None:
            try:
                found = list(self.store.iter_records(run_id)) or None
            except (UserError, KeyError, OSError):
                found = None
        self._read[run_id] = found
        return found
