"""Every token length of a run against its model's context window, before the run starts: the
workload's longest sequence, each trace row and each prompt file row.

A request longer than the window fails at the engine, one by one, after the model has loaded
(vLLM refuses it, the transformers engines raise): the run ends with errors or INVALID instead
of the one line naming the field that a refusal up front gives. Without a known model (no
preset, no config.json, no position limit in it) only MAX_TOKENS applies.
"""

from __future__ import annotations

from bench.core.config import PromptFile, ReplayLoad, RunConfig
from bench.core.context_window import ModelContext, Term, check_fits, longest_sequence
from bench.engines.models import model_context
from bench.run.traffic_files import PromptRow, TraceRow

WORKLOAD_ADVICE = (
    "lower the lengths, clip the distributions with `max`, or choose a model with a longer window"
)
TRACE_ADVICE = "clip the rows with load.max_input_tokens and load.max_output_tokens"
PROMPT_ADVICE = "lower the row's output length"


def check_context(
    config: RunConfig,
    trace_rows: list[TraceRow] | None = None,
    prompt_rows: list[PromptRow] | None = None,
    context: ModelContext | None = None,
) -> None:
    """UserError at the first length over the window of `config.model` (looked up unless
    `context` is given); the rows are the run's trace and prompt file, already read."""
    context = context or model_context(config.model)
    if context is None:
        return
    backend = config.backend
    check_fits("", longest_sequence(config), context, backend, WORKLOAD_ADVICE, longest=True)
    if trace_rows and isinstance(config.load, ReplayLoad):
        _check_trace(trace_rows, config.load, context, backend)
    workload_prompts = getattr(config.workload, "prompt_file", None)
    if prompt_rows and isinstance(workload_prompts, PromptFile):
        _check_prompts(prompt_rows, workload_prompts, context, backend)


def _check_trace(
    rows: list[TraceRow], load: ReplayLoad, context: ModelContext, backend: str
) -> None:
    """Each row as replayed: its lengths after the load's max_input_tokens / max_output_tokens
    clips (bench/run/load/replay.py applies the same)."""
    window = context.tokens_for(backend)
    for number, row in enumerate(rows, start=1):
        prompt = min(row.input_tokens, load.max_input_tokens or row.input_tokens)
        output = min(row.output_tokens, load.max_output_tokens or row.output_tokens)
        if prompt + output > window:
            check_fits(
                f"trace {load.trace} row {number}",
                [
                    Term(field="input_length", tokens=prompt),
                    Term(field="output_length", tokens=output),
                ],
                context,
                backend,
                TRACE_ADVICE,
            )


def _check_prompts(
    rows: list[PromptRow], spec: PromptFile, context: ModelContext, backend: str
) -> None:
    """A row's output length with at least one prompt token (the prompt's own tokens are known
    only to the model's tokenizer, in the worker; the engine checks the sum)."""
    window = context.tokens_for(backend)
    for number, row in enumerate(rows, start=1):
        if row.output_tokens is not None and row.output_tokens + 1 > window:
            check_fits(
                f"prompt file {spec.path} prompt {number}",
                [
                    Term(field="its prompt", tokens=1),
                    Term(field=spec.output_tokens_field or "output", tokens=row.output_tokens),
                ],
                context,
                backend,
                PROMPT_ADVICE,
            )


__all__ = ["check_context"]
