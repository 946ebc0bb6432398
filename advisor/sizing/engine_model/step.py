"""The one step-time rule: how long one engine step of one replica takes.

    step ms = overhead + memory x bytes read / bandwidth + compute x FLOPs / GEMM peak

- bytes read = the weights the step touches (all of them for a dense model; for a
  mixture-of-experts the experts its tokens were routed to, `ModelFacts.weight_fraction_read`)
  + the KV cache of every running sequence (decode attention reads each sequence's whole
  context, shared prefix blocks included), except a prefix common to the whole batch where the
  engine attends over it once for all sequences (vLLM's cascade attention:
  `common_prefix_tokens`);
- FLOPs = 2 x active parameters x tokens (decode + prefill) + attention: each decoded token
  attends over its sequence's context, each prefilled token over the cached prefix and the
  part of its own prompt before it;
all divided by the tensor-parallel degree, at the GPU's bandwidth and the GEMM peak of the
deployment's formats (advisor/sizing/engine_model/formats.py), with an assumed efficiency per
TP degree (all-reduce per layer, smaller GEMMs) until a measurement replaces it. `overhead`,
`memory` and `compute` are the calibration's factors (1, 1, 0 overhead: the physical floor).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

from advisor.sizing.engine_model.facts import ModelFacts

CASCADE_MIN_PREFIX_TOKENS = 256
"""vLLM uses cascade attention only for a common prefix at least this long ..."""
CASCADE_MIN_SEQUENCES = 8
"""... shared by at least this many running sequences (`use_cascade_attention`)."""

TP_EFFICIENCY_ASSUMED: dict[int, float] = {1: 1.0, 2: 0.9, 4: 0.8, 8: 0.7}
"""Assumed share of the TP=1 efficiency kept at each TP degree, used only where no run of that
engine at that degree is stored."""


class StepFactors(Protocol):
    """The calibration's factors of the step-time rule."""

    overhead_ms: float
    memory: float
    compute: float


@dataclass(frozen=True)
class Floor:
    """Factors of the physical floor: no overhead, datasheet bandwidth and peak."""

    overhead_ms: float = 0.0
    memory: float = 1.0
    compute: float = 1.0


FLOOR = Floor()


