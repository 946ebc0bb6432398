"""A person's path through the app in headless Chromium: questionnaire -> path and advice ->
a real CPU benchmark (PyTorch on tiny-llama) with live progress -> charts -> report download.

Screenshots of every page at 1440 px are written to $ADVISOR_SCREENSHOTS (default: the test's
temporary folder); docs/screenshots/ holds the ones made this way for the README.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RUN_DURATION_S = 10
MAIN = "[data-testid=stMain]"


def full_page(page, path: Path) -> None:
    """Screenshot of the whole page: Streamlit scrolls inside its main block, so grow the
    viewport to the content's height first."""
    height = page.evaluate(
        "() => Math.max(...Array.from(document.querySelectorAll('section, div'))"
        ".map(e => e.scrollHeight))"
    )
    page.set_viewport_size({"width": 1440, "height": min(int(height) + 40, 8000)})
    page.wait_for_timeout(800)
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size({"width": 1440, "height": 900})


def no_exceptions(page) -> None:
    errors = page.locator("[data-testid=stException]").all_inner_texts()
    assert not errors, errors[0][:2000]


def wait_text(page, text: str, timeout_s: float) -> None:
    page.locator(MAIN).get_by_text(text).first.wait_for(timeout=timeout_s * 1000)


def profile_key(page) -> str:
    """The Advisor page's marker: a container keyed by the digest of the profile it took in."""
    shown = page.locator("[class*=st-key-advisor_profile_]").first
    shown.wait_for(timeout=120_000)
    return shown.get_attribute("class")


def edit_profile(page, action) -> None:
    """Do one edit on the Advisor form, then wait until the page has taken it in (its profile
    marker changes), however long a loaded machine takes."""
    before = profile_key(page)
    action()
    page.wait_for_function(
        "(before) => { const e = document.querySelector('[class*=st-key-advisor_profile_]');"
        " return e && e.getAttribute('class') !== before; }",
        arg=before,
        timeout=120_000,
    )


# Per Vega-Lite chart on the page: its axis titles, each line mark's drawn extent (px) and the
# number of visible point marks (circles, points; a line chart's hidden hover points are not
# counted), read from the SVG the browser drew.
CHART_MARKS = """() => Array.from(document.querySelectorAll(
    '[data-testid=stMain] [data-testid=stVegaLiteChart] svg')).map(svg => ({
  titles: Array.from(svg.querySelectorAll('.role-axis-title text')).map(t => t.textContent),
  // [width, height, rise]: rise is how far the line's highest point sits above the plot's
  // bottom edge (the y axis' zero), so a steady non-zero series (a flat line) counts as drawn
  // and a series of zeros does not.
  lines: Array.from(svg.querySelectorAll('.mark-line path')).map(p => {
    const box = p.getBBox();
    const frame = svg.querySelector('.role-frame path.background');
    const plotHeight = frame ? frame.getBBox().height : NaN;
    return [box.width, box.height, plotHeight - box.y]; }),
  points: Array.from(svg.querySelectorAll('.mark-symbol path')).filter(p =>
    parseFloat(getComputedStyle(p).opacity || '1') > 0
    && parseFloat(p.getAttribute('opacity') ?? '1') > 0
    && parseFloat(p.getAttribute('fill-opacity') ?? '1') > 0).length,
}))"""


def drawn_charts(page, ready: str, timeout_s: float = 60) -> list[dict]:
    """The page's charts once `ready` (a JS predicate over CHART_MARKS' list) holds; the
    assertion names what was drawn when it never does."""
    try:
        page.wait_for_function(f"() => ({ready})(({CHART_MARKS})())", timeout=timeout_s * 1000)
    except Exception:
        drawn = page.evaluate(CHART_MARKS)
        raise AssertionError(f"charts not drawn as expected: {drawn}") from None
    drawn = page.evaluate(CHART_MARKS)
    print(f"charts drawn: {drawn}")
    return drawn


def wait_idle(page, timeout_s: float = 120) -> None:
    """Streamlit's own marker (its e2e tests wait on it): the app's script run has ended, so
    the plan table is not redrawn under the next click."""
    page.locator("[data-testid=stApp][data-test-script-state=notRunning]").wait_for(
        state="attached", timeout=timeout_s * 1000
    )


