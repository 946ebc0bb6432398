"""The versioned report model: JSON round-trip and refusal of other schema versions."""

from __future__ import annotations

import json

import pytest

from advisor.report.json import read_report_json, render_json
from advisor.report.model import REPORT_SCHEMA_VERSION, Report
from bench.core.errors import UserError


def test_json_round_trips_through_the_model(synthetic_report: Report) -> None:
    text = render_json(synthetic_report)
    data = json.loads(text)
    assert next(iter(data)) == "schema_version"
    assert data["schema_version"] == REPORT_SCHEMA_VERSION
    again = read_report_json(text)
    assert again == synthetic_report
    assert render_json(again) == text


def test_json_keeps_charts_as_data(synthetic_report: Report) -> None:
    data = json.loads(render_json(synthetic_report))
    charts = {chart["id"]: chart for chart in data["charts"]}
    assert charts["throughput-vs-concurrency"]["series"][0]["x"]
    assert charts["steady-state-slopes"]["available"] is False
    assert "steady" in charts["steady-state-slopes"]["absent_reason"]


def test_other_schema_version_is_refused(synthetic_report: Report) -> None:
    data = json.loads(render_json(synthetic_report))
    data["schema_version"] = REPORT_SCHEMA_VERSION + 1
    with pytest.raises(UserError, match="schema_version"):
        read_report_json(json.dumps(data))


def test_unknown_field_is_refused(synthetic_report: Report) -> None:
    data = json.loads(render_json(synthetic_report))
    data["meta"]["surprise"] = 1
    with pytest.raises(UserError, match=r"meta\.surprise"):
        read_report_json(json.dumps(data))
