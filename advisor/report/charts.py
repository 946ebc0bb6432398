"""Report charts: chart data derived from runs, records and telemetry, rendered to static SVG/PNG.

Derivation (`derive_charts`) calls one builder per chart (`CHART_BUILDERS`); a chart the runs
have no data for is kept with `available=False` and the reason, so every format can say what is
absent. Builders aggregate in Python first (aggregate.py: histogram bins, per-window percentiles,
downsampled telemetry), so a chart holds at most MAX_CHART_POINTS points whatever the run size.
Rendering uses altair + vl-convert (no browser, no network), imported only when drawing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from advisor.report.aggregate import (
    NS_PER_S,
    RequestColumns,
    downsample,
    histogram,
    windowed_percentile,
)
from advisor.report.model import MAX_CHART_POINTS, Chart, Marker, Series
from advisor.sizing.configurations import ConfigurationSearch
from bench.core.config import PulseLoad, SteadyLoad
from bench.core.metric_catalog import metric as catalogue_metric
from bench.core.pattern_reports import StepReport
from bench.core.schema import RunResult

CHART_WIDTH_PX = 560
CHART_HEIGHT_PX = 250
HISTOGRAM_BINS = 40
MAX_MARKERS = 60
"""Marker rules per chart (knees, burst edges); more would be unreadable anyway."""
MAX_SERIES = 12
"""Lines per chart: beyond a dozen the colours repeat and no line can be told apart."""
POINT_MARKS_MAX = 40
"""A line shows a dot per point only when it has this few points (step stages, not samples)."""
BYTES_PER_GB = 1e9


# --------------------------------------------------------------------------- naming


def series_names(runs: Sequence[RunResult]) -> dict[str, str]:
    """A short legend name per run: the backend; the model when the runs span several; the load
    shape (c64, step, 2 req/s) when a name still repeats; then a numbered suffix."""
    several_models = len({run.config.model for run in runs}) > 1
    names = {
        run.run_id: f"{run.config.backend} {run.config.model}"
        if several_models
        else run.config.backend
        for run in runs
    }
    for run in runs:
        if list(names.values()).count(names[run.run_id]) > 1:
            names[run.run_id] = f"{names[run.run_id]} {run.config.load.level_label()}"
    counts: dict[str, int] = {}
    for run_id, name in list(names.items()):
        if list(names.values()).count(name) > 1:
            counts[name] = counts.get(name, 0) + 1
            names[run_id] = f"{name} #{counts[name]}"
    return names


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# --------------------------------------------------------------------------- pattern_report


def knee_concurrency(run: RunResult) -> float | None:
    """Concurrency of the knee stage of a step run (`StepReport.knee_concurrency`), if any."""
    report = run.pattern_report
    if isinstance(report, StepReport) and report.knee_concurrency is not None:
        return float(report.knee_concurrency)
    return None


def pattern_facts(run: RunResult) -> list[str]:
    """Scalar facts of a run's pattern report (knee, capacity, slopes, recovery) as short lines,
    `field.path = value`, in the report model's field order; unset fields are left out."""
    facts: list[str] = []
    if run.pattern_report is None:
        return facts

    def visit(prefix: str, value: Any) -> None:
        if prefix.endswith("_ns") or prefix.endswith("phase_windows"):
            return  # raw clock readings mean nothing to a reader
        if isinstance(value, Mapping):
            for key, inner in value.items():
                visit(f"{prefix}.{key}" if prefix else str(key), inner)
        elif _finite(value):
            facts.append(f"{prefix} = {value:.4g}")
        elif isinstance(value, str | bool):
            facts.append(f"{prefix} = {value}")
        # lists (stages, windows, reasons) are drawn or said elsewhere, not listed

    visit("", run.pattern_report.model_dump(mode="json", exclude_none=True))
    return facts


# --------------------------------------------------------------------------- derivation


@dataclass(frozen=True)
class ChartInputs:
    """What every chart builder reads: the runs, their measured requests as columns (already
    read once from the records), and the legend name of each run."""

    runs: Sequence[RunResult]
    requests: Mapping[str, RequestColumns]
    names: Mapping[str, str]
    intervals: Mapping[str, Mapping[str, tuple[float, float]]] = field(default_factory=dict)
    """run_id -> phase target (as `f"{target:g}"`) -> 95% interval of output tok/s."""

    def columns(self, run: RunResult) -> RequestColumns:
        return self.requests.get(run.run_id) or RequestColumns.empty()


