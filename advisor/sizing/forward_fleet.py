"""A forward stage (encoder, vision, speech encoder) in the one fleet answer: each viable
precision's dynamic-batching sizing (advisor/sizing/forward_sizing.py) as a `FleetOption`, so
that `choose` picks among them by the LLM stages' rules and the recommendation's configuration,
capacity and basis come from that one choice.

A forward option's capacity is in requests/s one GPU sustains within the p99 SLO (samples/s per
GPU / samples per request), so `Capacity` and its fleet arithmetic are the LLM stages'; its batch
limits are engine arguments (`max_batch_size`, `max_queue_delay_ms`). Precisions: the profile's,
then INT8 weights and activations (INT8 tensor cores on every catalogued GPU) and FP8 (on GPUs
with FP8 tensor cores), each at twice the 16-bit GEMM peak and a byte a weight. A quantised
precision whose accuracy on the stage's model is measured (`bench quality`, the profile's
quality_result) beyond `max_quality_loss_pct` is left out; one not measured is offered as an
alternative and never chosen over a vetted precision (`FleetOption.unvetted`).
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.sizing.capacity import EstimatedCapacity, fleet_for_stage
from advisor.sizing.fleet import CapacityBasis, FleetOption
from advisor.sizing.forward_sizing import (
    CARRIED_ERROR_WHY,
    ForwardSizing,
    WeightFormat,
    size_forward_stage,
)
from advisor.workload.gpus import find_gpu
from advisor.workload.profile import StageProfile
from advisor.workload.quality import profile_quality_name, stage_quality
from bench.core.config import ParallelismConfig, PrecisionConfig
from bench.core.quality import QualityResult
from bench.core.schema import RunResult

FORMAT_WORDS = {"int8": "INT8 weights and activations", "fp8": "FP8 weights and activations"}


def own_format(stage: StageProfile) -> WeightFormat | None:
    """The profile's own INT8 or FP8 quantisation, None for 16/32-bit weights."""
    name = profile_quality_name(stage.precision.dtype, stage.precision.quantization)
    return name if name in ("int8", "fp8") else None  # type: ignore[return-value]


def candidate_formats(stage: StageProfile) -> list[WeightFormat | None]:
    """The profile's precision first, then INT8 and (with FP8 tensor cores) FP8 where the
    profile keeps 16-bit weights."""
    own = own_format(stage)
    if own is not None:
        return [own]
    gpu = find_gpu(stage.gpu.type or "")
    if gpu is None:
        return [None]
    return [None, "int8", *(["fp8"] if gpu.fp8 else [])]


def _format_quality(
    stage: StageProfile, result: QualityResult | None, fmt: WeightFormat | None
) -> tuple[str | None, str | None, bool]:
    """(quality note, why excluded, unvetted) of one weight format on the stage's model."""
    own = own_format(stage)
    if fmt is None or fmt == own:
        return None, None, False  # the profile's own precision: its risk is said on page 1
    if result is None:
        return (
            f"{fmt.upper()} accuracy not measured on this model: run `python -m bench quality` "
            f"at {fmt} before deploying it",
            None,
            True,
        )
    row = result.precision(fmt)
    if row is None or row.status != "measured":
        return (
            f"{fmt} not measured in {stage.quality_result}: run `python -m bench quality` at it",
            None,
            True,
        )
    loss = row.loss_pct()
    tolerance = stage.max_quality_loss_pct
    if loss is not None and loss > tolerance:
        return (
            None,
            f"measured quality loss {loss:.2f}% vs {result.baseline} beyond the tolerance of "
            f"{tolerance:g}% ({row.summary()})",
            False,
        )
    return f"{row.summary()} (measured, {stage.quality_result})", None, False


def _precision(stage: StageProfile, fmt: WeightFormat | None) -> PrecisionConfig:
    """The run precision of a format: INT8 and FP8 W8A8 at the profile's dtype (what the
    pytorch backend runs for a forward stage; bench/engines/w8a8.py)."""
    return PrecisionConfig(dtype=stage.precision.dtype, quantization=fmt)


def _basis(sized: ForwardSizing, rate: float) -> tuple[CapacityBasis, float, float]:
    basis, low, high = _basis_of_model(sized, rate)
    if sized.scope:  # e.g. a speech model's decoder loop, which the figures leave out
        basis = basis.model_copy(update={"error_words": f"{basis.error_words}; {sized.scope}"})
    return basis, low, high


def _error_why(sized: ForwardSizing) -> str:
    """Why a calibrated sizing's error is what it is, in the fleet answer's words."""
    if sized.error_why is not None:
        return sized.error_why
    if sized.basis == "carried ladder":
        return CARRIED_ERROR_WHY
    return "the fit's largest error on its ladder, at least 20%"


