"""Rehearse a GPU campaign plan on this machine's CPU before spending GPU time on it.

`python -m bench campaign PLAN --out DIR --rehearse-on-cpu` runs the same steps (same names,
kinds, backends, load patterns, replicas, fidelity checks) with a tiny random-weight model on the
CPU, short stages and low concurrency: every step goes through the real engines, the campaign
folder layout, resuming and the campaign file, in minutes. What a CPU cannot stand in for is
changed and said per step (`rehearsal_changes`): tensor parallelism becomes 1, FP8 weights and
KV cache are dropped (the CPU engines have no FP8 path), GPU memory settings are dropped, vLLM
runs eager (its CPU graph compile costs minutes). A rehearsal measures nothing about the GPU
plan's figures; its runs are CPU runs of a tiny model and are labelled so.
"""

from __future__ import annotations

from typing import Literal

from bench.core.config import (
    GenerateWorkload,
    LengthDistribution,
    ParallelismConfig,
    PrecisionConfig,
    RehearsalBounds,
    RunConfig,
    ValidityRules,
)
from bench.orchestrate.campaign import (
    AdvisorPlanStep,
    CampaignPlan,
    CampaignStep,
    FidelityStep,
    QualityStep,
    RunStep,
)
from bench.orchestrate.fidelity import PytorchFidelityCheck, VllmFidelityCheck

MAX_CONCURRENCY = 4  # requests in flight at most: a 2-core CPU serves a tiny model at ~4
STAGE_S = 4.0  # each measured stage or phase (s)
REPLAY_ROWS = 8  # a rehearsed replay sends the trace's first rows only
MAX_REPLICAS = 2  # engines side by side at most (each is a full engine process on the CPU)
MAX_PROMPT_TOKENS = 64
MAX_OUTPUT_TOKENS = 16
MAX_BATCH = 4
FIDELITY_REQUESTS = 32
# A quality step's model: the preset trained on the CPU in seconds, so perplexity means something.
QUALITY_MODEL = "tiny-llama-trained"
QUALITY_BOOTSTRAP = 100
REHEARSAL_CAPACITY_RPS = 2.0  # steady/pulse phases are set around this rate instead of a search
CPU_DROPPED_ENGINE_ARGS = (
    "gpu_memory_utilization",
    "quantization",  # a checkpoint format (awq, ...): the tiny CPU model has none
    "kv_cache_dtype",
)


def rehearsal_model(config: RunConfig) -> str:
    """The tiny preset of the workload's kind: tiny-llama (generate), tiny-resnet (images),
    tiny-bert (other forward workloads)."""
    workload = config.workload
    if workload.kind == "generate":
        return "tiny-llama"
    return "tiny-resnet" if workload.image_size else "tiny-bert"


def _capped(length: LengthDistribution, at_most: int) -> LengthDistribution:
    mean = min(length.mean, at_most)
    return LengthDistribution(kind="fixed", mean=mean, max=None, min=1)


REHEARSAL_BOUNDS = RehearsalBounds(
    warmup_requests=2,
    request_timeout_s=120.0,
    stage_s=STAGE_S,
    max_concurrency=MAX_CONCURRENCY,
    max_rate_rps=4.0,
    replay_rows=REPLAY_ROWS,
    max_prompt_tokens=MAX_PROMPT_TOKENS,
    max_output_tokens=MAX_OUTPUT_TOKENS,
    capacity_rps=REHEARSAL_CAPACITY_RPS,
)
"""The same pattern, shorter and at most MAX_CONCURRENCY in flight (each pattern's
`rehearsal`); steady and pulse are held around REHEARSAL_CAPACITY_RPS without a search."""


def _cpu_engine_args(engine_args: dict, vllm: bool) -> dict:
    """The engine arguments without the GPU, TP and FP8 ones; for vLLM also eager, with
    sequences and context capped to what a tiny CPU run needs."""
    args = {k: v for k, v in engine_args.items() if k not in CPU_DROPPED_ENGINE_ARGS}
    if vllm:
        args["enforce_eager"] = True
        if "max_num_seqs" in args:
            args["max_num_seqs"] = min(int(args["max_num_seqs"]), MAX_CONCURRENCY * 2)
        if "max_model_len" in args:
            args["max_model_len"] = min(int(args["max_model_len"]), 256)
    return args


def rehearse_config(config: RunConfig) -> RunConfig:
    """One run of the plan as it runs on the CPU with a tiny model."""
    args = _cpu_engine_args(config.engine_args, vllm=config.backend == "vllm")
    if config.backend == "openai" and args.get("launch") == "vllm":  # the server it starts
        args["server_args"] = _cpu_engine_args(args.get("server_args") or {}, vllm=True)
    workload = config.workload
    if isinstance(workload, GenerateWorkload):
        workload = workload.model_copy(
            update={
                "prompt_tokens": _capped(workload.prompt_tokens, MAX_PROMPT_TOKENS),
                "output_tokens": _capped(workload.output_tokens, MAX_OUTPUT_TOKENS),
            }
        )
        if workload.prefix is not None:  # the traffic shape stays, at CPU-sized lengths
            prefix = workload.prefix.model_copy(
                update={"tokens": _capped(workload.prefix.tokens, MAX_PROMPT_TOKENS)}
            )
            workload = workload.model_copy(update={"prefix": prefix})
        if workload.conversation is not None:
            conversation = workload.conversation.model_copy(
                update={
                    "turns": _capped(workload.conversation.turns, 2),
                    "user_tokens": _capped(workload.conversation.user_tokens, MAX_OUTPUT_TOKENS),
                }
            )
            workload = workload.model_copy(update={"conversation": conversation})
    else:
        workload = workload.model_copy(update={"batch_size": min(workload.batch_size, MAX_BATCH)})
    parallel = config.parallelism
    return config.model_copy(
        update={
            "model": rehearsal_model(config),
            "device": "cpu",
            "engine_args": args,
            "workload": workload,
            "load": config.load.rehearsal(REHEARSAL_BOUNDS),
            "validity": ValidityRules(min_duration_s=1.0, min_requests=2),
            "precision": PrecisionConfig(dtype="float32", quantization=_cpu_w8a8(config)),
            "parallelism": ParallelismConfig(replicas=min(parallel.replicas, MAX_REPLICAS)),
            "watchdog_s": 600.0,
            "label": f"CPU rehearsal: {config.label or config.backend}",
        }
    )


