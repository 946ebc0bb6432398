"""Campaigns: plan validation, bad plan files, resuming, the budget and the executor seam.

The run steps here use the `fake` backend (a labelled test double: timed tokens, no inference)
because what is tested is the campaign loop, not an engine; tests/bench/test_campaign_cpu.py
runs the shipped example plan through real engines.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bench.cli import main
from bench.core.errors import UserError
from bench.orchestrate.campaign import (
    CampaignPlan,
    CampaignResult,
    RunStep,
    StepContext,
    advisor_plan_configs,
    load_plan,
    run_campaign,
    step_resources,
)
from bench.orchestrate.executor_registry import LocalExecutor, get_executor, register_executor
from bench.orchestrate.executors import StepJob, StepJobResult
from bench.storage.store import ResultStore

ROOT = Path(__file__).resolve().parents[2]


def fake_step(name: str, **extra) -> dict:
    return {
        "kind": "run",
        "name": name,
        "config": {
            "backend": "fake",
            "model": "tiny-llama",
            "precision": {"dtype": "float32"},
            "device": "cpu",
            "engine_args": {"ttft_s": 0.002, "itl_s": 0.0005},
            "workload": {
                "kind": "generate",
                "prompt_tokens": {"mean": 16},
                "output_tokens": {"mean": 8},
            },
            "load": {"pattern": "concurrency", "concurrency": 2, "duration_s": 0.5},
            "validity": {"min_duration_s": 0.1, "min_requests": 2},
            "label": name,
        },
        **extra,
    }


def write_plan(tmp_path: Path, steps: list[dict], name: str = "test plan") -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump({"name": name, "steps": steps}, sort_keys=False))
    return path


# --------------------------------------------------------------------------- bad plan files


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "plan.yaml does not exist"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00binary", "not UTF-8 text"),
        (b"name: x\nsteps: [unclosed", "not valid YAML"),
        (b"- just\n- a list\n", "expected a mapping"),
        (b"name: x\nstep: []\n", "step: unknown field; allowed: name, description"),
        (
            b"name: x\nsteps:\n- kind: run\n  name: a\n  config: {backend: pytorch, model: m, "
            b"lod: {}}\n",
            "steps[0].config.lod: unknown field; allowed: backend, model",
        ),
        (b"name: x\nsteps:\n- kind: walk\n  name: a\n", "steps[0]"),
        (b"name: x\nsteps: []\n", "steps: List should have at least 1 item"),
    ],
)
def test_bad_plan_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, expected: str
) -> None:
    plan = tmp_path / "plan.yaml"
    if content is not None:
        plan.write_bytes(content)
    code = main(["campaign", str(plan), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2
    assert expected in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing is started for a bad plan


def test_duplicate_step_folders_are_refused(tmp_path: Path) -> None:
    plan = write_plan(tmp_path, [fake_step("a b"), fake_step("a/b")])
    with pytest.raises(UserError, match="'a b' and 'a/b' are not distinct"):
        load_plan(plan)


def test_unknown_executor_lists_the_known_ones() -> None:
    with pytest.raises(UserError, match="unknown executor 'cluster'; known: local"):
        get_executor("cluster")


# --------------------------------------------------------------------------- resources


def test_step_resources_follow_device_and_parallelism() -> None:
    plan = CampaignPlan.model_validate(
        {
            "name": "r",
            "steps": [
                fake_step("cpu run"),
                {**fake_step("gpu run"), "config": {**fake_step("x")["config"], "device": "cuda"}},
                {
                    "kind": "fidelity",
                    "name": "vllm tp2",
                    "check": {
                        "engine": "vllm",
                        "model": "llama-2-7b",
                        "parallelism": {"tensor_parallel_size": 2},
                    },
                },
                {"kind": "advisor-plan", "name": "quick", "profile": "p.yaml", "device": "cpu"},
            ],
        }
    )
    assert [step_resources(step).gpus for step in plan.steps] == [0, 1, 2, 0]


# --------------------------------------------------------------------------- running, resuming


def test_campaign_runs_resumes_and_respects_the_budget(tmp_path: Path) -> None:
    plan_file = write_plan(
        tmp_path,
        [fake_step("first"), fake_step("second"), fake_step("too long", estimate_s=10_000)],
    )
    plan = load_plan(plan_file)
    out = tmp_path / "out"
    result = run_campaign(plan, out, LocalExecutor(), budget_s=600, plan_file=plan_file)

    assert [outcome.name for outcome in result.steps] == ["first", "second"]
    assert all(outcome.status == "completed" for outcome in result.steps)
    assert [skipped.name for skipped in result.skipped] == ["too long"]
    assert "step estimate 10000 s" in result.skipped[0].reason
    run_ids = [outcome.runs[0].run_id for outcome in result.steps]
    assert all(outcome.runs[0].status.value == "COMPLETED" for outcome in result.steps)
    assert (out / "plan.yaml").read_bytes() == plan_file.read_bytes()
    assert (out / "steps" / "first" / "runs" / "first" / "result.json").is_file()
    with ResultStore(out / "results.sqlite") as store:
        assert {run.run_id for run in store.list_runs()} == set(run_ids)

    # The folder holds both finished steps: a second invocation runs only what is missing.
    again = run_campaign(plan, out, LocalExecutor(), budget_s=600, plan_file=plan_file)
    assert again.resumed == ["first", "second"]
    assert [outcome.runs[0].run_id for outcome in again.steps] == run_ids
    with ResultStore(out / "results.sqlite") as store:
        assert len(store.list_runs()) == 2  # nothing ran twice
    written = (out / "campaign.json").read_text()
    assert '"resumed"' in written and "too long" in written


def test_a_step_changed_since_its_outcome_is_refused(tmp_path: Path) -> None:
    plan_file = write_plan(tmp_path, [fake_step("only")])
    out = tmp_path / "out"
    run_campaign(load_plan(plan_file), out, LocalExecutor(), plan_file=plan_file)
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    changed = write_plan(tmp_path, [fake_step("only", estimate_s=5)])
    with pytest.raises(UserError, match="holds step 'only' as defined differently"):
        run_campaign(load_plan(changed), out, LocalExecutor(), plan_file=changed)
    # The refused resume wrote nothing: OUT/plan.yaml is still the plan the folder ran.
    after = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    assert after == before
    assert b"estimate_s: 5" not in (out / "plan.yaml").read_bytes()


def test_a_failing_step_is_recorded_and_the_next_one_runs(tmp_path: Path) -> None:
    missing = fake_step("missing model")
    missing["config"]["model"] = str(tmp_path / "no-such-checkpoint")
    plan_file = write_plan(tmp_path, [missing, fake_step("fine")])
    result = run_campaign(load_plan(plan_file), tmp_path / "out", LocalExecutor())
    assert [outcome.status for outcome in result.steps] == ["failed", "completed"]
    assert "UserError" in (result.steps[0].error or "")
    assert result.steps[0].traceback is None  # a user's mistake needs no traceback


def test_cli_exits_1_and_names_a_run_that_failed_inside_a_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = fake_step("engine fails")
    broken["config"]["engine_args"]["load_error"] = "injected load failure"
    plan_file = write_plan(tmp_path, [broken, fake_step("fine")])
    assert main(["campaign", str(plan_file), "--out", str(tmp_path / "out")]) == 1
    printed = capsys.readouterr().out
    assert "2 step(s) run, 0 already done, 0 failed" in printed  # the step itself completed
    assert "(engine fails): " in printed and "injected load failure" in printed


class RecordingExecutor:
    """TEST DOUBLE executor: records the jobs the campaign hands over, then runs them locally."""

    name = "recording"

    def __init__(self) -> None:
        self.jobs: list[StepJob] = []

    def run(self, job: StepJob, on_progress=None) -> StepJobResult:
        self.jobs.append(job)
        return LocalExecutor().run(job, on_progress)


def test_executor_seam_gets_each_step_and_its_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench.orchestrate.executor_registry

    monkeypatch.setattr(
        bench.orchestrate.executor_registry,
        "_EXECUTORS",
        dict(bench.orchestrate.executor_registry._EXECUTORS),
    )
    recorder = RecordingExecutor()
    register_executor("recording", lambda: recorder)
    plan_file = write_plan(tmp_path, [fake_step("one"), fake_step("two")])
    plan = load_plan(plan_file)
    result = run_campaign(plan, tmp_path / "out", get_executor("recording"))
    assert [job.name for job in recorder.jobs] == ["one", "two"]
    assert [job.context.out_dir for job in recorder.jobs] == [
        tmp_path / "out" / "steps" / "one",
        tmp_path / "out" / "steps" / "two",
    ]
    assert {job.context.store for job in recorder.jobs} == {
        str(tmp_path / "out" / "results.sqlite")
    }
    # The job is the executor's own type: what it asks for, and the step as the plan has it.
    for job, step in zip(recorder.jobs, plan.steps, strict=True):
        assert job.resources == step_resources(step)
        assert RunStep.model_validate_json(job.definition) == step
    assert result.executor == "recording"
    # The double hands each step to the local executor, which signs the outcome.
    assert {outcome.executor for outcome in result.steps} == {"local"}
    assert [outcome.status for outcome in result.steps] == ["completed", "completed"]


class LostNodeExecutor:
    """TEST DOUBLE executor whose node is lost before the step body returns: it hands back the
    executor's reason and no outcome, as the ray executor does for a lost node."""

    name = "lost-node"
    max_jobs = 1

    def run(self, job: StepJob, on_progress=None) -> StepJobResult:
        return StepJobResult(
            executor=self.name, started_at="2026-01-01T00:00:00+00:00", wall_s=1.5, error="lost"
        )


