"""Models without downloads: random-weight Hugging Face checkpoints written from presets.

A preset is written once per (name, seed, dtype) under `model_cache_dir()` as a normal local
checkpoint (config.json, sharded safetensors, generation_config.json and, for the generate kind, a
byte-level BPE tokenizer whose vocabulary size equals the config's), so every framework loads it
as it would a real one. A real local checkpoint directory resolves the same way.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import shutil
import struct
import sysconfig
import uuid
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from bench.core.context_window import ModelContext, context_from_config
from bench.core.errors import UserError
from bench.core.model_ids import HUGGING_FACE_IDS, looks_like_hub_id, preset_for_id
from bench.core.schema import ModelInfo

if TYPE_CHECKING:  # transformers/torch are imported inside functions only (fast CLI start)
    import torch
    from transformers import PretrainedConfig

DTYPE_BYTES: dict[str, int] = {"float32": 4, "float16": 2, "bfloat16": 2}
WEIGHT_INIT_STD = 0.02
"""Small std keeps a deep random network finite in bf16 (norm weights are ones, biases zeros)."""
SHARD_BYTES = 5 * 1024**3
TOKENIZER_CORPUS_BYTES_PER_TOKEN = 512
"""Corpus budget per vocabulary entry: 32000 -> 16 MB of stdlib source, enough merges to fill it."""
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")
"""Ids 0..3 in every generated tokenizer; the preset configs point bos/eos/pad at them."""
UNK_ID, BOS_ID, EOS_ID, PAD_ID = range(4)
# Bumped when the on-disk layout or the fill changes, so stale cached checkpoints are not reused.
CHECKPOINT_FORMAT_VERSION = 1

Kind = Literal["generate", "forward"]


@dataclass(frozen=True)
class Preset:
    """An architecture preset: builds a transformers config; weights are random at write time."""

    name: str
    kind: Kind
    build_config: Callable[[], PretrainedConfig]
    description: str
    trained: bool = False
    """Written with weights trained on the CPU (`train_tiny_checkpoint`), not random ones."""
    positions: int | None = None
    """Its config's max_position_embeddings (None: no position limit), stated here so that the
    context check before a run needs no transformers import; a test compares the two."""
    tokenizer: bool = False
    """Written with a generated tokenizer though not a generate preset (a text classifier)."""


# --------------------------------------------------------------------------- preset configs


def _special_ids() -> dict[str, int]:
    return {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}


def _llama(**overrides: Any) -> PretrainedConfig:
    from transformers import LlamaConfig

    values: dict[str, Any] = {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        **_special_ids(),
    }
    values.update(overrides)
    rope_theta = values.pop("rope_theta", 10000.0)
    config = LlamaConfig(**values)
    _set_rope_theta(config, rope_theta)
    config.architectures = ["LlamaForCausalLM"]
    return config


def _set_rope_theta(config: PretrainedConfig, rope_theta: float) -> None:
    """transformers 4.x keeps `rope_theta` on the config; 5.x moved it into `rope_parameters`."""
    config.rope_theta = rope_theta
    rope_parameters = getattr(config, "rope_parameters", None)
    if isinstance(rope_parameters, dict):
        rope_parameters["rope_theta"] = rope_theta


def _tiny_llama() -> PretrainedConfig:
    return _llama(
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        # head_dim 32: vLLM's CPU attention supports head sizes 32, 64, 80, ... (not 16)
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=4096,
    )


TRAINED_VOCAB_SIZE = 2048
"""The trained preset's vocabulary: small enough that its embedding and head train in seconds."""


def _tiny_llama_trained() -> PretrainedConfig:
    return _llama(
        vocab_size=TRAINED_VOCAB_SIZE,
        hidden_size=64,
        intermediate_size=176,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=1024,
    )


def _llama_2_7b() -> PretrainedConfig:
    return _llama()


def _llama_2_13b() -> PretrainedConfig:
    return _llama(
        hidden_size=5120,
        intermediate_size=13824,
        num_hidden_layers=40,
        num_attention_heads=40,
        num_key_value_heads=40,
    )


def _llama_2_70b() -> PretrainedConfig:
    # Llama-2-70B's published shape: GQA with 8 KV heads, MLP 28672. Written as random weights
    # it is ~138 GB in bfloat16 (sharded, streamed to disk): for multi-GPU hosts only.
    return _llama(
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
    )


def _llama_3_8b() -> PretrainedConfig:
    # Real Meta-Llama-3-8B values except bos/eos ids, which point at our tokenizer's specials.
    return _llama(
        vocab_size=128256,
        intermediate_size=14336,
        num_key_value_heads=8,
        max_position_embeddings=8192,
        rope_theta=500000.0,
    )


def _mistral_7b() -> PretrainedConfig:
    # Mistral-7B-v0.1 (the paper's model): GQA 8 KV heads, sliding window 4096.
    from transformers import MistralConfig

    config = MistralConfig(
        vocab_size=32000,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        max_position_embeddings=32768,
        rms_norm_eps=1e-5,
        sliding_window=4096,
        hidden_act="silu",
        tie_word_embeddings=False,
        **_special_ids(),
    )
    _set_rope_theta(config, 10000.0)
    config.architectures = ["MistralForCausalLM"]
    return config


LLAMA_3_1_ROPE_SCALING: dict[str, Any] = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
"""Llama-3.1's published rope_scaling (meta-llama/Llama-3.1-8B config.json): the 128k window."""


def _with_rope_scaling(config: PretrainedConfig, scaling: dict[str, Any]) -> PretrainedConfig:
    """Set rope scaling where each transformers major keeps it: 4.x `rope_scaling`, 5.x
    `rope_parameters` (beside rope_theta); config.json then carries it as a real one does."""
    rope_parameters = getattr(config, "rope_parameters", None)
    if isinstance(rope_parameters, dict):
        rope_parameters.update(scaling)
    else:
        config.rope_scaling = dict(scaling)
    return config


def _llama_3_1(**overrides: Any) -> PretrainedConfig:
    # Real Llama-3.1 values (config.json of meta-llama/Llama-3.1-8B and -70B) except bos/eos ids.
    values: dict[str, Any] = {
        "vocab_size": 128256,
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
    }
    values.update(overrides)
    return _with_rope_scaling(_llama(**values), LLAMA_3_1_ROPE_SCALING)


