"""CPU rehearsal of GPU campaign plans (bench/orchestrate/rehearsal.py) on the plans this project
ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.orchestrate.campaign import FidelityStep, RunStep, load_plan, step_resources
from bench.orchestrate.rehearsal import (
    MAX_CONCURRENCY,
    MAX_REPLICAS,
    rehearsal_changes,
    rehearsal_plan,
)

ROOT = Path(__file__).resolve().parents[2]
GPU_PLANS = sorted(
    [*ROOT.glob("examples/campaigns/h200*.yaml"), *ROOT.glob("data/reference/*/plan*.yaml")]
)


@pytest.mark.parametrize("plan_file", GPU_PLANS, ids=[p.name for p in GPU_PLANS])
def test_every_step_of_a_gpu_plan_becomes_a_cpu_step_with_the_same_name(plan_file: Path) -> None:
    plan = load_plan(plan_file)
    rehearsal = rehearsal_plan(plan)
    assert [s.name for s in rehearsal.steps] == [s.name for s in plan.steps]
    assert [s.kind for s in rehearsal.steps] == [s.kind for s in plan.steps]
    assert "CPU rehearsal" in rehearsal.description
    for original, step in zip(plan.steps, rehearsal.steps, strict=True):
        assert step_resources(step).gpus == 0, step.name
        if isinstance(step, RunStep):
            config = step.config
            assert config.device == "cpu" and config.model.startswith("tiny-")
            assert config.parallelism.tensor_parallel_size == 1
            assert config.parallelism.replicas == min(
                original.config.parallelism.replicas, MAX_REPLICAS
            )
            assert not config.precision.uses_fp8
            assert "gpu_memory_utilization" not in config.engine_args
            # a server the openai backend starts is rehearsed the same way
            assert "gpu_memory_utilization" not in config.engine_args.get("server_args", {})
            assert config.backend == original.config.backend
            assert config.load.pattern == original.config.load.pattern
            load = config.load
            levels = getattr(load, "levels", None) or [getattr(load, "concurrency", 1)]
            assert max(levels) <= MAX_CONCURRENCY
            assert config.label.startswith("CPU rehearsal: ")
        elif isinstance(step, FidelityStep):
            check = step.check
            assert check.device == "cpu" and check.model == "tiny-llama"
            args = getattr(check, "engine_args", {})
            assert "tensor_parallel_size" not in args and "quantization" not in args


def test_the_70b_plans_say_what_a_cpu_cannot_rehearse() -> None:
    plan = load_plan(ROOT / "examples/campaigns/h200x8-llama70b.yaml")
    by_name = {step.name: step for step in plan.steps}
    assert [step_resources(s).gpus for s in plan.steps][:6] == [8] * 6
    replicas = rehearsal_changes(by_name["vllm 70b fp8 TP=2 x 4 replicas 128/128"])
    assert replicas == [
        "llama-2-70b -> tiny-llama on the CPU",
        "TP=2 -> TP=1",
        f"4 replicas -> {MAX_REPLICAS}",
        "bfloat16 + fp8 weights -> float32 (no FP8 on the CPU)",
    ]
    fidelity = rehearsal_changes(by_name["vllm fidelity 70b fp8 TP=2"])
    assert fidelity == [
        "llama-2-70b -> tiny-llama on the CPU",
        "TP=2 -> TP=1",
        "FP8 dropped (no FP8 on the CPU)",
    ]


@pytest.mark.slow
def test_a_70b_replica_step_and_its_fidelity_rehearse_through_real_engines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two steps of the 8-GPU plan (FP8 TP=2 x 4 replicas, and FP8 TP=2's fidelity) through
    `bench campaign --rehearse-on-cpu`: vLLM on the CPU, two replicas, a fidelity check."""
    import yaml

    from bench.cli import main
    from bench.orchestrate.campaign import CampaignResult

    source = yaml.safe_load((ROOT / "examples/campaigns/h200x8-llama70b.yaml").read_text())
    keep = {"vllm 70b fp8 TP=2 x 4 replicas 128/128", "vllm fidelity 70b fp8 TP=2"}
    source["steps"] = [step for step in source["steps"] if step["name"] in keep]
    plan_file = tmp_path / "two-steps.yaml"
    plan_file.write_text(yaml.safe_dump(source))
    out = tmp_path / "out"
    assert main(["campaign", str(plan_file), "--out", str(out), "--rehearse-on-cpu"]) == 0

    result = CampaignResult.model_validate_json((out / "campaign.json").read_text())
    assert result.plan.name == "h200x8-llama70b (CPU rehearsal)"
    assert "4 replicas -> 2" in result.plan.description
    assert result.command.endswith("--rehearse-on-cpu")
    assert load_plan(out / "plan.yaml") == result.plan  # the folder keeps the plan it ran
    assert [o.status for o in result.steps] == ["completed", "completed"], [
        o.error for o in result.steps
    ]
    [run] = result.steps[0].runs
    assert run.status.value == "COMPLETED" and run.config.device == "cpu"
    assert run.config.model == "tiny-llama" and run.config.parallelism.replicas == 2
    assert run.config.label.startswith("CPU rehearsal: ")
    assert len(run.replicas or []) == 2 and run.summary.successful > 0
    fidelity = result.steps[1].fidelity
    assert fidelity is not None and fidelity.ratio is not None and fidelity.ratio > 0
    assert fidelity.check.device == "cpu" and "quantization" not in fidelity.check.engine_args
    assert "(CPU rehearsal): 2 step(s) run" in capsys.readouterr().out


