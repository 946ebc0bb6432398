"""The serving model's calibration: measured runs read as step-time observations, the factors
fitted on them, and the leave-one-out step and capacity errors that give its interval."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from advisor.sizing.configurations import Deployment
from advisor.sizing.engine_model.prefix import (
    TrafficShape,
    caches_prefixes,
    prefix_reuse,
)
from advisor.sizing.engine_model.step import EngineShape
from advisor.sizing.engine_shape import registered_backend
from advisor.sizing.measured import run_gpu_name
from advisor.sizing.mechanics import mechanisms_of
from advisor.sizing.serving_sim import (
    CAPACITY_PRECISION,
    CONTINUOUS_BATCHING,
    DEFAULT_COMPUTE_FACTOR,
    DEFAULT_MEMORY_FACTOR,
    DEFAULT_OVERHEAD_MS,
    INTERVAL_QUANTILES,
    MIN_COMPUTE_FACTOR,
    MIN_MEMORY_FACTOR,
    SEEDS,
    CapacitySearch,
    Factors,
    Workload,
    engine_shape,
    median_capacity,
)
from advisor.workload.architectures import Architecture, architecture_for
from advisor.workload.gpus import GPUS
from bench.core.config import (
    SLO,
    GenerateWorkload,
    LengthDistribution,
)
from bench.core.pattern_reports import CapacityReport
from bench.core.schema import RunResult, RunStatus, ValidityStatus
from bench.core.strict import Strict

# --------------------------------------------------------------------------- calibration

TRANSIENT_PHASES = ("burst", "recovery")
"""Pulse phases (the 200% burst and the recovery behind it): no steady state to compare."""
PrecisionClass = str


def engine_family(framework: str) -> str:
    """The calibration's engine key: `openai` runs are `vllm serve` in every shipped run."""
    return "vllm" if framework == "openai" else framework


class StepObservation(Strict):
    """One measured level of a run read as one step time (see the module docstring)."""

    run_id: str
    phase: str
    over: Literal["rate", "concurrency"]
    level: float
    decode: float = Field(description="Sequences decoding per step of one replica.")
    prefill: float = Field(description="Prompt tokens prefilled per step of one replica.")
    context: float = Field(description="KV tokens read per step of one replica.")
    read_ms: float
    compute_ms: float
    measured_step_ms: float = Field(description="The level's TPOT p50.")
    front_end_ms: float | None = Field(
        None, description="One request at a time only: TTFT p50 minus one prefill step."
    )


@dataclass(frozen=True)
class RunShape:
    """What the model needs from one measured run: its engine shape and workload."""

    run: RunResult
    gpu: str
    family: str
    precision_class: PrecisionClass
    shape: EngineShape
    prompt: LengthDistribution
    output: LengthDistribution
    replicas: int


def _engine_args(run: RunResult) -> dict:
    """The options the run's engine ran with (a launched server's own, as its backend reads
    them), plus the limits the engine reported where the options left them to it."""
    args = dict(run.config.engine_args)
    backend = registered_backend(run.config.backend)
    if backend is not None:
        args.update(backend.engine_options(run.config.engine_args))
    reported = run.engine.extra if run.engine is not None else {}  # the engine's own names
    for key in ("max_num_batched_tokens", "max_num_seqs"):
        value = reported.get(key)
        if isinstance(value, int) and key not in args:
            args[key] = value
    return args


MAX_PROMPT_SPREAD = 0.25
"""A run whose prompt lengths spread wider than this share of their mean is not fitted on."""


