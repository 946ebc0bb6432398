"""benchmarks/export_reference.py on a real campaign folder (fake-backend runs: a labelled test
double, since what is tested is the export of the folder layout, not an engine)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from bench.core.schema import RunResult
from bench.orchestrate.campaign import load_plan, run_campaign
from bench.orchestrate.executor_registry import LocalExecutor
from tests.bench.test_campaign import fake_step

ROOT = Path(__file__).resolve().parents[2]


def test_export_reads_a_campaign_folder(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(
        yaml.safe_dump({"name": "export", "steps": [fake_step("one"), fake_step("two")]})
    )
    campaign_dir = tmp_path / "c1"
    result = run_campaign(load_plan(plan_file), campaign_dir, LocalExecutor(), plan_file=plan_file)
    out, raw = tmp_path / "export_runs.json", tmp_path / "raw"
    done = subprocess.run(
        [sys.executable, "benchmarks/export_reference.py", str(campaign_dir), "--out", str(out),
         "--raw-dir", str(raw)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    exported = json.loads(out.read_text())
    runs = [RunResult.model_validate(run) for run in exported["runs"]]
    assert sorted(run.run_id for run in runs) == sorted(
        outcome.runs[0].run_id for outcome in result.steps
    )
    assert (raw / "campaign-c1.json").read_text() == (campaign_dir / "campaign.json").read_text()
    assert (raw / "plan-c1.yaml").read_bytes() == plan_file.read_bytes()
    with tarfile.open(raw / "steps-c1.tgz") as archive:
        names = archive.getnames()
    assert "steps/one/outcome.json" in names and "steps/two/runs/two/records.jsonl" in names


def test_the_export_recounts_the_shipped_capacity_search_from_its_records(tmp_path: Path) -> None:
    """The shipped FP8 capacity search's records (its raw steps archive) give the shipped
    counts: 272 requests cancelled by the three ended-early probes, none failed. Results stored
    before the summary counted cancellations apart had them among the failures: the export's
    recount is what moved them, and only the counts."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from export_reference import recount_requests

    raw = ROOT / "data/reference/h200_llama2-7b_capacity_chat_slo"
    with tarfile.open(raw / "steps-cap-fp8.tgz") as archive:
        archive.extractall(tmp_path, filter="data")
    (result_path,) = tmp_path.glob("steps/*/runs/*/result.json")
    stored = RunResult.model_validate_json(result_path.read_text())
    assert (stored.summary.failed, stored.summary.cancelled) == (272, 0)  # the old counting
    recount_requests(stored, result_path.parent / "records.jsonl")
    shipped = {
        run["run_id"]: RunResult.model_validate(run)
        for run in json.loads((ROOT / f"{raw}_runs.json").read_text())["runs"]
    }[stored.run_id]
    assert stored.summary == shipped.summary
    assert [phase.summary for phase in stored.phases] == [p.summary for p in shipped.phases]
    assert [p.summary.cancelled for p in stored.phases if p.summary.cancelled] == [177, 76, 19]
