"""`bench calibrate`: a micro-campaign on this machine's GPU (or CPU) and engine that measures
what the advisor's engine model is fitted on, within a time budget (at most 10 minutes).

1. A concurrency ladder (`StepLoad` with explicit levels) for each prompt/output mix: the engine
   at held batch sizes, from one request at a time (the front-end delay) to a full batch.
2. Settled rate levels near the knee of the first mix: one settled SLO capacity search
   (bench/run/load/capacity.py) that starts at a fraction of the best request throughput the
   ladder reached; each of its rate probes is judged only after `settle_s` of arrivals at its
   rate (the requests in flight have levelled off: sustained load, the levels a capacity
   prediction is calibrated on; an empty engine overstates capacity). One engine load serves
   every settled level. The SLO is the user's, else one derived from the ladder (5 x the TTFT
   p90 of one request at a time, 1.5 x the TPOT p90 at the top of the ladder).

Every run is a normal stored run; the levels become a `CalibrationRecord`
(bench/core/calibration.py). Bench measures and stores; the advisor fits (advisor/sizing).
A run that would not finish within the budget is skipped and named in the record's notes.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field

from bench.core.calibration import (
    MAX_BUDGET_S,
    CalibrationLevel,
    CalibrationPlan,
    CalibrationRecord,
    Mix,
    device_type_of,
    engine_limits,
    level_of,
    precision_class,
)
from bench.core.config import (
    SLO,
    CapacityLoad,
    GenerateWorkload,
    LengthDistribution,
    RunConfig,
    StepLoad,
    ValidityRules,
)
from bench.core.errors import UserError
from bench.core.progress import RunProgress
from bench.core.schema import RunResult, RunStatus
from bench.core.strict import Strict

LOAD_ESTIMATE_S = 60.0
"""Engine load time assumed before the first run has measured it (vLLM on a GPU: 30-90 s)."""


class CalibrationProgress(Strict):
    """One progress update of the campaign (the CLI's line and a caller's bar)."""

    step: int = Field(description="1-based run of the campaign.")
    steps_total: int
    what: str = Field(description="The run in words: `ladder 512/128`, `settled 3.2 req/s`.")
    elapsed_s: float
    estimated_total_s: float = Field(description="Elapsed plus the runs still to go, estimated.")
    run: RunProgress | None = None


ProgressCallback = Callable[[CalibrationProgress], None]
Launch = Callable[..., RunResult]


def parse_mix(text: str) -> Mix:
    """`512x128` (prompt x output tokens) -> Mix; UserError names a malformed one."""
    prompt, sep, output = text.lower().partition("x")
    try:
        if not sep:
            raise ValueError
        return Mix(prompt_tokens=int(prompt), output_tokens=int(output))
    except ValueError:
        raise UserError(f"--mix {text!r}: give PROMPTxOUTPUT tokens, e.g. 512x128") from None


def parse_numbers(text: str, what: str, cast: Callable[[str], Any] = float) -> list[Any]:
    """`1,8,32` -> [1, 8, 32]; UserError names a malformed list."""
    try:
        values = [cast(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"{what} {text!r}: give comma-separated numbers, e.g. 1,8,32") from None
    if not values or any(v <= 0 for v in values):
        raise UserError(f"{what} {text!r}: give positive numbers, e.g. 1,8,32")
    return values


def _workload(mix: Mix) -> GenerateWorkload:
    return GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=mix.prompt_tokens),
        output_tokens=LengthDistribution(mean=mix.output_tokens),
    )


def _config(
    plan: CalibrationPlan,
    mix: Mix,
    load: StepLoad | CapacityLoad,
    label: str,
    slo: SLO | None = None,
) -> RunConfig:
    engine_args = dict(plan.engine_args)
    if plan.max_model_len is not None:
        engine_args.setdefault("max_model_len", plan.max_model_len)
    return RunConfig(
        backend=plan.backend,
        model=plan.model,
        device=plan.device,
        engine_args=engine_args,
        precision=plan.precision,
        workload=_workload(mix),
        load=load,
        slo=slo or SLO(),
        # a level is data for a fit, not a verdict: short levels count
        validity=ValidityRules(min_duration_s=1, min_requests=3),
        label=label,
    )


def ladder_config(plan: CalibrationPlan, mix: Mix) -> RunConfig:
    load = StepLoad(
        levels=plan.ladder,
        stage_duration_s=plan.stage_duration_s,
        stop_at_knee=False,  # every stage is a level of the fit
        warmup_requests=min(plan.ladder[0], 2),
        max_duration_s=plan.ladder_seconds() * 3 + 60,
    )
    return _config(plan, mix, load, f"calibrate ladder {mix.prompt_tokens}/{mix.output_tokens}")


def derived_slo(plan: CalibrationPlan, ladder: list[CalibrationLevel]) -> SLO:
    """The plan's SLO, else one from the first mix's ladder: TTFT p90 at most 5 x that of one
    request at a time, TPOT p90 at most 1.5 x that at the top of the ladder (judged at p90)."""
    if plan.slo is not None:
        return plan.slo
    alone = min(ladder, key=lambda level: level.level)
    top = max(ladder, key=lambda level: level.level)
    ttft = 5 * alone.ttft_ms.p90 if alone.ttft_ms else 1000.0
    tpot = 1.5 * top.tpot_ms.p90 if top.tpot_ms else None
    return SLO(ttft_ms=ttft, tpot_ms=tpot, percentile="p90")


def settle_seconds(plan: CalibrationPlan, slo: SLO, output_tokens: float) -> float:
    """`settle_s`, else twice the end-to-end time the SLO allows, at least 2 s."""
    if plan.settle_s is not None:
        return plan.settle_s
    bound, _ = slo.e2e_bound_ms(output_tokens)
    return max(2.0, 2 * (bound or 1000.0) / 1000)


def settled_config(
    plan: CalibrationPlan, mix: Mix, best_rps: float, slo: SLO, settle_s: float, max_s: float
) -> RunConfig:
    """One settled capacity search from `settled_start_fraction` x the ladder's best rate."""
    start = best_rps * plan.settled_start_fraction
    requests = max(20, round(start * plan.level_duration_s))
    load = CapacityLoad(
        over="rate",
        arrival="poisson",
        percentile=slo.percentile,
        attainment_target=0.9,
        precision=0.1,
        growth_factor=1.25,
        probe_requests=min(requests, 2000),
        start_rps=start,
        max_probes=max(3, plan.settled_probes),
        recheck_boundary=False,
        confirm_boundary=False,
        end_early=False,  # an overloaded level is still a measured step time
        settle_s=settle_s,
        warmup_requests=2,
        max_duration_s=max(1.0, max_s),
    )
    return _config(plan, mix, load, f"calibrate settled from {start:.3g} req/s", slo)


