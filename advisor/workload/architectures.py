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
from bench.engines.models import canonical_model


@dataclass(frozen=True)
class RopeScaling:
    """A config.json `rope_scaling` entry: its type, factor and original window (yarn)."""

    rope_type: str
    factor: float = 1.0
    original_max_positions: int | None = None


@dataclass(frozen=True)
class Architecture:
    """The sizes the estimate needs; `parameters` is the exact count (tied weights once).

    A mixture-of-experts model states its experts: `parameters` counts every expert (what the
    weights take in memory); `active_parameters` counts what one token's forward pass touches
    (attention, embeddings, router, shared experts and the top-k routed experts' FFNs: the FLOPs).
    """

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
    intermediate_size: int | None = None
    """The dense FFN width (gated MLP: gate, up, down projections)."""
    vocab_size: int | None = None
    explicit_head_dim: int | None = None
    """config.json's `head_dim` where it is not hidden / heads (Qwen3: 128 at hidden 2048 x 32)."""
    sliding_window: int | None = None
    """Tokens each layer attends to when the model uses sliding-window attention (Mistral-7B
    v0.1: 4096); None = full attention (a config whose use_sliding_window is false is None)."""
    experts: int | None = None
    """Routed experts per MoE layer (num_local_experts, num_experts, n_routed_experts)."""
    experts_per_token: int | None = None
    """Routed experts each token goes to (num_experts_per_tok: the top-k)."""
    expert_intermediate_size: int | None = None
    """One routed expert's FFN width (Mixtral: intermediate_size; Qwen-MoE and DeepSeek:
    moe_intermediate_size)."""
    shared_expert_intermediate_size: int | None = None
    """The FFN width of the experts every token goes through (Qwen2-MoE's shared expert,
    DeepSeek's n_shared_experts x moe_intermediate_size), all of them together; None = none."""
    moe_layers: int | None = None
    """Layers whose FFN is the mixture (the others are dense); None = every layer for an MoE."""
    encoder_frames: int | None = None
    """Speech encoders: the positions one clip's encoder attends over, fixed by the model
    (Whisper pads every clip to its 30 s window: 3,000 log-mel frames, 1,500 after its
    stride-2 stem); `layers`, `hidden_size` and `attention_heads` are then the encoder's."""
    encoder_parameters: int | None = None
    """Encoder-decoder models: the encoder's share of `parameters` (what one forward pass over
    the clip multiplies); the decoder's loop is autoregressive and sized apart."""
    decoder_layers: int | None = None
    """Encoder-decoder models: the decoder's layers (its width is `hidden_size`); each step of
    its loop attends over the encoder's `encoder_frames` in every one of them."""

    @property
    def head_dim(self) -> int | None:
        if self.explicit_head_dim:
            return self.explicit_head_dim
        if self.hidden_size and self.attention_heads:
            return self.hidden_size // self.attention_heads
        return None

    @property
    def is_moe(self) -> bool:
        return bool(self.experts and self.experts_per_token and self.expert_intermediate_size)

    @property
    def expert_parameters(self) -> int:
        """Parameters of one routed expert in one layer (gate, up and down projections)."""
        if not self.is_moe or not self.hidden_size:
            return 0
        assert self.expert_intermediate_size is not None
        return 3 * self.hidden_size * self.expert_intermediate_size

    @property
    def sparse_layers(self) -> int:
        """Layers whose FFN is a mixture of experts (0 for a dense model)."""
        if not self.is_moe:
            return 0
        return self.moe_layers if self.moe_layers is not None else (self.layers or 0)

    @property
    def active_parameters(self) -> int:
        """Parameters one token's forward pass touches: every parameter except the routed
        experts it is not sent to. Dense models: the total."""
        if not self.is_moe:
            return self.parameters
        assert self.experts is not None and self.experts_per_token is not None
        idle_experts = self.experts - self.experts_per_token
        return self.parameters - self.sparse_layers * idle_experts * self.expert_parameters


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture("tiny-llama", "generate", 4_188_480, 2, 64, 2, 1, 4096),
        Architecture("tiny-llama-trained", "generate", 354_624, 2, 64, 2, 1, 1024),
        Architecture(
            "llama-2-7b", "generate", 6_738_415_616, 32, 4096, 32, 32, 4096, intermediate_size=11008
        ),
        Architecture(
            "llama-2-13b",
            "generate",
            13_015_864_320,
            40,
            5120,
            40,
            40,
            4096,
            intermediate_size=13824,
        ),
        Architecture(
            "llama-3-8b",
            "generate",
            8_030_261_248,
            32,
            4096,
            32,
            8,
            8192,
            intermediate_size=14336,
            vocab_size=128256,
        ),
        Architecture(
            "mistral-7b",
            "generate",
            7_241_732_096,
            32,
            4096,
            32,
            8,
            32768,
            intermediate_size=14336,
            vocab_size=32000,
            sliding_window=4096,
        ),
        # Not a bench preset: sized for estimates only (count from the Llama formula below).
        Architecture(
            "llama-2-70b",
            "generate",
            68_976_648_192,
            80,
            8192,
            64,
            8,
            4096,
            intermediate_size=28672,
        ),
        # Llama-3.1: 8,030,261,248 and 70,553,706,496 are the published counts (the model
        # cards' 8B and 70B); the 128k window is rope llama3 x8 of 8192 stated as 131072.
        Architecture(
            "llama-3.1-8b",
            "generate",
            8_030_261_248,
            32,
            4096,
            32,
            8,
            131072,
            rope_scaling=RopeScaling("llama3", 8.0, 8192),
            intermediate_size=14336,
            vocab_size=128256,
        ),
        Architecture(
            "llama-3.1-70b",
            "generate",
            70_553_706_496,
            80,
            8192,
            64,
            8,
            131072,
            rope_scaling=RopeScaling("llama3", 8.0, 8192),
            intermediate_size=28672,
            vocab_size=128256,
        ),
        Architecture(
            "llama-3.1-405b",
            "generate",
            405_853_388_800,
            126,
            16384,
            128,
            8,
            131072,
            rope_scaling=RopeScaling("llama3", 8.0, 8192),
            intermediate_size=53248,
            vocab_size=128256,
        ),
        # Mixtral-8x7B: "46.7B total parameters but only uses 12.9B parameters per token"
        # (Mistral AI, "Mixtral of experts", https://mistral.ai/news/mixtral-of-experts/,
        # Dec 2023); the formula gives 46,702,792,704 total, 12,879,925,248 active.
        Architecture(
            "mixtral-8x7b",
            "generate",
            46_702_792_704,
            32,
            4096,
            32,
            8,
            32768,
            intermediate_size=14336,
            vocab_size=32000,
            experts=8,
            experts_per_token=2,
            expert_intermediate_size=14336,
        ),
        Architecture(
            "tiny-mixtral",
            "generate",
            4_318_016,
            2,
            64,
            2,
            1,
            4096,
            intermediate_size=128,
            vocab_size=32000,
            experts=4,
            experts_per_token=2,
            expert_intermediate_size=128,
        ),
        # Qwen2.5-7B: 7.61B in the model card (Qwen/Qwen2.5-7B-Instruct); q/k/v carry biases.
        Architecture(
            "qwen2.5-7b",
            "generate",
            7_615_616_512,
            28,
            3584,
            28,
            4,
            32768,
            intermediate_size=18944,
            vocab_size=152064,
        ),
        # Qwen3-30B-A3B: 30.5B total, 3.3B activated (model card, Qwen/Qwen3-30B-A3B).
        Architecture(
            "qwen3-30b-a3b",
            "generate",
            30_532_122_624,
            48,
            2048,
            32,
            4,
            40960,
            intermediate_size=6144,
            vocab_size=151936,
            explicit_head_dim=128,
            experts=128,
            experts_per_token=8,
            expert_intermediate_size=768,
        ),
        Architecture("bert-base", "forward", 109_482_240, 12, 768, 12, None, 512),
        Architecture("vit-base", "forward", 86_567_656, 12, 768, 12, None, None, patch_size=16),
        Architecture("bert-large", "forward", 335_141_888, 24, 1024, 16, None, 512),
        Architecture("minilm-l6-h384", "forward", 22_713_216, 6, 384, 12, None, 512),
        Architecture("minilm-l12-h384", "forward", 33_360_000, 12, 384, 12, None, 512),
        Architecture("vit-large", "forward", 304_326_632, 24, 1024, 16, None, None, patch_size=16),
        Architecture("resnet-50", "forward", 25_557_032, gflops_per_image_224=8.2),
        Architecture("tiny-bert", "forward", 169_664, 2, 64, 4, None, 512),
        Architecture("tiny-bert-classifier", "forward", 169_794, 2, 64, 4, None, 512),
        Architecture("tiny-vit", "forward", 81_226, 2, 64, 4, None, None, patch_size=8),
        Architecture("tiny-resnet", "forward", 75_290),
    )
}


