"""The "Capacity and cost" view of a stage: table rows, the GPUs-vs-peak chart, the search probes.

`capacity_view` is the one function the report and the app call: given a stage's capacities
(`Recommendation.capacities`, from the capacity searches) and a peak rate, headroom and GPU
price, it re-sizes every candidate with advisor.sizing.capacity's arithmetic and returns the table
and the chart data. Moving the peak or the price only calls it again: no benchmark is re-run.
`capacity_sections` makes the report's per-stage sections from the advisor's answer with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import Field

from advisor.decide.recommend import NO_PEAK_NOTE, CandidateCapacity, slo_text, stage_capacities
from advisor.decide.recommend import Report as AdvisorReport
from advisor.report.model import CapacitySection, Chart, Marker, ReferenceTable, Series
from advisor.sizing.capacity import Capacity, size_fleet
from advisor.workload.profile import StageProfile, WorkloadProfile
from bench.core.metric_catalog import SPECS_BY_KEY, Metric
from bench.core.pattern_reports import CapacityProbe, CapacityReport
from bench.core.schema import RunResult
from bench.core.strict import Strict

CAPACITY_COLUMNS = (
    "Candidate",
    "Max rate within the SLO (req/s)",
    "Binding constraint",
    "GPUs needed at peak",
    "$/month",
    "$ per 1M output tokens",
    "Source",
)
CHART_POINTS = 60
"""Peak rates the GPUs-vs-peak chart samples (0 to twice the peak, or to 4 units' capacity)."""


class CapacityRow(Strict):
    """One row of the table, as data (the app formats it itself)."""

    framework: str
    label: str
    source: str = Field(description="measured (yours / published) or estimate.")
    run_id: str | None = None
    max_rate_rps: float
    binding_constraint: str | None = None
    gpus_per_replica: int
    gpus_needed: int
    monthly_cost: float | None = None
    cost_per_million_output_tokens: float | None = None
    converged: bool = True
    low_rate_rps: float | None = Field(None, description="A prediction's interval, low end.")
    high_rate_rps: float | None = None
    gpus_range: tuple[int, int] | None = Field(
        None, description="GPUs needed at the interval's ends (fewest, most)."
    )
    notes: list[str] = Field(default_factory=list)


class CapacityView(Strict):
    """The table rows and chart of a stage at one peak rate and price."""

    peak_request_rate_rps: float
    headroom_fraction: float
    price_per_gpu_hour: float | None
    price_source: str | None
    rows: list[CapacityRow] = Field(description="Measured first (fewest GPUs), then estimates.")
    table: ReferenceTable | None = Field(None, description="The measured rows, formatted.")
    estimates: ReferenceTable | None = Field(
        None, description="The estimate rows, formatted and labelled: no capacity measured."
    )
    chart: Chart
    notes: list[str] = Field(default_factory=list)


def _resize(
    capacity: Capacity, peak: float, headroom: float, price: float | None, gpu_type: str | None
) -> Capacity:
    def sized(rate: float) -> Capacity:
        return size_fleet(
            rate,
            source=capacity.source,
            peak_request_rate_rps=peak,
            gpus_per_replica=capacity.gpus_per_replica,
            headroom_fraction=headroom,
            binding_constraint=capacity.binding_constraint,
            converged=capacity.converged,
            gpu_type=gpu_type if gpu_type is not None else capacity.gpu_type,
            price_per_gpu_hour=price,
            mean_output_tokens=capacity.mean_output_tokens,
        )

    gpus_range = None
    if capacity.low_rate_rps is not None and capacity.high_rate_rps is not None:
        gpus_range = (
            sized(capacity.high_rate_rps).gpus_needed,
            sized(capacity.low_rate_rps).gpus_needed,
        )
    return sized(capacity.max_rate_rps).model_copy(
        update={
            "label": capacity.label,
            "run_id": capacity.run_id,
            "low_rate_rps": capacity.low_rate_rps,
            "high_rate_rps": capacity.high_rate_rps,
            "gpus_range": gpus_range,
        }
    )


def _with_interval(value: float | int, low: float | None, high: float | None) -> float | str:
    """`18.1 (10.4–20.6)` for a prediction with its interval; the value alone otherwise."""
    if low is None or high is None:
        return round(value, 3) if isinstance(value, float) else value
    if isinstance(value, int):
        return value if low == high else f"{value} ({low:g}–{high:g})"
    return f"{value:.3g} ({low:.3g}–{high:.3g})"


def _money(value: float | None, digits: int = 0) -> str:
    return "—" if value is None else f"${value:,.{digits}f}"


def _table(rows: Sequence[CapacityRow], title: str, conditions: str, note: str) -> ReferenceTable:
    return ReferenceTable(
        title=title,
        source="capacity searches (bench run --pattern capacity) and advisor/sizing/capacity.py",
        conditions=conditions,
        note=note,
        keys=[
            "label",
            "max_rate_rps",
            "binding_constraint",
            "gpus_needed",
            "monthly_cost",
            "cost_per_million_output_tokens",
            "source",
        ],
        columns=list(CAPACITY_COLUMNS),
        rows=[
            [
                row.label,
                _with_interval(row.max_rate_rps, row.low_rate_rps, row.high_rate_rps),
                row.binding_constraint or "—",
                _with_interval(
                    row.gpus_needed, *(row.gpus_range if row.gpus_range else (None, None))
                )
                if row.converged
                else f"{row.gpus_needed} (search not converged)",
                _money(row.monthly_cost),
                _money(row.cost_per_million_output_tokens, 2),
                row.source,
            ]
            for row in rows
        ],
    )


def gpus_chart(
    rows: Sequence[CapacityRow], peak: float, headroom: float, chart_id: str = "capacity-gpus"
) -> Chart:
    """GPUs needed vs peak rate, a step line per candidate configuration, the peak marked."""
    if not rows:
        return Chart(
            id=chart_id,
            title="GPUs needed vs peak rate",
            available=False,
            absent_reason="no capacity measured or estimated for this stage",
        )
    top = max(2 * peak, *(4 * row.max_rate_rps / (1 + headroom) for row in rows[:1]))
    xs = [top * i / (CHART_POINTS - 1) for i in range(CHART_POINTS)]
    series = []
    for row in rows[:8]:
        ys = [
            float(
                max(1, math.ceil(x * (1 + headroom) / row.max_rate_rps - 1e-9))
                * row.gpus_per_replica
            )
            for x in xs
        ]
        name = row.label + (" (estimate)" if row.source == "estimate" else "")
        series.append(Series(name=name, x=[round(x, 4) for x in xs], y=ys))
    return Chart(
        id=chart_id,
        title="GPUs needed vs peak rate",
        kind="step",
        x_label="peak request rate (requests/s)",
        y_label="GPUs needed within the SLO",
        description=f"GPUs = ceil(peak x (1 + {headroom:g} headroom) / measured capacity) x GPUs "
        "per unit, per candidate configuration; the dashed rule is the profile's peak."
        + (
            " Lines marked (estimate) are not measured."
            if any(r.source == "estimate" for r in rows)
            else ""
        ),
        series=series,
        markers=[Marker(label=f"peak {peak:g} req/s", x=peak)],
    )


def capacity_view(
    capacities: Sequence[CandidateCapacity],
    peak_request_rate_rps: float,
    price_per_gpu_hour: float | None = None,
    headroom_fraction: float = 0.2,
    gpu_type: str | None = None,
    chart_id: str = "capacity-gpus",
) -> CapacityView:
    """Table rows and chart data for the capacities at this peak, headroom and price (None =
    the reference price for the GPU type); a bad number is a one-line UserError."""
    resized = [
        (
            candidate,
            _resize(
                candidate.capacity,
                peak_request_rate_rps,
                headroom_fraction,
                price_per_gpu_hour,
                gpu_type,
            ),
        )
        for candidate in capacities
    ]
    rows = [
        CapacityRow(
            framework=candidate.framework,
            label=capacity.label or candidate.framework,
            source="estimate"
            if capacity.source == "estimate"
            else f"measured ({candidate.provenance})",
            run_id=capacity.run_id,
            max_rate_rps=capacity.max_rate_rps,
            binding_constraint=capacity.binding_constraint,
            gpus_per_replica=capacity.gpus_per_replica,
            gpus_needed=capacity.gpus_needed,
            monthly_cost=capacity.monthly_cost,
            cost_per_million_output_tokens=capacity.cost_per_million_output_tokens,
            converged=capacity.converged,
            low_rate_rps=capacity.low_rate_rps,
            high_rate_rps=capacity.high_rate_rps,
            gpus_range=capacity.gpus_range,
            notes=capacity.notes,
        )
        for candidate, capacity in resized
    ]
    measured = sorted(
        (row for row in rows if row.source != "estimate"),
        key=lambda row: (not row.converged, row.gpus_needed, -row.max_rate_rps),
    )
    estimated = [row for row in rows if row.source == "estimate"]
    first = resized[0][1] if resized else None
    conditions = f"peak {peak_request_rate_rps:g} req/s + {headroom_fraction:.0%} headroom" + (
        f", {first.gpu_type}" if first is not None and first.gpu_type else ""
    )
    price_note = (
        f"Price: {first.price_source}" if first is not None and first.price_source else "No price"
    )
    notes = sorted({note for row in rows for note in row.notes if note.startswith("no ")})
    return CapacityView(
        peak_request_rate_rps=peak_request_rate_rps,
        headroom_fraction=headroom_fraction,
        price_per_gpu_hour=first.price_per_gpu_hour if first is not None else price_per_gpu_hour,
        price_source=first.price_source if first is not None else None,
        rows=measured + estimated,
        table=_table(measured, "Capacity and cost (measured)", conditions, price_note)
        if measured
        else None,
        estimates=_table(
            estimated,
            "Predicted (not measured: no capacity search of it on this GPU type)",
            conditions,
            "From the serving model (advisor/sizing/serving_model.py), not a capacity search: the "
            "predicted rate with its interval, and the GPUs at the interval's ends; its error "
            "against every shipped search is in docs/capacity-model.md.",
        )
        if estimated
        else None,
        chart=gpus_chart(measured + estimated, peak_request_rate_rps, headroom_fraction, chart_id),
        notes=notes,
    )


def capacity_view_for_runs(
    stage: StageProfile,
    runs: Sequence[RunResult],
    peak_request_rate_rps: float,
    price_per_gpu_hour: float | None = None,
    headroom_fraction: float | None = None,
    published_ids: frozenset[str] = frozenset(),
) -> CapacityView:
    """`capacity_view` straight from stored capacity runs (their CapacityReports): the stage's
    matching searches on its GPU type (`advisor.decide.recommend.stage_capacities`) at this peak and
    price; the searches left out and why are in the view's notes."""
    headroom = stage.headroom_fraction if headroom_fraction is None else headroom_fraction
    sized = stage.model_copy(
        update={
            "peak_request_rate_rps": peak_request_rate_rps,
            "headroom_fraction": headroom,
            "gpu": stage.gpu.model_copy(update={"price_per_hour": price_per_gpu_hour}),
        }
    )
    capacities, notes = stage_capacities(sized, runs, set(published_ids))
    view = capacity_view(
        capacities, peak_request_rate_rps, price_per_gpu_hour, headroom, stage.gpu.type
    )
    view.notes = [*notes, *(note for note in view.notes if note not in notes)]
    return view


def probe_table(run: RunResult) -> ReferenceTable | None:
    """Every probe of one capacity search (the report's appendix), or None without a report."""
    report = run.pattern_report
    if not isinstance(report, CapacityReport):
        return None
    percentile = report.percentile

    def pick(values: object) -> float | None:
        return None if values is None else round(float(getattr(values, percentile)), 2)

    return ReferenceTable(
        title=f"Capacity search {run.run_id} ({run.config.backend}, {report.over})",
        source=run.command or f"run {run.run_id}",
        conditions=f"result {report.result}, {percentile}, attainment target "
        f"{report.attainment_target:g}, {report.probe_requests} requests a probe"
        + (f"; settled {report.settle_rule}" if report.settle_rule else ""),
        note=f"max rate {report.max_rate_rps if report.max_rate_rps is not None else '—'} req/s; "
        f"binding {report.binding_constraint or '—'}",
        keys=[
            "index",
            "kind",
            "level",
            "requests",
            "achieved_rps",
            "attainment",
            "attainment_ci",
            "ttft",
            "tpot",
            "verdict",
        ],
        columns=[
            "#",
            "Kind",
            "Level",
            "Requests",
            "Achieved req/s",
            "Attainment",
            "Attainment 95% CI (Wilson)",
            *(Metric(SPECS_BY_KEY[key], percentile).column for key in ("ttft_ms", "tpot_ms")),
            "Verdict",
        ],
        rows=[
            [
                probe.index,
                probe.kind,
                round(probe.level, 3),
                probe.requests,
                round(probe.achieved_rps, 3),
                None if probe.attainment is None else round(probe.attainment, 3),
                None
                if probe.attainment_low is None or probe.attainment_high is None
                else f"{probe.attainment_low:.3f}-{probe.attainment_high:.3f}",
                pick(probe.ttft_ms),
                pick(probe.tpot_ms),
                _verdict(probe),
            ]
            for probe in report.probes
        ],
    )


def _verdict(probe: CapacityProbe) -> str:
    """The appendix's verdict cell; a confirming repeat shows the pair's verdict, which the
    search acted on."""
    if probe.feasible is None:
        return "start"
    own = "feasible" if probe.feasible else "infeasible: " + "; ".join(probe.reasons)
    if probe.kind == "confirm":
        pair = "pair feasible" if probe.pooled_feasible else "pair infeasible"
        own = f"repeat of #{probe.repeats}, {pair}; this probe {own}"
    return own[:120]


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


__all__ = [
    "CAPACITY_COLUMNS",
    "CapacityRow",
    "CapacityView",
    "capacity_sections",
    "capacity_view",
    "capacity_view_for_runs",
    "gpus_chart",
    "probe_table",
]
