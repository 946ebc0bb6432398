"""The stage's one fleet answer: measured capacity searches of the recommended framework
(yours, then shipped) beside the serving model's prediction of every other viable
configuration, the cheapest chosen (advisor/sizing/fleet.py), and the recommendation's
configuration, capacity and basis set from that one choice so that the decision line, the
fleet and the JSON never disagree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from advisor.decide.capacity_words import UNSETTLED_NOTE, settled
from advisor.sizing.calibration_fit import RecordSet
from advisor.sizing.configurations import Deployment, deployment_formats
from advisor.sizing.fleet import (
    CapacityBasis,
    FleetAnswer,
    FleetOption,
    _departures,
    _quality,
    anchor_ratio,
    anchored,
    candidate_precisions,
    choose,
    predicted_options,
)
from advisor.sizing.forward_fleet import forward_basis_words, forward_options
from advisor.sizing.serving_model import weight_scheme
from advisor.workload.profile import StageProfile
from bench.core.config import ParallelismConfig
from bench.core.schema import RunResult


def measured_option(
    stage: StageProfile,
    framework: str,
    capacity,
    provenance: str,
    run: RunResult | None,
) -> tuple[FleetOption | None, str | None]:
    """A measured capacity search as a fleet option; (None, why) when its precision is beyond
    the stage's quality tolerance."""
    if run is None:
        return None, None
    config = run.config
    quality, reason = _quality(stage, config.precision)
    label = capacity.label or framework
    if reason is not None:
        return None, f"{label}: {reason}"
    deployment = Deployment(
        framework=framework, parallelism=config.parallelism, precision=config.precision
    )
    if not settled(run):
        capacity = _upper_bound_range(capacity)
    budget = config.engine_args.get("max_num_batched_tokens")
    return (
        FleetOption(
            framework=framework,
            label=label,
            parallelism=config.parallelism,
            precision=config.precision,
            weights=deployment_formats(deployment, weight_scheme(stage, deployment)).label(),
            engine_args={"max_num_batched_tokens": budget} if isinstance(budget, int) else {},
            prefix_caching=bool(config.prefix_caching),
            capacity=capacity,
            basis=CapacityBasis(
                source="yours" if provenance == "yours" else "shipped",
                run_id=capacity.run_id,
                reference=capacity.reference,
                settled=settled(run),
            ),
            quality=quality,
            departures=_departures(stage, config.precision),
        ),
        None,
    )


def other_precision_searches(
    stage: StageProfile,
    runs: Sequence[RunResult],
    published_ids: set[str],
    files: Mapping[str, str] | None,
) -> list:
    """Measured capacity searches of the stage's workload at the other precisions the fleet
    answer weighs (FP8 weights, with and without an FP8 KV cache): each is the measured basis of
    that configuration, found by the same match rule as the stage's own (`stage_capacities` of
    the stage at that precision)."""
    from advisor.decide.capacities import stage_capacities

    found: list = []
    asked = stage.precision.run_precision()
    for precision in candidate_precisions(stage):
        if precision == asked:
            continue
        variant = stage.model_copy(
            update={
                "precision": stage.precision.model_copy(
                    update={
                        "quantization": precision.quantization,
                        "kv_cache_dtype": precision.kv_cache_dtype,
                    }
                )
            }
        )
        capacities, _ = stage_capacities(variant, runs, published_ids, files=files)
        found += [c for c in capacities if c.capacity.source == "measured"]
    return found


UNSETTLED_SHORTFALL = 0.2
"""How far below an unsettled search's rate the sustained capacity may lie: on the shipped H200
chat searches settled probes measured 20 req/s where unsettled ones found 22 and 24 (9-17% lower;
data/reference/h200_llama2-7b_capacity_settled)."""


def _upper_bound_range(capacity):
    """An unsettled search's capacity is an upper bound: its GPU count's range reaches the count
    at UNSETTLED_SHORTFALL below it (so a tie with a neighbour is said, not hidden)."""
    import math

    needed = capacity.peak_request_rate_rps * (1 + capacity.headroom_fraction)
    low_rate = capacity.max_rate_rps * (1 - UNSETTLED_SHORTFALL)
    most = max(1, math.ceil(needed / low_rate - 1e-9)) * capacity.gpus_per_replica
    return capacity.model_copy(update={"gpus_range": (capacity.gpus_needed, most)})


