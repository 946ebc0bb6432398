"""The campaign's `quality` step: validated before the first step runs, then `python -m bench
quality` into the step's folder, its QualityResult in the outcome, resumed like any step.

The real run scores the tiny-llama-trained preset on the CPU on the first items of the shipped
evaluation file (data/reference/quality/cpu_tiny-llama-trained/choices.jsonl)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bench.cli import main
from bench.core.errors import UserError
from bench.core.quality import load_quality_result
from bench.orchestrate.campaign import (
    CampaignPlan,
    CampaignResult,
    QualityStep,
    check_steps,
    load_plan,
    outcome_line,
    step_resources,
)
from bench.orchestrate.rehearsal import rehearsal_plan

SHIPPED = Path(__file__).resolve().parents[2] / "data" / "reference" / "quality"
CHOICES = SHIPPED / "cpu_tiny-llama-trained" / "choices.jsonl"


def quality_step(name: str = "quality", **extra) -> dict:
    return {
        "kind": "quality",
        "name": name,
        "model": "tiny-llama-trained",
        "precisions": ["fp32", "int8"],
        "labelled": "choices.jsonl",
        "bootstrap": 100,
        **extra,
    }


def write_plan(folder: Path, steps: list[dict], items: int = 12) -> Path:
    lines = CHOICES.read_text().splitlines()[:items]
    (folder / "choices.jsonl").write_text("\n".join(lines) + "\n")
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump({"name": "q", "steps": steps}, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ({"precisions": ["fp4"]}, "steps[0].precisions"),
        ({"precisions": []}, "steps[0].precisions"),
        ({"precisions": ["bf16", "bf16"]}, "a precision is given twice"),
        ({"labelled": None}, "give text or labelled"),
        ({"engine": "tgi"}, "steps[0].engine"),
        ({"endpoints": {"bf16": "http://h/v1"}}, "endpoints are for engine openai"),
        ({"bootstrap": 10}, "steps[0].bootstrap"),
        ({"window": 1}, "steps[0].window"),
        ({"labelled": "absent.jsonl"}, "absent.jsonl"),
        ({"text": "plan.yaml", "labelled": "../choices.jsonl"}, "choices.jsonl"),
        ({"model": "no-such-preset"}, "no-such-preset"),
    ],
)
def test_a_bad_quality_step_is_one_line_before_any_step_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict, needle: str
) -> None:
    plan = write_plan(tmp_path, [quality_step(**extra)])
    code = main(["campaign", str(plan), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and needle in err
    # one message line (the progress display, started once the plan parsed, leaves a blank one)
    assert len([line for line in err.splitlines() if line.strip()]) == 1
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing started


def test_a_bad_evaluation_file_is_named_with_its_step(tmp_path: Path) -> None:
    plan_file = write_plan(tmp_path, [quality_step("eval")])
    (tmp_path / "choices.jsonl").write_text('{"prompt": "def"}\n')
    with pytest.raises(UserError, match=r"step 'eval': labelled file .* line 1: no answer"):
        check_steps(load_plan(plan_file), plan_dir=tmp_path)
    # a step already done (skipped) is not read again
    check_steps(load_plan(plan_file), skip={"eval"}, plan_dir=tmp_path)


def test_quality_step_command_resources_and_rehearsal(tmp_path: Path) -> None:
    plan = CampaignPlan.model_validate(
        {
            "name": "q",
            "steps": [
                quality_step("local", tokenizer="tok"),
                quality_step(
                    "served",
                    engine="openai",
                    precisions=["bf16", "fp8"],
                    endpoints={"bf16": "http://a/v1", "fp8": "http://b/v1"},
                    bootstrap=1000,
                ),
            ],
        }
    )
    local, served = plan.steps
    assert isinstance(local, QualityStep) and isinstance(served, QualityStep)
    command = local.command(tmp_path, tmp_path / "out")
    assert command[1:4] == ["-m", "bench", "quality"]
    assert command[command.index("--labelled") + 1] == str(tmp_path / "choices.jsonl")
    assert command[command.index("--tokenizer") + 1] == str(tmp_path / "tok")
    assert [command[i + 1] for i, a in enumerate(command) if a == "--precision"] == [
        "fp32",
        "int8",
    ]
    assert command[-2:] == ["--out", str(tmp_path / "out")]
    endpoints = served.command(tmp_path, tmp_path)
    assert "bf16=http://a/v1" in endpoints and "fp8=http://b/v1" in endpoints
    assert [step_resources(step).gpus for step in plan.steps] == [1, 0]
    rehearsed = rehearsal_plan(plan).steps[1]
    assert isinstance(rehearsed, QualityStep)
    assert rehearsed.name == "served" and rehearsed.bootstrap == 100
    assert "bootstrap 1000 -> 100 draws" in rehearsal_plan(plan).description


@pytest.mark.slow
def test_quality_step_runs_bench_quality_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = write_plan(tmp_path, [quality_step("eval", precisions=["fp32", "int8", "fp8-kv"])])
    out = tmp_path / "out"
    assert main(["campaign", str(plan), "--out", str(out)]) == 0
    result = CampaignResult.model_validate_json((out / "campaign.json").read_text())
    (outcome,) = result.steps
    assert outcome.status == "completed", outcome.error
    written = load_quality_result(str(out / "steps" / "eval" / "quality.json"))
    assert outcome.quality == written
    fp32, int8, fp8_kv = written.precisions
    assert fp32.status == "measured" and fp32.items == 12 and fp32.accuracy is not None
    assert int8.status == "measured" and int8.deltas  # compared with the fp32 baseline
    assert fp8_kv.status == "not run" and fp8_kv.reason  # PyTorch has no FP8 KV cache
    assert written.command is not None and "--labelled" in written.command
    assert "fp8-kv not run" in outcome_line(outcome)
    capsys.readouterr()
    assert main(["campaign", str(plan), "--out", str(out)]) == 0  # resumed, not run again
    again = CampaignResult.model_validate_json((out / "campaign.json").read_text())
    assert again.resumed == ["eval"] and again.steps[0].quality == written
