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
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from advisor.decide.capacity_words import UNSETTLED_NOTE, settled
from advisor.decide.diagnose import Diagnostic, diagnose
from advisor.decide.fleet_answer import basis_words, deployed_parallelism, stage_fleet
from advisor.decide.learned import LearnedOpinion, learned_opinion
from advisor.evidence.rows import (
    EvidenceRow,
    _phase_at_stage_concurrency,
    capacity_runs_for,
    dtype_stand_in,
    rank_rows,
    stage_evidence,
)
from advisor.plan.stage_plan import ENGINE_START_S, bench_plan
from advisor.plan.tree import Decision, DecisionTree, evaluate, load_tree, what_would_change
from advisor.sizing.calibration import Calibration, calibration_from
from advisor.sizing.capacity import Capacity, EstimatedCapacity, fleet_for_stage
from advisor.sizing.configurations import (
    ConfigurationSearch,
    Deployment,
    DeploymentFigures,
    RecommendedDeployment,
    search_configurations,
)
from advisor.sizing.estimate import Estimate, estimate_stage
from advisor.sizing.fleet import FleetAnswer, FleetOption
from advisor.sizing.measured import ReferenceFiles, read_reference_folder, stored_runs
from advisor.sizing.serving_model import CapacityPrediction, predict_stage_capacity
from advisor.sizing.speed_class import speed_class_pairs
from advisor.workload.profile import Objective, StageProfile, WorkloadProfile
from advisor.workload.quality import (
    fixed_precision_risk,
    profile_quality_name,
    quality_note,
    stage_quality,
)
from bench.core.config import ParallelismConfig
from bench.core.errors import UserError
from bench.core.metric_catalog import REQUEST_SLO_BOUNDS
from bench.core.schema import RequestRecord, RunResult
from bench.core.stats import PRACTICAL_THRESHOLD, CandidateVerdict, MeasuredRun, candidate_verdict
from bench.engines.backends import options_with_caching

if TYPE_CHECKING:
    from bench.engines.backends.base import Availability
    from bench.storage.store import Store

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


class Confidence(BaseModel):
    level: Literal["high", "medium", "low"]
    why: str


class CandidateCapacity(BaseModel):
    """One candidate configuration's capacity under the SLO, sized for the stage's peak."""

    framework: str
    capacity: Capacity
    provenance: Literal["yours", "published", "estimate"] = Field(
        description="Who measured the capacity search (estimate: nobody, a model's figure)."
    )


class Alternative(BaseModel):
    framework: str
    rank: int = Field(description="The tree's rank.")
    benchmarked: bool = True
    why_not_first: str
    what_would_change: list[str] = Field(default_factory=list)
    verdict: CandidateVerdict | None = Field(
        None,
        description="The recommended framework against this one: ratio, 95% interval, verdict "
        "beyond the practical threshold (None: not both measured matching the stage).",
    )
    capacity: Capacity | None = Field(
        None, description="This framework's best measured capacity on the user's GPU type."
    )


