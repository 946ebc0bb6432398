"""CPU rehearsal of GPU campaign plans (bench/rehearsal.py) on the plans this project ships."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.campaign import FidelityStep, RunStep, load_plan, step_resources
from bench.rehearsal import MAX_CONCURRENCY, MAX_REPLICAS, rehearsal_changes, rehearsal_plan

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
