"""The serving model's step factors, replica shape and seeded discrete-event simulation of one
replica under load, with its simulated capacity search (advisor/sizing/serving_model.py's
docstring states the rules)."""

from __future__ import annotations

import heapq
import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import Field

from advisor.sizing.configurations import Deployment, deployment_formats
from advisor.sizing.engine_model.facts import model_facts
from advisor.sizing.engine_model.prefix import (
    PrefixReuse,
)
from advisor.sizing.engine_model.replica import (
    replica_shape,
)
from advisor.sizing.engine_model.step import EngineShape
from advisor.workload.architectures import Architecture
from advisor.workload.gpus import GpuSpec
from bench.core.config import (
    SLO,
    LengthDistribution,
)
from bench.core.metrics import percentiles_ms
from bench.core.schema import MetricsSummary, Percentiles
from bench.core.strict import Strict
from bench.run.load.capacity import judge_probe

CONTINUOUS_BATCHING = frozenset({"vllm", "openai", "tensorrt_llm"})
"""Engines that schedule vLLM-style (iteration-level batching, chunked prefill): the ones this
model describes. `openai` is a served engine (vllm serve in every shipped run)."""
CASCADE_ENGINES = frozenset({"vllm", "openai"})
"""Engines whose attention reads a prefix common to the whole batch once per step (vLLM's
cascade attention: `EngineShape.common_prefix_tokens`); `openai` is vllm serve."""
DEFAULT_OVERHEAD_MS = 0.5
DEFAULT_MEMORY_FACTOR = 1.25
DEFAULT_COMPUTE_FACTOR = 1.6
MIN_COMPUTE_FACTOR = 989 / 738.3
"""The least a calibration may set `compute` to: the datasheet's dense 16-bit peak over the
fastest GEMM measured at an engine step's shapes (H100-SXM: 738 of 989 TFLOP/s, a 2,048-token
chunk of Llama-3.1-8B's gate and up projections,
data/reference/h100_kernel_peaks/gemm_attention_peak.json), taken as the same share of the peak
on every GPU."""
MIN_MEMORY_FACTOR = 1.0
"""The least a calibration may set `memory` to: no weight or KV read faster than the datasheet
bandwidth. (A 64-sequence decode step's gate and up projections read 239 MB in 0.084 ms on the
H100, 2.85 of its 3.35 TB/s, in the same file; a tighter bound from that one shape cost the
dense record's own fit more than it gained.)"""
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
        cascade=deployment.framework in CASCADE_ENGINES,
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
                horizon = min(
                    horizon, _steps_within(shape, factors, decoding, context, gap, running)
                )
            if horizon > 1 and JUMP_DECODE_STRETCHES:
                jump = horizon - 1
                d0 = shape.step_ms(factors, decoding, 0, context, running)
                slope = shape.context_slope_ms(factors, decoding)
                t += jump * d0 + slope * jump * (jump - 1) / 2
                context += decoding * jump
                step += jump
                batch_steps += running * jump
                steps += jump
        dt = shape.step_ms(factors, decoding, prefill, context, running)
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
    shape: EngineShape,
    factors: Factors,
    decoding: int,
    context: float,
    gap_ms: float,
    sequences: float = 0.0,
) -> int:
    """Decode-only steps that end before `gap_ms` has passed, plus one (the step during which
    the next request arrives): step j takes d0 + j x slope."""
    if gap_ms <= 0:
        return 1
    d0 = shape.step_ms(factors, decoding, 0, context, sequences)
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


SEEDS = 5
"""Independent request streams per capacity estimate; the capacity is their median."""
NO_SLO_TTFT_MS = 1000.0
"""Without a latency SLO the boundary is where the TTFT percentile passes one second: beyond it
the queue, not the engine, sets the latency."""


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
