"""The comparison runs of a stage: one RunConfig per benchmarkable candidate in the stage's
workload shape, with the quick or full plan's load."""

from __future__ import annotations

from advisor.plan.context_window import engine_limit
from advisor.plan.tree import BENCHMARKABLE_FRAMEWORKS, Decision, run_backend
from advisor.sizing.configurations import expert_parallelism
from advisor.sizing.engine_shape import backend_runs_kind, expert_engine_args
from advisor.workload import traffic
from advisor.workload.profile import StageProfile
from advisor.workload.stage_load import stage_load
from bench.core.config import (
    SLO,
    ConcurrencyLoad,
    ForwardWorkload,
    GenerateWorkload,
    RateLoad,
    RunConfig,
    StepLoad,
    ValidityRules,
)
from bench.core.errors import UserError

QUICK_DURATION_S = 15.0
FULL_DURATION_S = 120.0


def unplannable(stage: StageProfile) -> None:
    """A UserError where the bench cannot run the stage's model: none named, or a published
    speech model the advisor sizes from its config but the bench has no preset of."""
    from advisor.workload.architectures import sized_but_not_runnable

    if stage.model is None:
        raise UserError(f"stage {stage.name!r} has no model; set `model` to plan benchmarks")
    if sized_but_not_runnable(stage.model):
        raise UserError(
            f"stage {stage.name!r}: {stage.model} is sized from its published config, but the "
            "bench has no preset of it to write and run; give `model` as a local folder with "
            "its checkpoint to benchmark it"
        )


def bench_plan(stage: StageProfile, decision: Decision, quick: bool = False) -> list[RunConfig]:
    """One RunConfig per benchmarkable candidate, in the stage's workload shape.

    quick = a first benchmark-backed answer in minutes: one closed-loop phase of 15 s at the
    user's concurrency (8 when none is given), 2 warm-ups (sent together), validity relaxed to
    10 requests over 10 s; its end-to-end time on an H200 is in the quick_plan step of
    data/reference/h200_llama2-7b_fidelity_quick_plan_onnx_genai/
    campaign-fidelity-rounds-quick-plan.json.
    Full = 120 s at the user's concurrency or rate, or a step ladder (article 3.3) when neither is
    given. `jax` (not run by the bench) and adapters that do not run the stage's kind are skipped.
    """
    if stage.model is None:
        raise UserError(f"stage {stage.name!r} has no model; set `model` to plan benchmarks")
    if decision.refused:
        raise UserError(f"stage {stage.name!r} cannot be planned: {decision.refused}")
    configs: list[RunConfig] = []
    for candidate in decision.candidates:
        backend, launch = run_backend(candidate.framework)
        if backend not in BENCHMARKABLE_FRAMEWORKS:
            continue
        if backend_runs_kind(candidate.framework, stage.kind) is False:
            continue
        if engine_limit(stage, candidate.framework) is not None:
            continue  # this engine's position limit is below the stage's longest request
        configs.append(
            RunConfig(
                backend=backend,
                model=stage.model,
                engine_args=launch
                or expert_engine_args(candidate.framework, traffic.sized_for_engine(stage)),
                parallelism=expert_parallelism(
                    candidate.framework, traffic.sized_for_engine(stage)
                ),
                workload=_workload(stage),
                load=_load(stage, quick),
                slo=SLO(
                    ttft_ms=stage.slo.ttft_ms,
                    tpot_ms=stage.slo.tpot_ms,
                    e2e_ms=stage.slo.e2e_ms,
                    percentile=stage.slo.percentile,
                ),
                validity=ValidityRules(min_duration_s=10, min_requests=10)
                if quick
                else ValidityRules(),
                precision=stage.precision.run_precision(),
                label=f"advisor {'quick ' if quick else ''}plan: stage {stage.name}, "
                f"{candidate.framework} (tree rank {candidate.rank})",
            )
        )
    return traffic.caching_pair(configs, stage)  # caching on/off where prefixes are shared


def _workload(stage: StageProfile) -> GenerateWorkload | ForwardWorkload:
    if traffic.declares_traffic(stage):
        return traffic.workload(stage)
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


def _load(
    stage: StageProfile, quick: bool
) -> ConcurrencyLoad | RateLoad | StepLoad | traffic.ReplayLoad:
    if stage.trace_file is not None:
        return traffic.replay_load(stage, quick)
    if quick:
        return ConcurrencyLoad(
            concurrency=stage_load(stage).per_engine,
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
