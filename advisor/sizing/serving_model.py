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
time. The three factors are a non-negative least-squares fit in relative error over the runs of
the stage's precision class (weights and KV formats), else of any precision of that engine, else
defaults. The interval: each calibration level's step time is predicted from factors fitted
without its own run (leave-one-out); the 10th/90th percentiles of log(measured / predicted)
scale the step time to give the low and high capacity, widened to the spread of the request
streams. The capacity's expected error is the median |error| of the leave-one-out check over
the measured capacity searches given (`capacity_error`; the table is
advisor.sizing.serving_validation).
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import Field

from advisor.sizing.configurations import Deployment, deployment_formats
from advisor.sizing.engine_model.facts import model_facts
from advisor.sizing.engine_model.prefix import (
    PrefixReuse,
    TrafficShape,
    caches_prefixes,
    prefix_reuse,
)
from advisor.sizing.engine_model.replica import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    replica_shape,
)
from advisor.sizing.engine_model.step import EngineShape
from advisor.sizing.engine_shape import registered_backend
from advisor.sizing.measured import run_gpu_name
from advisor.workload.architectures import Architecture, architecture_for
from advisor.workload.gpus import GPUS, GpuSpec
from advisor.workload.profile import StageProfile
from bench.core.config import (
    SLO,
    GenerateWorkload,
    LengthDistribution,
    min_probe_requests,
)
from bench.core.metrics import percentiles_ms
from bench.core.pattern_reports import CapacityReport
from bench.core.schema import MetricsSummary, Percentiles, RunResult, RunStatus, ValidityStatus
from bench.core.strict import Strict
from bench.run.load.capacity import judge_probe

CONTINUOUS_BATCHING = frozenset({"vllm", "openai", "tensorrt_llm"})
"""Engines that schedule vLLM-style (iteration-level batching, chunked prefill): the ones this
model describes. `openai` is a served engine (vllm serve in every shipped run)."""
DEFAULT_OVERHEAD_MS = 0.5
DEFAULT_MEMORY_FACTOR = 1.25
DEFAULT_COMPUTE_FACTOR = 1.6
DEFAULT_FRONT_END_MS = 0.0
DEFAULT_LAG_STEPS = 1
LAG_CHOICES = (0, 1, 2, 3)
CAPACITY_PRECISION = 0.01
INTERVAL_QUANTILES = (0.1, 0.9)
JUMP_DECODE_STRETCHES = True
"""Skip decode-only stretches in one jump (False steps through them one by one: the reference
the jump is tested against)."""
MAX_SIM_STEPS = 2_000_000
"""A guard for the simulation: no run of the validation set comes near it."""


class Factors(Strict):
    """Calibration factors of the step-time model (see the module docstring)."""

    overhead_ms: float = DEFAULT_OVERHEAD_MS
    memory: float = DEFAULT_MEMORY_FACTOR
    compute: float = DEFAULT_COMPUTE_FACTOR
    front_end_ms: float = Field(
        DEFAULT_FRONT_END_MS, description="Per-request delay before the first token counts."
    )
    lag_steps: int = Field(
        DEFAULT_LAG_STEPS,
        ge=0,
        le=4,
        description="Step boundaries a new request waits before the scheduler can admit it "
        "(an engine that schedules the next step while the current one runs: one).",
    )


def engine_shape(
    parameters: int,
    architecture: Architecture | None,
    gpu: GpuSpec,
    deployment: Deployment,
    engine_args: dict | None = None,
    memory_gb: float | None = None,
    bandwidth_tb_s: float | None = None,
    reuse: PrefixReuse | None = None,
    prompt_tokens: float = 0.0,
    scheme: str | None = None,
) -> EngineShape | None:
    """The replica's shape (advisor/sizing/engine_model/replica.py); None when the KV size or
    the GPU's tensor peak is unknown. `scheme` is the profile's pre-quantised weight scheme."""
    facts = model_facts(architecture, parameters)
    if facts is None:
        return None
    return replica_shape(
        facts,
        deployment_formats(deployment, scheme),
        gpu,
        deployment.parallelism.tensor_parallel_size,
        engine_args,
        memory_gb=memory_gb,
        bandwidth_tb_s=bandwidth_tb_s,
        reuse=reuse,
        prompt_tokens=prompt_tokens,
    )


# --------------------------------------------------------------------------- the simulation


