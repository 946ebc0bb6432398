"""Hugging Face model ids the project knows, mapped to the architecture preset of the same shape.

One table read by the bench (`bench run --model meta-llama/Llama-3.1-8B` writes and runs the
preset's random-weight checkpoint) and the advisor (sizes the id from the preset's exact facts).
Ids match case-insensitively, as the Hub resolves them. A local folder of the same name wins.
"""

from __future__ import annotations

HUGGING_FACE_IDS: dict[str, str] = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-7b-chat-hf": "llama-2-7b",
    "meta-llama/Llama-2-13b-hf": "llama-2-13b",
    "meta-llama/Llama-2-13b-chat-hf": "llama-2-13b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "meta-llama/Llama-2-70b-chat-hf": "llama-2-70b",
    "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
    "meta-llama/Meta-Llama-3-8B-Instruct": "llama-3-8b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Meta-Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Meta-Llama-3.1-70B-Instruct": "llama-3.1-70b",
    "meta-llama/Llama-3.1-405B": "llama-3.1-405b",
    "meta-llama/Llama-3.1-405B-Instruct": "llama-3.1-405b",
    "meta-llama/Meta-Llama-3.1-405B": "llama-3.1-405b",
    "meta-llama/Meta-Llama-3.1-405B-Instruct": "llama-3.1-405b",
    # Llama-3.3-70B-Instruct has Llama-3.1-70B's config.json (same shape and 128k window).
    "meta-llama/Llama-3.3-70B-Instruct": "llama-3.1-70b",
    "mistralai/Mistral-7B-v0.1": "mistral-7b",
    "mistralai/Mistral-7B-Instruct-v0.1": "mistral-7b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "mistralai/Mixtral-8x7B-Instruct-v0.1": "mixtral-8x7b",
    "Qwen/Qwen2.5-7B": "qwen2.5-7b",
    "Qwen/Qwen2.5-7B-Instruct": "qwen2.5-7b",
    "Qwen/Qwen3-30B-A3B": "qwen3-30b-a3b",
    "Qwen/Qwen3-30B-A3B-Instruct-2507": "qwen3-30b-a3b",
    "google-bert/bert-base-uncased": "bert-base",
    "bert-base-uncased": "bert-base",
    "BAAI/bge-base-en-v1.5": "bert-base",
    "intfloat/e5-base-v2": "bert-base",
    "google-bert/bert-large-uncased": "bert-large",
    "bert-large-uncased": "bert-large",
    "BAAI/bge-large-en-v1.5": "bert-large",
    "intfloat/e5-large-v2": "bert-large",
    "sentence-transformers/all-MiniLM-L6-v2": "minilm-l6-h384",
    "sentence-transformers/all-MiniLM-L12-v2": "minilm-l12-h384",
    "BAAI/bge-small-en-v1.5": "minilm-l12-h384",
    "intfloat/e5-small-v2": "minilm-l12-h384",
    "google/vit-base-patch16-224": "vit-base",
    "google/vit-large-patch16-224": "vit-large",
    "microsoft/resnet-50": "resnet-50",
}
"""Only ids whose published config.json has the preset's shape exactly (layers, widths, heads,
vocabulary, window); Mistral-7B-Instruct-v0.2/v0.3 are left out (32k full attention, rope theta
1e6, v0.3's 32768 vocabulary): give their config.json folder instead."""

_BY_LOWER = {model_id.lower(): preset for model_id, preset in HUGGING_FACE_IDS.items()}


def preset_for_id(model_id: str) -> str | None:
    """The preset a known Hugging Face id maps to (case-insensitive), else None."""
    return _BY_LOWER.get(model_id.strip().lower())


def looks_like_hub_id(name: str) -> bool:
    """`owner/name` with no path markers: how the Hub names a model."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.startswith((".", "~", "/"))


__all__ = ["HUGGING_FACE_IDS", "looks_like_hub_id", "preset_for_id"]
