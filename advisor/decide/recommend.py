"""From a profile to a recommendation per stage: tree, estimate, evidence, settled by a stated rule.

The rule (also in every report as `rule`):
1. The tree decides which frameworks are candidates and their order; a framework the tree left out
   is never recommended, however fast, because the tree excludes for capability reasons (control
   flow, portability, determinism). A stage whose requests exceed the model's context window is
   refused before any of this (framework `none`, the reason stated).
2. Measurements that MATCH the stage settle the order among the candidates: on the user's GPU
   type, same model and configuration, and a workload within the match rule
   (`advisor.evidence.rows.WorkloadMatch`: same kind, prompt/output lengths within ±25%, same
   traffic shape, same precision). Your runs and this project's published runs (data/reference) both
   count, and the answer says which settled it; the best VALID run meeting every SLO on the
   user's objective wins, even over the tree's first choice; the report says so.
3. Without a matching measurement the tree's order stands and the answer says it rests on the
   tree and the estimate; nearer-but-different measurements are shown as context with their
   distance, measurements elsewhere and the article's figures are shown and, when they
   disagree, the disagreement is stated, but none of them changes the answer.
4. A candidate that is not installed here is not treated as slower: the report says it could not
   be measured and why (`bench.engines.backends.all_availability()`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from advisor.decide.capacities import NO_PEAK_NOTE, headline, slo_text, stage_capacities
from advisor.decide.capacity_words import UNSETTLED_NOTE, settled
from advisor.decide.deployment import add_deployment, add_fixed_precision_quality, apply_fleet
from advisor.decide.diagnose import Diagnostic, diagnose
from advisor.decide.fleet_answer import other_precision_searches, stage_fleet
from advisor.decide.learned import learned_opinion
from advisor.decide.models import (
    BASIS_WORDS,
    HIGH_CONFIDENCE_MAX_CV,
    MEASUREMENT_RULE,
    Alternative,
    CandidateCapacity,
    Confidence,
    Recommendation,
    Report,
    StageRecommendation,
)
from advisor.decide.parts import route_parts
from advisor.decide.records import RecordsLookup
from advisor.decide.verdicts import (
    VerdictFunction,
    _order_by_verdicts,
    verdict_function,
    verdict_text,
)
from advisor.evidence.rows import (
    EvidenceRow,
    rank_rows,
    stage_evidence,
)
from advisor.plan.stage_plan import bench_plan
from advisor.plan.tree import Decision, DecisionTree, evaluate, load_tree, what_would_change
from advisor.sizing.calibration import Calibration, StepCalibration, evidence_calibration
from advisor.sizing.calibration_fit import RecordSet
from advisor.sizing.configurations import search_configurations
from advisor.sizing.deployments import Deployment, RecommendedDeployment
from advisor.sizing.estimate import estimate_stage
from advisor.sizing.llm_feasibility import llm_floor_verdict
from advisor.sizing.measured import ReferenceFiles, read_reference_folder, stored_runs
from advisor.workload.profile import Objective, StageProfile, WorkloadProfile
from bench.core.errors import UserError
from bench.core.schema import RequestRecord, RunResult
from bench.core.stats import PRACTICAL_THRESHOLD, CandidateVerdict
from bench.engines.backends import options_with_caching

if TYPE_CHECKING:
    from bench.engines.backends.base import Availability
    from bench.storage.store import Store


# --------------------------------------------------------------------------- entry point


def availability_map(backends: Iterable[Availability] | None = None) -> dict[str, str]:
    """Backend name -> 'available' or the one-line reason it cannot run here (`backends`: an
    `all_availability()` answer already read, else it is read here)."""
    try:
        from bench.engines.backends import all_availability

        found = {
            a.name: "available" if a.available else (a.reason or "not available")
            for a in (all_availability() if backends is None else backends)
        }
    except Exception as exc:  # an adapter crashing must not take the advisor down
        return {"_error": f"backend availability could not be read: {exc}"}
    import importlib.util

    # Frameworks measured through the openai backend's launcher: installed or not.
    found["sglang"] = (
        "available"
        if importlib.util.find_spec("sglang") is not None
        else "sglang is not installed here (pip install sglang on a CUDA host); the openai "
        "backend launches `python -m sglang.launch_server` where it is"
    )
    return found


def recommend(
    profile: WorkloadProfile,
    store: Store | None = None,
    reference_dir: str | Path | None = None,
    tree: DecisionTree | None = None,
    availability: dict[str, str] | None = None,
    runs: list[RunResult] | None = None,
    reference: ReferenceFiles | None = None,
    threshold: float | None = None,
    records: Mapping[str, Sequence[RequestRecord]] | None = None,
    calibrated: tuple[Calibration, StepCalibration] | None = None,
) -> Report:
    """Recommend per stage. `store` = a ResultStore (anything with list_runs()) or None; `runs`
    adds RunResults directly (tests, the web app's unsaved runs), `records` their request
    records by run id; `reference` = the reference folder already read (else `reference_dir`,
    default data/reference, is read once here); `threshold` overrides each stage's
    `practical_threshold` for the verdicts; `calibrated` = `evidence_calibration` of the same
    store and reference, when the caller keeps one (the app: one for every session's answers
    until the store changes), else made here."""
    if threshold is not None and not (0 < threshold < 1):
        raise UserError(f"the practical threshold must be in (0, 1), got {threshold}")
    tree = tree or load_tree()
    availability = availability if availability is not None else availability_map()
    all_runs = stored_runs(store) + list(runs or [])
    reference = reference or read_reference_folder(reference_dir)
    every_run = all_runs + [run for file_runs in reference.runs.values() for run in file_runs]
    calibration, factors = calibrated or evidence_calibration(
        store, reference, reference_dir, runs=all_runs
    )
    lookup = RecordsLookup(store, records, reference)
    files = {run.run_id: name for name, file_runs in reference.runs.items() for run in file_runs}
    stage_results = [
        _recommend_stage(
            tree,
            stage,
            stage_evidence(stage, all_runs, reference),
            every_run,
            availability,
            calibration,
            factors,
            lookup=lookup,
            threshold=threshold if threshold is not None else stage.practical_threshold,
            files=files,
        )
        for stage in profile.stages
    ]
    return Report(
        title=profile.title,
        owner=profile.owner,
        notes=profile.notes,
        tree_source=tree.source,
        evidence_notes=list(reference.notes),
        profile=profile,
        stages=stage_results,
        calibration=calibration,
    )


def _recommend_stage(
    tree: DecisionTree,
    stage: StageProfile,
    rows: list[EvidenceRow],
    runs: list[RunResult],
    availability: dict[str, str],
    calibration: Calibration,
    factors: StepCalibration,
    *,
    lookup: RecordsLookup | None = None,
    threshold: float = PRACTICAL_THRESHOLD,
    files: Mapping[str, str] | None = None,
) -> StageRecommendation:
    estimate = estimate_stage(stage)
    decision = evaluate(tree, stage, estimate)
    changes = what_would_change(tree, stage, estimate, decision)
    runs_by_id = {run.run_id: run for run in runs}
    published_ids = set((lookup.archive_of if lookup is not None else {}).keys())
    capacities, capacity_notes = (
        ([], []) if decision.refused else stage_capacities(stage, runs, published_ids, files=files)
    )
    recommendation = settle(
        stage,
        decision,
        rows,
        availability,
        changes,
        compare=verdict_function(stage, runs_by_id, lookup or RecordsLookup(), threshold),
        capacities=capacities,
        threshold=threshold,
    )
    answer = None
    if not decision.refused:
        other = (
            other_precision_searches(stage, runs, published_ids, files)
            if stage.kind == "generate"
            else []
        )
        answer = stage_fleet(
            stage,
            recommendation.framework,
            [*capacities, *other],
            runs_by_id,
            runs,
            records=RecordSet(tuple(factors.yours), tuple(factors.shipped)),
        )
    configurations = None
    if recommendation.benchmarked and not decision.refused:
        # The fleet answer's configuration leads the table of layouts (one answer, not two).
        chosen = answer.chosen if answer is not None else None
        configurations = search_configurations(
            stage,
            recommendation.framework,
            factors.lookup(stage),
            lambda deployment: calibration.measured_levels(stage, deployment),
            deployed=(
                Deployment(
                    framework=chosen.framework,
                    parallelism=chosen.parallelism,
                    precision=chosen.precision,
                )
                if chosen is not None and chosen.framework == recommendation.framework
                else None
            ),
        )
    if configurations is not None and configurations.best() is not None:
        add_deployment(recommendation, configurations, calibration, stage.gpu.type)
    elif configurations is None and stage.quality_result and not decision.refused:
        add_fixed_precision_quality(recommendation, stage)
    if answer is not None:
        # The capacity tables and charts list measured searches; a prediction joins them where
        # it sized the fleet or nothing of the framework is measured (page 1 names the rest).
        measured_here = any(c.framework == recommendation.framework for c in capacities)
        predicted = [
            CandidateCapacity(framework=o.framework, capacity=o.capacity, provenance="estimate")
            for o in [answer.chosen, *answer.alternatives]
            if o is not None and not o.basis.measured and (o is answer.chosen or not measured_here)
        ]
        capacities = capacities + predicted
        capacity_notes += [note for note in answer.excluded if note not in capacity_notes]
        recommendation.capacities = capacities
        recommendation.capacity_notes = capacity_notes
        if answer.chosen is not None:
            recommendation.fleet = answer
            apply_fleet(recommendation, answer.chosen, stage)
        for alternative in recommendation.alternatives:
            alternative.capacity = next(
                (
                    c.capacity
                    for c in recommendation.measured_capacities()
                    if c.framework == alternative.framework
                ),
                None,
            )
    # Not for a refused stage: its first caveat stays its refusal.
    recommendation.slo_floor = None if decision.refused else llm_floor_verdict(stage)
    if recommendation.slo_floor is not None:
        recommendation.caveats.insert(0, recommendation.slo_floor.risk())
    recommendation.headline = headline(stage, recommendation)
    diagnostics: list[Diagnostic] = []
    candidates = {c.framework for c in decision.candidates}
    for row in rows:
        if row.source == "published" or row.framework not in candidates:
            continue
        for run_id in row.run_ids:
            if run_id in runs_by_id:
                diagnostics += diagnose(runs_by_id[run_id])
    # A refused stage has no framework to second-guess.
    learned = (
        None
        if decision.refused
        else learned_opinion(runs, stage, estimate.parameters_b, recommendation.framework)
    )
    return StageRecommendation(
        stage=stage.name,
        kind=stage.kind,
        decision=decision,
        estimate=estimate,
        recommendation=recommendation,
        evidence=rows,
        diagnostics=diagnostics,
        learned=learned,
        configurations=configurations,
        parts=[] if decision.refused else route_parts(tree, stage, estimate),
    )


# --------------------------------------------------------------------------- the rule


def _settling(row: EvidenceRow, candidates: list[str]) -> bool:
    """Whether a row may reorder the candidates: a measurement (yours or this project's
    published runs, never the article's figures) on the user's GPU type, of the same model and
    configuration, whose workload matches the stage (`WorkloadMatch`: lengths within ±25%, same
    traffic shape, same precision)."""
    return (
        row.source == "measured-here"
        and row.framework in candidates
        and row.closeness.same_model
        and row.closeness.same_configuration  # frameworks compared at one configuration
        and row.match is not None
        and row.match.matches
        and (row.provenance is None or row.provenance.kind in ("yours", "published"))
    )


def _comparable_here(rows: list[EvidenceRow], candidates: list[str]) -> list[EvidenceRow]:
    """The rows that may settle the order (`_settling`); a run at another shape never stands in
    for the stage's, however many frameworks it covers."""
    return [r for r in rows if _settling(r, candidates)]


NEAREST_SHOWN = 5
"""Nearer-but-different measurements listed with their distance when nothing matches."""


def nearest_evidence(
    rows: list[EvidenceRow], candidates: list[str], gpu_type: str | None = None
) -> list[EvidenceRow]:
    """Measurements of the candidates that do not match the stage, nearest workload first:
    context for the reader, never a reason to reorder. A CPU run (no GPU) never stands beside
    an answer for a GPU (`gpu_type` set): its figures say nothing about that GPU."""
    near = [
        r
        for r in rows
        if r.framework in candidates
        and r.match is not None
        and not _settling(r, candidates)
        and r.status != "FAILED"
        and not (gpu_type is not None and r.gpu is None)
    ]
    near.sort(
        key=lambda r: (
            not r.closeness.same_model,
            r.source != "measured-here",
            r.match.distance if r.match else 0,
        )
    )
    return near[:NEAREST_SHOWN]


def why_not_settling(row: EvidenceRow, stage: StageProfile) -> str:
    """Why a row is context and not a settling measurement, in words, with its distance."""
    reasons: list[str] = []
    if row.provenance is not None and row.provenance.kind == "article":
        reasons.append("the article's figures (workload not stated)")
    if row.source != "measured-here":
        where = row.gpu or "the CPU"
        if stage.gpu.type:
            reasons.append(f"measured on {where}, not {stage.gpu.type}")
        else:
            reasons.append(f"measured on {where}; the profile names no GPU type")
    if not row.closeness.same_model:
        reasons.append(f"another model ({row.model})")
    if not row.closeness.same_configuration:
        parallelism = row.parallelism.label() if row.parallelism is not None else "?"
        reasons.append(f"another configuration ({parallelism}, {row.precision})")
    if row.match is not None and not row.match.matches:
        reasons.append(row.match.summary)
    return "; ".join(reasons) or "not eligible"


def _where(row: EvidenceRow) -> str:
    """`on H200, your runs` / `on H200, this project's published run (file, host, date)`."""
    device = row.gpu or "the CPU"
    words = row.provenance.words if row.provenance is not None else "a stored run"
    return f"on {device}, {words}"


def _best_per_framework(rows: list[EvidenceRow]) -> dict[str, EvidenceRow]:
    best: dict[str, EvidenceRow] = {}
    for row in rank_rows(rows):  # ranked: the first row per framework is its best
        best.setdefault(row.framework, row)
    return best


def _describe(row: EvidenceRow) -> str:
    value = row.objective_value
    number = f"{row.objective_metric} {value:.4g}" if value is not None else "no objective value"
    if row.status == "FAILED":
        return f"FAILED ({row.failure or 'no cause recorded'})"
    if row.valid is False:
        return f"{row.status} ({number})"
    if row.meets_slo is False:
        return f"{number}, misses the SLOs: {'; '.join(row.slo_failures)}"
    runs = f", {row.repeats} run{'s' if row.repeats != 1 else ''}"
    return f"{number}{runs}"


def settle(
    stage: StageProfile,
    decision: Decision,
    rows: list[EvidenceRow],
    availability: dict[str, str],
    changes: dict[str, list[str]] | None = None,
    *,
    compare: VerdictFunction | None = None,
    capacities: Sequence[CandidateCapacity] = (),
    threshold: float = PRACTICAL_THRESHOLD,
) -> Recommendation:
    """Apply the rule (module docstring) to the tree's candidates and the ranked evidence.

    `compare` gives the leader's verdict against each alternative (ratio with its interval):
    candidates it cannot separate from the leader are re-ranked on cost, simplicity, build
    time (`_order_by_verdicts`). `capacities` (measured ones, fewest GPUs first) rank the
    candidates for the objective minimize_cost_per_token, measured first."""
    changes = changes or {}
    verdicts: list[CandidateVerdict] = []
    ranking_note: str | None = None
    if decision.refused:
        return _refusal(decision)
    candidates = [c.framework for c in decision.candidates]
    by_name = {c.framework: c for c in decision.candidates}
    tree_first = candidates[0]
    gpu = stage.gpu.type or "your GPU"
    contradictions: list[str] = []
    unmeasured: list[str] = []
    pool = _comparable_here(rows, candidates)
    best = _best_per_framework(pool)
    eligible = {
        name: row for name, row in best.items() if row.eligible and row.objective_value is not None
    }

    def candidate_availability(name: str) -> str:
        if not by_name[name].benchmarked:
            return "not benchmarked by this tool"
        return availability.get(name, "no adapter for it in this installation")

    avail = {name: candidate_availability(name) for name in candidates}
    cost_ranked = stage.objective == Objective.MINIMIZE_COST_PER_TOKEN and any(
        c.capacity.source == "measured" and c.framework in candidates for c in capacities
    )
    measured_gpus: dict[str, int] = {}
    for candidate_capacity in capacities:
        if candidate_capacity.capacity.source == "measured":
            measured_gpus.setdefault(
                candidate_capacity.framework, candidate_capacity.capacity.gpus_needed
            )
    if eligible:
        ordered = rank_rows(list(eligible.values()))
        if cost_ranked:
            # The objective is the cost of serving the peak: the measured fleet size ranks
            # first (fewest GPUs), candidates without a measured capacity after them.
            ordered.sort(key=lambda row: measured_gpus.get(row.framework, math.inf))
            ranking_note = (
                "ranked on the measured capacity (fewest GPUs for the peak within the SLO, "
                "measured capacities first), the objective being the cost per token"
            )
        else:
            ordered, verdicts, ranking_note = _order_by_verdicts(ordered, compare, capacities)
        if cost_ranked and compare is not None:
            verdicts = [v for v in (compare(ordered[0], row) for row in ordered[1:]) if v]
        winner_row = ordered[0]
        chosen = winner_row.framework
        follows: Literal["tree", "measurements"] = "measurements"
        if chosen != tree_first:
            first_row = best.get(tree_first)
            if first_row is None and avail[tree_first] != "available":
                # No evidence because its engine cannot run here: a gap, not a disagreement.
                unmeasured.append(
                    f"The tree ranks {tree_first} first, but {tree_first} has no measurement on "
                    f"{gpu} because it cannot run in this installation ({avail[tree_first]}). "
                    f"Of the measured candidates {chosen} leads ({_where(winner_row)}: "
                    f"{_describe(winner_row)}); the answer follows those measurements (rule: "
                    "measurements matching this workload on the user's GPU type win) until "
                    f"{tree_first} is measured too."
                )
            else:
                state = (
                    f"was not measured on {gpu}"
                    if first_row is None
                    else f"measured {_describe(first_row)}"
                )
                contradictions.append(
                    f"The tree ranks {tree_first} first, but {_where(winner_row)} {chosen} "
                    f"measured {_describe(winner_row)} while {tree_first} {state}. Following the "
                    "measurements (rule: measurements matching this workload on the user's GPU "
                    "type win)."
                )
        confidence = _measured_confidence(
            winner_row,
            ordered[1:] if len(ordered) > 1 else [],
            verdicts[0] if verdicts and verdicts[0].alternative == ordered[1].framework else None,
            tie=ranking_note is not None and not cost_ranked,
        )
        # The winner's provenance names what settled it (a published run can only be a
        # fingerprinted measurement of data/reference: the article's figures never settle).
        settled_by: Literal["yours", "published", "tree", "refused"] = (
            "published"
            if winner_row.provenance is not None and winner_row.provenance.kind == "published"
            else "yours"
        )
        settled_runs = [run_id for row in ordered for run_id in row.run_ids]
    elif cost_ranked:
        # No eligible speed measurement, but a measured capacity on the user's GPU type: for
        # this objective that is the settling measurement.
        best_capacity = next(
            c for c in capacities if c.capacity.source == "measured" and c.framework in candidates
        )
        chosen = best_capacity.framework
        follows = "measurements"
        settled_by = "published" if best_capacity.provenance == "published" else "yours"
        settled_runs = [
            c.capacity.run_id for c in capacities if c.capacity.run_id and c.framework in candidates
        ]
        ranking_note = (
            "ranked on the measured capacity (fewest GPUs for the peak within the SLO), the "
            "objective being the cost per token; no throughput measurement matches this stage"
        )
        confidence = Confidence(
            level="medium",
            why=f"settled by the measured capacity of {chosen} on {gpu} "
            f"({best_capacity.capacity.gpus_needed} GPUs for the peak); "
            + (
                "other candidates have no measured capacity there"
                if len({c.framework for c in capacities if c.capacity.source == "measured"}) < 2
                else "the capacity searches carry no interval: a single search each"
            ),
        )
    else:
        chosen = tree_first
        follows = "tree"
        settled_by = "tree"
        settled_runs = []
        first_row = best.get(tree_first)
        if first_row is not None:
            contradictions.append(
                f"The tree's first choice {tree_first} was measured on {gpu} but "
                f"{_describe(first_row)}; no other candidate has an eligible measurement there, so "
                "the tree's order stands until the plan is run for the others."
            )
        if avail[tree_first] != "available" and by_name[tree_first].benchmarked:
            runnable = [n for n in candidates if avail.get(n) == "available"]
            unmeasured.append(
                f"The tree ranks {tree_first} first, but it cannot be measured here "
                f"({avail[tree_first]}); the answer follows the tree, not a measurement. "
                + (
                    f"Runnable candidates here: {', '.join(runnable)}."
                    if runnable
                    else "No candidate is runnable here."
                )
            )
        confidence = _tree_confidence(stage, tree_first, rows, candidates)
    # Evidence elsewhere that disagrees is stated, never followed.
    for source in ("measured-elsewhere", "published"):
        other = [
            r
            for r in rows
            if r.source == source
            and r.framework in candidates
            and r.eligible
            and r.objective_value is not None
            and r.closeness.same_model
        ]
        if len(other) >= 2:
            top = rank_rows(other)[0]
            if top.framework != chosen:
                where = top.gpu or "another machine"
                contradictions.append(
                    f"{source.capitalize()} evidence ({where}, {top.reference or 'stored run'}) "
                    f"puts {top.framework} ahead of {chosen}; it is not a measurement of this "
                    "workload on your GPU, so it does not change the answer."
                )
    alternatives = []
    for candidate in decision.candidates:
        if candidate.framework == chosen:
            continue
        row = best.get(candidate.framework)
        if row is not None:
            why = f"measured {_where(row)}: {_describe(row)}"
        elif candidate.rank < by_name[chosen].rank:
            why = f"the tree's rank {candidate.rank}, but not measured: {candidate.rationale}"
        else:
            why = f"the tree's rank {candidate.rank}: {candidate.rationale}"
        if avail[candidate.framework] != "available":
            why += f" [cannot run here: {avail[candidate.framework]}]"
        would_change = list(changes.get(candidate.framework, []))
        if candidate.benchmarked:
            would_change.append(
                f"a VALID measurement on {gpu} where {candidate.framework} beats {chosen} on "
                f"{stage.objective.value} within the SLOs"
            )
        verdict = next((v for v in verdicts if v.alternative == candidate.framework), None)
        if verdict is not None:
            why += f"; {verdict_text(verdict)}"
        alternatives.append(
            Alternative(
                framework=candidate.framework,
                rank=candidate.rank,
                benchmarked=candidate.benchmarked,
                why_not_first=why,
                what_would_change=would_change,
                verdict=verdict,
            )
        )
    chosen_candidate = by_name[chosen]
    caveats = list(chosen_candidate.caveats) + list(decision.caveats)
    if ranking_note:
        contradictions.append(ranking_note[0].upper() + ranking_note[1:] + ".")
    if not chosen_candidate.benchmarked:
        caveats.insert(
            0, f"{chosen} is not benchmarked by this tool; the evidence covers the others."
        )
    if stage.gpu.type is None:
        caveats.append("No GPU type in the profile: no measurement can count as measured-here.")
    return Recommendation(
        framework=chosen,
        benchmarked=chosen_candidate.benchmarked,
        follows=follows,
        configuration=_configuration(stage, decision, chosen, best.get(chosen)),
        evidence=[r for r in rows if r.framework == chosen],
        confidence=confidence,
        caveats=caveats,
        alternatives=alternatives,
        contradictions=contradictions,
        unmeasured=unmeasured,
        availability=avail,
        settled_by=settled_by,
        settled_by_runs=settled_runs,
        nearest=[] if eligible else nearest_evidence(rows, candidates, stage.gpu.type),
        threshold=threshold,
        verdicts=verdicts,
        ranking_note=ranking_note,
    )


REFUSED = "none"
"""The framework of a refused stage: no framework can serve it as asked."""


def _refusal(decision: Decision) -> Recommendation:
    """A stage nothing can serve as asked (the tree's refusing leaf): no framework, no plan,
    no configuration; the reason is a fact of the model's config, checked before any run."""
    reason = decision.refused or decision.title
    return Recommendation(
        framework=REFUSED,
        benchmarked=False,
        follows="refused",
        configuration=RecommendedDeployment(source=f"refused: {reason}"),
        confidence=Confidence(
            level="high",
            why=f"refused before any run: {reason} (a limit of the model, not a measurement)",
        ),
        caveats=[f"Refused: {reason}", *decision.caveats],
        settled_by="refused",
    )


WIDE_INTERVAL = 0.25
"""A ratio interval wider than this (high / low - 1) caps confidence at medium."""


def _measured_confidence(
    winner: EvidenceRow,
    others: list[EvidenceRow],
    verdict: CandidateVerdict | None = None,
    tie: bool = False,
) -> Confidence:
    """From the verdict against the runner-up: high only when the interval clears the
    threshold, both sides have repeats and the interval is narrow; a single run, a wide
    interval, a tie or no interval (no records) is medium, and says which."""
    reasons: list[str] = []
    level: Literal["high", "medium", "low"] = "high"
    if winner.closeness.same_shape is not True:
        level = "medium"
        reasons.append("measured at a different workload shape than the profile's")
    if not others:
        reasons.append("no other candidate measured eligibly on this GPU")
        level = "medium"
    elif verdict is not None and verdict.verdict != "unknown":
        reasons.append(verdict_text(verdict))
        if verdict.single_run:
            level = "medium"
            reasons.append(
                "single run: the interval is within-run only and leaves out run-to-run spread"
            )
        if verdict.indistinguishable or tie:
            level = "medium"
            reasons.append(
                f"{verdict.leader} and {verdict.alternative} are indistinguishable on this "
                "evidence (ranked on the next criterion)"
            )
        elif verdict.verdict != "faster":
            level = "medium"
        if verdict.interval is not None and verdict.interval.low > 0:
            width = verdict.interval.high / verdict.interval.low - 1
            if width > WIDE_INTERVAL:
                level = "medium"
                reasons.append(f"the interval is wide ({width:.0%})")
        if winner.objective_cv is not None and winner.objective_cv > HIGH_CONFIDENCE_MAX_CV:
            level = "medium"
            reasons.append(f"repeats vary by {winner.objective_cv:.0%} (CV)")
    else:
        # No interval (records not at hand): the margin alone cannot make it high.
        level = "medium"
        reasons.append("no interval (no per-request records to resample)")
        if winner.repeats < 2:
            reasons.append("single run")
        if winner.objective_value and others[0].objective_value:
            a, b = winner.objective_value, others[0].objective_value
            margin = abs(a - b) / max(abs(b), 1e-12)
            reasons.append(f"{margin:.1%} ahead of {others[0].framework} on the point figures")
    basis = (
        f"settled by measurements matching this workload {_where(winner)}: "
        f"{winner.repeats} run(s), {winner.objective_metric} {winner.objective_value:.4g}"
    )
    return Confidence(level=level, why=basis + ("; " + "; ".join(reasons) if reasons else ""))


def _nearest_text(stage: StageProfile, rows: list[EvidenceRow], candidates: list[str]) -> str:
    near = nearest_evidence(rows, candidates, stage.gpu.type)
    if not near:
        return "no measurement of the candidates at all"
    row = near[0]
    return f"nearest: {row.framework} on {row.model}, {why_not_settling(row, stage)}"


def _tree_confidence(
    stage: StageProfile, first: str, rows: list[EvidenceRow], candidates: list[str]
) -> Confidence:
    support = [
        r
        for r in rows
        if r.source == "measured-elsewhere"
        and r.closeness.same_model
        and r.match is not None
        and r.match.matches
        and r.eligible
        and r.framework in candidates
        and r.objective_value is not None
    ]
    if len({r.framework for r in support}) >= 2 and rank_rows(support)[0].framework == first:
        return Confidence(
            level="medium",
            why="rests on the decision tree and the estimate; measurements matching this "
            "workload on another device agree with it, but none is on the profile's GPU type "
            "(run the benchmark plan)",
        )
    return Confidence(
        level="low",
        why="rests on the decision tree and the estimate: no measurement matching this workload "
        "(prompt/output within ±25%, same traffic shape and precision) on the profile's GPU "
        f"type; {_nearest_text(stage, rows, candidates)} (run `python -m advisor bench-plan` "
        "and the bench to settle it)",
    )


def _configuration(
    stage: StageProfile, decision: Decision, framework: str, measured: EvidenceRow | None
) -> RecommendedDeployment:
    """What to deploy: the measured configuration when there is one, else the plan's settings."""
    if measured is not None:
        return RecommendedDeployment(
            source=f"measured run(s) {', '.join(measured.run_ids)}",
            framework=framework,
            engine_args=measured.engine_args,
            precision=measured.run_precision,
            shape=measured.shape,
        )
    if stage.model is None:
        return RecommendedDeployment(source="no model in the profile: no configuration planned")
    plan = [c for c in bench_plan(stage, decision) if c.backend == framework]
    if not plan:
        return RecommendedDeployment(
            source=f"{framework} is not run by the bench: no configuration planned"
        )
    config = plan[0]
    return RecommendedDeployment(
        source="benchmark plan defaults (not yet measured)",
        framework=framework,
        engine_args=options_with_caching(config),
        precision=config.precision,
        workload=config.workload,
        load=config.load,
    )


__all__ = [
    "BASIS_WORDS",
    "MEASUREMENT_RULE",
    "NO_PEAK_NOTE",
    "REFUSED",
    "UNSETTLED_NOTE",
    "Alternative",
    "CandidateCapacity",
    "Confidence",
    "Recommendation",
    "RecordsLookup",
    "Report",
    "StageRecommendation",
    "availability_map",
    "headline",
    "nearest_evidence",
    "recommend",
    "settle",
    "settled",
    "slo_text",
    "stage_capacities",
    "verdict_text",
    "why_not_settling",
]
