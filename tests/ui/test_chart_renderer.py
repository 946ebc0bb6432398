"""The report charts' drawing processes (ui/chart_renderer.py), with real worker processes and a
real report built from the shipped data: they draw what the server would draw itself, keep
what they drew, survive a killed worker, and leave no process behind."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from advisor.report.charts import render_all_svg
from ui.chart_renderer import ChartRenderer


@pytest.fixture(scope="module")
def charts():
    """The default profile's report charts, built from data/reference by the app's own path."""
    from advisor.decide.recommend import recommend
    from advisor.report.build import report_for
    from advisor.sizing.measured import DEFAULT_REFERENCE_DIR, read_reference_folder
    from ui.state import default_profile

    reference = read_reference_folder(DEFAULT_REFERENCE_DIR)  # the shipped data
    profile = default_profile()
    answer = recommend(profile, reference=reference)
    report = report_for(profile, answer, None, reference)
    available = [chart for chart in report.charts if chart.available]
    assert len(available) >= 3
    return available


def gone(pids: list[int], within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in pids):  # fmt: skip
            return True
        time.sleep(0.1)
    return False


def test_the_processes_draw_what_the_server_would_and_keep_it(charts):
    renderer = ChartRenderer(workers=2)
    try:
        texts = {chart.id: chart.model_dump_json() for chart in charts}
        drawn = renderer.svgs(texts)
        assert drawn == render_all_svg(charts)
        workers = renderer.worker_pids()
        assert workers and os.getpid() not in workers  # drawn elsewhere, not here
        assert renderer.fallbacks == 0
        # Drawn again from what was kept: no worker asked (the pool is gone and not remade).
        renderer.close()
        assert renderer.svgs(texts) == drawn and renderer.worker_pids() == []
    finally:
        renderer.close()
    assert gone(workers)


def test_a_killed_worker_is_replaced_and_the_chart_still_drawn(charts):
    renderer = ChartRenderer(workers=1)
    try:
        first, second = charts[0], charts[1]
        renderer.svgs({first.id: first.model_dump_json()})
        (worker,) = renderer.worker_pids()
        os.kill(worker, signal.SIGKILL)
        assert gone([worker])
        drawn = renderer.svgs({second.id: second.model_dump_json()})
        assert drawn == render_all_svg([second])
        assert renderer.worker_pids() and worker not in renderer.worker_pids()
    finally:
        renderer.close()


SERVER_STAND_IN = """
import sys, time
from advisor.report.model import Chart, Series
from ui.chart_renderer import ChartRenderer
if __name__ == "__main__":
    renderer = ChartRenderer(workers=2)
    chart = Chart(id="x", title="t", kind="line", x_label="x", y_label="y",
                  series=[Series(name="a", x=[1, 2], y=[1, 2])])
    renderer.svgs({"x": chart.model_dump_json()})
    print(" ".join(map(str, renderer.worker_pids())), flush=True)
    time.sleep(120)
"""


def test_the_workers_exit_when_the_server_is_killed_outright(tmp_path):
    """A process that holds a renderer (the app server's part, nothing else of it) is killed
    with SIGKILL: its chart workers, re-parented, see it and exit (before the watch they
    waited on their task pipe for ever)."""
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "server.py"
    script.write_text(SERVER_STAND_IN)
    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen([sys.executable, str(script)], cwd=root, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    try:
        workers = [int(pid) for pid in server.stdout.readline().split()]
        assert workers and all(psutil.pid_exists(pid) for pid in workers)
    finally:
        server.kill()
        server.wait(timeout=10)
    assert gone(workers, within_s=10)
