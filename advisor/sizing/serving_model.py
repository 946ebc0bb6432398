"""An analytic serving model of a continuous-batching LLM engine: TTFT, TPOT and E2E
percentiles against load, and the SLO capacity, calibrated on measured runs of the same GPU.

One engine step of one replica (vLLM style: decodes first, then prefill chunks within a token
budget, `max_num_batched_tokens`) takes

    step ms = overhead + memory x (weights + KV of every running sequence) / bandwidth
                       + compute x 2 x parameters x (decode + prefill tokens) / peak

with the bytes and FLOPs divided by the tensor-parallel degree, FP8 weights/KV at one byte and
FP8 GEMMs at twice the 16-bit peak on GPUs with FP8 tensor cores (`advisor.sizing.configurations`).
`overhead`, `memory` and `compute` are the calibration factors; uncalibrated they take the
defaults below (about 80% of the datasheet bandwidth and 60% of the tensor peak) and say so.
Attention FLOPs of the prompt (about 1% of the GEMMs at 512 tokens on a 7B model) are left out.

A seeded discrete-event simulation runs requests through those steps: arrivals (Poisson or
constant at a rate, or a closed loop of N clients), admission while the engine holds fewer than
`max_num_seqs` sequences and the KV cache (from the memory fit, at the engine's
`gpu_memory_utilization`) can reserve the request's prompt + output, chunked prefill, one token
per decode step. A request's first token comes at the end of the step that finishes its
prefill, plus a per-request front-end delay (tokenising, streaming the chunk), calibrated from
one-request-at-a-time levels. A new request reaches a busy engine's scheduler one step
boundary late (the next step is scheduled while the current one runs: `lag_steps`, not fitted).
TTFT, TPOT = (E2E - TTFT) / (output - 1) and E2E are read with
the bench's own percentile function; the share of requests within every SLO is the attainment.
Decode-only stretches with nothing to admit are skipped in one jump, so a 500-request run takes
milliseconds.

The SLO capacity is the highest rate whose simulated probe `judge_probe` (the bench's capacity
search rule) calls feasible, found by bracketing and bisection to 1% with the same arrivals
scaled to each rate. A level is the bench probe's request count (`min_probe_requests`) after as
many warm-up requests at the same rate, whose figures are dropped: sustained load, the engine at
its steady batch. The capacity is the median over five request streams (seeds). Replicas split
the load evenly (rate / replicas each).

Calibration: every VALID generate run of the same engine family on the same GPU type gives one
observed step time per measured level: closed-loop levels (b = min(concurrency, max_num_seqs)
sequences, b x prompt / output prefill tokens per step) and open-loop levels (b = rate x decode
time by Little's law, rate x TPOT x prompt prefill tokens per step); its TPOT p50 is the step
time. The three factors are a bounded least-squares fit in relative error (no weight read or
GEMM faster than the GPU runs them: `serving_sim.MIN_MEMORY_FACTOR`, `MIN_COMPUTE_FACTOR`) over
the runs of the stage's precision class (weights and KV formats), else of any precision of that
engine, else defaults. The interval: each calibration level's step time is predicted from
factors fitted without its own run (leave-one-out); the 10th/90th percentiles of
log(measured / predicted) scale the step time to give the low and high capacity, widened to the
spread of the request streams. The capacity's expected error is the median |error| of the
leave-one-out check over the measured capacity searches given (`capacity_error`; the table is
advisor.sizing.serving_validation).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import Field

from advisor.sizing.configurations import Deployment
from advisor.sizing.engine_model.prefix import (
    PrefixReuse,
    TrafficShape,
    caches_prefixes,
    prefix_reuse,
)
from advisor.sizing.engine_model.replica import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
)
from advisor.sizing.engine_model.step import EngineShape
from advisor.sizing.serving_calibration import (
    Calibration,
    RunShape,
    StepObservation,
    calibrate,
    capacity_error,
    capacity_errors,
    capacity_residuals,
    capacity_with_interval,
    engine_family,
    error_scales,
    fit_factors,
    observations,
    run_capacity,
    run_shape,
    scaled,
    steady_phases,
    step_errors,
    uncalibrated_step_errors,
)
from advisor.sizing.serving_sim import (
    CAPACITY_PRECISION,
    CONTINUOUS_BATCHING,
    NO_SLO_TTFT_MS,
    SEEDS,
    CapacitySearch,
    Factors,
    LatencyAtLoad,
    Workload,
    engine_shape,
    median_capacity,
    search_capacity,
    simulate,
)
from advisor.workload.architectures import architecture_for
from advisor.workload.gpus import GPUS
from advisor.workload.profile import StageProfile
from bench.core.config import (
    SLO,
    min_probe_requests,
)
from bench.core.schema import RunResult
from bench.core.strict import Strict

# --------------------------------------------------------------------------- the public interface


class CapacityPrediction(Strict):
    """The predicted SLO capacity of one deployment for a stage, with its interval."""

    max_rate_rps: float = Field(description="Highest rate (whole deployment) meeting the SLO.")
    low_rps: float
    high_rps: float
    calibrated: bool
    calibration_runs: list[str] = Field(default_factory=list, description="Run ids fitted on.")
    calibration_other_precisions: bool = Field(
        False, description="Calibrated on the engine's runs at other precision classes only."
    )
    expected_error: float | None = Field(
        None, description="Median |relative error| of the capacity validation of this kind."
    )
    prompt_extrapolated: str | None = Field(
        None,
        description="Set when the stage's prompts are far longer than any the calibration was "
        "fitted on: what that means, in words.",
    )
    binding_constraint: str | None = None
    notes: list[str] = Field(default_factory=list)
    framework: str
    gpu: str
    precision_class: str
    basis: str = Field(description="What the calibration was fitted on, in words.")
    factors: Factors
    slo: SLO
    percentile: str
    attainment_target: float
    seeds_max_rate_rps: list[float] = Field(
        default_factory=list, description="The capacity of each simulated request stream."
    )
    curve: list[LatencyAtLoad] = Field(
        default_factory=list, description="Latency at 50%..110% of the predicted capacity."
    )


class LatencyPrediction(Strict):
    """Predicted percentiles at one load level."""

    latency: LatencyAtLoad
    calibrated: bool
    calibration_runs: list[str] = Field(default_factory=list)
    basis: str


@dataclass(frozen=True)
class _Setup:
    shape: EngineShape
    calibration: Calibration
    family: str
    gpu: str
    precision_class: str
    shapes: tuple[RunShape, ...]
    replicas: int


def stage_traffic(stage: StageProfile, deployment: Deployment) -> tuple[TrafficShape, PrefixReuse]:
    """The stage's traffic and what the deployment's prefix caching saves on it."""
    traffic = TrafficShape.of_stage(stage)
    return traffic, prefix_reuse(traffic, caches_prefixes(engine_family(deployment.framework)))


def weight_scheme(stage: StageProfile, deployment: Deployment) -> str | None:
    """The profile's pre-quantised weight scheme where the deployment keeps the profile's
    weights (a deployment at FP8 reads FP8)."""
    return None if deployment.precision.quantization else stage.precision.checkpoint_scheme()


def _setup(
    stage: StageProfile,
    deployment: Deployment,
    runs: Sequence[RunResult],
    engine_args: Mapping[str, object] | None = None,
    calibration: Calibration | None = None,
) -> _Setup | None:
    if stage.kind != "generate" or stage.gpu.type is None:
        return None
    family = engine_family(deployment.framework)
    if family not in CONTINUOUS_BATCHING:
        return None
    architecture, _ = architecture_for(stage.model)
    if architecture is None:
        return None  # the KV cache per token needs the layer and head sizes
    parameters = round(stage.parameters_b * 1e9) if stage.parameters_b else architecture.parameters
    if not parameters:
        return None
    gpu = GPUS[stage.gpu.type]
    traffic, reuse = stage_traffic(stage, deployment)
    shape = engine_shape(
        parameters,
        architecture,
        gpu,
        deployment,
        {"gpu_memory_utilization": DEFAULT_GPU_MEMORY_UTILIZATION, **(engine_args or {})},
        memory_gb=stage.gpu.memory_gb,
        bandwidth_tb_s=stage.gpu.memory_bandwidth_tb_s,
        reuse=reuse,
        prompt_tokens=float(traffic.served_prompt().mean),
        scheme=weight_scheme(stage, deployment),
    )
    if shape is None:
        return None
    shapes = tuple(s for s in (run_shape(run) for run in runs) if s is not None)
    if calibration is None:  # else a `bench calibrate` record's (advisor.sizing.calibration_fit)
        calibration = calibrate(family, gpu.name, deployment.precision_key, shapes)
    return _Setup(
        shape=shape,
        calibration=calibration,
        family=family,
        gpu=gpu.name,
        precision_class=deployment.precision_key,
        shapes=shapes,
        replicas=deployment.parallelism.replicas,
    )


def _stage_slo(stage: StageProfile) -> tuple[SLO, list[str]]:
    slo = SLO(ttft_ms=stage.slo.ttft_ms, tpot_ms=stage.slo.tpot_ms, e2e_ms=stage.slo.e2e_ms)
    if slo.is_set():
        return slo, []
    return SLO(ttft_ms=NO_SLO_TTFT_MS), [
        f"no latency SLO in the profile: capacity is where TTFT {stage.slo.percentile} passes "
        f"{NO_SLO_TTFT_MS:g} ms (queueing dominates beyond it)"
    ]


def _workloads(stage: StageProfile, requests: int, seeds: int = SEEDS) -> list[Workload]:
    prompt = TrafficShape.of_stage(stage).served_prompt()
    return [
        Workload(prompt, stage.output_tokens, requests=requests, seed=seed, warmup=requests)
        for seed in range(seeds)
    ]


def interval_errors(setup: _Setup) -> list[float]:
    """The leave-one-out log step errors of the calibration (uncalibrated: the default
    factors' errors on every covered run given)."""
    if setup.calibration.step_errors is not None:
        return setup.calibration.step_errors
    if setup.calibration.calibrated:
        return step_errors(setup.shapes, setup.family, setup.gpu, setup.precision_class)
    return uncalibrated_step_errors(setup.shapes)


LONG_PROMPT_FACTOR = 2.0
"""A stage whose prompts are more than this many times the calibration's longest is past its
fit (the H100 record, fitted on 1,024-token prompts, over-predicted the 2,048-token search)."""


def _prompt_extrapolated(calibration: Calibration, traffic: TrafficShape) -> str | None:
    """Words for a stage whose prompts are far past the calibration's: its compute factor
    comes from prompts where the weights' GEMMs dominate, and attention over a long context
    runs at its own share of the tensor peak (measured on an H100: a record fitted on <= 1,024-
    token prompts, its GEMMs held to the GPU's measured ceiling, predicted 8k-110k-token prefill
    5% short at the median; flash attention there ran 13-19% slower than the fastest GEMM,
    docs/capacity-model.md)."""
    longest = calibration.longest_prompt_tokens
    prompt = float(traffic.served_prompt().mean)
    if not calibration.calibrated or not longest or prompt <= LONG_PROMPT_FACTOR * longest:
        return None
    return (
        f"prompts of {prompt:,.0f} tokens, {prompt / longest:.0f}x the longest the calibration "
        f"was fitted on ({longest:,.0f}): long-context attention is extrapolated (on an H100 "
        "such a calibration predicted 8k-110k-token prefill 5% short at the median; "
        'docs/capacity-model.md, "Long context")'
    )


def predict_stage_capacity(
    stage: StageProfile,
    deployment: Deployment,
    runs: Sequence[RunResult],
    attainment_target: float = 0.99,
    expected_error: float | None = None,
    engine_args: Mapping[str, object] | None = None,
    seeds: int = SEEDS,
    interval: bool = True,
    calibration: Calibration | None = None,
) -> CapacityPrediction | None:
    """The SLO capacity of `deployment` for the stage, calibrated on `runs` of the stage's GPU
    type (every stored and shipped run may be passed: the others are left out); None when the
    stage cannot be predicted (no GPU type, not generate, unknown model size or layer shapes, an
    engine that does not batch continuously). `expected_error` = the validation's median
    |relative error| of capacity (advisor.sizing.serving_validation); None = computed from `runs`.
    A deployment whose KV cache cannot hold one request of the stage gets 0 req/s, bound by
    memory. `calibration`: a `bench calibrate` record's fit (advisor.sizing.calibration_fit)
    in place of the one fitted on `runs`."""
    setup = _setup(stage, deployment, runs, engine_args, calibration)
    if setup is None:
        return None
    slo, notes = _stage_slo(stage)
    one_request = (
        TrafficShape.of_stage(stage).served_prompt().mean
        + stage.output_tokens.mean
        - setup.shape.pooled_prompt_tokens
    )
    if setup.shape.kv_capacity_tokens < one_request:
        return CapacityPrediction(
            max_rate_rps=0.0,
            low_rps=0.0,
            high_rps=0.0,
            calibrated=setup.calibration.calibrated,
            calibration_runs=setup.calibration.runs,
            binding_constraint="memory",
            notes=[
                f"the KV cache left after the weights holds {setup.shape.kv_capacity_tokens} "
                f"tokens per replica, less than one request's {one_request}"
            ],
            framework=deployment.framework,
            gpu=setup.gpu,
            precision_class=setup.precision_class,
            basis=setup.calibration.basis,
            factors=setup.calibration.factors,
            slo=slo,
            percentile=stage.slo.percentile,
            attainment_target=attainment_target,
        )
    percentile = stage.slo.percentile
    requests = min_probe_requests(percentile, attainment_target)
    workloads = _workloads(stage, requests, seeds)
    factors = setup.calibration.factors
    errors = interval_errors(setup)
    slow, fast = error_scales(errors)
    # a record's prediction is widened by the calibrated model's errors on the shipped searches
    residuals = capacity_residuals(setup.shapes, setup.calibration.calibrated or bool(calibration))
    if interval:
        rate, low, high, searches = capacity_with_interval(
            setup.shape,
            factors,
            workloads,
            slo,
            percentile,
            attainment_target,
            setup.replicas,
            errors,
            residuals,
        )
    else:  # a screen: the capacity alone, to 2%
        rate, searches = median_capacity(
            setup.shape,
            factors,
            workloads,
            slo,
            percentile,
            attainment_target,
            setup.replicas,
            precision=2 * CAPACITY_PRECISION,
        )
        low = high = rate
    seeds = [s.max_rate_rps for s in searches]
    bindings = [s.binding_constraint for s in searches if s.binding_constraint]
    binding = statistics.mode(bindings) if bindings else None
    if expected_error is None and calibration is None:  # a record's is not the runs' error
        expected_error = capacity_error(setup.shapes, setup.calibration.calibrated)
    notes.append(setup.calibration.basis)
    extrapolated = _prompt_extrapolated(setup.calibration, TrafficShape.of_stage(stage))
    if extrapolated:
        notes.append(extrapolated)
    if not setup.calibration.calibrated and expected_error is not None:
        measured_on = sorted({s.gpu for s in setup.shapes}) or ["no GPU"]
        notes.append(
            f"expected error {expected_error:.0%}: the default factors' median capacity error "
            f"on {', '.join(measured_on)}; on {setup.gpu} it is not measured"
        )
    notes.append(
        f"interval: the step time {fast:.2f}x..{slow:.2f}x (10th..90th percentile of "
        f"{len(errors)} "
        + (
            "leave-one-out step errors"
            if setup.calibration.calibrated
            else "step errors of the default factors on the measured runs"
        )
        + f"), the spread of {seeds} request stream(s)"
        + (
            f" and the capacity errors on {len(residuals)} measured searches it did not see "
            f"({min(residuals):+.0%}..{max(residuals):+.0%})"
            if residuals
            else ""
        )
    )
    notes.append(
        f"sustained load: {requests} requests per level after {requests} warm-up requests at "
        "the same rate, judged by the bench's capacity rule (judge_probe)"
    )
    curve = [
        simulate(setup.shape, factors, workloads[0], setup.replicas, rate_rps=rate * f, slo=slo)
        for f in (0.5, 0.75, 0.9, 1.0, 1.1)
        if rate > 0 and interval
    ]
    return CapacityPrediction(
        max_rate_rps=rate,
        low_rps=low,
        high_rps=high,
        calibrated=setup.calibration.calibrated,
        calibration_runs=setup.calibration.runs,
        calibration_other_precisions=setup.calibration.other_precisions,
        expected_error=expected_error,
        prompt_extrapolated=extrapolated,
        binding_constraint=binding,
        notes=notes,
        framework=deployment.framework,
        gpu=setup.gpu,
        precision_class=setup.precision_class,
        basis=setup.calibration.basis,
        factors=factors,
        slo=slo,
        percentile=percentile,
        attainment_target=attainment_target,
        seeds_max_rate_rps=seeds,
        curve=curve,
    )


def predict_latency(
    stage: StageProfile,
    deployment: Deployment,
    runs: Sequence[RunResult],
    rate_rps: float | None = None,
    concurrency: int | None = None,
    calibration: Calibration | None = None,
) -> LatencyPrediction | None:
    """TTFT, TPOT and E2E percentiles of the deployment at a rate (sustained Poisson arrivals)
    or a concurrency (closed loop); default: the stage's peak rate, else its rate, else its
    concurrency. None when the stage cannot be predicted or has no load. `calibration` as in
    `predict_stage_capacity`."""
    setup = _setup(stage, deployment, runs, calibration=calibration)
    if setup is None:
        return None
    if rate_rps is None and concurrency is None:
        rate_rps = stage.peak_request_rate_rps or stage.request_rate_rps
        concurrency = None if rate_rps else stage.concurrency
    if rate_rps is None and concurrency is None:
        return None
    slo, _ = _stage_slo(stage)
    requests = min_probe_requests(stage.slo.percentile, 0.99)
    workload = Workload(
        TrafficShape.of_stage(stage).served_prompt(),
        stage.output_tokens,
        requests=requests,
        warmup=requests if rate_rps is not None else (concurrency or 1),
    )
    latency = simulate(
        setup.shape, setup.calibration.factors, workload, setup.replicas, rate_rps, concurrency, slo
    )
    return LatencyPrediction(
        latency=latency,
        calibrated=setup.calibration.calibrated,
        calibration_runs=setup.calibration.runs,
        basis=setup.calibration.basis,
    )


def in_flight(
    stage: StageProfile,
    deployment: Deployment,
    runs: Sequence[RunResult],
    rate_rps: float | None = None,
) -> float | None:
    """Requests in flight by Little's law: rate x predicted E2E at the SLO percentile (the
    stage's peak rate by default); a stage given as a concurrency has that many. None when
    the stage cannot be predicted."""
    rate = rate_rps or stage.peak_request_rate_rps or stage.request_rate_rps
    if rate is None:
        return float(stage.concurrency) if stage.concurrency else None
    prediction = predict_latency(stage, deployment, runs, rate_rps=rate)
    if prediction is None or prediction.latency.e2e_ms is None:
        return None
    e2e = getattr(prediction.latency.e2e_ms, stage.slo.percentile)
    return rate * e2e / 1e3


__all__ = [
    "CONTINUOUS_BATCHING",
    "Calibration",
    "CapacityPrediction",
    "CapacitySearch",
    "EngineShape",
    "Factors",
    "LatencyAtLoad",
    "LatencyPrediction",
    "RunShape",
    "StepObservation",
    "Workload",
    "calibrate",
    "capacity_error",
    "capacity_errors",
    "capacity_residuals",
    "engine_shape",
    "fit_factors",
    "in_flight",
    "observations",
    "predict_latency",
    "predict_stage_capacity",
    "run_capacity",
    "run_shape",
    "scaled",
    "search_capacity",
    "simulate",
    "steady_phases",
    "step_errors",
]
