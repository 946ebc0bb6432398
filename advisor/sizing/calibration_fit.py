"""The serving model's factors fitted on a `bench calibrate` record (bench/core/calibration.py),
and the note of which calibration sized a figure (`CalibrationBasis`).

A record's levels are read as step-time observations by the serving model's own rules (a
closed-loop level runs min(concurrency, max_num_seqs) sequences; an open-loop level runs rate x
decode time of them by Little's law; the TPOT p50 is the step time). The three factors are the
serving model's least-squares fit over every level (the ladder spans the batch sizes the fit
needs), then scaled by the median measured / predicted step time of the settled levels: the
sustained levels near the knee are the ones a capacity prediction must match, and an empty
engine overstates capacity. The interval's step errors are leave-one-level-out.

A record measured on the CPU is fitted against nominal CPU rates (`CPU_NOMINAL`): the factors
carry the real ones, so a CPU prediction is only as good as its own record.
"""

from __future__ import annotations

import math
import shlex
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field

from advisor.sizing import measured
from advisor.sizing.configurations import Deployment
from advisor.sizing.measured import CALIBRATION_SUFFIX
from advisor.sizing.serving_calibration import within_ceilings
from advisor.sizing.serving_model import (
    CAPACITY_PRECISION,
    SEEDS,
    Calibration,
    EngineShape,
    Factors,
    StepObservation,
    Workload,
    capacity_with_interval,
    engine_family,
    engine_shape,
    fit_factors,
    scaled,
)
from advisor.workload.architectures import architecture_for
from advisor.workload.gpus import GpuSpec, find_gpu
from advisor.workload.profile import StageProfile
from bench.core.calibration import CPU_DEVICE, CalibrationLevel, CalibrationRecord
from bench.core.config import SLO, LengthDistribution, ParallelismConfig, PrecisionConfig
from bench.core.strict import Strict

CPU_NOMINAL = GpuSpec(
    name=CPU_DEVICE,
    memory_gb=16.0,
    memory_bandwidth_tb_s=0.02,
    dense_bf16_tflops=0.5,
    dense_fp16_tflops=0.5,
    fp8=False,
    source="nominal CPU rates (20 GB/s, 0.5 TFLOP/s): a record's fitted factors carry the real "
    "ones",
)


class CalibrationBasis(Strict):
    """Which calibration sized a figure: yours (a record in your store), shipped (a record in
    data/reference), or none (the uncalibrated defaults), for which engine and device."""

    source: Literal["yours", "shipped", "none"]
    engine: str
    device_type: str
    precision_class: str
    calibration_id: str | None = None
    run_ids: list[str] = Field(default_factory=list)
    levels: int = 0
    settled_levels: int = 0
    words: str = Field(description="The basis in one sentence, for page 1 and the app.")
    command: str | None = Field(
        None, description="The `bench calibrate` command line that would calibrate it (none)."
    )


class RecordFit(Strict):
    """A record's calibration: the factors, the leave-one-level-out log step errors, the basis."""

    calibration: Calibration
    step_errors: list[float]
    basis: CalibrationBasis


@dataclass(frozen=True)
class _Level:
    level: CalibrationLevel
    shape: EngineShape


def device_spec(device_type: str) -> GpuSpec | None:
    """The catalogue GPU of a record's device type, the nominal CPU for `cpu`, else None."""
    if device_type == CPU_DEVICE:
        return CPU_NOMINAL
    return find_gpu(device_type)


def record_deployment(record: CalibrationRecord) -> Deployment:
    return Deployment(
        framework=record.engine,
        parallelism=ParallelismConfig(tensor_parallel_size=record.tensor_parallel_size),
        precision=PrecisionConfig(dtype=record.dtype),  # type: ignore[arg-type]
    )


def level_shape(record: CalibrationRecord, limits: dict[str, int]) -> EngineShape | None:
    """The replica the record's engine ran, with a level's engine limits; None when the model's
    KV size or the device's rates are unknown."""
    gpu = device_spec(record.device_type)
    architecture, _ = architecture_for(record.model)
    if gpu is None or architecture is None or not architecture.parameters:
        return None
    return engine_shape(
        architecture.parameters, architecture, gpu, record_deployment(record), dict(limits)
    )


