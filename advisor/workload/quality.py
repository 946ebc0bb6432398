"""Quality beside speed in the advisor: a stage's measured quality per precision (the QualityResult
`python -m bench quality` wrote), the tolerance rule, and the words and cells the report shows.

Rule: a precision whose measured loss vs the baseline (the larger of perplexity's relative
increase and accuracy points lost, point estimates) exceeds the stage's `max_quality_loss_pct`
is not recommended, whatever its speed. A precision the file does not measure keeps the
unmeasured wording (FP8_ACCURACY_NOTE) and is not excluded, except FP8 weights + FP8 KV, judged
by FP8 weights alone when only those were measured (a floor for its loss).
"""

from __future__ import annotations

from bench.core.config import PrecisionConfig
from bench.core.quality import PrecisionQuality, QualityResult, load_quality_result

BEYOND_TOLERANCE = "exceeds the tolerated"
"""In every reason `beyond_tolerance` gives (the app picks those exclusions out by it)."""
QUALITY_NOTE_PREFIX = "Quality measured"
"""How the measured-quality caveat starts (page 1's risks pick it up by this prefix)."""


def stage_quality(quality_result: str | None) -> QualityResult | None:
    """The stage's QualityResult, or None without a file; UserError for a bad file."""
    return load_quality_result(quality_result) if quality_result else None


def quality_name(precision: PrecisionConfig) -> str:
    """The `bench quality` precision name of a deployment's precision."""
    if precision.quantization == "fp8":
        return "fp8-kv" if precision.kv_cache_dtype == "fp8" else "fp8"
    name = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[precision.dtype]
    # 16-bit weights with an FP8 KV cache: no `bench quality` precision measures it.
    return f"{name} + fp8 KV" if precision.kv_cache_dtype == "fp8" else name


def measured(result: QualityResult, precision: PrecisionConfig) -> PrecisionQuality | None:
    row = result.precision(quality_name(precision))
    return row if row is not None and row.status == "measured" else None


def quality_cell(result: QualityResult, precision: PrecisionConfig) -> str:
    """The Quality column's cell for one configuration's precision."""
    name = quality_name(precision)
    row = result.precision(name)
    if row is None:
        return f"{name} not measured"
    if name == result.baseline and row.status == "measured":
        return f"{row.summary()} (baseline)"
    return row.summary()


def beyond_tolerance(
    result: QualityResult, precision: PrecisionConfig, tolerance_pct: float
) -> str | None:
    """Why this precision is not recommended (its measured loss), or None.

    FP8 weights + FP8 KV without a measurement of its own is judged by FP8 weights alone: the
    KV cache's rounding comes on top of the weights', so that loss is a floor for it."""
    row = measured(result, precision)
    floor = ""
    if row is None and quality_name(precision) == "fp8-kv":
        row = result.precision("fp8")
        row = row if row is not None and row.status == "measured" else None
        floor = "FP8 weights alone (FP8 KV cache not measured): "
    loss = row.loss_pct() if row is not None else None
    if row is None or loss is None or loss <= tolerance_pct:
        return None
    return (
        f"{floor}measured quality loss {loss:.2f}% vs {result.baseline} {BEYOND_TOLERANCE} "
        f"{tolerance_pct:g}% ({row.precision} {row.summary()})"
    )


def profile_quality_name(dtype: str, quantization: str | None) -> str:
    """The `bench quality` precision name of a stage's own precision, for a stage the advisor
    runs at the profile's precision (a forward stage: no configuration search): int8 when the
    weight quantisation names int8 (ONNX Runtime's quantize_dynamic or torch's dynamic INT8),
    fp8 when it names fp8, else the dtype's."""
    scheme = (quantization or "").lower()
    if "int8" in scheme or "w8a8" in scheme:
        return "int8"
    if "fp8" in scheme:
        return "fp8"
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[dtype]


def fixed_precision_risk(result: QualityResult, name: str, tolerance_pct: float) -> str | None:
    """For a stage whose precision is the profile's own: a risk when that precision's measured
    loss exceeds the tolerance (page 1 shows it), or None."""
    row = result.precision(name)
    loss = row.loss_pct() if row is not None and row.status == "measured" else None
    if loss is None or loss <= tolerance_pct:
        return None
    return (
        f"{QUALITY_NOTE_PREFIX} beyond tolerance at the profile's precision {name}: loss "
        f"{loss:.2f}% vs {result.baseline} {BEYOND_TOLERANCE} {tolerance_pct:g}% "
        f"({row.summary()}); choose another precision"
    )


def quality_note(result: QualityResult, source: str) -> str:
    """The caveat naming each measured delta vs the baseline (page 1 shows it)."""
    parts = [
        f"{row.precision} {row.summary()}"
        for row in result.precisions
        if row.precision != result.baseline
    ]
    deltas = "; ".join(parts) if parts else "the baseline alone (no delta)"
    return (
        f"{QUALITY_NOTE_PREFIX} on your model ({source}, {result.engine}, baseline "
        f"{result.baseline}): {deltas}"
    )
