"""Assemble a `Report` from the advisor's own answer, stored runs and their request records.

`build_report` is pure: it takes the advisor's pydantic objects (the `WorkloadProfile` and the
`advisor.decide.recommend.Report` that `recommend()` returned) and reads their fields by name, so a
field renamed in the advisor fails the type check and the tests instead of dropping text.
`assemble_report` loads what it needs (profile file, store, advisor, environment, reference
table) for the CLI and the app.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.decide.recommend import RecordsLookup
from advisor.decide.recommend import Report as AdvisorReport
from advisor.evidence.rows import SOURCE_RANK
from advisor.report.aggregate import RequestColumns
from advisor.report.appendix import (
    environment_items,
    preflight_warnings,
    report_diagnostics,
    run_environment,
)
from advisor.report.capacity import capacity_sections
from advisor.report.caveats import data_caveats, not_measured_caveats
from advisor.report.charts import derive_charts, pareto_chart
from advisor.report.configurations import calibration_table
from advisor.report.decision import reproduce_commands, stage_decision
from advisor.report.display import flatten
from advisor.report.evidence_view import (
    advisor_provenances,
    advisor_sources,
    evidence_row,
    provenance_words,
    published_rows,
    run_provenance,
    run_roles,
    run_source,
    run_stage_concurrency,
)
from advisor.report.feasibility import floor_distance, primary_estimate
from advisor.report.intervals import (
    IntervalCache,
    KeptRecords,
    phase_intervals,
    run_intervals,
    with_interval,
)
from advisor.report.model import (
    Caveat,
    Chart,
    EnvironmentSection,
    ReferenceTable,
    Report,
    ReportMeta,
    ReproduceEntry,
    RunRef,
)
from advisor.report.reference import load_seed_reference
from advisor.report.stages import stage_report
from advisor.report.workload import workload_tables
from advisor.sizing import measured
from advisor.workload.profile import WorkloadProfile
from bench.core.errors import UserError
from bench.core.fingerprint import Fingerprint
from bench.core.schema import RequestRecord, RunResult

if TYPE_CHECKING:
    from bench.run.environment import PreflightItem
    from bench.storage.store import Store


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
    interval_cache: IntervalCache | None = None,
) -> Report:
    """The report's data from the advisor's answer for `profile` and the runs it shows.

    `records`: run_id -> that run's request records (an iterator from the store is read once,
    into columns; nothing per request is kept beyond INTERVAL_MAX_RECORDS for the intervals).
    `extra_runs`: runs the capacity appendix may cite that are not among `runs`.
    `published_files`: run_id -> data/reference file of the runs this project ships (their
    provenance is `published` even where the advisor did not cite them).
    `interval_cache`: intervals of finished runs kept between reports (the app's, shared by
    its sessions); without it every run's interval is computed.
    """
    extra_runs = extra_runs or {}
    profile_stages = {stage.name: stage for stage in profile.stages}
    kept = {run_id: KeptRecords(items) for run_id, items in records.items()}
    requests = {run_id: RequestColumns.from_records(items) for run_id, items in kept.items()}
    interval_of = run_intervals if interval_cache is None else interval_cache.intervals
    intervals = {run.run_id: interval_of(run, kept.get(run.run_id)) for run in runs}
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
    estimate = primary_estimate(answer)
    profile_models = {stage.model for stage in profile.stages if stage.model}
    profile_gpus = [stage.gpu.type for stage in profile.stages if stage.gpu.type]
    sources = {run.run_id: run_source(run, marks, environment, profile_gpus) for run in runs}
    evidence_rows = [
        with_interval(
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
    caveats = not_measured_caveats(stages, runs, availability)
    for stage in stages:
        caveats += [
            Caveat(kind="recommendation", framework=stage.framework, text=f"{stage.name}: {text}")
            for text in stage.caveats
        ]
    caveats += data_caveats(runs, environment)

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
            profile_file,
            all_refused=bool(decisions) and all(d.refused for d in decisions),
            unplannable=_unplannable_models(profile),
        ),
        stages=stages,
        evidence=evidence_rows,
        reference=reference,
        reference_absent_reason=None if reference else reference_absent_reason,
        charts=derive_charts(runs, requests, phase_intervals(intervals))
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
        diagnostics=report_diagnostics(findings, runs),
        environment=EnvironmentSection(
            fingerprint=environment_items(environment) if environment else [],
            fingerprint_absent_reason=None if environment else "no fingerprint was taken",
            preflight=preflight_warnings(preflight),
            runs=[run_environment(run) for run in runs],
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
                provenance_words=provenance_words(provenances[run.run_id]),
                gpu=_gpu_name(run),
                role=roles.get(run.run_id, "chosen for this report"),
                created_at=run.created_at,
                command=run.command or "(no command stored with this run)",
            )
            for run in runs
        ],
    )


def _unplannable_models(profile: WorkloadProfile) -> str | None:
    """What to do first where a stage names a model the bench cannot write and run (a published
    speech model sized from its config), in words; None when every model is plannable."""
    from advisor.workload.architectures import sized_but_not_runnable

    named = [
        stage.model
        for stage in profile.stages
        if stage.model and sized_but_not_runnable(stage.model)
    ]
    if not named:
        return None
    return (
        f"`model` names a local folder with the checkpoint of {', '.join(named)} (the bench has "
        "no preset of it to write)"
    )


def _gpu_name(run: RunResult) -> str | None:
    from advisor.sizing.measured import run_gpu_name

    return run_gpu_name(run)


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


def warm_intervals(
    answer: AdvisorReport,
    store: Store | None,
    reference: measured.ReferenceFiles,
    interval_cache: IntervalCache,
) -> int:
    """Compute into `interval_cache` the intervals of the runs the answer's report cites by
    default (`relevant_run_ids`), from the records `report_for` reads: the slow part of a
    report the first time it cites a run (its records' bootstrap), done before the report is
    asked for. Returns how many runs had records to compute from."""
    reference_runs = {run.run_id: run for runs in reference.runs.values() for run in runs}
    shipped = RecordsLookup(reference=reference)
    warmed = 0
    for run_id in relevant_run_ids(answer):
        if run_id in reference_runs:
            run, records = reference_runs[run_id], shipped(run_id)
        elif store is not None and store.has_run(run_id):
            run, records = store.get_run(run_id), list(store.iter_records(run_id))
        else:
            continue
        if records:
            kept = KeptRecords(records)
            list(kept)  # read through, as build_report reads it: `kept` holds the records
            interval_cache.intervals(run, kept)
            warmed += 1
    return warmed


def report_for(
    profile: WorkloadProfile,
    answer: AdvisorReport,
    store: Store | None,
    reference: measured.ReferenceFiles,
    run_ids: Sequence[str] = (),
    profile_file: str | None = None,
    interval_cache: IntervalCache | None = None,
    environment: Fingerprint | None = None,
) -> Report:
    """The report for an answer already computed (the app asks the advisor once per view).

    Runs: those named (each must exist in the store or the reference folder), else every run
    the advisor's evidence cites. Records are streamed from the store into columns.
    `interval_cache`: see `build_report`. `environment`: this machine's fingerprint when the
    caller keeps one (the app reads it once a minute, not once per report); read here otherwise.
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
    environment = environment or fingerprint()
    table, absent = load_seed_reference(reference.folder)
    published_files = {
        run.run_id: name for name, shipped_runs in reference.runs.items() for run in shipped_runs
    }
    # A forward stage's batcher sizing reads every shipped ladder of its engine and model (its
    # GPU's, else another GPU's carried over), as the fleet answer does, not only the cited runs.
    shown = {run.run_id for run in runs}
    forward_ladders = {
        run_id: run
        for run_id, run in reference_runs.items()
        if run.config.workload.kind == "forward" and run_id not in shown
    }
    return build_report(
        profile,
        answer,
        runs,
        records,
        extra_runs=forward_ladders,
        published_files=published_files,
        environment=environment,
        preflight=preflight(environment),
        reference=table,
        reference_absent_reason=absent,
        profile_file=profile_file,
        interval_cache=interval_cache,
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


__all__ = ["assemble_report", "build_report", "relevant_run_ids", "report_for"]
