"""Fitting a planned stage's request lengths to the model's context window: prompts clipped where
only a distribution's tail exceeds it, a CPU substitute's lengths scaled to its shorter window,
and the engines whose sequence limit the stage's longest request exceeds."""

from __future__ import annotations

import math

from advisor.workload.architectures import (
    ContextWindow,
    architecture_for,
    check_context,
    upper_tokens,
)
from advisor.workload.profile import StageProfile
from bench.core.config import LengthDistribution


def _context(stage: StageProfile) -> ContextWindow | None:
    architecture, _ = architecture_for(stage.model)
    return check_context(stage, architecture)


def engine_limit(stage: StageProfile, framework: str) -> int | None:
    """The engine's sequence limit for the stage's model when the stage's longest sequence
    exceeds it (the candidate cannot run it), else None."""
    check = _context(stage)
    if check is None or framework not in check.engine_limits:
        return None
    limit = check.engine_limits[framework]
    return limit if check.longest_tokens > limit else None


def _clipped(distribution: LengthDistribution, top: int) -> LengthDistribution:
    top = max(distribution.min, top)
    if distribution.max is not None and distribution.max <= top:
        return distribution
    return distribution.model_copy(update={"max": top})


def fit_to_window(stage: StageProfile) -> tuple[StageProfile, str | None]:
    """The stage with its prompt lengths clipped so that no request exceeds the model's window
    (only the distribution's tail can: a stage whose near-worst requests exceed it is refused
    before planning), and a note saying so; the stage itself when nothing needs clipping."""
    check = _context(stage)
    if check is None or check.window_tokens is None or check.longest_tokens <= check.window_tokens:
        return stage, None
    window = check.window_tokens
    if stage.kind == "generate":
        top = window - upper_tokens(stage.output_tokens)
        clipped = stage.model_copy(update={"prompt_tokens": _clipped(stage.prompt_tokens, top)})
        what = f"prompts clipped at {top:,} tokens"
    else:
        assert stage.sequence_length is not None
        clipped = stage.model_copy(
            update={"sequence_length": _clipped(stage.sequence_length, window)}
        )
        what = f"sequences clipped at {window:,} tokens"
    return clipped, (
        f"The longest requests the profile's distributions can produce ({check.longest_tokens:,} "
        f"tokens) exceed {stage.model}'s {window:,}-token window: {what} (max of the "
        "distribution) so that no request is refused by the engine."
    )


def _scaled(distribution: LengthDistribution, factor: float) -> LengthDistribution:
    return distribution.model_copy(
        update={
            "mean": max(1, math.floor(distribution.mean * factor)),
            "spread": distribution.spread * factor,
            "min": max(1, math.floor(distribution.min * factor)),
            "max": None
            if distribution.max is None
            else max(1, math.floor(distribution.max * factor)),
        }
    )


def scale_to_window(
    planned: StageProfile, profile_stage: StageProfile
) -> tuple[StageProfile, str | None]:
    """The CPU substitute's stage with prompt and output lengths scaled by one factor so that its
    longest request fits the substitute's window (tiny-llama: 4,096 positions), and a note with
    the lengths before and after; unchanged when they fit. The quick plan on the CPU checks the
    harness and the frameworks, so a shorter context is stated, never hidden."""
    check = _context(planned)
    if check is None or check.window_tokens is None or check.longest_tokens <= check.window_tokens:
        return planned, None
    factor = check.window_tokens / check.longest_tokens
    if planned.kind == "generate":
        scaled = planned.model_copy(
            update={
                "prompt_tokens": _scaled(planned.prompt_tokens, factor),
                "output_tokens": _scaled(planned.output_tokens, factor),
            }
        )
        before = (
            f"prompt {profile_stage.prompt_tokens.mean:,} / output "
            f"{profile_stage.output_tokens.mean:,} tokens"
        )
        after = (
            f"prompt {scaled.prompt_tokens.mean:,} / output {scaled.output_tokens.mean:,} tokens"
        )
    else:
        assert planned.sequence_length is not None
        scaled = planned.model_copy(
            update={"sequence_length": _scaled(planned.sequence_length, factor)}
        )
        before = f"{profile_stage.sequence_length.mean:,} tokens"  # type: ignore[union-attr]
        after = f"{scaled.sequence_length.mean:,} tokens"  # type: ignore[union-attr]
    return scaled, (
        f"{planned.model} takes {check.window_tokens:,} positions, fewer than this profile's "
        f"longest request ({check.longest_tokens:,} tokens): the CPU check scales the lengths by "
        f"{factor:.2f}, from {before} to {after}. Its figures are for the shorter context."
    )


__all__ = ["engine_limit", "fit_to_window", "scale_to_window"]