WHISPER_ENCODER_FRAMES = 1500
"""Whisper's max_source_positions: every clip padded to 30 s, 3,000 log-mel frames, 1,500 after
its stride-2 stem."""


def _whisper(
    name: str,
    parameters: int,
    layers: int,
    hidden: int,
    heads: int,
    encoder: int,
    decoder_layers: int | None = None,
) -> Architecture:
    """A Whisper model: its encoder's layers, width and heads, its whole count for memory, its
    encoder's count for a forward pass and its decoder's layers (the encoder's unless given)."""
    return Architecture(
        name, "forward", parameters, layers, hidden, heads, None, None,
        encoder_frames=WHISPER_ENCODER_FRAMES, encoder_parameters=encoder,
        decoder_layers=decoder_layers or layers,
    )  # fmt: skip


PUBLISHED_ENCODERS: dict[str, Architecture] = {
    architecture.name: architecture
    for architecture in (
        # openai/whisper-* config.json: d_model, encoder_layers, encoder_attention_heads,
        # max_source_positions 1500, decoder_layers (the encoder's, but turbo's 4); counts are
        # transformers' WhisperForConditionalGeneration built from those configs (the proj_out
        # tied to the token embedding, counted once):
        # 37.8M, 72.6M, 241.7M, 763.9M, 1,543.5M and 808.9M, as the model cards round them.
        _whisper("whisper-tiny", 37_760_640, 4, 384, 6, 8_208_384),
        _whisper("whisper-base", 72_593_920, 6, 512, 8, 20_590_592),
        _whisper("whisper-small", 241_734_912, 12, 768, 12, 88_154_112),
        _whisper("whisper-medium", 763_857_920, 24, 1024, 16, 307_216_384),
        _whisper("whisper-large-v3", 1_543_490_560, 32, 1280, 20, 636_968_960),
        _whisper("whisper-large-v3-turbo", 808_878_080, 32, 1280, 20, 636_968_960, 4),
    )
}
"""Speech models the advisor sizes from their published config.json though the bench has no
preset of them (it cannot write or run one: measure them from a local checkpoint folder)."""

