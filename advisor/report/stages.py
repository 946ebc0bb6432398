"""Each stage of the advisor's answer as the report shows it: the choice and its rationale, the
tree's path, alternatives, and the table of verdicts against the measured alternatives."""

from __future__ import annotations

from collections.abc import Iterable

from advisor.decide.learned import LearnedOpinion
from advisor.decide.recommend import StageRecommendation, verdict_text
from advisor.report.configurations import configurations_table
from advisor.report.decision import deploy_rows
from advisor.report.display import repo_relative
from advisor.report.model import Alternative, DecisionStep, ReferenceTable, StageReport


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(repo_relative(item) for item in items if item))


def _second_opinion(learned: LearnedOpinion | None) -> str | None:
    if learned is None:
        return None
    if not learned.shown:  # not better than guessing: its one line, nothing else
        return learned.message
    parts = [learned.message.rstrip(". ")]
    if learned.prediction:
        parts.append(f"its pick: {learned.prediction}")
    if learned.cv_accuracy is not None:
        parts.append(f"cross-validated accuracy {learned.cv_accuracy:.0%}")
    if learned.runs:
        parts.append(f"{learned.runs} runs behind it")
    return "; ".join(part for part in parts if part) or None


FOLLOWS_TEXT = {
    "measurements": "Decided by measurements matching this workload on the profile's GPU type "
    "(they win over the tree).",
    "tree": "Decided by the decision tree and the estimate: no measurement matches this workload.",
    "refused": "Refused before any run: the workload does not fit the model.",
}
SETTLED_BY_TEXT = {
    "yours": "Settled by your runs (this store).",
    "published": "Settled by this project's published runs (data/reference), not by runs of yours.",
    "tree": "",
    "refused": "",
}


def stage_report(stage: StageRecommendation, gpu_type: str | None = None) -> StageReport:
    """One stage of the advisor's answer as the report shows it."""
    chosen = stage.recommendation
    deploy, deploy_notes = (
        ([], [])
        if chosen.follows == "refused"
        else deploy_rows(chosen.framework, chosen.configuration, gpu_type, stage.kind == "forward")
    )
    decision = stage.decision
    rationale = [FOLLOWS_TEXT[chosen.follows], SETTLED_BY_TEXT[chosen.settled_by]]
    rationale = [text for text in rationale if text]
    rationale += [c.rationale for c in decision.candidates if c.framework == chosen.framework]
    rationale += chosen.contradictions
    rationale += chosen.unmeasured  # no evidence because the engine cannot run here
    rationale.append(f"Confidence {chosen.confidence.level}: {chosen.confidence.why}")
    would_change = [
        f"{alternative.framework}: {condition}"
        for alternative in chosen.alternatives
        for condition in alternative.what_would_change
    ]
    return StageReport(
        name=stage.stage,
        kind=stage.kind,
        framework=chosen.framework,
        configuration=chosen.configuration,
        confidence=chosen.confidence.level,
        rationale=_unique(rationale),
        path=[DecisionStep(question=s.question, answer=s.answer, why=s.why) for s in decision.path],
        candidates=[candidate.framework for candidate in decision.candidates],
        alternatives=[
            Alternative(
                framework=alternative.framework, reason=repo_relative(alternative.why_not_first)
            )
            for alternative in chosen.alternatives
        ],
        what_would_change=_unique(would_change),
        caveats=_unique(chosen.caveats),
        configurations=configurations_table(stage.configurations),
        second_opinion=_second_opinion(stage.learned),
        headline=chosen.headline,
        verdicts=verdicts_table(stage),
        ranking_note=chosen.ranking_note,
        deploy=deploy,
        deploy_notes=deploy_notes,
    )


def verdicts_table(stage: StageRecommendation) -> ReferenceTable | None:
    """The recommended framework against each measured alternative: ratio ± interval."""
    chosen = stage.recommendation
    if not chosen.verdicts:
        return None
    return ReferenceTable(
        title=f"{chosen.framework} against the alternatives",
        source="bench.core.stats.candidate_verdict on the runs' request records",
        conditions=f"practical threshold {chosen.threshold:.0%}, 95% bootstrap intervals",
        note="A is better only when the whole interval of the ratio clears the threshold; "
        "'single run' intervals are within-run only and leave out run-to-run spread.",
        keys=["alternative", "metric", "ratio", "interval", "verdict", "repeats"],
        columns=["Alternative", "Metric", "Ratio", "95% interval", "Verdict", "Repeats"],
        rows=[
            [
                v.alternative,
                v.metric,
                None if v.ratio is None else round(v.ratio, 3),
                "no records: no interval"
                if v.interval is None
                else f"{v.interval.low:.3f} – {v.interval.high:.3f}",
                v.verdict,
                "single run" if v.single_run else f"{v.leader_repeats} vs {v.alternative_repeats}",
            ]
            for v in chosen.verdicts
        ],
        caveats=[verdict_text(v) for v in chosen.verdicts],
    )
