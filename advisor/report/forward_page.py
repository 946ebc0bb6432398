"""Page 1 of the report for a forward stage (encoder, vision): the GPUs and cost with the dynamic
batcher's limits and their basis, and a risk line when the SLO cannot hold (or barely holds) at
the stated load, how far, and what would make it feasible (advisor/sizing/forward_sizing.py)."""

from __future__ import annotations

from collections.abc import Sequence

from advisor.report.numbers import number
from advisor.sizing.forward_sizing import CARRIED_ERROR_WHY, ForwardSizing, size_forward_stage
from advisor.workload.profile import StageProfile
from bench.core.schema import RunResult


def forward_sizing(
    stage: StageProfile | None, framework: str, runs: Sequence[RunResult]
) -> ForwardSizing | None:
    """The chosen framework's sizing for a forward stage, None for any other stage."""
    if stage is None or stage.kind != "forward":
        return None
    return size_forward_stage(stage, framework, runs)


def sizing_words(sized: ForwardSizing) -> str:
    """`3 × H200 (2–3 within the model's error) for 12,800 samples/s ... Basis: ...`."""
    batching = sized.batching
    calibrated = sized.calibrated
    basis = (
        f"predicted, {sized.basis_words}"
        if calibrated
        else "the floor alone (no measured batch ladder of this framework on this GPU: a lower "
        "bound on the count, not a prediction)"
    )
    if sized.basis == "carried ladder":
        basis += f"; error assumed {sized.error:.0%} ({CARRIED_ERROR_WHY})"
    if batching is None:
        return (
            f"not sized: no batch size on {sized.gpu_type} meets the SLO (see the risks). "
            f"Basis: {basis}"
        )
    gives = "gives" if calibrated else "gives at most"
    limits = (
        f"dynamic batching with max batch {batching.max_batch} and max queue delay "
        f"{number(batching.max_queue_delay_ms)} ms {gives} "
        f"{number(batching.samples_per_s_per_gpu)} samples/s per GPU (p99 bound "
        f"{number(batching.p99_bound_ms)} ms)"
    )
    fleet = sized.fleet
    if fleet is None:
        return f"{limits}; GPU count not computed: the profile states no peak rate. Basis: {basis}"
    count = f"{fleet.gpus} × {sized.gpu_type}"
    if sized.gpus_range and sized.gpus_range[0] != sized.gpus_range[1]:
        count += f" ({sized.gpus_range[0]}–{sized.gpus_range[1]} within the model's error)"
    cost = (
        f", about ${fleet.usd_per_month:,.0f} a month"
        if fleet.usd_per_month is not None
        else ", cost not known (no price)"
    )
    return (
        f"{count} for {number(fleet.peak_samples_per_s)} samples/s "
        f"({sized.samples_per_request} per request, +{fleet.headroom_fraction:.0%} headroom)"
        f"{cost}; {limits}. Basis: {basis}"
    )


def feasibility_risk(sized: ForwardSizing) -> str | None:
    """A page-1 risk when the SLO is out of reach at the stated load, or within the model's
    error of it; None when it holds with room."""
    verdict = sized.feasibility
    if verdict is None or (verdict.feasible and not verdict.within_error):
        return None
    batches = (
        f"{verdict.in_flight} batches of {verdict.batch} in flight"
        if verdict.in_flight > 1
        else f"one batch of {verdict.batch}"
    )
    load = (
        f"{batches} on one {sized.gpu_type} need {number(verdict.model_ms)} ms (floor "
        f"{number(verdict.floor_ms)} ms)"
    )
    if not verdict.feasible:
        head = (
            f"The {number(verdict.slo_ms)} ms SLO cannot hold at the stated load: {load}, "
            f"{number(verdict.model_ms / verdict.slo_ms)}x the SLO"
        )
        if verdict.ratio_to_floor < 1:
            head += "; the SLO is below the physical floor itself"
    else:
        head = f"The {number(verdict.slo_ms)} ms SLO holds only within the model's error: {load}"
    return head + ". Would make it feasible: " + "; ".join(verdict.remedies)
