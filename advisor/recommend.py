"""From a profile to a recommendation per stage: tree, estimate, evidence, settled by a stated rule.

The rule (also in every report as `rule`):
1. The tree decides which frameworks are candidates and their order; a framework the tree left out
   is never recommended, however fast, because the tree excludes for capability reasons (control
   flow, portability, determinism). A stage whose requests exceed the model's context window is
   refused before any of this (framework `none`, the reason stated).
2. Measurements that MATCH the stage settle the order among the candidates: on the user's GPU
   type, same model and configuration, and a workload within the match rule
   (`advisor.evidence.WorkloadMatch`: same kind, prompt/output lengths within ±25%, same traffic
   shape, same precision). Your runs and this project's published runs (data/reference) both
   count, and the answer says which settled it; the best VALID run meeting every SLO on the
   user's objective wins, even over the tree's first choice; the report says so.
3. Without a matching measurement the tree's order stands and the answer says it rests on the
   tree and the estimate; nearer-but-different measurements are shown as context with their
   distance, measurements elsewhere and the article's figures are shown and, when they
   disagree, the disagreement is stated, but none of them changes the answer.
4. A candidate that is not installed here is not treated as slower: the report says it could not
   be measured and why (`bench.backends.all_availability()`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from advisor.calibration import Calibration, calibration_from
from advisor.configurations import ConfigurationSearch, search_configurations
from advisor.diagnose import Diagnostic, diagnose
from advisor.estimate import Estimate, estimate_stage
from advisor.evidence import (
    EvidenceRow,
    ReferenceFiles,
    rank_rows,
    read_reference_folder,
    stage_evidence,
    stored_runs,
)
from advisor.learned import LearnedOpinion, learned_opinion
from advisor.plan import bench_plan
from advisor.profile import StageProfile, WorkloadProfile
from advisor.tree import Decision, DecisionTree, evaluate, load_tree, what_would_change
from bench.schema import RunResult

if TYPE_CHECKING:
    from bench.backends.base import Availability

MEASUREMENT_RULE = (
    "The tree picks the candidates and their order; only measurements that match the stage "
    "(the user's GPU type, same model and configuration, prompt/output lengths within ±25%, same "
    "traffic shape and precision; VALID, meeting every SLO, ranked on the objective) reorder the "
    "candidates and win over the tree, whether they are your runs or this project's published "
    "runs; nearer-but-different measurements, measurements on other GPUs and the article's "
    "figures are shown but never change the answer."
)
HIGH_CONFIDENCE_MAX_CV = 0.10
"""Repeats varying by more than 10% (coefficient of variation) cap confidence at medium."""
MIN_MARGIN = 0.05
"""A winner less than 5% ahead of the runner-up is a close call (medium confidence at most)."""


class Confidence(BaseModel):
    level: Literal["high", "medium", "low"]
    why: str


class Alternative(BaseModel):
    framework: str
    rank: int = Field(description="The tree's rank.")
    benchmarked: bool = True
    why_not_first: str
    what_would_change: list[str] = Field(default_factory=list)


class Recommendation(BaseModel):
    framework: str
    benchmarked: bool = Field(description="False for frameworks the bench cannot run (jax).")
    follows: Literal["tree", "measurements", "refused"]
    configuration: dict[str, Any] = Field(default_factory=dict)
    evidence: list[EvidenceRow] = Field(
        default_factory=list, description="Rows for the recommended framework."
    )
    confidence: Confidence
    caveats: list[str] = Field(default_factory=list)
    alternatives: list[Alternative] = Field(default_factory=list)
    contradictions: list[str] = Field(
        default_factory=list, description="Where evidence disagrees with the tree, and who won."
    )
    availability: dict[str, str] = Field(
        default_factory=dict, description="Candidate -> 'available' or why it cannot run here."
    )
    settled_by: Literal["yours", "published", "tree", "refused"] = Field(
        "tree",
        description="What settled the answer: your runs, this project's published runs, the "
        "tree and the estimate (no matching measurement), or a refusal before any run.",
    )
    settled_by_runs: list[str] = Field(
        default_factory=list,
        description="Run ids of the matching measurements that settled the order (the report's "
        "'Runs behind this report').",
    )
    nearest: list[EvidenceRow] = Field(
        default_factory=list,
        description="Nearer-but-different measurements, shown as context with their distance.",
    )

    @property
    def basis(self) -> str:
        return BASIS_WORDS[self.settled_by]


BASIS_WORDS = {
    "yours": "settled by your runs on your GPU type, matching this workload",
    "published": "settled by this project's published runs on your GPU type (data/reference), "
    "matching this workload - not by runs of yours",
    "tree": "the decision tree's first choice and the estimate: no measurement matches this "
    "workload yet",
    "refused": "refused before any run: the workload does not fit the model",
}
"""What settled an answer, in the words the app and the CLI show (Recommendation.basis)."""


class StageRecommendation(BaseModel):
    stage: str
    kind: str
    decision: Decision
    estimate: Estimate
    recommendation: Recommendation
    evidence: list[EvidenceRow] = Field(default_factory=list, description="All rows, ranked.")
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    learned: LearnedOpinion | None = None
    configurations: ConfigurationSearch | None = Field(
        None, description="TP x replicas x precision of the chosen framework, ranked (generate)."
    )


class Report(BaseModel):
    """The advisor's answer for a whole profile, one entry per stage; the CLI's `--json` prints
    this model (`model_dump_json`), and the report builder reads it field by field."""

    title: str
    owner: str | None = None
    notes: str | None = None
    generated_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())
    rule: str = MEASUREMENT_RULE
    tree_source: str = ""
    evidence_notes: list[str] = Field(default_factory=list)
    profile: WorkloadProfile
    stages: list[StageRecommendation]
    calibration: Calibration | None = Field(
        None, description="The configuration estimate's calibration and leave-one-out error."
    )


# --------------------------------------------------------------------------- entry point


def availability_map(backends: Iterable[Availability] | None = None) -> dict[str, str]:
    """Backend name -> 'available' or the one-line reason it cannot run here (`backends`: an
    `all_availability()` answer already read, else it is read here)."""
    try:
        from bench.backends import all_availability

        return {
            a.name: "available" if a.available else (a.reason or "not available")
            for a in (all_availability() if backends is None else backends)
        }
    except Exception as exc:  # an adapter crashing must not take the advisor down
        return {"_error": f"backend availability could not be read: {exc}"}


def recommend(
    profile: WorkloadProfile,
    store: Any = None,
    reference_dir: str | Path | None = None,
    tree: DecisionTree | None = None,
    availability: dict[str, str] | None = None,
    runs: list[RunResult] | None = None,
    reference: ReferenceFiles | None = None,
) -> Report:
    """Recommend per stage. `store` = a ResultStore (anything with list_runs()) or None; `runs`
    adds RunResults directly (tests, the web app's unsaved runs); `reference` = the reference
    folder already read (else `reference_dir`, default data/reference, is read once here)."""
    tree = tree or load_tree()
    availability = availability if availability is not None else availability_map()
    all_runs = stored_runs(store) + list(runs or [])
    reference = reference or read_reference_folder(reference_dir)
    every_run = all_runs + [run for file_runs in reference.runs.values() for run in file_runs]
    calibration = calibration_from(all_runs, reference.runs)
    stage_results = [
        _recommend_stage(
            tree,
            stage,
            stage_evidence(stage, all_runs, reference),
            every_run,
            availability,
            calibration,
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
) -> StageRecommendation:
    estimate = estimate_stage(stage)
    decision = evaluate(tree, stage, estimate)
    changes = what_would_change(tree, stage, estimate, decision)
    recommendation = settle(stage, decision, rows, availability, changes)
    configurations = None
    if recommendation.benchmarked and not decision.refused:
        configurations = search_configurations(
            stage,
            recommendation.framework,
            calibration.efficiency,
            lambda deployment: calibration.measured_levels(stage, deployment),
        )
    if configurations is not None and configurations.best() is not None:
        _add_deployment(recommendation, configurations, calibration)
    runs_by_id = {run.run_id: run for run in runs}
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
    )


def _add_deployment(
    recommendation: Recommendation, search: ConfigurationSearch, calibration: Calibration
) -> None:
    """Name the configuration in the recommendation: TP, replicas, precision, engine arguments,
    the trade-offs in numbers and how far the estimate can be trusted."""
    best = search.best()
    assert best is not None
    deployment = best.deployment
    engine_args = dict(recommendation.configuration.get("engine_args") or {})
    engine_args.pop("tensor_parallel_size", None)  # said once, in parallelism
    if deployment.framework in ("vllm", "openai", "tensorrt_llm"):
        engine_args["tensor_parallel_size"] = deployment.parallelism.tensor_parallel_size
    if deployment.precision.quantization:
        engine_args["quantization"] = deployment.precision.quantization
    if deployment.precision.kv_cache_dtype != "auto":
        engine_args["kv_cache_dtype"] = deployment.precision.kv_cache_dtype
    prediction = best.prediction
    figures: dict[str, Any] = {"basis": search.recommended_basis}
    if prediction is not None:
        figures.update(
            predicted_tpot_ms=round(prediction.tpot_ms, 3),
            predicted_output_throughput_tok_s=round(prediction.output_throughput_tok_s, 1),
            predicted_tok_s_per_gpu=round(prediction.output_throughput_tok_s_per_gpu, 1),
            predicted_tok_s_per_user=round(prediction.tok_s_per_user, 2),
            at_concurrency=prediction.concurrency,
        )
    recommendation.configuration = {
        **recommendation.configuration,
        "deployment": best.label,
        "tensor_parallel_size": deployment.parallelism.tensor_parallel_size,
        "replicas": deployment.parallelism.replicas,
        "gpus": deployment.gpus,
        "precision": deployment.precision.model_dump(mode="json"),
        "engine_args": engine_args,
        "figures": figures,
        "trade_offs": search.trade_offs,
        "estimate_accuracy": calibration.verdict,
    }
    if search.recommended_basis == "estimate":
        recommendation.caveats.append(
            f"{best.label} is not measured: its figures are estimates (efficiency "
            f"{best.efficiency:.2f}, {best.efficiency_source}; "
            f"{calibration.accuracy_of(best.deployment)})"
        )
    if not best.within_gpu_budget:
        recommendation.caveats.append(
            f"{best.label} needs {deployment.gpus} GPUs, more than the profile's "
            f"{search.gpu_budget}: nothing holds the model on {search.gpu_budget} at its precision"
        )
    if any(e.deployment.precision.uses_fp8 for e in search.estimates[: len(search.plan)]):
        from advisor.configurations import FP8_ACCURACY_NOTE

        recommendation.caveats.append(FP8_ACCURACY_NOTE)


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


def nearest_evidence(rows: list[EvidenceRow], candidates: list[str]) -> list[EvidenceRow]:
    """Measurements of the candidates that do not match the stage, nearest workload first:
    context for the reader, never a reason to reorder."""
    near = [
        r
        for r in rows
        if r.framework in candidates
        and r.match is not None
        and not _settling(r, candidates)
        and r.status != "FAILED"
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
) -> Recommendation:
    """Apply the rule (module docstring) to the tree's candidates and the ranked evidence."""
    changes = changes or {}
    if decision.refused:
        return _refusal(decision)
    candidates = [c.framework for c in decision.candidates]
    by_name = {c.framework: c for c in decision.candidates}
    tree_first = candidates[0]
    gpu = stage.gpu.type or "your GPU"
    contradictions: list[str] = []
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
    if eligible:
        ordered = rank_rows(list(eligible.values()))
        winner_row = ordered[0]
        chosen = winner_row.framework
        follows: Literal["tree", "measurements"] = "measurements"
        if chosen != tree_first:
            first_row = best.get(tree_first)
            if first_row is None:
                state = f"was not measured on {gpu}" + (
                    f" ({avail[tree_first]})" if avail[tree_first] != "available" else ""
                )
            else:
                state = f"measured {_describe(first_row)}"
            contradictions.append(
                f"The tree ranks {tree_first} first, but {_where(winner_row)} {chosen} measured "
                f"{_describe(winner_row)} while {tree_first} {state}. Following the measurements "
                "(rule: measurements matching this workload on the user's GPU type win)."
            )
        confidence = _measured_confidence(winner_row, ordered[1:] if len(ordered) > 1 else [])
        # The winner's provenance names what settled it (a published run can only be a
        # fingerprinted measurement of data/reference: the article's figures never settle).
        settled_by: Literal["yours", "published", "tree", "refused"] = (
            "published"
            if winner_row.provenance is not None and winner_row.provenance.kind == "published"
            else "yours"
        )
        settled_runs = [run_id for row in ordered for run_id in row.run_ids]
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
            contradictions.append(
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
        alternatives.append(
            Alternative(
                framework=candidate.framework,
                rank=candidate.rank,
                benchmarked=candidate.benchmarked,
                why_not_first=why,
                what_would_change=would_change,
            )
        )
    chosen_candidate = by_name[chosen]
    caveats = list(chosen_candidate.caveats) + list(decision.caveats)
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
        availability=avail,
        settled_by=settled_by,
        settled_by_runs=settled_runs,
        nearest=[] if eligible else nearest_evidence(rows, candidates),
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
        configuration={"source": f"refused: {reason}"},
        confidence=Confidence(
            level="high",
            why=f"refused before any run: {reason} (a limit of the model, not a measurement)",
        ),
        caveats=[f"Refused: {reason}", *decision.caveats],
        settled_by="refused",
    )


def _measured_confidence(winner: EvidenceRow, others: list[EvidenceRow]) -> Confidence:
    reasons: list[str] = []
    level: Literal["high", "medium", "low"] = "high"
    if winner.closeness.same_shape is not True:
        level = "medium"
        reasons.append("measured at a different workload shape than the profile's")
    if winner.repeats < 2:
        level = "medium"
        reasons.append("a single run (no repeats)")
    elif winner.objective_cv is not None and winner.objective_cv > HIGH_CONFIDENCE_MAX_CV:
        level = "medium"
        reasons.append(f"repeats vary by {winner.objective_cv:.0%} (CV)")
    if others and winner.objective_value and others[0].objective_value:
        a, b = winner.objective_value, others[0].objective_value
        margin = abs(a - b) / max(abs(b), 1e-12)
        if margin < MIN_MARGIN:
            level = "medium"
            reasons.append(f"only {margin:.1%} ahead of {others[0].framework}")
    elif not others:
        reasons.append("no other candidate measured eligibly on this GPU")
        level = "medium"
    basis = (
        f"settled by measurements matching this workload {_where(winner)}: "
        f"{winner.repeats} run(s), {winner.objective_metric} {winner.objective_value:.4g}"
    )
    return Confidence(level=level, why=basis + ("; " + "; ".join(reasons) if reasons else ""))


def _nearest_text(stage: StageProfile, rows: list[EvidenceRow], candidates: list[str]) -> str:
    near = nearest_evidence(rows, candidates)
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
) -> dict[str, Any]:
    """What to deploy: the measured configuration when there is one, else the plan's settings."""
    if measured is not None:
        return {
            "source": f"measured run(s) {', '.join(measured.run_ids)}",
            "engine_args": measured.engine_args,
            "precision": measured.precision,
            "shape": measured.shape,
        }
    if stage.model is None:
        return {"source": "no model in the profile: no configuration planned"}
    plan = [c for c in bench_plan(stage, decision) if c.backend == framework]
    if not plan:
        return {"source": f"{framework} is not run by the bench: no configuration planned"}
    config = plan[0]
    return {
        "source": "benchmark plan defaults (not yet measured)",
        "engine_args": config.engine_args,
        "precision": config.precision.model_dump(mode="json"),
        "workload": config.workload.model_dump(mode="json"),
        "load": config.load.model_dump(mode="json"),
    }


__all__ = [
    "MEASUREMENT_RULE",
    "REFUSED",
    "Alternative",
    "Confidence",
    "Recommendation",
    "Report",
    "StageRecommendation",
    "availability_map",
    "nearest_evidence",
    "recommend",
    "settle",
    "why_not_settling",
]