class LatencyAtLoad(Strict):
    """Simulated percentiles of one replica set at one load level."""

    over: Literal["rate", "concurrency"]
    level: float = Field(description="Requests/s (whole deployment) or clients in flight.")
    requests: int
    ttft_ms: Percentiles | None = Field(description="None when no request completed.")
    tpot_ms: Percentiles | None
    e2e_ms: Percentiles | None
    attainment: float | None = Field(None, description="Share within every SLO set.")
    output_throughput_tok_s: float
    mean_batch: float = Field(description="Mean sequences per step of one replica.")
    duration_s: float


@dataclass
class _Sim:
    ttft: np.ndarray
    e2e: np.ndarray
    outputs: np.ndarray
    duration_ms: float
    mean_batch: float


def sample_lengths(
    distribution: LengthDistribution, n: int, rng: np.random.Generator
) -> np.ndarray:
    """Token counts from a profile's length distribution (same kinds as the bench's sampler)."""
    mean, spread = float(distribution.mean), float(distribution.spread)
    if distribution.kind == "fixed" or spread == 0:
        values = np.full(n, mean)
    elif distribution.kind == "uniform":
        values = rng.uniform(mean - spread, mean + spread, n)
    elif distribution.kind == "normal":
        values = rng.normal(mean, spread, n)
    else:
        sigma2 = math.log(1 + (spread / mean) ** 2)
        values = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), n)
    upper = distribution.max if distribution.max is not None else np.inf
    return np.clip(np.rint(values), distribution.min, upper).astype(np.int64)