@dataclass(frozen=True)
class EngineShape:
    """The physics of one replica: bytes and FLOPs per GPU, the GPU's rates, the limits, and
    what prefix caching saves on the stage's traffic."""

    facts: ModelFacts
    tensor_parallel: int
    weight_bytes: float
    """Bytes of all weights per GPU (what the memory holds)."""
    kv_bytes_per_token: float
    """KV bytes per token per GPU."""
    bandwidth_bytes_per_ms: float
    peak_flops_per_ms: float
    tp_efficiency: float
    max_num_seqs: int
    token_budget: int
    kv_capacity_tokens: int
    """KV tokens the pool holds per replica after the weights and the shared prefixes."""
    cached_prompt_tokens: float = 0.0
    """Mean prompt tokens per request served from the prefix cache (not prefilled)."""
    prefill_keys_per_token: float = 0.0
    """Mean keys a prefilled token attends over (cached prefix + half its own uncached part)."""
    pooled_prompt_tokens: float = 0.0
    """Of each prompt, the tokens held once in the shared pool (not in the sequence's blocks)."""
    common_prefix_tokens: float = 0.0
    """Tokens of a prefix every running sequence shares whose KV one step reads once for the
    whole batch, not once per sequence: vLLM's cascade attention over a common prefix
    (vllm/v1/attention/backends/flash_attn.py, `use_cascade_attention`: a common prefix of
    CASCADE_MIN_PREFIX_TOKENS or more and CASCADE_MIN_SEQUENCES or more sequences; FlashInfer's
    "Cascade Inference: Memory Bandwidth Efficient Shared Prefix Batch Decoding"). 0 = every
    sequence reads its own copy (other engines, several shared contexts, no caching)."""

    @property
    def flops_per_token(self) -> float:
        return 2.0 * self.facts.active_parameters / self.tensor_parallel

    @cached_property
    def _rates(self) -> tuple[float, float, float, float]:
        """(dense weight read ms, KV ms per token, GEMM ms per token, attention ms per query
        token and key): the step's constants, computed once (the simulation takes millions of
        steps)."""
        bandwidth = self.bandwidth_bytes_per_ms * self.tp_efficiency
        peak = self.peak_flops_per_ms * self.tp_efficiency
        attention = self.facts.attention_flops(1.0, 1.0) / self.tensor_parallel
        return (
            self.weight_bytes / bandwidth,
            self.kv_bytes_per_token / bandwidth,
            self.flops_per_token / peak,
            attention / peak,
        )

    def weight_read_ms(self, tokens: float) -> float:
        dense = self._rates[0]
        return dense * self.facts.weight_fraction_read(tokens) if self.facts.is_moe else dense

    def kv_read_ms(self, context_tokens: float) -> float:
        return self._rates[1] * context_tokens

    def read_ms(self, context_tokens: float, tokens: float = 1.0) -> float:
        """Weights touched by `tokens` tokens plus the KV of `context_tokens`, at the bandwidth."""
        return self.weight_read_ms(tokens) + self.kv_read_ms(context_tokens)

    def attention_keys(self, decode: float, decode_context: float, prefill: float) -> float:
        """Query-key pairs of a step: `decode` sequences over `decode_context` keys in all (a
        sliding window caps each sequence's), `prefill` tokens over `prefill_keys_per_token`."""
        window = self.facts.sliding_window
        if window:
            decode_context = min(decode_context, decode * window)
            return decode_context + prefill * min(self.prefill_keys_per_token, window)
        return decode_context + prefill * self.prefill_keys_per_token

    def compute_ms(self, tokens: float, decode_context: float = 0.0, prefill: float = 0.0) -> float:
        _, _, per_token, per_key = self._rates
        keys = self.attention_keys(tokens - prefill, decode_context, prefill)
        return per_token * tokens + per_key * keys

    def kv_read_tokens(self, context: float, sequences: float) -> float:
        """KV tokens one step reads from memory when `sequences` running sequences hold
        `context` tokens in all: a common prefix is read once, not once per sequence, where
        the engine attends over it batch-wide (`common_prefix_tokens`)."""
        common = self.common_prefix_tokens
        if common < CASCADE_MIN_PREFIX_TOKENS or sequences < CASCADE_MIN_SEQUENCES:
            return context
        return max(context - common * (sequences - 1), common)

    def step_ms(
        self,
        factors: StepFactors,
        decode: float,
        prefill: float,
        context: float,
        sequences: float = 0.0,
    ) -> float:
        """One step with `decode` sequences decoding over `context` KV tokens in all and
        `prefill` prompt tokens prefilled (read_ms and compute_ms, written out flat: the
        simulation calls this once per engine step). `sequences`: the running sequences that
        share a common prefix (0: none counted, every token read)."""
        tokens = decode + prefill
        weight_ms, per_kv, per_token, per_key = self._rates
        facts = self.facts
        if facts.experts:
            weight_ms *= facts.weight_fraction_read(tokens)
        if facts.sliding_window:
            keys = self.attention_keys(decode, context, prefill)
        else:
            keys = context + prefill * self.prefill_keys_per_token
        return (
            factors.overhead_ms
            + factors.memory * (weight_ms + per_kv * self.kv_read_tokens(context, sequences))
            + factors.compute * (per_token * tokens + per_key * keys)
        )

    def context_slope_ms(self, factors: StepFactors, decoding: float) -> float:
        """How much longer each decode-only step gets as `decoding` sequences each add a token
        of context: its KV read and the attention over it."""
        _, per_kv, _, per_key = self._rates
        return (factors.memory * per_kv + factors.compute * per_key) * decoding


__all__ = [
    "CASCADE_MIN_PREFIX_TOKENS",
    "CASCADE_MIN_SEQUENCES",
    "FLOOR",
    "TP_EFFICIENCY_ASSUMED",
    "EngineShape",
    "Floor",
    "StepFactors",
]
