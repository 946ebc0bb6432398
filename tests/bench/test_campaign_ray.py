"""`python -m bench campaign examples/campaigns/tiny-cpu.yaml --executor ray` with no cluster
running: the command starts a local Ray instance, fans the steps out, gathers one campaign
result and stops Ray again. Real engines (PyTorch, ONNX Runtime) on tiny-llama, CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "examples" / "campaigns" / "tiny-cpu.yaml"


def ray_processes() -> set[int]:
    names = ("raylet", "gcs_server")
    return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] in names}


def test_tiny_cpu_campaign_on_a_local_ray_instance(tmp_path: Path) -> None:
    before = ray_processes()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # no cluster to join
    out = tmp_path / "out"
    command = ["-m", "bench", "campaign", str(PLAN), "--executor", "ray", "--out", str(out)]
    completed = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "campaign.json").read_text())
    assert result["executor"] == "ray"
    assert [step["status"] for step in result["steps"]] == ["completed"] * 3
    runs = [run for step in result["steps"] for run in step["runs"]]
    assert {run["config"]["backend"] for run in runs} == {"pytorch", "onnxruntime"}
    for step in result["steps"]:
        assert step["executor"] == "ray"
    for run in runs:
        assert run["status"] == "COMPLETED", run.get("failure")
        executor = run["environment"]["executor"]
        assert executor["name"] == "ray" and len(executor["node_id"]) == 56
        assert Path(run["log_path"]).is_file(), "the step folder's files came back"
        assert run["log_path"].startswith(str(tmp_path / "out" / "steps"))
    from bench.storage.store import ResultStore

    with ResultStore(tmp_path / "out" / "results.sqlite") as store:
        stored = {run.run_id for run in store.list_runs()}
        assert stored == {run["run_id"] for run in runs}
        assert all(store.count_records(run["run_id"]) > 0 for run in runs)
    assert ray_processes() <= before, "the local Ray instance was stopped"