class Recommendation(BaseModel):
    framework: str
    benchmarked: bool = Field(description="False for frameworks the bench cannot run (jax).")
    follows: Literal["tree", "measurements", "refused"]
    configuration: RecommendedDeployment = Field(
        description="What to deploy: parallelism, precision, engine arguments, GPUs, and where "
        "the settings come from."
    )
    evidence: list[EvidenceRow] = Field(
        default_factory=list, description="Rows for the recommended framework."
    )
    confidence: Confidence
    caveats: list[str] = Field(default_factory=list)
    alternatives: list[Alternative] = Field(default_factory=list)
    contradictions: list[str] = Field(
        default_factory=list, description="Where evidence disagrees with the tree, and who won."
    )
    unmeasured: list[str] = Field(
        default_factory=list,
        description="Candidates with no evidence because their engine cannot run here (not "
        "installed): a gap in the evidence, not a disagreement with the tree.",
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
    threshold: float = Field(
        PRACTICAL_THRESHOLD, description="Practical threshold of the verdicts (0.05 = 5%)."
    )
    verdicts: list[CandidateVerdict] = Field(
        default_factory=list,
        description="The recommended framework against each measured alternative.",
    )
    ranking_note: str | None = Field(
        None,
        description="How the candidates the evidence cannot separate were ordered (cost, then "
        "simplicity, then build time), in words.",
    )
    capacity: Capacity | None = Field(
        None,
        description="What sizes the fleet: the recommended framework's best measured capacity "
        "on the user's GPU type (the user's search, else a published one), else its predicted "
        "capacity (source 'estimate', with its interval); None: neither (see capacity_notes).",
    )
    capacity_basis: str = Field(
        "", description="Which capacity sized the fleet and where it comes from, in words."
    )
    capacities: list[CandidateCapacity] = Field(
        default_factory=list,
        description="Every candidate configuration's capacity: measured first (fewest GPUs "
        "first), then estimates, labelled.",
    )
    capacity_notes: list[str] = Field(
        default_factory=list,
        description="What is missing for a GPU count or a cost, and capacity runs left out.",
    )
    headline: str = Field("", description="The stage's answer in one sentence, with GPUs and $.")
    fleet: FleetAnswer | None = Field(
        None,
        description="The one fleet answer: the chosen configuration for the peak (what "
        "`configuration`, `capacity` and the headline say), the next two, and a tie.",
    )

    @property
    def basis(self) -> str:
        return BASIS_WORDS[self.settled_by]

    def measured_capacities(self) -> list[CandidateCapacity]:
        return [c for c in self.capacities if c.capacity.source == "measured"]

    def estimated_capacities(self) -> list[CandidateCapacity]:
        return [c for c in self.capacities if c.capacity.source == "estimate"]


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
        from bench.engines.backends import all_availability

        return {
            a.name: "available" if a.available else (a.reason or "not available")
            for a in (all_availability() if backends is None else backends)
        }
    except Exception as exc:  # an adapter crashing must not take the advisor down
        return {"_error": f"backend availability could not be read: {exc}"}


@lru_cache(maxsize=16)
def shipped_records(folder: str) -> dict[str, list[RequestRecord]]:
    """Measured records by run id from the campaign archives of one reference folder
    (`bench.orchestrate.compare.reference_records`: it reads every archive there, so once per
    process)."""
    from bench.orchestrate.compare import reference_records

    path = Path(folder)
    return reference_records(path) if path.is_dir() else {}


class RecordsLookup:
    """Where a run's per-request records are: given directly (tests, unsaved runs), in the
    store (`iter_records`), or in the archives beside a shipped reference file
    (`data/reference/NAME_runs.json` -> `data/reference/NAME/*.tgz`). None when nowhere: the
    verdict is then `unknown`, never a guess."""

    def __init__(
        self,
        store: Store | None = None,
        records: Mapping[str, Sequence[RequestRecord]] | None = None,
        reference: ReferenceFiles | None = None,
    ) -> None:
        self.store = store
        self.records = dict(records or {})
        self.archive_of: dict[str, str] = {}
        if reference is not None:
            for file_name, file_runs in reference.runs.items():
                folder = reference.folder / file_name.removesuffix(".json").removesuffix("_runs")
                for run in file_runs:
                    self.archive_of[run.run_id] = str(folder)
        self._read: dict[str, Sequence[RequestRecord] | None] = {}

    def __call__(self, run_id: str) -> Sequence[RequestRecord] | None:
        if run_id in self.records:
            return self.records[run_id]
        if run_id in self._read:
            return self._read[run_id]
        found: Sequence[RequestRecord] | None = None
        if run_id in self.archive_of:
            found = shipped_records(self.archive_of[run_id]).get(run_id)
        elif self.store is not None:
            try:
                found = list(self.store.iter_records(run_id)) or None
            except (UserError, KeyError, OSError):
                found = None
        self._read[run_id] = found
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
) -> Report:
    """Recommend per stage. `store` = a ResultStore (anything with list_runs()) or None; `runs`
    adds RunResults directly (tests, the web app's unsaved runs), `records` their request
    records by run id; `reference` = the reference folder already read (else `reference_dir`,
    default data/reference, is read once here); `threshold` overrides each stage's
    `practical_threshold` for the verdicts."""
    if threshold is not None and not (0 < threshold < 1):
        raise UserError(f"the practical threshold must be in (0, 1), got {threshold}")
    tree = tree or load_tree()
    availability = availability if availability is not None else availability_map()
    all_runs = stored_runs(store) + list(runs or [])
    reference = reference or read_reference_folder(reference_dir)
    every_run = all_runs + [run for file_runs in reference.runs.values() for run in file_runs]
    calibration = calibration_from(all_runs, reference.runs)
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
    elif configurations is None and stage.quality_result and not decision.refused:
        _add_fixed_precision_quality(recommendation, stage)
    if not decision.refused:
        answer = stage_fleet(stage, recommendation.framework, capacities, runs_by_id, runs)
        predicted = [
            CandidateCapacity(framework=o.framework, capacity=o.capacity, provenance="estimate")
            for o in [answer.chosen, *answer.alternatives]
            if o is not None and not o.basis.measured
        ]
        capacities = capacities + predicted
        capacity_notes += [note for note in answer.excluded if note not in capacity_notes]
        recommendation.capacities = capacities
        recommendation.capacity_notes = capacity_notes
        if answer.chosen is not None:
            recommendation.fleet = answer
            _apply_fleet(recommendation, answer.chosen, stage)
        for alternative in recommendation.alternatives:
            alternative.capacity = next(
                (
                    c.capacity
                    for c in recommendation.measured_capacities()
                    if c.framework == alternative.framework
                ),
                None,
            )
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
    )


