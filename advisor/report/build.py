"""Assemble a `Report` from the advisor's own answer, stored runs and their request records.

`build_report` is pure: it takes the advisor's pydantic objects (the `WorkloadProfile` and the
`advisor.decide.recommend.Report` that `recommend()` returned) and reads their fields by name, so a
field renamed in the advisor fails the type check and the tests instead of dropping text.
`assemble_report` loads what it needs (profile file, store, advisor, environment, reference
table) for the CLI and the app.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.decide.diagnose import Diagnostic as AdvisorDiagnostic
from advisor.decide.learned import LearnedOpinion
from advisor.decide.recommend import (
    NO_PEAK_NOTE,
    REFUSED,
    RecordsLookup,
    StageRecommendation,
    slo_text,
    verdict_text,
)
from advisor.decide.recommend import Report as AdvisorReport
from advisor.evidence.rows import SOURCE_RANK, EvidenceRow
from advisor.evidence.rows import Provenance as AdvisorProvenance
from advisor.report.aggregate import RequestColumns
from advisor.report.capacity import capacity_view, probe_table
from advisor.report.charts import derive_charts, pareto_chart, pattern_facts
from advisor.report.configurations import calibration_table, configurations_table
from advisor.report.decision import deploy_rows, reproduce_commands, stage_decision
from advisor.report.model import (
    FORWARD_REPORT_METRICS,
    REPORT_METRICS,
    Alternative,
    CapacitySection,
    Caveat,
    Chart,
    DecisionStep,
    Diagnostic,
    EnvironmentSection,
    Estimate,
    EvidenceFigures,
    FloorDistance,
    KeyValue,
    PreflightWarning,
    ReferenceTable,
    Report,
    ReportMeta,
    ReproduceEntry,
    RunEnvironment,
    RunRef,
    StageReport,
)
from advisor.report.numbers import scalar_text
from advisor.report.workload import workload_tables
from advisor.sizing import measured
from advisor.sizing.estimate import Estimate as AdvisorEstimate
from advisor.workload.gpus import find_gpu
from advisor.workload.profile import WorkloadProfile
from bench.core.errors import UserError
from bench.core.fingerprint import Fingerprint
from bench.core.metric_catalog import METRICS_BY_NAME
from bench.core.metric_catalog import metric as catalogue_metric
from bench.core.prediction import drift_words
from bench.core.schema import RequestRecord, RunResult

if TYPE_CHECKING:
    from bench.run.environment import PreflightItem
    from bench.storage.store import Store

SEED_REFERENCE_FILE = "seed_a100_llama2_13b.json"


# --------------------------------------------------------------------------- display helpers


def _text(value: Any) -> str:
    """One readable line from a scalar or list (for key/value display tables)."""
    return scalar_text(value)


def flatten(data: Any, prefix: str = "", skip_none: bool = True) -> list[KeyValue]:
    """Nested dicts/lists as `a.b[0].c = value` rows, for display tables."""
    rows: list[KeyValue] = []
    if isinstance(data, Mapping):
        for key, inner in data.items():
            rows += flatten(inner, f"{prefix}.{key}" if prefix else str(key), skip_none)
    elif isinstance(data, list) and data and any(isinstance(i, Mapping | list) for i in data):
        for index, inner in enumerate(data):
            rows += flatten(inner, f"{prefix}[{index}]", skip_none)
    elif data is None and skip_none:
        return rows
    elif data == [] or data == {}:
        rows.append(KeyValue(key=prefix or "value", value="none"))
    else:
        value = ", ".join(_text(item) for item in data) if isinstance(data, list) else _text(data)
        rows.append(KeyValue(key=prefix or "value", value=value))
    return rows


KEY_UNITS = (
    ("_ms_per_token", " (ms per token)"),
    ("_tok_s_per_sequence", " (tok/s per sequence)"),
    ("_tb_s", " (TB/s)"),
    ("_gb", " (GB)"),
    ("_ms", " (ms)"),
    ("_bytes", " (bytes)"),
    ("_pct", " (%)"),
    ("_b", " (billions)"),
)


def readable_key(key: str) -> str:
    """`context.engine_limits.vllm` -> `Context · engine limits · vllm`; `weights_gb` ->
    `Weights (GB)`: a label for a key/value table, unit in brackets."""
    parts = []
    for part in key.split("."):
        unit = ""
        for suffix, words in KEY_UNITS:
            if part.endswith(suffix) and len(part) > len(suffix):
                part, unit = part[: -len(suffix)], words
                break
        parts.append(part.replace("_", " ") + unit)
    text = " · ".join(parts)
    return text[:1].upper() + text[1:]


def readable(items: list[KeyValue]) -> list[KeyValue]:
    return [KeyValue(key=readable_key(item.key), value=item.value) for item in items]


REPO_ROOT = measured.DEFAULT_REFERENCE_DIR.resolve().parents[1]


def repo_relative(text: str) -> str:
    """Advisor text that names a file of this checkout by its absolute path, with the path
    made relative (`data/reference/h200_...json`): the report is read on other machines."""
    return text.replace(f"{REPO_ROOT}/", "")


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(repo_relative(item) for item in items if item))


# --------------------------------------------------------------------------- advisor answer


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


def _chart_id(index: int) -> str:
    return "capacity-gpus" if index == 0 else f"capacity-gpus-{index + 1}"


def capacity_sections(
    profile: WorkloadProfile, answer: AdvisorReport, runs_by_id: Mapping[str, RunResult]
) -> tuple[list[CapacitySection], list[Chart]]:
    """Per stage: the capacity table and chart from `Recommendation.capacities`, estimates
    apart, the probes of each search shown (appendix), or why there is none."""
    sections: list[CapacitySection] = []
    charts: list[Chart] = []
    profiles = {stage.name: stage for stage in profile.stages}
    for index, stage in enumerate(answer.stages):
        chosen = stage.recommendation
        stage_profile = profiles.get(stage.stage)
        if stage_profile is None or chosen.follows == "refused":
            continue
        gpu = stage_profile.gpu.type
        peak = stage_profile.peak_request_rate_rps or stage_profile.request_rate_rps
        section = CapacitySection(
            stage=stage.stage,
            gpu_type=gpu,
            peak_request_rate_rps=peak,
            headroom_fraction=stage_profile.headroom_fraction,
            slo=slo_text(stage_profile),
            notes=list(chosen.capacity_notes),
        )
        if chosen.capacities and peak is not None:
            view = capacity_view(
                chosen.capacities,
                peak,
                stage_profile.gpu.price_per_hour,
                stage_profile.headroom_fraction,
                gpu,
                chart_id=_chart_id(index),
            )
            section.table, section.estimates = view.table, view.estimates
            chart = view.chart
            if len(answer.stages) > 1:
                chart = chart.model_copy(update={"title": f"{chart.title} ({stage.stage})"})
            charts.append(chart)
            section.chart_id = chart.id
            if view.price_source:
                section.price_sources.append(view.price_source)
            section.notes += [note for note in view.notes if note not in section.notes]
        if not chosen.measured_capacities():
            if gpu is None:
                section.absent_reason = "the profile names no GPU type: no capacity can be matched"
            else:
                section.absent_reason = (
                    f"no capacity measured on {gpu} for this workload (no capacity search, "
                    "bench run --pattern capacity, of a candidate matches it): "
                    + (
                        "the GPU count below is predicted, with its interval"
                        if chosen.estimated_capacities()
                        else "the GPU count is not known"
                    )
                )
            if peak is None:
                section.absent_reason += (
                    "; the profile also gives no peak traffic (peak_request_rate_rps) to size "
                    "a fleet for"
                )
                section.notes = [n for n in section.notes if n != NO_PEAK_NOTE]
        for candidate in chosen.measured_capacities():
            run = runs_by_id.get(candidate.capacity.run_id or "")
            table = probe_table(run) if run is not None else None
            if table is not None:
                section.probes.append(table)
        sections.append(section)
    return sections, charts


ESTIMATE_NOTE_FIELDS = ("notes", "suggestions")


def estimate_section(estimate: AdvisorEstimate) -> Estimate:
    """The advisor's feasibility estimate (fit, floors, what would make it fit)."""
    shown = estimate.model_dump(mode="json", exclude=set(ESTIMATE_NOTE_FIELDS))
    return Estimate(
        available=True,
        fits=estimate.fits,
        decode_floor_ms=estimate.decode_floor_ms_per_token,
        prefill_floor_ms=estimate.prefill_floor_ms,
        items=readable(flatten(shown)),
        notes=[*estimate.notes, *estimate.suggestions],
    )


