"""TEST STAND-IN, not TensorRT-LLM: the TensorRT-engine LLM (TrtLlmArgs, takes build_config)."""

from __future__ import annotations

from tensorrt_llm import _COMMON, _BaseLLM


class LLM(_BaseLLM):
    _valid_kwargs = _COMMON | {"build_config"}


__all__ = ["LLM"]
