"""The article's published table (data/reference, the advisor's `kind: published` layout) as
the report's reference table, with catalogue headings for its columns."""

from __future__ import annotations

from pathlib import Path

from advisor.report.model import ReferenceTable
from advisor.report.numbers import scalar_text
from bench.core.errors import UserError
from bench.core.metric_catalog import METRICS_BY_NAME

SEED_REFERENCE_FILE = "seed_a100_llama2_13b.json"
COLUMN_LABELS = {
    "framework": "Framework",
    "precision": "Precision",
    "ttft_ms_statistic_not_stated": "TTFT (ms, statistic not stated)",
}
"""Headings of a reference table's columns that are not catalogued metrics."""


def column_label(key: str) -> str:
    """A reference-table column heading: the catalogue's for a metric name, else spelled out."""
    known = METRICS_BY_NAME.get(key)
    if known is not None:
        return known.column
    return COLUMN_LABELS.get(key) or key.replace("_", " ")


def load_reference(path: Path) -> ReferenceTable:
    """The article's published table from data/reference (the advisor's `kind: published` layout:
    source.title, model, environment, caveats, configurations, rows)."""
    from bench.core.files import load_user_json

    data = load_user_json(path, "reference table")
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise UserError(f"reference table {str(path)!r} is not a published table with rows")
    rows_raw = [row for row in data["rows"] if isinstance(row, dict)]
    keys: list[str] = []
    for row in rows_raw:
        for key, value in row.items():
            if (isinstance(value, str | int | float) or value is None) and key not in keys:
                keys.append(key)
    environment = data.get("environment") or {}
    conditions = ", ".join(
        f"{key.replace('_', ' ')}: {scalar_text(value)}"
        for key, value in environment.items()
        if not key.endswith("_as_published") or key == "gpu_as_published"
    )
    model = data.get("model_as_published") or data.get("model")
    if model:
        conditions = f"model: {scalar_text(model)}" + (f"; {conditions}" if conditions else "")
    caveats = [scalar_text(caveat) for caveat in data.get("caveats") or []]
    caveats += [
        f"{name} configuration: {scalar_text(value)}"
        for name, value in (data.get("configurations") or {}).items()
    ]
    source = data.get("source") or {}
    return ReferenceTable(
        title=scalar_text(data.get("title")) or "Article: Llama2-13B on NVIDIA A100 80GB PCIe",
        source=scalar_text(source.get("title"))
        or '"A panoramic analysis of AI inference framework performance testing" (published)',
        conditions=conditions,
        note="Published figures, not measured by this project, and not comparable row by row.",
        caveats=caveats,
        keys=keys,
        columns=[column_label(key) for key in keys],
        rows=[[row.get(key) for key in keys] for row in rows_raw],
    )


def load_seed_reference(reference_dir: Path) -> tuple[ReferenceTable | None, str | None]:
    """The article's published table from the reference folder, or why it is absent."""
    seed_path = reference_dir / SEED_REFERENCE_FILE
    if seed_path.is_file():
        return load_reference(seed_path), None
    return None, f"{SEED_REFERENCE_FILE} is not in {reference_dir}"