ChartBuilder = Callable[[ChartInputs], Chart]


def fit_budget(
    series: list[Series], how: Literal["max", "mean"] = "mean"
) -> tuple[list[Series], str]:
    """The first MAX_SERIES series (runs come in the advisor's evidence order, best first), each
    downsampled to its share of MAX_CHART_POINTS; and a sentence saying what was left out or
    merged ("" when nothing was)."""
    kept = series[:MAX_SERIES]
    budget = MAX_CHART_POINTS // max(len(kept), 1)
    out = []
    merged = False
    for one in kept:
        xs, ys = downsample(one.x, one.y, budget, how)
        merged |= len(xs) < len(one.x)
        bars = len(xs) == len(one.x)  # error bars only on points drawn as measured
        out.append(
            Series(
                name=one.name,
                x=xs,
                y=ys,
                y_low=one.y_low if bars else None,
                y_high=one.y_high if bars else None,
            )
        )
    notes = []
    if len(series) > len(kept):
        notes.append(
            f"The first {len(kept)} of {len(series)} series are drawn (the evidence table lists "
            "every run)."
        )
    if merged:
        reduce = "peak" if how == "max" else "mean"
        notes.append(f"Long series are drawn as the {reduce} of groups of consecutive samples.")
    return out, " ".join(notes)


def _step_points(run: RunResult) -> list[tuple[float, Any]]:
    return sorted(
        (float(phase.target), phase.summary)
        for phase in run.phases
        if phase.strategy == "concurrency" and phase.summary.successful > 0
    )


def _concurrency_chart(
    inputs: ChartInputs,
    chart_id: str,
    title: str,
    y_label: str,
    value: Callable[[Any], Any],
    error_bars: bool = False,
) -> Chart:
    series: list[Series] = []
    markers: list[Marker] = []
    measured_levels = False
    with_bars = 0
    for run in inputs.runs:
        points = _step_points(run)
        measured_levels |= len({x for x, _ in points}) >= 2
        pairs = [(x, value(summary)) for x, summary in points if value(summary) is not None]
        if not pairs:
            continue
        name = inputs.names[run.run_id]
        one = Series(name=name, x=[x for x, _ in pairs], y=[y for _, y in pairs])
        found = inputs.intervals.get(run.run_id, {}) if error_bars else {}
        if found and all(f"{x:g}" in found for x, _ in pairs):
            one.y_low = [found[f"{x:g}"][0] for x, _ in pairs]
            one.y_high = [found[f"{x:g}"][1] for x, _ in pairs]
            with_bars += 1
        series.append(one)
        knee = knee_concurrency(run)
        if knee is not None:
            markers.append(Marker(label=f"knee of {name} at {knee:g}", x=knee, series=name))
    available = measured_levels and bool(series)
    drawn, note = fit_budget(series)
    if not measured_levels:
        absent = "no run measured two or more concurrency levels (a step-pattern run draws this)"
    else:
        absent = None if series else "no latency measured"
    return Chart(
        id=chart_id,
        title=title,
        x_label="concurrency (requests in flight)",
        x_integer=True,
        y_label=y_label,
        description="Each point is one measured phase (step stage) at that concurrency."
        + (" Vertical rules mark the knee of step runs." if markers else "")
        + (
            " Error bars: 95% within-run bootstrap intervals (single runs: run-to-run spread "
            "not included)."
            if with_bars
            else (" Single runs without request records: no error bars." if error_bars else "")
        )
        + (f" {note}" if note else ""),
        series=drawn if available else [],
        markers=markers[:MAX_MARKERS] if available else [],
        available=available,
        absent_reason=absent,
    )


def throughput_vs_concurrency(inputs: ChartInputs) -> Chart:
    """Output tokens/s per step stage, with the knee marked."""
    return _concurrency_chart(
        inputs,
        "throughput-vs-concurrency",
        "Output throughput vs concurrency",
        "output tokens/s",
        lambda summary: summary.output_throughput_tok_s,
        error_bars=True,
    )


E2E_P99 = catalogue_metric("e2e_ms_p99")
"""The latency the step and held-load charts plot (the axis heading is its column)."""
PER_USER, TPOT_P50, PER_GPU = (
    catalogue_metric(name)
    for name in ("tok_s_per_user", "tpot_ms_p50", "output_throughput_tok_s_per_gpu")
)
"""The configuration chart's axes (vLLM's per-GPU against per-user throughput)."""