def run_shape(
    run: RunResult, require_valid: bool = True, architecture: Architecture | None = None
) -> RunShape | None:
    """The run's shape when the model covers it: a VALID completed generate run of a
    continuous-batching engine on a catalogued GPU with a known model size, its prompts within
    `MAX_PROMPT_SPREAD` of their mean, not a trace replay; else None.
    `require_valid=False` also takes an INVALID one: only to predict a held-out search that did
    not converge (advisor/sizing/unseen_gpu.py says so beside it), never to fit or size.
    `architecture` replaces the model's own (a check of what the engine model would predict
    with one of its mechanics left out: advisor/sizing/mechanism_validation.py)."""
    config = run.config
    if not isinstance(config.workload, GenerateWorkload):
        return None
    if engine_family(config.backend) not in CONTINUOUS_BATCHING:
        return None
    if config.load.pattern == "replay":
        # a trace's own lengths and shared blocks drive the run; the workload's lengths (the
        # defaults) do not describe it, so the model's shape of it would be wrong
        return None
    if run.status != RunStatus.COMPLETED or (
        require_valid and run.validity is not None and run.validity.status != ValidityStatus.VALID
    ):
        return None
    prompt_spread = config.workload.prompt_tokens
    if prompt_spread.spread > MAX_PROMPT_SPREAD * prompt_spread.mean:
        # the model gives every request the mean prompt's attention work (keys per prefilled
        # token from the mean); prompts spread this wide (a long-context length sweep) are
        # checked request by request instead (advisor/sizing/long_context.py)
        return None
    gpu_name = run_gpu_name(run)
    gpu = GPUS.get(gpu_name) if gpu_name else None
    if architecture is None:
        architecture, _ = architecture_for(config.model)
    if gpu is None or architecture is None or not architecture.parameters:
        return None
    deployment = Deployment(
        framework=config.backend, parallelism=config.parallelism, precision=config.precision
    )
    traffic = TrafficShape.of_workload(config.workload)
    prompt = traffic.served_prompt()
    reuse = prefix_reuse(traffic, caches_prefixes(config.backend, config.prefix_caching))
    shape = engine_shape(
        architecture.parameters,
        architecture,
        gpu,
        deployment,
        _engine_args(run),
        reuse=reuse,
        prompt_tokens=float(prompt.mean),
    )
    if shape is None:
        return None
    return RunShape(
        run=run,
        gpu=gpu.name,
        family=engine_family(config.backend),
        precision_class=deployment.precision_key,
        shape=shape,
        prompt=prompt,
        output=config.workload.output_tokens,
        replicas=config.parallelism.replicas,
    )


def steady_phases(run: RunResult):
    """(phase, over, level) of every steady measured level of a run (pulse transients out)."""
    for phase in run.phases:
        if phase.summary is None or any(word in phase.name for word in TRANSIENT_PHASES):
            continue
        if phase.strategy in ("concurrency", "rate") and phase.summary.tpot_ms is not None:
            yield phase, phase.strategy, float(phase.target)


def observations(run_shape_: RunShape) -> list[StepObservation]:
    """The run's levels as step-time observations."""
    shape = run_shape_.shape
    prompt, output = float(run_shape_.prompt.mean), max(float(run_shape_.output.mean), 1.0)
    out: list[StepObservation] = []
    for phase, over, level in steady_phases(run_shape_.run):
        summary = phase.summary
        tpot = summary.tpot_ms.p50 if summary.tpot_ms else None
        if not tpot or tpot <= 0:
            continue
        if over == "concurrency":
            decode = min(level / run_shape_.replicas, shape.max_num_seqs)
            prefill = min(decode * prompt / output, shape.token_budget)
        else:
            rate = level / run_shape_.replicas / 1e3  # per ms
            e2e = summary.e2e_ms.mean if summary.e2e_ms else None
            ttft = summary.ttft_ms.mean if summary.ttft_ms else 0.0
            if e2e is None:
                continue
            decode = min(rate * max(e2e - ttft, 0.0), shape.max_num_seqs)
            prefill = min(rate * tpot * prompt, shape.token_budget)
        context = decode * (prompt + output / 2)
        front = None
        if over == "concurrency" and level == 1 and summary.ttft_ms is not None:
            front = summary.ttft_ms.p50
        out.append(
            StepObservation(
                run_id=run_shape_.run.run_id,
                phase=phase.name,
                over=over,
                level=level,
                decode=decode,
                prefill=prefill,
                context=context,
                read_ms=shape.read_ms(context, decode + prefill),
                compute_ms=shape.compute_ms(decode + prefill, context, prefill),
                measured_step_ms=tpot,
                front_end_ms=front,
            )
        )
    return out


