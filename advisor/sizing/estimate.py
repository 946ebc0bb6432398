"""Feasibility and the physical floor, before anything runs: the context window, memory fit,
decode and prefill floors.

The context window comes first (`check_context`): a stage whose near-worst request (prompt +
output) exceeds the model's window (max_position_embeddings, rope scaling by vLLM's rule) is
refused, and its memory fit is not judged (`fits` None, `refused` says why); without a GPU
(type or memory) the fit is not judged either and `fit_verdict` says there is no GPU to fit
against.

Units: GB = 1e9 bytes, TB/s = 1e12 bytes/s (datasheet units). Formulas:
- weights = parameters x bytes per parameter (fp32 4, fp16/bf16 2, fp8/int8 1, 4-bit 0.5 plus
  0.03125 for one fp16 scale and one fp16 zero point per group of 128 weights);
- KV cache = 2 (K and V) x layers x KV heads x head dim x KV bytes x context tokens x sequences
  (GQA aware: Llama-3-8B and Mistral-7B have 8 KV heads, Llama-2 has as many as query heads).
  Context = mean prompt + mean output: paged KV caches (vLLM, TensorRT-LLM) hold what sequences
  use, and a sequence at the end of its output holds its full context, so concurrency x mean
  context is the steady-state peak. The near-worst-case single context (`max_context_tokens`,
  mean + 2 std or the clip) is what the context-window check refuses on;
- required = weights + KV + 1.5 GiB per GPU (CUDA context, the activations of the engine's
  largest batch, workspaces, CUDA graphs), against the 90% of each GPU a serving engine takes
  (the one memory rule: advisor/sizing/engine_model/replica.py, checked against vLLM's own
  KV pool in advisor/sizing/memory_validation.py);
- decode floor (batch 1, per output token) = weight bytes / memory bandwidth, the time just to
  stream the weights once (KV reads excluded, so the true floor is a little higher);
- prefill floor = 2 x parameters x prompt tokens / peak dense tensor FLOP/s.
Multiple GPUs are assumed to be used with tensor parallelism (weights and KV split evenly).
The architectures (parameter counts, layers, heads, windows) and the context-window check live
in advisor/workload/architectures.py, below the profile's loading.
"""

from __future__ import annotations

from pydantic import Field

from advisor.sizing.engine_model.facts import ModelFacts, model_facts
from advisor.sizing.engine_model.formats import formats_for
from advisor.sizing.engine_model.prefix import TrafficShape, prefix_reuse
from advisor.sizing.engine_model.replica import (
    GB,
    GIB,
    RUNTIME_OVERHEAD_GIB_PER_GPU,
    engine_memory_bytes,
)
from advisor.sizing.engine_model.replica import kv_bytes_per_token as model_kv_bytes_per_token
from advisor.workload.architectures import (
    Architecture,
    ContextWindow,
    architecture_for,
    check_context,
    high_tokens,
)
from advisor.workload.gpus import GPUS, GpuSpec
from advisor.workload.profile import StageProfile
from advisor.workload.stage_load import stage_load
from bench.core.strict import Strict

DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}
FOUR_BIT_GROUP_OVERHEAD = 4 / 128
"""Bytes per weight for a 4-bit group of 128 with an fp16 scale and an fp16 zero point."""
QUANTIZATION_BYTES = {
    "awq": 0.5 + FOUR_BIT_GROUP_OVERHEAD,
    "gptq": 0.5 + FOUR_BIT_GROUP_OVERHEAD,
    "int4": 0.5 + FOUR_BIT_GROUP_OVERHEAD,
    "fp8": 1.0,
    "int8": 1.0,
    "w8a8": 1.0,
}
TP_DEGREES = (1, 2, 4, 8)