def _levels(record: CalibrationRecord) -> list[_Level]:
    out = []
    for level in record.levels:
        shape = level_shape(record, level.engine_limits)
        if shape is not None:
            out.append(_Level(level, shape))
    return out


def observation(item: _Level) -> StepObservation | None:
    """A level as one step time (the serving model's `observations` rule)."""
    level, shape = item.level, item.shape
    tpot = level.tpot_ms.p50 if level.tpot_ms else None
    if not tpot or tpot <= 0:
        return None
    prompt, output = level.prompt_tokens, max(level.output_tokens, 1.0)
    if level.over == "concurrency":
        decode = min(level.level, shape.max_num_seqs)
        prefill = min(decode * prompt / output, shape.token_budget)
    else:
        if level.e2e_ms is None:
            return None
        ttft = level.ttft_ms.mean if level.ttft_ms else 0.0
        rate = level.level / 1e3  # per ms
        decode = min(rate * max(level.e2e_ms.mean - ttft, 0.0), shape.max_num_seqs)
        prefill = min(rate * tpot * prompt, shape.token_budget)
    context = decode * (prompt + output / 2)
    front = None
    if level.over == "concurrency" and level.level == 1 and level.ttft_ms is not None:
        front = level.ttft_ms.p50
    return StepObservation(
        run_id=level.run_id,
        phase=level.phase,
        over=level.over,
        level=level.level,
        decode=decode,
        prefill=prefill,
        context=context,
        read_ms=shape.read_ms(context, decode + prefill),
        compute_ms=shape.compute_ms(decode + prefill, context, prefill),
        measured_step_ms=tpot,
        front_end_ms=front,
    )


def level_step_error(
    record: CalibrationRecord, level: CalibrationLevel, factors: Factors
) -> float | None:
    """log(measured / predicted) step time of one level under `factors`; None if unreadable."""
    shape = level_shape(record, level.engine_limits)
    if shape is None:
        return None
    item = _Level(level, shape)
    obs = observation(item)
    return None if obs is None else math.log(obs.measured_step_ms / _predicted(item, obs, factors))


def _predicted(item: _Level, obs: StepObservation, factors: Factors) -> float:
    return item.shape.step_ms(factors, obs.decode, obs.prefill, obs.context, obs.decode)


def fit_levels(pairs: Sequence[tuple[_Level, StepObservation]]) -> Factors:
    """Factors over every level, scaled to the settled levels' median, with the front end."""
    factors = fit_factors([obs for _, obs in pairs])
    settled = [(i, o) for i, o in pairs if i.level.kind == "settled"]
    if settled:
        ratio = statistics.median(
            o.measured_step_ms / _predicted(i, o, factors) for i, o in settled
        )
        # the settled levels' scale may not make GEMMs faster than the GPU runs them either
        factors = within_ceilings(scaled(factors, ratio))
    fronts = [
        max(0.0, o.front_end_ms - i.shape.step_ms(factors, 0, i.level.prompt_tokens, 0))
        for i, o in pairs
        if o.front_end_ms is not None
    ]
    return factors.model_copy(update={"front_end_ms": statistics.median(fronts) if fronts else 0.0})


def _pairs(record: CalibrationRecord) -> list[tuple[_Level, StepObservation]]:
    pairs = []
    for item in _levels(record):
        obs = observation(item)
        if obs is not None:
            pairs.append((item, obs))
    return pairs


