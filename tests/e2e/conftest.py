"""Browser-test fixtures: the app on a free 127.0.0.1 port with a temporary store, and Chromium.

The app runs as `streamlit run app.py` in its own process group; the job runner it starts for
the store is stopped after the test as well (it would otherwise exit by itself when idle).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ui.app_command import free_port, streamlit_command, wait_until_serving

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
DESKTOP = {"width": 1440, "height": 900}


LOG_TAIL_LINES = 60


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed browser test shows the tail of the app's and the job runner's logs (the test's
    temporary folder), so a failure on a CI machine can be read without the machine."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed or "app_url" not in item.funcargs:
        return
    folder = item.funcargs.get("tmp_path")
    for log in sorted(Path(folder).rglob("*.log")) if folder else []:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        report.sections.append(
            (f"{log.name} (last {LOG_TAIL_LINES} lines)", "\n".join(lines[-LOG_TAIL_LINES:]))
        )


def _stop_group(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


@pytest.fixture
def app_url(tmp_path: Path) -> Iterator[str]:
    store = tmp_path / "store.sqlite"
    port = free_port()
    env = {**os.environ, "ADVISOR_STORE": str(store)}
    log = (tmp_path / "streamlit.log").open("wb")
    process = subprocess.Popen(
        streamlit_command(port),
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_until_serving(url, process, 60):
            raise RuntimeError(
                f"streamlit did not start: {(tmp_path / 'streamlit.log').read_text()}"
            )
        yield url
    finally:
        _stop_group(process)
        log.close()
        from bench.orchestrate.jobs import runner_pid

        pid = runner_pid(str(store))
        if pid and pid > 0:
            os.killpg(os.getpgid(pid), signal.SIGTERM)


@pytest.fixture
def page():
    if not CHROMIUM.exists():
        pytest.skip("Chromium is not installed at /usr/bin/chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        context = browser.new_context(viewport=DESKTOP, accept_downloads=True)
        try:
            yield context.new_page()
        finally:
            context.close()
            browser.close()