class Calibration(Strict):
    """Factors for one (engine, GPU type, precision class) and where they come from."""

    factors: Factors
    calibrated: bool
    runs: list[str] = Field(default_factory=list, description="Run ids fitted on.")
    levels: int = 0
    basis: str = Field(description="What the factors were fitted on, in words.")
    step_errors: list[float] | None = Field(
        None,
        description="A calibration record's leave-one-level-out log step errors (the interval); "
        "None = the leave-one-run-out errors of the runs it was fitted on.",
    )
    longest_prompt_tokens: float | None = Field(
        None,
        description="The longest mean prompt among what was fitted on: past it, long-context "
        "attention is extrapolated (docs/capacity-model.md, Long context).",
    )
    other_precisions: bool = Field(
        False,
        description="Fitted on runs of the engine at other precision classes only: the one "
        "asked for was not measured on this GPU.",
    )


def fit_factors(observed: Sequence[StepObservation], front_end: Sequence[float] = ()) -> Factors:
    """Bounded least squares of step = overhead + memory x read + compute x compute, in
    relative error (overhead non-negative; memory and compute no faster than the GPU runs:
    MIN_MEMORY_FACTOR, MIN_COMPUTE_FACTOR); fewer than three levels scale the default factors
    by one median ratio, held to the same bounds."""
    if len(observed) >= 3:
        from scipy.optimize import lsq_linear

        matrix = np.array(
            [[1.0, o.read_ms, o.compute_ms] for o in observed], dtype=float
        ) / np.array([[o.measured_step_ms] for o in observed])
        # No faster GEMMs or weight reads than the GPU runs them: levels dominated by weight
        # reads leave `compute` loosely pinned, and a free fit made a record's prefill 95% of
        # the datasheet peak (27% short on long prompts, docs/capacity-model.md); bounding
        # compute alone then pushed `memory` past the datasheet bandwidth.
        lower = [0.0, MIN_MEMORY_FACTOR, MIN_COMPUTE_FACTOR]
        solution = lsq_linear(matrix, np.ones(len(observed)), bounds=(lower, np.inf)).x
        overhead, memory, compute = (float(v) for v in solution)
    else:
        ratio = statistics.median(
            o.measured_step_ms
            / (
                DEFAULT_OVERHEAD_MS
                + DEFAULT_MEMORY_FACTOR * o.read_ms
                + DEFAULT_COMPUTE_FACTOR * o.compute_ms
            )
            for o in observed
        )
        overhead, memory, compute = (
            DEFAULT_OVERHEAD_MS * ratio,
            DEFAULT_MEMORY_FACTOR * ratio,
            DEFAULT_COMPUTE_FACTOR * ratio,
        )
    factors = within_ceilings(Factors(overhead_ms=overhead, memory=memory, compute=compute))
    return factors.model_copy(
        update={"front_end_ms": statistics.median(front_end) if front_end else 0.0}
    )


def within_ceilings(factors: Factors) -> Factors:
    """`factors` with no weight read or GEMM faster than the GPU runs them (MIN_MEMORY_FACTOR,
    MIN_COMPUTE_FACTOR): what every fit and every rescaling of one is held to."""
    return factors.model_copy(
        update={
            "memory": max(factors.memory, MIN_MEMORY_FACTOR),
            "compute": max(factors.compute, MIN_COMPUTE_FACTOR),
        }
    )


def _front_end(shapes: Sequence[RunShape], factors: Factors) -> list[float]:
    """TTFT p50 at one request at a time minus the simulated prefill step of that prompt."""
    values = []
    for item in shapes:
        for o in observations(item):
            if o.front_end_ms is not None:
                prompt = float(item.prompt.mean)
                step = item.shape.step_ms(factors, 0, prompt, prompt)
                values.append(max(0.0, o.front_end_ms - step))
    return values