def _primary_estimate(answer: AdvisorReport) -> Estimate:
    """The first stage with a model (the one a decode floor is about), else the first stage."""
    stages = answer.stages
    if not stages:
        return Estimate(available=False, absent_reason="the advisor made no feasibility estimate")
    with_model = [stage for stage in stages if stage.estimate.model is not None]
    return estimate_section((with_model or stages)[0].estimate)


def advisor_rows(answer: AdvisorReport) -> list[EvidenceRow]:
    """Every evidence row of every stage, once."""
    rows: list[EvidenceRow] = []
    for stage in answer.stages:
        for row in [*stage.evidence, *stage.recommendation.evidence]:
            if row not in rows:
                rows.append(row)
    return rows


def advisor_sources(answer: AdvisorReport) -> dict[str, str]:
    """run_id -> measured-here / measured-elsewhere as the advisor's evidence marks them, and
    `published` for this project's shipped runs (data/reference): a run the user did not make
    is never `measured-here`, whatever GPU it ran on."""
    marks: dict[str, str] = {}
    for row in advisor_rows(answer):
        if row.source == "published":
            continue
        shipped = row.provenance is not None and row.provenance.kind == "published"
        for run_id in row.run_ids:
            marks[run_id] = "published" if shipped else row.source
    return marks


def advisor_provenances(answer: AdvisorReport) -> dict[str, AdvisorProvenance]:
    """run_id -> who measured it, as the advisor's evidence rows say (yours / published)."""
    found: dict[str, AdvisorProvenance] = {}
    for row in advisor_rows(answer):
        if row.provenance is None:
            continue
        for run_id in row.run_ids:
            found.setdefault(run_id, row.provenance)
    return found