def _apply_fleet(recommendation: Recommendation, chosen: FleetOption, stage: StageProfile) -> None:
    """The fleet answer's configuration is what the recommendation deploys: its layout over
    the fleet's GPUs, its precision and engine settings, its capacity and basis."""
    recommendation.capacity = chosen.capacity
    recommendation.capacity_basis = basis_words(chosen, stage.gpu.type or "GPU")
    configuration = recommendation.configuration
    same = (
        configuration.parallelism is not None
        and configuration.parallelism.tensor_parallel_size
        == chosen.parallelism.tensor_parallel_size
        and configuration.precision == chosen.precision
    )
    update: dict = {
        "framework": chosen.framework,
        "label": chosen.label,
        "parallelism": deployed_parallelism(chosen),
        "precision": chosen.precision,
        "engine_args": {**configuration.engine_args, **chosen.engine_args},
    }
    if not same:
        # The configuration search's figures were for another layout or precision.
        update["figures"] = None
    recommendation.configuration = configuration.model_copy(update=update)


def _add_fixed_precision_quality(recommendation: Recommendation, stage: StageProfile) -> None:
    """A stage without a configuration search (forward kind) runs at the profile's precision:
    page 1 still names the measured deltas, and a risk when that precision loses more than the
    tolerance."""
    quality = stage_quality(stage.quality_result)
    if quality is None:
        return
    recommendation.caveats.append(quality_note(quality, stage.quality_result or ""))
    name = profile_quality_name(stage.precision.dtype, stage.precision.quantization)
    risk = fixed_precision_risk(quality, name, stage.max_quality_loss_pct)
    if risk is not None:
        recommendation.caveats.append(risk)


def _add_deployment(
    recommendation: Recommendation, search: ConfigurationSearch, calibration: Calibration
) -> None:
    """Name the configuration in the recommendation: TP, replicas, precision, engine arguments,
    the trade-offs in numbers and how far the estimate can be trusted."""
    best = search.best()
    assert best is not None
    deployment = best.deployment
    prediction = best.prediction
    figures = DeploymentFigures(basis=search.recommended_basis)
    if prediction is not None:
        figures = figures.model_copy(
            update={
                "predicted_tpot_ms": round(prediction.tpot_ms, 3),
                "predicted_output_throughput_tok_s": round(prediction.output_throughput_tok_s, 1),
                "predicted_tok_s_per_gpu": round(prediction.output_throughput_tok_s_per_gpu, 1),
                "predicted_tok_s_per_user": round(prediction.tok_s_per_user, 2),
                "at_concurrency": prediction.concurrency,
            }
        )
    # The engine arguments stay the framework's own options: the search's parallelism and
    # precision are their own fields, said once.
    recommendation.configuration = recommendation.configuration.model_copy(
        update={
            "framework": deployment.framework,
            "label": best.label,
            "parallelism": deployment.parallelism,
            "precision": deployment.precision,
            "figures": figures,
            "trade_offs": list(search.trade_offs),
            "estimate_accuracy": calibration.verdict,
        }
    )
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
    if search.quality_note is not None:  # the stage measured quality: name the deltas
        recommendation.caveats.append(search.quality_note)
    elif any(e.deployment.precision.uses_fp8 for e in search.estimates[: len(search.plan)]):
        from advisor.sizing.configurations import FP8_ACCURACY_NOTE

        recommendation.caveats.append(FP8_ACCURACY_NOTE)


# --------------------------------------------------------------------------- capacity


NO_PEAK_NOTE = (
    "the profile gives no peak traffic (peak_request_rate_rps, or request_rate_rps): the GPU "
    "count and the cost are not computed"
)


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
            framework=by_id[c.run_id].config.backend if c.run_id in by_id else "?",
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


_PREDICTIONS: dict[tuple, CapacityPrediction | None] = {}
PREDICTION_CACHE_SIZE = 64


def _cached_prediction(
    stage: StageProfile, deployment: Deployment, runs: Sequence[RunResult]
) -> CapacityPrediction | None:
    """`predict_stage_capacity`, remembered per (stage, deployment, the runs by id and status):
    a prediction simulates thousands of requests (about a second), and the app and the report
    ask again for the same stage."""
    key = (
        stage.model_dump_json(),
        deployment.model_dump_json(),
        tuple(sorted((run.run_id, run.status.value) for run in runs)),
    )
    if key not in _PREDICTIONS:
        if len(_PREDICTIONS) >= PREDICTION_CACHE_SIZE:
            _PREDICTIONS.pop(next(iter(_PREDICTIONS)))
        _PREDICTIONS[key] = predict_stage_capacity(stage, deployment, runs)
    return _PREDICTIONS[key]


