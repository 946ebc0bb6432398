"""A replay whose schedule no run could reach is refused up front by every command that reads a
replay load: `time_scale` past MAX_TIME_SCALE (the field's bound, read when any command parses
the load) and a trace whose scaled span passes the week no run may outlast (read with the trace,
by the pre-run check of `bench run`, a campaign's steps and `bench-plan`). Each is one line on
stderr and exit code 2, through the real CLIs in a subprocess. The runs use the `fake` backend
(a test double: timed fake tokens, no inference): nothing is meant to start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bench.core.config import MAX_DURATION_S, MAX_TIME_SCALE, ReplayLoad

REPO = Path(__file__).resolve().parents[2]


def write_trace(path: Path, *timestamps_ms: int) -> Path:
    rows = [{"timestamp": t, "input_length": 16, "output_length": 4} for t in timestamps_ms]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def assert_one_line_exit_2(done: subprocess.CompletedProcess[str], expected: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    [line] = done.stderr.strip().splitlines()
    assert expected in line


def test_the_bound_is_a_week_per_trace_millisecond():
    assert MAX_TIME_SCALE * 1 / 1000.0 == MAX_DURATION_S  # 1 ms of trace at the bound = a week
    ReplayLoad(trace="t.jsonl", time_scale=MAX_TIME_SCALE)  # the bound itself is allowed


@pytest.mark.parametrize(
    ("time_scale", "timestamps", "expected"),
    [
        ("1e300", (0, 1000), "load.time_scale: 1e+300 is over the limit of 604,800,000"),
        ("inf", (0, 1000), "load.time_scale"),
        # Within the field's bound, but this trace's 1 s becomes 11.6 days.
        ("1e6", (0, 1000), "rows span 1e+06 s at time_scale 1e+06, past the longest run"),
        # A later row 31 years on, at the trace's own pace.
        ("1", (0, 10**12), "rows span 1e+09 s at time_scale 1, past the longest run"),
    ],
)
def test_bench_run_refuses_a_schedule_no_run_reaches(tmp_path, time_scale, timestamps, expected):
    trace = write_trace(tmp_path / "t.jsonl", *timestamps)
    done = cli(
        "-m", "bench", "run", "--backend", "fake", "--model", "tiny-llama",
        "--pattern", "replay", "--option", f"load.trace={json.dumps(str(trace))}",
        "--option", f"load.time_scale={time_scale}",
        "--store", str(tmp_path / "results.sqlite"), "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert_one_line_exit_2(done, expected)
    assert not (tmp_path / "out").exists()  # refused before anything started


def test_a_replay_within_the_week_still_runs_cut_at_its_own_bound(tmp_path):
    """The bound is the week, not the run's max_duration_s: a trace past the run's own bound
    runs and is INVALID naming its unsent rows (tests/bench/test_traffic.py), as a plan
    estimates it."""
    trace = write_trace(tmp_path / "t.jsonl", 0, 1, 2, 3_000)
    done = cli(
        "-m", "bench", "run", "--backend", "fake", "--model", "tiny-llama",
        "--pattern", "replay", "--option", f"load.trace={json.dumps(str(trace))}",
        "--option", "load.max_duration_s=1", "--option", "load.warmup_requests=0",
        "--store", str(tmp_path / "results.sqlite"), "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "replay left 1 of 4 trace rows unsent" in done.stdout


@pytest.mark.parametrize(
    ("time_scale", "timestamps", "expected"),
    [
        (1e300, (0, 1000), "steps[1].config.load.time_scale: 1e+300 is over the limit"),
        (1e6, (0, 1000), "step 'replay': trace "),
    ],
)
def test_a_campaign_refuses_it_before_any_step_runs(tmp_path, time_scale, timestamps, expected):
    trace = write_trace(tmp_path / "t.jsonl", *timestamps)
    steps = [
        {
            "kind": "run",
            "name": name,
            "config": {
                "backend": "fake",
                "model": "tiny-llama",
                "load": {"pattern": "replay", "trace": str(trace), "time_scale": scale},
            },
        }
        for name, scale in (("first", 1.0), ("replay", time_scale))
    ]
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"name": "bounds", "description": "x", "steps": steps}))
    done = cli("-m", "bench", "campaign", str(plan), "--out", str(tmp_path / "out"))
    assert_one_line_exit_2(done, expected)
    assert not (tmp_path / "out").exists()  # not even the first step ran


def test_bench_plan_refuses_a_trace_no_run_reaches(tmp_path):
    trace = write_trace(tmp_path / "t.jsonl", 0, 10**12)
    done = cli("-m", "advisor", "bench-plan", "--model", "tiny-llama", "--trace-file", str(trace))
    assert_one_line_exit_2(done, "past the longest run allowed (604800 s)")
