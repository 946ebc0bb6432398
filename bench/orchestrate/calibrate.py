"""`bench calibrate`: a micro-campaign on this machine's GPU (or CPU) and engine that measures
what the advisor's engine model is fitted on, within a time budget (at most 10 minutes).

1. A concurrency ladder (`StepLoad` with explicit levels) for each prompt/output mix: the engine
   at held batch sizes, from one request at a time (the front-end delay) to a full batch.
2. Settled rate levels near the knee of the first mix: open-loop Poisson levels at fractions of
   the best request throughput the ladder reached, each judged only on the requests that started
   after `settle_s` of arrivals (the requests in flight have levelled off: sustained load, the
   levels a capacity prediction is calibrated on; an empty engine overstates capacity).

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
    CPU_DEVICE,
    CalibrationLevel,
    CalibrationRecord,
    engine_limits,
    level_of,
    precision_class,
)
from bench.core.config import (
    GenerateWorkload,
    LengthDistribution,
    PrecisionConfig,
    RateLoad,
    RunConfig,
    StepLoad,
    ValidityRules,
)
from bench.core.errors import UserError
from bench.core.metrics import read_records_jsonl, summarize
from bench.core.progress import RunProgress
from bench.core.schema import PhaseResult, RunResult, RunStatus
from bench.core.strict import Strict, StrictInput

MAX_BUDGET_S = 600.0
"""The campaign's budget at most: ten minutes on the user's machine."""
LOAD_ESTIMATE_S = 60.0
"""Engine load time assumed before the first run has measured it (vLLM on a GPU: 30-90 s)."""


class Mix(StrictInput):
    """One prompt/output shape of the ladder."""

    prompt_tokens: int = Field(gt=0, le=131072)
    output_tokens: int = Field(gt=0, le=131072)


class CalibrationPlan(StrictInput):
    """What `bench calibrate` runs: one engine, one model, one precision, levels and budget."""

    backend: str = Field(description="Backend registry name (vllm, openai, ...).")
    model: str = Field(description="Model preset or checkpoint path.")
    device: str = Field("auto", pattern="^(auto|cuda|cpu)$", description="Where the engine runs.")
    engine_args: dict[str, Any] = Field(default_factory=dict)
    precision: PrecisionConfig = Field(default_factory=PrecisionConfig)
    mixes: list[Mix] = Field(
        default_factory=lambda: [
            Mix(prompt_tokens=512, output_tokens=128),
            Mix(prompt_tokens=128, output_tokens=512),
            Mix(prompt_tokens=2048, output_tokens=128),
        ],
        min_length=1,
        description="Prompt/output mixes of the ladder; the first also gets the settled levels.",
    )
    ladder: list[int] = Field(
        default_factory=lambda: [1, 8, 32, 128],
        min_length=1,
        description="Concurrency of each ladder stage.",
    )
    stage_duration_s: float = Field(10.0, gt=0, le=MAX_BUDGET_S)
    settled_fractions: list[float] = Field(
        default_factory=lambda: [0.6, 0.8, 0.95],
        description="Settled rate levels, as fractions of the first mix's best ladder "
        "throughput (requests/s).",
    )
    settle_s: float | None = Field(
        None,
        gt=0,
        le=MAX_BUDGET_S,
        description="Seconds of arrivals before a settled level is judged; none = twice the "
        "first mix's E2E p90 at the top of its ladder, at least 2 s.",
    )
    level_duration_s: float = Field(
        15.0, gt=0, le=MAX_BUDGET_S, description="Judged seconds of each settled level."
    )
    budget_s: float = Field(MAX_BUDGET_S, gt=0, le=MAX_BUDGET_S, description="Time budget (s).")
    max_model_len: int | None = Field(
        None, gt=0, description="Engine context length (engine_args.max_model_len) if not set."
    )

    def ladder_seconds(self) -> float:
        """Planned seconds of one ladder run, the engine load left out."""
        return len(self.ladder) * self.stage_duration_s

    def planned_runs(self) -> int:
        return len(self.mixes) + len(self.settled_fractions)


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


def _config(plan: CalibrationPlan, mix: Mix, load: StepLoad | RateLoad, label: str) -> RunConfig:
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


def settled_config(plan: CalibrationPlan, mix: Mix, rate: float, settle_s: float) -> RunConfig:
    load = RateLoad(
        rate_rps=rate,
        arrival="poisson",
        duration_s=settle_s + plan.level_duration_s,
        warmup_requests=1,
        max_duration_s=(settle_s + plan.level_duration_s) * 3 + 60,
    )
    return _config(plan, mix, load, f"calibrate settled {rate:.3g} req/s")


def settled_level(run: RunResult, records_path: Path, settle_s: float) -> CalibrationLevel | None:
    """The run's level judged on the requests that started `settle_s` after its phase began."""
    if not run.phases:
        return None
    phase = run.phases[0]
    cutoff = phase.start_ns + int(settle_s * 1e9)
    records = [
        r
        for r in read_records_jsonl(records_path)
        if not r.warmup and r.phase == phase.name and r.start_ns >= cutoff
    ]
    if len(records) < 2:
        return None
    summary = summarize(records)
    judged = PhaseResult(
        name=f"{phase.name} (after {settle_s:.3g} s settle)",
        strategy="rate",
        target=phase.target,
        start_ns=cutoff,
        end_ns=phase.end_ns,
        summary=summary,
    )
    return level_of(run, judged, "settled")


