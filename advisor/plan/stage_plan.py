"""The benchmark plan for one profile stage: the tree's candidates as RunConfigs in the stage's
workload shape, each with an estimate of its duration and disk use before it runs. The one
builder behind the Benchmark page, `advisor bench-plan` and campaigns.

On a machine without a GPU the quick plan swaps the model for its CPU-sized preset of the same
family (tiny-llama for Llama and Mistral): a check of the harness and the frameworks that ends in
minutes, not GPU figures; its lengths are scaled to the stand-in's context window when they
exceed it, and CPU runs use one dtype rule (`cpu_dtype`). A stage whose requests exceed its own
model's window is refused before planning.

Both plans also search the SLO capacity of the leading candidates (`capacity_configs`: the
full plan a 5% search at the stage's percentile, the quick plan a coarse one that keeps its
time budget) and state the repeats of the final comparison (3 in the full plan, 1 in the quick
plan); the plan's duration includes both.

This module puts the plan together; its parts: run_configs.py (the comparison RunConfigs),
context_window.py, cpu_plan.py (the CPU stand-ins), capacity_search.py, run_estimate.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, computed_field

from advisor.plan.capacity_search import capacity_plan, capacity_search_s
from advisor.plan.context_window import engine_limit, fit_to_window, scale_to_window
from advisor.plan.cpu_plan import cpu_quick_load, cpu_sized_model, on_the_cpu
from advisor.plan.run_configs import bench_plan, unplannable
from advisor.plan.run_estimate import ENGINE_START_S, RunEstimate, estimate_runs
from advisor.plan.tree import (
    BENCHMARKABLE_FRAMEWORKS,
    Decision,
    DecisionTree,
    evaluate,
    load_tree,
    run_backend,
)
from advisor.sizing.estimate import estimate_stage
from advisor.workload import traffic
from advisor.workload.profile import StageProfile
from bench.core.config import RunConfig, cpu_dtype
from bench.core.errors import UserError
from bench.core.strict import Strict

if TYPE_CHECKING:
    from advisor.sizing.calibration_fit import RecordSet

CONFIRM_ABOVE_S = 600.0
"""A plan estimated to take longer than this asks for confirmation before it runs."""
FULL_REPEATS = 3
"""Repeats of each comparison run in the full plan: enough for a two-level interval."""
QUICK_REPEATS = 1


class StagePlan(Strict):
    """One stage's plan: where the tree led, one RunConfig per benchmarkable candidate, and what
    each will cost."""

    stage: str
    quick: bool
    decision: Decision
    configs: list[RunConfig]
    estimates: list[RunEstimate] = Field(default_factory=list)
    not_benchmarked: list[str] = Field(
        default_factory=list, description="Candidates this tool does not run (e.g. jax)."
    )
    cpu_only: bool = False
    profile_model: str | None = Field(None, description="The model the profile names.")
    note: str | None = Field(None, description="What the plan changed and why (CPU sizing).")
    repeats: int = Field(
        1, ge=1, description="Repeats of each comparison run (configs): a measurement group."
    )
    capacity_configs: list[RunConfig] = Field(
        default_factory=list,
        description="SLO capacity searches of the leading candidates (run after the configs).",
    )
    capacity_estimates: list[RunEstimate] = Field(default_factory=list)
    capacity_note: str | None = Field(
        None, description="How the capacity search is set (coarse in the quick plan), or why none."
    )

    def all_configs(self) -> list[RunConfig]:
        """Every run of the plan in order: the comparison configs, then the capacity searches
        (a runner makes each comparison config `repeats` times)."""
        return [*self.configs, *self.capacity_configs]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def duration_s(self) -> float:
        return round(
            sum(e.total_s for e in self.estimates)
            + sum(e.total_s for e in self.capacity_estimates),
            1,
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def repeats_added_s(self) -> float:
        """What the repeats add to the plan (beyond one run of each comparison config)."""
        return round(sum(e.total_s - e.duration_s for e in self.estimates), 1)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def capacity_s(self) -> float:
        return round(sum(e.total_s for e in self.capacity_estimates), 1)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def disk_bytes(self) -> int:
        return sum(e.disk_bytes for e in self.estimates + self.capacity_estimates)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def needs_confirmation(self) -> bool:
        return self.duration_s > CONFIRM_ABOVE_S


def plan_for_stage(
    stage: StageProfile,
    *,
    quick: bool = False,
    tree: DecisionTree | None = None,
    cpu_only: bool = False,
    configurations: bool = False,
    busy: float = 1.0,
    records: RecordSet | None = None,
) -> StagePlan:
    """Walk the tree for `stage` and plan one run per benchmarkable candidate, with estimates.

    `cpu_only` (no GPU on the machine that will run it): the quick plan runs the model's
    CPU-sized preset of the same family, vLLM eager (no compile warm-up), on the CPU; `busy`
    scales the CPU estimates (`host_busy_factor()` for this machine). `records`: the
    `bench calibrate` records whose fits predict the planned runs (default: the shipped ones).
    `configurations` (GPU plans): the configuration search's most promising TP x replicas x
    precision layouts of the first candidate join the plan
    (`advisor.sizing.configurations.plan_runs`).
    """
    decision = evaluate(tree or load_tree(), stage, estimate_stage(stage))
    if decision.refused:
        raise UserError(f"stage {stage.name!r} cannot be planned: {decision.refused}")
    unplannable(stage)  # a model the bench cannot write and run
    traffic.check_history(stage)  # later turns resend the history: they must fit the window
    planned, clip_note = fit_to_window(stage)
    notes = [clip_note] if clip_note else []
    if cpu_only and quick and stage.model is not None:
        small = cpu_sized_model(stage)
        if small != stage.model:
            planned = planned.model_copy(update={"model": small})
            notes.append(
                f"This machine has no GPU: the quick plan runs {small} (the CPU-sized model of "
                f"the same family) instead of {stage.model}. It checks the harness and the "
                "frameworks in minutes; its figures are CPU figures, not GPU figures."
            )
            planned, scale_note = scale_to_window(planned, stage)
            if scale_note:
                notes.append(scale_note)
    configs = bench_plan(planned, decision, quick=quick)
    skipped = [
        c.framework
        for c in decision.candidates
        if run_backend(c.framework)[0] in BENCHMARKABLE_FRAMEWORKS
        and c.framework not in {config.framework for config in configs}
        and engine_limit(planned, c.framework) is not None
    ]
    if skipped:
        notes.append(
            f"Not planned: {', '.join(skipped)} - the sequences exceed the model's position "
            "limit in that engine (the rope-scaled window applies to vLLM and TensorRT-LLM only)"
        )
    if cpu_only:
        configs = [on_the_cpu(config, quick) for config in configs]
        if quick:
            sized = [cpu_quick_load(config, busy) for config in configs]
            configs = [config for config, _ in sized]
            for cpu_note in dict.fromkeys(note for _, note in sized if note):
                notes.append(cpu_note + ".")
        wanted = stage.precision.dtype
        used = cpu_dtype(stage.kind, wanted)
        if configs and used != wanted:
            notes.append(
                f"CPU runs use {used}, not the profile's {wanted}: "
                + (
                    "CPUs have bfloat16 kernels; float16 is slow or unsupported there (vLLM casts "
                    "it to bfloat16 itself)."
                    if stage.kind == "generate"
                    else "the one dtype every forward framework runs on the CPU."
                )
            )
    note = " ".join(notes) or None
    if configurations and not cpu_only and configs and stage.kind == "generate":
        from advisor.sizing.calibration import calibration_from
        from advisor.sizing.configurations import plan_runs, search_configurations
        from advisor.sizing.measured import read_reference_folder

        _, factors = calibration_from([], read_reference_folder().runs)
        search = search_configurations(stage, configs[0].backend, factors.lookup(stage))
        if search is not None:
            configs += plan_runs(configs[0], search)
    from advisor.sizing.calibration_fit import RecordSet, shipped_records
    from advisor.sizing.run_prediction import with_predictions
    from bench.core.calibration import CPU_DEVICE

    if records is None:
        records = RecordSet(shipped=tuple(shipped_records()))
    configs = with_predictions(configs, CPU_DEVICE if cpu_only else stage.gpu.type, records)
    repeats = QUICK_REPEATS if quick else FULL_REPEATS
    capacity_configs, capacity_note = capacity_plan(stage, configs, quick)
    if cpu_only and quick and capacity_configs:
        # The CPU quick plan runs a CPU-sized substitute: its capacity says nothing about the
        # user's GPU fleet, and the searches would outlast a first answer in minutes.
        capacity_configs = []
        capacity_note = (
            "No capacity search in the CPU quick plan: it runs a CPU-sized model, whose capacity "
            "says nothing about the GPU fleet; the full plan on a GPU host searches it"
        )
    estimates = estimate_runs(
        configs + capacity_configs,
        cpu_only=cpu_only,
        gpu=stage.gpu.type,
        busy=busy if cpu_only else 1.0,
    )
    for run_estimate in estimates[: len(configs)]:
        run_estimate.repeats = repeats
    if quick:
        # The quick plan keeps its budget: searches that would push it past the confirmation
        # threshold are left to the full plan, last candidate first.
        comparison_s = sum(e.total_s for e in estimates[: len(configs)])
        dropped: list[str] = []
        while len(estimates) > len(configs) and (
            comparison_s + sum(e.total_s for e in estimates[len(configs) :]) > CONFIRM_ABOVE_S
        ):
            estimates.pop()
            dropped.insert(0, capacity_configs.pop().backend)
        if dropped:
            capacity_note = (
                (capacity_note + ". " if capacity_configs else "")
                + f"Not in the quick plan: the capacity search of {', '.join(dropped)} (about "
                f"{capacity_search_s(stage, configs, dropped, cpu_only, busy):.0f} s, past the "
                f"quick plan's {CONFIRM_ABOVE_S:.0f} s budget); the full plan runs it"
            )
    return StagePlan(
        stage=stage.name,
        quick=quick,
        decision=decision,
        configs=configs,
        estimates=estimates[: len(configs)],
        repeats=repeats,
        capacity_configs=capacity_configs,
        capacity_estimates=estimates[len(configs) :],
        capacity_note=capacity_note,
        not_benchmarked=[c.framework for c in decision.candidates if not c.benchmarked],
        cpu_only=cpu_only,
        profile_model=stage.model,
        note=note,
    )


# bench_plan and ENGINE_START_S are imported from here by advisor/decide (recommend.py,
# verdicts.py): re-exported until those imports name run_configs / run_estimate.
__all__ = [
    "CONFIRM_ABOVE_S",
    "ENGINE_START_S",
    "FULL_REPEATS",
    "QUICK_REPEATS",
    "StagePlan",
    "bench_plan",
    "plan_for_stage",
]