PUBLISHED_IDS: dict[str, str] = {f"openai/{name}": name for name in PUBLISHED_ENCODERS} | {
    "openai/whisper-large-v2": "whisper-large-v3",
    "openai/whisper-large": "whisper-large-v3",
}
"""Hub ids of PUBLISHED_ENCODERS (case-insensitive). Whisper large and large-v2 have large-v3's
layers with 80 mel bins instead of 128 (about 0.2M parameters apart, in the stem)."""

_PUBLISHED_BY_LOWER = {model_id.lower(): name for model_id, name in PUBLISHED_IDS.items()}


def published_encoder(model: str) -> Architecture | None:
    """The published speech architecture a name or Hub id stands for, else None."""
    name = _PUBLISHED_BY_LOWER.get(model.strip().lower(), model.strip().lower())
    return PUBLISHED_ENCODERS.get(name)


def sized_but_not_runnable(model: str) -> bool:
    """Whether `model` names a published speech model as such (not a local folder): the advisor
    sizes it from its config, the bench has no preset of it to write and run."""
    return published_encoder(model) is not None and not Path(model).is_dir()


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
    preset = canonical_model(model)
    if preset in ARCHITECTURES:  # a Hugging Face id the bench maps to a preset of its shape
        return ARCHITECTURES[preset], f"{model} = preset {preset} (same config.json, exact count)"
    config_file = Path(model).expanduser() / "config.json"
    published = None if config_file.is_file() else published_encoder(model)
    if published is not None:
        return published, (
            f"{model}: {published.name}'s published config.json (the bench has no preset of it: "
            "measure it from a local checkpoint folder)"
        )
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # ValueError: bad JSON, or not UTF-8 at all
            return None, f"{config_file} is unreadable"
        return _architecture_from_config(model, config)
    return None, f"model {model!r} is not a preset and has no readable config.json"


