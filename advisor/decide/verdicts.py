"""Verdicts between candidates: the recommended framework against each measured alternative
(ratio, interval, beyond the practical threshold), and the order where evidence cannot separate
them (cost, simplicity, build time)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from advisor.decide.models import CandidateCapacity
from advisor.decide.records import RecordsLookup
from advisor.evidence.rows import (
    EvidenceRow,
    _phase_at_stage_concurrency,
)
from advisor.plan.stage_plan import ENGINE_START_S
from advisor.workload.profile import StageProfile
from bench.core.schema import RunResult
from bench.core.stats import CandidateVerdict, MeasuredRun, candidate_verdict

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------- verdicts

SIMPLICITY_RANK = {
    "pytorch": 0,
    "vllm": 1,
    "openai": 1,
    "torch_compile": 2,
    "jax": 2,
    "onnxruntime": 3,
    "tensorrt_llm": 4,
    "tensorrt": 4,
}
"""Moving parts to operate, fewest first (the tie-break after cost): eager PyTorch serves the
checkpoint as it is; vLLM (or an OpenAI-compatible server) is one package around it;
torch.compile adds a compile per shape; ONNX Runtime an export to keep in step with the model;
TensorRT(-LLM) an engine build per GPU type and shape."""

VerdictFunction = Callable[[EvidenceRow, EvidenceRow], CandidateVerdict | None]


def verdict_metric(stage: StageProfile, row: EvidenceRow) -> str | None:
    """The bench.core.stats metric behind the objective (cost per token on one configuration is
    the inverse of throughput; a metric bench.core.stats does not resample gives None)."""
    from bench.core.stats import METRICS_BY_NAME

    metric = row.objective_metric
    if metric in ("gpu_s_per_million_tokens", "gpu_s_per_million_samples"):
        metric = "output_throughput_tok_s" if stage.kind == "generate" else "request_throughput_rps"
    return metric if metric in METRICS_BY_NAME else None


def verdict_function(
    stage: StageProfile,
    runs_by_id: Mapping[str, RunResult],
    lookup: RecordsLookup,
    threshold: float,
) -> VerdictFunction:
    """leader row, alternative row -> `bench.core.stats.candidate_verdict` on their runs (the
    ladder phase at the stage's concurrency when the evidence is that phase), cached."""
    cache: dict[tuple[str, str], CandidateVerdict | None] = {}

    def measured(row: EvidenceRow) -> list[MeasuredRun]:
        out = []
        for run_id in row.run_ids:
            run = runs_by_id.get(run_id)
            if run is None:
                continue
            phase = _phase_at_stage_concurrency(run, stage)
            out.append(MeasuredRun(run, lookup(run_id), phase.name if phase else None))
        return out

    def compare(leader: EvidenceRow, alternative: EvidenceRow) -> CandidateVerdict | None:
        key = (",".join(leader.run_ids), ",".join(alternative.run_ids))
        if key in cache:
            return cache[key]
        metric = verdict_metric(stage, leader)
        a, b = measured(leader), measured(alternative)
        verdict = None
        if metric is not None and a and b:
            try:
                verdict = candidate_verdict(
                    a, b, metric, threshold, leader.framework, alternative.framework
                )
            except ValueError:  # the metric is not in one side's summary
                verdict = None
        cache[key] = verdict
        return verdict

    return compare


def verdict_text(verdict: CandidateVerdict) -> str:
    """`vllm vs pytorch: output_throughput_tok_s ratio 1.42 (95% CI 1.38-1.47), faster beyond
    5%; single run` in words."""
    ratio = f"ratio {verdict.ratio:.3g}" if verdict.ratio is not None else "no ratio"
    interval = (
        f" (95% CI {verdict.interval.low:.3g}-{verdict.interval.high:.3g})"
        if verdict.interval is not None
        else " (no interval: no per-request records)"
    )
    words = {
        "faster": "better beyond",
        "slower": "worse beyond",
        "indistinguishable": "indistinguishable at",
        "unknown": "unknown at",
    }[verdict.verdict]
    repeats = (
        "single run"
        if verdict.single_run
        else f"{verdict.leader_repeats} vs {verdict.alternative_repeats} repeats"
    )
    return (
        f"{verdict.leader} vs {verdict.alternative} on {verdict.metric}: {ratio}{interval}, "
        f"{words} the {verdict.threshold:.0%} threshold; {repeats}"
    )


def _tie_key(framework: str, capacity_gpus: Mapping[str, int]) -> tuple[float, int, float]:
    return (
        capacity_gpus.get(framework, math.inf),
        SIMPLICITY_RANK.get(framework, 5),
        ENGINE_START_S.get(framework, 30.0),
    )


def _order_by_verdicts(
    ordered: list[EvidenceRow],
    compare: VerdictFunction | None,
    capacities: Sequence[CandidateCapacity],
) -> tuple[list[EvidenceRow], list[CandidateVerdict], str | None]:
    """The measured order, with the candidates the evidence cannot tell from the leader
    (interval within the threshold) re-ranked on cost (fewest GPUs for the peak, measured),
    then simplicity (SIMPLICITY_RANK), then build time (plan.ENGINE_START_S)."""
    if compare is None or len(ordered) < 2:
        return ordered, [], None
    leader = ordered[0]
    verdicts = [compare(leader, row) for row in ordered[1:]]
    tied = [leader] + [
        row for row, v in zip(ordered[1:], verdicts, strict=True) if v and v.indistinguishable
    ]
    if len(tied) < 2:
        return ordered, [v for v in verdicts if v is not None], None
    gpus: dict[str, int] = {}
    for candidate in capacities:
        if candidate.capacity.source == "measured":
            gpus.setdefault(candidate.framework, candidate.capacity.gpus_needed)
    ranked = sorted(tied, key=lambda row: _tie_key(row.framework, gpus))
    first, second = _tie_key(ranked[0].framework, gpus), _tie_key(ranked[1].framework, gpus)
    names = ", ".join(row.framework for row in ranked)
    if first[0] != second[0]:
        criterion = (
            f"cost: {ranked[0].framework} needs {gpus[ranked[0].framework]} GPUs for the peak, "
            f"{ranked[1].framework} "
            + (f"{gpus[ranked[1].framework]}" if ranked[1].framework in gpus else "not measured")
        )
    elif first[1] != second[1]:
        criterion = (
            "simplicity (no measured cost separates them): "
            f"{ranked[0].framework} has fewer moving parts to operate than {ranked[1].framework}"
        )
    elif first[2] != second[2]:
        criterion = (
            "build time (cost and simplicity are equal): "
            f"{ranked[0].framework} starts in about {first[2]:.0f} s, "
            f"{ranked[1].framework} in about {second[2]:.0f} s"
        )
    else:
        criterion = "nothing: equal on cost, simplicity and build time; the measured order stands"
    note = (
        f"{names} are indistinguishable on this evidence (the 95% interval of their ratio lies "
        f"within the practical threshold); ranked on {criterion}"
    )
    rest = [row for row in ordered if row not in ranked]
    ordered = ranked + rest
    if ranked[0] is not leader:
        verdicts = [compare(ranked[0], row) for row in ordered[1:]]
    return ordered, [v for v in verdicts if v is not None], note