def _basis_of_model(sized: ForwardSizing, rate: float) -> tuple[CapacityBasis, float, float]:
    """The basis, and the capacity interval (requests/s): a fitted ladder's error either way;
    the floor alone is an upper bound on the capacity (a lower bound on the GPU count)."""
    calibrated = sized.calibrated
    low = rate * (1 - min(sized.error, 0.9))
    high = rate * (1 + sized.error) if calibrated else rate
    if calibrated:
        basis = CapacityBasis(
            source="calibrated",
            calibration=f"the dynamic batcher's model, {sized.basis_words}",
            low_rps=low,
            high_rps=high,
            expected_error=sized.error,
            error_words=f"assumed error {sized.error:.0%} ({_error_why(sized)})",
        )
    else:
        basis = CapacityBasis(
            source="uncalibrated",
            calibration=f"the floor alone: no measured batch ladder of {sized.framework} on "
            f"{sized.gpu_type} at this shape",
            low_rps=low,
            high_rps=high,
            error_words="an upper bound on the capacity, so a lower bound on the GPU count "
            "(run a batch ladder to calibrate it)",
        )
    return basis, low, high


def _option(
    stage: StageProfile, sized: ForwardSizing, quality: str | None, unvetted: bool
) -> FleetOption | None:
    batching = sized.batching
    if batching is None:
        return None
    fmt = sized.weight_format
    rate = batching.samples_per_s_per_gpu / sized.samples_per_request
    basis, low, high = _basis(sized, rate)
    precision = _precision(stage, fmt)
    words = FORMAT_WORDS[fmt] if fmt else f"{stage.precision.dtype} weights"
    delay = batching.max_queue_delay_ms
    label = (
        f"{sized.framework}, {words}, dynamic batching max batch {batching.max_batch}, "
        f"max queue delay {delay:g} ms"
    )
    capacity = fleet_for_stage(
        stage,
        [],
        [
            EstimatedCapacity(
                label=label,
                max_rate_rps=rate,
                low_rate_rps=low,
                high_rate_rps=high,
                expected_error=basis.expected_error,
                notes=list(sized.notes),
            )
        ],
    ).estimates[0]
    return FleetOption(
        framework=sized.framework,
        label=label,
        parallelism=ParallelismConfig(),
        precision=precision,
        weight_format=fmt,
        weights=words,
        engine_args={"max_batch_size": batching.max_batch, "max_queue_delay_ms": delay},
        capacity=capacity,
        basis=basis,
        quality=quality,
        departures=int(fmt != own_format(stage)),
        unvetted=unvetted,
        samples_per_request=sized.samples_per_request,
        samples_per_s_per_gpu=batching.samples_per_s_per_gpu,
        p99_bound_ms=batching.p99_bound_ms,
    )


def forward_options(
    stage: StageProfile,
    framework: str,
    runs: Sequence[RunResult],
    skip: set[tuple] | None = None,
) -> tuple[list[FleetOption], list[str]]:
    """Every viable precision of a forward stage on `framework`, sized for its peak;
    (options, why others are out). Nothing without a peak rate or a GPU type."""
    peak = stage.peak_request_rate_rps or stage.request_rate_rps
    if stage.kind != "forward" or peak is None or not stage.gpu.type:
        return [], []
    skip = skip or set()
    result = stage_quality(stage.quality_result)
    options: list[FleetOption] = []
    excluded: list[str] = []
    for fmt in candidate_formats(stage):
        name = FORMAT_WORDS[fmt] if fmt else f"{stage.precision.dtype} weights"
        quality, reason, unvetted = _format_quality(stage, result, fmt)
        if reason is not None:
            excluded.append(f"{framework}, {name}: {reason}")
            continue
        sized = size_forward_stage(stage, framework, runs, weight_format=fmt)
        if sized is None:
            continue  # the catalogues cannot size this model or format on this GPU
        if sized.batching is None:
            verdict = sized.feasibility
            why = (
                f" (one sample alone needs {sized.batch_time.batch_ms(1):,.0f} ms; would make it "
                f"feasible: {'; '.join(verdict.remedies)})"
                if verdict is not None and verdict.remedies
                else ""
            )
            excluded.append(
                f"{framework}, {name}: no batch size meets the SLO on {stage.gpu.type}{why}"
            )
            continue
        option = _option(stage, sized, quality, unvetted)
        if option is not None and option.key() not in skip:
            options.append(option)
    return options, excluded


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def forward_basis_words(option: FleetOption) -> str:
    """`predicted, not measured: dynamic batching with max batch 64 and max queue delay 2 ms
    gives 2,179 samples/s per GPU (p99 bound 12 ms) ...` for a predicted forward option."""
    capacity = option.capacity
    args = option.engine_args
    text = (
        f"predicted, not measured: dynamic batching with max batch {args['max_batch_size']} and "
        f"max queue delay {args['max_queue_delay_ms']:g} ms gives "
        f"{option.samples_per_s_per_gpu:,.0f} samples/s per GPU "
        f"({_rate(capacity.max_rate_rps)} req/s of {option.samples_per_request} "
        f"sample{'s' if option.samples_per_request != 1 else ''}; p99 bound "
        f"{_rate(option.p99_bound_ms)} ms) with {option.weights}"
    )
    if capacity.gpus_range is not None and capacity.gpus_range[0] != capacity.gpus_range[1]:
        text += f", so {capacity.gpus_range[0]}-{capacity.gpus_range[1]} GPUs"
    text += f"; {option.basis.words()}"
    if option.quality:
        text += f"; quality: {option.quality}"
    return text + "; measure a batch ladder and a capacity search to settle it"


__all__ = ["candidate_formats", "forward_basis_words", "forward_options", "own_format"]
