"""The app server's CPU per page view, outside the browser: each step of the load test
(tests/e2e/test_app_under_load.py) run through Streamlit's AppTest in this process: open the app
(Advisor page, default profile), edit the form (another concurrency), the Report page for that
profile, the Benchmark page; SESSIONS times after one warm-up. Prints the process's CPU and wall
time per step; `--profile STEP` prints that step's cProfile (the page script's thread only).

AppTest adds its own work to every step (it scans installed packages for components), so these
figures are upper bounds of a page's own cost; compare them before and after a change on one
machine. Run from the repository root: `python benchmarks/app_page_cpu.py --sessions 3`.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import os
import pstats
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def process_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--profile", default=None, help='a step name, e.g. "report 1"')
    args = parser.parse_args()
    os.environ["ADVISOR_STORE"] = str(Path(tempfile.mkdtemp()) / "store.sqlite")
    os.chdir(REPO)  # st.navigation resolves the ui/*.py page paths from the app's folder
    from streamlit.testing.v1 import AppTest

    # The page script runs in AppTest's own thread: profile it there, around the page's run.
    page_module = importlib.import_module("streamlit.navigation.page")
    run_page = page_module.StreamlitPage.run
    profiler: dict[str, cProfile.Profile | None] = {"now": None}

    def profiled_run(self):
        current = profiler["now"]
        if current is not None:
            current.enable()
        try:
            return run_page(self)
        finally:
            if current is not None:
                current.disable()

    page_module.StreamlitPage.run = profiled_run

    def step(name: str, app) -> None:
        profiler["now"] = cProfile.Profile() if name == args.profile else None
        cpu, wall = process_cpu_s(), time.perf_counter()
        app.run(timeout=300)
        cpu, wall = process_cpu_s() - cpu, time.perf_counter() - wall
        print(f"{name:24} cpu {cpu:6.2f} s  wall {wall:6.2f} s  exception={bool(app.exception)}")
        if profiler["now"] is not None:
            pstats.Stats(profiler["now"]).sort_stats("cumulative").print_stats(40)

    step("warm-up (imports)", AppTest.from_file(str(REPO / "app.py"), default_timeout=300))
    for index in range(args.sessions):
        app = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
        step(f"open {index}", app)
        field = next(w for w in app.number_input if w.label == "Requests in flight at peak")
        field.set_value(10 + index)
        step(f"form edit {index}", app)
        app.switch_page("ui/report_page.py")
        step(f"report {index}", app)
        app.switch_page("ui/benchmark_page.py")
        step(f"benchmark {index}", app)


if __name__ == "__main__":
    main()
