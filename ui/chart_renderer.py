"""The report's charts drawn in processes of their own, beside the app server.

vl-convert (the Vega-Lite renderer behind every report chart's SVG) holds Python's interpreter
lock while it draws, and so does altair while it builds the spec: in the app's one server
process every other session's page waited for each chart of each new report. With 20 sessions
at once (tests/e2e/test_app_under_load.py, sampled with `py-spy record --gil`) report charts
held the lock 2.4 of the server's 22.6 s, and the Report page was the slowest answer.

Here a small pool of worker processes (started with `spawn`: the server has threads, which
`fork` does not copy safely) draws them: the server sends a chart's JSON and waits without the
lock. A pool that cannot start or has broken (a worker killed) is replaced once; if that fails
too the chart is drawn in the server process, as before, so a report is never lost to it.
The workers are the server's children, in its process group; each watches the server's pid
from its start and exits once it is no longer its parent (a server killed outright, SIGKILL,
would otherwise leave them waiting on their task pipe: seen, before the watch).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from advisor.report.charts import render_svg_json

log = logging.getLogger(__name__)

WORKERS = max(1, min(2, os.cpu_count() or 1))
"""Worker processes: two where the host has two cores (the server itself is one thread of
Python at a time, so a second core is otherwise mostly idle), one on a single core."""
CHART_TIMEOUT_S = 120.0
"""Longest wait for one chart before it is drawn in the server process instead."""
PARENT_CHECK_S = 0.5
"""How often a worker looks at its parent pid."""
KEPT_CHARTS = 256
"""Drawn charts kept by content (least recently used out first): most of a report's charts do
not depend on the profile, and every session's report shows them."""


def exit_with_parent(parent_pid: int) -> None:
    """Each worker's first code (the pool's initializer): a thread that ends the worker once
    `parent_pid`, the server that started it, is no longer its parent (re-parented: the server
    is gone). The pid comes from the server, so a server gone before the watch starts is seen
    at the first look."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_S)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class ChartRenderer:
    """A pool of chart-drawing processes shared by every session of the app, and the charts it
    has drawn, by content."""

    def __init__(self, workers: int = WORKERS, kept: int = KEPT_CHARTS) -> None:
        self.workers = workers
        self.kept = kept
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._drawn: OrderedDict[str, str] = OrderedDict()
        self.fallbacks = 0
        """Charts drawn in the server process because the pool could not draw them."""

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=self.workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=exit_with_parent,
                    initargs=(os.getpid(),),
                )
            return self._pool

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def svgs(self, charts_json: dict[str, str]) -> dict[str, str]:
        """chart id -> SVG for each chart's JSON (`Chart.model_dump_json()`): those drawn before
        from what was kept, the others drawn in the pool in parallel (here, if it fails)."""
        with self._lock:
            found = {cid: self._drawn[text] for cid, text in charts_json.items()
                     if text in self._drawn}  # fmt: skip
            for cid in found:
                self._drawn.move_to_end(charts_json[cid])
        missing = {cid: text for cid, text in charts_json.items() if cid not in found}
        drawn = self._draw(missing) if missing else {}
        with self._lock:
            for cid, svg in drawn.items():
                self._drawn[missing[cid]] = svg
            while len(self._drawn) > self.kept:
                self._drawn.popitem(last=False)
        return {cid: found.get(cid) or drawn[cid] for cid in charts_json}

    def _draw(self, charts_json: dict[str, str]) -> dict[str, str]:
        for attempt in range(2):
            pool = self._executor()
            try:
                futures = {cid: pool.submit(render_svg_json, text)
                           for cid, text in charts_json.items()}  # fmt: skip
                return {cid: future.result(timeout=CHART_TIMEOUT_S)
                        for cid, future in futures.items()}  # fmt: skip
            except (BrokenProcessPool, OSError, RuntimeError) as error:
                log.warning("chart renderer failed (%s); %s", error,
                            "starting a new one" if attempt == 0 else "drawing here")  # fmt: skip
                self._discard(pool)
            except TimeoutError:
                log.warning("chart renderer took over %.0f s; drawing here", CHART_TIMEOUT_S)
                self._discard(pool)
                break
        self.fallbacks += len(charts_json)
        return {cid: render_svg_json(text) for cid, text in charts_json.items()}

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def worker_pids(self) -> list[int]:
        """The pool's live worker processes (for tests and diagnostics)."""
        pool = self._pool
        processes = getattr(pool, "_processes", None) or {}
        return [pid for pid, process in processes.items() if process.is_alive()]
