"""The benchmark plan for one profile stage: the tree's candidates as RunConfigs in the stage's
workload shape. The one builder behind the Benchmark page, `advisor bench-plan` and campaigns.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from advisor.estimate import estimate_stage
from advisor.evidence import QUICK_CONCURRENCY_DEFAULT, _backend_runs_kind, _expert_engine_args
from advisor.profile import StageProfile
from advisor.tree import BENCHMARKABLE_FRAMEWORKS, Decision, DecisionTree, evaluate, load_tree
from bench.config import (
    SLO,
    ConcurrencyLoad,
    ForwardWorkload,
    GenerateWorkload,
    RateLoad,
    RunConfig,
    StepLoad,
    ValidityRules,
)
from bench.errors import UserError

QUICK_DURATION_S = 15.0
FULL_DURATION_S = 120.0


class StagePlan(BaseModel):
    """One stage's plan: where the tree led, and one RunConfig per benchmarkable candidate."""

    model_config = ConfigDict(extra="forbid")

    stage: str
    quick: bool
    decision: Decision
    configs: list[RunConfig]
    not_benchmarked: list[str] = Field(
        default_factory=list, description="Candidates this tool does not run (e.g. jax)."
    )


def plan_for_stage(
    stage: StageProfile, *, quick: bool = False, tree: DecisionTree | None = None
) -> StagePlan:
    """Walk the tree for `stage` and plan one run per benchmarkable candidate."""
    decision = evaluate(tree or load_tree(), stage, estimate_stage(stage))
    return StagePlan(
        stage=stage.name,
        quick=quick,
        decision=decision,
        configs=bench_plan(stage, decision, quick=quick),
        not_benchmarked=[c.framework for c in decision.candidates if not c.benchmarked],
    )


def bench_plan(stage: StageProfile, decision: Decision, quick: bool = False) -> list[RunConfig]:
    """One RunConfig per benchmarkable candidate, in the stage's workload shape.

    quick = a first benchmark-backed answer in minutes: one closed-loop phase of 15 s at the
    user's concurrency (8 when none is given), 2 warm-ups (sent together), validity relaxed to
    10 requests over 10 s; its end-to-end time on an H200 is in the campaign-s4 step of
    data/reference/h200_2026-11-29_s3/campaign-s4.json.
    Full = 120 s at the user's concurrency or rate, or a step ladder (article 3.3) when neither is
    given. `jax` (not run by the bench) and adapters that do not run the stage's kind are skipped.
    """
    if stage.model is None:
        raise UserError(f"stage {stage.name!r} has no model; set `model` to plan benchmarks")
    configs: list[RunConfig] = []
    for candidate in decision.candidates:
        if candidate.framework not in BENCHMARKABLE_FRAMEWORKS:
            continue
        if _backend_runs_kind(candidate.framework, stage.kind) is False:
            continue
        configs.append(
            RunConfig(
                backend=candidate.framework,
                model=stage.model,
                engine_args=_expert_engine_args(candidate.framework, stage),
                workload=_workload(stage),
                load=_load(stage, quick),
                slo=SLO(
                    ttft_ms=stage.slo.ttft_ms, tpot_ms=stage.slo.tpot_ms, e2e_ms=stage.slo.e2e_ms
                ),
                validity=ValidityRules(min_duration_s=10, min_requests=10)
                if quick
                else ValidityRules(),
                precision=stage.precision.run_precision(),
                label=f"advisor {'quick ' if quick else ''}plan: stage {stage.name}, "
                f"{candidate.framework} (tree rank {candidate.rank})",
            )
        )
    return configs


def _workload(stage: StageProfile) -> GenerateWorkload | ForwardWorkload:
    if stage.kind == "generate":
        return GenerateWorkload(
            prompt_tokens=stage.prompt_tokens, output_tokens=stage.output_tokens
        )
    return ForwardWorkload(
        batch_size=stage.batch_size,
        sequence_length=stage.sequence_length,
        image_size=stage.image_size,
        dynamic_shapes=not stage.fixed_input_shapes,
    )


def _load(stage: StageProfile, quick: bool) -> ConcurrencyLoad | RateLoad | StepLoad:
    if quick:
        return ConcurrencyLoad(
            concurrency=stage.concurrency or QUICK_CONCURRENCY_DEFAULT,
            duration_s=QUICK_DURATION_S,
            warmup_requests=2,
            max_duration_s=150.0,
        )
    if stage.request_rate_rps is not None and stage.concurrency is None:
        return RateLoad(
            rate_rps=stage.request_rate_rps, duration_s=FULL_DURATION_S, warmup_requests=8
        )
    if stage.concurrency is not None:
        return ConcurrencyLoad(
            concurrency=stage.concurrency, duration_s=FULL_DURATION_S, warmup_requests=8
        )
    return StepLoad(start=10, step=10, max=100, stage_duration_s=60.0, warmup_requests=8)


__all__ = ["FULL_DURATION_S", "QUICK_DURATION_S", "StagePlan", "bench_plan", "plan_for_stage"]