def _llama_3_1_8b() -> PretrainedConfig:
    return _llama_3_1()


def _llama_3_1_70b() -> PretrainedConfig:
    return _llama_3_1(
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
    )


def _llama_3_1_405b() -> PretrainedConfig:
    # meta-llama/Llama-3.1-405B's config.json: 126 layers, hidden 16384, FFN 53248, 128 heads.
    return _llama_3_1(
        hidden_size=16384,
        intermediate_size=53248,
        num_hidden_layers=126,
        num_attention_heads=128,
    )


def _mixtral(**overrides: Any) -> PretrainedConfig:
    from transformers import MixtralConfig

    # Mixtral-8x7B-v0.1's config.json: 8 experts of FFN 14336, top-2 routing, no sliding window.
    values: dict[str, Any] = {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-5,
        "sliding_window": None,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        **_special_ids(),
    }
    values.update(overrides)
    config = MixtralConfig(**values)
    _set_rope_theta(config, 1e6)
    config.architectures = ["MixtralForCausalLM"]
    return config


def _mixtral_8x7b() -> PretrainedConfig:
    return _mixtral()


def _tiny_mixtral() -> PretrainedConfig:
    # head_dim 32 as tiny-llama (vLLM's CPU attention); 4 experts, top-2: a real MoE on the CPU.
    return _mixtral(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=4096,
    )


def _qwen2_5_7b() -> PretrainedConfig:
    from transformers import Qwen2Config

    # Qwen/Qwen2.5-7B-Instruct's config.json (q/k/v biases come with the architecture; its
    # sliding_window 131072 is off: use_sliding_window false).
    config = Qwen2Config(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        use_sliding_window=False,
        hidden_act="silu",
        tie_word_embeddings=False,
        **_special_ids(),
    )
    _set_rope_theta(config, 1e6)
    config.architectures = ["Qwen2ForCausalLM"]
    return config


def _qwen3_30b_a3b() -> PretrainedConfig:
    from transformers import Qwen3MoeConfig

    # Qwen/Qwen3-30B-A3B's config.json: 128 experts of FFN 768, top-8, head_dim 128 (not
    # hidden / heads), q/k RMSNorm, every layer sparse.
    config = Qwen3MoeConfig(
        vocab_size=151936,
        hidden_size=2048,
        intermediate_size=6144,
        moe_intermediate_size=768,
        num_hidden_layers=48,
        num_attention_heads=32,
        num_key_value_heads=4,
        head_dim=128,
        num_experts=128,
        num_experts_per_tok=8,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        use_sliding_window=False,
        attention_bias=False,
        hidden_act="silu",
        tie_word_embeddings=False,
        **_special_ids(),
    )
    _set_rope_theta(config, 1e6)
    config.architectures = ["Qwen3MoeForCausalLM"]
    return config


def _imagenet_labels(config: PretrainedConfig, num_labels: int) -> None:
    config.id2label = {i: f"class_{i}" for i in range(num_labels)}
    config.label2id = {label: i for i, label in config.id2label.items()}


def _resnet(**overrides: Any) -> PretrainedConfig:
    from transformers import ResNetConfig

    # ResNetConfig's defaults are ResNet-50 (bottleneck, depths 3/4/6/3, widths 256..2048).
    config = ResNetConfig(**overrides)
    _imagenet_labels(config, 1000 if not overrides else 10)
    config.architectures = ["ResNetForImageClassification"]
    return config


def _resnet_50() -> PretrainedConfig:
    return _resnet()


def _tiny_resnet() -> PretrainedConfig:
    return _resnet(
        embedding_size=16,
        hidden_sizes=[32, 64],
        depths=[1, 1],
        layer_type="basic",
    )


def _bert(**overrides: Any) -> PretrainedConfig:
    from transformers import BertConfig

    # BertConfig's defaults are bert-base-uncased (12 layers, 768 hidden, 30522 vocab, 512 pos).
    config = BertConfig(pad_token_id=0, **overrides)
    config.architectures = ["BertModel"]
    return config


def _bert_base() -> PretrainedConfig:
    return _bert()


def _bert_large() -> PretrainedConfig:
    # bert-large-uncased; BAAI/bge-large-en-v1.5 and intfloat/e5-large-v2 have its config.json.
    return _bert(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                 intermediate_size=4096)  # fmt: skip


def _minilm(layers: int) -> PretrainedConfig:
    # MiniLM-H384: sentence-transformers/all-MiniLM-L6-v2 (6 layers), all-MiniLM-L12-v2,
    # BAAI/bge-small-en-v1.5 and intfloat/e5-small-v2 (12): BERT layers at width 384.
    return _bert(hidden_size=384, num_hidden_layers=layers, num_attention_heads=12,
                 intermediate_size=1536)  # fmt: skip


def _tiny_bert() -> PretrainedConfig:
    return _bert(
        vocab_size=1024,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=512,
    )


def _tiny_bert_classifier() -> PretrainedConfig:
    config = _tiny_bert()
    config.id2label = dict(enumerate(CLASSIFIER_MODULES))
    config.label2id = {name: index for index, name in enumerate(CLASSIFIER_MODULES)}
    config.architectures = ["BertForSequenceClassification"]
    return config


def _vit(num_labels: int, **overrides: Any) -> PretrainedConfig:
    from transformers import ViTConfig

    # ViTConfig's defaults are ViT-B/16 at 224 px (google/vit-base-patch16-224).
    config = ViTConfig(**overrides)
    _imagenet_labels(config, num_labels)
    config.architectures = ["ViTForImageClassification"]
    return config


def _vit_base() -> PretrainedConfig:
    return _vit(1000)


def _vit_large() -> PretrainedConfig:
    # google/vit-large-patch16-224: ViT-L/16, 24 layers, hidden 1024, 16 heads.
    return _vit(1000, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                intermediate_size=4096)  # fmt: skip


def _tiny_vit() -> PretrainedConfig:
    return _vit(
        10,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        image_size=32,
        patch_size=8,
    )