@pytest.mark.parametrize(
    "name",
    [
        "h200x4-llama70b",
        "h200x8-llama70b",
        "h200-llama2-7b-capacity-chat",
        "h200-llama2-7b-prefix-caching",
    ],
)
def test_the_kept_rehearsal_is_of_the_plan_as_shipped(name: str) -> None:
    """examples/campaigns/rehearsals/<plan>/: the rehearsal of today's plan, every step done."""
    from bench.orchestrate.campaign import CampaignResult

    folder = ROOT / "examples/campaigns/rehearsals" / name
    result = CampaignResult.model_validate_json((folder / "campaign.json").read_text())
    assert result.plan == rehearsal_plan(load_plan(ROOT / f"examples/campaigns/{name}.yaml"))
    assert load_plan(folder / "plan.yaml") == result.plan
    assert [o.status for o in result.steps] == ["completed"] * len(result.plan.steps)
    assert not result.environment.gpu_available
    for outcome in result.steps:
        for run in outcome.runs:
            assert run.config.device == "cpu" and run.config.label.startswith("CPU rehearsal")


@pytest.mark.parametrize(
    "load",
    [
        {"pattern": "steady"},
        {"pattern": "pulse", "burst_s": 60},
        {"pattern": "rate", "rate_rps": 50},
        {"pattern": "concurrency", "concurrency": 64, "duration_s": 600},
        {"pattern": "step", "start": 10, "step": 10, "max": 100},
        {"pattern": "capacity", "over": "concurrency"},
    ],
)
def test_every_load_pattern_keeps_its_shape_and_gets_short(load: dict) -> None:
    from bench.core.config import RunConfig
    from bench.orchestrate.rehearsal import STAGE_S, rehearse_config

    config = RunConfig.model_validate(
        {"backend": "pytorch", "model": "llama-2-7b", "load": load, "slo": {"ttft_ms": 300}}
    )
    rehearsed = rehearse_config(config).load
    assert rehearsed.pattern == config.load.pattern
    for name in ("duration_s", "stage_duration_s", "baseline_s", "burst_s", "recovery_s"):
        if getattr(rehearsed, name, None) is not None:
            assert getattr(rehearsed, name) == STAGE_S, name
    if rehearsed.pattern in ("steady", "pulse"):
        assert rehearsed.capacity_rps is not None  # no capacity ladder before the phases
    if rehearsed.pattern == "step":
        assert rehearsed.levels == [4]  # 10..100, each capped at MAX_CONCURRENCY
    if rehearsed.pattern == "capacity":  # a coarse search, the same axis
        assert rehearsed.over == "concurrency" and rehearsed.probe_requests == 10
        assert rehearsed.max_probes == 6 and rehearsed.max_concurrency == 4