def grid_box(editor) -> dict:
    """The plan table's canvas, scrolled into view: mouse clicks must land inside the viewport."""
    canvas = editor.locator("canvas[data-testid=data-grid-canvas]").first
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    viewport = canvas.page.viewport_size
    assert box["y"] >= 0 and box["y"] + box["height"] <= viewport["height"], (box, viewport)
    return box


def column_index(editor, header: str) -> int:
    """A plan-table column's position (1-based, as the grid's accessible table numbers it)."""
    cell = editor.locator("th[role=columnheader]").filter(
        has_text=re.compile(rf"^{re.escape(header)}$")
    )
    return int(cell.first.get_attribute("aria-colindex"))


# True once the focused cell editor has rendered `v`: its DOM value and the value React last
# rendered into it (the props React keeps on the element) both read `v`.
EDITOR_RENDERED = """(v) => {
  const e = document.activeElement;
  if (!e || !e.classList.contains('gdg-input') || e.value !== v) return false;
  const props = Object.keys(e).find((k) => k.startsWith('__reactProps$'));
  return props !== undefined && String(e[props].value) === v;
}"""

# Resolves once the browser has drawn two more frames and then run its queued tasks.
AFTER_NEXT_FRAMES = """() => new Promise((done) =>
  requestAnimationFrame(() => requestAnimationFrame(() => setTimeout(done, 0))))"""


def edit_cell(page, editor, backend_column: int, column: int, value: str) -> None:
    """Type `value` into the first plan row's cell at `column` and commit it, by keyboard as a
    person does. The edit is done when the grid shows the value (its accessible table is
    redrawn after the commit). Enter goes only once the editor has rendered the typed value
    (EDITOR_RENDERED, then AFTER_NEXT_FRAMES): on a busy machine an Enter pressed without these
    waits sometimes closed the editor with the old value. Should the grid still not take it, the
    edit is made again, at most three times, each retry printed."""
    cell = editor.locator(f"tr[aria-rowindex='2'] td[aria-colindex='{column}']")
    header_px, row_px = 36, 35
    for attempt in range(1, 4):
        old = cell.text_content().strip()
        if old == value:
            return
        wait_idle(page)
        grid = grid_box(editor)
        page.mouse.click(grid["x"] + 140, grid["y"] + header_px + row_px / 2)  # backend cell
        for at in range(backend_column, column + 1):
            if at > backend_column:
                page.keyboard.press("ArrowRight")
            editor.locator(
                f"tr[aria-rowindex='2'] td[aria-colindex='{at}'][aria-selected=true]"
            ).wait_for(state="attached", timeout=30_000)
        page.keyboard.press("Enter")
        cell_input = page.locator("input.gdg-input").first
        cell_input.wait_for(timeout=30_000)  # the cell editor is open ...
        assert cell_input.input_value() == old  # ... on the cell
        page.wait_for_function(  # ... and has the keyboard focus (typing earlier is lost)
            "() => document.activeElement"
            " && document.activeElement.classList.contains('gdg-input')",
            timeout=30_000,
        )
        page.keyboard.press("Control+a")
        page.keyboard.type(value)
        # Observed beside a CPU hog: an Enter pressed as soon as the input showed the typed value
        # sometimes closed the editor with the old one. Our reading, not confirmed in the grid's
        # source: the Enter was handled before React had rendered the typed keys. So wait until
        # the input's React props (the value React last rendered) read it too, ...
        page.wait_for_function(EDITOR_RENDERED, arg=value, timeout=30_000)
        # ... and two frames more, for effects React runs after a frame is drawn. The props wait
        # alone still needed a retry in 1 of 3 runs beside the hog; with both, 0 of 21.
        page.evaluate(AFTER_NEXT_FRAMES)
        page.keyboard.press("Enter")
        try:
            cell.filter(has_text=re.compile(rf"^{re.escape(value)}$")).wait_for(
                state="attached", timeout=20_000
            )
            return
        except Exception:
            print(f"edit attempt {attempt}: the grid closed its editor without {value!r}; again")
    raise AssertionError(f"the grid did not take {value!r} in three edits (it shows {old!r})")


