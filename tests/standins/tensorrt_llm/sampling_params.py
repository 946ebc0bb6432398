"""TEST STAND-IN, not TensorRT-LLM: SamplingParams with the documented fields our adapter sets."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplingParams:
    max_tokens: int = 32
    min_tokens: int | None = None
    ignore_eos: bool = False
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    detokenize: bool = True
    end_id: int | None = None
