"""Report page: choose the profile and runs, preview the report, download Markdown/HTML/PDF/JSON.

The report is `advisor.report`'s: assembled by `assemble_report` and rendered by its formatters;
this page only chooses the inputs and hands the files over.
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import streamlit as st
import streamlit.components.v1 as components

from advisor.profile import WorkloadProfile
from bench.errors import UserError
from ui import state
from ui.components import empty_state, run_title

PREVIEW_HEIGHT_PX = 900


@st.cache_data(ttl=60, max_entries=16, show_spinner="Assembling the report…")
def build(profile_json: str, run_ids: tuple[str, ...], store_location: str | None) -> Any:
    """`advisor.report.build.assemble_report` for this profile and these runs."""
    from advisor.report.build import assemble_report

    profile = WorkloadProfile.model_validate_json(profile_json)
    with tempfile.TemporaryDirectory(prefix="advisor-report-") as folder:
        profile_path = Path(folder) / "profile.yaml"
        import yaml

        profile_path.write_text(
            yaml.safe_dump(profile.model_dump(mode="json"), sort_keys=False), encoding="utf-8"
        )
        return assemble_report(profile_path, run_ids=list(run_ids), store_location=store_location)


@st.cache_data(ttl=60, max_entries=16, show_spinner=False)
def chart_svgs(report_json: str) -> dict[str, str]:
    from advisor.report.charts import render_all_svg
    from advisor.report.model import Report

    return render_all_svg(Report.model_validate_json(report_json).charts)


def _report_and_svgs(report: Any) -> tuple[Any, dict[str, str]]:
    return report, chart_svgs(report.model_dump_json())


def _report(report_json: str) -> Any:
    from advisor.report.model import Report

    return Report.model_validate_json(report_json)


@st.cache_data(ttl=300, max_entries=8, show_spinner=False)
def html_text(report_json: str) -> str:
    from advisor.report.html import render_html

    return render_html(*_report_and_svgs(_report(report_json)))


@st.cache_data(ttl=300, max_entries=8, show_spinner=False)
def markdown_zip(report_json: str, stem: str) -> bytes:
    """The Markdown report and its SVG chart files (it links them by relative path), zipped."""
    from advisor.report import generate

    with tempfile.TemporaryDirectory(prefix="advisor-md-") as folder:
        generate(_report(report_json), folder, formats=["md"], stem=stem)
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(Path(folder).rglob("*")):
                if path.is_file():
                    archive.write(path, path.relative_to(folder).as_posix())
        return buffer.getvalue()


@st.cache_data(ttl=300, max_entries=8, show_spinner="Rendering the PDF…")
def pdf_bytes(report_json: str) -> bytes:
    from advisor.report.pdf import render_pdf

    return render_pdf(*_report_and_svgs(_report(report_json)))


def json_text(report_json: str) -> str:
    from advisor.report.json import render_json

    return render_json(_report(report_json))


def markdown_text(report: Any, stem: str) -> str:
    """The Markdown as in the zip: charts linked as `<stem>-charts/<id>.svg` beside it."""
    from advisor.report.markdown import render_markdown

    links = {chart.id: f"{stem}-charts/{chart.id}.svg" for chart in report.available_charts()}
    return render_markdown(report, links)


# --------------------------------------------------------------------------- page


def choose_profile() -> WorkloadProfile:
    profile = state.current_profile()
    st.markdown(
        f"**Profile:** {profile.title} — {len(profile.stages)} stage(s): "
        + ", ".join(f"{stage.name} ({stage.model or 'no model'})" for stage in profile.stages)
    )
    st.caption(
        "The profile from the Advisor page. To report on another one, upload it there "
        "(Advisor → Profile file)."
    )
    return profile


def choose_runs(profile: WorkloadProfile) -> list[str]:
    runs = state.stored_runs(state.store_location())
    finished = [run for run in runs if run.status.value not in ("QUEUED", "RUNNING")]
    if not finished:
        empty_state(
            "No finished runs in the store: the report will carry the tree's answer, the "
            "measurements shipped in data/reference (cited only where they match the profile) "
            "and the published reference.",
            "Run the plan on the **Benchmark** page to add your own measurements.",
        )
        return []
    from advisor.report.build import relevant_run_ids

    try:
        cited = relevant_run_ids(
            state.advise(profile.model_dump_json(), state.store_location()).to_json_dict()
        )
    except UserError:
        cited = []
    picked_on_results = st.session_state.get(state.SELECTED_RUNS_KEY) or []
    known = {run.run_id for run in finished}
    default = [run_id for run_id in dict.fromkeys([*picked_on_results, *cited]) if run_id in known]
    titles = {run.run_id: run_title(run) for run in finished}
    return st.multiselect(
        "Runs in the report",
        list(titles),
        default=default,
        format_func=lambda run_id: titles[run_id],
        help="Pre-selected: the runs ticked on the Results page and the runs the advisor's "
        "evidence cites. Every run listed here is reported with its environment and command.",
    )


def render() -> None:
    state.init_session()
    st.title("Report")
    st.caption(
        "A recommendation report for an architecture review: profile, decision path, evidence, "
        "charts, diagnostics, environment and the command that reproduces every run."
    )
    profile = choose_profile()
    run_ids = choose_runs(profile)
    try:
        report = build(profile.model_dump_json(), tuple(run_ids), state.store_location())
    except UserError as exc:
        st.error(str(exc))
        return
    stem = "advisor-report"
    # Downloads carry their data (a deferred download does not reach every browser); each
    # format is rendered once per report and cached.
    report_json = report.model_dump_json()
    st.subheader("Download")
    buttons = st.container(horizontal=True)
    buttons.download_button(
        "Markdown (.zip with charts)",
        markdown_zip(report_json, stem),
        file_name=f"{stem}-markdown.zip",
        mime="application/zip",
        icon=":material/download:",
    )
    buttons.download_button(
        "HTML (one file)",
        html_text(report_json),
        file_name=f"{stem}.html",
        mime="text/html",
        icon=":material/download:",
    )
    buttons.download_button(
        "PDF",
        pdf_bytes(report_json),
        file_name=f"{stem}.pdf",
        mime="application/pdf",
        icon=":material/download:",
    )
    buttons.download_button(
        "JSON (data)",
        json_text(report_json),
        file_name=f"{stem}.json",
        mime="application/json",
        icon=":material/download:",
    )
    st.subheader("Preview")
    html_tab, markdown_tab = st.tabs(["As HTML", "Markdown source"])
    with html_tab:
        components.html(html_text(report_json), height=PREVIEW_HEIGHT_PX, scrolling=True)
    with markdown_tab:
        st.code(markdown_text(report, stem), language="markdown")


# Streamlit runs a page file as __main__; importing it (tests) only defines its functions.
if __name__ == "__main__":
    render()
