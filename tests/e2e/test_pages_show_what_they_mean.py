"""In headless Chromium with the shipped data: the Advisor page's charts draw real marks (the
Pareto chart's points spread over the plot, not a flat line at 0; the memory bar has its bars, its
axis and the red "available" line), no page shows Streamlit's deprecation warning, and a plan made
for an earlier profile cannot run on the Benchmark page until a new plan is made."""

from __future__ import annotations

import pytest

from tests.e2e.test_app_flow import MAIN, no_exceptions, wait_text

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PAGE_S = 180  # a cold page on a loaded 2-core machine (waits end as soon as the marker is up)

CHART_MARKS = """(selector) => {
  const svg = document.querySelector(selector + ' [data-testid=stVegaLiteChart] svg');
  if (!svg) return null;
  const ys = Array.from(svg.querySelectorAll('.mark-symbol path')).map(p => {
    const m = /translate\\(([-\\d.]+),\\s*([-\\d.]+)\\)/.exec(p.getAttribute('transform') || '');
    return m ? parseFloat(m[2]) : null;
  }).filter(y => y !== null);
  const rects = Array.from(svg.querySelectorAll('.mark-rect path'))
    .map(p => p.getBBox().width).filter(w => w > 0.5);
  return {
    height: svg.getBoundingClientRect().height,
    symbols_y: ys,
    lines: svg.querySelectorAll('.mark-line path').length,
    rects: rects.length,
    rules: svg.querySelectorAll('.mark-rule line').length,
    axis_labels: svg.querySelectorAll('.role-axis-label text').length,
  };
}"""


def chart_marks(page, key: str) -> dict:
    selector = f"[class*=st-key-{key}]"
    page.locator(f"{selector} [data-testid=stVegaLiteChart] svg").first.wait_for(
        timeout=PAGE_S * 1000
    )
    page.wait_for_function(
        "(s) => document.querySelectorAll(s + ' svg .role-axis-label text').length > 0",
        arg=selector,
        timeout=PAGE_S * 1000,
    )
    marks = page.evaluate(CHART_MARKS, selector)
    assert marks is not None, key
    return marks


def no_deprecation_warning(page) -> None:
    text = page.locator(MAIN).inner_text()
    assert "will be removed" not in text and "deprecated" not in text.lower(), text[:2000]


def test_advisor_charts_draw_marks_and_no_page_warns_of_deprecation(app_url, page):
    page.goto(app_url)
    wait_text(page, "Throughput per GPU vs speed per user", PAGE_S)
    pareto = chart_marks(page, "pareto_chart_s0")
    assert pareto["lines"] >= 4 and len(pareto["symbols_y"]) >= 8, pareto
    spread = max(pareto["symbols_y"]) - min(pareto["symbols_y"])
    assert pareto["height"] > 250 and spread > 0.3 * pareto["height"], pareto  # not a flat line
    memory = chart_marks(page, "memory_chart_s0")
    assert memory["rects"] >= 3 and memory["rules"] >= 1, memory  # bars and the red line
    assert memory["axis_labels"] >= 3 and memory["height"] >= 80, memory  # an axis, not clipped
    no_exceptions(page)
    no_deprecation_warning(page)
    for link, marker in (
        ("Benchmark", "Quick plan"),
        ("Results", "Published reference"),
        ("Report", "Markdown source"),
    ):
        page.get_by_role("link", name=link).first.click()
        wait_text(page, marker, PAGE_S)
        if link == "Report":
            page.locator("[class*=st-key-report_downloads_]").first.wait_for(timeout=PAGE_S * 1000)
        no_exceptions(page)
        no_deprecation_warning(page)


def test_a_plan_for_an_earlier_profile_cannot_run(app_url, page):
    page.goto(f"{app_url}/benchmark_page")
    page.get_by_role("button", name="Quick plan").click(timeout=PAGE_S * 1000)
    page.locator("[class*=st-key-plan_editor]").first.wait_for(timeout=PAGE_S * 1000)
    run = page.get_by_role("button", name="Run ", exact=False).filter(has_text="benchmark")
    run.first.wait_for(timeout=PAGE_S * 1000)
    assert page.locator(".st-key-stale_plan").count() == 0

    # Change the profile on the Advisor page (the prompt length), then come back.
    page.get_by_role("link", name="Advisor").first.click()
    shown = page.locator("[class*=st-key-advisor_profile_]").first
    shown.wait_for(timeout=PAGE_S * 1000)
    before = shown.get_attribute("class")
    field = page.get_by_role("spinbutton", name="Prompt length (tokens)")
    field.fill("96")
    field.press("Enter")
    page.wait_for_function(  # the page keys its advice by the profile: wait for the new key
        "(before) => { const e = document.querySelector('[class*=st-key-advisor_profile_]');"
        " return e && e.getAttribute('class') !== before; }",
        arg=before,
        timeout=PAGE_S * 1000,
    )
    page.get_by_role("link", name="Benchmark").first.click()
    stale = page.locator(".st-key-stale_plan")
    stale.wait_for(timeout=PAGE_S * 1000)
    assert "This plan was made for another profile — make a new plan" in stale.inner_text()
    run.first.wait_for(timeout=PAGE_S * 1000)
    assert run.first.is_disabled()
    no_exceptions(page)

    page.get_by_role("button", name="Quick plan").click()
    stale.wait_for(state="detached", timeout=PAGE_S * 1000)
    wait_text(page, "Estimated for the ticked runs", PAGE_S)  # drawn just before Run
    confirm = page.locator("[data-testid=stCheckbox]").filter(has_text="Run it anyway")
    if confirm.count():  # a busy machine makes a plan ask for confirmation first
        confirm.locator("label").first.click()
    page.wait_for_function(  # the button's text starts with its icon's name
        "() => Array.from(document.querySelectorAll('button')).some("
        "b => /Run \\d+ benchmark/.test(b.innerText) && !b.disabled)",
        timeout=PAGE_S * 1000,
    )
    no_exceptions(page)
