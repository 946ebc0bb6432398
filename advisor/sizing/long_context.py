"""Long-context prefill checked request by request.

A shipped run that sends one request at a time with prompts spread over a wide range of lengths
(8,000 to 112,000 tokens) measures each request's TTFT at its own prompt length. The serving
model gives every request of a run the mean prompt's attention work, so such a run is not
fitted on (serving_calibration.MAX_PROMPT_SPREAD); here each request is predicted from an
engine shape built for its own length, as the unseen-GPU check's bases predict
(advisor/sizing/unseen_gpu.py: uncalibrated, the other GPU's factors carried over, the GPU's
own `bench calibrate` record), plus the record without the attention FLOPs — the prefill floor
that counts the weights' GEMMs alone, which is what leaving attention out would claim.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence

from pydantic import Field

from advisor.sizing.serving_calibration import RunShape, run_shape
from advisor.sizing.serving_sim import Workload, simulate
from advisor.sizing.unseen_gpu import BasisKind, other_gpu_of, prediction_bases
from bench.core.calibration import CalibrationRecord
from bench.core.config import LengthDistribution
from bench.core.schema import RequestRecord, RunResult
from bench.core.strict import Strict

NO_ATTENTION = "this GPU, no attention FLOPs"


class LongContextRow(Strict):
    """One measured request: its prompt length, TTFT, and each basis' TTFT for it."""

    prompt_tokens: int
    measured_ttft_ms: float
    predicted_ttft_ms: dict[str, float] = Field(
        description="By basis (unseen_gpu.BasisKind, or NO_ATTENTION)."
    )


class LongContextError(Strict):
    """One basis over every request: median signed and absolute error, the worst."""

    basis: str
    median_error: float = Field(description="Median (predicted - measured) / measured.")
    median_abs_error: float
    worst_abs_error: float


class LongContextCheck(Strict):
    """A long-context prefill sweep of one run, predicted request by request."""

    run_id: str
    reference: str | None
    gpu: str
    model: str
    max_num_batched_tokens: int = Field(description="The engine's prefill chunk (tokens).")
    bases: list[str]
    rows: list[LongContextRow]
    errors: list[LongContextError]
    attention_share_longest: float = Field(
        description="At the longest prompt: 1 - (the record's TTFT without attention FLOPs / "
        "with them), the share of the predicted prefill that attention takes."
    )


def shape_at(run: RunResult, prompt_tokens: int) -> RunShape | None:
    """The run's engine shape with every prompt `prompt_tokens` long."""
    config = run.config.model_copy(deep=True)
    config.workload.prompt_tokens = LengthDistribution(mean=prompt_tokens)
    return run_shape(run.model_copy(update={"config": config}))


def _ttft(shape: RunShape, factors, prompt_tokens: int, output_tokens: int) -> float | None:
    workload = Workload(
        LengthDistribution(mean=prompt_tokens), LengthDistribution(mean=output_tokens), 1
    )
    result = simulate(shape.shape, factors, workload, shape.replicas, concurrency=1)
    return result.ttft_ms.p50 if result.ttft_ms is not None else None


def check_long_context(
    run: RunResult,
    records: Sequence[RequestRecord],
    record: CalibrationRecord,
    shapes: Sequence[RunShape],
    reference: str | None = None,
) -> LongContextCheck | None:
    """Each measured (not warm-up, successful) request of `run` predicted at its own prompt
    length; None when the model does not cover the run's engine, GPU or model. `shapes`: every
    run the product ships (those on the run's GPU are left out of the other GPU's basis)."""
    measured = sorted(
        (r for r in records if r.ok and not r.warmup and r.chunk_ns), key=lambda r: r.input_tokens
    )
    if not measured:
        return None
    longest = shape_at(run, measured[-1].input_tokens)
    if longest is None:
        return None
    others = [s for s in shapes if s.gpu != longest.gpu]
    bases = prediction_bases(longest, record, others, other_gpu_of(longest, others))
    record_factors = next(b.factors for b in bases if b.kind == "this GPU")
    rows = []
    for request in measured:
        shape = shape_at(run, request.input_tokens)
        if shape is None:
            continue
        predicted: dict[str, float] = {}
        for basis in bases:
            ttft = _ttft(shape, basis.factors, request.input_tokens, request.output_tokens)
            if ttft is not None:
                predicted[basis.kind] = ttft
        plain = dataclasses.replace(
            shape, shape=dataclasses.replace(shape.shape, prefill_keys_per_token=0.0)
        )
        ttft = _ttft(plain, record_factors, request.input_tokens, request.output_tokens)
        if ttft is not None:
            predicted[NO_ATTENTION] = ttft
        rows.append(
            LongContextRow(
                prompt_tokens=request.input_tokens,
                measured_ttft_ms=(request.chunk_ns[0] - request.start_ns) / 1e6,
                predicted_ttft_ms=predicted,
            )
        )
    names: list[str] = [b.kind for b in bases] + [NO_ATTENTION]
    errors = []
    for name in names:
        found = [
            (row.predicted_ttft_ms[name] - row.measured_ttft_ms) / row.measured_ttft_ms
            for row in rows
            if name in row.predicted_ttft_ms
        ]
        if found:
            errors.append(
                LongContextError(
                    basis=name,
                    median_error=statistics.median(found),
                    median_abs_error=statistics.median(abs(e) for e in found),
                    worst_abs_error=max(abs(e) for e in found),
                )
            )
    last = rows[-1].predicted_ttft_ms
    this: BasisKind = "this GPU"
    return LongContextCheck(
        run_id=run.run_id,
        reference=reference,
        gpu=longest.gpu,
        model=run.config.model,
        max_num_batched_tokens=longest.shape.token_budget,
        bases=names,
        rows=rows,
        errors=errors,
        attention_share_longest=1 - last[NO_ATTENTION] / last[this],
    )


__all__ = [
    "NO_ATTENTION",
    "LongContextCheck",
    "LongContextError",
    "LongContextRow",
    "check_long_context",
    "shape_at",
]
