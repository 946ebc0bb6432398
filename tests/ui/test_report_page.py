"""AppTest of the Report page: the report is assembled for the profile and offered in 4 formats."""

from __future__ import annotations

from tests.ui.conftest import stored_run

PAGE = "ui/report_page.py"


def test_report_page_offers_every_format_and_the_pdf_when_asked(app_test, store_path, monkeypatch):
    import advisor.decide.recommend

    calls = []
    real_recommend = advisor.decide.recommend.recommend

    def counted(*args, **kwargs):
        calls.append(1)
        return real_recommend(*args, **kwargs)

    monkeypatch.setattr(advisor.decide.recommend, "recommend", counted)
    run = stored_run(store_path)
    at = app_test(PAGE)
    at.session_state["selected_run_ids"] = [run.run_id]
    at.run(timeout=120)
    assert not at.exception
    assert len(calls) == 1  # one view, one advisor answer (the Advisor page's cached one)
    labels = [b.label for b in at.get("download_button")]
    for wanted in ("Markdown", "HTML", "JSON"):
        assert any(label.startswith(wanted) for label in labels), labels
    assert not any(label.startswith("PDF") for label in labels)  # not rendered until asked
    runs = at.multiselect[0]
    assert run.run_id in runs.value
    next(b for b in at.button if b.label == "Make the PDF").click()
    at.run(timeout=120)
    assert not at.exception
    labels = [b.label for b in at.get("download_button")]
    assert "PDF" in labels and not [b for b in at.button if b.label == "Make the PDF"]


def test_report_formatters_produce_the_files(store_path):
    import io
    import json
    import zipfile

    from ui.report_page import build, html_text, json_text, markdown_zip, pdf_bytes
    from ui.state import default_profile

    run = stored_run(store_path)
    profile = default_profile()
    report = build.__wrapped__(profile.model_dump_json(), (run.run_id,), str(store_path), profile)
    report_json = report.model_dump_json()
    assert "<html" in html_text(report_json).lower()
    data = json.loads(json_text(report_json))
    assert run.run_id in json.dumps(data)
    names = zipfile.ZipFile(io.BytesIO(markdown_zip(report_json, "r"))).namelist()
    assert "r.md" in names
    assert pdf_bytes(report_json).startswith(b"%PDF")


def test_the_pages_cached_charts_and_zip_equal_the_reports_own(store_path, tmp_path):
    """The page draws each chart once by its content (shared by sessions) and zips the Markdown
    with those drawings: the same files `advisor.report.generate` writes on its own."""
    import io
    import zipfile

    from advisor.report import generate
    from advisor.report.charts import render_all_svg
    from ui.report_page import build, chart_svgs, markdown_zip
    from ui.state import default_profile

    run = stored_run(store_path)
    profile = default_profile()
    report = build.__wrapped__(profile.model_dump_json(), (run.run_id,), str(store_path), profile)
    report_json = report.model_dump_json()
    assert chart_svgs(report_json) == render_all_svg(report.charts)
    generate(report, tmp_path / "own", ["md"], "r")
    own = {
        path.relative_to(tmp_path / "own").as_posix(): path.read_bytes()
        for path in (tmp_path / "own").rglob("*")
        if path.is_file()
    }
    archive = zipfile.ZipFile(io.BytesIO(markdown_zip(report_json, "r")))
    assert {name: archive.read(name) for name in archive.namelist()} == own
    assert any(name.endswith(".svg") for name in own)