def test_an_executor_error_is_the_steps_failed_outcome(tmp_path: Path) -> None:
    plan = load_plan(write_plan(tmp_path, [fake_step("one")]))
    result = run_campaign(plan, tmp_path / "out", LostNodeExecutor())
    (outcome,) = result.steps
    assert (outcome.name, outcome.status, outcome.error) == ("one", "failed", "lost")
    assert (outcome.executor, outcome.wall_s, outcome.step) == ("lost-node", 1.5, plan.steps[0])
    with pytest.raises(ValueError, match="either its outcome or an error"):
        StepJobResult(executor="x", started_at="t", wall_s=0)
    with pytest.raises(ValueError, match="either its outcome or an error"):
        StepJobResult(executor="x", started_at="t", wall_s=0, outcome_json="{}", error="e")


# --------------------------------------------------------------------------- advisor-plan


def test_advisor_plan_step_gets_the_advisors_configs(tmp_path: Path) -> None:
    """The shipped chat profile's quick plan, through `python -m advisor bench-plan --json`."""
    profile = ROOT / "examples" / "profiles" / "chat_7b_h200.yaml"
    step = load_plan(
        write_plan(
            tmp_path,
            [
                {
                    "kind": "advisor-plan",
                    "name": "quick",
                    "profile": str(profile),
                    "device": "cpu",
                    "skip_unavailable": False,
                }
            ],
        )
    ).steps[0]
    context = StepContext(out_dir=tmp_path / "step", plan_dir=tmp_path)
    context.out_dir.mkdir()
    configs, skipped = advisor_plan_configs(step, context)
    assert configs and skipped == []
    assert {config.device for config in configs} == {"cpu"}
    # The profile plans float16 for its H200; CPU runs follow the one CPU dtype rule.
    assert {config.precision.dtype for config in configs} == {"bfloat16"}
    from bench.orchestrate.campaign import advisor_plan_runs

    planned = advisor_plan_runs(step, context)
    assert configs == [*planned.configs, *planned.capacity_configs]
    # quick = one phase a comparison run, made once; its capacity searches (coarse) after them
    assert all(config.load.pattern == "concurrency" for config in planned.configs)
    assert all(config.load.pattern == "capacity" for config in planned.capacity_configs)
    assert all("quick" in (config.label or "") for config in planned.configs)
    assert planned.repeats.count == 1


