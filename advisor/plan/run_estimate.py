"""What a planned run will cost before it runs (duration and disk), from round planning figures:
estimates for the confirmation before Run, not measurements."""

from __future__ import annotations

from pydantic import Field, computed_field

from advisor.sizing.estimate import bytes_per_parameter
from advisor.workload import traffic
from advisor.workload.architectures import architecture_for
from advisor.workload.gpus import find_gpu
from bench.core.config import CapacityLoad, ConcurrencyLoad, RunConfig
from bench.core.strict import Strict
from bench.engines.models import canonical_model

# Planning estimates, not measurements: round figures that put a run's cost in the right range
# (seconds vs minutes vs hours), which is what the confirmation before Run needs.
HOST_MEMORY_BANDWIDTH_B_S = 10e9
"""Host memory bandwidth a CPU decode step reads the weights at (a few DDR channels)."""
GPU_BANDWIDTH_EFFICIENCY = 0.6
"""Fraction of the datasheet bandwidth a decode step reaches."""
STEP_OVERHEAD_S = {"cpu": 0.02, "gpu": 0.004}
"""Per decode step framework and launch overhead (dominates for tiny models)."""
CPU_SEQUENCE_STEP_S = 0.0128
CPU_PREFILL_S_PER_TOKEN = 0.00014
"""One sequence's share of a CPU decode step, and the CPU prefill time per prompt token: a 2-core
host computes every sequence of a batch itself, so a step grows with the sequences in flight.
From one run on such a host: `bench run --backend pytorch --model tiny-llama --pattern
concurrency --concurrency 8 --prompt-tokens 1024 --output-tokens 256` gave TTFT 1.15 s and TPOT
122 ms (8 x 1024 prompt tokens, 8 sequences a step)."""
CHECKPOINT_WRITE_B_S = 150e6
"""Random-weight checkpoint written by bench/engines/models.py (fill + safetensors write)."""
WEIGHT_LOAD_B_S = 1e9
ENGINE_START_S = {
    "vllm": 60.0,
    "pytorch": 25.0,
    "torch_compile": 90.0,
    "onnxruntime": 60.0,
    "tensorrt_llm": 180.0,
    "tensorrt": 300.0,
    "openai": 90.0,
}
"""Engine start before weights are read: process spawn, imports, graph capture or compile."""
DEFAULT_ENGINE_START_S = 30.0
EXPORT_COPIES = {"onnxruntime": 1.0, "tensorrt_llm": 1.0, "tensorrt": 1.0}
"""Extra copies of the weights a backend writes (ONNX export, built engine)."""


class RunEstimate(Strict):
    """What one planned run will cost before it runs: an estimate for planning, not a figure."""

    backend: str
    model: str
    duration_s: float = Field(
        description="Checkpoint write + engine start + load + warm-up + phases."
    )
    disk_bytes: int = Field(description="New bytes written: checkpoint when not cached, exports.")
    checkpoint_bytes: int | None = None
    checkpoint_cached: bool = False
    parts_s: dict[str, float] = Field(default_factory=dict)
    basis: str = ""
    repeats: int = Field(1, ge=1, description="Times the run is made (a measurement group).")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_s(self) -> float:
        """All repeats of the run (each repeat starts its engine again)."""
        return round(self.duration_s * self.repeats, 1)


