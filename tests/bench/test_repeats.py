"""Measurement groups: `launch_group` through the real launch and worker with the `fake`
backend (a labelled TEST DOUBLE: no inference), the store's group column, `bench run
--repeats`, campaign steps with `repeats:`, and convergence stopping."""

from __future__ import annotations

import json

import pytest

from bench.cli import main
from bench.core.config import (
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    RepeatPolicy,
    RunConfig,
)
from bench.core.errors import UserError
from bench.core.schema import RunResult, RunStatus
from bench.orchestrate.campaign import CampaignPlan, RunStep
from bench.orchestrate.repeats import launch_group
from bench.storage.store import ResultStore


def fake_config(**engine_args) -> RunConfig:
    return RunConfig(
        backend="fake",
        model="tiny-llama",
        precision={"dtype": "float32"},
        engine_args={"ttft_s": 0.004, "itl_s": 0.001, "ttft_jitter_s": 0.002, **engine_args},
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=8)
        ),
        load=ConcurrencyLoad(concurrency=4, duration_s=1.0, warmup_requests=2),
        validity={"min_duration_s": 0.5, "min_requests": 10},
    )


def test_group_of_repeats_is_stored_and_summarised(tmp_path, tiny_llama):
    sleeps = []
    with ResultStore(tmp_path / "store.sqlite") as store:
        outcome = launch_group(
            fake_config(),
            RepeatPolicy(count=2, cooldown_s=3.0),
            store=store,
            out_dir=tmp_path / "out",
            sleep=sleeps.append,
        )
        assert sleeps == [3.0]  # one cooldown, between the two repeats
        assert [run.group.index for run in outcome.runs] == [0, 1]
        assert {run.group.group_id for run in outcome.runs} == {outcome.group_id}
        stored = store.group_runs(outcome.group_id)
        assert [run.run_id for run in stored] == [run.run_id for run in outcome.runs]
        assert store.group_runs("grp-unknown") == []
        assert all(run.status == RunStatus.COMPLETED for run in stored)
    assert (tmp_path / "out" / "repeat-2" / "records.jsonl").is_file()
    summary = outcome.summary
    assert summary.repeats == 2 and summary.group_id == outcome.group_id
    throughput = summary.metric("output_throughput_tok_s")
    assert len(throughput.run_values) == 2 and throughput.cv is not None
    assert throughput.interval.low <= throughput.value <= throughput.interval.high
    assert outcome.stopped == "all 2 repeats"


def test_convergence_stops_early_with_the_reason(tmp_path, tiny_llama):
    """A narrow-enough interval after min_repeats ends the group before count."""
    policy = RepeatPolicy(
        count=5, convergence_metric="tpot_ms_p50", convergence_width=0.5, min_repeats=2
    )
    outcome = launch_group(fake_config(), policy, out_dir=tmp_path / "out")
    assert len(outcome.runs) == 2, outcome.stopped
    assert outcome.stopped.startswith("converged after 2 repeats: tpot_ms_p50")


def test_unknown_convergence_metric_is_a_user_error():
    with pytest.raises(UserError, match="unknown convergence metric 'tok_s'"):
        launch_group(fake_config(), RepeatPolicy(count=2, convergence_metric="tok_s"))


def test_bench_run_repeats_cli(tmp_path, tiny_llama, capsys):
    config = tmp_path / "run.json"
    config.write_text(fake_config().model_dump_json())
    store = tmp_path / "store.sqlite"
    code = main(["run", "--config", str(config), "--store", str(store), "--repeats", "2", "--json"])
    assert code == 0
    outcome = json.loads(capsys.readouterr().out)
    assert len(outcome["runs"]) == 2 and outcome["summary"]["repeats"] == 2
    code = main(["compare", outcome["group_id"], outcome["runs"][0]["run_id"], "--store",
                 str(store), "--bootstrap", "200", "--json"])  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    measurements = report["measurements"]
    assert measurements["a"]["kind"] == "group" and measurements["b"]["single_run"]
    assert any("single run" in note for note in measurements["notes"])
    assert main(["run", "--config", str(config), "--no-store", "--repeats", "0"]) == 2
    assert "error:" in capsys.readouterr().err


def test_campaign_step_repeats_field():
    step = RunStep.model_validate({"name": "s", "config": fake_config().model_dump(), "repeats": 3})
    assert step.repeats == RepeatPolicy(count=3)
    plain = RunStep(name="s", config=fake_config())
    assert plain.repeats.count == 1  # old plans and stored outcomes read as before
    plan = CampaignPlan.model_validate(
        {"name": "p", "steps": [{"kind": "run", "name": "s", "config": fake_config().model_dump(),
                                 "repeats": {"count": 2, "cooldown_s": 5}}]}
    )  # fmt: skip
    assert plan.steps[0].repeats.cooldown_s == 5


def test_old_results_load_without_group(tiny_records):
    result = RunResult(config=fake_config())
    data = json.loads(result.model_dump_json())
    data.pop("group")
    assert RunResult.model_validate(data).group is None


def test_group_runs_on_both_store_backends(store_url):
    from bench.core.schema import GroupMembership

    with ResultStore(store_url) as store:
        members = []
        for index in range(3):
            run = RunResult(
                config=fake_config(),
                created_at=f"2026-12-01T00:00:0{index}+00:00",
                group=GroupMembership(group_id="grp-x", index=index, planned=3),
            )
            store.create_run(run)
            members.append(run.run_id)
        store.create_run(RunResult(config=fake_config()))  # alone: not in the group
        assert [run.run_id for run in store.group_runs("grp-x")] == members
        assert [run.group.index for run in store.group_runs("grp-x")] == [0, 1, 2]