PRESETS: dict[str, Preset] = {
    preset.name: preset
    for preset in (
        Preset(
            "tiny-llama",
            "generate",
            _tiny_llama,
            "Llama, 2 layers, hidden 64, vocab 32000 (~4M params): tests and CPU smoke runs.",
            positions=4096,
        ),
        Preset(
            "tiny-llama-trained",
            "generate",
            _tiny_llama_trained,
            "Llama, 2 layers, hidden 64, vocab 2048, trained for seconds on the CPU on Python "
            "standard-library sources: a meaningful perplexity for quality tests.",
            trained=True,
            positions=1024,
        ),
        Preset(
            "llama-2-7b",
            "generate",
            _llama_2_7b,
            "Llama-2-7B architecture (32 layers, hidden 4096, MHA, vocab 32000), random weights.",
            positions=4096,
        ),
        Preset(
            "llama-2-13b",
            "generate",
            _llama_2_13b,
            "Llama-2-13B architecture (40 layers, hidden 5120, MHA): the article's model.",
            positions=4096,
        ),
        Preset(
            "llama-2-70b",
            "generate",
            _llama_2_70b,
            "Llama-2-70B architecture (80 layers, hidden 8192, GQA 8 KV heads), random weights "
            "(~138 GB in bf16: multi-GPU hosts).",
            positions=4096,
        ),
        Preset(
            "llama-3-8b",
            "generate",
            _llama_3_8b,
            "Llama-3-8B architecture (32 layers, GQA 8 KV heads, vocab 128256), random weights.",
            positions=8192,
        ),
        Preset(
            "llama-3.1-8b",
            "generate",
            _llama_3_1_8b,
            "Llama-3.1-8B architecture (GQA 8 KV heads, 128k window: rope llama3 x8 of 8192), "
            "random weights.",
            positions=131072,
        ),
        Preset(
            "llama-3.1-70b",
            "generate",
            _llama_3_1_70b,
            "Llama-3.1-70B architecture (80 layers, GQA 8 KV heads, 128k window), random weights "
            "(~141 GB in bf16: multi-GPU hosts).",
            positions=131072,
        ),
        Preset(
            "llama-3.1-405b",
            "generate",
            _llama_3_1_405b,
            "Llama-3.1-405B architecture (126 layers, GQA 8 KV heads, 128k window), random "
            "weights (~812 GB in bf16: a multi-node or 8-GPU FP8 host).",
            positions=131072,
        ),
        Preset(
            "mixtral-8x7b",
            "generate",
            _mixtral_8x7b,
            "Mixtral-8x7B architecture (mixture of 8 experts, top-2; ~47B total, ~13B active "
            "per token), random weights (~93 GB in bf16: multi-GPU hosts).",
            positions=32768,
        ),
        Preset(
            "tiny-mixtral",
            "generate",
            _tiny_mixtral,
            "Mixtral, 2 layers, hidden 64, 4 experts top-2, vocab 32000: MoE tests on the CPU.",
            positions=4096,
        ),
        Preset(
            "qwen2.5-7b",
            "generate",
            _qwen2_5_7b,
            "Qwen2.5-7B architecture (28 layers, GQA 4 KV heads, q/k/v biases, vocab 152064), "
            "random weights.",
            positions=32768,
        ),
        Preset(
            "qwen3-30b-a3b",
            "generate",
            _qwen3_30b_a3b,
            "Qwen3-30B-A3B architecture (mixture of 128 experts, top-8; ~30.5B total, ~3.3B "
            "active), random weights (~61 GB in bf16).",
            positions=40960,
        ),
        Preset(
            "mistral-7b",
            "generate",
            _mistral_7b,
            "Mistral-7B-v0.1 architecture (GQA 8 KV heads, sliding window 4096), random weights.",
            positions=32768,
        ),
        Preset(
            "resnet-50",
            "forward",
            _resnet_50,
            "ResNet-50 image classifier (ResNetForImageClassification, 224 px), random weights.",
        ),
        Preset(
            "bert-base",
            "forward",
            _bert_base,
            "BERT-base encoder (BertModel, 12 layers, hidden 768, up to 512 tokens).",
            positions=512,
        ),
        Preset(
            "bert-large",
            "forward",
            _bert_large,
            "BERT-large encoder (BertModel, 24 layers, hidden 1024; the shape of BGE-large and "
            "E5-large), up to 512 tokens.",
            positions=512,
        ),
        Preset(
            "minilm-l6-h384",
            "forward",
            lambda: _minilm(6),
            "MiniLM encoder (BertModel, 6 layers, hidden 384: all-MiniLM-L6-v2's shape), up to "
            "512 tokens.",
            positions=512,
        ),
        Preset(
            "minilm-l12-h384",
            "forward",
            lambda: _minilm(12),
            "MiniLM encoder (BertModel, 12 layers, hidden 384: the shape of all-MiniLM-L12-v2, "
            "BGE-small and E5-small), up to 512 tokens.",
            positions=512,
        ),
        Preset(
            "vit-base",
            "forward",
            _vit_base,
            "ViT-B/16 image classifier (ViTForImageClassification, 224 px), random weights.",
        ),
        Preset(
            "vit-large",
            "forward",
            _vit_large,
            "ViT-L/16 image classifier (ViTForImageClassification, 224 px), random weights.",
        ),
        Preset("tiny-resnet", "forward", _tiny_resnet, "Two-stage basic-block ResNet (tests)."),
        Preset(
            "tiny-bert",
            "forward",
            _tiny_bert,
            "BERT, 2 layers, hidden 64 (tests).",
            positions=512,
        ),
        Preset(
            "tiny-bert-classifier",
            "forward",
            _tiny_bert_classifier,
            "BERT, 2 layers, hidden 64, a 2-class head, trained for seconds on the CPU to tell "
            "which standard-library module a line of source comes from: encoder quality tests.",
            trained=True,
            tokenizer=True,
            positions=512,
        ),
        Preset("tiny-vit", "forward", _tiny_vit, "ViT, 2 layers, hidden 64, 32 px (tests)."),
    )
}


# --------------------------------------------------------------------------- sizes