class Estimate(Strict):
    """Memory fit and physical floors of one stage on its GPU(s); None = not computable."""

    model: str | None
    kind: str
    parameters: int | None = Field(None, description="Parameter count used.")
    parameters_b: float | None = None
    parameters_source: str = ""
    precision: str = ""
    bytes_per_parameter: float | None = None
    weights_gb: float | None = None
    kv_cache_bytes_per_token: int | None = Field(
        None, description="2 x layers x KV heads x head dim x KV dtype bytes."
    )
    context_tokens: int | None = Field(
        None, description="Mean prompt + mean output tokens per sequence (KV cache sizing)."
    )
    max_context_tokens: int | None = Field(
        None, description="Near-worst-case prompt + output of one sequence (max_model_len)."
    )
    concurrency: int = 1
    concurrency_source: str = ""
    kv_cache_gb: float | None = None
    runtime_overhead_gb: float | None = None
    required_gb: float | None = None
    gpu: str | None = None
    gpu_count: int = 1
    memory_per_gpu_gb: float | None = None
    available_gb: float | None = None
    fits: bool | None = Field(None, description="None when the GPU or model size is unknown.")
    kv_limited: bool = Field(
        False,
        description="The model fits, but one engine's KV cache holds fewer of the peak's "
        "requests in flight than arrive (max_concurrency_that_fits): replicas take the rest.",
    )
    headroom_gb: float | None = None
    max_concurrency_that_fits: int | None = None
    tensor_parallel_needed: int | None = Field(
        None, description="Smallest TP degree (GPUs) that fits at this precision; None = none."
    )
    memory_bandwidth_tb_s: float | None = None
    bandwidth_source: str | None = None
    decode_floor_ms_per_token: float | None = None
    decode_ceiling_tok_s_per_sequence: float | None = None
    peak_tflops: float | None = None
    prefill_floor_ms: float | None = None
    forward_floor_ms: float | None = Field(
        None, description="Forward kind: max(weight read time, compute time) for one batch."
    )
    suggestions: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    context: ContextWindow | None = Field(
        None, description="The context-window check (generate kind, and encoders' sequences)."
    )
    memory_source: str | None = Field(
        None, description="Where the GPU memory came from; None = no GPU to fit against."
    )

    @property
    def context_fits(self) -> bool | None:
        return None if self.context is None else self.context.fits

    @property
    def refused(self) -> str | None:
        """Why nothing can run this stage as asked (checked before memory), or None."""
        return self.context.problem if self.context is not None else None

    @property
    def parameters_label(self) -> str:
        return format_parameters(self.parameters)

    @property
    def fit_verdict(self) -> str:
        """The memory panel's headline: never a fit against a GPU nobody chose."""
        if self.refused:
            return "refused: context too long"
        if self.fits is None:
            if self.memory_per_gpu_gb is None:
                return "no GPU to fit against"
            return "unknown"
        if self.fits and self.kv_limited:
            return f"fits, {self.max_concurrency_that_fits} in flight per engine"
        return "fits" if self.fits else "does not fit"


def format_parameters(count: int | None) -> str:
    """A parameter count with a unit that keeps three significant digits (4.19 M, 6.74 B)."""
    if not count:
        return "unknown"
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return str(count)


def bytes_per_parameter(dtype: str, quantization: str | None) -> tuple[float, str | None]:
    """Weight bytes per parameter and a note when the quantisation name is not known."""
    if quantization:
        key = quantization.lower()
        for name, size in QUANTIZATION_BYTES.items():
            if name in key:
                return size, None
        return DTYPE_BYTES[dtype], (
            f"quantisation {quantization!r} is not in the estimate's table "
            f"({', '.join(QUANTIZATION_BYTES)}); weights counted at {dtype}"
        )
    return DTYPE_BYTES[dtype], None