def settled_levels(run: RunResult) -> list[CalibrationLevel]:
    """The judged rate probes of a settled search (its settle phases are warm-up, not phases)."""
    levels = []
    for phase in run.phases:
        if phase.strategy != "rate" or phase.name.endswith("-settle"):
            continue
        level = level_of(run, phase, "settled")
        if level is not None:
            levels.append(level)
    return levels


def run_calibration(
    plan: CalibrationPlan,
    launch: Launch,
    store: Any = None,
    work_dir: Path | None = None,
    on_progress: ProgressCallback | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> CalibrationRecord:
    """Run the plan (each run through `launch`, bench.run.api.launch's signature) and return
    its record. Runs that would overrun the budget are skipped and named in the notes; a failed
    run's levels are missing and named too. UserError when no level was measured."""
    started = clock()
    if plan.ladder_seconds() > plan.budget_s:
        raise UserError(
            f"one ladder takes {plan.ladder_seconds():.0f} s, over the {plan.budget_s:.0f} s "
            "budget: fewer ladder levels or a shorter --stage-duration-s"
        )
    owned = tempfile.TemporaryDirectory(prefix="bench-calibrate-") if work_dir is None else None
    folder = Path(owned.name) if owned is not None else work_dir
    levels: list[CalibrationLevel] = []
    runs: list[RunResult] = []
    notes: list[str] = []
    load_s = LOAD_ESTIMATE_S
    steps_total = plan.planned_runs()
    step = 0

    def estimate(remaining_ladders: int) -> float:
        """Elapsed, plus the ladders to go and the settled search, each with an engine load."""
        settled = plan.settled_probes * (2.0 + plan.level_duration_s)
        return (
            clock()
            - started
            + remaining_ladders * (load_s + plan.ladder_seconds())
            + ((load_s + settled) if plan.settled_probes else 0.0)
        )

    def run_one(config: RunConfig, what: str, planned_s: float, total_s: float) -> RunResult | None:
        nonlocal step, load_s
        step += 1
        # The first run always runs: its engine load time is not known until it has loaded.
        load_guess = load_s if runs else 0.0
        if clock() - started + load_guess + planned_s > plan.budget_s:
            notes.append(f"{what}: skipped, it would overrun the {plan.budget_s:g} s budget")
            return None

        def forward(progress: RunProgress) -> None:
            if on_progress is not None:
                on_progress(
                    CalibrationProgress(
                        step=step,
                        steps_total=steps_total,
                        what=what,
                        elapsed_s=clock() - started,
                        estimated_total_s=max(total_s, clock() - started),
                        run=progress,
                    )
                )

        result = launch(config, store=store, out_dir=folder / f"run-{step}", on_progress=forward)
        runs.append(result)
        if result.timings.load_s:
            load_s = result.timings.load_s
        if result.status != RunStatus.COMPLETED:
            cause = result.failure.cause if result.failure else result.status.value
            notes.append(f"{what}: run {result.run_id} {result.status.value} ({cause})")
        # A search cut short by its time bound still measured its finished levels.
        return result if result.phases else None

    try:
        first_ladder: list[CalibrationLevel] = []
        for index, mix in enumerate(plan.mixes):
            what = f"ladder {mix.prompt_tokens}/{mix.output_tokens}"
            total = estimate(len(plan.mixes) - index)
            result = run_one(ladder_config(plan, mix), what, plan.ladder_seconds(), total)
            if result is None:
                continue
            stages = [level_of(result, phase, "ladder") for phase in result.phases]
            stages = [s for s in stages if s is not None]
            levels.extend(stages)
            if index == 0:
                first_ladder = stages
        if plan.settled_probes and not first_ladder:
            notes.append("no settled levels: the first mix's ladder measured nothing")
        elif plan.settled_probes:
            mix = plan.mixes[0]
            slo = derived_slo(plan, first_ladder)
            settle_s = settle_seconds(plan, slo, mix.output_tokens)
            best = max(level.request_throughput_rps for level in first_ladder)
            left_s = plan.budget_s - (clock() - started) - load_s
            config = settled_config(plan, mix, best, slo, settle_s, left_s)
            what = f"settled levels from {best * plan.settled_start_fraction:.3g} req/s"
            result = run_one(config, what, settle_s + plan.level_duration_s, estimate(0))
            if result is not None:
                levels.extend(settled_levels(result))
            if runs and runs[-1].config.load.pattern == "capacity":  # it ran
                notes.append(
                    f"settled levels: {settle_s:.3g} s of arrivals before each is judged; SLO "
                    f"{slo.model_dump(exclude_none=True)}"
                )
    finally:
        if owned is not None:
            owned.cleanup()
    if not levels:
        reasons = "; ".join(notes) or "no run completed"
        raise UserError(f"calibration measured no level: {reasons}")
    reference = next(r for r in runs if r.status == RunStatus.COMPLETED)
    return CalibrationRecord(
        engine=plan.backend,
        model=plan.model,
        device_type=device_type_of(reference),
        precision_class=precision_class(plan.precision),
        dtype=plan.precision.dtype,
        tensor_parallel_size=reference.config.parallelism.tensor_parallel_size,
        levels=levels,
        run_ids=[r.run_id for r in runs],
        environment=reference.environment,
        budget_s=plan.budget_s,
        elapsed_s=clock() - started,
        notes=notes,
        plan=plan,
    )


__all__ = [
    "MAX_BUDGET_S",
    "CalibrationPlan",
    "CalibrationProgress",
    "Mix",
    "derived_slo",
    "engine_limits",
    "ladder_config",
    "parse_mix",
    "parse_numbers",
    "run_calibration",
    "settle_seconds",
    "settled_config",
    "settled_levels",
]