def run_provenance(
    run: RunResult,
    cited: Mapping[str, AdvisorProvenance],
    published_files: Mapping[str, str],
) -> AdvisorProvenance:
    """The advisor's provenance of a run it cited; else a run shipped in data/reference is this
    project's published run, and any other run is yours (it came from your store)."""
    if run.run_id in cited:
        return cited[run.run_id]
    if run.run_id in published_files:
        return AdvisorProvenance(
            kind="published",
            file=published_files[run.run_id],
            host=run.environment.hostname if run.environment else None,
            date=run.created_at[:10] if run.created_at else None,
            command=run.command or None,
        )
    return AdvisorProvenance(kind="yours")


def _provenance_words(provenance: AdvisorProvenance) -> str:
    """The detail shown under the provenance label: which store, or where a published run was
    measured (file, host, date) - not the label's words again."""
    if provenance.kind == "yours":
        return "your run (this store)"
    return provenance.where or provenance.words


def run_roles(answer: AdvisorReport) -> dict[str, str]:
    """run_id -> why the report shows it: it settled an answer, is the nearest context, or is
    a capacity search the sizing reads."""
    roles: dict[str, str] = {}
    for stage in answer.stages:
        chosen = stage.recommendation
        prefix = f"{stage.stage}: " if len(answer.stages) > 1 else ""
        for run_id in chosen.settled_by_runs:
            roles.setdefault(run_id, prefix + "settled the answer")
        for row in chosen.nearest:
            for run_id in row.run_ids:
                roles.setdefault(run_id, prefix + "nearest measurement (context only)")
        for candidate in chosen.measured_capacities():
            if candidate.capacity.run_id:
                roles.setdefault(candidate.capacity.run_id, prefix + "capacity search")
    return roles


def run_stage_concurrency(answer: AdvisorReport, profile: WorkloadProfile) -> dict[str, int]:
    """run_id -> the concurrency of the stage whose answer cites the run (settled or nearest):
    the level of a ladder the report's figures come from."""
    concurrency = {stage.name: stage.concurrency for stage in profile.stages}
    found: dict[str, int] = {}
    for stage in answer.stages:
        level = concurrency.get(stage.stage)
        if level is None:
            continue
        chosen = stage.recommendation
        for run_id in [*chosen.settled_by_runs, *(i for r in chosen.nearest for i in r.run_ids)]:
            found.setdefault(run_id, level)
    return found


# --------------------------------------------------------------------------- evidence


def _run_context(run: RunResult) -> str:
    env = run.environment
    device = env.primary_gpu_name if env else None
    if run.config.device == "cpu" or not device:
        device = (env.cpu.model if env else None) or "CPU"
    shape = run.config.load.describe(measured_phases=len(run.phases))
    return f"{run.config.model} on {device}, {run.config.precision.dtype}, {shape}"


def run_source(
    run: RunResult,
    marks: Mapping[str, str],
    here: Fingerprint | None,
    profile_gpus: Iterable[str] = (),
) -> str:
    """The advisor's mark when it cited the run; otherwise its rule: measured-here when the run's
    GPU is the profile's GPU type, measured-elsewhere for another GPU or a CPU. Without a GPU type
    in the profile, a run whose fingerprint digest and host match this machine is measured-here."""
    if run.run_id in marks:
        return marks[run.run_id]
    from advisor.sizing.measured import run_gpu_name, same_gpu_type

    wanted = [gpu for gpu in profile_gpus if gpu]
    if wanted:
        run_gpu = run_gpu_name(run)
        same = any(same_gpu_type(run_gpu, gpu) for gpu in wanted)
        return "measured-here" if same else "measured-elsewhere"
    if not here or not run.environment:
        return "measured-elsewhere"
    same = run.environment.digest() == here.digest()
    same_host = run.environment.hostname == here.hostname
    return "measured-here" if same and same_host else "measured-elsewhere"


def _gpu_name(run: RunResult) -> str | None:
    from advisor.sizing.measured import run_gpu_name

    return run_gpu_name(run)


def evidence_row(
    run: RunResult,
    source: str,
    provenance: AdvisorProvenance | None = None,
    concurrency: int | None = None,
) -> EvidenceFigures:
    """The run's figures; for a ladder with a level at `concurrency` (the stage's load), that
    level's figures, as the decision cites them: a ladder's whole-run figures mix its levels."""
    from advisor.evidence.rows import phase_at_concurrency
    from advisor.sizing.measured import run_gpu_name

    phase = phase_at_concurrency(run, concurrency) if len(run.phases) > 1 else None
    summary = phase.summary if phase is not None else run.summary
    context = _run_context(run)
    if phase is not None:
        context += (
            f"; speed figures from its level at concurrency {concurrency}, memory and energy "
            "over the whole run"
        )
    telemetry = run.telemetry
    provenance = provenance or AdvisorProvenance(kind="yours")
    return EvidenceFigures(
        provenance=provenance.kind,
        provenance_words=_provenance_words(provenance),
        gpu=run_gpu_name(run),
        framework=run.config.backend,
        source=source,  # type: ignore[arg-type]
        run_id=run.run_id,
        context=context,
        level=None if phase is None else f"{float(phase.target):g}",
        kind=run.config.workload.kind,
        **{
            metric.report_field: metric.read(summary, run)
            for metric in (*REPORT_METRICS, *FORWARD_REPORT_METRICS)
        },
        gb_per_billion_params=telemetry.memory_efficiency_gb_per_b_params,
        validity=run.validity.status.value if run.validity else run.status.value,
        validity_reasons=list(run.validity.reasons) if run.validity else [],
    )