_GENERATE_SUFFIXES = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def kind_of(config: PretrainedConfig) -> Kind:
    """generate for decoder LMs (by the architectures list), forward for everything else."""
    architectures = getattr(config, "architectures", None) or []
    return "generate" if any(a.endswith(_GENERATE_SUFFIXES) for a in architectures) else "forward"


def model_class_for(config: PretrainedConfig) -> type:
    """The transformers class that loads a checkpoint with this config (its `architectures[0]`)."""
    import transformers

    architectures = getattr(config, "architectures", None) or []
    for name in architectures:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    if kind_of(config) == "generate":
        return transformers.AutoModelForCausalLM
    return transformers.AutoModel


def _meta_model(config: PretrainedConfig) -> torch.nn.Module:
    """The model built on the meta device: shapes without memory or initialisation time."""
    import torch

    cls = model_class_for(config)
    with torch.device("meta"):
        if hasattr(cls, "from_config"):  # Auto classes
            return cls.from_config(config)
        return cls(config)


def parameter_count(config: PretrainedConfig) -> int:
    """Exact parameter count (tied weights once) from the config alone, via a meta-device model."""
    model = _meta_model(config)
    return sum(p.numel() for p in model.parameters())


def weight_bytes(parameters: int, dtype: str) -> int:
    """Bytes the weights take at `dtype` (no quantisation)."""
    return parameters * DTYPE_BYTES[_check_dtype(dtype)]


def _check_dtype(dtype: str) -> str:
    if dtype not in DTYPE_BYTES:
        raise UserError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPE_BYTES)}")
    return dtype


# BatchNorm statistics are stored beside the weights but are not parameters.
_BUFFER_SUFFIXES = ("running_mean", "running_var", "num_batches_tracked")