def test_advisor_plan_step_takes_the_full_plans_searches_and_repeats(tmp_path: Path) -> None:
    """The full plan's capacity searches run too, and its repeats apply unless the step sets
    its own (`python -m advisor bench-plan --json` is the real planner here)."""
    from advisor.plan.stage_plan import FULL_REPEATS
    from bench.orchestrate.campaign import advisor_plan_runs

    profile = {
        "model": "llama-2-7b",
        "gpu": {"type": "H200"},
        "concurrency": 16,
        "slo": {"ttft_ms": 300, "tpot_ms": 50},
    }
    base = {"kind": "advisor-plan", "profile": profile, "plan": "full", "skip_unavailable": False}
    steps = load_plan(
        write_plan(
            tmp_path,
            [{**base, "name": "plan's repeats"}, {**base, "name": "two", "repeats": 2}],
        )
    ).steps
    context = StepContext(out_dir=tmp_path / "step", plan_dir=tmp_path)
    context.out_dir.mkdir()
    planned = advisor_plan_runs(steps[0], context)
    assert planned.capacity_configs, "the profile has a latency SLO: a capacity search"
    assert {c.load.pattern for c in planned.capacity_configs} == {"capacity"}
    assert planned.repeats.count == FULL_REPEATS
    assert advisor_plan_runs(steps[1], context).repeats.count == 2


