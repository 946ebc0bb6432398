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
- required = weights + KV + 10% of both (activations of the largest batch, allocator
  fragmentation) + 1 GB per GPU (CUDA context, cuBLAS/attention workspaces, NCCL buffers);
- decode floor (batch 1, per output token) = weight bytes / memory bandwidth, the time just to
  stream the weights once (KV reads excluded, so the true floor is a little higher);
- prefill floor = 2 x parameters x prompt tokens / peak dense tensor FLOP/s.
Multiple GPUs are assumed to be used with tensor parallelism (weights and KV split evenly).
Parameter counts of the bench presets are kept here (exact, equal to
`bench.engines.models.parameter_count` of the preset configs; a test checks it) so estimating never
imports torch or writes weights; llama-2-70b is a preset too (written only on hosts with the disk
for its ~138 GB); its count here is `_architecture_from_config` on its published config (a test
checks it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from advisor.workload.gpus import GPUS, GpuSpec
from advisor.workload.stage_load import stage_load
from bench.core.config import LengthDistribution
from bench.core.strict import Strict

if TYPE_CHECKING:  # annotations only: loading a profile checks its context window through here
    from advisor.workload.profile import StageProfile

GB = 1e9
RUNTIME_OVERHEAD_GB_PER_GPU = 1.0
ACTIVATION_MARGIN_FRACTION = 0.10
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


@dataclass(frozen=True)
class RopeScaling:
    """A config.json `rope_scaling` entry: its type, factor and original window (yarn)."""

    rope_type: str
    factor: float = 1.0
    original_max_positions: int | None = None


ROPE_TYPES_ALREADY_IN_POSITIONS = frozenset({"su", "longrope", "llama3"})
"""rope_scaling types whose config already states the extended window in
max_position_embeddings (vLLM's and TensorRT-LLM's max-length rule leaves them unscaled)."""


@dataclass(frozen=True)
class Architecture:
    """The sizes the estimate needs; `parameters` is the exact count (tied weights once)."""

    name: str
    kind: str
    parameters: int
    layers: int | None = None
    hidden_size: int | None = None
    attention_heads: int | None = None
    kv_heads: int | None = None
    max_positions: int | None = None
    patch_size: int | None = None
    gflops_per_image_224: float | None = None
    """CNNs only: forward GFLOPs (2 x multiply-adds) for one 224 px image."""
    rope_scaling: RopeScaling | None = None

    @property
    def head_dim(self) -> int | None:
        if self.hidden_size and self.attention_heads:
            return self.hidden_size // self.attention_heads
        return None


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("tiny-llama", "generate", 4_188_480, 2, 64, 4, 2, 4096),
        Architecture("tiny-llama-trained", "generate", 354_624, 2, 64, 2, 1, 1024),
        Architecture("llama-2-7b", "generate", 6_738_415_616, 32, 4096, 32, 32, 4096),
        Architecture("llama-2-13b", "generate", 13_015_864_320, 40, 5120, 40, 40, 4096),
        Architecture("llama-3-8b", "generate", 8_030_261_248, 32, 4096, 32, 8, 8192),
        Architecture("mistral-7b", "generate", 7_241_732_096, 32, 4096, 32, 8, 32768),
        # Not a bench preset: sized for estimates only (count from the Llama formula below).
        Architecture("llama-2-70b", "generate", 68_976_648_192, 80, 8192, 64, 8, 4096),
        Architecture("bert-base", "forward", 109_482_240, 12, 768, 12, None, 512),
        Architecture("vit-base", "forward", 86_567_656, 12, 768, 12, None, None, patch_size=16),
        Architecture("resnet-50", "forward", 25_557_032, gflops_per_image_224=8.2),
        Architecture("tiny-bert", "forward", 169_664, 2, 64, 4, None, 512),
        Architecture("tiny-vit", "forward", 81_226, 2, 64, 4, None, None, patch_size=8),
        Architecture("tiny-resnet", "forward", 75_290),
    )
}


SCALED_WINDOW_ENGINES = ("vllm", "tensorrt_llm", "openai")
"""Engines whose maximum sequence length is the model's window with rope scaling applied
(vLLM's `_get_and_verify_max_len`, TensorRT-LLM's max_seq_len inference, an OpenAI-compatible
server, which is vLLM here)."""
RAW_POSITION_ENGINES = ("pytorch", "torch_compile", "onnxruntime", "tensorrt")
"""Engines held to max_position_embeddings itself: the bench's transformers adapters check it
before generating, onnxruntime-genai's context_length is it, an encoder's position table is it."""


