"""Model architectures and the context window a stage's requests must fit, judged before
anything runs.

Architectures come from the bench presets or a local checkpoint's config.json. Parameter counts
of the bench presets are kept here (exact, equal to `bench.engines.models.parameter_count` of the
preset configs; a test checks it) so sizing never imports torch or writes weights; llama-2-70b is
a preset too (written only on hosts with the disk for its ~138 GB); its count here is
`_architecture_from_config` on its published config (a test checks it). The window rule is the
serving engines' (vLLM's `_get_and_verify_max_len`); see `check_context`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from advisor.workload.profile import StageProfile
from bench.core.config import LengthDistribution
from bench.core.context_window import (
    POSITION_KEYS,
    ROPE_TYPES_ALREADY_IN_POSITIONS,
    longest_draw,
)
from bench.core.strict import Strict


@dataclass(frozen=True)
class RopeScaling:
    """A config.json `rope_scaling` entry: its type, factor and original window (yarn)."""

    rope_type: str
    factor: float = 1.0
    original_max_positions: int | None = None


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
        Architecture("tiny-bert-classifier", "forward", 169_794, 2, 64, 4, None, 512),
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
    max_model_len must cover it): the bench's rule, `longest_draw`."""
    return longest_draw(distribution)


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


__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "ContextWindow",
    "architecture_for",
    "check_context",
    "context_limits",
    "high_tokens",
    "upper_tokens",
]
