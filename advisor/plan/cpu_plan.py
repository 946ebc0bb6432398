"""The plan on a machine without a GPU: each model's CPU-sized stand-in of the same family, runs
moved to the CPU, and a quick CPU run sized to end VALID."""

from __future__ import annotations

import math

from advisor.plan.run_configs import QUICK_DURATION_S
from advisor.plan.run_estimate import request_seconds, run_weight_bytes
from advisor.workload import traffic
from advisor.workload.profile import StageProfile
from bench.core.config import ConcurrencyLoad, RunConfig, cpu_dtype
from bench.engines.models import canonical_model

CPU_SIZED_PRESETS = {
    "llama-2-7b": "tiny-llama",
    "llama-2-13b": "tiny-llama",
    "llama-3-8b": "tiny-llama",
    "llama-3.1-8b": "tiny-llama",
    "llama-3.1-70b": "tiny-llama",
    "llama-3.1-405b": "tiny-llama",
    "llama-2-70b": "tiny-llama",
    "mistral-7b": "tiny-llama",
    "qwen2.5-7b": "tiny-llama",
    "mixtral-8x7b": "tiny-mixtral",
    "qwen3-30b-a3b": "tiny-mixtral",
    "bert-base": "tiny-bert",
    "vit-base": "tiny-vit",
    "resnet-50": "tiny-resnet",
}
"""Each preset's CPU-sized stand-in of the same architecture family (bench/engines/models.py)."""
TINY_PRESETS = frozenset(CPU_SIZED_PRESETS.values())
CPU_QUICK_CONCURRENCY = 4
"""Requests in flight at most in a CPU quick plan: a 2-core host serves a tiny model at ~4."""
CPU_QUICK_MAX_S = 600.0
"""Longest measured window a CPU quick plan allows itself to reach its request count."""
VALID_MARGIN = 1.2
"""A CPU quick run asks for 20% more requests than its validity minimum."""


def cpu_sized_model(stage: StageProfile) -> str:
    """The CPU-sized preset of the stage's model family (the model itself when already small)."""
    model = canonical_model(stage.model) if stage.model else ""
    if model in TINY_PRESETS:
        return model
    if model in CPU_SIZED_PRESETS:
        return CPU_SIZED_PRESETS[model]
    if stage.kind == "generate":
        return "tiny-llama"
    return "tiny-resnet" if stage.image_size else "tiny-bert"


def on_the_cpu(config: RunConfig, quick: bool) -> RunConfig:
    """A plan for a machine without a GPU: device cpu, the CPU dtype (`cpu_dtype`); vLLM eager in
    the quick plan (its CPU compile warm-up costs minutes) and without the GPU memory fraction
    (the KV cache is sized from the workload by the backend)."""
    args = dict(config.engine_args)
    if config.backend == "vllm":
        args.pop("gpu_memory_utilization", None)
        if quick:
            args["enforce_eager"] = True
    precision = config.precision.model_copy(
        update={"dtype": cpu_dtype(config.workload.kind, config.precision.dtype)}
    )
    config = traffic.on_the_cpu(config)  # a replay's first rows, clipped
    return config.model_copy(update={"device": "cpu", "engine_args": args, "precision": precision})


def cpu_quick_load(config: RunConfig, busy: float = 1.0) -> tuple[RunConfig, str | None]:
    """A CPU quick run sized to end VALID: at most CPU_QUICK_CONCURRENCY in flight, its window
    QUICK_DURATION_S and then on until its validity minimum + 20% requests were sent
    (`min_requests`), and a time bound that fits the estimated waves. When that count cannot
    fit CPU_QUICK_MAX_S, the note says so before it runs."""
    load = config.load
    if config.workload.kind != "generate" or not isinstance(load, ConcurrencyLoad):
        return config, None
    concurrency = min(load.concurrency, CPU_QUICK_CONCURRENCY)
    sized = config.model_copy(update={"load": load.model_copy(update={"concurrency": concurrency})})
    request_s = request_seconds(sized, run_weight_bytes(config), True, None) * busy
    requests = math.ceil(config.validity.min_requests * VALID_MARGIN)
    window_s = max(QUICK_DURATION_S, math.ceil(requests / concurrency) * request_s)
    bound = min(CPU_QUICK_MAX_S, max(load.max_duration_s, 2 * window_s + request_s))
    note = None
    if concurrency < load.concurrency:
        note = (
            f"On the CPU the quick plan keeps {concurrency} requests in flight, not "
            f"{load.concurrency}: a CPU computes every sequence of a batch itself"
        )
    if window_s > CPU_QUICK_MAX_S:
        note = (note + ". " if note else "") + (
            f"This CPU run cannot be VALID: its {requests} requests need about {window_s:.0f} s "
            f"({request_s:.0f} s each, {concurrency} at a time), past the quick plan's "
            f"{CPU_QUICK_MAX_S:.0f} s; shorten the prompts or outputs for a CPU check"
        )
    new_load = load.model_copy(
        update={
            "concurrency": concurrency,
            "min_requests": requests,
            "max_duration_s": bound,
        }
    )
    return config.model_copy(update={"load": new_load}), note