def _cpu_w8a8(config: RunConfig) -> Literal["int8"] | None:
    """A pytorch forward run's INT8/FP8 W8A8 rehearses as torch's dynamic INT8 (the CPU's
    8-bit path), so the rehearsal still loads, quantizes and runs an 8-bit model."""
    quantized = config.precision.quantization is not None
    forward = not isinstance(config.workload, GenerateWorkload)
    return "int8" if quantized and forward and config.backend == "pytorch" else None


def rehearsal_changes(step: CampaignStep) -> list[str]:
    """What the rehearsal of `step` leaves out of the GPU plan, in words."""
    changes: list[str] = []
    if isinstance(step, RunStep):
        config = step.config
        changes.append(f"{config.model} -> {rehearsal_model(config)} on the CPU")
        if config.parallelism.tensor_parallel_size > 1:
            changes.append(f"TP={config.parallelism.tensor_parallel_size} -> TP=1")
        if config.parallelism.replicas > MAX_REPLICAS:
            changes.append(f"{config.parallelism.replicas} replicas -> {MAX_REPLICAS}")
        if _cpu_w8a8(config):
            changes.append(f"{config.precision.label()} -> float32 + int8 dynamic (the CPU's)")
        elif config.precision.uses_fp8:
            changes.append(f"{config.precision.label()} -> float32 (no FP8 on the CPU)")
        if config.load.held_at_capacity:
            changes.append(f"capacity {REHEARSAL_CAPACITY_RPS:g} req/s assumed (no search)")
    elif isinstance(step, FidelityStep):
        check = step.check
        changes.append(f"{check.model} -> tiny-llama on the CPU")
        if isinstance(check, VllmFidelityCheck):
            if check.parallelism.tensor_parallel_size > 1:
                changes.append(f"TP={check.parallelism.tensor_parallel_size} -> TP=1")
            if check.precision.uses_fp8:
                changes.append("FP8 dropped (no FP8 on the CPU)")
    elif isinstance(step, QualityStep):
        changes.append(f"{step.model} -> {QUALITY_MODEL} on this machine")
        if step.bootstrap > QUALITY_BOOTSTRAP:
            changes.append(f"bootstrap {step.bootstrap} -> {QUALITY_BOOTSTRAP} draws")
    else:
        changes.append("the advisor's plan on the CPU (its CPU-sized model)")
    return changes


def _rehearse_step(step: CampaignStep) -> CampaignStep:
    if isinstance(step, RunStep):
        return step.model_copy(update={"config": rehearse_config(step.config), "estimate_s": 60})
    if isinstance(step, FidelityStep):
        check = step.check
        common = {
            "model": "tiny-llama",
            "dtype": "float32",
            "device": "cpu",
            "prompt_tokens": min(check.prompt_tokens, 32),
            "output_tokens": min(check.output_tokens, MAX_OUTPUT_TOKENS),
        }
        if isinstance(check, VllmFidelityCheck):
            rehearsed = check.model_copy(
                update={
                    **common,
                    "requests": FIDELITY_REQUESTS,
                    "max_num_seqs": MAX_CONCURRENCY * 2,
                    "client_concurrency": FIDELITY_REQUESTS if check.client_concurrency else None,
                    "engine_args": _cpu_engine_args(check.engine_args, vllm=True),
                    "parallelism": ParallelismConfig(),
                    "quantization": None,
                    "kv_cache_dtype": "auto",
                    "warmup_requests": 2,
                }
            )
        else:
            assert isinstance(check, PytorchFidelityCheck)
            rehearsed = check.model_copy(
                update={**common, "batch": min(check.batch, MAX_BATCH), "pairs": 2, "rounds": 1}
            )
        return step.model_copy(update={"check": rehearsed, "estimate_s": 90})
    if isinstance(step, QualityStep):
        bootstrap = min(step.bootstrap, QUALITY_BOOTSTRAP)
        return step.model_copy(
            update={"model": QUALITY_MODEL, "bootstrap": bootstrap, "estimate_s": 120}
        )
    assert isinstance(step, AdvisorPlanStep)
    return step.model_copy(update={"device": "cpu"})


def rehearsal_plan(plan: CampaignPlan) -> CampaignPlan:
    """`plan` with every step as it runs on the CPU; names and order kept, so the rehearsal's
    folder has the GPU campaign's layout. The description lists what each step leaves out."""
    notes = "; ".join(f"{step.name}: {', '.join(rehearsal_changes(step))}" for step in plan.steps)
    return CampaignPlan(
        name=f"{plan.name} (CPU rehearsal)",
        description=f"CPU rehearsal of {plan.name!r}, not its measurements. Changed: {notes}.",
        default_step_estimate_s=60.0,
        steps=[_rehearse_step(step) for step in plan.steps],
    )