def estimate_stage(stage: StageProfile) -> Estimate:
    """The memory fit and floors of one stage; what can't be computed is None with a note."""
    notes: list[str] = []
    architecture, arch_source = architecture_for(stage.model)
    dtype = stage.precision.dtype
    per_param, quant_note = bytes_per_parameter(dtype, stage.precision.quantization)
    if quant_note:
        notes.append(quant_note)
    precision_label = dtype + (
        f" + {stage.precision.quantization}" if stage.precision.quantization else ""
    )

    if stage.parameters_b is not None:
        parameters: int | None = round(stage.parameters_b * 1e9)
        parameters_source = "parameters_b in the profile"
    elif architecture is not None:
        parameters = architecture.parameters
        parameters_source = arch_source
    else:
        parameters = None
        parameters_source = arch_source
        notes.append(f"parameter count unknown ({arch_source}); set parameters_b")

    gpu_spec: GpuSpec | None = GPUS.get(stage.gpu.type) if stage.gpu.type else None
    gpu_count = stage.gpu.count
    memory_per_gpu = stage.gpu.memory_gb
    estimate = Estimate(
        model=stage.model,
        kind=stage.kind,
        parameters=parameters,
        # six decimals: tiny presets (4.19 M parameters) are not 0.00 B
        parameters_b=round(parameters / 1e9, 6) if parameters else None,
        parameters_source=parameters_source,
        precision=precision_label,
        bytes_per_parameter=per_param,
        gpu=stage.gpu.type,
        gpu_count=gpu_count,
        memory_per_gpu_gb=memory_per_gpu,
        notes=notes,
    )
    notes = estimate.notes  # pydantic copied the list: keep appending to the model's own
    weight_bytes = parameters * per_param if parameters else None
    if weight_bytes is not None:
        estimate.weights_gb = weight_bytes / GB

    # ---- KV cache (generate kind)
    kv_bytes = 0.0
    kv_per_sequence = 0.0
    load = stage_load(stage)
    concurrency, estimate.concurrency_source = load.per_engine, load.rule
    estimate.concurrency = concurrency
    facts = model_facts(architecture, parameters)
    traffic = TrafficShape.of_stage(stage)
    # Traffic that shares prefixes is served by engines with automatic prefix caching (the
    # tree's candidates for it): shared contexts sit once in the KV pool.
    reuse = prefix_reuse(traffic, caching=stage.declares_shared_prefixes())
    if stage.kind == "generate":
        served = traffic.served_prompt()
        context = served.mean + stage.output_tokens.mean
        max_context = high_tokens(served) + high_tokens(stage.output_tokens)
        estimate.context_tokens = round(context)
        estimate.max_context_tokens = round(max_context)
        formats = formats_for(dtype, None, stage.precision.kv_cache_dtype)
        per_token = model_kv_bytes_per_token(facts, formats) if facts is not None else None
        if per_token is not None:
            kv_per_token = int(per_token)
            estimate.kv_cache_bytes_per_token = kv_per_token
            kv_per_sequence = kv_per_token * (context - reuse.per_sequence_shared_tokens)
            kv_bytes = kv_per_sequence * concurrency + kv_per_token * reuse.shared_kv_tokens
            estimate.kv_cache_gb = kv_bytes / GB
            if reuse.shared_kv_tokens:
                notes.append(
                    f"KV cache: the shared context ({reuse.shared_kv_tokens:,.0f} tokens) is "
                    "counted once, as engines with automatic prefix caching hold it (vLLM, "
                    "SGLang, TensorRT-LLM block reuse)"
                )
        else:
            notes.append("KV cache not estimated: layer/head sizes unknown for this model")
    # The KV cache an engine must hold to count as fitting: one sequence and any shared prefix
    # where the fleet's replicas take the rest, else every sequence the profile names.
    kv_must_hold = kv_bytes
    if load.replicas_take_the_rest and kv_per_sequence > 0:
        kv_must_hold = kv_bytes - kv_per_sequence * (concurrency - 1)
    estimate.context = check_context(stage, architecture)
    if estimate.context is not None and estimate.context.warning:
        notes.append(estimate.context.warning)
    # ---- memory fit
    if weight_bytes is not None:
        overhead = RUNTIME_OVERHEAD_GIB_PER_GPU * GIB * gpu_count
        estimate.runtime_overhead_gb = overhead / GB
        required = weight_bytes + kv_bytes + overhead
        estimate.required_gb = required / GB
        if memory_per_gpu is not None:
            source = f"{stage.gpu.type} datasheet" if stage.gpu.type else "memory_gb in the profile"
            estimate.memory_source = (
                f"{source}: {memory_per_gpu:g} GiB a GPU, of which a serving engine takes 90% "
                "(vLLM's gpu_memory_utilization default)"
            )
            available = engine_memory_bytes(memory_per_gpu) * gpu_count
            estimate.available_gb = available / GB
            estimate.fits = required <= available
            estimate.headroom_gb = (available - required) / GB
            if kv_per_sequence > 0:
                shared = kv_bytes - kv_per_sequence * concurrency
                free_for_kv = available - overhead - weight_bytes - shared
                estimate.max_concurrency_that_fits = max(0, int(free_for_kv // kv_per_sequence))
            estimate.tensor_parallel_needed = _tp_needed(weight_bytes, kv_must_hold, memory_per_gpu)
        else:
            notes.append(
                "no GPU to fit against (GPU not decided: set gpu.type or gpu.memory_gb); "
                "the memory needed is shown, the fit is not judged"
            )
    # ---- floors
    bandwidth = stage.gpu.memory_bandwidth_tb_s
    if bandwidth is not None:
        estimate.bandwidth_source = "measured (profile)"
    elif gpu_spec is not None:
        bandwidth = gpu_spec.memory_bandwidth_tb_s
        estimate.bandwidth_source = f"datasheet ({gpu_spec.source})"
    estimate.memory_bandwidth_tb_s = bandwidth
    if gpu_spec is not None:
        estimate.peak_tflops = gpu_spec.peak_tflops(dtype)
        if estimate.peak_tflops is None:
            notes.append(
                f"no dense tensor-core peak for {dtype} in the catalogue: no compute floor"
            )
    if weight_bytes is not None and bandwidth is not None:
        # A mixture-of-experts token reads its router's experts only (engine_model/facts.py).
        read_share = facts.weight_fraction_read(1) if facts is not None else 1.0
        weight_read_ms = weight_bytes * read_share / (bandwidth * 1e12 * gpu_count) * 1e3
        if stage.kind == "generate":
            estimate.decode_floor_ms_per_token = weight_read_ms
            estimate.decode_ceiling_tok_s_per_sequence = 1e3 / weight_read_ms
    if parameters and estimate.peak_tflops:
        flops_per_s = estimate.peak_tflops * 1e12 * gpu_count
        if stage.kind == "generate":
            estimate.prefill_floor_ms = (
                _prefill_flops(facts, traffic.served_prompt().mean, reuse.cached_tokens)
                / flops_per_s
                * 1e3
            )
        else:
            batch_flops = _forward_flops(stage, architecture, parameters)
            if batch_flops is not None and weight_bytes is not None and bandwidth is not None:
                compute_ms = batch_flops / flops_per_s * 1e3
                read_ms = weight_bytes / (bandwidth * 1e12 * gpu_count) * 1e3
                estimate.forward_floor_ms = max(compute_ms, read_ms)
            else:
                notes.append("forward floor not estimated: set sequence_length or image_size")
    if (
        estimate.fits is False
        and load.replicas_take_the_rest
        and (estimate.max_concurrency_that_fits or 0) >= 1
    ):
        # A rate's in-flight count is the whole fleet's: an engine that holds the weights and
        # some of those sequences fits, and replicas (the fleet answer) take the rest; tensor
        # parallelism is for a model that does not fit at all.
        estimate.fits = True
        estimate.kv_limited = True
        estimate.tensor_parallel_needed = 1 if gpu_count == 1 else estimate.tensor_parallel_needed
        notes.append(
            f"at the peak {concurrency} requests are in flight per engine ({load.rule}); their "
            f"KV cache needs {estimate.required_gb:.0f} GB, so one engine on {gpu_count} "
            f"{stage.gpu.type or 'GPU'} holds {estimate.max_concurrency_that_fits} of them and "
            "replicas take the rest (the fleet answer counts them)"
        )
    if estimate.refused:
        # A memory fit of sequences no engine accepts would be a false "fits": not judged.
        estimate.fits = None
        estimate.max_concurrency_that_fits = None
        estimate.tensor_parallel_needed = None
        notes.append(f"refused before any run: {estimate.refused}")
    if estimate.fits is False:
        estimate.suggestions = _suggestions(
            stage, estimate, parameters, kv_bytes, kv_must_hold, gpu_spec
        )
    return estimate


def _prefill_flops(facts: ModelFacts | None, prompt: float, cached: float) -> float:
    """One prompt's prefill: 2 x active parameters per uncached token plus its causal
    attention (engine_model/facts.py); a cached prefix is not prefilled."""
    if facts is None:
        return 0.0
    uncached = max(prompt - cached, 1.0)
    return 2 * facts.active_parameters * uncached + facts.prefill_attention_flops(prompt, cached)


def _tp_needed(weight_bytes: float, kv_bytes: float, memory_per_gpu_gb: float) -> int | None:
    for degree in TP_DEGREES:
        required = weight_bytes + kv_bytes + RUNTIME_OVERHEAD_GIB_PER_GPU * GIB * degree
        if required <= engine_memory_bytes(memory_per_gpu_gb) * degree:
            return degree
    return None


def _forward_flops(
    stage: StageProfile, architecture: Architecture | None, parameters: int
) -> float | None:
    """FLOPs of one forward batch: 2 x params x tokens for transformers, table GFLOPs for CNNs."""
    if architecture is not None and architecture.gflops_per_image_224 is not None:
        side = stage.image_size or 224
        return architecture.gflops_per_image_224 * 1e9 * (side / 224) ** 2 * stage.batch_size
    if architecture is not None and architecture.patch_size:
        side = stage.image_size or 224
        tokens = (side // architecture.patch_size) ** 2 + 1
        return 2 * parameters * tokens * stage.batch_size
    if stage.sequence_length is not None:
        return 2 * parameters * stage.sequence_length.mean * stage.batch_size
    return None


def _suggestions(
    stage: StageProfile,
    estimate: Estimate,
    parameters: int | None,
    kv_bytes: float,
    kv_must_hold: float,
    gpu_spec: GpuSpec | None,
) -> list[str]:
    """What would make it fit: tensor parallelism, weight quantisation, FP8 KV, fewer sequences.
    An engine must hold `kv_must_hold` of the KV cache (`estimate_stage`'s rule)."""
    out: list[str] = []
    replicas = (
        " (with replicas for the rest of the sequences in flight)"
        if kv_must_hold < kv_bytes
        else ""
    )
    memory_per_gpu = engine_memory_bytes(estimate.memory_per_gpu_gb or 0)
    count = estimate.gpu_count
    needed = estimate.tensor_parallel_needed
    if needed is not None and needed > count:
        out.append(
            f"tensor parallelism: {needed} x {estimate.gpu or 'GPU'} "
            f"(tensor_parallel_size={needed}) holds it at {estimate.precision}{replicas}"
        )
    elif needed is None:
        out.append(f"even 8-way tensor parallelism does not hold it at {estimate.precision}")
    if parameters and not stage.precision.quantization:
        options = [("fp8", 1.0), ("awq", QUANTIZATION_BYTES["awq"])]
        for name, size in options:
            weights = parameters * size
            required = weights + kv_must_hold + RUNTIME_OVERHEAD_GIB_PER_GPU * GIB * count
            fits = required <= memory_per_gpu * count
            hardware = ""
            if name == "fp8" and gpu_spec is not None and not gpu_spec.fp8:
                hardware = f" ({gpu_spec.name} has no FP8 tensor cores: weight-only FP8 kernels)"
            verdict = f"fits{replicas}" if fits else "still does not fit"
            if not fits and (
                needed_q := _tp_needed(weights, kv_must_hold, estimate.memory_per_gpu_gb or 0)
            ):
                verdict += f" on 1; tensor_parallel_size={needed_q} holds it{replicas}"
            out.append(
                f"weight quantisation {name}: weights {weights / GB:.1f} GB, needs "
                f"{required / GB:.1f} GB -> {verdict}{hardware}"
            )
    if kv_bytes > 0:
        out.append(
            f"FP8 KV cache (vLLM kv_cache_dtype=fp8) halves the KV cache "
            f"{kv_bytes / GB:.1f} GB -> {kv_bytes / 2 / GB:.1f} GB"
        )
        if estimate.max_concurrency_that_fits:
            out.append(
                f"fewer sequences in flight: at most {estimate.max_concurrency_that_fits} of "
                f"{estimate.context_tokens} tokens fit (vLLM max_num_seqs / max_model_len)"
            )
    return out


__all__ = [
    "Estimate",
    "bytes_per_parameter",
    "estimate_stage",
    "format_parameters",
]
