"""The evidence the report shows: each run's figures (at the stage's level of a ladder), where it
was measured and by whom, why it is in the report, and the published rows the advisor used."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from advisor.decide.recommend import Report as AdvisorReport
from advisor.evidence.rows import EvidenceRow
from advisor.evidence.rows import Provenance as AdvisorProvenance
from advisor.report.model import FORWARD_REPORT_METRICS, REPORT_METRICS, EvidenceFigures
from advisor.report.reference import SEED_REFERENCE_FILE
from advisor.workload.profile import WorkloadProfile
from bench.core.fingerprint import Fingerprint
from bench.core.schema import RunResult


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


def provenance_words(provenance: AdvisorProvenance) -> str:
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
        provenance_words=provenance_words(provenance),
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
            provenance_words=provenance_words(provenance),
            gpu=row.gpu,
            **values,
        )
        if report_row not in rows:
            rows.append(report_row)
    return rows
