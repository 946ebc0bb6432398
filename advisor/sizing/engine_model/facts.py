"""The model facts every step time is computed from: parameters in total and per token
(mixture-of-experts), layers, attention width, KV heads, head size and a sliding window.

Read from the architecture (a bench preset or a checkpoint's config.json,
advisor/workload/architectures.py); a profile's `parameters_b` overrides the total (and, for a
dense model, the active count). Mixture-of-experts: the memory fit holds every expert (total
parameters), a token's GEMMs use its router's top-k experts (active parameters), and one engine
step reads the weights of every expert that any token of the step was routed to — with B tokens
routed uniformly at random to k of E experts, E x (1 - (1 - k/E)^B) experts per layer
(`weight_fraction_read`): batch 1 reads about the active share, a batch of 64 nearly all.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.workload.architectures import Architecture


@dataclass(frozen=True)
class ModelFacts:
    """What the step time needs of one model; None sizes are unknown."""

    parameters: int
    active_parameters: int
    layers: int | None = None
    attention_width: int | None = None
    """Query heads x head size: the width of the attention products."""
    kv_heads: int | None = None
    head_dim: int | None = None
    experts: int | None = None
    experts_per_token: int | None = None
    sliding_window: int | None = None

    @property
    def is_moe(self) -> bool:
        return bool(self.experts and self.experts_per_token and self.experts > 1)

    @property
    def expert_parameters(self) -> float:
        """Parameters of all routed experts together (0 for a dense model): total - active =
        experts' share x (1 - k/E), so the experts hold (total - active) / (1 - k/E)."""
        if not self.is_moe:
            return 0.0
        share_unused = 1 - self.experts_per_token / self.experts  # type: ignore[operator]
        return (self.parameters - self.active_parameters) / share_unused

    def weight_fraction_read(self, tokens: float) -> float:
        """The share of all weights one step over `tokens` tokens reads (1 for a dense model)."""
        if not self.is_moe or self.parameters <= 0:
            return 1.0
        experts, top_k = self.experts, self.experts_per_token
        touched = experts * (1 - (1 - top_k / experts) ** max(tokens, 1.0))  # type: ignore[operator]
        expert_share = self.expert_parameters / self.parameters
        return (1 - expert_share) + expert_share * touched / experts  # type: ignore[operator]

    def kv_elements_per_token(self) -> int | None:
        """2 (K and V) x layers x KV heads x head size: elements one token holds in the cache."""
        if not self.layers or not self.head_dim:
            return None
        return 2 * self.layers * (self.kv_heads or 1) * self.head_dim

    def attention_flops(self, tokens: float, context: float) -> float:
        """FLOPs of `tokens` query tokens each attending over `context` keys: Q K^T and the
        weighted sum of V, 2 x width x context each, per layer (a sliding window caps the
        context). 0 when the sizes are unknown."""
        if not self.layers or not self.attention_width:
            return 0.0
        if self.sliding_window:
            context = min(context, self.sliding_window)
        return 4.0 * self.layers * self.attention_width * tokens * context

    def prefill_attention_flops(self, prompt: float, cached: float = 0.0) -> float:
        """Causal attention of a prefill of `prompt` tokens whose first `cached` come from the
        prefix cache: token i attends over i keys, so the uncached part costs
        2 x layers x width x (prompt^2 - cached^2)."""
        if not self.layers or not self.attention_width:
            return 0.0
        if self.sliding_window and prompt > self.sliding_window:
            window = self.sliding_window
            uncached = max(prompt - cached, 0.0)
            return 4.0 * self.layers * self.attention_width * uncached * window
        return 2.0 * self.layers * self.attention_width * (prompt**2 - min(cached, prompt) ** 2)


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) and value else None


def model_facts(
    architecture: Architecture | None, parameters: int | None = None
) -> ModelFacts | None:
    """The facts of an architecture; `parameters` (the profile's parameters_b) overrides the
    total, scaling an MoE's active count with it. None when no parameter count is known."""
    total = parameters or (architecture.parameters if architecture is not None else None)
    if not total:
        return None
    if architecture is None:
        return ModelFacts(parameters=total, active_parameters=total)
    active = (
        _int_or_none(getattr(architecture, "active_parameters", None)) or architecture.parameters
    )
    if parameters and architecture.parameters:
        active = round(active * parameters / architecture.parameters)
    heads = architecture.attention_heads
    head_dim = architecture.head_dim
    return ModelFacts(
        parameters=total,
        active_parameters=min(active, total),
        layers=architecture.layers,
        attention_width=heads * head_dim if heads and head_dim else None,
        kv_heads=architecture.kv_heads or heads,
        head_dim=head_dim,
        experts=_int_or_none(getattr(architecture, "experts", None)),
        experts_per_token=_int_or_none(getattr(architecture, "experts_per_token", None)),
        sliding_window=_int_or_none(getattr(architecture, "sliding_window", None)),
    )


__all__ = ["ModelFacts", "model_facts"]