def calibrate(
    family: str, gpu: str, precision_class: str, shapes: Sequence[RunShape]
) -> Calibration:
    """Factors from the runs of the same engine family and GPU, the same precision class first."""
    # a run of a mechanic checks it and is not fitted on (advisor/sizing/mechanics.py)
    same_engine = [
        s for s in shapes if s.family == family and s.gpu == gpu and not mechanisms_of(s.run)
    ]
    same_class = [s for s in same_engine if s.precision_class == precision_class]
    for pool, words, other in (
        (same_class, f"{family} on {gpu}, {precision_class}", False),
        (
            same_engine,
            f"{family} on {gpu}, other precisions ({precision_class} not measured)",
            True,
        ),
    ):
        by_run = [(item, observations(item)) for item in pool]
        observed = [o for _, found in by_run for o in found]
        if observed:
            factors = fit_factors(observed)
            factors = factors.model_copy(
                update={"front_end_ms": _median_or(_front_end(pool, factors), 0.0)}
            )
            runs = sorted({o.run_id for o in observed})
            return Calibration(
                factors=factors,
                calibrated=True,
                runs=runs,
                levels=len(observed),
                longest_prompt_tokens=max(item.prompt.mean for item, found in by_run if found),
                basis=f"fitted on {len(observed)} measured level(s) of {len(runs)} run(s): {words}",
                other_precisions=other,
            )
    return Calibration(
        factors=Factors(),
        calibrated=False,
        basis=f"uncalibrated: no measured run of {family} on {gpu}; default efficiencies",
    )


def _median_or(values: Sequence[float], default: float) -> float:
    return statistics.median(values) if values else default


def step_errors(
    shapes: Sequence[RunShape], family: str, gpu: str, precision_class: str
) -> list[float]:
    """log(measured / predicted) step time of every level of the runs `calibrate` would use,
    each predicted from factors fitted without its own run (leave-one-out)."""
    used = calibrate(family, gpu, precision_class, shapes)
    errors: list[float] = []
    for item in shapes:
        if item.run.run_id not in used.runs:
            continue
        others = [s for s in shapes if s.run.run_id != item.run.run_id]
        factors = calibrate(family, gpu, precision_class, others).factors
        for o in observations(item):
            predicted = item.shape.step_ms(factors, o.decode, o.prefill, o.context, o.decode)
            errors.append(math.log(o.measured_step_ms / predicted))
    return errors


def uncalibrated_step_errors(shapes: Sequence[RunShape]) -> list[float]:
    """log(measured / predicted) step time of every level with the default factors."""
    return [
        math.log(
            o.measured_step_ms
            / item.shape.step_ms(Factors(), o.decode, o.prefill, o.context, o.decode)
        )
        for item in shapes
        for o in observations(item)
    ]


def scaled(factors: Factors, scale: float) -> Factors:
    """Every step-time factor times `scale` (the interval's slower or faster engine)."""
    return factors.model_copy(
        update={
            "overhead_ms": factors.overhead_ms * scale,
            "memory": factors.memory * scale,
            "compute": factors.compute * scale,
        }
    )


def error_scales(errors: Sequence[float]) -> tuple[float, float]:
    """(slow, fast) step-time scales: exp of the 90th and 10th percentile of log(measured /
    predicted) step errors, never inside 1 (no errors: 1, 1)."""
    if len(errors) < 2:
        return 1.0, 1.0
    low_q, high_q = np.quantile(errors, INTERVAL_QUANTILES)
    return math.exp(max(float(high_q), 0.0)), math.exp(min(float(low_q), 0.0))


