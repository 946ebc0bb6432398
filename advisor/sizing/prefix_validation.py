"""The engine model's prefix-caching mechanics checked against the engine's own counters.

For every shipped run whose workload reuses prompt tokens (a prefix pool, conversations that
resend their history) the engine model (`advisor/sizing/engine_model/prefix.py`) says what share
of the prompt tokens the engine serves from its cache: the shared context, or what a turn's
predecessor computed, in whole KV blocks of the size the engine reported (vLLM: 16 tokens on a
GPU, 128 on its CPU build). vLLM counts the same thing (prefix-cache hits over queries,
in tokens: the run's `summary.prefix_cache_hit_rate`). The share is a property of the traffic and
the cache, not of the hardware's speed, so a CPU run of vLLM checks it as well as a GPU run; what
it does not check is how the saved prefill turns into TTFT and capacity on a GPU.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import Field

from advisor.sizing.engine_model.prefix import (
    BLOCK_TOKENS,
    TrafficShape,
    caches_prefixes,
    prefix_reuse,
)
from advisor.sizing.measured import run_gpu_name
from bench.core.config import GenerateWorkload
from bench.core.schema import RunResult, RunStatus
from bench.core.strict import Strict


class PrefixRow(Strict):
    """One run's served-from-cache share: the engine model's beside the engine's counters."""

    run_id: str
    reference: str | None = None
    framework: str
    device: str = Field(description="What it was measured on (the fingerprint's GPU or CPU).")
    reuse: str = Field(description="prefix pool / conversations, in words.")
    caching: bool
    prompt_tokens: float = Field(description="Mean prompt tokens the engine sees per request.")
    predicted_share: float = Field(description="Cached prompt tokens / prompt tokens, predicted.")
    measured_share: float = Field(description="vLLM's prefix-cache hits / queries over the run.")
    queries: float | None = Field(None, description="Query tokens behind the measured share.")
    block_tokens: int = Field(description="The engine's KV block size the prediction used.")

    @property
    def error_points(self) -> float:
        """predicted - measured, in percentage points of the prompt."""
        return 100 * (self.predicted_share - self.measured_share)


def _reuse_words(workload: GenerateWorkload) -> str | None:
    if workload.prefix is not None:
        prefix = workload.prefix
        return (
            f"prefix pool {prefix.count} x {prefix.tokens.mean:g} + "
            f"{workload.prompt_tokens.mean:g} own tokens"
        )
    if workload.conversation is not None:
        conversation = workload.conversation
        return (
            f"{conversation.turns.mean:g}-turn conversations, first prompt "
            f"{workload.prompt_tokens.mean:g}, {conversation.user_tokens.mean:g} per new message"
        )
    return None


def _device(run: RunResult) -> str:
    """The run's GPU as the catalogue names it (measured.run_gpu_name), else its CPU."""
    gpu = run_gpu_name(run)
    if gpu is not None:
        return gpu
    cores = run.environment.cpu.logical_cores if run.environment else None
    return f"CPU ({cores} cores)" if cores else "CPU"


def prefix_row(run: RunResult, reference: str | None = None) -> PrefixRow | None:
    """The row of a finished run with reused prompt tokens and the engine's hit counters."""
    workload = run.config.workload
    if run.status != RunStatus.COMPLETED or not isinstance(workload, GenerateWorkload):
        return None
    words = _reuse_words(workload)
    measured = run.summary.prefix_cache_hit_rate if run.summary else None
    if words is None or measured is None:
        return None
    traffic = TrafficShape.of_workload(workload)
    caching = caches_prefixes(run.config.backend, run.config.prefix_caching)
    block = run.engine.kv_block_tokens if run.engine else None
    reuse = prefix_reuse(traffic, caching, block or BLOCK_TOKENS)
    prompt = float(traffic.served_prompt().mean)
    return PrefixRow(
        run_id=run.run_id,
        reference=reference,
        framework=run.config.backend,
        device=_device(run),
        reuse=words,
        caching=caching,
        prompt_tokens=prompt,
        predicted_share=reuse.cached_tokens / prompt if prompt else 0.0,
        measured_share=measured,
        queries=run.summary.prefix_cache_queries,
        block_tokens=block or BLOCK_TOKENS,
    )


def prefix_rows(runs: Iterable[tuple[RunResult, str | None]]) -> list[PrefixRow]:
    """Every (run, reference file) pair's row, where the run has one."""
    rows = [prefix_row(run, reference) for run, reference in runs]
    return [row for row in rows if row is not None]


__all__ = ["PrefixRow", "prefix_row", "prefix_rows"]
