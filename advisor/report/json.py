"""JSON formatter: the report model itself, versioned (`schema_version`), charts as data.

`read_report_json` is the inverse; a file with another schema version is refused clearly.
"""

from __future__ import annotations

import json as _json
from pathlib import Path

from pydantic import ValidationError

from advisor.report.model import REPORT_SCHEMA_VERSION, Report
from advisor.report.writer import ReportWriter, check_name
from bench.core.errors import UserError
from bench.core.strict import describe_validation_error


def render_json(report: Report) -> str:
    return report.model_dump_json(indent=2) + "\n"


def read_report_json(text: str) -> Report:
    """A Report from JSON text; UserError for another schema version or a malformed file."""
    try:
        data = _json.loads(text)
    except ValueError as exc:
        raise UserError(f"report JSON is not valid JSON: {exc}") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != REPORT_SCHEMA_VERSION:
        raise UserError(
            f"report schema_version {version!r} is not supported (this version reads "
            f"{REPORT_SCHEMA_VERSION})"
        )
    try:
        return Report.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc, Report)
        raise UserError(f"report JSON is malformed at {message}") from None


def write_json(report: Report, writer: ReportWriter, stem: str) -> Path:
    check_name(stem)
    return writer.write_text(f"{stem}.json", render_json(report))