def capacity_with_interval(
    shape: EngineShape,
    factors: Factors,
    workloads: Sequence[Workload],
    slo: SLO,
    percentile: str,
    attainment_target: float,
    replicas: int,
    errors: Sequence[float],
    residuals: Sequence[float] = (),
) -> tuple[float, float, float, list[CapacitySearch]]:
    """(capacity, low, high, the searches): the median capacity over the request streams; low
    and high with the step time scaled by `error_scales` (three streams, 2% precision), widened
    to the streams' own spread and to `residuals` (`widen_to_residuals`)."""
    args = (slo, percentile, attainment_target, replicas)
    rate, searches = median_capacity(shape, factors, workloads, *args)
    slow, fast = error_scales(errors)
    seeds = [s.max_rate_rps for s in searches]
    low = high = rate
    if rate > 0 and slow > 1:
        low, _ = median_capacity(
            shape, scaled(factors, slow), workloads[:3], *args, rate / slow, 2 * CAPACITY_PRECISION
        )
    if rate > 0 and fast < 1:
        high, _ = median_capacity(
            shape, scaled(factors, fast), workloads[:3], *args, rate / fast, 2 * CAPACITY_PRECISION
        )
    low, high = widen_to_residuals(rate, low, high, residuals)
    return rate, min(low, *seeds, rate), max(high, *seeds, rate), searches


def widen_to_residuals(
    rate: float, low: float, high: float, residuals: Sequence[float]
) -> tuple[float, float]:
    """(low, high) widened so that the interval also holds the capacity the model would have
    missed by any of `residuals` ((predicted - measured) / measured of measured searches it did
    not see, `capacity_errors`): the step errors alone miss what a whole search adds (queues
    near the edge, the tail a 500-request probe sees), which the shipped settled searches show
    as capacities below the step-error interval. As a jackknife+ interval does, with the
    extremes of the residuals (few searches: no quantile in between is estimable)."""
    if rate <= 0 or not residuals:
        return low, high
    over, under = max(max(residuals), 0.0), min(min(residuals), 0.0)
    return min(low, rate / (1 + over)), max(high, rate / (1 + under))


def run_capacity(
    item: RunShape, factors: Factors, errors: Sequence[float], residuals: Sequence[float] = ()
) -> tuple[float, ...]:
    """(predicted, low, high) capacity of a measured capacity search's run under its own SLO
    and rule; `errors` = log step errors and `residuals` = capacity errors on other searches,
    for the interval."""
    load = item.run.config.load
    requests = item.run.pattern_report.probe_requests or 500
    workloads = [
        Workload(item.prompt, item.output, requests, load.arrival, seed, requests)
        for seed in range(SEEDS)
    ]
    rate, low, high, _ = capacity_with_interval(
        item.shape,
        factors,
        workloads,
        item.run.config.slo,
        load.percentile,
        load.attainment_target,
        item.replicas,
        errors,
        residuals,
    )
    return rate, low, high


def capacity_errors(shapes: Sequence[RunShape], calibrated: bool) -> list[float]:
    """(predicted - measured) / measured of every capacity search among `shapes`, leave-one-out
    when calibrated (the factors fitted on the other runs), else with the default factors."""
    errors = []
    for item in shapes:
        report = item.run.pattern_report
        if not isinstance(report, CapacityReport) or report.over != "rate":
            continue
        if not report.max_rate_rps:
            continue
        factors = Factors()
        if calibrated:
            others = [s for s in shapes if s.run.run_id != item.run.run_id]
            factors = calibrate(item.family, item.gpu, item.precision_class, others).factors
        rate, _, _ = run_capacity(item, factors, ())
        errors.append((rate - report.max_rate_rps) / report.max_rate_rps)
    return errors


_CAPACITY_ERRORS: dict[tuple[tuple[str, ...], bool], tuple[float, ...]] = {}


def capacity_residuals(shapes: Sequence[RunShape], calibrated: bool) -> tuple[float, ...]:
    """`capacity_errors`, cached per set of runs (every prediction of a plan reuses them)."""
    key = (tuple(s.run.run_id for s in shapes), calibrated)
    if key not in _CAPACITY_ERRORS:
        _CAPACITY_ERRORS[key] = tuple(capacity_errors(shapes, calibrated))
    return _CAPACITY_ERRORS[key]


def capacity_error(shapes: Sequence[RunShape], calibrated: bool) -> float | None:
    """Median |relative error| of `capacity_errors` (cached per set of runs)."""
    errors = capacity_residuals(shapes, calibrated)
    return statistics.median(abs(e) for e in errors) if errors else None