REPORT_FIELD_OF_METRIC = {metric.name: metric.report_field for metric in REPORT_METRICS}
"""The advisor's metric names (bench metric + statistic) -> the report's evidence columns."""


def published_rows(answer: AdvisorReport) -> list[EvidenceFigures]:
    """Published figures the advisor used, except the article's table (shown apart as reference)."""
    rows: list[EvidenceFigures] = []
    for row in advisor_rows(answer):
        if row.source != "published" or (row.reference or "").startswith(SEED_REFERENCE_FILE):
            continue
        values = {
            field: row.metrics[metric]
            for metric, field in REPORT_FIELD_OF_METRIC.items()
            if metric in row.metrics and math.isfinite(row.metrics[metric])
        }
        context = ", ".join(part for part in (row.model, row.gpu, row.shape, row.reference) if part)
        provenance = row.provenance or AdvisorProvenance(kind="article", file=row.reference)
        report_row = EvidenceFigures(
            framework=row.framework,
            source="published",
            context=context,
            validity="published",
            provenance=provenance.kind,
            provenance_words=_provenance_words(provenance),
            gpu=row.gpu,
            **values,
        )
        if report_row not in rows:
            rows.append(report_row)
    return rows


# --------------------------------------------------------------------------- floors


def _datasheet_bandwidth_tb_s(run: RunResult) -> tuple[float | None, str]:
    gpu_name = run.environment.primary_gpu_name if run.environment else None
    if run.config.device == "cpu" or not gpu_name:
        return None, "ran on the CPU: no GPU memory-bandwidth floor applies"
    spec = find_gpu(gpu_name)
    if spec is None:
        return None, f"memory bandwidth of {gpu_name!r} unknown (not in the GPU catalogue)"
    return spec.memory_bandwidth_tb_s, f"{spec.name} datasheet bandwidth"


def floor_distance(
    run: RunResult, estimate: Estimate, profile_models: set[str] | frozenset[str] = frozenset()
) -> FloorDistance:
    """Measured TPOT p50 vs the batch-1 decode floor (weight bytes / memory bandwidth), for a
    generate run (a forward run generates no tokens: the report leaves it out of this table)."""
    measured = catalogue_metric("tpot_ms_p50").read(run.summary)
    floor_ms: float | None = None
    note = ""
    bandwidth, why = _datasheet_bandwidth_tb_s(run)
    on_gpu = bandwidth is not None or "unknown" in why
    if bandwidth and run.model and run.model.weight_bytes:
        floor_ms = run.model.weight_bytes / (bandwidth * 1e12) * 1e3
        note = f"floor = {run.model.weight_bytes / 1e9:.3g} GB weights / {why}"
    elif on_gpu and estimate.decode_floor_ms and run.config.model in profile_models:
        # Only a GPU run of the profile's model compares with the estimate's GPU floor.
        floor_ms = estimate.decode_floor_ms
        note = f"floor from the feasibility estimate (the profile's model and GPU); {why}"
    else:
        note = why
    if measured is None:
        note = (note + "; " if note else "") + "no TPOT measured (one-token outputs or no success)"
    ratio = measured / floor_ms if measured and floor_ms else None
    return FloorDistance(
        framework=run.config.backend,
        run_id=run.run_id,
        measured_tpot_p50_ms=measured,
        decode_floor_ms=floor_ms,
        ratio_to_floor=ratio,
        percent_of_floor=100.0 / ratio if ratio else None,
        note=note,
    )


# --------------------------------------------------------------------------- diagnostics


def _diagnostics(
    findings: Iterable[AdvisorDiagnostic], runs: Sequence[RunResult]
) -> list[Diagnostic]:
    backend_of = {run.run_id: run.config.backend for run in runs}
    out: list[Diagnostic] = []
    for finding in findings:
        item = Diagnostic(
            run_id=finding.run_id,
            framework=backend_of.get(finding.run_id),
            title=finding.rule.replace("_", " "),
            severity=finding.severity,
            finding=finding.finding,
            advice=finding.advice,
            command=finding.command,
        )
        if item not in out:
            out.append(item)
    # Same rule and advice next to each other, in first-seen order: the formats print the
    # advice once per group (with 30 runs, the same paragraph 30 times buried the findings).
    first_seen: dict[tuple[str, str, str], int] = {}
    for item in out:
        first_seen.setdefault((item.title, item.severity, item.advice), len(first_seen))
    out.sort(key=lambda item: first_seen[(item.title, item.severity, item.advice)])
    for run in runs:
        if run.failure is not None:
            out.append(
                Diagnostic(
                    run_id=run.run_id,
                    framework=run.config.backend,
                    title="run failed",
                    severity="error",
                    finding=run.failure.cause,
                    advice=run.failure.advice or "",
                )
            )
    return out


# --------------------------------------------------------------------------- environment


