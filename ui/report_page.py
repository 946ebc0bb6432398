"""Report page: choose the profile and runs, preview the report, download Markdown/HTML/PDF/JSON.

The report is `advisor.report`'s: built by `report_for` from the advisor's answer (asked once per
view, cached) and rendered by its formatters; this page only chooses the inputs and hands the
files over. The PDF is rendered only when asked for.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from typing import TYPE_CHECKING, Any

import streamlit as st

from advisor.report.model import Report
from advisor.workload.profile import WorkloadProfile
from bench.core.errors import UserError
from ui import state
from ui.components import empty_state, run_title

if TYPE_CHECKING:
    from advisor.decide.recommend import Report as AdvisorReport
    from bench.core.fingerprint import Fingerprint
    from ui.chart_renderer import ChartRenderer

PREVIEW_HEIGHT_PX = 900
DOWNLOAD_CLICK = "ignore"
"""A download does not rerun the page. A rerun starts with the download and can replace the file
the browser is still fetching (Streamlit's download_button docs warn of this race; 1 of 13
downloads was cancelled in a 20-session run of tests/e2e/test_app_under_load.py), and it
redraws the whole report for nothing."""
PDF_REQUEST_KEY = "report_pdf_for"
"""Session key: which profile + runs the user asked a PDF for (rendering one takes seconds)."""


@st.cache_data(ttl=60, max_entries=16, show_spinner="Assembling the report…")
def build(
    profile_json: str,
    run_ids: tuple[str, ...],
    store_location: str | None,
    _profile: WorkloadProfile,
) -> Report:
    """The report for this profile and these runs, from the advisor's answer the page already
    asked for (`state.advise` is cached: the advisor runs once per view, not once per use).
    The profile's JSON is the cache key; the report is built from the model."""
    from advisor.report.build import report_for

    answer = state.advise(_profile, store_location)
    return report_for(
        _profile,
        answer,
        state.get_store(),
        state.reference_files(),
        run_ids,
        interval_cache=state.interval_cache(),
        environment=machine_fingerprint(),
    )


@st.cache_data(ttl=60, max_entries=1, show_spinner=False)
def machine_fingerprint() -> Fingerprint:
    """This machine's fingerprint for the report's environment section, read at most once a
    minute: reading every library's version from package metadata was a tenth of a new
    report's time on a busy server, and the machine does not change from report to report."""
    from bench.run.environment import fingerprint

    return fingerprint()


@st.cache_resource(show_spinner=False)
def chart_renderer() -> ChartRenderer:
    """The processes that draw report charts, shared by every session (ui/chart_renderer.py:
    drawn in the server's own process, each chart held every other session's page)."""
    from ui.chart_renderer import ChartRenderer

    return ChartRenderer()


@st.cache_data(ttl=60, max_entries=16, show_spinner=False)
def chart_svgs(report_json: str) -> dict[str, str]:
    """`render_all_svg(report.charts)`, drawn by the chart processes; a chart drawn for an
    earlier report (most do not depend on the profile) is taken from them, not drawn again."""
    charts = Report.model_validate_json(report_json).charts
    return chart_renderer().svgs(
        {chart.id: chart.model_dump_json() for chart in charts if chart.available}
    )


def _report_and_svgs(report: Report) -> tuple[Report, dict[str, str]]:
    return report, chart_svgs(report.model_dump_json())


def _report(report_json: str) -> Report:
    return Report.model_validate_json(report_json)


@st.cache_data(ttl=300, max_entries=8, show_spinner=False)
def html_text(report_json: str) -> str:
    from advisor.report.html import render_html

    return render_html(*_report_and_svgs(_report(report_json)))


@st.cache_data(ttl=300, max_entries=8, show_spinner=False)
def markdown_zip(report_json: str, stem: str) -> bytes:
    """The Markdown report and its SVG chart files (it links them by relative path), zipped in
    memory: the files `advisor report --format md` writes (`write_markdown`), not written to
    disk first (a folder of synced files per report was most of a busy server's report time).
    The Markdown is the preview's (`markdown_text`, cached), not rendered a second time."""
    from advisor.report.markdown import chart_links

    svgs = chart_svgs(report_json)  # the charts the HTML preview drew (cached): not redrawn
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{stem}.md", markdown_text(report_json, stem))
        for chart_id, path in sorted(chart_links(svgs, stem).items()):
            archive.writestr(path, svgs[chart_id])
    return buffer.getvalue()


@st.cache_data(ttl=300, max_entries=8, show_spinner="Rendering the PDF…")
def pdf_bytes(report_json: str) -> bytes:
    from advisor.report.pdf import render_pdf

    return render_pdf(*_report_and_svgs(_report(report_json)))


def json_text(report_json: str) -> str:
    from advisor.report.json import render_json

    return render_json(_report(report_json))


@st.cache_data(ttl=300, max_entries=8, show_spinner=False)
def markdown_text(report_json: str, stem: str) -> str:
    """The Markdown as in the zip: charts linked as `<stem>-charts/<id>.svg` beside it."""
    from advisor.report.markdown import chart_links, render_markdown

    report = _report(report_json)
    links = chart_links((chart.id for chart in report.available_charts()), stem)
    return render_markdown(report, links)


