"""Prefix caching on a stage's traffic: the prompt tokens each request finds in the cache (not
prefilled again) and the KV held once for every sequence that shares it.

- A shared context (a profile's `shared_prefix`, a run's prefix pool: a system prompt, N
  documents) is prefilled on first use and then found by every request that starts with it, in
  whole KV blocks (16 tokens, vLLM's default `block_size`): each request prefills only its own
  suffix, and the pool holds each context once (N x its tokens) however many sequences read it.
- A conversation resends its whole history each turn; the earlier turns' prompt and answer are
  in the cache, so a later turn prefills only its new user message. The history is private to
  its conversation, so nothing is held once for many.
Engines without automatic prefix caching, or with it switched off, prefill every prompt whole
and hold every sequence's context in full (`PrefixReuse.none`).
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.workload.profile import StageProfile
from bench.core.config import GenerateWorkload, LengthDistribution

BLOCK_TOKENS = 16
"""vLLM's default KV block size: a cached prefix is found in whole blocks."""
CACHING_ENGINES = frozenset({"vllm", "openai", "tensorrt_llm", "sglang"})
"""Engine families whose automatic prefix caching is on by default (vLLM V1's APC, SGLang's
RadixAttention, TensorRT-LLM's KV-cache block reuse); `openai` stands for `vllm serve`."""


@dataclass(frozen=True)
class TrafficShape:
    """The traffic facts prefix caching depends on, from a profile stage or a run's workload."""

    first_prompt: LengthDistribution
    """A conversation's first prompt, or every prompt; shared prefix included."""
    output_tokens: float
    prefix_tokens: float = 0.0
    prefix_count: int = 0
    turns: float = 1.0
    user_tokens: float = 0.0

    @classmethod
    def of_stage(cls, stage: StageProfile) -> TrafficShape:
        conversation = stage.conversation
        return cls(
            first_prompt=stage.prompt_tokens,
            output_tokens=float(stage.output_tokens.mean),
            prefix_tokens=float(stage.shared_prefix.tokens) if stage.shared_prefix else 0.0,
            prefix_count=stage.shared_prefix.count if stage.shared_prefix else 0,
            turns=float(conversation.turns) if conversation else 1.0,
            user_tokens=float(conversation.user_tokens) if conversation else 0.0,
        )

    @classmethod
    def of_workload(cls, workload: GenerateWorkload) -> TrafficShape:
        """A bench workload: its `prompt_tokens` is the suffix after a pool's prefix."""
        prefix = workload.prefix
        prefix_mean = float(prefix.tokens.mean) if prefix else 0.0
        prompt = workload.prompt_tokens
        if prefix_mean:
            prompt = prompt.model_copy(
                update={
                    "mean": prompt.mean + int(prefix_mean),
                    "min": prompt.min + int(prefix_mean),
                    "max": None if prompt.max is None else prompt.max + int(prefix_mean),
                }
            )
        conversation = workload.conversation
        return cls(
            first_prompt=prompt,
            output_tokens=float(workload.output_tokens.mean),
            prefix_tokens=prefix_mean,
            prefix_count=prefix.count if prefix else 0,
            turns=float(conversation.turns.mean) if conversation else 1.0,
            user_tokens=float(conversation.user_tokens.mean) if conversation else 0.0,
        )

    @property
    def history_tokens(self) -> float:
        """Mean tokens of earlier turns a request resends (0 without conversations): turn i
        carries (i - 1) x (answer + next user message) before its new message."""
        return max(self.turns - 1, 0.0) / 2 * (self.output_tokens + self.user_tokens)

    def served_prompt(self) -> LengthDistribution:
        """The prompt lengths the engine sees: the first prompt plus the mean history."""
        history = self.history_tokens
        if history <= 0:
            return self.first_prompt
        prompt = self.first_prompt
        return prompt.model_copy(
            update={
                # whole tokens: the field is an int (model_copy does not validate)
                "mean": prompt.mean + round(history),
                "max": None if prompt.max is None else prompt.max + int(2 * history),
            }
        )


@dataclass(frozen=True)
class PrefixReuse:
    """What the cache saves per request on this traffic, and what it holds once."""

    cached_tokens: float = 0.0
    """Mean prompt tokens per request found in the cache (not prefilled)."""
    shared_kv_tokens: float = 0.0
    """KV tokens held once in the block pool for all sequences (the shared contexts)."""
    per_sequence_shared_tokens: float = 0.0
    """Of each sequence's context, the tokens that live in the shared pool, not its own blocks."""
    common_tokens: float = 0.0
    """Tokens of the one context every request starts with (a single shared prefix): what a
    batch-wide shared-prefix attention reads once per step (`EngineShape.common_prefix_tokens`)."""
    words: str = ""

    @classmethod
    def none(cls) -> PrefixReuse:
        return cls()


def _blocks(tokens: float, block_tokens: int = BLOCK_TOKENS) -> float:
    return float((int(tokens) // block_tokens) * block_tokens)


def caches_prefixes(framework: str, prefix_caching: bool | None = None) -> bool:
    """Whether a deployment of `framework` serves repeated prefixes from its cache: the run's
    setting where given, else the engine family's default."""
    if prefix_caching is not None:
        return prefix_caching
    return framework in CACHING_ENGINES


def conversation_cached_tokens(traffic: TrafficShape, block_tokens: int = BLOCK_TOKENS) -> float:
    """Mean prompt tokens a conversation turn finds in the cache. Turn 1 finds none; turn i
    finds what turn i-1 computed - its prompt and its answer but the answer's last token, whose
    KV is never computed (generation stops there) - in whole blocks. Exact per turn, since with
    large blocks (vLLM's CPU build uses 128 tokens) a turn's history often fills none."""
    turns = max(round(traffic.turns), 1)
    prompt = float(traffic.first_prompt.mean)
    step = traffic.output_tokens + traffic.user_tokens
    cached = 0.0
    for _ in range(1, turns):
        computed = prompt + max(traffic.output_tokens - 1, 0.0)
        prompt += step
        cached += min(_blocks(computed, block_tokens), prompt - 1)
    return cached / turns


def prefix_reuse(
    traffic: TrafficShape, caching: bool, block_tokens: int = BLOCK_TOKENS
) -> PrefixReuse:
    """The cache's effect on the traffic (module docstring); `caching` False = none.
    `block_tokens`: the engine's KV block size (vLLM: 16 on GPUs, 128 on its CPU build)."""
    if not caching:
        return PrefixReuse.none()
    if traffic.prefix_tokens > 0:
        shared = _blocks(traffic.prefix_tokens, block_tokens)
        count = max(traffic.prefix_count, 1)
        return PrefixReuse(
            cached_tokens=shared,
            shared_kv_tokens=shared * count,
            per_sequence_shared_tokens=shared,
            common_tokens=shared if count == 1 else 0.0,
            words=f"prefix caching: {shared:,.0f} of each prompt's tokens served from the cache "
            f"({count} shared context{'s' if count > 1 else ''} held once)",
        )
    if traffic.turns > 1:
        cached = conversation_cached_tokens(traffic, block_tokens)
        return PrefixReuse(
            cached_tokens=cached,
            words=f"prefix caching: about {cached:,.0f} history tokens per turn served from the "
            f"cache ({traffic.turns:g} turns per conversation)",
        )
    return PrefixReuse.none()


__all__ = [
    "BLOCK_TOKENS",
    "CACHING_ENGINES",
    "PrefixReuse",
    "TrafficShape",
    "caches_prefixes",
    "conversation_cached_tokens",
    "prefix_reuse",
]