def _environment_items(fp: Fingerprint) -> list[KeyValue]:
    shown = fp.model_dump(mode="json", exclude={"libraries"})
    libraries = {name: v for name, v in fp.libraries.items() if v is not None}
    return readable(flatten(shown) + flatten({"libraries": libraries}))


def _run_environment(run: RunResult) -> RunEnvironment:
    env = run.environment or Fingerprint()
    items = {
        "host": env.hostname,
        "gpu": env.primary_gpu_name or "none",
        "driver": env.driver_version,
        "cpu": env.cpu.model,
        "torch": env.libraries.get("torch"),
        run.config.backend: run.engine.version,
        "comparability digest": run.environment.digest() if run.environment else None,
    }
    return RunEnvironment(run_id=run.run_id, framework=run.config.backend, items=flatten(items))


def _preflight(items: Iterable[PreflightItem]) -> list[PreflightWarning]:
    return [
        PreflightWarning(
            severity=item.severity, what=item.what, why=item.why, admin_command=item.admin_command
        )
        for item in items
    ]


# --------------------------------------------------------------------------- reference


COLUMN_LABELS = {
    "framework": "Framework",
    "precision": "Precision",
    "ttft_ms_statistic_not_stated": "TTFT (ms, statistic not stated)",
}
"""Headings of a reference table's columns that are not catalogued metrics."""


def column_label(key: str) -> str:
    """A reference-table column heading: the catalogue's for a metric name, else spelled out."""
    known = METRICS_BY_NAME.get(key)
    if known is not None:
        return known.column
    return COLUMN_LABELS.get(key) or key.replace("_", " ")


def load_reference(path: Path) -> ReferenceTable:
    """The article's published table from data/reference (the advisor's `kind: published` layout:
    source.title, model, environment, caveats, configurations, rows)."""
    from bench.core.files import load_user_json

    data = load_user_json(path, "reference table")
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise UserError(f"reference table {str(path)!r} is not a published table with rows")
    rows_raw = [row for row in data["rows"] if isinstance(row, dict)]
    keys: list[str] = []
    for row in rows_raw:
        for key, value in row.items():
            if (isinstance(value, str | int | float) or value is None) and key not in keys:
                keys.append(key)
    environment = data.get("environment") or {}
    conditions = ", ".join(
        f"{key.replace('_', ' ')}: {_text(value)}"
        for key, value in environment.items()
        if not key.endswith("_as_published") or key == "gpu_as_published"
    )
    model = data.get("model_as_published") or data.get("model")
    if model:
        conditions = f"model: {_text(model)}" + (f"; {conditions}" if conditions else "")
    caveats = [_text(caveat) for caveat in data.get("caveats") or []]
    caveats += [
        f"{name} configuration: {_text(value)}"
        for name, value in (data.get("configurations") or {}).items()
    ]
    source = data.get("source") or {}
    return ReferenceTable(
        title=_text(data.get("title")) or "Article: Llama2-13B on NVIDIA A100 80GB PCIe",
        source=_text(source.get("title"))
        or '"A panoramic analysis of AI inference framework performance testing" (published)',
        conditions=conditions,
        note="Published figures, not measured by this project, and not comparable row by row.",
        caveats=caveats,
        keys=keys,
        columns=[column_label(key) for key in keys],
        rows=[[row.get(key) for key in keys] for row in rows_raw],
    )


# --------------------------------------------------------------------------- caveats


def _not_measured(
    stages: Sequence[StageReport], runs: Sequence[RunResult], availability: Mapping[str, str]
) -> list[Caveat]:
    """A caveat per recommended or candidate framework without a successful run in the report;
    `availability` is the advisor's map: 'available' or why the framework cannot run here."""
    measured = {run.config.backend for run in runs if run.summary and run.summary.successful}
    wanted: list[str] = []
    for stage in stages:
        for name in [stage.framework, *stage.candidates]:
            if name == REFUSED:
                continue  # a refused stage names no framework to measure
            if name and name not in wanted:
                wanted.append(name)
    caveats = []
    for name in wanted:
        if name in measured:
            continue
        state = availability.get(name)
        if state is None:
            why = "no backend of that name in this installation (not benchmarked here)"
        elif state != "available":
            why = f"not installed or not runnable here: {state}"
        else:
            why = "installed here but no stored run of it was included"
        caveats.append(Caveat(kind="not-measured", framework=name, text=why))
    return caveats