def p99_vs_concurrency(inputs: ChartInputs) -> Chart:
    """E2E p99 per step stage, with the knee marked."""
    return _concurrency_chart(
        inputs,
        "p99-vs-concurrency",
        "P99 end-to-end latency vs concurrency",
        E2E_P99.column,
        E2E_P99.read,
    )


def latency_distribution(inputs: ChartInputs) -> Chart:
    """Share of requests per E2E latency bin (HISTOGRAM_BINS bins shared by every run)."""
    values = {
        inputs.names[run.run_id]: inputs.columns(run).e2e_ms()
        for run in inputs.runs
        if inputs.columns(run).successful
    }
    bins = histogram(values, HISTOGRAM_BINS)
    available = bool(bins.shares)
    # The extra last point closes the final step of each line.
    series, note = fit_budget(
        [
            Series(name=name, x=bins.edges, y=[*shares, shares[-1]])
            for name, shares in bins.shares.items()
        ]
    )
    return Chart(
        id="latency-distribution",
        title="End-to-end latency distribution",
        kind="step",
        x_label=f"{E2E_P99.spec.label} latency ({E2E_P99.unit})",
        y_label="% of requests",
        description=f"Successful measured requests (warm-up excluded) in {HISTOGRAM_BINS} bins, "
        "from the request records." + (f" {note}" if note else ""),
        series=series,
        available=available,
        absent_reason=None if available else "no request records were stored for the runs",
    )


def _telemetry_series(inputs: ChartInputs, field: str, scale: float, suffix: str) -> list[Series]:
    out = []
    for run in inputs.runs:
        samples = run.telemetry.samples
        points = [
            (sample.t_ns, getattr(sample, field))
            for sample in samples
            if getattr(sample, field) is not None
        ]
        if len(points) < 2:
            continue
        origin = samples[0].t_ns
        out.append(
            Series(
                name=f"{inputs.names[run.run_id]}{suffix}",
                x=[(t - origin) / NS_PER_S for t, _ in points],
                y=[value / scale for _, value in points],
            )
        )
    return out


def _missing_gpu_reason(runs: Sequence[RunResult]) -> str:
    reasons = sorted({run.telemetry.reason for run in runs if run.telemetry.reason})
    return "; ".join(reasons) if reasons else "the runs have no GPU telemetry samples"


def memory_over_time(inputs: ChartInputs) -> Chart:
    """GPU memory (and host RSS) samples; long runs keep each bucket's peak."""
    gpu = _telemetry_series(inputs, "gpu_memory_used_bytes", BYTES_PER_GB, " GPU")
    host = _telemetry_series(inputs, "host_rss_bytes", BYTES_PER_GB, " host RSS")
    description = "Sampled during each run (time from the run's first sample)."
    if not gpu and host:
        description += f" GPU memory absent: {_missing_gpu_reason(inputs.runs)}; host RSS shown."
    available = bool(gpu or host)
    series, note = fit_budget(gpu + host, how="max")
    description += f" {note}" if note else ""
    return Chart(
        id="memory-over-time",
        title="Memory over time",
        x_label="time (s)",
        y_label="memory (GB)",
        description=description,
        series=series,
        available=available,
        absent_reason=None if available else "the runs have no telemetry samples",
    )


def power_over_time(inputs: ChartInputs) -> Chart:
    """NVML board power samples; long runs are averaged over groups of consecutive samples."""
    series, note = fit_budget(_telemetry_series(inputs, "power_w", 1.0, ""))
    description = "NVML board power, sampled during each run." + (f" {note}" if note else "")
    return Chart(
        id="power-over-time",
        title="GPU power over time",
        x_label="time (s)",
        y_label="power (W)",
        description=description,
        series=series,
        available=bool(series),
        absent_reason=None if series else f"no power readings: {_missing_gpu_reason(inputs.runs)}",
    )


@dataclass(frozen=True)
class WindowChartForm:
    """The per-window p99 chart of one held-load pattern: which runs, its id, title and text."""

    load_type: type[SteadyLoad] | type[PulseLoad]
    chart_id: str
    title: str
    lead: str
    marks_burst: bool

    @property
    def pattern(self) -> str:
        return str(self.load_type.model_fields["pattern"].default)


