"""Prefix caching on a stage's traffic: the prompt tokens each request finds in the cache (not
prefilled again) and the KV held once for every sequence that shares it.

- A shared context (`shared_prefix`: a system prompt, N documents) is prefilled on first use and
  then found by every request that starts with it, in whole KV blocks (16 tokens, vLLM's default
  `block_size`): each request prefills only its own suffix, and the pool holds each context once
  (N x its tokens) however many sequences read it.
- A conversation resends its whole history each turn; the earlier turns' prompt and answer are in
  the cache, so a later turn prefills only its new user message. The history is private to its
  conversation, so nothing is held once for many.
Engines without automatic prefix caching, or with it switched off, prefill every prompt whole
and hold every sequence's context in full (`PrefixReuse.none`).
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.workload.profile import StageProfile
from bench.core.config import LengthDistribution

BLOCK_TOKENS = 16
"""vLLM's default KV block size: a cached prefix is found in whole blocks."""
CACHING_ENGINES = frozenset({"vllm", "openai", "tensorrt_llm", "sglang"})
"""Engine families whose automatic prefix caching is on by default (vLLM V1's APC, SGLang's
RadixAttention, TensorRT-LLM's KV-cache block reuse); `openai` stands for `vllm serve`."""


@dataclass(frozen=True)
class PrefixReuse:
    """What the cache saves per request on this traffic, and what it holds once."""

    cached_tokens: float = 0.0
    """Mean prompt tokens per request found in the cache (not prefilled)."""
    shared_kv_tokens: float = 0.0
    """KV tokens held once in the block pool for all sequences (the shared contexts)."""
    per_sequence_shared_tokens: float = 0.0
    """Of each sequence's context, the tokens that live in the shared pool, not its own blocks."""
    words: str = ""

    @classmethod
    def none(cls) -> PrefixReuse:
        return cls()


def _blocks(tokens: float) -> float:
    return (int(tokens) // BLOCK_TOKENS) * BLOCK_TOKENS


def history_tokens(stage: StageProfile) -> float:
    """Mean tokens of earlier turns a conversation's request resends (0 without one): turn i
    carries (i - 1) x (answer + next user message) before its new message."""
    if stage.conversation is None:
        return 0.0
    turns = stage.conversation.turns
    per_turn = stage.output_tokens.mean + stage.conversation.user_tokens
    return (turns - 1) / 2 * per_turn


def served_prompt(stage: StageProfile) -> LengthDistribution:
    """The prompt lengths the engine sees: the profile's first-turn prompt plus, for
    conversations, the mean history a turn resends."""
    history = history_tokens(stage)
    if history <= 0:
        return stage.prompt_tokens
    prompt = stage.prompt_tokens
    return prompt.model_copy(
        update={
            "mean": prompt.mean + history,
            "min": prompt.min,
            "max": None if prompt.max is None else prompt.max + 2 * history,
        }
    )


def caches_prefixes(framework: str, prefix_caching: bool | None = None) -> bool:
    """Whether a deployment of `framework` serves repeated prefixes from its cache: the run's
    setting where given, else the engine family's default."""
    if prefix_caching is not None:
        return prefix_caching
    return framework in CACHING_ENGINES


def prefix_reuse(stage: StageProfile, caching: bool) -> PrefixReuse:
    """The cache's effect on the stage's traffic (module docstring); `caching` False = none."""
    if not caching:
        return PrefixReuse.none()
    if stage.shared_prefix is not None:
        shared = _blocks(stage.shared_prefix.tokens)
        count = stage.shared_prefix.count
        return PrefixReuse(
            cached_tokens=shared,
            shared_kv_tokens=shared * count,
            per_sequence_shared_tokens=shared,
            words=f"{shared:,.0f} of each prompt's tokens served from the prefix cache "
            f"({count} shared context{'s' if count > 1 else ''} held once)",
        )
    if stage.conversation is not None and stage.conversation.turns > 1:
        turns = stage.conversation.turns
        history = history_tokens(stage)
        # Turn 1 has nothing cached; turn i >= 2 finds all but its new user message:
        # first prompt - user message + (i - 1) x (answer + user message), averaged over turns.
        first = max(stage.prompt_tokens.mean - stage.conversation.user_tokens, 0.0)
        cached = (turns - 1) / turns * first + history
        return PrefixReuse(
            cached_tokens=cached,
            words=f"about {cached:,.0f} history tokens per turn served from the prefix cache "
            f"({turns} turns per conversation)",
        )
    return PrefixReuse.none()


__all__ = [
    "BLOCK_TOKENS",
    "CACHING_ENGINES",
    "PrefixReuse",
    "caches_prefixes",
    "prefix_reuse",
    "served_prompt",
]
