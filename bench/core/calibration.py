"""The calibration record: what `bench calibrate` measured on one engine, device and precision
class, as data the advisor fits its engine model on (bench measures and stores; it never fits).

A record holds one `CalibrationLevel` per measured level: the concurrency ladder's stages over a
few prompt/output mixes (closed loop, the engine at a held batch) and the settled rate levels
near the knee (open loop, judged only after the requests in flight levelled off: the sustained
levels a capacity prediction is calibrated on). Each level keeps its workload shape, its load,
the engine limits it ran with and its TTFT/TPOT/E2E percentiles and throughput, plus the run it
came from, so a record can be checked against the store and re-fitted later.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import Field

from bench.core.config import SLO, CapacityLoad, PrecisionConfig
from bench.core.fingerprint import StoredFingerprint
from bench.core.limits import MAX_CONCURRENCY
from bench.core.schema import Percentiles, PhaseResult, RunResult
from bench.core.strict import Strict, StrictInput

CALIBRATION_SCHEMA_VERSION = 1
"""Version of the CalibrationRecord layout (a reader refuses a newer one)."""

CPU_DEVICE = "cpu"
"""The `device_type` of a record measured on the CPU (no GPU)."""

ENGINE_LIMIT_KEYS = ("max_num_seqs", "max_num_batched_tokens", "max_model_len")
"""Engine options a level keeps: the limits the engine model's batch and token budget read."""


def precision_class(precision: PrecisionConfig) -> str:
    """The calibration's precision partition: weight and KV-cache formats, not the dtype (the
    same words as the advisor's `Deployment.precision_key`; a test holds the two equal)."""
    weights = "fp8 weights" if precision.quantization == "fp8" else "16-bit weights"
    return weights + (" + fp8 KV" if precision.kv_cache_dtype == "fp8" else "")


def new_calibration_id() -> str:
    return "cal-" + uuid.uuid4().hex[:12]


MAX_BUDGET_S = 600.0
"""The campaign's budget at most: ten minutes on the user's machine."""


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
        max_length=16,
        description="Prompt/output mixes of the ladder; the first also gets the settled levels.",
    )
    ladder: list[Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)]] = Field(
        default_factory=lambda: [1, 8, 32, 128],
        min_length=1,
        max_length=32,
        description="Concurrency of each ladder stage.",
    )
    stage_duration_s: float = Field(10.0, gt=0, le=MAX_BUDGET_S)
    settled_start_fraction: float = Field(
        0.6,
        gt=0,
        le=2,
        description="The settled search's first rate, as a fraction of the first mix's best "
        "ladder throughput (requests/s).",
    )
    settled_probes: int = Field(
        5, ge=0, le=24, description="Settled rate levels at most (0 = ladder only)."
    )
    slo: SLO | None = Field(
        None,
        description="The SLO whose knee the settled levels find; none = derived from the ladder.",
    )
    settle_s: float | None = Field(
        None,
        gt=0,
        le=MAX_BUDGET_S,
        description="Seconds of arrivals before a settled level is judged; none = twice the "
        "end-to-end time the SLO allows (SLO.e2e_bound_ms), at least 2 s.",
    )
    level_duration_s: float = Field(
        15.0,
        gt=0,
        le=MAX_BUDGET_S,
        description="Judged seconds of each settled level at its rate (sets its request count).",
    )
    budget_s: float = Field(MAX_BUDGET_S, gt=0, le=MAX_BUDGET_S, description="Time budget (s).")
    max_model_len: int | None = Field(
        None, gt=0, description="Engine context length (engine_args.max_model_len) if not set."
    )

    def ladder_seconds(self) -> float:
        """Planned seconds of one ladder run, the engine load left out."""
        return len(self.ladder) * self.stage_duration_s

    def planned_runs(self) -> int:
        return len(self.mixes) + (1 if self.settled_probes else 0)


class CalibrationLevel(Strict):
    """One measured level of a calibration run."""

    run_id: str = Field(description="The stored run the level is a phase of.")
    phase: str
    kind: Literal["ladder", "settled", "open"] = Field(
        description="ladder: a closed-loop level; settled: an open-loop rate level judged after "
        "its settle time (sustained load); open: an open-loop level judged from its first "
        "request (a stored run's, not `bench calibrate`'s)."
    )
    over: Literal["concurrency", "rate"]
    level: float = Field(gt=0, description="Requests in flight, or requests/s.")
    prompt_tokens: float = Field(ge=0, description="Mean prompt length of the level's workload.")
    output_tokens: float = Field(ge=0, description="Mean output length of the level's workload.")
    engine_limits: dict[str, int] = Field(
        default_factory=dict,
        description="max_num_seqs / max_num_batched_tokens / max_model_len the engine ran with, "
        "where the run's options or the engine said.",
    )
    requests: int = Field(ge=0)
    ttft_ms: Percentiles | None = None
    tpot_ms: Percentiles | None = None
    e2e_ms: Percentiles | None = None
    request_throughput_rps: float
    output_throughput_tok_s: float


