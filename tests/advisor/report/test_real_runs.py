"""Every format from a REAL stored run (see `real_report_dir`), checked for content; the HTML is
opened in headless Chromium and screenshotted, the PDF's first pages rasterised (pdftoppm)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from advisor.report.json import read_report_json
from advisor.report.model import SECTIONS, Report
from tests.advisor.report.test_formats import evidence_numbers

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
pytestmark = pytest.mark.slow


def _report(real_report_dir: dict[str, Any]) -> Report:
    path = real_report_dir["out"] / f"{real_report_dir['stem']}.json"
    return read_report_json(path.read_text())


def screenshot_dir(tmp_path: Path) -> Path:
    """Where screenshots go: $REPORT_SCREENSHOT_DIR to keep them for a person to look at."""
    chosen = os.environ.get("REPORT_SCREENSHOT_DIR")
    folder = Path(chosen) if chosen else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def test_json_round_trips_and_holds_the_stored_runs_figures(real_report_dir) -> None:
    report = _report(real_report_dir)
    run = real_report_dir["run"]
    assert [r.run_id for r in report.runs] == [run.run_id]
    assert report.runs[0].records > 0
    row = report.evidence[0]
    assert row.run_id == run.run_id and row.framework == run.config.backend
    assert row.output_throughput_tok_s == pytest.approx(run.summary.output_throughput_tok_s)
    assert report.reproduce[0].command == run.command and run.command.startswith("python -m bench")
    charts = {chart.id: chart for chart in report.charts}
    for drawn in (
        "throughput-vs-concurrency",
        "p99-vs-concurrency",
        "latency-distribution",
        "memory-over-time",
    ):
        assert charts[drawn].available, charts[drawn].absent_reason
    assert not charts["power-over-time"].available or report.environment.fingerprint
    assert report.reference is not None and report.reference.rows


def test_markdown_links_chart_files_that_exist(real_report_dir) -> None:
    out, stem = real_report_dir["out"], real_report_dir["stem"]
    text = (out / f"{stem}.md").read_text()
    report = _report(real_report_dir)
    for chart in report.available_charts():
        link = f"{stem}-charts/{chart.id}.svg"
        assert f"]({link})" in text and (out / link).read_text().startswith("<svg")


def test_pdf_text_has_every_section_and_the_evidence_numbers(real_report_dir) -> None:
    from pypdf import PdfReader

    out, stem = real_report_dir["out"], real_report_dir["stem"]
    pdf = PdfReader(str(out / f"{stem}.pdf"))
    flat = " ".join(" ".join(page.extract_text() for page in pdf.pages).split())
    for _, title in SECTIONS:
        assert title in flat, title
    for number in evidence_numbers(_report(real_report_dir)):
        assert number in flat, number
    assert real_report_dir["run"].run_id in flat


def test_pdf_pages_rasterise(real_report_dir, tmp_path: Path) -> None:
    if shutil.which("pdftoppm") is None:
        pytest.skip("pdftoppm (poppler-utils) is not installed")
    out, stem = real_report_dir["out"], real_report_dir["stem"]
    prefix = screenshot_dir(tmp_path) / "report-pdf-page"
    subprocess.run(
        [
            "pdftoppm",
            "-r",
            "70",
            "-png",
            "-f",
            "1",
            "-l",
            "8",
            str(out / f"{stem}.pdf"),
            str(prefix),
        ],
        check=True,
        timeout=120,
    )
    pages = sorted(prefix.parent.glob("report-pdf-page*.png"))
    assert len(pages) == 8 and all(page.stat().st_size > 10_000 for page in pages)


@pytest.mark.e2e
def test_html_opens_offline_in_chromium_with_every_chart_drawn(real_report_dir, tmp_path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    from playwright.sync_api import sync_playwright

    out, stem = real_report_dir["out"], real_report_dir["stem"]
    report = _report(real_report_dir)
    requests: list[str] = []
    errors: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.on("request", lambda request: requests.append(request.url))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto((out / f"{stem}.html").as_uri())
            page.wait_for_load_state("load")
            drawn = page.evaluate(
                "Array.from(document.querySelectorAll('img[data-chart]')).map(i => "
                "[i.dataset.chart, i.complete && i.naturalWidth > 100, "
                "i.getBoundingClientRect().width])"
            )
            headings = page.evaluate(
                # the table of contents' own heading is not a section
                "Array.from(document.querySelectorAll('h2:not(.toc-title)'))"
                ".map(h => h.textContent)"
            )
            title = page.title()
            shot = screenshot_dir(tmp_path) / "report-html.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    assert [chart_id for chart_id, _, _ in drawn] == [c.id for c in report.available_charts()]
    assert all(ok and width > 300 for _, ok, width in drawn), drawn
    assert headings == [title for _, title in SECTIONS]
    assert title == report.meta.title
    external = [url for url in requests if not url.startswith(("file:", "data:"))]
    assert external == [] and errors == []
    assert shot.stat().st_size > 50_000
