"""The `report` command registered on a typer app: formats, user errors as one line + exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from advisor.report.cli import parse_formats, register
from bench.core.errors import UserError

PROFILE = (
    Path(__file__).resolve().parents[3] / "examples" / "profiles" / "chatbot_long_generation.yaml"
)


@pytest.fixture
def app() -> typer.Typer:
    application = typer.Typer()
    register(application)

    @application.command("noop")
    def noop() -> None:  # a second command keeps typer's sub-command form (`app report ...`)
        """Placeholder."""

    return application


def empty_store(tmp_path: Path) -> str:
    """A results store with no runs (a report only reads: it never creates one)."""
    from bench.storage.store import open_store

    path = tmp_path / "s.sqlite"
    open_store(path).close()
    return str(path)


def test_parse_formats() -> None:
    assert parse_formats("all") == ["md", "html", "pdf", "json"]
    assert parse_formats("md, json,md") == ["md", "json"]
    with pytest.raises(UserError, match="unknown report format 'docx'"):
        parse_formats("docx")


def run(app: typer.Typer, *args: str):
    return CliRunner().invoke(app, ["report", *args])


def test_bad_format_is_one_line_and_exit_2(app: typer.Typer, tmp_path: Path) -> None:
    result = run(app, "--profile", str(PROFILE), "--format", "docx", "--out", str(tmp_path))
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and "unknown report format" in result.output


def test_missing_profile_is_exit_2(app: typer.Typer, tmp_path: Path) -> None:
    result = run(app, "--profile", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "o"))
    assert result.exit_code == 2 and "not found" in result.output


def test_unknown_run_is_exit_2(app: typer.Typer, tmp_path: Path) -> None:
    result = run(
        app,
        "--profile",
        str(PROFILE),
        "--run",
        "no-such-run",
        "--store",
        empty_store(tmp_path),
        "--format",
        "json",
        "--out",
        str(tmp_path / "o"),
    )
    assert result.exit_code == 2 and "no-such-run" in result.output


def test_out_path_that_is_a_file_is_exit_2(app: typer.Typer, tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    result = run(
        app,
        "--profile",
        str(PROFILE),
        "--store",
        empty_store(tmp_path),
        "--format",
        "json",
        "--out",
        str(a_file),
    )
    assert result.exit_code == 2 and "not a folder" in result.output


def test_empty_store_still_writes_a_report_saying_what_is_missing(
    app: typer.Typer, tmp_path: Path
) -> None:
    from advisor.report.json import read_report_json

    out = tmp_path / "out"
    result = run(
        app,
        "--profile",
        str(PROFILE),
        "--store",
        empty_store(tmp_path),
        "--format",
        "json,md",
        "--out",
        str(out),
    )
    assert result.exit_code == 0, result.output
    report = read_report_json((out / "chatbot_long_generation.json").read_text())
    assert report.meta.title == "Creative-writing assistant with long answers"
    assert report.stages[0].framework == "vllm" and report.stages[0].path
    assert report.reference is not None  # the seed table, labelled
    # no run charts; the Pareto chart holds only the configuration estimates
    assert [chart.id for chart in report.available_charts()] == ["pareto-per-gpu-vs-per-user"]
    (pareto,) = report.available_charts()
    assert all(series.name.endswith("(estimate)") for series in pareto.series)
    assert (out / "chatbot_long_generation.md").is_file()
