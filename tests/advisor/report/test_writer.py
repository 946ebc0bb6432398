"""Safe output: atomic writes, sanitised names, containment in the chosen folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from advisor.report.writer import ReportWriter, check_name, safe_filename
from bench.core.errors import UserError


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Checkout LLM review", "Checkout-LLM-review"),
        ("../../etc/passwd", "etc-passwd"),
        (".hidden", "hidden"),
        ("a/b\\c", "a-b-c"),
        ("Zürich <script>", "Zurich-script"),
        ("...", "report"),
        ("", "report"),
    ],
)
def test_safe_filename_keeps_one_plain_component(text: str, expected: str) -> None:
    assert safe_filename(text) == expected
    assert check_name(safe_filename(text))


def test_safe_filename_limits_length() -> None:
    assert len(safe_filename("x" * 500)) == 100


@pytest.mark.parametrize(
    "bad", ["../x.md", "a/b.md", "a\\b.md", ".hidden.md", "-x.md", "", "x" * 101, "x..md", "é.md"]
)
def test_writer_refuses_unsafe_names(tmp_path: Path, bad: str) -> None:
    writer = ReportWriter(tmp_path)
    with pytest.raises(UserError, match="refusing output file name") as info:
        writer.write_text(bad, "x")
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path: Path) -> None:
    writer = ReportWriter(tmp_path / "out")
    target = writer.write_text("report.md", "first")
    writer.write_text("report.md", "second")
    assert target.read_text() == "second"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.md"]


def test_failed_write_keeps_the_old_file_and_cleans_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = ReportWriter(tmp_path)
    writer.write_text("report.md", "old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        writer.write_text("report.md", "new")
    assert (tmp_path / "report.md").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_symlinked_file_pointing_outside_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").symlink_to(outside)
    with pytest.raises(UserError, match="outside the output folder"):
        ReportWriter(out).write_text("report.md", "overwrite")
    assert outside.read_text() == "precious"


def test_symlinked_subfolder_pointing_outside_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "report-charts").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(UserError, match="outside the output folder"):
        ReportWriter(out).write_text("chart.svg", "<svg/>", folder="report-charts")
    assert list(elsewhere.iterdir()) == []


def test_symlink_inside_the_folder_is_still_refused_as_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "real.md").write_text("x")
    (tmp_path / "report.md").symlink_to(tmp_path / "real.md")
    with pytest.raises(UserError, match="not a regular file"):
        ReportWriter(tmp_path).write_text("report.md", "y")


def test_output_path_that_is_a_file_is_refused(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(UserError, match="not a folder"):
        ReportWriter(a_file)


def test_chosen_folder_may_itself_be_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    ReportWriter(tmp_path / "link").write_text("report.md", "ok")
    assert (real / "report.md").read_text() == "ok"