STEADY_CHART = WindowChartForm(
    SteadyLoad,
    "steady-state-slopes",
    "Steady-state drift (p99 per window)",
    "Per-window p99; the fitted slopes (memory, host RSS, p99) from the run's analysis: ",
    marks_burst=False,
)
PULSE_CHART = WindowChartForm(
    PulseLoad,
    "pulse-recovery",
    "Pulse recovery (p99 per window)",
    "Per-window p99 around the burst; recovery from the run's analysis: ",
    marks_burst=True,
)


def _pattern_window_chart(inputs: ChartInputs, form: WindowChartForm) -> Chart:
    chosen = [run for run in inputs.runs if isinstance(run.config.load, form.load_type)]
    pattern, chart_id, title = form.pattern, form.chart_id, form.title
    if not chosen:
        reason = f"no {pattern}-pattern run among the runs in this report"
        return Chart(id=chart_id, title=title, available=False, absent_reason=reason)
    max_windows = MAX_CHART_POINTS // min(len(chosen), MAX_SERIES)
    series: list[Series] = []
    markers: list[Marker] = []
    facts: list[str] = []
    for run in chosen:
        columns = inputs.columns(run)
        if not columns.successful:
            continue
        origin = int(columns.start_ns.min())
        window_s = float(run.config.load.window_s)  # chosen runs are steady or pulse runs
        xs, ys = windowed_percentile(columns, window_s, max_windows)
        name = inputs.names[run.run_id]
        series.append(Series(name=name, x=xs, y=ys))
        for phase in run.phases:
            if form.marks_burst and "burst" in phase.name.lower():
                markers.append(
                    Marker(label=f"{name} burst start", x=(phase.start_ns - origin) / NS_PER_S)
                )
                markers.append(
                    Marker(label=f"{name} burst end", x=(phase.end_ns - origin) / NS_PER_S)
                )
        facts += [f"{name}: {fact}" for fact in pattern_facts(run)]
    if not series:
        reason = f"the {pattern}-pattern runs have no stored request records"
        return Chart(id=chart_id, title=title, available=False, absent_reason=reason)
    drawn, note = fit_budget(series, how="max")
    lead = form.lead
    return Chart(
        id=chart_id,
        title=title,
        x_label="time since first measured request (s)",
        y_label=E2E_P99.column,
        description=lead
        + ("; ".join(facts) if facts else "not reported by the run")
        + (f". {note}" if note else ""),
        series=drawn,
        markers=markers[:MAX_MARKERS],
    )


def steady_state_slopes(inputs: ChartInputs) -> Chart:
    """P99 per window of steady-pattern runs, with the run's fitted slopes as text."""
    return _pattern_window_chart(inputs, STEADY_CHART)


def pulse_recovery(inputs: ChartInputs) -> Chart:
    """P99 per window of pulse-pattern runs, the burst marked."""
    return _pattern_window_chart(inputs, PULSE_CHART)


CHART_BUILDERS: tuple[ChartBuilder, ...] = (
    throughput_vs_concurrency,
    p99_vs_concurrency,
    latency_distribution,
    memory_over_time,
    power_over_time,
    steady_state_slopes,
    pulse_recovery,
)
"""Every chart of the report, in report order. A new chart is one builder added here: it gets
the same inputs, returns one `Chart` (the model refuses more than MAX_CHART_POINTS points) and
says why when it has nothing to draw."""


def derive_charts(
    runs: Sequence[RunResult],
    requests: Mapping[str, RequestColumns],
    intervals: Mapping[str, Mapping[str, tuple[float, float]]] | None = None,
) -> list[Chart]:
    """Every chart kind of the report, each drawn only where the runs have data for it
    (`intervals`: error bars of the throughput chart, run_id -> level -> 95% interval)."""
    inputs = ChartInputs(
        runs=runs, requests=requests, names=series_names(runs), intervals=intervals or {}
    )
    charts = [builder(inputs) for builder in CHART_BUILDERS]
    if runs:
        return charts
    reason = "no stored runs were included in this report"
    return [
        Chart(id=chart.id, title=chart.title, available=False, absent_reason=reason)
        for chart in charts
    ]


# --------------------------------------------------------------------------- rendering