class ContextWindow(Strict):
    """Whether the stage's sequences fit the model's context window, judged before any run.

    Two lengths: `near_worst_tokens` (the estimate's `high_tokens` of prompt + output, about the
    98th percentile) decides feasibility: when it exceeds every engine's limit the stage is
    refused. `longest_tokens` (`upper_tokens`, what the generator can produce at most) only warns:
    the few requests past the window would be refused by the engine, so the plan clips to it."""

    positions: int | None = Field(None, description="The model's max_position_embeddings.")
    rope_scaling: str | None = Field(None, description="config.json rope_scaling, in words.")
    window_tokens: int | None = Field(
        None, description="The longest sequence any engine accepts (rope scaling applied)."
    )
    source: str = ""
    near_worst_tokens: int = Field(description="high_tokens(prompt) + high_tokens(output).")
    longest_tokens: int = Field(description="upper_tokens(prompt) + upper_tokens(output).")
    engine_limits: dict[str, int] = Field(
        default_factory=dict, description="Framework -> longest prompt + output it accepts."
    )
    fits: bool | None = Field(None, description="None when the model's window is unknown.")
    problem: str | None = Field(None, description="Why the stage is refused (one sentence).")
    warning: str | None = Field(None, description="Only the distribution's tail is too long.")


class FieldProblem(Strict):
    """A problem of one profile field found before anything runs (for the form and the CLI)."""

    stage: str
    field: str = Field(description="Stage field path, e.g. prompt_tokens or gpu.type.")
    severity: Literal["error", "warning"]
    message: str


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
    activation_margin_gb: float | None = None
    runtime_overhead_gb: float | None = None
    required_gb: float | None = None
    gpu: str | None = None
    gpu_count: int = 1
    memory_per_gpu_gb: float | None = None
    available_gb: float | None = None
    fits: bool | None = Field(None, description="None when the GPU or model size is unknown.")
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
        return "fits" if self.fits else "does not fit"


def format_parameters(count: int | None) -> str:
    """A parameter count with a unit that keeps three significant digits (4.19 M, 6.74 B)."""
    if not count:
        return "unknown"
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return str(count)


def high_tokens(distribution: LengthDistribution) -> int:
    """A near-worst-case length: fixed = mean, uniform = mean + spread, normal/lognormal =
    mean + 2 std (about the 98th percentile of a normal), clipped to `max`."""
    if distribution.kind == "fixed":
        value = float(distribution.mean)
    elif distribution.kind == "uniform":
        value = distribution.mean + distribution.spread
    else:
        value = distribution.mean + 2 * distribution.spread
    if distribution.max is not None:
        value = min(value, distribution.max)
    return max(distribution.min, math.ceil(value))


def upper_tokens(distribution: LengthDistribution) -> int:
    """The longest length the workload generator can produce (engine limits such as
    max_model_len must cover it): the `max` clip when set; else fixed = mean, uniform =
    mean + spread, normal = mean + 5 std, lognormal = its 1-in-3.5-million quantile (5 sigma)."""
    if distribution.max is not None:
        return distribution.max
    if distribution.kind == "fixed" or distribution.spread == 0:
        return distribution.mean
    if distribution.kind == "uniform":
        return math.ceil(distribution.mean + distribution.spread)
    if distribution.kind == "normal":
        return math.ceil(distribution.mean + 5 * distribution.spread)
    sigma = math.sqrt(math.log1p((distribution.spread / distribution.mean) ** 2))
    mu = math.log(distribution.mean) - sigma**2 / 2
    return math.ceil(math.exp(mu + 5 * sigma))


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


def architecture_for(model: str | None) -> tuple[Architecture | None, str]:
    """The preset's architecture, or one read from a local checkpoint's config.json."""
    if model is None:
        return None, "no model given"
    if model in ARCHITECTURES:
        return ARCHITECTURES[model], "bench preset (exact count)"
    config_file = Path(model).expanduser() / "config.json"
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # ValueError: bad JSON, or not UTF-8 at all
            return None, f"{config_file} is unreadable"
        return _architecture_from_config(model, config)
    return None, f"model {model!r} is not a preset and has no readable config.json"