# --------------------------------------------------------------------------- page


def profile_digest(profile_json: str) -> str:
    """What every built thing on this page is keyed by: the profile's content, not its title."""
    return hashlib.sha256(profile_json.encode()).hexdigest()[:16]


def choose_profile(digest: str) -> WorkloadProfile:
    profile = state.current_profile()
    with st.container(key=f"report_profile_{digest}"):  # the browser tests read the digest here
        st.markdown(
            f"**Profile:** {profile.title} — {len(profile.stages)} stage(s): "
            + ", ".join(f"{stage.name} ({stage.model or 'no model'})" for stage in profile.stages)
        )
    st.caption(
        "The profile from the Advisor page. To report on another one, upload it there "
        "(Advisor → Profile file)."
    )
    return profile


DOWNLOAD_LABELS = ("Markdown (.zip with charts)", "HTML (one file)", "Make the PDF", "JSON (data)")


def pending_downloads(slot: Any, status: Any, digest: str) -> None:
    """Until this profile's report is built the slot holds disabled buttons, so a button built
    for the previous profile (still on screen from the last run) can never be clicked."""
    with slot.container(horizontal=True, key=f"report_downloads_pending_{digest}"):
        for label in DOWNLOAD_LABELS:
            st.button(label, disabled=True, key=f"pending_{label}", icon=":material/hourglass_top:")
    status.caption("Preparing the report for this profile…")


def choose_runs(answer: AdvisorReport) -> list[str]:
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

    cited = relevant_run_ids(answer)
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


def pdf_button(container: Any, report_json: str, request: str, stem: str) -> None:
    """A PDF takes seconds to render: it is made when asked for, then offered for download."""
    if st.session_state.get(PDF_REQUEST_KEY) == request:
        container.download_button(
            "PDF",
            pdf_bytes(report_json),
            file_name=f"{stem}.pdf",
            mime="application/pdf",
            icon=":material/download:",
            key=f"pdf_{request}",
            on_click=DOWNLOAD_CLICK,
        )
    elif container.button("Make the PDF", icon=":material/picture_as_pdf:", key=f"make_{request}"):
        st.session_state[PDF_REQUEST_KEY] = request
        st.rerun()


def render() -> None:
    state.init_session()
    st.title("Report")
    st.caption(
        "A recommendation report for an architecture review: page 1 is the decision per stage "
        "(why, with who measured each fact, the runner-up, the risks, how to reproduce it); then "
        "the workload, the evidence and charts, capacity, and appendices with every run's "
        "command, the environment, the decision path and the diagnostics."
    )
    profile = state.current_profile()
    profile_json = profile.model_dump_json()
    digest = profile_digest(profile_json)
    choose_profile(digest)
    runs_box = st.container()
    st.subheader("Download")
    downloads = st.empty()
    status = st.empty()
    pending_downloads(downloads, status, digest)
    st.subheader("Preview")
    preview = st.empty()
    preview.caption("The preview appears when the report for this profile is built.")
    location = state.store_location()
    try:
        answer = state.advise(profile, location)
        with runs_box:
            run_ids = tuple(choose_runs(answer))
        report = build(profile_json, run_ids, location, profile)
    except UserError as exc:
        downloads.error(str(exc))
        return
    stem = "advisor-report"
    # Downloads carry their data (a deferred download does not reach every browser); each
    # format is rendered once per report and cached. Every key names the profile's digest and
    # the runs: a widget is never reused for another profile's report.
    report_json = report.model_dump_json()
    request = hashlib.sha256(f"{profile_json}|{run_ids}|{location}".encode()).hexdigest()[:16]
    markdown = markdown_zip(report_json, stem)
    html = html_text(report_json)
    data = json_text(report_json)
    buttons = downloads.container(horizontal=True, key=f"report_downloads_{digest}")
    buttons.download_button(
        "Markdown (.zip with charts)",
        markdown,
        file_name=f"{stem}-markdown.zip",
        mime="application/zip",
        icon=":material/download:",
        key=f"md_{request}",
        on_click=DOWNLOAD_CLICK,
    )
    buttons.download_button(
        "HTML (one file)",
        html,
        file_name=f"{stem}.html",
        mime="text/html",
        icon=":material/download:",
        key=f"html_{request}",
        on_click=DOWNLOAD_CLICK,
    )
    pdf_button(buttons, report_json, request, stem)
    buttons.download_button(
        "JSON (data)",
        data,
        file_name=f"{stem}.json",
        mime="application/json",
        icon=":material/download:",
        key=f"json_{request}",
        on_click=DOWNLOAD_CLICK,
    )
    status.empty()
    with preview.container():
        html_tab, markdown_tab = st.tabs(["As HTML", "Markdown source"])
        with html_tab:
            st.iframe(html, height=PREVIEW_HEIGHT_PX, alt=f"Report preview: {profile.title}")
        with markdown_tab:
            st.code(markdown_text(report_json, stem), language="markdown")


# Streamlit runs a page file as __main__; importing it (tests) only defines its functions.
if __name__ == "__main__":
    render()