def safetensors_parameter_count(model_dir: Path) -> int:
    """Elements stored in a checkpoint's safetensors files, read from their JSON headers only."""
    total = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with path.open("rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(header_len))
        for key, entry in header.items():
            if key != "__metadata__" and not key.endswith(_BUFFER_SUFFIXES):
                total += math.prod(entry["shape"])
    return total


# --------------------------------------------------------------------------- cache


def model_cache_dir() -> Path:
    """`$ADVISOR_MODEL_CACHE`, else ~/.cache/inference-advisor/models."""
    configured = os.environ.get("ADVISOR_MODEL_CACHE")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "inference-advisor" / "models"


PRESET_LAYOUT_VERSION = 2
"""Bumped whenever a preset's config changes, so stale cached checkpoints are never reused."""


def preset_dir(name: str, seed: int = 0, dtype: str = "bfloat16", weights: bool = True) -> Path:
    """Where preset `name` is written; a config-only copy (`weights=False`) has its own folder,
    so a later run that needs the weights never finds a folder without them."""
    suffix = "" if weights else "-config-only"
    return model_cache_dir() / f"{name}-seed{seed}-{dtype}-v{PRESET_LAYOUT_VERSION}{suffix}"


def engine_initialises_weights(backend: str, engine_args: dict[str, Any]) -> bool:
    """True when the engine fills the weights itself and reads only config.json and the
    tokenizer: vLLM's `load_format=dummy` (random values, the same shapes, dtypes and kernels as
    a checkpoint). A 30-50B preset then needs no 60-100 GB write before the engine starts."""
    return backend == "vllm" and engine_args.get("load_format") == "dummy"


def _get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise UserError(
            f"unknown model {name!r}: not a preset ({', '.join(PRESETS)}) nor an existing path"
        ) from None


DISK_MARGIN_FRACTION = 0.05
"""Room left beside the weights for the tokenizer, config files and the file system's own use."""


def _check_disk(name: str, folder: Path, weight_bytes: int) -> None:
    """A UserError before writing when the cache's disk cannot hold the checkpoint (the big
    presets, llama-2-70b, llama-3.1-70b and mixtral-8x7b, take 90-141 GB in 16 bits): a write
    that fails half-way would cost minutes and leave the disk full."""
    free = shutil.disk_usage(folder).free
    needed = weight_bytes * (1 + DISK_MARGIN_FRACTION)
    if free < needed:
        raise UserError(
            f"preset {name} needs {needed / 1e9:,.1f} GB of disk and {folder} has "
            f"{free / 1e9:,.1f} GB free: choose a smaller preset, or set ADVISOR_MODEL_CACHE to "
            "a folder on a larger disk"
        )


def ensure_preset(name: str, seed: int = 0, dtype: str = "bfloat16", weights: bool = True) -> Path:
    """Write preset `name` with random weights (once) and return its checkpoint directory.

    `weights=False` writes config.json and the tokenizer only, for an engine that initialises
    the weights itself (`engine_initialises_weights`); a trained preset always has its weights.
    Written into a temporary directory beside the final one and renamed into place, so a
    half-written checkpoint is never used; a concurrent writer that loses the race drops its copy.
    """
    preset = _get_preset(name)
    _check_dtype(dtype)
    weights = weights or preset.trained
    final_dir = preset_dir(name, seed, dtype, weights=weights)
    if (final_dir / "config.json").exists():
        return final_dir
    final_dir.parent.mkdir(parents=True, exist_ok=True)
    config = preset.build_config()
    if weights:
        _check_disk(name, final_dir.parent, parameter_count(config) * DTYPE_BYTES[dtype])
    staging_dir = final_dir.parent / f".tmp-{final_dir.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging_dir.mkdir()
    try:
        if not weights:
            _write_config(config, staging_dir, dtype)
        elif preset.trained and preset.kind == "forward":
            train_tiny_classifier(config, staging_dir, seed=seed, dtype=dtype)
        elif preset.trained:
            train_tiny_checkpoint(config, staging_dir, seed=seed, dtype=dtype)
        else:
            _write_random_checkpoint(config, staging_dir, seed=seed, dtype=dtype)
        if preset.kind == "generate" or preset.tokenizer:
            write_tokenizer(staging_dir, config.vocab_size)
        (staging_dir / "advisor_preset.json").write_text(
            json.dumps(
                {
                    "preset": name,
                    "seed": seed,
                    "dtype": dtype,
                    "random_weights": not preset.trained,
                    "weights_on_disk": weights,
                    "format_version": CHECKPOINT_FORMAT_VERSION,
                },
                indent=2,
            )
        )
        try:
            os.rename(staging_dir, final_dir)
        except OSError:
            if not (final_dir / "config.json").exists():
                raise
            # Another process finished first; its copy is equivalent (same seed and dtype).
            shutil.rmtree(staging_dir, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging_dir, ignore_errors=True)
        raise
    return final_dir


def _tensor_seed(seed: int, name: str) -> int:
    """Per-tensor seed: values depend on (seed, tensor name) only, not on write order."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63)


def _fill_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _tensor_specs(model: torch.nn.Module) -> list[tuple[str, tuple[int, ...], str, Any]]:
    """(name, shape, fill rule, torch dtype or None) for every tensor a checkpoint stores.

    Parameters once each (tied weights under their first name, as transformers saves them) plus
    persistent buffers (BatchNorm running statistics). Norm weights are ones and biases zeros so
    a random deep network stays finite.
    """
    norm_modules: set[str] = set()
    for module_name, module in model.named_modules():
        class_name = type(module).__name__.lower()
        if "norm" in class_name:
            norm_modules.add(module_name)
    specs: list[tuple[str, tuple[int, ...], str, Any]] = []
    for name, param in model.named_parameters():
        module_name, _, leaf = name.rpartition(".")
        if leaf == "bias":
            rule = "zeros"
        elif module_name in norm_modules:
            rule = "ones"
        else:  # matrices, convolutions, embeddings, class tokens
            rule = "normal"
        specs.append((name, tuple(param.shape), rule, None))
    for module_name, module in model.named_modules():
        for leaf, buffer in module.named_buffers(recurse=False):
            if leaf in module._non_persistent_buffers_set:
                continue
            name = f"{module_name}.{leaf}" if module_name else leaf
            rule = "ones" if leaf == "running_var" else "zeros"
            # Integer buffers (num_batches_tracked) keep their dtype; float ones take the model's.
            keep_dtype = None if buffer.dtype.is_floating_point else buffer.dtype
            specs.append((name, tuple(buffer.shape), rule, keep_dtype))
    return specs


_HUB_EXPERT_NAMES = {
    # model_type: (the block's name on the Hub, gate, up, down names of one expert)
    "mixtral": ("block_sparse_moe", "w1", "w3", "w2"),
    "qwen2_moe": ("mlp", "gate_proj", "up_proj", "down_proj"),
    "qwen3_moe": ("mlp", "gate_proj", "up_proj", "down_proj"),
}


def _hub_expert_layout(
    specs: list[tuple[str, tuple[int, ...], str, Any]], model_type: str
) -> list[tuple[str, tuple[int, ...], str, Any]]:
    """Mixture-of-experts tensors under the names the Hub's checkpoints use (one matrix per
    expert: `block_sparse_moe.experts.3.w1.weight`), not transformers 5's fused in-memory ones
    (`mlp.experts.gate_up_proj`, experts x 2 FFN x hidden): vLLM loads only the Hub's, and
    transformers 5 converts them on load as it does every real checkpoint. transformers 4.x
    already names them so: then nothing changes."""
    if model_type not in _HUB_EXPERT_NAMES:
        return specs
    block, gate, up, down = _HUB_EXPERT_NAMES[model_type]
    out: list[tuple[str, tuple[int, ...], str, Any]] = []
    for name, shape, rule, keep_dtype in specs:
        prefix, _, leaf = name.partition(".mlp.")
        if not leaf:
            out.append((name, shape, rule, keep_dtype))
        elif leaf == "experts.gate_up_proj":  # (experts, gate rows then up rows, hidden)
            experts, rows, hidden = shape
            for expert in range(experts):
                for part in (gate, up):
                    out.append(
                        (
                            f"{prefix}.{block}.experts.{expert}.{part}.weight",
                            (rows // 2, hidden),
                            rule,
                            keep_dtype,
                        )
                    )
        elif leaf == "experts.down_proj":  # (experts, hidden, ffn)
            experts, hidden, ffn = shape
            for expert in range(experts):
                out.append(
                    (
                        f"{prefix}.{block}.experts.{expert}.{down}.weight",
                        (hidden, ffn),
                        rule,
                        keep_dtype,
                    )
                )
        else:  # the router and any shared expert keep their names under the Hub's block
            out.append((f"{prefix}.{block}.{leaf}", shape, rule, keep_dtype))
    return out


def _write_random_checkpoint(
    config: PretrainedConfig, out_dir: Path, *, seed: int, dtype: str
) -> None:
    """config.json, generation_config.json and (sharded) safetensors filled with seeded noise."""
    import torch
    from safetensors.torch import save_file

    torch_dtype = getattr(torch, dtype)
    model = _meta_model(config)
    specs = _hub_expert_layout(_tensor_specs(model), getattr(config, "model_type", ""))
    del model
    element_bytes = DTYPE_BYTES[dtype]

    # Plan shards up front so file names carry the total (model-00001-of-00003.safetensors).
    shards: list[list[tuple[str, tuple[int, ...], str, Any]]] = [[]]
    shard_size = 0
    for spec in specs:
        size = math.prod(spec[1]) * element_bytes
        if shards[-1] and shard_size + size > SHARD_BYTES:
            shards.append([])
            shard_size = 0
        shards[-1].append(spec)
        shard_size += size
    device = _fill_device()
    weight_map: dict[str, str] = {}
    total_bytes = 0
    for index, shard in enumerate(shards, start=1):
        file_name = (
            "model.safetensors"
            if len(shards) == 1
            else f"model-{index:05d}-of-{len(shards):05d}.safetensors"
        )
        tensors: dict[str, torch.Tensor] = {}
        for name, shape, rule, keep_dtype in shard:
            target_dtype = keep_dtype or torch_dtype
            if rule == "ones":
                tensor = torch.ones(shape, dtype=target_dtype)
            elif rule == "zeros":
                tensor = torch.zeros(shape, dtype=target_dtype)
            else:
                generator = torch.Generator(device=device).manual_seed(_tensor_seed(seed, name))
                tensor = torch.randn(shape, generator=generator, device=device)
                tensor = tensor.mul_(WEIGHT_INIT_STD).to(target_dtype).cpu()
            tensors[name] = tensor.contiguous()
            weight_map[name] = file_name
            total_bytes += tensor.numel() * tensor.element_size()
        save_file(tensors, str(out_dir / file_name), metadata={"format": "pt"})
        del tensors
    if len(shards) > 1:
        index_doc = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
        (out_dir / "model.safetensors.index.json").write_text(json.dumps(index_doc, indent=2))
    _write_config(config, out_dir, dtype)


def _write_config(config: PretrainedConfig, out_dir: Path, dtype: str) -> None:
    """config.json with the dtype under both keys (transformers 4.x `torch_dtype`, 5.x `dtype`)."""
    config.save_pretrained(out_dir)
    config_path = out_dir / "config.json"
    document = json.loads(config_path.read_text())
    document["torch_dtype"] = dtype
    document["dtype"] = dtype
    config_path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
    if kind_of(config) == "generate":
        from transformers import GenerationConfig

        GenerationConfig(
            bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID
        ).save_pretrained(out_dir)


# --------------------------------------------------------------------------- tokenizer


def _corpus_files() -> list[Path]:
    """Python's own stdlib sources (always on the machine), sorted so training is deterministic."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = [
        path
        for path in stdlib.rglob("*.py")
        if not ({"site-packages", "dist-packages"} & set(path.relative_to(stdlib).parts))
    ]
    return sorted(files)


