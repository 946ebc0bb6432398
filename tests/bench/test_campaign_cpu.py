"""The shipped example campaign (examples/campaigns/tiny-cpu.yaml) through real engines on CPU:
tiny-llama via `pytorch` and `onnxruntime`, and the PyTorch batcher's paired fidelity check."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from bench.cli import main
from bench.orchestrate.campaign import CampaignResult, load_plan
from bench.storage.store import ResultStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "campaigns" / "tiny-cpu.yaml"


@pytest.mark.slow
def test_example_campaign_runs_on_cpu_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = load_plan(EXAMPLE)
    out = tmp_path / "out"
    assert main(["campaign", str(EXAMPLE), "--out", str(out)]) == 0
    result = CampaignResult.model_validate_json((out / "campaign.json").read_text())
    assert [outcome.name for outcome in result.steps] == [step.name for step in plan.steps]
    assert all(outcome.status == "completed" for outcome in result.steps), [
        outcome.error for outcome in result.steps
    ]

    runs = [run for outcome in result.steps for run in outcome.runs]
    assert [run.config.backend for run in runs] == ["pytorch", "onnxruntime"]
    for run in runs:
        assert run.status.value == "COMPLETED" and run.validity.status.value == "VALID"
        summary = run.summary
        assert summary.successful >= 8 and summary.failed == 0
        assert summary.output_tokens == 16 * summary.successful  # outputs forced to length

    fidelity = result.steps[2].fidelity
    assert fidelity is not None and len(fidelity.pairs) == 4
    assert fidelity.ratio == pytest.approx(statistics.median(p.ratio for p in fidelity.pairs))
    assert fidelity.passed == (fidelity.ratio >= 0.90)

    printed = capsys.readouterr().out
    assert "3 step(s) run, 0 already done, 0 failed, 0 skipped" in printed

    # Again into the same folder: every step is already there; nothing runs twice.
    assert main(["campaign", str(EXAMPLE), "--out", str(out)]) == 0
    assert "0 step(s) run, 3 already done" in capsys.readouterr().out
    with ResultStore(out / "results.sqlite") as store:
        assert {run.run_id for run in store.list_runs()} == {run.run_id for run in runs}


def test_example_campaign_within_a_tiny_budget_skips_every_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["campaign", str(EXAMPLE), "--out", str(tmp_path), "--budget-s", "30"]) == 0
    printed = capsys.readouterr().out
    assert "0 step(s) run, 0 already done, 0 failed, 3 skipped" in printed
    assert "skipped (budget): pytorch tiny-llama c4, onnxruntime tiny-llama c4" in printed
