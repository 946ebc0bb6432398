"""Every format from one Report (the advisor's real answer over synthetic test-double runs):
content, escaping, self-containment."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from advisor.report import generate
from advisor.report.json import read_report_json
from advisor.report.model import SECTIONS, Report
from advisor.report.templating import format_number, format_percent
from bench.core.errors import UserError
from tests.advisor.report.conftest import make_synthetic_report


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Report, dict[str, Path]]:
    report = make_synthetic_report(tmp_path_factory.mktemp("store"))
    out = tmp_path_factory.mktemp("report")
    return report, generate(report, out, stem="checkout")


def evidence_numbers(report: Report) -> list[str]:
    """The evidence table's figures exactly as every format prints them."""
    shown = []
    for row in report.evidence:
        for value in (
            row.request_throughput_rps,
            row.output_throughput_tok_s,
            row.ttft_p50_ms,
            row.ttft_p99_ms,
            row.tpot_p50_ms,
            row.e2e_p99_ms,
            row.peak_gpu_memory_gb,
            row.gb_per_billion_params,
            row.energy_per_output_token_j,
        ):
            if value is not None:
                shown.append(format_number(value))
        shown.append("run failed" if row.failed else format_percent(row.error_rate))
    return shown


def test_all_four_files_and_chart_files_are_written(written) -> None:
    report, files = written
    assert set(files) == {"md", "html", "pdf", "json"}
    charts = sorted(p.name for p in (files["md"].parent / "checkout-charts").iterdir())
    assert charts == sorted(f"{chart.id}.svg" for chart in report.available_charts())
    leftovers = [p for p in files["md"].parent.rglob("*") if p.name.startswith(".")]
    assert leftovers == []


def test_markdown_has_every_section_links_charts_and_escapes(written) -> None:
    report, files = written
    text = files["md"].read_text()
    for _, title in SECTIONS:
        assert len(re.findall(rf"^## {re.escape(title)}$", text, flags=re.M)) == 1, title
    for chart in report.available_charts():
        assert f"](checkout-charts/{chart.id}.svg)" in text
    assert "no steady-pattern run among the runs in this report" in text
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "\\| review" in text  # a pipe in the title cannot break a table
    for number in evidence_numbers(report):
        assert number in text


def test_html_is_self_contained_and_escapes_profile_text(written) -> None:
    report, files = written
    html = files["html"].read_text()
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(" in html
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert "@import" not in html and "url(http" not in html
    images = re.findall(r'<img src="([^"]+)"', html)
    assert len(images) == len(report.available_charts())
    assert all(src.startswith("data:image/svg+xml;base64,") for src in images)
    for _, title in SECTIONS:
        assert f">{title}</h2>" in html.replace("&amp;", "&").replace("&#39;", "'")
    for number in evidence_numbers(report):
        assert number in html


def test_pdf_text_has_every_section_and_the_evidence_numbers(written) -> None:
    from pypdf import PdfReader

    report, files = written
    pdf = PdfReader(str(files["pdf"]))
    pages = [page.extract_text() for page in pdf.pages]
    text = "\n".join(pages)
    flat = " ".join(text.split())
    for _, title in SECTIONS:
        assert title in flat, title
    for number in evidence_numbers(report):
        assert number in flat, number
    assert "<script>alert" in flat  # shown as text, as typed
    # Page 1 is the decision; the big parts and every appendix start their own page.
    assert pages[0].lstrip().lower().startswith("architecture review")
    assert "The decision" in pages[0] and "Reproduce" in " ".join(pages[0].split())
    page_starters = [title for anchor, title in SECTIONS if anchor in PAGE_STARTERS]
    starts = {t for page in pages for t in page_starters if page.lstrip().startswith(t)}
    assert starts == set(page_starters), set(page_starters) - starts
    assert pdf.pages[0].mediabox.width == pytest.approx(595.3, abs=1)  # A4 portrait, points


PAGE_STARTERS = (
    "recommendation",
    "evidence",
    "charts",
    "capacity",
    "runs",
    "environment",
    "decision-path",
    "diagnostics",
    "probes",
    "calibration",
)
"""Sections print.css starts on a new page."""


def test_json_file_round_trips(written) -> None:
    report, files = written
    assert read_report_json(files["json"].read_text()) == report


def test_unknown_format_is_refused(written, tmp_path: Path) -> None:
    report, _ = written
    with pytest.raises(UserError, match="unknown report format"):
        generate(report, tmp_path, ["docx"])
    assert list(tmp_path.iterdir()) == []


def test_number_formatting_is_stable() -> None:
    assert [format_number(v) for v in (None, 0, 0.0123, 3.14159, 42.25, 1234.5, 7)] == [
        "—",
        "0",
        "0.0123",
        "3.14",
        "42.2",
        "1,234",
        "7",
    ]
    assert format_percent(0.005) == "0.50%"
    # No exponent at any size, trailing zeros dropped below one.
    assert [format_number(v) for v in (10310.2, 0.0000123, 0.85, 4889.7054)] == [
        "10,310",
        "0.0000123",
        "0.85",
        "4,890",
    ]


def test_every_chart_spec_is_valid_vega_lite(written, monkeypatch: pytest.MonkeyPatch) -> None:
    """Drawing skips the schema check (advisor.report.charts.VALIDATE_SPECS): it is made here,
    on every chart the report draws (altair raises on a spec the schema refuses)."""
    from advisor.report import charts

    report, _ = written
    monkeypatch.setattr(charts, "VALIDATE_SPECS", True)
    available = report.available_charts()
    assert len(available) >= 4
    for chart in available:
        spec = charts.vega_lite_spec(chart)
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