def _corpus_texts(budget_bytes: int) -> list[str]:
    texts: list[str] = []
    used = 0
    for path in _corpus_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        texts.append(text)
        used += len(text)
        if used >= budget_bytes:
            break
    return texts


def _filler_token(index: int) -> str:
    # Byte-level BPE vocab entries are strings over the 256-symbol byte alphabet; no merge produces
    # these, so they are never emitted by encoding, but they decode and keep ids contiguous.
    return f"<|filler_{index}|>"


def train_bpe_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE (`tokenizers.Tokenizer`) of exactly `vocab_size` entries, cached on disk.

    Trained on the machine's Python stdlib sources (16 MB for 32000 entries: fully trained).
    When the corpus runs out of merges before `vocab_size` (llama-3's 128256: about 78k learned
    from the whole ~30 MB stdlib here), the vocabulary is padded with unreachable filler entries so
    its size still matches the model's embedding exactly.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    cache_path = (
        model_cache_dir() / "tokenizers" / f"bpe-{vocab_size}-v{CHECKPOINT_FORMAT_VERSION}.json"
    )
    if cache_path.exists():
        return Tokenizer.from_file(str(cache_path))
    tokenizer = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(
        _corpus_texts(vocab_size * TOKENIZER_CORPUS_BYTES_PER_TOKEN), trainer=trainer
    )
    if tokenizer.get_vocab_size() < vocab_size:
        document = json.loads(tokenizer.to_str())
        vocab: dict[str, int] = document["model"]["vocab"]
        next_id = max(vocab.values()) + 1
        filler_index = 0
        while next_id < vocab_size:
            vocab[_filler_token(filler_index)] = next_id
            next_id += 1
            filler_index += 1
        tokenizer = Tokenizer.from_str(json.dumps(document))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", BOS_ID)]
    )
    if tokenizer.get_vocab_size() != vocab_size:
        raise RuntimeError(
            f"tokenizer has {tokenizer.get_vocab_size()} entries, wanted {vocab_size}"
        )
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    staging = cache_path.with_suffix(f".{os.getpid()}.tmp")
    tokenizer.save(str(staging))
    os.replace(staging, cache_path)
    return tokenizer


def write_tokenizer(out_dir: Path, vocab_size: int) -> None:
    """tokenizer.json + tokenizer_config.json + special_tokens_map.json (AutoTokenizer loads it)."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=train_bpe_tokenizer(vocab_size),
        bos_token=SPECIAL_TOKENS[BOS_ID],
        eos_token=SPECIAL_TOKENS[EOS_ID],
        unk_token=SPECIAL_TOKENS[UNK_ID],
        pad_token=SPECIAL_TOKENS[PAD_ID],
        model_max_length=1_000_000,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.save_pretrained(str(out_dir))
    # The class name transformers 4.x and 5.x, vLLM and onnxruntime-extensions all recognise
    # (transformers 5 would write its internal "TokenizersBackend").
    config_path = out_dir / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
    special_map = out_dir / "special_tokens_map.json"
    if not special_map.exists():  # transformers 5 folds it into tokenizer_config.json
        special_map.write_text(
            json.dumps(
                {
                    "bos_token": SPECIAL_TOKENS[BOS_ID],
                    "eos_token": SPECIAL_TOKENS[EOS_ID],
                    "unk_token": SPECIAL_TOKENS[UNK_ID],
                    "pad_token": SPECIAL_TOKENS[PAD_ID],
                },
                indent=2,
            )
        )


# --------------------------------------------------------------------------- trained preset


TRAINING_MODULES = (
    "argparse",
    "collections",
    "dataclasses",
    "functools",
    "json.decoder",
    "json.encoder",
    "string",
    "textwrap",
)
"""Standard-library modules whose source (`inspect.getsource`) the trained preset learns from;
tests evaluate on other modules, so its perplexity is measured on held-out text."""
TRAINING_STEPS = 150
TRAINING_SEQUENCE = 128
TRAINING_BATCH = 8
TRAINING_LEARNING_RATE = 5e-3


def training_text() -> str:
    """The trained preset's corpus: the sources of TRAINING_MODULES, in order."""
    import importlib
    import inspect

    return "\n\n".join(
        inspect.getsource(importlib.import_module(name)) for name in TRAINING_MODULES
    )