def test_advisor_plan_step_with_a_missing_profile_fails_in_one_line(tmp_path: Path) -> None:
    step = CampaignPlan.model_validate(
        {"name": "p", "steps": [{"kind": "advisor-plan", "name": "q", "profile": "nope.yaml"}]}
    ).steps[0]
    assert not isinstance(step, RunStep)
    with pytest.raises(UserError, match=r"profile .*nope\.yaml does not exist"):
        advisor_plan_configs(step, StepContext(out_dir=tmp_path, plan_dir=tmp_path))


# --------------------------------------------------------------------------- shipped plans

REFERENCE = ROOT / "data" / "reference"
PLAN_FILES = sorted(REFERENCE.glob("*/plan*.yaml"))


def campaigns_of(plan_file: Path) -> list[Path]:
    """`plan.yaml` produced every campaign file of its folder; `plan-X.yaml` produced
    `campaign-X.json`."""
    if plan_file.stem == "plan":
        return sorted(plan_file.parent.glob("campaign-*.json"))
    return [plan_file.parent / f"campaign-{plan_file.stem.removeprefix('plan-')}.json"]


def test_every_reference_campaign_folder_has_its_plan() -> None:
    folders = {path.parent for path in REFERENCE.glob("*/campaign-*.json")}
    covered = {c.parent for plan in PLAN_FILES for c in campaigns_of(plan) if c.is_file()}
    assert folders and folders == covered


@pytest.mark.parametrize(
    "plan_file", PLAN_FILES, ids=[str(p.relative_to(REFERENCE)) for p in PLAN_FILES]
)
def test_reference_plan_is_the_one_that_produced_its_data(plan_file: Path) -> None:
    """Each shipped plan validates, names the steps its campaign files recorded, and every
    recorded run's configuration is its run step's (a served engine's address aside)."""
    import json

    from bench.core.config import RunConfig

    plan = load_plan(plan_file)
    for campaign_file in campaigns_of(plan_file):
        campaign = json.loads(campaign_file.read_text())
        if "plan" in campaign:  # a CampaignResult of `python -m bench campaign`
            result = CampaignResult.model_validate(campaign)
            assert result.plan == plan
            assert [o.name for o in result.steps] == [step.name for step in plan.steps]
            for step, outcome in zip(plan.steps, result.steps, strict=True):
                assert outcome.status == "completed" and outcome.step == step
                if isinstance(step, RunStep):
                    assert [run.config for run in outcome.runs] == [step.config], step.name
            continue
        # The former campaign script's files: steps named by `step`, one `result` per run.
        recorded = campaign["steps"]
        assert [step["step"] for step in recorded] == [step.name for step in plan.steps]
        for step, entry in zip(plan.steps, recorded, strict=True):
            if not isinstance(step, RunStep) or "result" not in entry:
                continue
            ran = RunConfig.model_validate(entry["result"]["config"])
            if step.config.backend == "openai":  # the plan launches the server; it ran at an URL
                assert step.config.engine_args["launch"] == "vllm"
                ran = ran.model_copy(update={"engine_args": step.config.engine_args})
            assert ran == step.config, step.name