def _data_caveats(runs: Sequence[RunResult], environment: Fingerprint | None) -> list[Caveat]:
    caveats = []
    for run in runs:
        if run.validity and run.validity.reasons:
            caveats.append(
                Caveat(
                    kind="data",
                    framework=run.config.backend,
                    text=f"run {run.run_id} is {run.validity.status.value}: "
                    + "; ".join(run.validity.reasons),
                )
            )
    for run in runs:
        drift = drift_words(run.drift())
        if drift is not None and run.config.prediction is not None:
            record = run.config.prediction.calibration_id or "the default factors"
            caveats.append(
                Caveat(
                    kind="data",
                    framework=run.config.backend,
                    text=f"run {run.run_id} measured outside the interval predicted for it "
                    f"({drift}; calibration {record}): its engine ran otherwise than the "
                    "calibrated one (engine limits, release, GPU clocks); `python -m bench "
                    "calibrate --check` says whether the calibration still holds",
                )
            )
    for run in runs:
        if run.config.backend == "fake":
            caveats.append(
                Caveat(
                    kind="data",
                    framework="fake",
                    text=f"run {run.run_id} used the 'fake' backend, a test double that does no "
                    "inference: its figures test the harness and say nothing about a framework.",
                )
            )
    random_weight_runs = [run.run_id for run in runs if run.model and run.model.random_weights]
    if random_weight_runs:
        caveats.append(
            Caveat(
                kind="data",
                text="random-weight checkpoints (speed and memory are representative, outputs "
                f"are not) in run(s): {', '.join(random_weight_runs)}",
            )
        )
    if environment and not environment.gpu_available:
        caveats.append(
            Caveat(
                kind="environment",
                text="GPU memory, power and energy are absent: "
                + _text(environment.gpu_reason or "no GPU on the measuring machine"),
            )
        )
    return caveats


# --------------------------------------------------------------------------- intervals

INTERVAL_MAX_RECORDS = 100_000
"""Runs with more records get no interval in the report (the records are not kept in memory)."""
INTERVAL_BOOTSTRAP = 200
"""Draws per interval in the report (the verdicts use bench.core.stats' 1000)."""


class _Kept:
    """An iterable over records that keeps them (up to INTERVAL_MAX_RECORDS) as it is read."""

    def __init__(self, items: Iterable[RequestRecord]) -> None:
        self.items = items
        self.kept: list[RequestRecord] | None = []

    def __iter__(self):
        for record in self.items:
            if self.kept is not None:
                self.kept.append(record)
                if len(self.kept) > INTERVAL_MAX_RECORDS:
                    self.kept = None
            yield record


def _intervals(run: RunResult, kept: _Kept | None) -> dict[str | None, tuple[float, float]]:
    """Output tok/s 95% intervals of the run (key None) and of each closed-loop phase (key:
    its target level as text), within-run bootstrap; {} without records."""
    from bench.core.stats import run_sample, summarize_group

    records = kept.kept if kept is not None else None
    if not records or run.summary is None:
        return {}
    out: dict[str | None, tuple[float, float]] = {}
    phases: list[str | None] = [None] + [
        phase.name
        for phase in run.phases
        if phase.strategy == "concurrency" and phase.summary.successful > 0
    ]
    targets = {phase.name: f"{float(phase.target):g}" for phase in run.phases}
    # A ladder's whole-run figure mixes its levels: its intervals are per level only.
    for phase in phases[1:] if len(phases) > 2 else phases[:1]:
        try:
            summary = summarize_group(
                [run_sample(run, records, phase)],
                bootstrap=INTERVAL_BOOTSTRAP,
                metrics=["output_throughput_tok_s"],
            )
        except ValueError:
            continue
        metric = summary.metric("output_throughput_tok_s")
        if metric is not None and metric.interval is not None:
            key = None if phase is None else targets[phase]
            out[key] = (metric.interval.low, metric.interval.high)
    return out


def _phase_intervals(
    intervals: Mapping[str, dict[str | None, tuple[float, float]]],
) -> dict[str, dict[str, tuple[float, float]]]:
    return {
        run_id: {key: value for key, value in found.items() if key is not None}
        for run_id, found in intervals.items()
    }


def _with_interval(
    row: EvidenceFigures, run: RunResult, found: Mapping[str | None, tuple[float, float]]
) -> EvidenceFigures:
    group = run.group
    if group is not None and group.planned > 1:
        note = f"repeat {group.index + 1} of {group.planned} (group {group.group_id})"
    else:
        note = "single run"
    if row.level is not None:
        note += f", level c{row.level}"
    whole = found.get(row.level)
    return row.model_copy(
        update={
            "output_throughput_low": None if whole is None else round(whole[0], 2),
            "output_throughput_high": None if whole is None else round(whole[1], 2),
            "interval_note": note,
        }
    )


# --------------------------------------------------------------------------- the report


def _pareto_charts(answer: AdvisorReport) -> list[Chart]:
    """One Pareto chart per generate stage with a configuration search (ids kept unique)."""
    charts = []
    for index, stage in enumerate(s for s in answer.stages if s.configurations is not None):
        chart = pareto_chart(stage.configurations)
        if index:
            chart = chart.model_copy(
                update={"id": f"{chart.id}-{index + 1}", "title": f"{chart.title} ({stage.stage})"}
            )
        charts.append(chart)
    return charts