def train_tiny_checkpoint(
    config: PretrainedConfig, out_dir: Path, *, seed: int, dtype: str
) -> None:
    """Train `config` from scratch on `training_text()` (next-token loss, AdamW, float32, a
    few seconds on two CPU cores) and save it at `dtype` like a downloaded checkpoint."""
    import torch

    tokenizer = train_bpe_tokenizer(config.vocab_size)
    ids = torch.tensor(tokenizer.encode(training_text(), add_special_tokens=False).ids)
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = model_class_for(config)(config).float().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=TRAINING_LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=TRAINING_LEARNING_RATE, total_steps=TRAINING_STEPS, pct_start=0.1
    )
    last_start = len(ids) - TRAINING_SEQUENCE - 1
    for _ in range(TRAINING_STEPS):
        starts = torch.randint(0, last_start, (TRAINING_BATCH,), generator=generator)
        batch = torch.stack([ids[s : s + TRAINING_SEQUENCE] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    model.eval().to(getattr(torch, dtype))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    _write_config(config, out_dir, dtype)


CLASSIFIER_MODULES = ("argparse", "collections")
"""The trained classifier's task: which of these standard-library modules a line of source comes
from (its labels, in this order)."""
CLASSIFIER_HOLD_OUT = 5
"""Every fifth line of each module is held out of training (`classifier_lines(held_out=True)`)."""
CLASSIFIER_STEPS = 300
CLASSIFIER_BATCH = 32
CLASSIFIER_MAX_TOKENS = 64
CLASSIFIER_LEARNING_RATE = 2e-3


def classifier_lines(held_out: bool) -> list[tuple[str, int]]:
    """(line, label) of every stripped source line longer than 8 characters of the
    CLASSIFIER_MODULES: the held-out fifth (line numbers divisible by CLASSIFIER_HOLD_OUT among
    those) or the rest, which the preset trains on."""
    import importlib
    import inspect

    pairs = []
    for label, name in enumerate(CLASSIFIER_MODULES):
        lines = inspect.getsource(importlib.import_module(name)).splitlines()
        kept = [line.strip() for line in lines if len(line.strip()) > 8]
        pairs += [
            (line, label)
            for number, line in enumerate(kept)
            if (number % CLASSIFIER_HOLD_OUT == 0) == held_out
        ]
    return pairs


def train_tiny_classifier(
    config: PretrainedConfig, out_dir: Path, *, seed: int, dtype: str
) -> None:
    """Train a sequence classifier from scratch on `classifier_lines(held_out=False)` (cross
    entropy, AdamW, float32, balanced batches, a few seconds on two CPU cores), save at `dtype`."""
    import torch

    tokenizer = train_bpe_tokenizer(config.vocab_size)
    by_label: list[list[list[int]]] = [[] for _ in CLASSIFIER_MODULES]
    for line, label in classifier_lines(held_out=False):
        ids = [BOS_ID, *tokenizer.encode(line, add_special_tokens=False).ids]
        by_label[label].append(ids[:CLASSIFIER_MAX_TOKENS])
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    threads = torch.get_num_threads()
    # One thread: matrices this small gain nothing from more, and on a busy host the extra
    # threads' synchronisation made each step ~10x slower (measured: 0.5 s vs 0.05 s a step).
    torch.set_num_threads(1)
    try:
        model = _train_classifier_steps(config, by_label, generator)
    finally:
        torch.set_num_threads(threads)
    model.eval().to(getattr(torch, dtype))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    _write_config(config, out_dir, dtype)


def _train_classifier_steps(
    config: PretrainedConfig, by_label: list[list[list[int]]], generator: torch.Generator
) -> torch.nn.Module:
    import torch

    model = model_class_for(config)(config).float().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=CLASSIFIER_LEARNING_RATE)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=CLASSIFIER_LEARNING_RATE, total_steps=CLASSIFIER_STEPS, pct_start=0.1
    )
    per_label = CLASSIFIER_BATCH // len(by_label)  # balanced: the modules differ in size
    for _ in range(CLASSIFIER_STEPS):
        rows, labels = [], []
        for label, pool in enumerate(by_label):
            picks = torch.randint(0, len(pool), (per_label,), generator=generator).tolist()
            rows += [pool[index] for index in picks]
            labels += [label] * per_label
        width = max(len(ids) for ids in rows)
        input_ids = torch.full((len(rows), width), PAD_ID, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for row, ids in enumerate(rows):
            input_ids[row, : len(ids)] = torch.tensor(ids)
            mask[row, : len(ids)] = 1
        loss = model(input_ids=input_ids, attention_mask=mask, labels=torch.tensor(labels)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
    return model


# --------------------------------------------------------------------------- resolution


def preset_info(name: str, dtype: str = "bfloat16", seed: int = 0) -> ModelInfo:
    """ModelInfo of a preset from its config alone (no weights written): for planning/estimates."""
    preset = _get_preset(name)
    config = preset.build_config()
    parameters = parameter_count(config)
    return ModelInfo(
        name=name,
        path=str(preset_dir(name, seed, dtype)),
        architecture=(config.architectures or [""])[0],
        parameters=parameters,
        weight_bytes=weight_bytes(parameters, dtype),
        vocab_size=getattr(config, "vocab_size", None) if preset.kind == "generate" else None,
        kind=preset.kind,
        random_weights=True,
    )


def preset_name(name_or_path: str) -> str | None:
    """The preset a model name stands for: a preset's own name, or a known Hugging Face id
    (`bench.core.model_ids`, case-insensitive); None for anything else. A local folder of that
    name wins over the id (the caller checks the folder first: `check_model_name`)."""
    if name_or_path in PRESETS:
        return name_or_path
    if name_or_path.lower() in PRESETS:
        return name_or_path.lower()
    return preset_for_id(name_or_path)


def _local_checkpoint(name_or_path: str) -> Path | None:
    path = Path(name_or_path).expanduser()
    return path if (path / "config.json").is_file() else None


def canonical_model(name_or_path: str) -> str:
    """What a model name resolves to: a local checkpoint folder (with a config.json) as given,
    else the preset it names (a preset or a known Hugging Face id), else the name unchanged."""
    if name_or_path in PRESETS or _local_checkpoint(name_or_path) is not None:
        return name_or_path
    return preset_name(name_or_path) or name_or_path


def unknown_model_message(name: str) -> str:
    """One line for a model name that is no preset, known id nor local checkpoint: what was
    meant (difflib, when close) and how to give a model the project does not know."""
    known = [*PRESETS, *HUGGING_FACE_IDS]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    if not close:
        lowered = {k.lower(): k for k in known}
        close = [lowered[m] for m in difflib.get_close_matches(name.lower(), lowered, n=1)]
    hint = f"did you mean {close[0]!r}? " if close else ""
    how = (
        f"download its config.json into a folder (huggingface-cli download {name} config.json "
        "--local-dir DIR) and give that folder's path"
        if looks_like_hub_id(name)
        else "give a local folder holding its config.json (and weights, to run it)"
    )
    return (
        f"unknown model {name!r}: not a preset, a known Hugging Face id nor a local folder with a "
        f"config.json; {hint}{how}; presets: {', '.join(PRESETS)}"
    )


def check_model_name(name_or_path: str) -> None:
    """A UserError unless `name_or_path` is a preset, a known Hugging Face id or a local
    checkpoint folder (one with a config.json); reads nothing else and writes nothing (plans and
    profiles check before any run)."""
    if name_or_path in PRESETS or _local_checkpoint(name_or_path) is not None:
        return
    path = Path(name_or_path).expanduser()
    config = path / "config.json"
    if path.is_dir() and config.exists():  # there, but a pipe or a device: never read it
        raise UserError(f"{config} is not a regular file: a checkpoint's config.json is JSON")
    if path.is_dir():
        raise UserError(f"model path {name_or_path} has no config.json")
    if path.exists():
        raise UserError(f"model path {name_or_path} is not a directory")
    if preset_name(name_or_path) is not None:
        return
    looks_like_path = os.sep in name_or_path or name_or_path.startswith((".", "~"))
    if looks_like_path and not looks_like_hub_id(name_or_path):
        raise UserError(f"model path {name_or_path} does not exist")
    raise UserError(unknown_model_message(name_or_path))


def model_context(name_or_path: str) -> ModelContext | None:
    """The context window of a preset (its stated `positions`) or of a local checkpoint (its
    config.json, read bounded); None when no model is known by that name or its config states
    no position limit: then only MAX_TOKENS bounds the lengths. Imports nothing heavy."""
    name_or_path = canonical_model(name_or_path)
    if name_or_path in PRESETS:
        positions = PRESETS[name_or_path].positions
        if positions is None:
            return None
        return ModelContext(
            model=name_or_path,
            positions=positions,
            key="max_position_embeddings",
            scaled_tokens=positions,
        )
    config_file = Path(name_or_path).expanduser() / "config.json"
    if not config_file.is_file():
        return None  # resolve_model says what is wrong with the name
    from bench.core.files import load_user_json

    document = load_user_json(config_file, "checkpoint config")
    return context_from_config(name_or_path, document) if isinstance(document, dict) else None


def resolve_model(
    name_or_path: str,
    dtype: str = "bfloat16",
    trust_remote_code: bool = False,
    seed: int = 0,
    weights: bool = True,
) -> ModelInfo:
    """A preset name (written on first use; config and tokenizer only with `weights=False`) or a
    local checkpoint directory -> its ModelInfo."""
    _check_dtype(dtype)
    check_model_name(name_or_path)
    name_or_path = canonical_model(name_or_path)
    if name_or_path in PRESETS:
        model_dir = ensure_preset(name_or_path, seed=seed, dtype=dtype, weights=weights)
        info = _info_from_dir(model_dir, name_or_path, dtype, trust_remote_code=False)
        return info.model_copy(update={"random_weights": not PRESETS[name_or_path].trained})
    path = Path(name_or_path).expanduser()
    return _info_from_dir(path, name_or_path, dtype, trust_remote_code=trust_remote_code)


def load_config(model_dir: str | Path, trust_remote_code: bool = False) -> PretrainedConfig:
    """The checkpoint's transformers config; remote code only when the user opted in."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(model_dir), trust_remote_code=trust_remote_code)
    except ValueError as exc:
        if "trust_remote_code" in str(exc):
            raise UserError(
                f"model {model_dir} needs its own code; opt in with trust_remote_code"
            ) from None
        raise UserError(f"model {model_dir}: unreadable config.json ({exc})") from None


def _info_from_dir(model_dir: Path, name: str, dtype: str, *, trust_remote_code: bool) -> ModelInfo:
    """Sizes from config.json and the safetensors headers: no transformers import (seconds)."""
    from bench.core.files import load_user_json

    # Bounded (a FIFO named config.json used to block the CLI forever; a deep one recursed).
    document = load_user_json(model_dir / "config.json", "checkpoint config")
    if not isinstance(document, dict):
        raise UserError(f"model {model_dir}: config.json is not a mapping of fields")
    architectures = document.get("architectures") or []
    kind: Kind = (
        "generate" if any(a.endswith(_GENERATE_SUFFIXES) for a in architectures) else "forward"
    )
    parameters = safetensors_parameter_count(model_dir)
    if not parameters:  # .bin or other weights: count from the config on the meta device
        parameters = parameter_count(load_config(model_dir, trust_remote_code=trust_remote_code))
    marker = model_dir / "advisor_preset.json"
    random_weights = marker.exists() and json.loads(marker.read_text()).get("random_weights", False)
    vocab_size = document.get("vocab_size") or document.get("text_config", {}).get("vocab_size")
    return ModelInfo(
        name=name,
        path=str(model_dir.resolve()),
        architecture=architectures[0] if architectures else document.get("model_type", ""),
        parameters=parameters,
        weight_bytes=weight_bytes(parameters, dtype),
        vocab_size=vocab_size if kind == "generate" else None,
        kind=kind,
        random_weights=bool(random_weights),
    )


def first_shard_sha256(model_dir: Path) -> str:
    """sha256 of the first safetensors file (determinism checks)."""
    first = sorted(model_dir.glob("*.safetensors"))[0]
    digest = hashlib.sha256()
    with first.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


__all__ = [
    "PRESETS",
    "Preset",
    "canonical_model",
    "check_model_name",
    "ensure_preset",
    "first_shard_sha256",
    "kind_of",
    "load_config",
    "model_cache_dir",
    "model_class_for",
    "model_context",
    "parameter_count",
    "preset_info",
    "preset_name",
    "resolve_model",
    "unknown_model_message",
    "weight_bytes",
]
