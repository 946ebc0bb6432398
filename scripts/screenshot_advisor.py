"""Regenerate docs/img/advisor.png, the README's picture of the Advisor page as the app starts.

Starts `streamlit run app.py` on a free 127.0.0.1 port with an empty temporary store, opens it
in headless Chromium (/usr/bin/chromium, through playwright), waits for the advice and the
memory panel of the default profile, and saves the part of the page from "Advice" down.
Usage: python scripts/screenshot_advisor.py [--out docs/img/advisor.png]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
WIDTH_PX = 1440
CLIP_WIDTH_PX = 1140
CLIP_HEIGHT_PX = 1500
MEMORY_PANEL_PX = 330
"""From the memory figures' label down past the memory bar and its caption."""
START_TIMEOUT_S = 90
PAGE_TIMEOUT_MS = 180_000


def shoot(url: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": WIDTH_PX, "height": 900})
        page.goto(url)
        main = page.locator("[data-testid=stMain]")
        main.get_by_text("How the tree decided").first.wait_for(timeout=PAGE_TIMEOUT_MS)
        main.get_by_text("Needed / available").first.wait_for(timeout=PAGE_TIMEOUT_MS)
        # Streamlit scrolls inside its main block: grow the viewport to the content first.
        height = page.evaluate(
            "() => Math.max(...Array.from(document.querySelectorAll('section, div'))"
            ".map(e => e.scrollHeight))"
        )
        page.set_viewport_size({"width": WIDTH_PX, "height": min(int(height) + 40, 12000)})
        page.wait_for_timeout(2000)
        advice = main.get_by_role("heading", name="Advice").first.bounding_box()
        if advice is None:
            raise SystemExit("error: the Advisor page shows no 'Advice' heading")
        memory = main.get_by_text("Needed / available").first.bounding_box()
        top = max(advice["y"] - 40, 0)
        # Down to the memory bar and its caption, below the "Needed / available" figures.
        bottom = memory["y"] + MEMORY_PANEL_PX if memory else top + CLIP_HEIGHT_PX
        clip = {
            "x": max(advice["x"] - 40, 0),
            "y": top,
            "width": CLIP_WIDTH_PX,
            "height": bottom - top,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out), clip=clip)
        browser.close()


def stop_job_runner(store: str) -> None:
    """The job runner the app may have started for this temporary store (its own session;
    it would exit by itself when idle)."""
    sys.path.insert(0, str(REPO))
    from bench.orchestrate.jobs import runner_pid

    pid = runner_pid(store)
    if pid and pid > 0:
        with contextlib.suppress(ProcessLookupError):  # it may have exited by itself
            os.killpg(os.getpgid(pid), signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "advisor.png")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        raise SystemExit("error: Chromium is not at /usr/bin/chromium (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="advisor-shot-") as folder:
        sys.path.insert(0, str(REPO))
        from ui.app_command import free_port, streamlit_command, wait_until_serving

        log = Path(folder) / "streamlit.log"
        port = free_port()
        env = {**os.environ, "ADVISOR_STORE": str(Path(folder) / "store.sqlite")}
        with log.open("wb") as handle:
            process = subprocess.Popen(
                streamlit_command(port),
                cwd=REPO,
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                url = f"http://127.0.0.1:{port}"
                if not wait_until_serving(url, process, START_TIMEOUT_S):
                    raise SystemExit(f"error: streamlit did not start:\n{log.read_text()[-3000:]}")
                shoot(url, args.out)
            finally:
                # Only the group this script started: the app and the job runner it spawned.
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGTERM)
                    try:
                        process.wait(timeout=15)
                    except subprocess.TimeoutExpired:
                        os.killpg(process.pid, signal.SIGKILL)
                stop_job_runner(env["ADVISOR_STORE"])
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