def _simulate(
    shape: EngineShape,
    factors: Factors,
    prompts: np.ndarray,
    outputs: np.ndarray,
    arrivals_ms: np.ndarray | None,
    concurrency: int | None,
    skip: int = 0,
) -> _Sim:
    """One replica, FCFS. `arrivals_ms` for an open loop, else `concurrency` closed-loop clients
    (a client sends its next request the moment the last one ends)."""
    n = len(prompts)
    arrival = np.zeros(n) if arrivals_ms is None else arrivals_ms.astype(float)
    first = np.full(n, np.nan)
    end = np.full(n, np.nan)
    waiting: deque[int] = deque()
    eligible = np.zeros(n, dtype=np.int64)  # first step index whose schedule may admit it
    lag = factors.lag_steps
    prefilling: deque[list[int]] = deque()  # [request, prompt tokens still to prefill]
    finishes: list[tuple[int, int]] = []  # (step index of the last token, request)
    next_arrival = 0  # open loop: index of the next request to arrive
    if arrivals_ms is None:
        next_arrival = min(concurrency or 1, n)
        waiting.extend(range(next_arrival))
    t = 0.0
    step = 0
    running = decoding = 0
    context = 0.0  # KV tokens held by running sequences
    reserved = 0  # KV tokens reserved at admission (prompt + output)
    batch_steps = 0.0
    steps = 0
    budget_full = shape.token_budget
    cached = shape.cached_prompt_tokens
    # Python numbers in the loop: numpy scalars make every step's arithmetic several times slower.
    prompt_of, output_of = prompts.tolist(), outputs.tolist()
    pooled = shape.pooled_prompt_tokens
    while True:
        if arrivals_ms is not None:
            while next_arrival < n and arrival[next_arrival] <= t:
                eligible[next_arrival] = step + lag
                waiting.append(next_arrival)
                next_arrival += 1
        if not waiting and not running:
            if arrivals_ms is None or next_arrival >= n:
                break
            t = float(arrival[next_arrival])
            continue
        # Schedule: decodes, the prefills in progress, then new requests while room is left.
        budget = budget_full - decoding
        prefill = 0
        completed: list[int] = []
        for item in prefilling:
            if budget <= 0:
                break
            chunk = min(item[1], budget)
            item[1] -= chunk
            budget -= chunk
            prefill += chunk
        busy = running > 0  # an idle engine takes a new request at once
        while waiting and budget > 0 and running < shape.max_num_seqs:
            request = waiting[0]
            if busy and eligible[request] > step:
                break
            need = int(prompt_of[request] + output_of[request] - pooled)
            if reserved + need > shape.kv_capacity_tokens and running > 0:
                break
            waiting.popleft()
            running += 1
            reserved += need
            # A prefix found in the cache joins the context at once and is not prefilled.
            prompt = prompt_of[request]
            uncached = max(1, int(prompt - cached))
            context += prompt - uncached
            chunk = min(uncached, budget)
            budget -= chunk
            prefill += chunk
            prefilling.append([request, uncached - chunk])
        if running == 0:
            waiting.popleft()  # a request larger than the whole KV cache: never admitted
            continue
        # Decode-only stretch with nothing to admit: jump to the step before the next event.
        if prefill == 0 and decoding > 0:
            # Nothing was admitted, so whoever waits stays blocked (sequence, KV or token
            # budget limit) until a sequence ends; with no one waiting, an arrival ends it too.
            horizon = finishes[0][0] - step if finishes else 1
            if waiting and eligible[waiting[0]] > step:
                horizon = min(horizon, int(eligible[waiting[0]]) - step)
            if arrivals_ms is not None and next_arrival < n and not waiting:
                gap = float(arrival[next_arrival]) - t
                horizon = min(horizon, _steps_within(shape, factors, decoding, context, gap))
            if horizon > 1 and JUMP_DECODE_STRETCHES:
                jump = horizon - 1
                d0 = shape.step_ms(factors, decoding, 0, context)
                slope = shape.context_slope_ms(factors, decoding)
                t += jump * d0 + slope * jump * (jump - 1) / 2
                context += decoding * jump
                step += jump
                batch_steps += running * jump
                steps += jump
        dt = shape.step_ms(factors, decoding, prefill, context)
        t += dt
        step += 1
        steps += 1
        batch_steps += running
        context += decoding + prefill
        while prefilling and prefilling[0][1] == 0:
            completed.append(prefilling.popleft()[0])
        # Items behind an unfinished one may be finished too (their chunk fit whole).
        if any(item[1] == 0 for item in prefilling):
            kept = deque()
            for item in prefilling:
                (completed.append(item[0]) if item[1] == 0 else kept.append(item))
            prefilling = kept
        while finishes and finishes[0][0] <= step:
            _, request = heapq.heappop(finishes)
            end[request] = t
            decoding -= 1
            running -= 1
            context -= prompt_of[request] + output_of[request] - 1
            reserved -= int(prompt_of[request] + output_of[request] - pooled)
            if arrivals_ms is None and next_arrival < n:
                arrival[next_arrival] = t
                eligible[next_arrival] = step + lag
                waiting.append(next_arrival)
                next_arrival += 1
        for request in completed:
            first[request] = t
            if output_of[request] <= 1:
                end[request] = t
                running -= 1
                context -= prompt_of[request]
                reserved -= int(prompt_of[request] + output_of[request] - pooled)
                if arrivals_ms is None and next_arrival < n:
                    arrival[next_arrival] = t
                    eligible[next_arrival] = step + lag
                    waiting.append(next_arrival)
                    next_arrival += 1
            else:
                decoding += 1
                heapq.heappush(finishes, (step + int(output_of[request]) - 1, request))
        if steps > MAX_SIM_STEPS:
            break
    done = ~np.isnan(end)
    done[:skip] = False  # warm-up requests: they fill the engine, their figures are not kept
    front = factors.front_end_ms
    return _Sim(
        ttft=(first - arrival)[done] + front,
        e2e=(end - arrival)[done] + front,
        outputs=outputs[done],
        duration_ms=t - float(arrival[skip:].min()) if n > skip else 0.0,
        mean_batch=batch_steps / steps if steps else 0.0,
    )