def _architecture_from_config(model: str, config: dict) -> tuple[Architecture | None, str]:
    """Llama-style decoder sizes from a Hugging Face config.json (approximate count)."""
    try:
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        intermediate = int(config["intermediate_size"])
        vocab = int(config["vocab_size"])
    except (KeyError, TypeError, ValueError):
        return None, "config.json lacks the sizes of a decoder (hidden_size, layers, heads...)"
    head_dim = hidden // heads
    positions = _config_positions(config)
    per_layer = (
        2 * hidden * hidden  # q and o projections
        + 2 * hidden * kv_heads * head_dim  # k and v projections (GQA)
        + 3 * hidden * intermediate  # gated MLP
        + 2 * hidden  # two RMSNorms
    )
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    parameters = layers * per_layer + embeddings + hidden
    architecture = Architecture(
        model,
        "generate",
        parameters,
        layers,
        hidden,
        heads,
        kv_heads,
        positions,
        rope_scaling=_rope_scaling(config),
    )
    return architecture, "config.json, Llama-style formula (approximate)"


POSITION_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
"""config.json keys that bound the sequence length; vLLM takes the smallest one present."""


def _config_positions(config: dict) -> int | None:
    values = []
    for key in POSITION_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            values.append(value)
    return min(values) if values else None


def _rope_scaling(config: dict) -> RopeScaling | None:
    """config.json's rope_scaling (transformers 4.x) or rope_parameters (5.x), when it scales."""
    entry = config.get("rope_scaling") or config.get("rope_parameters")
    if not isinstance(entry, dict):
        return None
    rope_type = entry.get("rope_type") or entry.get("type")
    if not isinstance(rope_type, str) or rope_type == "default":
        return None
    factor = entry.get("factor", 1.0)
    original = entry.get("original_max_position_embeddings")
    return RopeScaling(
        rope_type,
        float(factor) if isinstance(factor, int | float) else 1.0,
        original if isinstance(original, int) else None,
    )


def context_limits(architecture: Architecture) -> tuple[int | None, dict[str, int], str | None]:
    """(the longest sequence any engine accepts, per-engine limits, rope scaling in words).

    The serving engines' rule (vLLM `_get_and_verify_max_len`, TensorRT-LLM likewise): the window
    is max_position_embeddings, times the rope_scaling factor unless its type already states the
    extended window (su, longrope, llama3); yarn scales original_max_position_embeddings."""
    positions = architecture.max_positions
    if positions is None:
        return None, {}, None
    scaled = positions
    words = None
    rope = architecture.rope_scaling
    if rope is not None:
        words = f"{rope.rope_type} x{rope.factor:g}"
        if rope.rope_type not in ROPE_TYPES_ALREADY_IN_POSITIONS:
            base = rope.original_max_positions if rope.rope_type == "yarn" else None
            scaled = int((base or positions) * rope.factor)
    limits = {name: scaled for name in SCALED_WINDOW_ENGINES}
    limits.update({name: positions for name in RAW_POSITION_ENGINES})
    return max(limits.values()), limits, words


def check_context(stage: StageProfile, architecture: Architecture | None) -> ContextWindow | None:
    """The stage's sequences against the model's window (see ContextWindow); None when the stage
    has no sequence length to check (images, or a forward stage without sequence_length)."""
    if stage.kind == "generate":
        near_worst = high_tokens(stage.prompt_tokens) + high_tokens(stage.output_tokens)
        longest = upper_tokens(stage.prompt_tokens) + upper_tokens(stage.output_tokens)
        what = "prompt + output"
    elif stage.sequence_length is not None:
        near_worst = high_tokens(stage.sequence_length)
        longest = upper_tokens(stage.sequence_length)
        what = "sequence length"
    else:
        return None
    check = ContextWindow(near_worst_tokens=near_worst, longest_tokens=longest)
    if architecture is None:
        check.source = "model unknown: context window not checked"
        return check
    window, limits, rope_words = context_limits(architecture)
    check.positions = architecture.max_positions
    check.rope_scaling = rope_words
    check.window_tokens = window
    check.engine_limits = limits
    if window is None:
        check.source = f"{architecture.name} states no position limit: not checked"
        return check
    check.source = f"{architecture.name}: max_position_embeddings {architecture.max_positions:,}"
    if rope_words:
        check.source += f", rope_scaling {rope_words} -> window {window:,}"
    check.fits = near_worst <= window
    if not check.fits:
        check.problem = (
            f"{what} of up to {near_worst:,} tokens exceeds {architecture.name}'s context window "
            f"of {window:,} tokens ({check.source}); no engine accepts it "
            f"(vLLM's max_model_len, TensorRT-LLM's max_seq_len and transformers' position "
            f"limit are all at most {window:,}). Shorten the requests to {window:,} tokens in "
            "all, or choose a model with a longer window" + _longer_models(near_worst, stage.kind)
        )
    elif longest > window:
        check.warning = (
            f"the longest requests the distributions can produce ({longest:,} tokens) exceed "
            f"the {window:,}-token window: engines refuse those few; runs clip them at the "
            "window (set prompt_tokens.max to say so in the profile)"
        )
    return check