def test_questionnaire_benchmark_and_report(app_url, page, tmp_path):
    shots = Path(os.environ.get("ADVISOR_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)

    # --- Advisor: answer the questionnaire, see the path and the recommendation.
    page.goto(app_url)
    wait_text(page, "Which inference framework?", 90)
    edit_profile(
        page,
        lambda: (
            page.locator("[data-testid=stRadio]")
            .filter(has_text="dynamic control flow")
            .get_by_text("Yes")
            .click()
        ),
    )

    def pick_tiny_llama() -> None:
        page.locator("[data-testid=stSelectbox]").filter(has_text="Model").first.click()
        # "tiny-llama — ..." exactly: the trained preset's option starts "tiny-llama-trained".
        page.get_by_role("option").filter(has_text=re.compile(r"^tiny-llama —")).click()

    edit_profile(page, pick_tiny_llama)
    for label, value in (
        ("Prompt length (tokens)", "32"),
        ("Output length (tokens)", "16"),
        ("Requests in flight at peak", "4"),
    ):
        field = page.get_by_role("spinbutton", name=label)

        def type_value(field=field, value=value) -> None:
            field.fill(value)
            field.press("Enter")

        edit_profile(page, type_value)
    wait_text(page, "How the tree decided", 60)
    main_text = page.locator(MAIN).inner_text()
    # the context-window check comes first (issue 23), then the article's first question
    assert "Does the model need dynamic control flow" in main_text
    assert page.locator("[data-testid=stGraphVizChart]").count() >= 1
    recommendation = page.locator("[data-testid=stAlertContentSuccess]").first.inner_text()
    assert "pytorch" in recommendation
    no_exceptions(page)
    full_page(page, shots / "advisor.png")

    # --- Benchmark: quick plan, keep only PyTorch, a short run, watch it finish.
    page.get_by_role("link", name="Benchmark").first.click()
    quick = page.get_by_role("button", name="Quick plan")
    quick.wait_for(timeout=60_000)
    quick.click()
    editor = page.locator("[class*=st-key-plan_editor]").first
    editor.wait_for(timeout=60_000)
    # The grid's accessible table holds the cells it has drawn: wait for the second row.
    editor.locator("td[role=gridcell]").filter(has_text="torch_compile").first.wait_for(
        state="attached", timeout=60_000
    )
    page.locator("[class*=st-key-plan_chosen_2_]").first.wait_for(timeout=60_000)
    # Delete the second row (torch_compile: minutes of compile on a CPU) via its row marker.
    # The notes above the table can push its rows below the fold, where a mouse click lands
    # on nothing: bring the table into view and measure it there.
    # Each key goes only after the grid has drawn what the last click or key did: Chromium runs
    # input before the grid's pending redraw, and a key handled before it acts on the old
    # selection or the old cell value (on a busy machine the Delete or the edit was lost).
    wait_idle(page)
    grid = grid_box(editor)
    header_px, row_px = 36, 35
    page.mouse.click(grid["x"] + 15, grid["y"] + header_px + row_px + row_px / 2)
    editor.locator("tr[aria-rowindex='3'][aria-selected=true]").wait_for(
        state="attached", timeout=30_000
    )
    page.keyboard.press("Delete")
    page.locator("[class*=st-key-plan_chosen_1_]").first.wait_for(timeout=60_000)
    editor.locator("td[role=gridcell]").filter(has_text="torch_compile").first.wait_for(
        state="detached", timeout=60_000
    )
    wait_idle(page)
    # Set the first row's duration: backend cell, right to the duration column, edit, type,
    # commit. The columns are found by their headers (the accessible table's aria-colindex), so
    # a column added to the plan table moves no edit onto another cell.
    backend_column = column_index(editor, "backend")
    duration_column = column_index(editor, "duration (s)")
    edit_cell(page, editor, backend_column, duration_column, str(RUN_DURATION_S))
    # The server has the edit once its marker names one run of RUN_DURATION_S seconds.
    try:
        page.locator(f".st-key-plan_chosen_1_{RUN_DURATION_S}").wait_for(timeout=60_000)
    except Exception:
        markers = page.evaluate(
            "() => Array.from(document.querySelectorAll('[class*=st-key-plan_chosen]'))"
            ".map(e => e.className)"
        )
        page.screenshot(path=str(tmp_path / "plan-edit.png"), full_page=True)
        raise AssertionError(f"the duration edit did not reach the server: {markers}") from None
    run = page.get_by_role("button", name="Run 1 benchmark")
    run.wait_for(timeout=30_000)
    no_exceptions(page)
    run.click()

    wait_text(page, "Run:", 120)  # the live progress bar of the running engine
    saw_progress = page.locator("[data-testid=stProgress]").count() > 0
    # The job's end reruns the whole page once; a read during that rerun sees half a page (on a
    # busy machine the finished tiles were missing from it). Read once the page's marker of the
    # finished job is there and its script has stopped.
    page.locator("[class*=st-key-job_done_]").first.wait_for(state="attached", timeout=240_000)
    wait_idle(page)
    text = page.locator(MAIN).inner_text()
    assert saw_progress
    assert "Output throughput" in text, text[-3000:]
    assert "Completed" in text
    assert f"load.duration_s={RUN_DURATION_S}" in text  # the edited duration reached the run
    # The job the page queued is the edited plan: the deleted row is not in it, the kept row
    # ran once with the edited duration (read from the store, not from the page's text).
    from bench.storage.store import ResultStore

    store = ResultStore(tmp_path / "store.sqlite")
    (job,) = store.list_jobs()
    job = store.get_job(job.job_id)
    assert [(c.backend, c.load.duration_s) for c in job.configs] == [("pytorch", RUN_DURATION_S)]
    (result,) = [store.get_run(run_id) for run_id in job.run_ids]
    assert result.status.value == "COMPLETED" and result.summary.successful > 0
    # The run's charts have marks: a throughput line spread over time and above zero (a steady
    # run draws it flat, so its height says nothing; CI saw 188 x 4.2 px) and a latency point
    # per measured request (TTFT and E2E each).
    drawn_charts(
        page,
        "charts => charts.some(c => c.titles.includes('output tok/s')"
        " && c.lines.some(([w, h, rise]) => w > 100 && rise > 5))"
        " && charts.some(c => c.titles.includes('latency (ms)') && c.points >= 2 * 5)",
    )
    no_exceptions(page)
    full_page(page, shots / "benchmark.png")

    # --- Results: the run is listed.
    page.get_by_role("link", name="Results").first.click()
    wait_text(page, "Throughput against latency", 60)
    results = page.locator("[class*=st-key-results_table]").first
    # The grid has drawn its rows once its accessible table holds the run's backend.
    results.locator("td[role=gridcell]").filter(has_text="pytorch").first.wait_for(
        state="attached", timeout=60_000
    )
    table = results.locator("canvas[data-testid=data-grid-canvas]")
    box = table.first.bounding_box()
    page.mouse.click(box["x"] + 15, box["y"] + 36 + 17)  # tick the run's row to compare it
    wait_text(page, "Side by side", 60)
    wait_text(page, "Latency distributions", 60)
    # The Pareto view has a point per completed run; the latency distribution a drawn line.
    drawn_charts(
        page,
        "charts => charts.some(c => c.titles.includes('output tok/s, higher is better')"
        " && c.points >= 1)"
        " && charts.some(c => c.titles.includes('% of requests')"
        " && c.lines.some(([w, h]) => w > 100 && h > 5))",
    )
    no_exceptions(page)
    full_page(page, shots / "results.png")

    # --- Report: download the JSON and the HTML report and check them.
    page.get_by_role("link", name="Report").first.click()
    json_button = page.get_by_role("button", name="JSON (data)")
    json_button.wait_for(timeout=120_000)
    with page.expect_download(timeout=120_000) as download_info:
        json_button.click()
    saved = tmp_path / "report.json"
    download_info.value.save_as(saved)
    report = json.loads(saved.read_text())
    assert report["runs"] and report["runs"][0]["framework"] == "pytorch"
    with page.expect_download(timeout=120_000) as download_info:
        page.get_by_role("button", name="HTML (one file)").click()
    html_file = tmp_path / "report.html"
    download_info.value.save_as(html_file)
    assert "pytorch" in html_file.read_text()
    page.get_by_role("button", name="Make the PDF").click()  # rendered only when asked
    pdf_button = page.get_by_role("button", name="PDF", exact=True)
    pdf_button.wait_for(timeout=240_000)
    with page.expect_download(timeout=120_000) as download_info:
        pdf_button.click()
    pdf_file = tmp_path / "report.pdf"
    download_info.value.save_as(pdf_file)
    assert pdf_file.read_bytes().startswith(b"%PDF")
    no_exceptions(page)
    full_page(page, shots / "report.png")