def fit_record(
    record: CalibrationRecord, source: Literal["yours", "shipped"] = "yours"
) -> RecordFit | None:
    """The record's factors and interval errors; None when none of its levels can be read."""
    pairs = _pairs(record)
    if not pairs:
        return None
    factors = fit_levels(pairs)
    errors = []
    if len(pairs) >= 4:  # leave one level out; fewer would fit the rest on too little
        for index, (item, obs) in enumerate(pairs):
            rest = fit_levels(pairs[:index] + pairs[index + 1 :])
            errors.append(math.log(obs.measured_step_ms / _predicted(item, obs, rest)))
    settled = sum(1 for item, _ in pairs if item.level.kind == "settled")
    where = "your store" if source == "yours" else "data/reference"
    words = (
        f"calibrated by `bench calibrate` record {record.calibration_id} ({where}): "
        f"{record.engine} on {record.device_type}, {record.precision_class}; {len(pairs)} "
        f"levels ({settled} settled) of {len(record.run_ids)} runs, {record.created_at[:10]}"
    )
    calibration = Calibration(
        factors=factors,
        calibrated=True,
        runs=list(record.run_ids),
        levels=len(pairs),
        basis=words,
        step_errors=errors,
        longest_prompt_tokens=max(item.level.prompt_tokens for item, _ in pairs),
    )
    basis = CalibrationBasis(
        source=source,
        engine=record.engine,
        device_type=record.device_type,
        precision_class=record.precision_class,
        calibration_id=record.calibration_id,
        run_ids=list(record.run_ids),
        levels=len(pairs),
        settled_levels=settled,
        words=words,
    )
    return RecordFit(calibration=calibration, step_errors=errors, basis=basis)


def calibrate_command(engine: str, model: str, device_type: str) -> str:
    """The command line that calibrates an engine on this machine's device."""
    device = " --device cpu" if device_type == CPU_DEVICE else ""
    return f"python -m bench calibrate --backend {engine} --model {shlex.quote(model)}{device}"


def record_matches(
    record: CalibrationRecord, engine: str, device_type: str, precision: str
) -> bool:
    """The record calibrates this engine (family), device (catalogue GPU) and precision class."""
    if engine_family(record.engine) != engine_family(engine):
        return False
    if record.precision_class != precision:
        return False
    if device_type == CPU_DEVICE or record.device_type == CPU_DEVICE:
        return record.device_type == device_type
    wanted, found = find_gpu(device_type), find_gpu(record.device_type)
    if wanted is not None and found is not None:
        return wanted.name == found.name
    return record.device_type == device_type


def calibration_for(
    engine: str,
    device_type: str,
    precision_class: str,
    model: str,
    yours: Sequence[CalibrationRecord] = (),
    shipped: Sequence[CalibrationRecord] = (),
) -> RecordFit | CalibrationBasis:
    """The newest matching record's fit, yours before shipped; else the uncalibrated basis,
    saying so and giving the `bench calibrate` command."""
    for source, pool in (("yours", yours), ("shipped", shipped)):
        matching = [r for r in pool if record_matches(r, engine, device_type, precision_class)]
        for record in sorted(matching, key=lambda r: r.created_at, reverse=True):
            fit = fit_record(record, source)  # type: ignore[arg-type]
            if fit is not None:
                return fit
    command = calibrate_command(engine, model, device_type)
    return CalibrationBasis(
        source="none",
        engine=engine,
        device_type=device_type,
        precision_class=precision_class,
        words=f"uncalibrated: no calibration of {engine} on {device_type} ({precision_class}); "
        f"default efficiencies. Calibrate it in about 10 minutes: {command}",
        command=command,
    )


SHIPPED_SUFFIX = CALIBRATION_SUFFIX
"""data/reference/<host>_<model>_<engine>_calibration.json: a shipped `bench calibrate` record."""


def shipped_records(reference_dir: Path | None = None) -> list[CalibrationRecord]:
    """The calibration records shipped in data/reference (a file that does not validate is an
    error: shipped data is checked by its tests)."""
    # read at call time, not bound at import: the default folder is the one place to point
    folder = reference_dir if reference_dir is not None else measured.DEFAULT_REFERENCE_DIR
    return [
        CalibrationRecord.model_validate_json(path.read_text(encoding="utf-8"))
        for path in sorted(folder.glob(f"*{SHIPPED_SUFFIX}"))
    ]