def build_report(
    profile: WorkloadProfile,
    answer: AdvisorReport,
    runs: Sequence[RunResult],
    records: Mapping[str, Iterable[RequestRecord]],
    *,
    environment: Fingerprint | None = None,
    preflight: Iterable[PreflightItem] = (),
    reference: ReferenceTable | None = None,
    reference_absent_reason: str | None = None,
    profile_file: str | None = None,
    now: datetime | None = None,
    extra_runs: Mapping[str, RunResult] | None = None,
    published_files: Mapping[str, str] | None = None,
) -> Report:
    """The report's data from the advisor's answer for `profile` and the runs it shows.

    `records`: run_id -> that run's request records (an iterator from the store is read once,
    into columns; nothing per request is kept beyond INTERVAL_MAX_RECORDS for the intervals).
    `extra_runs`: runs the capacity appendix may cite that are not among `runs`.
    `published_files`: run_id -> data/reference file of the runs this project ships (their
    provenance is `published` even where the advisor did not cite them).
    """
    extra_runs = extra_runs or {}
    profile_stages = {stage.name: stage for stage in profile.stages}
    kept = {run_id: _Kept(items) for run_id, items in records.items()}
    requests = {run_id: RequestColumns.from_records(items) for run_id, items in kept.items()}
    intervals = {run.run_id: _intervals(run, kept.get(run.run_id)) for run in runs}
    stages = [
        stage_report(
            stage, profile_stages[stage.stage].gpu.type if stage.stage in profile_stages else None
        )
        for stage in answer.stages
    ]
    marks = advisor_sources(answer)
    cited = advisor_provenances(answer)
    provenances = {run.run_id: run_provenance(run, cited, published_files or {}) for run in runs}
    roles = run_roles(answer)
    stage_concurrency = run_stage_concurrency(answer, profile)
    estimate = _primary_estimate(answer)
    profile_models = {stage.model for stage in profile.stages if stage.model}
    profile_gpus = [stage.gpu.type for stage in profile.stages if stage.gpu.type]
    sources = {run.run_id: run_source(run, marks, environment, profile_gpus) for run in runs}
    evidence_rows = [
        _with_interval(
            evidence_row(
                run,
                sources[run.run_id],
                provenances[run.run_id],
                concurrency=stage_concurrency.get(run.run_id),
            ),
            run,
            intervals[run.run_id],
        )
        for run in runs
    ]
    evidence_rows += published_rows(answer)
    evidence_rows.sort(key=lambda row: (SOURCE_RANK[row.source], row.framework))

    availability: dict[str, str] = {}
    for stage in answer.stages:
        availability.update(stage.recommendation.availability)
    measured_frameworks = {
        row.framework
        for stage in answer.stages
        for row in stage.evidence
        if row.provenance is not None and row.provenance.kind in ("yours", "published")
    } | {run.config.backend for run in runs if run.summary and run.summary.successful}
    decisions = [
        stage_decision(
            stage,
            profile_stages.get(stage.stage),
            availability,
            measured_frameworks,
            [*runs, *extra_runs.values()],
        )
        for stage in answer.stages
    ]
    caveats = _not_measured(stages, runs, availability)
    for stage in stages:
        caveats += [
            Caveat(kind="recommendation", framework=stage.framework, text=f"{stage.name}: {text}")
            for text in stage.caveats
        ]
    caveats += _data_caveats(runs, environment)

    headline = "; ".join(
        stage.headline or f"{stage.name}: {stage.framework} (confidence {stage.confidence})"
        for stage in stages
    )
    every_run = {run.run_id: run for run in runs}
    for stage in answer.stages:
        for candidate in stage.recommendation.measured_capacities():
            run_id = candidate.capacity.run_id
            if run_id and run_id not in every_run and run_id in extra_runs:
                every_run[run_id] = extra_runs[run_id]
    capacity, capacity_charts = capacity_sections(profile, answer, every_run)
    profile_data = profile.model_dump(mode="json")
    included = {run.run_id for run in runs}
    findings = [
        finding
        for stage in answer.stages
        for finding in stage.diagnostics
        if finding.run_id in included  # the advisor diagnoses every candidate run it weighed
    ]
    return Report(
        meta=ReportMeta(
            title=profile.title,
            generated_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
            for_whom=profile.owner,
            description=profile.notes,
            profile_file=profile_file,
        ),
        profile=flatten(profile_data),
        profile_data=profile_data,
        headline=headline or "The advisor returned no recommendation.",
        decisions=decisions,
        workload=workload_tables(profile),
        reproduce_commands=reproduce_commands(
            profile_file, all_refused=bool(decisions) and all(d.refused for d in decisions)
        ),
        stages=stages,
        evidence=evidence_rows,
        reference=reference,
        reference_absent_reason=None if reference else reference_absent_reason,
        charts=derive_charts(runs, requests, _phase_intervals(intervals))
        + _pareto_charts(answer)
        + capacity_charts,
        capacity=capacity,
        estimate=estimate,
        calibration=calibration_table(answer.calibration),
        # A forward run has no per-token decode floor: the table is about generate runs.
        floor_distances=[
            floor_distance(run, estimate, profile_models)
            for run in runs
            if run.config.workload.kind == "generate"
        ],
        diagnostics=_diagnostics(findings, runs),
        environment=EnvironmentSection(
            fingerprint=_environment_items(environment) if environment else [],
            fingerprint_absent_reason=None if environment else "no fingerprint was taken",
            preflight=_preflight(preflight),
            runs=[_run_environment(run) for run in runs],
        ),
        reproduce=[
            ReproduceEntry(
                run_id=run.run_id,
                framework=run.config.backend,
                status=run.status.value,
                created_at=run.created_at,
                command=run.command or "(no command stored with this run)",
            )
            for run in runs
        ],
        caveats=caveats,
        runs=[
            RunRef(
                run_id=run.run_id,
                framework=run.config.backend,
                model=run.config.model,
                pattern=run.config.load.pattern,
                status=run.status.value,
                validity=run.validity.status.value if run.validity else None,
                source=sources[run.run_id],  # type: ignore[arg-type]
                records=len(requests[run.run_id]) if run.run_id in requests else 0,
                provenance=provenances[run.run_id].kind,
                provenance_words=_provenance_words(provenances[run.run_id]),
                gpu=_gpu_name(run),
                role=roles.get(run.run_id, "chosen for this report"),
                created_at=run.created_at,
                command=run.command or "(no command stored with this run)",
            )
            for run in runs
        ],
    )


