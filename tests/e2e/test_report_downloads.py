"""The Report page in headless Chromium with the shipped data and an empty store: the default
profile and one example profile per kind (generate, forward, multi-stage), each uploaded on the
Advisor page as a person would; every download button clicked and every file checked. The Results
and Advisor pages are opened with the shipped data too. No page may show an exception.

Screenshots go to $ADVISOR_SCREENSHOTS (default: the test's temporary folder).
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from pathlib import Path

import pytest

from advisor.report.json import read_report_json
from advisor.workload.profile_input import load_profile
from tests.e2e.test_app_flow import edit_profile, full_page, no_exceptions, wait_text

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PROFILES = REPO / "examples" / "profiles"
ONE_PER_KIND = {
    "generate": PROFILES / "chatbot_long_generation.yaml",
    "forward": PROFILES / "fixed_shape_vision.yaml",
    "multi-stage": PROFILES / "ecommerce_two_stage.yaml",
}
REPORT_BUILD_S = 240  # advisor + report + every format, on a loaded 2-core machine


def squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def ready_downloads(page):
    """The Report page's downloads for the profile on screen, once built: the page keys the
    profile line and the download buttons by the profile's content digest. Returns the
    buttons' container and the title shown on screen."""
    shown = page.locator("[class*=st-key-report_profile_]").first
    shown.wait_for(timeout=REPORT_BUILD_S * 1000)
    digest = re.search(r"st-key-report_profile_(\w+)", shown.get_attribute("class")).group(1)
    buttons = page.locator(f".st-key-report_downloads_{digest}")
    buttons.wait_for(timeout=REPORT_BUILD_S * 1000)
    title = re.search(r"Profile:\s*(.*?) — \d+ stage", shown.inner_text()).group(1)
    return buttons, title


def download(scope, button_name: str, folder: Path) -> Path:
    """Click a download button inside `scope` (the ready downloads) and save the file."""
    page = scope.page if hasattr(scope, "page") else scope
    button = scope.get_by_role("button", name=button_name, exact=True)
    try:
        button.wait_for(timeout=REPORT_BUILD_S * 1000)
    except Exception:
        page.screenshot(path=str(folder / "no-button.png"), full_page=True)
        raise
    with page.expect_download(timeout=REPORT_BUILD_S * 1000) as info:
        button.click()
    target = folder / info.value.suggested_filename
    info.value.save_as(target)
    return target


def use_profile(page, profile: Path) -> None:
    """Advisor page -> Profile file expander -> upload -> Use this profile."""
    page.get_by_role("link", name="Advisor").first.click()
    wait_text(page, "Which inference framework?", 90)
    page.get_by_text("Profile file (YAML): download, upload, reset").click()
    # The profile's uploader, not a stage's quality.json uploader on the same page.
    page.locator("[data-testid=stFileUploader]").filter(has_text="Upload a profile").locator(
        "[data-testid=stFileUploaderDropzoneInput]"
    ).set_input_files(str(profile))
    use = page.get_by_role("button", name="Use this profile")
    use.wait_for(timeout=60_000)
    # The Advisor page keys its advice by the profile's digest: the upload has been taken in
    # once that key changes (the old page stays on screen until then).
    edit_profile(page, use.click)
    wait_text(page, "How the tree decided", 120)
    no_exceptions(page)


def check_report_downloads(page, folder: Path, title: str, stages: int) -> None:
    """Every download of the Report page, each file checked against the JSON's report."""
    folder.mkdir(parents=True, exist_ok=True)
    page.get_by_role("link", name="Report").first.click()
    buttons, on_screen = ready_downloads(page)
    assert on_screen == title
    report_file = download(buttons, "JSON (data)", folder)
    report = read_report_json(report_file.read_text(encoding="utf-8"))
    assert report.meta.title == on_screen  # the file is for the profile on screen
    assert len(report.stages) == stages and all(stage.framework for stage in report.stages)
    no_exceptions(page)

    html = download(buttons, "HTML (one file)", folder).read_text(encoding="utf-8")
    charts = re.findall(r'<img src="(data:image/svg\+xml;base64,[^"]+)"[^>]*data-chart="', html)
    assert len(charts) == len(report.available_charts())
    assert all(stage.framework in html for stage in report.stages)

    archive = zipfile.ZipFile(
        io.BytesIO(download(buttons, "Markdown (.zip with charts)", folder).read_bytes())
    )
    names = archive.namelist()
    markdown = next(name for name in names if name.endswith(".md"))
    text = archive.read(markdown).decode("utf-8")
    for chart in report.available_charts():
        link = next(name for name in names if name.endswith(f"/{chart.id}.svg"))
        assert f"]({link})" in text and archive.read(link).lstrip().startswith(b"<svg")
    assert report.meta.title.split()[0] in text

    # The PDF is made only when asked for; then its download appears.
    assert buttons.get_by_role("button", name="PDF", exact=True).count() == 0
    buttons.get_by_role("button", name="Make the PDF").click()
    buttons, _ = ready_downloads(page)  # the page reruns: the same profile's buttons again
    pdf = download(buttons, "PDF", folder)
    from pypdf import PdfReader

    pdf_text = squeezed(" ".join(p.extract_text() for p in PdfReader(pdf).pages))
    # Page 1 names each stage's framework as people write it (vLLM); the path is Appendix C.
    for decision, stage in zip(report.decisions, report.stages, strict=True):
        assert squeezed(f"{decision.stage} → {decision.framework_label}") in pdf_text
        assert all(squeezed(step.question) in pdf_text for step in stage.path)
    no_exceptions(page)


def test_report_page_downloads_for_the_default_and_one_profile_per_kind(app_url, page, tmp_path):
    shots = Path(os.environ.get("ADVISOR_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.goto(app_url)
    wait_text(page, "Which inference framework?", 120)
    no_exceptions(page)
    check_report_downloads(page, tmp_path / "default", "Chat assistant", 1)
    full_page(page, shots / "report-default.png")
    for kind, profile in ONE_PER_KIND.items():
        use_profile(page, profile)
        expected = load_profile(profile)
        check_report_downloads(page, tmp_path / kind, expected.title, len(expected.stages))
        full_page(page, shots / f"report-{kind}.png")


def test_results_and_advisor_pages_with_the_shipped_data(app_url, page, tmp_path):
    shots = Path(os.environ.get("ADVISOR_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    page.goto(app_url)
    wait_text(page, "Which inference framework?", 120)
    # the shipped H200 runs settle it, and the page says whose they are (issue 23: provenance)
    wait_text(page, "settled by this project's published runs on your GPU type", 120)
    no_exceptions(page)
    full_page(page, shots / "advisor-default.png")
    page.get_by_role("link", name="Results").first.click()
    wait_text(page, "Reference measurements shipped with the advisor", 120)
    wait_text(page, "Published reference", 60)
    wait_text(page, "Measured by this project, not in your store", 60)
    no_exceptions(page)
    full_page(page, shots / "results-shipped.png")
