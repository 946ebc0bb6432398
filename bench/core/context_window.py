"""A model's context window and the longest sequence a run asks of it, so that a request no
engine could serve is refused before the run instead of failing request by request.

Without a known model only MAX_TOKENS (bench/core/limits.py) bounds a length; with one (a preset,
a local checkpoint's config.json) prompt + output must fit its window. The window follows the
engines' own rule: vLLM, TensorRT-LLM and an OpenAI-compatible server (vLLM here) accept
max_position_embeddings scaled by rope_scaling (vLLM `_get_and_verify_max_len`); the
transformers and ONNX engines hold to max_position_embeddings itself. The same rules decide the
advisor's profile check (advisor/workload/architectures.py); tests keep the two equal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from bench.core.config import (
    ForwardWorkload,
    GenerateWorkload,
    LengthDistribution,
    ReplayLoad,
    RunConfig,
)
from bench.core.errors import UserError
from bench.core.limits import LIMITS_DOC
from bench.core.strict import Strict

POSITION_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
"""config.json keys that bound the sequence length; vLLM takes the smallest one present."""
ROPE_TYPES_ALREADY_IN_POSITIONS = frozenset({"su", "longrope", "llama3"})
"""rope_scaling types whose config already states the extended window in
max_position_embeddings (the engines' max-length rule leaves them unscaled)."""
SCALED_WINDOW_BACKENDS = frozenset({"vllm", "tensorrt_llm", "openai"})
"""Backends whose longest sequence is the rope-scaled window; the others (transformers, ONNX,
TensorRT, the fake test double) are held to the position table itself."""


class ModelContext(Strict):
    """A model's context window, as read from its config (preset or config.json)."""

    model: str = Field(description="Preset name or checkpoint path, as the run names it.")
    positions: int = Field(gt=0, description="The position table: the smallest POSITION_KEYS.")
    key: str = Field(description="The config key `positions` comes from.")
    scaled_tokens: int = Field(gt=0, description="The window with rope scaling applied.")
    rope_scaling: str | None = Field(None, description="config.json rope_scaling, in words.")

    def tokens_for(self, backend: str) -> int:
        """The longest prompt + output `backend` accepts on this model."""
        return self.scaled_tokens if backend in SCALED_WINDOW_BACKENDS else self.positions

    def described(self, backend: str) -> str:
        """`model tiny-llama's context of 4,096 tokens (max_position_embeddings)`."""
        tokens = self.tokens_for(backend)
        source = self.key
        if tokens != self.positions:
            source += f" {self.positions:,}, rope_scaling {self.rope_scaling}"
        return f"model {self.model}'s context of {tokens:,} tokens ({source})"


def context_from_config(model: str, document: Mapping[str, Any]) -> ModelContext | None:
    """The window of a Hugging Face config.json (a multimodal config's `text_config` when the
    top level states none); None when it states no position limit (CNNs, ViTs)."""
    text_config = document.get("text_config")
    for section in (document, text_config if isinstance(text_config, Mapping) else {}):
        found = [
            (value, key)
            for key in POSITION_KEYS
            if isinstance(value := section.get(key), int)
            and not isinstance(value, bool)
            and value > 0
        ]
        if found:
            positions, key = min(found)
            scaled, words = _rope_scaled(section, positions)
            return ModelContext(
                model=model, positions=positions, key=key, scaled_tokens=scaled, rope_scaling=words
            )
    return None


def _rope_scaled(config: Mapping[str, Any], positions: int) -> tuple[int, str | None]:
    """(window, rope scaling in words): positions x factor, unless the type already states the
    extended window; yarn scales original_max_position_embeddings."""
    entry = config.get("rope_scaling") or config.get("rope_parameters")
    if not isinstance(entry, Mapping):
        return positions, None
    rope_type = entry.get("rope_type") or entry.get("type")
    if not isinstance(rope_type, str) or rope_type == "default":
        return positions, None
    factor = entry.get("factor", 1.0)
    factor = float(factor) if isinstance(factor, int | float) else 1.0
    words = f"{rope_type} x{factor:g}"
    if rope_type in ROPE_TYPES_ALREADY_IN_POSITIONS:
        return positions, words
    original = entry.get("original_max_position_embeddings")
    base = original if rope_type == "yarn" and isinstance(original, int) else positions
    return int(base * factor), words


def longest_tokens(distribution: LengthDistribution) -> int:
    """The longest length the workload generator produces: the `max` clip when set; else fixed
    = mean, uniform = mean + spread, normal = mean + 5 std, lognormal = its 5-sigma quantile
    (1 draw in 3.5 million beyond); never below the `min` clip (the sampler applies it last).
    The advisor's `upper_tokens` is `longest_draw`, this rule before the `min` clip."""
    return max(distribution.min, longest_draw(distribution))


def longest_draw(distribution: LengthDistribution) -> int:
    """The longest length a distribution draws before the sampler's `min` clip (see
    `longest_tokens`)."""
    if distribution.max is not None:
        return distribution.max
    if distribution.kind == "fixed" or distribution.spread == 0:
        return distribution.mean
    if distribution.kind == "uniform":
        return math.ceil(distribution.mean + distribution.spread)
    if distribution.kind == "normal":
        return math.ceil(distribution.mean + 5 * distribution.spread)
    sigma = math.sqrt(math.log1p((distribution.spread / distribution.mean) ** 2))
    mu = math.log(distribution.mean) - sigma**2 / 2
    return math.ceil(math.exp(mu + 5 * sigma))


class Term(Strict):
    """One addend of a sequence's length: a field, its longest value, how many times it counts."""

    field: str
    tokens: int
    times: int = 1


def longest_sequence(config: RunConfig) -> list[Term]:
    """The addends of the longest prompt + output the run's workload generates ([] when the
    lengths come from elsewhere: a trace replay's rows, images). A conversation's last turn
    resends the whole history; a prompt file's prompts are counted at 1 token here (their
    tokens are known only to the model's tokenizer: the engine checks them)."""
    workload = config.workload
    if isinstance(workload, ForwardWorkload):
        if workload.sequence_length is None:
            return []
        return [
            Term(field="workload.sequence_length", tokens=longest_tokens(workload.sequence_length))
        ]
    if isinstance(config.load, ReplayLoad) or not isinstance(workload, GenerateWorkload):
        return []
    output = longest_tokens(workload.output_tokens)
    if workload.prompt_file is not None:
        return [
            Term(field="a prompt", tokens=1),
            Term(field="workload.output_tokens", tokens=output),
        ]
    terms: list[Term] = []
    if workload.prefix is not None:
        terms.append(
            Term(field="workload.prefix.tokens", tokens=longest_tokens(workload.prefix.tokens))
        )
    terms.append(
        Term(field="workload.prompt_tokens", tokens=longest_tokens(workload.prompt_tokens))
    )
    conversation = workload.conversation
    if conversation is not None:
        later_turns = longest_tokens(conversation.turns) - 1
        if later_turns > 0:
            terms.append(Term(field="workload.output_tokens", tokens=output, times=later_turns))
            terms.append(
                Term(
                    field="workload.conversation.user_tokens",
                    tokens=longest_tokens(conversation.user_tokens),
                    times=later_turns,
                )
            )
    terms.append(Term(field="workload.output_tokens", tokens=output))
    return terms


def check_fits(
    where: str,
    terms: list[Term],
    context: ModelContext | None,
    backend: str,
    advice: str,
    longest: bool = False,
) -> None:
    """UserError (one line naming the fields, the model and its context) when the terms add up
    to more than the window `backend` allows on the model; nothing when the model is unknown.
    `longest`: the terms are a distribution's longest draws (said so in the line)."""
    if context is None or not terms:
        return
    total = sum(term.tokens * term.times for term in terms)
    window = context.tokens_for(backend)
    if total <= window:
        return
    names = " + ".join(_times(term.field, term.times) for term in terms)
    if longest:
        names += " at their longest" if len(terms) > 1 else " at its longest"
    figures = " + ".join(_times(f"{term.tokens:,}", term.times) for term in terms)
    sums = f"{figures} = {total:,} tokens" if len(terms) > 1 else f"{total:,} tokens"
    prefix = f"{where}: " if where else ""
    raise UserError(
        f"{prefix}{names} = {sums}, over {context.described(backend)}; {advice} ({LIMITS_DOC})"
    )


def _times(text: str, times: int) -> str:
    return text if times == 1 else f"{times:,} x {text}"


__all__ = [
    "POSITION_KEYS",
    "SCALED_WINDOW_BACKENDS",
    "ModelContext",
    "Term",
    "check_fits",
    "context_from_config",
    "longest_sequence",
    "longest_tokens",
]