# --------------------------------------------------------------------------- loading


def relevant_run_ids(answer: AdvisorReport) -> list[str]:
    """The default runs of a report: per stage, the matching measurements that settled the
    answer (`Recommendation.settled_by_runs`), then the nearest non-matching ones its answer
    names as context (`Recommendation.nearest`); never the rest of the store (other profiles'
    runs, failed runs of other workloads)."""
    ids: list[str] = []
    for stage in answer.stages:
        chosen = stage.recommendation
        capacity_ids = [c.capacity.run_id for c in chosen.measured_capacities()]
        for run_id in [
            *chosen.settled_by_runs,
            *(i for r in chosen.nearest for i in r.run_ids),
            *(i for i in capacity_ids if i),
        ]:
            if run_id not in ids:
                ids.append(run_id)
    return ids


def load_seed_reference(reference_dir: Path) -> tuple[ReferenceTable | None, str | None]:
    """The article's published table from the reference folder, or why it is absent."""
    seed_path = reference_dir / SEED_REFERENCE_FILE
    if seed_path.is_file():
        return load_reference(seed_path), None
    return None, f"{SEED_REFERENCE_FILE} is not in {reference_dir}"


def report_for(
    profile: WorkloadProfile,
    answer: AdvisorReport,
    store: Store | None,
    reference: measured.ReferenceFiles,
    run_ids: Sequence[str] = (),
    profile_file: str | None = None,
) -> Report:
    """The report for an answer already computed (the app asks the advisor once per view).

    Runs: those named (each must exist in the store or the reference folder), else every run
    the advisor's evidence cites. Records are streamed from the store into columns.
    """
    from bench.run.environment import fingerprint, preflight

    # Measured RunResults stored as files in data/reference (cited by the advisor too).
    reference_runs = {run.run_id: run for runs in reference.runs.values() for run in runs}
    runs: list[RunResult] = []
    records: dict[str, Iterable[RequestRecord]] = {}
    shipped = RecordsLookup(reference=reference)
    for run_id in list(dict.fromkeys(run_ids)) or relevant_run_ids(answer):
        if run_id in reference_runs:  # a file in data/reference: records from its archives
            runs.append(reference_runs[run_id])
            found = shipped(run_id)
            if found is not None:
                records[run_id] = found
            continue
        if store is None:
            raise UserError(f"no run {run_id}: not in data/reference and no results store yet")
        runs.append(store.get_run(run_id))  # UserError names a run that is nowhere
        records[run_id] = store.iter_records(run_id)
    environment = fingerprint()
    table, absent = load_seed_reference(reference.folder)
    published_files = {
        run.run_id: name for name, shipped_runs in reference.runs.items() for run in shipped_runs
    }
    return build_report(
        profile,
        answer,
        runs,
        records,
        published_files=published_files,
        environment=environment,
        preflight=preflight(environment),
        reference=table,
        reference_absent_reason=absent,
        profile_file=profile_file,
    )


def assemble_report(
    profile_path: str | Path,
    run_ids: Sequence[str] = (),
    store_location: str | None = None,
    reference_dir: Path | None = None,
    stage: str | None = None,
    quality_result: str | None = None,
    max_quality_loss_pct: float | None = None,
) -> Report:
    """Load the profile, ask the advisor once, read runs and records, and build the Report.

    `quality_result` and `max_quality_loss_pct` override the profile's stage fields as the
    CLI's flags do (None = not given; `stage` names the stage in a multi-stage profile)."""
    from advisor.decide.recommend import availability_map, recommend
    from advisor.workload.profile_input import load_profile, profile_from_flags
    from bench.storage.store import open_store, parse_store_url

    profile_path = Path(profile_path)
    profile = load_profile(profile_path)
    if quality_result is not None or max_quality_loss_pct is not None:
        profile = profile_from_flags(
            profile,
            stage=stage,
            quality_result=quality_result,
            max_quality_loss_pct=max_quality_loss_pct,
        )
    location = parse_store_url(store_location)
    # A report only reads: a store named but absent is "no store at ..."; the default file not
    # created yet just means no runs measured here.
    default_absent = store_location is None and location.path is not None
    default_absent = default_absent and not location.path.exists()
    store = None if default_absent else open_store(location, create=False)
    reference = measured.read_reference_folder(reference_dir or measured.DEFAULT_REFERENCE_DIR)
    answer = recommend(profile, store=store, reference=reference, availability=availability_map())
    return report_for(profile, answer, store, reference, run_ids, profile_path.name)


__all__ = [
    "assemble_report",
    "build_report",
    "flatten",
    "load_reference",
    "pattern_facts",
    "relevant_run_ids",
    "report_for",
]
