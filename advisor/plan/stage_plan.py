"""The benchmark plan for one profile stage: the tree's candidates as RunConfigs in the stage's
workload shape, each with an estimate of its duration and disk use before it runs. The one
builder behind the Benchmark page, `advisor bench-plan` and campaigns.

On a machine without a GPU the quick plan swaps the model for its CPU-sized preset of the same
family (tiny-llama for Llama and Mistral): a check of the harness and the frameworks that ends in
minutes, not GPU figures; its lengths are scaled to the stand-in's context window when they
exceed it, and CPU runs use one dtype rule (`cpu_dtype`). A stage whose requests exceed its own
model's window is refused before planning.

Both plans also search the SLO capacity of the leading candidates (`capacity_configs`: the
full plan a 5% search at the stage's percentile, the quick plan a coarse one that keeps its
time budget) and state the repeats of the final comparison (3 in the full plan, 1 in the quick
plan); the plan's duration includes both.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import Field, computed_field

from advisor.plan.tree import BENCHMARKABLE_FRAMEWORKS, Decision, DecisionTree, evaluate, load_tree
from advisor.plan.window import engine_limit, fit_to_window, scale_to_window
from advisor.sizing.configurations import expert_parallelism
from advisor.sizing.engine_shape import backend_runs_kind, expert_engine_args
from advisor.sizing.estimate import bytes_per_parameter, estimate_stage
from advisor.workload import traffic
from advisor.workload.architectures import (
    architecture_for,
)
from advisor.workload.gpus import find_gpu
from advisor.workload.profile import StageProfile
from advisor.workload.stage_load import stage_load
from bench.core.config import (
    CPU_FORWARD_DTYPE,
    CPU_HALF_DTYPE,
    SLO,
    CapacityLoad,
    ConcurrencyLoad,
    ForwardWorkload,
    GenerateWorkload,
    LengthDistribution,
    RateLoad,
    RunConfig,
    StepLoad,
    ValidityRules,
    cpu_dtype,
)
from bench.core.errors import UserError
from bench.core.strict import Strict
from bench.engines.models import canonical_model

if TYPE_CHECKING:
    from advisor.sizing.calibration_fit import RecordSet

QUICK_DURATION_S = 15.0
FULL_DURATION_S = 120.0
CONFIRM_ABOVE_S = 600.0
"""A plan estimated to take longer than this asks for confirmation before it runs."""
FULL_REPEATS = 3
"""Repeats of each comparison run in the full plan: enough for a two-level interval."""
QUICK_REPEATS = 1
CAPACITY_CANDIDATES = 2
"""Leading candidates (the tree's order) whose SLO capacity the plan searches."""
QUICK_CAPACITY = {
    "precision": 0.25,
    "probe_requests": 20,
    "max_probes": 6,
    "recheck_boundary": False,
    "warmup_requests": 2,
    "max_duration_s": 300.0,
}
"""The quick plan's coarse capacity search: 25% precision, 20 requests a probe (below the
percentile's minimum: its report says so), at most 6 probes, no re-check of the boundary."""

CPU_SIZED_PRESETS = {
    "llama-2-7b": "tiny-llama",
    "llama-2-13b": "tiny-llama",
    "llama-3-8b": "tiny-llama",
    "llama-3.1-8b": "tiny-llama",
    "llama-3.1-70b": "tiny-llama",
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
CPU_QUICK_CONCURRENCY = 4
"""Requests in flight at most in a CPU quick plan: a 2-core host serves a tiny model at ~4."""
CPU_QUICK_MAX_S = 600.0
"""Longest measured window a CPU quick plan allows itself to reach its request count."""
VALID_MARGIN = 1.2
"""A CPU quick run asks for 20% more requests than its validity minimum."""
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


class StagePlan(Strict):
    """One stage's plan: where the tree led, one RunConfig per benchmarkable candidate, and what
    each will cost."""

    stage: str
    quick: bool
    decision: Decision
    configs: list[RunConfig]
    estimates: list[RunEstimate] = Field(default_factory=list)
    not_benchmarked: list[str] = Field(
        default_factory=list, description="Candidates this tool does not run (e.g. jax)."
    )
    cpu_only: bool = False
    profile_model: str | None = Field(None, description="The model the profile names.")
    note: str | None = Field(None, description="What the plan changed and why (CPU sizing).")
    repeats: int = Field(
        1, ge=1, description="Repeats of each comparison run (configs): a measurement group."
    )
    capacity_configs: list[RunConfig] = Field(
        default_factory=list,
        description="SLO capacity searches of the leading candidates (run after the configs).",
    )
    capacity_estimates: list[RunEstimate] = Field(default_factory=list)
    capacity_note: str | None = Field(
        None, description="How the capacity search is set (coarse in the quick plan), or why none."
    )

    def all_configs(self) -> list[RunConfig]:
        """Every run of the plan in order: the comparison configs, then the capacity searches
        (a runner makes each comparison config `repeats` times)."""
        return [*self.configs, *self.capacity_configs]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def duration_s(self) -> float:
        return round(
            sum(e.total_s for e in self.estimates)
            + sum(e.total_s for e in self.capacity_estimates),
            1,
        )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def repeats_added_s(self) -> float:
        """What the repeats add to the plan (beyond one run of each comparison config)."""
        return round(sum(e.total_s - e.duration_s for e in self.estimates), 1)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def capacity_s(self) -> float:
        return round(sum(e.total_s for e in self.capacity_estimates), 1)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def disk_bytes(self) -> int:
        return sum(e.disk_bytes for e in self.estimates + self.capacity_estimates)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def needs_confirmation(self) -> bool:
        return self.duration_s > CONFIRM_ABOVE_S


def plan_for_stage(
    stage: StageProfile,
    *,
    quick: bool = False,
    tree: DecisionTree | None = None,
    cpu_only: bool = False,
    configurations: bool = False,
    busy: float = 1.0,
    records: RecordSet | None = None,
) -> StagePlan:
    """Walk the tree for `stage` and plan one run per benchmarkable candidate, with estimates.

    `cpu_only` (no GPU on the machine that will run it): the quick plan runs the model's
    CPU-sized preset of the same family, vLLM eager (no compile warm-up), on the CPU; `busy`
    scales the CPU estimates (`host_busy_factor()` for this machine). `records`: the
    `bench calibrate` records whose fits predict the planned runs (default: the shipped ones).
    `configurations` (GPU plans): the configuration search's most promising TP x replicas x
    precision layouts of the first candidate join the plan
    (`advisor.sizing.configurations.plan_runs`).
    """
    decision = evaluate(tree or load_tree(), stage, estimate_stage(stage))
    if decision.refused:
        raise UserError(f"stage {stage.name!r} cannot be planned: {decision.refused}")
    traffic.check_history(stage)  # later turns resend the history: they must fit the window
    planned, clip_note = fit_to_window(stage)
    notes = [clip_note] if clip_note else []
    if cpu_only and quick and stage.model is not None:
        small = cpu_sized_model(stage)
        if small != stage.model:
            planned = planned.model_copy(update={"model": small})
            notes.append(
                f"This machine has no GPU: the quick plan runs {small} (the CPU-sized model of "
                f"the same family) instead of {stage.model}. It checks the harness and the "
                "frameworks in minutes; its figures are CPU figures, not GPU figures."
            )
            planned, scale_note = scale_to_window(planned, stage)
            if scale_note:
                notes.append(scale_note)
    configs = bench_plan(planned, decision, quick=quick)
    skipped = [
        c.framework
        for c in decision.candidates
        if c.framework in BENCHMARKABLE_FRAMEWORKS
        and c.framework not in {config.backend for config in configs}
        and engine_limit(planned, c.framework) is not None
    ]
    if skipped:
        notes.append(
            f"Not planned: {', '.join(skipped)} - the sequences exceed the model's position "
            "limit in that engine (the rope-scaled window applies to vLLM and TensorRT-LLM only)"
        )
    if cpu_only:
        configs = [_on_the_cpu(config, quick) for config in configs]
        if quick:
            sized = [cpu_quick_load(config, busy) for config in configs]
            configs = [config for config, _ in sized]
            for cpu_note in dict.fromkeys(note for _, note in sized if note):
                notes.append(cpu_note + ".")
        wanted = stage.precision.dtype
        used = cpu_dtype(stage.kind, wanted)
        if configs and used != wanted:
            notes.append(
                f"CPU runs use {used}, not the profile's {wanted}: "
                + (
                    "CPUs have bfloat16 kernels; float16 is slow or unsupported there (vLLM casts "
                    "it to bfloat16 itself)."
                    if stage.kind == "generate"
                    else "the one dtype every forward framework runs on the CPU."
                )
            )
    note = " ".join(notes) or None
    if configurations and not cpu_only and configs and stage.kind == "generate":
        from advisor.sizing.calibration import calibration_from
        from advisor.sizing.configurations import plan_runs, search_configurations
        from advisor.sizing.measured import read_reference_folder

        _, factors = calibration_from([], read_reference_folder().runs)
        search = search_configurations(stage, configs[0].backend, factors.lookup(stage))
        if search is not None:
            configs += plan_runs(configs[0], search)
    from advisor.sizing.calibration_fit import RecordSet, shipped_records
    from advisor.sizing.run_prediction import with_predictions
    from bench.core.calibration import CPU_DEVICE

    if records is None:
        records = RecordSet(shipped=tuple(shipped_records()))
    configs = with_predictions(configs, CPU_DEVICE if cpu_only else stage.gpu.type, records)
    repeats = QUICK_REPEATS if quick else FULL_REPEATS
    capacity_configs, capacity_note = capacity_plan(stage, configs, quick)
    if cpu_only and quick and capacity_configs:
        # The CPU quick plan runs a CPU-sized substitute: its capacity says nothing about the
        # user's GPU fleet, and the searches would outlast a first answer in minutes.
        capacity_configs = []
        capacity_note = (
            "No capacity search in the CPU quick plan: it runs a CPU-sized model, whose capacity "
            "says nothing about the GPU fleet; the full plan on a GPU host searches it"
        )
    estimates = estimate_runs(
        configs + capacity_configs,
        cpu_only=cpu_only,
        gpu=stage.gpu.type,
        busy=busy if cpu_only else 1.0,
    )
    for run_estimate in estimates[: len(configs)]:
        run_estimate.repeats = repeats
    if quick:
        # The quick plan keeps its budget: searches that would push it past the confirmation
        # threshold are left to the full plan, last candidate first.
        comparison_s = sum(e.total_s for e in estimates[: len(configs)])
        dropped: list[str] = []
        while len(estimates) > len(configs) and (
            comparison_s + sum(e.total_s for e in estimates[len(configs) :]) > CONFIRM_ABOVE_S
        ):
            estimates.pop()
            dropped.insert(0, capacity_configs.pop().backend)
        if dropped:
            capacity_note = (
                (capacity_note + ". " if capacity_configs else "")
                + f"Not in the quick plan: the capacity search of {', '.join(dropped)} (about "
                f"{_search_s(stage, configs, dropped, cpu_only, busy):.0f} s, past the quick "
                f"plan's {CONFIRM_ABOVE_S:.0f} s budget); the full plan runs it"
            )
    return StagePlan(
        stage=stage.name,
        quick=quick,
        decision=decision,
        configs=configs,
        estimates=estimates[: len(configs)],
        repeats=repeats,
        capacity_configs=capacity_configs,
        capacity_estimates=estimates[len(configs) :],
        capacity_note=capacity_note,
        not_benchmarked=[c.framework for c in decision.candidates if not c.benchmarked],
        cpu_only=cpu_only,
        profile_model=stage.model,
        note=note,
    )


def workload_lengths(config: RunConfig) -> str:
    """The run's request lengths in words, for plan tables (`prompt 6,000 / output 200 tok`)."""
    workload = config.workload
    if isinstance(workload, GenerateWorkload):
        prompt, output = _length(workload.prompt_tokens), _length(workload.output_tokens)
        return f"prompt {prompt} / output {output}"
    parts = [f"batch {workload.batch_size}"]
    if workload.sequence_length is not None:
        parts.append(_length(workload.sequence_length))
    if workload.image_size is not None:
        parts.append(f"{workload.image_size} px")
    return " x ".join(parts)


def _length(distribution: LengthDistribution) -> str:
    text = f"{distribution.mean:,}"
    if distribution.kind != "fixed" and distribution.spread:
        text += f" ({distribution.kind} ±{distribution.spread:g})"
    if distribution.max is not None:
        text += f" ≤{distribution.max:,}"
    return text + " tok"


def host_busy_factor() -> float:
    """How many times slower CPU work runs here than on an idle host: the 1-minute load average
    over the usable cores, at least 1 (other work shares the cores a CPU run needs)."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1.0, os.getloadavg()[0] / max(cores, 1))


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


def _on_the_cpu(config: RunConfig, quick: bool) -> RunConfig:
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


# --------------------------------------------------------------------------- estimates


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
    weight_bytes = _weight_bytes(config)
    checkpoint_bytes, cached = _checkpoint(config, weight_bytes)
    cached = cached or written
    parts: dict[str, float] = {}
    if checkpoint_bytes and not cached:
        parts["write checkpoint"] = checkpoint_bytes / CHECKPOINT_WRITE_B_S
    parts["engine start"] = ENGINE_START_S.get(config.backend, DEFAULT_ENGINE_START_S) * busy
    if weight_bytes:
        parts["load weights"] = weight_bytes / WEIGHT_LOAD_B_S
    request_s = _request_seconds(config, weight_bytes, cpu_only, gpu) * busy
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


def _weight_bytes(config: RunConfig) -> int | None:
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


def _request_seconds(
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
    request_s = _request_seconds(sized, _weight_bytes(config), True, None) * busy
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


def bench_plan(stage: StageProfile, decision: Decision, quick: bool = False) -> list[RunConfig]:
    """One RunConfig per benchmarkable candidate, in the stage's workload shape.

    quick = a first benchmark-backed answer in minutes: one closed-loop phase of 15 s at the
    user's concurrency (8 when none is given), 2 warm-ups (sent together), validity relaxed to
    10 requests over 10 s; its end-to-end time on an H200 is in the quick_plan step of
    data/reference/h200_llama2-7b_fidelity_quick_plan_onnx_genai/
    campaign-fidelity-rounds-quick-plan.json.
    Full = 120 s at the user's concurrency or rate, or a step ladder (article 3.3) when neither is
    given. `jax` (not run by the bench) and adapters that do not run the stage's kind are skipped.
    """
    if stage.model is None:
        raise UserError(f"stage {stage.name!r} has no model; set `model` to plan benchmarks")
    if decision.refused:
        raise UserError(f"stage {stage.name!r} cannot be planned: {decision.refused}")
    configs: list[RunConfig] = []
    for candidate in decision.candidates:
        if candidate.framework not in BENCHMARKABLE_FRAMEWORKS:
            continue
        if backend_runs_kind(candidate.framework, stage.kind) is False:
            continue
        if engine_limit(stage, candidate.framework) is not None:
            continue  # this engine's position limit is below the stage's longest request
        configs.append(
            RunConfig(
                backend=candidate.framework,
                model=stage.model,
                engine_args=expert_engine_args(
                    candidate.framework, traffic.sized_for_engine(stage)
                ),
                parallelism=expert_parallelism(
                    candidate.framework, traffic.sized_for_engine(stage)
                ),
                workload=_workload(stage),
                load=_load(stage, quick),
                slo=SLO(
                    ttft_ms=stage.slo.ttft_ms,
                    tpot_ms=stage.slo.tpot_ms,
                    e2e_ms=stage.slo.e2e_ms,
                    percentile=stage.slo.percentile,
                ),
                validity=ValidityRules(min_duration_s=10, min_requests=10)
                if quick
                else ValidityRules(),
                precision=stage.precision.run_precision(),
                label=f"advisor {'quick ' if quick else ''}plan: stage {stage.name}, "
                f"{candidate.framework} (tree rank {candidate.rank})",
            )
        )
    return traffic.caching_pair(configs, stage)  # caching on/off where prefixes are shared


def capacity_plan(
    stage: StageProfile, configs: list[RunConfig], quick: bool
) -> tuple[list[RunConfig], str]:
    """The SLO capacity search (`--pattern capacity`) of the first CAPACITY_CANDIDATES
    frameworks of the plan, each at its comparison config's workload and settings; the quick
    plan's search is coarse (QUICK_CAPACITY). None without a latency SLO (nothing to search
    under), with the reason."""
    slo = stage.slo
    if slo.ttft_ms is None and slo.tpot_ms is None and slo.e2e_ms is None:
        return [], (
            "No capacity search: the profile sets no latency SLO (ttft_ms, tpot_ms or e2e_ms), "
            "so there is no rate to search under; the GPU count cannot be measured"
        )
    leading: list[RunConfig] = []
    for config in configs:
        if config.backend not in {c.backend for c in leading}:
            leading.append(config)
        if len(leading) == CAPACITY_CANDIDATES:
            break
    options = dict(QUICK_CAPACITY) if quick else {"warmup_requests": 8}
    load = CapacityLoad(percentile=slo.percentile, **options)
    planned = [
        config.model_copy(
            update={
                "load": load,
                "label": f"advisor {'quick ' if quick else ''}plan: stage {stage.name}, "
                f"{config.backend} SLO capacity search",
            }
        )
        for config in leading
    ]
    names = ", ".join(c.backend for c in planned) or "no candidate"
    if quick:
        note = (
            f"Capacity search of {names}: coarse (25% precision, 20 requests a probe, at most "
            "6 probes, no boundary re-check) to keep the quick plan's time budget; the full plan "
            "searches to 5% with probes long enough for the percentile"
        )
    else:
        note = (
            f"Capacity search of {names}: to 5% precision at {slo.percentile}, probes long "
            "enough for the percentile and judged after settling for the end-to-end time the "
            "SLO allows, boundary confirmed and re-checked (docs/capacity.md)"
        )
    return planned, note


def _search_s(
    stage: StageProfile, configs: list[RunConfig], backends: list[str], cpu_only: bool, busy: float
) -> float:
    """Estimated seconds of the quick capacity searches of `backends` (for the note)."""
    searches, _ = capacity_plan(stage, [c for c in configs if c.backend in backends], True)
    return sum(
        e.duration_s
        for e in estimate_runs(
            searches, cpu_only=cpu_only, gpu=stage.gpu.type, busy=busy if cpu_only else 1.0
        )
    )


def _workload(stage: StageProfile) -> GenerateWorkload | ForwardWorkload:
    if traffic.declares_traffic(stage):
        return traffic.workload(stage)
    if stage.kind == "generate":
        return GenerateWorkload(
            prompt_tokens=stage.prompt_tokens, output_tokens=stage.output_tokens
        )
    return ForwardWorkload(
        batch_size=stage.batch_size,
        sequence_length=stage.sequence_length,
        image_size=stage.image_size,
        dynamic_shapes=not stage.fixed_input_shapes,
    )


def _load(
    stage: StageProfile, quick: bool
) -> ConcurrencyLoad | RateLoad | StepLoad | traffic.ReplayLoad:
    if stage.trace_file is not None:
        return traffic.replay_load(stage, quick)
    if quick:
        return ConcurrencyLoad(
            concurrency=stage_load(stage).per_engine,
            duration_s=QUICK_DURATION_S,
            warmup_requests=2,
            max_duration_s=150.0,
        )
    if stage.request_rate_rps is not None and stage.concurrency is None:
        return RateLoad(
            rate_rps=stage.request_rate_rps, duration_s=FULL_DURATION_S, warmup_requests=8
        )
    if stage.concurrency is not None:
        return ConcurrencyLoad(
            concurrency=stage.concurrency, duration_s=FULL_DURATION_S, warmup_requests=8
        )
    return StepLoad(start=10, step=10, max=100, stage_duration_s=60.0, warmup_requests=8)


__all__ = [
    "CAPACITY_CANDIDATES",
    "CONFIRM_ABOVE_S",
    "CPU_FORWARD_DTYPE",
    "CPU_HALF_DTYPE",
    "FULL_DURATION_S",
    "FULL_REPEATS",
    "QUICK_DURATION_S",
    "QUICK_REPEATS",
    "RunEstimate",
    "StagePlan",
    "bench_plan",
    "capacity_plan",
    "cpu_dtype",
    "cpu_sized_model",
    "estimate_run",
    "estimate_runs",
    "fit_to_window",
    "host_busy_factor",
    "plan_for_stage",
    "scale_to_window",
    "workload_lengths",
]