def _device_type(run: RunResult) -> str:
    if run.config.device == "cpu" or run.environment is None:
        return CPU_DEVICE
    return run.environment.primary_gpu_name or CPU_DEVICE


def _settle_seconds(plan: CalibrationPlan, top: CalibrationLevel | None) -> float:
    if plan.settle_s is not None:
        return plan.settle_s
    e2e = top.e2e_ms.p90 if top is not None and top.e2e_ms is not None else 1000.0
    return max(2.0, 2 * e2e / 1000)


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

    def estimate(remaining_ladders: int, remaining_levels: int, settle_s: float) -> float:
        per_level = settle_s + plan.level_duration_s
        return (
            clock()
            - started
            + remaining_ladders * (load_s + plan.ladder_seconds())
            + remaining_levels * (load_s + per_level)
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

        out = folder / f"run-{step}"
        result = launch(config, store=store, out_dir=out, on_progress=forward)
        runs.append(result)
        if result.timings.load_s:
            load_s = result.timings.load_s
        if result.status != RunStatus.COMPLETED:
            cause = result.failure.cause if result.failure else result.status.value
            notes.append(f"{what}: run {result.run_id} {result.status.value} ({cause})")
            return None
        return result

    try:
        first_top: CalibrationLevel | None = None
        default_settle = plan.settle_s or 2.0
        for index, mix in enumerate(plan.mixes):
            what = f"ladder {mix.prompt_tokens}/{mix.output_tokens}"
            total = estimate(len(plan.mixes) - index, len(plan.settled_fractions), default_settle)
            result = run_one(ladder_config(plan, mix), what, plan.ladder_seconds(), total)
            if result is None:
                continue
            stages = [level_of(result, phase, "ladder") for phase in result.phases]
            stages = [s for s in stages if s is not None]
            levels.extend(stages)
            if index == 0 and stages:
                first_top = max(stages, key=lambda s: s.request_throughput_rps)
        if first_top is None:
            notes.append("no settled levels: the first mix's ladder measured nothing")
        else:
            settle_s = _settle_seconds(plan, first_top)
            best = first_top.request_throughput_rps
            mix = plan.mixes[0]
            for index, fraction in enumerate(plan.settled_fractions):
                rate = best * fraction
                what = f"settled {rate:.3g} req/s ({fraction:g} x {best:.3g})"
                total = estimate(0, len(plan.settled_fractions) - index, settle_s)
                config = settled_config(plan, mix, rate, settle_s)
                result = run_one(config, what, settle_s + plan.level_duration_s, total)
                if result is None:
                    continue
                level = settled_level(result, folder / f"run-{step}" / "records.jsonl", settle_s)
                if level is None:
                    notes.append(f"{what}: fewer than 2 requests after the settle time")
                else:
                    levels.append(level)
            notes.append(f"settle time {settle_s:.3g} s before each settled level is judged")
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
        device_type=_device_type(reference),
        precision_class=precision_class(plan.precision),
        dtype=plan.precision.dtype,
        tensor_parallel_size=reference.config.parallelism.tensor_parallel_size,
        levels=levels,
        run_ids=[r.run_id for r in runs],
        environment=reference.environment,
        budget_s=plan.budget_s,
        elapsed_s=clock() - started,
        notes=notes,
    )


__all__ = [
    "MAX_BUDGET_S",
    "CalibrationPlan",
    "CalibrationProgress",
    "Mix",
    "engine_limits",
    "ladder_config",
    "parse_mix",
    "parse_numbers",
    "run_calibration",
    "settled_config",
    "settled_level",
]
