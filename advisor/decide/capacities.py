"""Every candidate configuration's capacity for a stage's peak (measured capacity searches, one
per configuration) and the stage's answer in one sentence with its GPUs and cost."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from advisor.decide.capacity_words import UNSETTLED_NOTE, settled
from advisor.decide.models import CandidateCapacity, Recommendation
from advisor.evidence.rows import (
    capacity_runs_for,
    dtype_stand_in,
)
from advisor.sizing.capacity import Capacity, EstimatedCapacity, fleet_for_stage
from advisor.sizing.speed_class import speed_class_pairs
from advisor.workload.profile import StageProfile
from bench.core.errors import UserError
from bench.core.metric_catalog import REQUEST_SLO_BOUNDS
from bench.core.schema import RunResult

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------- capacity


NO_PEAK_NOTE = (
    "the profile gives no peak traffic (peak_request_rate_rps, or request_rate_rps): the GPU "
    "count and the cost are not computed"
)


NO_NVIDIA_GPU = ("cpu_only", "non_nvidia_hardware", "edge")
"""Constraints under which a stage runs without an NVIDIA GPU (data/decision_tree.yaml's
hardware_constraint question reads the same names)."""


def _capacity_order(capacity: Capacity) -> tuple:
    """Settled searches first, then fewest GPUs for the peak, then the highest capacity."""
    return (not capacity.converged, capacity.gpus_needed, -capacity.max_rate_rps)


def stage_capacities(
    stage: StageProfile,
    runs: Sequence[RunResult],
    published_ids: set[str],
    estimates: Sequence[tuple[str, EstimatedCapacity]] = (),
    files: Mapping[str, str] | None = None,
) -> tuple[list[CandidateCapacity], list[str]]:
    """Every candidate configuration's capacity for the stage's peak: the capacity searches
    about this stage (`capacity_runs_for`) on the stage's GPU type, measured first, fewest
    GPUs first; then the (framework, estimate) pairs given, labelled `estimate`. Notes say what
    is missing (peak, price) and which searches were left out, and why."""
    pairs = speed_class_pairs(runs, files)
    kept, notes = capacity_runs_for(stage, runs, files, pairs)
    peak = stage.peak_request_rate_rps or stage.request_rate_rps
    if peak is None:
        return [], [NO_PEAK_NOTE, *notes] if (kept or estimates) else notes
    try:
        sizing = fleet_for_stage(stage, kept, [estimate for _, estimate in estimates])
    except UserError as exc:
        return [], [str(exc), *notes]
    by_id = {run.run_id: run for run in kept}

    def dtype_note(run_id: str | None) -> str | None:
        run = by_id.get(run_id or "")
        if run is None or run.config.precision.dtype == stage.precision.run_precision().dtype:
            return None
        pair = dtype_stand_in(run, stage, pairs)
        return (
            f"measured at {run.config.precision.dtype}, the stage asks {stage.precision.dtype}: "
            + pair.sentence()
            if pair is not None
            else None
        )

    measured = [
        CandidateCapacity(
            framework=by_id[c.run_id].config.framework if c.run_id in by_id else "?",
            capacity=c.model_copy(
                update={
                    "reference": (files or {}).get(c.run_id or ""),
                    "dtype_note": dtype_note(c.run_id),
                }
            ),
            provenance="published" if c.run_id in published_ids else "yours",
        )
        for c in sizing.measured
    ]
    measured, superseded = _one_per_configuration(measured, by_id)
    notes += superseded
    measured.sort(key=lambda c: _capacity_order(c.capacity))
    estimated = [
        CandidateCapacity(framework=framework, capacity=c, provenance="estimate")
        for (framework, _), c in zip(estimates, sizing.estimates, strict=True)
    ]
    notes += sizing.notes
    for candidate in measured + estimated:
        for note in candidate.capacity.notes:
            if note.startswith("no GPU price") and note not in notes:
                notes.append(note + " (set gpu.price_per_hour in the profile)")
    return measured + estimated, notes


def _one_per_configuration(
    measured: list[CandidateCapacity], runs: Mapping[str, RunResult]
) -> tuple[list[CandidateCapacity], list[str]]:
    """One search per configuration (framework, precision, layout) and provenance; the others
    are named in a note, not used. A search with settled probes beats one without, and among
    settled ones the newest stands (a later search, e.g. with the boundary-confirming rule,
    supersedes it). Searches judged from an empty engine overstate the capacity by chance (a
    500-request probe ends before the queue of a rate the engine cannot hold has grown), so
    where only such searches exist the lowest stands, marked as an upper bound."""
    chosen: dict[tuple, CandidateCapacity] = {}

    def key(candidate: CandidateCapacity) -> tuple:
        return (candidate.framework, candidate.capacity.label, candidate.provenance)

    def run_of(candidate: CandidateCapacity) -> RunResult | None:
        return runs.get(candidate.capacity.run_id or "")

    def rank(candidate: CandidateCapacity) -> tuple:
        run = run_of(candidate)
        if settled(run):
            return (1, run.created_at if run is not None else "")
        return (0, -candidate.capacity.max_rate_rps)

    for candidate in measured:
        if key(candidate) not in chosen or rank(candidate) > rank(chosen[key(candidate)]):
            chosen[key(candidate)] = candidate
    notes = []
    out = []
    for candidate in measured:
        kept = chosen[key(candidate)]
        if candidate is not kept:
            why = (
                "superseded by the newer settled search"
                if settled(run_of(kept)) and settled(run_of(candidate))
                else "superseded by the settled search"
                if settled(run_of(kept))
                else "not used: of searches judged from an empty engine the lowest stands,"
            )
            notes.append(
                f"capacity run {candidate.capacity.run_id} ({candidate.capacity.label}, "
                f"{candidate.capacity.max_rate_rps:g} req/s): {why} {kept.capacity.run_id} of "
                "the same configuration"
            )
        elif run_of(candidate) is not None and not settled(run_of(candidate)):
            capacity = candidate.capacity
            notes_with = [*capacity.notes, UNSETTLED_NOTE]
            out.append(
                candidate.model_copy(
                    update={"capacity": capacity.model_copy(update={"notes": notes_with})}
                )
            )
        else:
            out.append(candidate)
    return out, notes


def slo_text(stage: StageProfile) -> str:
    """`p99 TTFT <= 300 ms, TPOT <= 50 ms` (or `no latency SLO`)."""
    slo = stage.slo
    limits = [
        f"{bound.spec.label} <= {value:g} {bound.spec.unit}"
        for bound in REQUEST_SLO_BOUNDS
        if (value := getattr(slo, bound.field)) is not None
    ]
    return f"{slo.percentile} {', '.join(limits)}" if limits else "no latency SLO"


def _money(value: float | None) -> str:
    return "cost not known (no price)" if value is None else f"about ${value:,.0f}/month"


def headline(stage: StageProfile, chosen: Recommendation) -> str:
    """The stage's answer in one sentence: the framework, and the GPU count and cost when a
    measured capacity exists ("vllm (bfloat16, TP=1): 3 x H200 for 40 req/s at p99 TTFT <= 300
    ms, about $7,000/month; pytorch would need 19"), else why the count is not known."""
    if chosen.follows == "refused":
        return f"{stage.name}: refused ({chosen.confidence.why})"
    gpu = stage.gpu.type or "the GPU"
    text = f"{stage.name}: {chosen.framework} (confidence {chosen.confidence.level})"
    peak = stage.peak_request_rate_rps or stage.request_rate_rps
    capacity = chosen.capacity
    if capacity is not None:
        label = (capacity.label or chosen.framework).split(", ", 1)
        what = f"{label[0]} ({label[1]})" if len(label) > 1 else label[0]
        count = capacity.count_words(gpu)
        text = (
            f"{stage.name}: {what}: {count} for "
            f"{capacity.peak_request_rate_rps:g} req/s at {slo_text(stage)}, "
            f"{_money(capacity.monthly_cost)} (confidence {chosen.confidence.level})"
        )
        others: dict[str, str] = {}
        for other in chosen.measured_capacities():  # fewest GPUs first: each framework's best
            if other.framework != chosen.framework and other.framework not in others:
                others[other.framework] = (
                    f"{other.framework} would need {other.capacity.gpus_needed}"
                )
        others_text = list(others.values())
        if others_text:
            text += "; " + "; ".join(others_text)
        if not capacity.converged:
            text += " (the capacity search did not converge: the count is not settled)"
        if chosen.capacity_basis:
            text += f" [{chosen.capacity_basis}]"
        if chosen.fleet is not None and chosen.fleet.alternatives:
            text += "; next: " + "; ".join(o.line(gpu) for o in chosen.fleet.alternatives)
        if chosen.fleet is not None and chosen.fleet.tie:
            text += f"; a tie: {chosen.fleet.tie}"
        return text
    if stage.gpu.type is None:
        hardware = [c.value for c in stage.constraints if c.value in NO_NVIDIA_GPU]
        if hardware:
            return text + (
                f"; served without an NVIDIA GPU ({', '.join(hardware)}): no GPU count; the "
                "advisor does not size CPU or other machines: measure a capacity search on one "
                "(python -m bench run with load.pattern capacity) and divide the peak by it"
            )
        return text + "; no GPU type in the profile: the GPU count is not known"
    if peak is None:
        if chosen.measured_capacities():
            return text + (
                "; GPU count not computed: the profile gives no peak traffic (set "
                "peak_request_rate_rps)"
            )
        return text + (
            f"; no capacity measured on {gpu} for this workload and no peak traffic in the "
            "profile (peak_request_rate_rps): the GPU count is not known"
        )
    if chosen.slo_floor is not None:  # why nothing was predicted: no load meets the SLO
        return text + f"; the SLO cannot hold on {gpu}: {chosen.slo_floor.words()}"
    # Every configuration of a forward stage left out (forward_fleet.forward_options: by its
    # SLO or by the profile's quality tolerance), each note naming its own reason.
    out = [note for note in chosen.capacity_notes if note.startswith(f"{chosen.framework}, ")]
    if stage.kind == "forward" and out:
        others = f" (and {len(out) - 1} more of {chosen.framework}'s)" if len(out) > 1 else ""
        return text + f"; no configuration is left: {out[0]}{others}"
    return text + (
        f"; no capacity measured on {gpu} for this workload and none predicted: the GPU count "
        "is not known"
    )