def _architecture_from_config(model: str, config: dict) -> tuple[Architecture | None, str]:
    """Decoder sizes from a Hugging Face config.json: exact for the Llama, Mistral, Mixtral,
    Qwen2, Qwen2-MoE and Qwen3(-MoE) layouts (a test compares it with transformers' own count),
    approximate for other decoders (their attention and FFN are taken to be Llama's)."""
    try:
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        intermediate = int(config["intermediate_size"])
        vocab = int(config["vocab_size"])
        head_dim = int(config.get("head_dim") or hidden // heads)
        experts = _moe_fields(config, layers)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None, "config.json lacks the sizes of a decoder (hidden_size, layers, heads...)"
    model_type = str(config.get("model_type") or "")
    attention = (
        hidden * heads * head_dim  # q
        + 2 * hidden * kv_heads * head_dim  # k and v (GQA)
        + heads * head_dim * hidden  # o
    )
    if model_type in ("qwen2", "qwen2_moe"):
        attention += (heads + 2 * kv_heads) * head_dim  # Qwen2's q/k/v biases
    elif config.get("attention_bias"):
        attention += (heads + 2 * kv_heads) * head_dim + hidden  # q/k/v and o biases
    if model_type in ("qwen3", "qwen3_moe"):
        attention += 2 * head_dim  # q and k RMSNorm over each head
    dense_ffn = 3 * hidden * intermediate  # gated MLP: gate, up, down
    sparse_layers = experts.moe_layers or 0
    parameters = layers * (attention + 2 * hidden) + (layers - sparse_layers) * dense_ffn
    if experts.experts:
        assert experts.expert_intermediate_size is not None and experts.moe_layers is not None
        moe_ffn = (
            experts.experts * 3 * hidden * experts.expert_intermediate_size
            + hidden * experts.experts  # router
        )
        if experts.shared_expert_intermediate_size:
            moe_ffn += 3 * hidden * experts.shared_expert_intermediate_size
            if model_type == "qwen2_moe":
                moe_ffn += hidden  # the shared expert's sigmoid gate
        parameters += sparse_layers * moe_ffn
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    parameters += embeddings + hidden  # the final norm
    architecture = Architecture(
        model,
        "generate",
        parameters,
        layers,
        hidden,
        heads,
        kv_heads,
        _config_positions(config),
        rope_scaling=_rope_scaling(config),
        intermediate_size=intermediate,
        vocab_size=vocab,
        explicit_head_dim=head_dim if head_dim != hidden // heads else None,
        sliding_window=_sliding_window(config),
        experts=experts.experts,
        experts_per_token=experts.experts_per_token,
        expert_intermediate_size=experts.expert_intermediate_size,
        shared_expert_intermediate_size=experts.shared_expert_intermediate_size,
        moe_layers=experts.moe_layers,
    )
    exact = model_type in _EXACT_MODEL_TYPES
    return architecture, "config.json, " + (
        "exact count" if exact else "Llama-style formula (approximate)"
    )


_EXACT_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe")
"""model_type values whose layout the formula follows parameter for parameter."""


@dataclass(frozen=True)
class _Experts:
    experts: int | None = None
    experts_per_token: int | None = None
    expert_intermediate_size: int | None = None
    shared_expert_intermediate_size: int | None = None
    moe_layers: int | None = None


def _moe_fields(config: dict, layers: int) -> _Experts:
    """The mixture-of-experts fields of a config.json, under each family's names: Mixtral
    (num_local_experts, intermediate_size), Qwen2/3-MoE (num_experts, moe_intermediate_size,
    shared_expert_intermediate_size, decoder_sparse_step, mlp_only_layers), DeepSeek
    (n_routed_experts, n_shared_experts, first_k_dense_replace). A dense config: all None."""
    experts = config.get("num_local_experts") or config.get("num_experts")
    experts = experts or config.get("n_routed_experts")
    top_k = config.get("num_experts_per_tok")
    if not experts or not top_k:
        return _Experts()
    experts, top_k = int(experts), int(top_k)
    expert_size = int(config.get("moe_intermediate_size") or config["intermediate_size"])
    shared = config.get("shared_expert_intermediate_size")
    if not shared and config.get("n_shared_experts"):
        shared = int(config["n_shared_experts"]) * expert_size
    dense_layers = set(config.get("mlp_only_layers") or [])
    step = int(config.get("decoder_sparse_step") or 1)
    first_dense = int(config.get("first_k_dense_replace") or 0)
    moe_layers = sum(
        1
        for index in range(layers)
        if index not in dense_layers and index >= first_dense and (index + 1) % step == 0
    )
    return _Experts(experts, top_k, expert_size, int(shared) if shared else None, moe_layers)


def _sliding_window(config: dict) -> int | None:
    """The attention window when the model uses one: Mistral's `sliding_window`; Qwen states one
    but uses it only when use_sliding_window is true."""
    window = config.get("sliding_window")
    if config.get("use_sliding_window") is False:
        return None
    if isinstance(window, int) and not isinstance(window, bool) and window > 0:
        return window
    return None


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
    "PUBLISHED_ENCODERS",
    "PUBLISHED_IDS",
    "Architecture",
    "ContextWindow",
    "architecture_for",
    "check_context",
    "context_limits",
    "high_tokens",
    "published_encoder",
    "sized_but_not_runnable",
    "upper_tokens",
]