def _predicted_capacity(
    stage: StageProfile,
    framework: str,
    search: ConfigurationSearch | None,
    runs: Sequence[RunResult],
) -> tuple[list[tuple[str, EstimatedCapacity]], list[str]]:
    """The serving model's SLO capacity (advisor/sizing/serving_model.py) of the recommended
    configuration (the configuration search's best, else one engine on the stage's GPUs at
    its precision), calibrated on the runs of the stage's GPU type, with its interval and the
    model's expected error: what sizes the fleet when no search of it is measured."""
    best = search.best() if search is not None else None
    deployment = (
        best.deployment
        if best is not None
        else Deployment(
            framework=framework,
            parallelism=ParallelismConfig(),
            precision=stage.precision.run_precision(),
        )
    )
    prediction = _cached_prediction(stage, deployment, runs)
    if prediction is None:
        return [], []
    if not (prediction.max_rate_rps > 0 and math.isfinite(prediction.max_rate_rps)):
        return [], [
            f"{framework}, {deployment.label()}: the serving model predicts no rate within the "
            f"SLO ({prediction.binding_constraint or 'no constraint named'})"
        ]
    calibrated = (
        f"calibrated on {len(prediction.calibration_runs)} run(s) of {prediction.framework} on "
        f"{prediction.gpu}"
        if prediction.calibrated
        else f"uncalibrated: no run of {prediction.framework} on {prediction.gpu}"
    )
    return [
        (
            framework,
            EstimatedCapacity(
                label=f"{framework}, {deployment.parallelism.label()} "
                f"{deployment.precision.label()}, predicted ({calibrated})",
                max_rate_rps=prediction.max_rate_rps,
                low_rate_rps=prediction.low_rps if prediction.low_rps > 0 else None,
                high_rate_rps=prediction.high_rps if prediction.low_rps > 0 else None,
                expected_error=prediction.expected_error,
                gpus_per_replica=deployment.gpus,
                binding_constraint=prediction.binding_constraint,
                notes=list(prediction.notes),
            ),
        )
    ], []


SIZING_ORDER = ("yours", "published", "estimate")
"""What sizes the fleet, first found first: your capacity search, a shipped one, a prediction."""
CAPACITY_BASIS_WORDS = {
    "yours": "your capacity search",
    "published": "this project's published capacity search",
}


def _rate(value: float) -> str:
    return f"{value:.3g} req/s"


def sizing_basis(candidate: CandidateCapacity) -> str:
    """Which capacity sized the fleet, in words: the search (yours or published, its run and
    file) or the prediction with its interval and expected error."""
    capacity = candidate.capacity
    unit = f"{capacity.gpus_per_replica} GPU" + ("s" if capacity.gpus_per_replica > 1 else "")
    if capacity.source == "measured":
        where = f"run {capacity.run_id}" + (f", {capacity.reference}" if capacity.reference else "")
        text = (
            f"sized from {CAPACITY_BASIS_WORDS.get(candidate.provenance, 'a capacity search')} "
            f"of {capacity.label or candidate.framework} ({where}): "
            f"{_rate(capacity.max_rate_rps)} per {unit} within the SLO"
        )
        if UNSETTLED_NOTE in capacity.notes:
            text += (
                "; read as an upper bound: its probes were judged from an empty engine, which can "
                "overstate a capacity; a search with settled probes would measure it "
                "(docs/capacity.md)"
            )
        if capacity.dtype_note:
            text += f"; {capacity.dtype_note}"
        return text
    text = f"predicted, not measured: {_rate(capacity.max_rate_rps)} per {unit}"
    if capacity.low_rate_rps is not None and capacity.high_rate_rps is not None:
        text += f" ({capacity.low_rate_rps:.3g}-{capacity.high_rate_rps:.3g} req/s"
        if capacity.gpus_range is not None and capacity.gpus_range[0] != capacity.gpus_range[1]:
            text += f", so {capacity.gpus_range[0]}-{capacity.gpus_range[1]} GPUs"
        text += ")"
    text += f" from {capacity.label or candidate.framework}"
    if capacity.expected_error is not None:
        text += (
            f"; the model's median capacity error against measurement is "
            f"{capacity.expected_error:.0%} (docs/capacity-model.md)"
        )
    return text + "; run its capacity search to measure it"


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
    return text + (
        f"; no capacity measured on {gpu} for this workload and none predicted: the GPU count "
        "is not known"
    )


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
    "MEASUREMENT_RULE",
    "REFUSED",
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
    "stage_capacities",
    "verdict_text",
    "why_not_settling",
]