def _steps_within(
    shape: EngineShape, factors: Factors, decoding: int, context: float, gap_ms: float
) -> int:
    """Decode-only steps that end before `gap_ms` has passed, plus one (the step during which
    the next request arrives): step j takes d0 + j x slope."""
    if gap_ms <= 0:
        return 1
    d0 = shape.step_ms(factors, decoding, 0, context)
    slope = shape.context_slope_ms(factors, decoding)
    if slope <= 1e-12:
        return int(gap_ms // d0) + 1
    # j steps take j d0 + slope j (j - 1) / 2 <= gap
    a, b, c = slope / 2, d0 - slope / 2, -gap_ms
    j = int((-b + math.sqrt(b * b - 4 * a * c)) / (2 * a))
    return max(j, 0) + 1


def _percentiles(values: np.ndarray) -> Percentiles | None:
    return percentiles_ms(values) if len(values) else None


def _summarise(
    sim: _Sim, over: Literal["rate", "concurrency"], level: float, slo: SLO | None, replicas: int
) -> LatencyAtLoad:
    ttft, e2e, outputs = sim.ttft, sim.e2e, sim.outputs
    multi = outputs > 1
    tpot = (e2e[multi] - ttft[multi]) / (outputs[multi] - 1)
    attainment = None
    if slo is not None and slo.is_set():
        meets = np.ones(len(ttft), dtype=bool)
        if slo.ttft_ms is not None:
            meets &= ttft <= slo.ttft_ms
        if slo.e2e_ms is not None:
            meets &= e2e <= slo.e2e_ms
        if slo.tpot_ms is not None:
            per_request = np.full(len(ttft), np.inf)
            per_request[multi] = tpot
            meets &= per_request <= slo.tpot_ms
        attainment = float(meets.mean()) if len(meets) else None
    duration_s = max(sim.duration_ms, 1e-9) / 1e3
    return LatencyAtLoad(
        over=over,
        level=level,
        requests=len(ttft),
        ttft_ms=_percentiles(ttft),
        tpot_ms=_percentiles(tpot),
        e2e_ms=_percentiles(e2e),
        attainment=attainment,
        output_throughput_tok_s=float(outputs.sum()) / duration_s * replicas,
        mean_batch=sim.mean_batch,
        duration_s=duration_s,
    )


@dataclass(frozen=True)
class Workload:
    """The request stream of one prediction: lengths, count, arrivals, seed."""

    prompt: LengthDistribution
    output: LengthDistribution
    requests: int = 500
    arrival: Literal["poisson", "constant"] = "poisson"
    seed: int = 0
    warmup: int = 0
    """Requests sent first at the same load and left out: the engine at its sustained batch."""

    @property
    def draws(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _draws(
            self.prompt.model_dump_json(),
            self.output.model_dump_json(),
            self.requests,
            self.arrival,
            self.seed,
            self.warmup,
        )


@lru_cache(maxsize=64)
def _draws(
    prompt_json: str, output_json: str, requests: int, arrival: str, seed: int, warmup: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens, unit-rate arrival times s): one draw per workload, scaled
    to each rate, so that a search compares rates on the same requests."""
    workload = Workload(
        LengthDistribution.model_validate_json(prompt_json),
        LengthDistribution.model_validate_json(output_json),
        requests,
        arrival,  # type: ignore[arg-type]
        seed,
        warmup,
    )
    total = workload.requests + workload.warmup
    rng = np.random.default_rng(workload.seed)
    prompts = sample_lengths(workload.prompt, total, rng)
    outputs = sample_lengths(workload.output, total, rng)
    if workload.arrival == "constant":
        unit = np.arange(total, dtype=float)
    else:
        unit = np.cumsum(rng.exponential(1.0, total))
        unit -= unit[0]
    return prompts, outputs, unit


def simulate(
    shape: EngineShape,
    factors: Factors,
    workload: Workload,
    replicas: int = 1,
    rate_rps: float | None = None,
    concurrency: int | None = None,
    slo: SLO | None = None,
) -> LatencyAtLoad:
    """Percentiles at a rate (requests/s over all replicas) or a concurrency (clients over all
    replicas); each replica gets an even share."""
    prompts, outputs, unit = workload.draws
    if rate_rps is not None:
        if rate_rps <= 0:
            raise ValueError(f"rate_rps must be > 0, got {rate_rps}")
        per_replica = rate_rps / replicas
        arrivals = unit * 1e3 / per_replica
        sim = _simulate(shape, factors, prompts, outputs, arrivals, None, workload.warmup)
        return _summarise(sim, "rate", rate_rps, slo, replicas)
    if concurrency is None:
        raise ValueError("simulate needs rate_rps or concurrency")
    clients = max(1, math.ceil(concurrency / replicas))
    sim = _simulate(shape, factors, prompts, outputs, None, clients, workload.warmup)
    return _summarise(sim, "concurrency", concurrency, slo, replicas)


def _summary_for_judge(result: LatencyAtLoad) -> MetricsSummary:
    """The simulated probe as the bench's MetricsSummary, for `judge_probe`."""
    duration = result.duration_s
    meets = round((result.attainment if result.attainment is not None else 1.0) * result.requests)
    return MetricsSummary(
        requests=result.requests,
        successful=result.requests,
        failed=0,
        duration_s=duration,
        request_throughput_rps=result.requests / duration,
        output_throughput_tok_s=result.output_throughput_tok_s,
        goodput_rps=meets / duration,
        error_rate=0.0,
        ttft_ms=result.ttft_ms,
        tpot_ms=result.tpot_ms,
        e2e_ms=result.e2e_ms,
    )


def judge(
    result: LatencyAtLoad, slo: SLO, percentile: str, attainment_target: float
) -> tuple[bool, str | None]:
    """(feasible, binding constraint) by the bench's capacity rule."""
    feasible, _, binding = judge_probe(
        _summary_for_judge(result), slo, percentile, attainment_target
    )
    return feasible, binding


class CapacitySearch(Strict):
    """A simulated capacity search: the boundary and the probes it took."""

    max_rate_rps: float
    binding_constraint: str | None
    probes: list[LatencyAtLoad] = Field(default_factory=list)


def search_capacity(
    shape: EngineShape,
    factors: Factors,
    workload: Workload,
    slo: SLO,
    percentile: str = "p99",
    attainment_target: float = 0.99,
    replicas: int = 1,
    precision: float = CAPACITY_PRECISION,
    start: float | None = None,
) -> CapacitySearch:
    """Bracket from `start` (by 10% steps) or from the decode-bound throughput guess (by
    doubling), then bisect to `precision`."""
    probes: list[LatencyAtLoad] = []
    verdicts: dict[float, tuple[bool, str | None]] = {}

    def feasible(rate: float) -> bool:
        result = simulate(shape, factors, workload, replicas, rate_rps=rate, slo=slo)
        probes.append(result)
        verdicts[rate] = judge(result, slo, percentile, attainment_target)
        return verdicts[rate][0]

    mean_out = max(float(workload.output.mean), 1.0)
    batch = min(shape.max_num_seqs, 64)
    context = batch * (workload.prompt.mean + mean_out / 2)
    tokens = batch * (1 + workload.prompt.mean / mean_out)
    guess = batch * 1e3 / (mean_out * shape.step_ms(factors, batch, tokens - batch, context))
    guess *= replicas
    growth = 1.1 if start else 2.0
    lo = hi = None
    rate = start or guess
    for _ in range(40):
        if feasible(rate):
            lo = rate
            if hi is not None:
                break
            rate *= growth
        else:
            hi = rate
            if lo is not None:
                break
            rate /= growth
            if rate < 1e-4:
                break
    if lo is None:
        return CapacitySearch(max_rate_rps=0.0, binding_constraint=verdicts[hi][1], probes=probes)
    if hi is None:
        return CapacitySearch(max_rate_rps=lo, binding_constraint=None, probes=probes)
    while (hi - lo) / hi > precision:
        middle = (lo + hi) / 2
        if feasible(middle):
            lo = middle
        else:
            hi = middle
    return CapacitySearch(max_rate_rps=lo, binding_constraint=verdicts[hi][1], probes=probes)


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


def run_shape(run: RunResult) -> RunShape | None:
    """The run's shape when the model covers it: a VALID completed generate run of a
    continuous-batching engine on a catalogued GPU with a known model size; else None."""
    config = run.config
    if not isinstance(config.workload, GenerateWorkload):
        return None
    if engine_family(config.backend) not in CONTINUOUS_BATCHING:
        return None
    if run.status != RunStatus.COMPLETED or (
        run.validity is not None and run.validity.status != ValidityStatus.VALID
    ):
        return None
    gpu_name = run_gpu_name(run)
    gpu = GPUS.get(gpu_name) if gpu_name else None
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


def fit_factors(observed: Sequence[StepObservation], front_end: Sequence[float] = ()) -> Factors:
    """Non-negative least squares of step = overhead + memory x read + compute x compute, in
    relative error; fewer than three levels scale the default factors by one median ratio."""
    if len(observed) >= 3:
        from scipy.optimize import nnls

        matrix = np.array(
            [[1.0, o.read_ms, o.compute_ms] for o in observed], dtype=float
        ) / np.array([[o.measured_step_ms] for o in observed])
        solution, _ = nnls(matrix, np.ones(len(observed)))
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
    factors = Factors(overhead_ms=overhead, memory=memory, compute=compute)
    return factors.model_copy(
        update={"front_end_ms": statistics.median(front_end) if front_end else 0.0}
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
    same_engine = [s for s in shapes if s.family == family and s.gpu == gpu]
    same_class = [s for s in same_engine if s.precision_class == precision_class]
    for pool, words in (
        (same_class, f"{family} on {gpu}, {precision_class}"),
        (same_engine, f"{family} on {gpu}, other precisions ({precision_class} not measured)"),
    ):
        observed = [o for item in pool for o in observations(item)]
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
                basis=f"fitted on {len(observed)} measured level(s) of {len(runs)} run(s): {words}",
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
            predicted = item.shape.step_ms(factors, o.decode, o.prefill, o.context)
            errors.append(math.log(o.measured_step_ms / predicted))
    return errors


def uncalibrated_step_errors(shapes: Sequence[RunShape]) -> list[float]:
    """log(measured / predicted) step time of every level with the default factors."""
    return [
        math.log(o.measured_step_ms / item.shape.step_ms(Factors(), o.decode, o.prefill, o.context))
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
) -> tuple[float, float, float, list[CapacitySearch]]:
    """(capacity, low, high, the searches): the median capacity over the request streams; low
    and high with the step time scaled by `error_scales` (three streams, 2% precision), widened
    to the streams' own spread."""
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
    return rate, min(low, *seeds, rate), max(high, *seeds, rate), searches


def run_capacity(item: RunShape, factors: Factors, errors: Sequence[float]) -> tuple[float, ...]:
    """(predicted, low, high) capacity of a measured capacity search's run under its own SLO
    and rule; `errors` = log step errors for the interval."""
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


_CAPACITY_ERRORS: dict[tuple[tuple[str, ...], bool], float | None] = {}


def capacity_error(shapes: Sequence[RunShape], calibrated: bool) -> float | None:
    """Median |relative error| of `capacity_errors` (cached per set of runs)."""
    key = (tuple(s.run.run_id for s in shapes), calibrated)
    if key not in _CAPACITY_ERRORS:
        errors = capacity_errors(shapes, calibrated)
        _CAPACITY_ERRORS[key] = statistics.median(abs(e) for e in errors) if errors else None
    return _CAPACITY_ERRORS[key]


# --------------------------------------------------------------------------- the public interface

SEEDS = 5
"""Independent request streams per capacity estimate; the capacity is their median."""
NO_SLO_TTFT_MS = 1000.0
"""Without a latency SLO the boundary is where the TTFT percentile passes one second: beyond it
the queue, not the engine, sets the latency."""


class CapacityPrediction(Strict):
    """The predicted SLO capacity of one deployment for a stage, with its interval."""

    max_rate_rps: float = Field(description="Highest rate (whole deployment) meeting the SLO.")
    low_rps: float
    high_rps: float
    calibrated: bool
    calibration_runs: list[str] = Field(default_factory=list, description="Run ids fitted on.")
    expected_error: float | None = Field(
        None, description="Median |relative error| of the capacity validation of this kind."
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
    return None if deployment.precision.quantization else stage.precision.quantization


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


def median_capacity(
    shape: EngineShape,
    factors: Factors,
    workloads: Sequence[Workload],
    slo: SLO,
    percentile: str,
    attainment_target: float,
    replicas: int,
    start: float | None = None,
    precision: float = CAPACITY_PRECISION,
) -> tuple[float, list[CapacitySearch]]:
    """The median over the request streams of the simulated capacity search; each stream's
    search starts from the previous one's boundary (they differ by a few percent)."""
    searches: list[CapacitySearch] = []
    for workload in workloads:
        search = search_capacity(
            shape, factors, workload, slo, percentile, attainment_target, replicas, precision, start
        )
        searches.append(search)
        start = search.max_rate_rps or start
    return statistics.median(s.max_rate_rps for s in searches), searches


def interval_errors(setup: _Setup) -> list[float]:
    """The leave-one-out log step errors of the calibration (uncalibrated: the default
    factors' errors on every covered run given)."""
    if setup.calibration.step_errors is not None:
        return setup.calibration.step_errors
    if setup.calibration.calibrated:
        return step_errors(setup.shapes, setup.family, setup.gpu, setup.precision_class)
    return uncalibrated_step_errors(setup.shapes)


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
        + f") and the spread of {seeds} request stream(s)"
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
        expected_error=expected_error,
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
    "engine_shape",
    "in_flight",
    "observations",
    "predict_latency",
    "predict_stage_capacity",
    "run_capacity",
    "run_shape",
    "search_capacity",
    "simulate",
    "step_errors",
]
