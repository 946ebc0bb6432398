"""A new user's first benchmark on a machine without a GPU, in headless Chromium: the DEFAULT
profile (a 7B model) -> Benchmark -> Quick plan -> Run, untouched. The plan must propose the
CPU-sized model of the same family, say the figures are not GPU figures, show each run's
estimated time and disk use before Run, and finish in minutes with results in the store.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

MAIN = "[data-testid=stMain]"
FINISH_WITHIN_S = 540


def no_exceptions(page) -> None:
    errors = page.locator("[data-testid=stException]").all_inner_texts()
    assert not errors, errors[0][:2000]


def test_default_profile_quick_plan_on_the_cpu_finishes_with_results(app_url, page, tmp_path):
    from bench.run.environment import gpu_facts

    if gpu_facts().gpu_available:
        pytest.skip("this flow is the machine-without-a-GPU one")
    shots = Path(os.environ.get("ADVISOR_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    from ui.state import default_profile

    profile_model = default_profile().primary.model
    assert profile_model != "tiny-llama"

    page.goto(f"{app_url}/benchmark_page")
    quick = page.get_by_role("button", name="Quick plan")
    quick.wait_for(timeout=90_000)
    quick.click()
    page.locator("[class*=st-key-plan_editor]").first.wait_for(timeout=60_000)
    main = page.locator(MAIN)
    main.get_by_text("CPU-sized model of the same family").first.wait_for(timeout=30_000)
    # The cost table is drawn after the plan table: wait for it before reading the page.
    main.get_by_text("Estimated for the ticked runs").first.wait_for(timeout=60_000)
    page.locator("[class*=st-key-plan_chosen_2_]").first.wait_for(timeout=60_000)  # two ticked
    text = main.inner_text()
    assert f"instead of {profile_model}" in text and "not GPU figures" in text
    assert "Estimated for the ticked runs" in text and "of new disk" in text
    if "Run it anyway" in text:  # only when other work makes this machine several times slower
        assert "busy with other work" in text
        page.locator("[data-testid=stCheckbox]").filter(has_text="Run it anyway").locator(
            "label"
        ).first.click()
    run = page.get_by_role("button", name="Run 2 benchmarks")
    run.wait_for(timeout=30_000)
    page.wait_for_function(  # enabled once the page has taken the confirmation in
        "() => Array.from(document.querySelectorAll('button')).some("
        "b => /Run 2 benchmarks/.test(b.innerText) && !b.disabled)",
        timeout=60_000,
    )
    no_exceptions(page)
    page.screenshot(path=str(shots / "cpu-quick-plan.png"), full_page=True)
    started = time.monotonic()
    run.click()

    from bench.storage.store import ResultStore

    store = ResultStore(tmp_path / "store.sqlite")
    job = None
    while time.monotonic() - started < FINISH_WITHIN_S:
        jobs = store.list_jobs(limit=1)
        job = store.get_job(jobs[0].job_id) if jobs else None
        if job is not None and job.finished:
            break
        page.wait_for_timeout(3000)
    elapsed_s = time.monotonic() - started
    assert job is not None and job.finished, f"job not finished after {elapsed_s:.0f} s"
    print(f"CPU quick plan of the default profile: job {job.status.value} in {elapsed_s:.0f} s")
    runs = [store.get_run(run_id) for run_id in job.run_ids]
    assert [r.config.backend for r in runs] == ["vllm", "pytorch"]
    for result in runs:
        print(f"  {result.config.backend}: {result.status.value}, {result.timings}")
        assert result.status.value == "COMPLETED", (result.config.backend, result.failure)
        assert result.config.model == "tiny-llama" and result.summary.successful > 0
        # The CPU quick plan is sized to count: its window runs on to its request minimum.
        assert result.validity.status.value == "VALID", result.validity.reasons
    main.get_by_text("Output throughput").first.wait_for(timeout=60_000)  # the page polls
    no_exceptions(page)
    page.screenshot(path=str(shots / "cpu-quick-plan-done.png"), full_page=True)
