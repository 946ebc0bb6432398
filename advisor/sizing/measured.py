"""The measured runs the advisor reads: the shipped reference folder (measured RunResults and
published tables by file name, read once) and the store's finished runs, with the catalogue GPU
each run used. Sizing calibrates on them; the evidence layer ranks them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from advisor.workload.gpus import find_gpu
from bench.core.schema import RunResult, RunStatus
from bench.core.strict import describe_validation_error

if TYPE_CHECKING:  # the store module pulls in SQLAlchemy; the advisor only needs its type here
    from bench.storage.store import Store


REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REFERENCE_DIR = REPO_ROOT / "data" / "reference"


def cited_file(folder: Path, file_name: str) -> str:
    """How a reference file is cited in the advisor's text: relative to this checkout when it
    lies inside it (`data/reference/x_runs.json`, the same on every machine), else its path."""
    path = (folder / file_name).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def run_gpu_name(run: RunResult) -> str | None:
    """The canonical catalogue name of the GPU a run used, the raw name, or None: a run on the
    CPU (also on a machine that has a GPU) used none."""
    raw = run.environment.primary_gpu_name if run.environment else None
    if raw is None or run.config.device == "cpu":
        return None
    spec = find_gpu(raw)
    return spec.name if spec is not None else raw


def same_gpu_type(gpu_name: str | None, gpu_type: str | None) -> bool:
    """Whether evidence from `gpu_name` counts as measured on the profile's `gpu_type`: the one
    rule for evidence rows and reports (catalogue aliases match; unknown names must be equal)."""
    if not gpu_name or not gpu_type:
        return False
    spec = find_gpu(gpu_name)
    return (spec is not None and spec == find_gpu(gpu_type)) or gpu_name == gpu_type


CALIBRATION_SUFFIX = "_calibration.json"
"""A shipped `bench calibrate` record's file name ends so (calibration_fit.SHIPPED_SUFFIX)."""


def _reference_files(folder: Path) -> Iterator[tuple[str, Any, str | None]]:
    """(file name, parsed JSON or None, note) for every *.json file in the reference folder."""
    from bench.core.errors import UserError
    from bench.core.files import load_user_json

    for file in sorted(folder.glob("*.json")):
        if file.name.endswith(CALIBRATION_SUFFIX):  # a `bench calibrate` record, not runs:
            continue  # read by advisor.sizing.calibration_fit.shipped_records
        try:  # bounded: a FIFO, a device, a huge or deeply nested file is a note, not a hang
            yield file.name, load_user_json(file, "reference file"), None
        except UserError as exc:
            yield file.name, None, f"{file.name}: unreadable ({exc})"


def _measured_runs(name: str, data: Any) -> tuple[list[RunResult], str | None]:
    """RunResults in one measured reference file (a result, a list, or {"runs": [...]})."""
    items = data.get("runs", [data]) if isinstance(data, dict) else data
    runs: list[RunResult] = []
    for item in items if isinstance(items, list) else []:
        try:
            runs.append(RunResult.model_validate(item))
        except ValidationError as exc:
            return runs, f"{name}: not a RunResult ({describe_validation_error(exc, RunResult)})"
    return runs, None


@dataclass(frozen=True)
class ReferenceFiles:
    """The reference folder, read once: measured runs and published tables by file name, plus
    notes on files that could not be used (the evidence layer turns the tables into rows:
    `advisor.evidence.rows.reference_published_rows`)."""

    folder: Path
    runs: dict[str, list[RunResult]] = field(default_factory=dict)
    published: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def read_reference_folder(reference_dir: str | Path | None = None) -> ReferenceFiles:
    """Parse every *.json file in the reference folder (data/reference when None) but the
    calibration records."""
    folder = Path(reference_dir) if reference_dir is not None else DEFAULT_REFERENCE_DIR
    reference = ReferenceFiles(folder)
    if not folder.is_dir():
        reference.notes.append(f"reference folder {folder} does not exist")
        return reference
    for name, data, note in _reference_files(folder):
        if data is None:
            reference.notes.append(note or name)
            continue
        if isinstance(data, dict) and data.get("kind") == "published":
            reference.published[name] = data
            continue
        found, note = _measured_runs(name, data)
        if found:
            reference.runs[name] = found
        if note:
            reference.notes.append(note)
    return reference


def measured_reference_runs(reference_dir: str | Path | None = None) -> dict[str, list[RunResult]]:
    """The measured RunResults shipped in the reference folder, by file name."""
    return read_reference_folder(reference_dir).runs


def stored_runs(store: Store | None) -> list[RunResult]:
    """Every finished run in the store, or [] for None."""
    if store is None:
        return []
    return [
        run for run in store.list_runs() if run.status not in (RunStatus.QUEUED, RunStatus.RUNNING)
    ]


__all__ = [
    "DEFAULT_REFERENCE_DIR",
    "ReferenceFiles",
    "measured_reference_runs",
    "read_reference_folder",
    "run_gpu_name",
    "same_gpu_type",
    "stored_runs",
]