def _anchor_rank(option: FleetOption) -> tuple:
    """Which measured configuration anchors the predictions: yours before shipped, settled
    before unsettled (an unsettled search overstates), the profile's own precision first."""
    return (option.basis.source != "yours", not option.basis.settled, option.departures)


def stage_fleet(
    stage: StageProfile,
    framework: str,
    measured: Sequence,
    runs_by_id: Mapping[str, RunResult],
    runs: Sequence[RunResult],
    records: RecordSet | None = None,
) -> FleetAnswer:
    """Every viable configuration of `framework` for the stage's peak, the cheapest chosen.
    `measured` are CandidateCapacity rows (measured searches, one per configuration: the
    stage's own and those at the other precisions weighed, `other_precision_searches`)."""
    options: list[FleetOption] = []
    excluded: list[str] = []
    # Of two searches of one configuration, yours stands over a shipped one (your GPU, driver
    # and engine build): taken first, the other is then a duplicate.
    by_provenance = sorted(measured, key=lambda c: c.provenance != "yours")
    for candidate in by_provenance:
        if candidate.framework != framework or candidate.capacity.source != "measured":
            continue
        run = runs_by_id.get(candidate.capacity.run_id or "")
        option, reason = measured_option(
            stage, framework, candidate.capacity, candidate.provenance, run
        )
        if reason:
            excluded.append(reason)
        if option is not None and all(o.key() != option.key() for o in options):
            options.append(option)
    measured_keys = {o.key() for o in options}
    if stage.kind == "forward":
        predicted, out = forward_options(stage, framework, runs, measured_keys)
    else:
        predicted, out = predicted_options(stage, framework, runs, measured_keys, records=records)
        # A measured configuration of this workload anchors the others: the model's error on
        # it (settled searches first) scales every prediction of the same engine and GPU.
        anchor = next((o for o in sorted(options, key=_anchor_rank)), None)
        ratio = anchor_ratio(stage, framework, anchor, runs) if anchor is not None else None
        if anchor is not None and ratio is not None:
            predicted = [anchored(option, stage, ratio, anchor) for option in predicted]
    answer = choose([*options, *predicted], stage.gpu.type or "GPU")
    answer.excluded = excluded + out
    return answer


def basis_words(option: FleetOption, gpu: str) -> str:
    """Which capacity sized the fleet, in words, with its interval and error."""
    capacity = option.capacity
    unit = f"{capacity.gpus_per_replica} GPU" + ("s" if capacity.gpus_per_replica > 1 else "")
    if option.basis.measured:
        text = (
            f"sized from {option.basis.words()} of {option.label}: "
            f"{capacity.max_rate_rps:.3g} req/s per {unit} within the SLO"
        )
        if UNSETTLED_NOTE in capacity.notes:
            text += (
                "; read as an upper bound: its probes were judged from an empty engine, which "
                "can overstate a capacity; a search with settled probes would measure it "
                "(docs/capacity.md)"
            )
        if capacity.dtype_note:
            text += f"; {capacity.dtype_note}"
        return text
    if option.samples_per_request is not None:
        return forward_basis_words(option)
    text = f"predicted, not measured: {capacity.max_rate_rps:.3g} req/s per {unit}"
    if capacity.low_rate_rps is not None and capacity.high_rate_rps is not None:
        text += f" ({capacity.low_rate_rps:.3g}-{capacity.high_rate_rps:.3g} req/s"
        if capacity.gpus_range is not None and capacity.gpus_range[0] != capacity.gpus_range[1]:
            text += f", so {capacity.gpus_range[0]}-{capacity.gpus_range[1]} GPUs"
        text += ")"
    text += f" for {option.label}, {option.basis.words()}"
    return text + "; run its capacity search to measure it"


def deployed_parallelism(option: FleetOption) -> ParallelismConfig:
    """The whole fleet as one layout: the unit's TP degree, replicas for the peak."""
    unit = option.parallelism
    return ParallelismConfig(
        tensor_parallel_size=unit.tensor_parallel_size,
        replicas=option.capacity.replicas_needed * unit.replicas,
    )


__all__ = ["basis_words", "deployed_parallelism", "measured_option", "stage_fleet"]