class CalibrationRecord(Strict):
    """A calibration of one (engine, device type, precision class): levels, runs, environment."""

    schema_version: int = CALIBRATION_SCHEMA_VERSION
    calibration_id: str = Field(default_factory=new_calibration_id)
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())
    engine: str = Field(description="Backend name of the runs (vllm, openai, ...).")
    model: str = Field(description="Model preset or checkpoint path the levels ran.")
    device_type: str = Field(description="GPU model name (NVML), or `cpu`.")
    precision_class: str
    dtype: str
    tensor_parallel_size: int = 1
    levels: list[CalibrationLevel] = Field(default_factory=list)
    run_ids: list[str] = Field(default_factory=list, description="Runs the levels came from.")
    environment: StoredFingerprint = Field(None, description="Fingerprint of the first run.")
    budget_s: float = Field(gt=0, description="The campaign's time budget.")
    elapsed_s: float = Field(ge=0, description="What the campaign took.")
    notes: list[str] = Field(default_factory=list, description="Levels skipped and why.")
    plan: CalibrationPlan | None = Field(
        None, description="The plan that measured it (`bench calibrate --check` re-runs part)."
    )

    @property
    def settled_levels(self) -> list[CalibrationLevel]:
        return [level for level in self.levels if level.kind == "settled"]


def engine_limits(run: RunResult) -> dict[str, int]:
    """The limits the run's engine ran with: its options, else what the engine reported."""
    limits: dict[str, int] = {}
    reported = run.engine.extra if run.engine is not None else {}
    for key in ENGINE_LIMIT_KEYS:
        value = run.config.engine_args.get(key, reported.get(key))
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            limits[key] = value
    return limits


def level_of(
    run: RunResult, phase: PhaseResult, kind: Literal["ladder", "settled"]
) -> CalibrationLevel | None:
    """The phase as a calibration level; None when it served no request or has no level."""
    workload = run.config.workload
    prompt = getattr(getattr(workload, "prompt_tokens", None), "mean", None)
    output = getattr(getattr(workload, "output_tokens", None), "mean", None)
    summary = phase.summary
    if summary.successful == 0 or phase.target <= 0 or prompt is None or output is None:
        return None
    return CalibrationLevel(
        run_id=run.run_id,
        phase=phase.name,
        kind=kind,
        over=phase.strategy,
        level=phase.target,
        prompt_tokens=float(prompt),
        output_tokens=float(output),
        engine_limits=engine_limits(run),
        requests=summary.requests,
        ttft_ms=summary.ttft_ms,
        tpot_ms=summary.tpot_ms,
        e2e_ms=summary.e2e_ms,
        request_throughput_rps=summary.request_throughput_rps,
        output_throughput_tok_s=summary.output_throughput_tok_s,
    )


TRANSIENT_WORDS = ("burst", "recovery", "-settle")
"""Phases with no steady level: a pulse's burst and recovery, a settle phase's fill-up."""


def run_levels(run: RunResult) -> list[CalibrationLevel]:
    """A stored run's steady phases as levels: closed loop -> ladder; the rate probes of a
    settled capacity search -> settled; other open-loop phases -> open."""
    settled_search = isinstance(run.config.load, CapacityLoad) and run.config.load.probes_settled
    levels = []
    for phase in run.phases:
        if any(word in phase.name for word in TRANSIENT_WORDS):
            continue
        if phase.strategy == "concurrency":
            kind: Literal["ladder", "settled", "open"] = "ladder"
        else:
            kind = "settled" if settled_search else "open"
        level = level_of(run, phase, kind)
        if level is not None:
            levels.append(level)
    return levels


def device_type_of(run: RunResult) -> str:
    """The GPU model a run measured on (NVML name), or `cpu`."""
    if run.config.device == "cpu" or run.environment is None:
        return CPU_DEVICE
    return run.environment.primary_gpu_name or CPU_DEVICE


def record_from_runs(runs: list[RunResult], budget_s: float = 1.0) -> CalibrationRecord:
    """A record derived from stored runs of one engine, model, device type and precision class
    (the first run's; the others must match: ValueError names one that does not)."""
    if not runs:
        raise ValueError("record_from_runs needs at least one run")
    first = runs[0]
    key = _run_key(first)
    for run in runs[1:]:
        if _run_key(run) != key:
            raise ValueError(f"run {run.run_id} is of {_run_key(run)}, not {key}")
    return CalibrationRecord(
        engine=first.config.backend,
        model=first.config.model,
        device_type=device_type_of(first),
        precision_class=precision_class(first.config.precision),
        dtype=first.config.precision.dtype,
        tensor_parallel_size=first.config.parallelism.tensor_parallel_size,
        levels=[level for run in runs for level in run_levels(run)],
        run_ids=[run.run_id for run in runs],
        environment=first.environment,
        budget_s=budget_s,
        elapsed_s=0.0,
        notes=["derived from stored runs (not a `bench calibrate` campaign)"],
    )


def _run_key(run: RunResult) -> tuple[str, str, str, str, int]:
    return (
        run.config.backend,
        run.config.model,
        device_type_of(run),
        precision_class(run.config.precision),
        run.config.parallelism.tensor_parallel_size,
    )


__all__ = [
    "CALIBRATION_SCHEMA_VERSION",
    "CPU_DEVICE",
    "MAX_BUDGET_S",
    "CalibrationLevel",
    "CalibrationPlan",
    "CalibrationRecord",
    "Mix",
    "device_type_of",
    "engine_limits",
    "level_of",
    "new_calibration_id",
    "precision_class",
    "record_from_runs",
    "run_levels",
]
