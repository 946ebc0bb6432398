"""The one plan builder: `plan_for_stage` is what the CLI and the Benchmark page both plan with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.estimate import estimate_stage
from advisor.plan import bench_plan, plan_for_stage
from advisor.profile import load_profile
from advisor.tree import evaluate, load_tree

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PROFILES = sorted((ROOT / "examples" / "profiles").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLE_PROFILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("quick", [True, False])
def test_plan_for_stage_is_the_tree_walk_plus_bench_plan(path: Path, quick: bool) -> None:
    tree = load_tree()
    for stage in load_profile(path).stages:
        if stage.model is None:
            continue
        plan = plan_for_stage(stage, quick=quick, tree=tree)
        decision = evaluate(tree, stage, estimate_stage(stage))
        assert plan.decision == decision
        assert plan.configs == bench_plan(stage, decision, quick=quick)
        assert plan.not_benchmarked == [
            c.framework for c in decision.candidates if not c.benchmarked
        ]


def test_cli_bench_plan_prints_plan_for_stage(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "absent.sqlite"))
    path = ROOT / "examples" / "profiles" / "ecommerce_two_stage.yaml"
    result = CliRunner().invoke(app, ["bench-plan", "--profile", str(path), "--quick", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)["stages"]
    expected = [plan_for_stage(s, quick=True) for s in load_profile(path).stages]
    assert [s["stage"] for s in printed] == [p.stage for p in expected]
    for shown, plan in zip(printed, expected, strict=True):
        assert shown["configs"] == [c.model_dump(mode="json") for c in plan.configs]


def test_benchmark_page_plans_with_plan_for_stage() -> None:
    from ui.benchmark_page import plan_for

    stage = load_profile(ROOT / "examples" / "profiles" / "chat_7b_h200.yaml").primary
    assert plan_for(stage, quick=True) == plan_for_stage(stage, quick=True).configs
