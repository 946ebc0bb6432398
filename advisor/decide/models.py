"""The advisor's answer as typed models: a stage's recommendation, its alternatives, capacities
and confidence, and the whole report (what the CLI's --json prints and the report reads)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from advisor.decide.diagnose import Diagnostic
from advisor.decide.learned import LearnedOpinion
from advisor.decide.parts import PartRoute
from advisor.evidence.rows import (
    EvidenceRow,
)
from advisor.plan.tree import Decision
from advisor.sizing.calibration import Calibration
from advisor.sizing.capacity import Capacity
from advisor.sizing.configurations import ConfigurationSearch
from advisor.sizing.deployments import RecommendedDeployment
from advisor.sizing.estimate import Estimate
from advisor.sizing.fleet import FleetAnswer
from advisor.sizing.llm_feasibility import LlmFloorVerdict
from advisor.workload.profile import WorkloadProfile
from bench.core.stats import PRACTICAL_THRESHOLD, CandidateVerdict

if TYPE_CHECKING:
    pass

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
    slo_floor: LlmFloorVerdict | None = Field(
        None,
        description="An LLM stage's TTFT or TPOT limit below its floor on every engine, judged "
        "once (advisor/sizing/llm_feasibility.py): the caveat, the headline and page 1 read it.",
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
    parts: list[PartRoute] = Field(
        default_factory=list, description="Each part of a split stage, routed on its own traits."
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