@dataclass(frozen=True)
class RecordSet:
    """The `bench calibrate` records a prediction may use: yours (the store) before shipped."""

    yours: tuple[CalibrationRecord, ...] = ()
    shipped: tuple[CalibrationRecord, ...] = ()

    def for_stage(
        self, stage: StageProfile, deployment: Deployment
    ) -> RecordFit | CalibrationBasis:
        return stage_calibration(stage, deployment, self.yours, self.shipped)


def stored_records(store: object | None) -> list[CalibrationRecord]:
    """The `bench calibrate` records in a results store, newest first ([] for None or a store
    stand-in that keeps no calibrations)."""
    from bench.storage.calibrations import list_calibrations
    from bench.storage.store import ResultStore

    return list_calibrations(store) if isinstance(store, ResultStore) else []


def stage_calibration(
    stage: StageProfile,
    deployment: Deployment,
    yours: Sequence[CalibrationRecord] = (),
    shipped: Sequence[CalibrationRecord] = (),
) -> RecordFit | CalibrationBasis:
    """`calibration_for` the stage's GPU type (`cpu` for a stage without one) and the
    deployment's engine and precision class; pass `fit.calibration` to the serving model's
    `predict_stage_capacity(..., calibration=...)`."""
    device = stage.gpu.type or CPU_DEVICE
    return calibration_for(
        deployment.framework,
        device,
        deployment.precision_key,
        stage.model or "MODEL",
        yours,
        shipped,
    )


class RecordCapacity(Strict):
    """A capacity predicted from a record's fit for one workload and SLO."""

    max_rate_rps: float
    low_rps: float
    high_rps: float
    seeds_max_rate_rps: list[float]
    basis: CalibrationBasis
    batch_at_capacity: float = Field(
        description="Mean sequences per step the simulation ran at the predicted capacity."
    )
    largest_calibrated_batch: float = Field(
        description="The largest batch among the record's levels (sequences per step)."
    )
    extrapolated: bool = Field(
        description="The capacity needs a batch beyond any the record measured: the step-time "
        "rule is extrapolated there, and is only as good as its physics."
    )


def predict_capacity(
    fit: RecordFit,
    record: CalibrationRecord,
    prompt_tokens: LengthDistribution,
    output_tokens: LengthDistribution,
    slo: SLO,
    attainment_target: float,
    probe_requests: int,
    arrival: Literal["poisson", "constant"] = "poisson",
    engine_limits: dict[str, int] | None = None,
) -> RecordCapacity | None:
    """The SLO capacity (one replica) of the record's engine for a workload, by the serving
    model's simulated capacity search with the record's factors; None without a shape."""
    limits = engine_limits if engine_limits is not None else record.levels[0].engine_limits
    shape = level_shape(record, limits)
    if shape is None:
        return None
    workloads = [
        Workload(prompt_tokens, output_tokens, probe_requests, arrival, seed, probe_requests)
        for seed in range(SEEDS)
    ]
    rate, low, high, searches = capacity_with_interval(
        shape,
        fit.calibration.factors,
        workloads,
        slo,
        slo.percentile,
        attainment_target,
        1,
        fit.step_errors,
    )
    near = [
        probe
        for search in searches
        for probe in search.probes
        if probe.level <= rate * (1 + 2 * CAPACITY_PRECISION)
    ]
    batch = max((probe.mean_batch for probe in near), default=0.0)
    largest = max((obs.decode for _, obs in _pairs(record)), default=0.0)
    return RecordCapacity(
        batch_at_capacity=batch,
        largest_calibrated_batch=largest,
        extrapolated=batch > largest * 1.25,
        max_rate_rps=rate,
        low_rps=low,
        high_rps=high,
        seeds_max_rate_rps=[s.max_rate_rps for s in searches],
        basis=fit.basis,
    )


__all__ = [
    "CPU_NOMINAL",
    "CalibrationBasis",
    "RecordCapacity",
    "RecordFit",
    "RecordSet",
    "calibrate_command",
    "calibration_for",
    "device_spec",
    "fit_record",
    "level_shape",
    "level_step_error",
    "observation",
    "predict_capacity",
    "record_matches",
    "shipped_records",
    "stage_calibration",
    "stored_records",
]