def inline(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """A layer's data written into the spec itself, as Vega-Lite's inline data object. Not a
    DataFrame: altair converts those with its global data transformer, which Streamlit swaps
    for its own while it draws a chart in another session's thread: stack samples of the app
    under load caught a report chart being converted by Streamlit's transformer, which leaves
    the spec naming datasets it does not carry. Not `alt.InlineData` either: altair validates
    that against the schema as it is made, value by value (half a new report's chart time in
    the app; the spec is the same). Non-finite numbers become null, as pandas would write them."""

    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and not math.isfinite(value) else value

    return {"values": [{key: clean(value) for key, value in row.items()} for row in rows]}


VALIDATE_SPECS = False
"""Whether `vega_lite_spec` checks its spec against the Vega-Lite schema (tests turn it on)."""


def vega_lite_spec(chart: Chart) -> dict[str, Any]:
    """The chart as a Vega-Lite spec (altair), ready for vl-convert."""
    import altair as alt
    import pandas as pd

    rows = [
        {"series": series.name, "x": x, "y": y}
        for series in chart.series
        for x, y in zip(series.x, series.y, strict=False)
    ]
    domain = [series.name for series in chart.series]
    color = alt.Color(
        "series:N",
        title=None,
        scale=alt.Scale(domain=domain, scheme="tableau10" if len(domain) <= 10 else "tableau20"),
        legend=alt.Legend(orient="bottom", columns=2, labelLimit=320),
    )
    if chart.x_integer:
        # Ticks exactly at the measured levels (1, 2, 4...), never at 1.5; padding keeps the
        # end points off the frame.
        levels = sorted({x for series in chart.series for x in series.x})
        axis = alt.Axis(values=levels, format="d") if len(levels) <= 20 else alt.Axis(format="d")
        scale = alt.Scale(zero=False, nice=False, padding=14)
    else:
        axis, scale = alt.Axis(), alt.Scale(zero=False, nice=True)
    x = alt.X("x:Q", title=chart.x_label, scale=scale, axis=axis)
    y = alt.Y("y:Q", title=chart.y_label, scale=alt.Scale(zero=True, nice=True))
    base = alt.Chart(inline(rows))
    if chart.kind == "step":
        layer = base.mark_line(interpolate="step-after", strokeWidth=2).encode(x, y, color)
    elif chart.kind == "bar":
        layer = base.mark_bar().encode(x, y, color)
    else:
        dots = max((len(series.x) for series in chart.series), default=0) <= POINT_MARKS_MAX
        layer = base.mark_line(point=dots, strokeWidth=2).encode(x, y, color)
    layers: list[Any] = [layer]
    bars = [
        {"series": series.name, "x": x, "low": low, "high": high}
        for series in chart.series
        if series.y_low is not None and series.y_high is not None
        for x, low, high in zip(series.x, series.y_low, series.y_high, strict=False)
    ]
    if bars:  # 95% intervals as vertical error bars, in the series' colour
        layers.append(
            alt.Chart(inline(bars))
            .mark_rule(strokeWidth=1.5)
            .encode(x=alt.X("x:Q"), y=alt.Y("low:Q"), y2="high:Q", color=color)
        )
    if chart.markers:
        marker_frame = pd.DataFrame([{"x": m.x, "label": m.label} for m in chart.markers])
        rules = alt.Chart(inline(marker_frame.to_dict("records"))).mark_rule(
            strokeDash=[4, 3], color="#555"
        )
        # Staggered labels do not overprint each other; a marker in the right half of the plot
        # (the knee is often the last stage) is labelled to its left, one in the left half to
        # its right, so the label stays inside the plot.
        marker_frame["row"] = [2 + 13 * (index % 3) for index in range(len(marker_frame))]
        xs = [x for series in chart.series for x in series.x] + list(marker_frame["x"])
        middle = (min(xs) + max(xs)) / 2
        layers.append(rules.encode(x=alt.X("x:Q")))
        for align, dx, side in (("right", -4, marker_frame["x"] >= middle), ("left", 4, None)):
            part = (
                marker_frame[side] if side is not None else marker_frame[marker_frame["x"] < middle]
            )
            if part.empty:
                continue
            labels = alt.Chart(inline(part.to_dict("records"))).mark_text(
                align=align, baseline="top", dx=dx, fontSize=10, color="#333"
            )
            layers.append(
                labels.encode(x=alt.X("x:Q"), y=alt.Y("row:Q", scale=None), text="label:N")
            )
        points = [{"x": m.x, "y": m.y} for m in chart.markers if m.y is not None]
        if points:  # a marked point (the recommended configuration on the Pareto chart)
            layers.append(
                alt.Chart(inline(points))
                .mark_point(shape="diamond", size=160, filled=True, color="#d62728")
                .encode(x=alt.X("x:Q"), y=alt.Y("y:Q"))
            )
    composed = alt.layer(*layers).properties(
        width=CHART_WIDTH_PX, height=CHART_HEIGHT_PX, title=chart.title
    )
    composed = composed.configure(font="DejaVu Sans").configure_view(stroke="#ccc")
    # Not validated against Vega-Lite's schema on every draw (a third of a chart's time in the
    # app's reports): tests/advisor/report validates each kind of chart once.
    return composed.to_dict(validate=VALIDATE_SPECS)


def render_svg(chart: Chart) -> str:
    """Static SVG of an available chart (text kept as text, so it scales and prints crisply)."""
    if not chart.available:
        raise ValueError(f"chart {chart.id!r} is absent: {chart.absent_reason}")
    import vl_convert

    return vl_convert.vegalite_to_svg(vega_lite_spec(chart))


def render_svg_json(chart_json: str) -> str:
    """`render_svg` of a chart given as its JSON: what the app's chart processes are sent
    (ui/chart_renderer.py; a plain string crosses a process boundary cheaply)."""
    return render_svg(Chart.model_validate_json(chart_json))


def render_png(chart: Chart, scale: float = 2.0) -> bytes:
    """PNG of an available chart at `scale` x its CSS size (2 = crisp on high-DPI and print)."""
    if not chart.available:
        raise ValueError(f"chart {chart.id!r} is absent: {chart.absent_reason}")
    import vl_convert

    return vl_convert.vegalite_to_png(vega_lite_spec(chart), scale=scale)


def render_all_svg(charts: Iterable[Chart]) -> dict[str, str]:
    """SVG text per available chart id (rendered once, shared by every format of one call)."""
    return {chart.id: render_svg(chart) for chart in charts if chart.available}


# --------------------------------------------------------------------------- configurations

PARETO_MAX_CONFIGURATIONS = 6
"""The chart shows the best few configurations of the search (bounded: 6 x 2 series)."""


def pareto_chart(search: ConfigurationSearch | None) -> Chart:
    """Output tok/s per GPU (y) against tok/s per user = 1000 / TPOT p50 (x), the axes of vLLM's
    `bench sweep plot_pareto` and AIPerf: one estimated series per configuration over the load
    ladder, one measured series where stored runs exist, the recommended point marked."""
    chart_id, title = "pareto-per-gpu-vs-per-user", "Throughput per GPU vs speed per user"
    if search is None or not search.estimates:
        return Chart(
            id=chart_id,
            title=title,
            available=False,
            absent_reason="no configuration search (a generate stage with a GPU type and a "
            "known model size is needed)",
        )
    series: list[Series] = []
    for estimate in search.estimates[:PARETO_MAX_CONFIGURATIONS]:
        ladder = sorted(estimate.ladder, key=lambda p: p.tok_s_per_user)
        series.append(
            Series(
                name=f"{estimate.label} (estimate)",
                x=[p.tok_s_per_user for p in ladder],
                y=[p.output_throughput_tok_s_per_gpu for p in ladder],
            )
        )
        measured = sorted(estimate.measured, key=lambda m: m.measured_tok_s_per_user)
        if measured:
            series.append(
                Series(
                    name=f"{estimate.label} (measured)",
                    x=[m.measured_tok_s_per_user for m in measured],
                    y=[m.measured_tok_s_per_gpu for m in measured],
                )
            )
    best = search.estimates[0]
    markers: list[Marker] = []
    point = next((m for m in best.measured if m.concurrency == search.concurrency), None)
    if point is not None:
        x, y = point.measured_tok_s_per_user, point.measured_tok_s_per_gpu
    elif best.prediction is not None:
        x, y = best.prediction.tok_s_per_user, best.prediction.output_throughput_tok_s_per_gpu
    else:
        x = y = None
    if x is not None:
        basis = "measured" if point is not None else "estimate"
        markers.append(
            Marker(
                label=f"recommended: {best.label}, c={search.concurrency} ({basis})",
                x=x,
                y=y,
                series=f"{best.label} ({basis})",
            )
        )
    return Chart(
        id=chart_id,
        title=title,
        kind="line",
        x_label=f"{PER_USER.label} (1000 / {TPOT_P50.label} {TPOT_P50.unit})",
        y_label=PER_GPU.label,
        description="Each line is one configuration over concurrency 1, 16, 64, 256 and the "
        "profile's; up and to the right is better. Estimates come from the serving model's "
        "step time with its calibrated factors (their leave-one-out error in the "
        "recommendation); measured lines are stored runs of exactly that configuration.",
        series=series,
        markers=markers,
    )
