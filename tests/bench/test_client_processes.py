"""load.client_processes (bench/run/client_processes.py): the processes' shares together are the
one seeded schedule, other backends are refused, and a real run against the canned-SSE nginx
from two client processes merges every request into one run with per-process figures."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from bench.core.config import RunConfig
from bench.run.client_processes import share_count
from bench.run.load.strategies import StridedIntervals, make_intervals

ROOT = Path(__file__).resolve().parents[2]


def planned(intervals, count: int, first_offset_s: float = 0.0) -> np.ndarray:
    """The first `count` planned send times (s from the phase start), as the driver plans them."""
    times = [first_offset_s]
    for _ in range(count - 1):
        times.append(times[-1] + intervals.next_interval())
    return np.array(times)


@pytest.mark.parametrize("arrival", ["poisson", "constant"])
@pytest.mark.parametrize("processes", [2, 3])
def test_the_shares_together_are_the_one_schedule(arrival: str, processes: int) -> None:
    total = 3000
    whole = planned(make_intervals(arrival, 500.0, seed=7), total)
    for index in range(processes):
        share = StridedIntervals(make_intervals(arrival, 500.0, seed=7), processes, index)
        count = share_count(total, processes, index)
        times = planned(share, count, share.first_offset_s)
        np.testing.assert_allclose(times, whole[index::processes], rtol=0, atol=1e-9)
    assert sum(share_count(total, processes, i) for i in range(processes)) == total


def test_other_backends_are_refused() -> None:
    with pytest.raises(ValidationError, match="needs the openai backend"):
        RunConfig(
            backend="fake",
            model="tiny-llama",
            load={"pattern": "rate", "rate_rps": 10, "client_processes": 2},
        )
    config = RunConfig(
        backend="openai",
        model="tiny-llama",
        engine_args={"base_url": "http://127.0.0.1:1"},
        load={"pattern": "rate", "rate_rps": 10, "client_processes": 2},
    )
    assert config.load.client_processes == 2


@pytest.mark.slow
def test_two_client_processes_merge_into_one_run(tmp_path: Path) -> None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.skip("nginx is not installed (scripts/test.sh installs Debian's nginx)")
    spec = importlib.util.spec_from_file_location(
        "client_capacity", ROOT / "benchmarks" / "client_capacity.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        server = module.Nginx(nginx, tmp_path)
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"nginx could not start: {exc}")
    out = tmp_path / "run"
    rate, seconds = 300, 3
    try:
        # Poisson arrivals (the default), text prompts (the openai backend's default).
        command = [
            sys.executable, "-m", "bench", "run", "--backend", "openai", "--model", "tiny-llama",
            "--engine-arg", f"base_url={server.url}", "--engine-arg", "scrape_metrics=false",
            "--pattern", "rate", "--rate", str(rate), "--duration-s", str(seconds),
            "--prompt-tokens", "64", "--output-tokens", "16", "--out", str(out), "--no-store",
            "--option", "load.client_processes=2",
        ]  # fmt: skip
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    finally:
        server.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    measured = [r for r in records if not r["warmup"]]
    result = json.loads((out / "result.json").read_text())
    harness = result["pattern_report"]["harness"]
    processes = harness["processes"]
    # Every request sent by either process is in the run once, and none failed.
    assert len({r["id"] for r in measured}) == len(measured)
    assert [p["process"] for p in processes] == [0, 1]
    assert sum(p["sent"] for p in processes) == len(measured) == harness["timed_sends"]
    assert all(r["error"] is None for r in measured)
    # Each took its half of one Poisson schedule (arrival i to process i mod 2).
    assert abs(processes[0]["sent"] - processes[1]["sent"]) <= 1
    assert 0.8 * rate * seconds < len(measured) < 1.2 * rate * seconds
    for row in processes:
        assert row["achieved_rps"] > 0.4 * rate
        assert row["scheduling_lag_p99_ms"] is not None and row["cpu_s"] > 0
    assert harness["achieved_rps"] == pytest.approx(
        sum(p["achieved_rps"] for p in processes), rel=0.15
    )
    # The merged records keep the one schedule: planned sends in order, no gap or double.
    scheduled = sorted(r["scheduled_ns"] for r in measured)
    assert len(set(scheduled)) == len(scheduled)
