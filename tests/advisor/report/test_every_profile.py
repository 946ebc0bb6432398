"""The shipped flow, as a new user runs it: `python -m advisor report --format all` (the real CLI,
in a subprocess) for EVERY profile in examples/profiles/, with an empty store and the shipped
data/reference. A profile added there is covered without touching this file."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.report.json import read_report_json

REPO = Path(__file__).resolve().parents[3]
PROFILES = sorted((REPO / "examples" / "profiles").glob("*.y*ml"))
pytestmark = pytest.mark.slow


PAGE_MARGIN_PT = 14 / 25.4 * 72
"""print.css's left and right page margin (14 mm) in PDF points."""


def text_past_the_right_margin(pdf: Path) -> list[str]:
    """Text runs that start in a page's right margin or past its edge: a table too wide for the
    page (WeasyPrint draws what overflows and the paper cuts it off; the text extraction still
    finds it, so only the positions tell)."""
    from pypdf import PdfReader

    found: list[str] = []
    for number, page in enumerate(PdfReader(pdf).pages, 1):
        limit = float(page.mediabox.width) - PAGE_MARGIN_PT + 1

        def visit(
            text: str, cm: list[float], tm: list[float], *_: object, limit=limit, number=number
        ) -> None:
            x = tm[4] * cm[0] + tm[5] * cm[2] + cm[4]
            if text.strip() and x > limit:
                found.append(f"page {number}: {text.strip()[:30]!r} at x={x:.0f} pt")

        page.extract_text(visitor_text=visit)
    return found


def _squeezed(text: str) -> str:
    """Text without whitespace: PDF extraction breaks lines (and after slashes) at will."""
    return re.sub(r"\s+", "", text)


def test_every_example_profile_is_found() -> None:
    assert len(PROFILES) >= 7


@pytest.mark.parametrize("profile", PROFILES, ids=[path.stem for path in PROFILES])
def test_report_all_formats_for_the_shipped_profile(profile: Path, tmp_path: Path) -> None:
    from pypdf import PdfReader

    from bench.storage.store import ResultStore

    out = tmp_path / "out"
    # an empty store made first: read commands never create one ('no store at PATH')
    ResultStore(tmp_path / "empty.sqlite").close()
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "advisor",
            "report",
            "--profile",
            str(profile),
            "--store",
            str(tmp_path / "empty.sqlite"),
            "--format",
            "all",
            "--out",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    stem = profile.stem
    files = {suffix: out / f"{stem}.{suffix}" for suffix in ("md", "html", "pdf", "json")}
    assert all(path.is_file() for path in files.values()), list(out.iterdir())

    # JSON: validates against the report schema (the pydantic Report model, schema_version).
    report = read_report_json(files["json"].read_text(encoding="utf-8"))
    assert report.stages and all(stage.framework and stage.path for stage in report.stages)

    # PDF page 1: the decision of every stage (the one sentence and its deciding facts), with
    # no raw model key, no Python None and no exponent; every step of the path later on.
    pages = [page.extract_text() for page in PdfReader(files["pdf"]).pages]
    pdf_text = _squeezed(" ".join(pages))
    # Nothing is cut off at the right edge (the Speed table's last columns were, on 11 of 12).
    assert not text_past_the_right_margin(files["pdf"])
    first = _squeezed(pages[0])
    assert len(report.decisions) == len(report.stages)
    for decision in report.decisions:
        assert _squeezed(f"{decision.stage} → {decision.framework_label}") in first
        assert _squeezed(decision.sentence) in first, decision.sentence
    assert not re.search(r"stages\[\d+\]|\bNone\b|\d\.?\d*e[+-]\d|For —", pages[0])
    for stage in report.stages:
        for step in stage.path:
            assert _squeezed(step.question) in pdf_text, step.question
            assert _squeezed(step.why) in pdf_text, step.why

    # HTML: one embedded SVG per drawn chart, and the reason for every chart not drawn.
    html = files["html"].read_text(encoding="utf-8")
    images = dict(re.findall(r'<img[^>]*data-chart="([^"]+)"[^>]*src="([^"]+)"', html))
    if not images:  # attribute order may differ
        images = {
            chart_id: src
            for src, chart_id in re.findall(
                r'<img[^>]*src="([^"]+)"[^>]*data-chart="([^"]+)"', html
            )
        }
    assert sorted(images) == sorted(chart.id for chart in report.available_charts())
    for src in images.values():
        assert src.startswith("data:image/svg+xml;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).lstrip().startswith(b"<svg")
    for chart in report.absent_charts():
        assert chart.absent_reason and chart.absent_reason in html.replace("&#39;", "'")
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing fetched

    # Capacity and cost: every stage not refused has its section, a measured table or why not.
    sections = {section.stage: section for section in report.capacity}
    for stage in report.stages:
        if stage.framework == "none":
            continue
        section = sections[stage.name]
        assert section.table is not None or section.absent_reason, stage.name
        if section.table is None:
            assert _squeezed(section.absent_reason)[:40] in pdf_text, section.absent_reason
    assert _squeezed("Capacity and cost") in pdf_text