def host_busy_factor() -> float:
    """How many times slower CPU work runs here than on an idle host: the 1-minute load average
    over the usable cores, at least 1 (other work shares the cores a CPU run needs)."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1.0, os.getloadavg()[0] / max(cores, 1))


def estimate_runs(
    configs: list[RunConfig], *, cpu_only: bool, gpu: str | None = None, busy: float = 1.0
) -> list[RunEstimate]:
    """Estimates of runs done in this order: a checkpoint is written once, by the first run
    that needs it."""
    estimates: list[RunEstimate] = []
    written: set[tuple[str, str]] = set()
    for config in configs:
        key = (config.model, config.precision.dtype)
        estimates.append(
            estimate_run(config, cpu_only=cpu_only, gpu=gpu, written=key in written, busy=busy)
        )
        written.add(key)
    return estimates


def estimate_run(
    config: RunConfig,
    *,
    cpu_only: bool,
    gpu: str | None = None,
    written: bool = False,
    busy: float = 1.0,
) -> RunEstimate:
    """Duration and disk use of one run before it runs (see the constants for the basis);
    `written`: an earlier run of the plan writes its checkpoint; `busy`: how many times slower
    compute runs than on an idle host (`host_busy_factor`), applied to engine start and
    requests."""
    weight_bytes = run_weight_bytes(config)
    checkpoint_bytes, cached = _checkpoint(config, weight_bytes)
    cached = cached or written
    parts: dict[str, float] = {}
    if checkpoint_bytes and not cached:
        parts["write checkpoint"] = checkpoint_bytes / CHECKPOINT_WRITE_B_S
    parts["engine start"] = ENGINE_START_S.get(config.backend, DEFAULT_ENGINE_START_S) * busy
    if weight_bytes:
        parts["load weights"] = weight_bytes / WEIGHT_LOAD_B_S
    request_s = request_seconds(config, weight_bytes, cpu_only, gpu) * busy
    if config.load.warmup_requests:
        parts["warm-up"] = request_s  # warm-up requests are sent together
    # measured phases plus the drain of requests in flight when each phase ends
    parts["phases"] = config.load.planned_seconds(request_s, traffic.replay_seconds)
    if isinstance(config.load, CapacityLoad):  # each judged rate probe settles first
        settle_s, _ = config.load.settle_for(config.slo, config.workload.mean_output_tokens())
        if settle_s:
            parts["settle"] = settle_s * config.load.planned_probes()
    run_part = parts.get("warm-up", 0.0) + parts["phases"] + parts.get("settle", 0.0)
    if run_part > config.load.max_duration_s:  # the run's hard bound ends it (INVALID)
        parts["phases"] = max(0.0, config.load.max_duration_s - parts.get("warm-up", 0.0))
        if parts.get("warm-up", 0.0) > config.load.max_duration_s:
            parts["warm-up"] = config.load.max_duration_s
    export_bytes = int((weight_bytes or 0) * EXPORT_COPIES.get(config.backend, 0.0))
    disk = (0 if cached else checkpoint_bytes or 0) + export_bytes
    where = "CPU" if cpu_only else (gpu or "GPU")
    return RunEstimate(
        backend=config.backend,
        model=config.model,
        duration_s=round(sum(parts.values()), 1),
        disk_bytes=disk,
        checkpoint_bytes=checkpoint_bytes,
        checkpoint_cached=cached,
        parts_s={name: round(value, 1) for name, value in parts.items()},
        basis=f"estimate on {where}: decode step = weights / memory bandwidth + overhead; "
        f"one request {request_s:.1f} s" + (f"; host busy x{busy:.1f}" if busy > 1 else ""),
    )


def run_weight_bytes(config: RunConfig) -> int | None:
    """Bytes of the run's weights at its precision (None: the model's size is not known)."""
    architecture, _source = architecture_for(config.model)
    if architecture is None:
        return None
    per_parameter, _ = bytes_per_parameter(config.precision.dtype, config.precision.quantization)
    return int(architecture.parameters * per_parameter)


def _checkpoint(config: RunConfig, weight_bytes: int | None) -> tuple[int | None, bool]:
    """(bytes of the checkpoint the run reads, whether it is on disk already)."""
    from pathlib import Path

    from bench.engines.models import PRESETS, preset_dir

    model = canonical_model(config.model)
    if model not in PRESETS:
        return weight_bytes, Path(model).expanduser().exists()
    written = preset_dir(model, dtype=config.precision.dtype) / "config.json"
    return weight_bytes, written.exists()


def request_seconds(
    config: RunConfig, weight_bytes: int | None, cpu_only: bool, gpu: str | None
) -> float:
    """One request at the plan's load: prefill (one step) + one step per output token; on the
    CPU each step also pays for every sequence in flight (CPU_SEQUENCE_STEP_S) and the prefill
    for every prompt token of the batch (CPU_PREFILL_S_PER_TOKEN)."""
    if cpu_only:
        bandwidth = HOST_MEMORY_BANDWIDTH_B_S
    else:
        spec = find_gpu(gpu) if gpu else None
        bandwidth = (spec.memory_bandwidth_tb_s * 1e12 if spec else 2e12) * GPU_BANDWIDTH_EFFICIENCY
    step_s = (weight_bytes or 0) / bandwidth + STEP_OVERHEAD_S["cpu" if cpu_only else "gpu"]
    workload = config.workload
    if workload.kind != "generate":
        return step_s
    if cpu_only and isinstance(config.load, ConcurrencyLoad):
        batch = config.load.concurrency
        prefill_s = workload.prompt_tokens.mean * batch * CPU_PREFILL_S_PER_TOKEN
        return prefill_s + workload.output_tokens.mean * (step_s + batch * CPU_SEQUENCE_STEP_S)
    return (workload.output_tokens.mean + 1) * step_s