def _longer_models(tokens: int, kind: str) -> str:
    names = [
        f"{a.name} ({a.max_positions:,})"
        for a in ARCHITECTURES.values()
        if a.kind == kind and a.max_positions and a.max_positions >= tokens
    ]
    return f" (presets that take it: {', '.join(names)})." if names else "."


def feasibility_problems(profile_stages: list[StageProfile]) -> list[FieldProblem]:
    """Per-field problems the form and the CLI show before anything runs: the context window
    (errors refuse the stage; warnings say what the runs will clip)."""
    problems: list[FieldProblem] = []
    for stage in profile_stages:
        architecture, _ = architecture_for(stage.model)
        check = check_context(stage, architecture)
        if check is None:
            continue
        field = "prompt_tokens" if stage.kind == "generate" else "sequence_length"
        if check.problem:
            severity, message = "error", check.problem
        elif check.warning:
            severity, message = "warning", check.warning
        else:
            continue
        problems.append(
            FieldProblem(stage=stage.name, field=field, severity=severity, message=message)
        )
    return problems


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
    concurrency, estimate.concurrency_source = _concurrency(stage)
    estimate.concurrency = concurrency
    if stage.kind == "generate":
        context = stage.prompt_tokens.mean + stage.output_tokens.mean
        max_context = high_tokens(stage.prompt_tokens) + high_tokens(stage.output_tokens)
        estimate.context_tokens = context
        estimate.max_context_tokens = max_context
        if architecture is not None and architecture.layers and architecture.head_dim:
            kv_heads = architecture.kv_heads or architecture.attention_heads or 0
            kv_per_token = int(
                2 * architecture.layers * kv_heads * architecture.head_dim * DTYPE_BYTES[dtype]
            )
            estimate.kv_cache_bytes_per_token = kv_per_token
            kv_per_sequence = kv_per_token * context
            kv_bytes = kv_per_sequence * concurrency
            estimate.kv_cache_gb = kv_bytes / GB
        else:
            notes.append("KV cache not estimated: layer/head sizes unknown for this model")
    estimate.context = check_context(stage, architecture)
    if estimate.context is not None and estimate.context.warning:
        notes.append(estimate.context.warning)
    # ---- memory fit
    if weight_bytes is not None:
        margin = ACTIVATION_MARGIN_FRACTION * (weight_bytes + kv_bytes)
        overhead = RUNTIME_OVERHEAD_GB_PER_GPU * GB * gpu_count
        estimate.activation_margin_gb = margin / GB
        estimate.runtime_overhead_gb = overhead / GB
        required = weight_bytes + kv_bytes + margin + overhead
        estimate.required_gb = required / GB
        if memory_per_gpu is not None:
            estimate.memory_source = (
                f"{stage.gpu.type} datasheet" if stage.gpu.type else "memory_gb in the profile"
            )
            available = memory_per_gpu * GB * gpu_count
            estimate.available_gb = available / GB
            estimate.fits = required <= available
            estimate.headroom_gb = (available - required) / GB
            if kv_per_sequence > 0:
                free_for_kv = available - overhead - weight_bytes * (1 + ACTIVATION_MARGIN_FRACTION)
                per_sequence = kv_per_sequence * (1 + ACTIVATION_MARGIN_FRACTION)
                estimate.max_concurrency_that_fits = max(0, int(free_for_kv // per_sequence))
            estimate.tensor_parallel_needed = _tp_needed(
                weight_bytes, kv_bytes, memory_per_gpu * GB
            )
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
        weight_read_ms = weight_bytes / (bandwidth * 1e12 * gpu_count) * 1e3
        if stage.kind == "generate":
            estimate.decode_floor_ms_per_token = weight_read_ms
            estimate.decode_ceiling_tok_s_per_sequence = 1e3 / weight_read_ms
    if parameters and estimate.peak_tflops:
        flops_per_s = estimate.peak_tflops * 1e12 * gpu_count
        if stage.kind == "generate":
            estimate.prefill_floor_ms = (
                2 * parameters * stage.prompt_tokens.mean / flops_per_s * 1e3
            )
        else:
            batch_flops = _forward_flops(stage, architecture, parameters)
            if batch_flops is not None and weight_bytes is not None and bandwidth is not None:
                compute_ms = batch_flops / flops_per_s * 1e3
                read_ms = weight_bytes / (bandwidth * 1e12 * gpu_count) * 1e3
                estimate.forward_floor_ms = max(compute_ms, read_ms)
            else:
                notes.append("forward floor not estimated: set sequence_length or image_size")
    if estimate.refused:
        # A memory fit of sequences no engine accepts would be a false "fits": not judged.
        estimate.fits = None
        estimate.max_concurrency_that_fits = None
        estimate.tensor_parallel_needed = None
        notes.append(f"refused before any run: {estimate.refused}")
    if estimate.fits is False:
        estimate.suggestions = _suggestions(stage, estimate, parameters, kv_bytes, gpu_spec)
    return estimate


def _concurrency(stage: StageProfile) -> tuple[int, str]:
    """The stage's one load rule (`advisor.workload.stage_load`): its in-flight count and the
    rule."""
    load = stage_load(stage)
    return load.per_engine, load.rule


def _tp_needed(weight_bytes: float, kv_bytes: float, memory_per_gpu: float) -> int | None:
    for degree in TP_DEGREES:
        required = (weight_bytes + kv_bytes) * (1 + ACTIVATION_MARGIN_FRACTION)
        required += RUNTIME_OVERHEAD_GB_PER_GPU * GB * degree
        if required <= memory_per_gpu * degree:
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
    gpu_spec: GpuSpec | None,
) -> list[str]:
    """What would make it fit: tensor parallelism, weight quantisation, FP8 KV, fewer sequences."""
    out: list[str] = []
    memory_per_gpu = (estimate.memory_per_gpu_gb or 0) * GB
    count = estimate.gpu_count
    needed = estimate.tensor_parallel_needed
    if needed is not None and needed > count:
        out.append(
            f"tensor parallelism: {needed} x {estimate.gpu or 'GPU'} "
            f"(tensor_parallel_size={needed}) holds it at {estimate.precision}"
        )
    elif needed is None:
        out.append(f"even 8-way tensor parallelism does not hold it at {estimate.precision}")
    if parameters and not stage.precision.quantization:
        options = [("fp8", 1.0), ("awq", QUANTIZATION_BYTES["awq"])]
        for name, size in options:
            weights = parameters * size
            required = (weights + kv_bytes) * (1 + ACTIVATION_MARGIN_FRACTION)
            required += RUNTIME_OVERHEAD_GB_PER_GPU * GB * count
            fits = required <= memory_per_gpu * count
            hardware = ""
            if name == "fp8" and gpu_spec is not None and not gpu_spec.fp8:
                hardware = f" ({gpu_spec.name} has no FP8 tensor cores: weight-only FP8 kernels)"
            out.append(
                f"weight quantisation {name}: weights {weights / GB:.1f} GB, needs "
                f"{required / GB:.1f} GB -> {'fits' if fits else 'still does not fit'}{hardware}"
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
    "ARCHITECTURES",
    "Architecture",
    "ContextWindow",
    "Estimate",
    "FieldProblem",
    "architecture_for",
    "bytes_per_parameter",
    "check_context",
    "context_limits",
    "estimate_stage",
    "feasibility_problems",
    "format_parameters",
    "high_tokens",
    "upper_tokens",
]
