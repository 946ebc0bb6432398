"""Report charts: chart data derived from runs, records and telemetry, rendered to static SVG/PNG.

Derivation (`derive_charts`) yields one `Chart` per kind the issue lists; a chart the runs have no
data for is kept with `available=False` and the reason, so every format can say what is absent.
Rendering uses altair + vl-convert (no browser, no network), imported only when drawing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from advisor.report.model import Chart, Marker, Series
from bench.schema import RequestRecord, RunResult

CHART_WIDTH_PX = 560
CHART_HEIGHT_PX = 250
HISTOGRAM_BINS = 30
NS_PER_MS = 1e6
NS_PER_S = 1e9
BYTES_PER_GB = 1e9


# --------------------------------------------------------------------------- naming


def series_names(runs: Sequence[RunResult]) -> dict[str, str]:
    """A short legend name per run: the backend, then its load pattern when a backend ran more
    than once, then a numbered suffix when even that repeats."""
    backends = [run.config.backend for run in runs]
    names: dict[str, str] = {}
    for run in runs:
        name = run.config.backend
        if backends.count(name) > 1:
            name = f"{name} {run.config.load.pattern}"
        names[run.run_id] = name
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
    """Concurrency of the knee stage from a step run's pattern_report, if it names one."""
    knee = run.pattern_report.get("knee")
    if isinstance(knee, Mapping):
        for key in ("concurrency", "target"):
            if _finite(knee.get(key)):
                return float(knee[key])
        stage = knee.get("stage") if "stage" in knee else knee.get("index")
        knee = stage
    if isinstance(knee, str):
        for phase in run.phases:
            if phase.name == knee:
                return float(phase.target)
    if isinstance(knee, int) and not isinstance(knee, bool) and 0 <= knee < len(run.phases):
        return float(run.phases[knee].target)
    for key in ("knee_concurrency", "knee_target"):
        if _finite(run.pattern_report.get(key)):
            return float(run.pattern_report[key])
    return None


def pattern_facts(run: RunResult) -> list[str]:
    """Scalar facts of a pattern_report (knee, capacity, slopes, recovery) as short lines."""
    facts: list[str] = []

    def visit(prefix: str, value: Any) -> None:
        if prefix.endswith("_ns") or prefix.endswith("phase_windows"):
            return  # raw clock readings mean nothing to a reader
        if isinstance(value, Mapping):
            for key, inner in value.items():
                visit(f"{prefix}.{key}" if prefix else str(key), inner)
        elif _finite(value):
            facts.append(f"{prefix} = {value:.4g}")
        elif isinstance(value, str | bool) or value is None:
            facts.append(f"{prefix} = {value}")

    for key, value in run.pattern_report.items():
        if key in ("stages", "windows", "series"):
            continue  # per-stage/per-window data is drawn, not listed
        visit(str(key), value)
    return facts


# --------------------------------------------------------------------------- derivation


def _measured(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    return [record for record in records if not record.warmup]


def _concurrency_charts(runs: Sequence[RunResult], names: Mapping[str, str]) -> list[Chart]:
    throughput: list[Series] = []
    p99: list[Series] = []
    markers_tput: list[Marker] = []
    markers_p99: list[Marker] = []
    for run in runs:
        points = sorted(
            (phase.target, phase.summary)
            for phase in run.phases
            if phase.strategy == "concurrency" and phase.summary.successful > 0
        )
        if not points:
            continue
        name = names[run.run_id]
        xs = [float(target) for target, _ in points]
        tput = [summary.output_throughput_tok_s for _, summary in points]
        throughput.append(Series(name=name, x=xs, y=tput))
        p99_points = [(float(t), s.e2e_ms.p99) for t, s in points if s.e2e_ms is not None]
        if p99_points:
            p99.append(
                Series(name=name, x=[x for x, _ in p99_points], y=[y for _, y in p99_points])
            )
        knee = knee_concurrency(run)
        if knee is not None:
            label = f"knee of {name} at {knee:g}"
            markers_tput.append(Marker(label=label, x=knee, series=name))
            markers_p99.append(Marker(label=label, x=knee, series=name))
    enough = any(len(set(series.x)) >= 2 for series in throughput)
    absent = (
        None
        if enough
        else "no run measured two or more concurrency levels (a step-pattern run draws this)"
    )
    description = "Each point is one measured phase (step stage) at that concurrency."
    return [
        Chart(
            id="throughput-vs-concurrency",
            title="Output throughput vs concurrency",
            x_label="concurrency (requests in flight)",
            x_integer=True,
            y_label="output tokens/s",
            description=description + " Vertical rules mark the knee of step runs.",
            series=throughput if enough else [],
            markers=markers_tput if enough else [],
            available=enough,
            absent_reason=absent,
        ),
        Chart(
            id="p99-vs-concurrency",
            title="P99 end-to-end latency vs concurrency",
            x_label="concurrency (requests in flight)",
            x_integer=True,
            y_label="E2E p99 (ms)",
            description=description,
            series=p99 if enough else [],
            markers=markers_p99 if enough else [],
            available=enough and bool(p99),
            absent_reason=absent if not enough else (None if p99 else "no latency measured"),
        ),
    ]


def _histogram(values_by_name: Mapping[str, list[float]], bins: int) -> list[Series]:
    everything = [value for values in values_by_name.values() for value in values]
    low, high = min(everything), max(everything)
    if high <= low:
        high = low + max(abs(low) * 0.01, 1e-3)
    width = (high - low) / bins
    edges = [low + width * index for index in range(bins + 1)]
    series = []
    for name, values in values_by_name.items():
        counts = [0] * bins
        for value in values:
            counts[min(int((value - low) / width), bins - 1)] += 1
        total = len(values)
        # Share of the run's requests per bin, so runs of different sizes compare; the extra
        # last point closes the final step.
        shares = [100.0 * count / total for count in counts]
        series.append(Series(name=name, x=edges, y=[*shares, shares[-1]]))
    return series


def _latency_chart(
    runs: Sequence[RunResult], records: Mapping[str, list[RequestRecord]], names: Mapping[str, str]
) -> Chart:
    values: dict[str, list[float]] = {}
    for run in runs:
        ok = [r for r in _measured(records.get(run.run_id, [])) if r.ok]
        if ok:
            values[names[run.run_id]] = [(r.end_ns - r.start_ns) / NS_PER_MS for r in ok]
    chart = Chart(
        id="latency-distribution",
        title="End-to-end latency distribution",
        kind="step",
        x_label="E2E latency (ms)",
        y_label="% of requests",
        description="Successful measured requests (warm-up excluded), from the request records.",
    )
    if not values:
        chart.available = False
        chart.absent_reason = "no request records were stored for the runs"
        return chart
    chart.series = _histogram(values, HISTOGRAM_BINS)
    return chart


def _telemetry_series(
    runs: Sequence[RunResult], names: Mapping[str, str], field: str, scale: float, suffix: str
) -> list[Series]:
    out = []
    for run in runs:
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
                name=f"{names[run.run_id]}{suffix}",
                x=[(t - origin) / NS_PER_S for t, _ in points],
                y=[value / scale for _, value in points],
            )
        )
    return out


def _missing_gpu_reason(runs: Sequence[RunResult]) -> str:
    reasons = sorted({run.telemetry.reason for run in runs if run.telemetry.reason})
    return "; ".join(reasons) if reasons else "the runs have no GPU telemetry samples"


def _memory_chart(runs: Sequence[RunResult], names: Mapping[str, str]) -> Chart:
    gpu = _telemetry_series(runs, names, "gpu_memory_used_bytes", BYTES_PER_GB, " GPU")
    host = _telemetry_series(runs, names, "host_rss_bytes", BYTES_PER_GB, " host RSS")
    description = "Sampled during each run (time from the run's first sample)."
    if not gpu and host:
        description += f" GPU memory absent: {_missing_gpu_reason(runs)}; host RSS shown."
    available = bool(gpu or host)
    return Chart(
        id="memory-over-time",
        title="Memory over time",
        x_label="time (s)",
        y_label="memory (GB)",
        description=description,
        series=gpu + host,
        available=available,
        absent_reason=None if available else "the runs have no telemetry samples",
    )


def _power_chart(runs: Sequence[RunResult], names: Mapping[str, str]) -> Chart:
    power = _telemetry_series(runs, names, "power_w", 1.0, "")
    return Chart(
        id="power-over-time",
        title="GPU power over time",
        x_label="time (s)",
        y_label="power (W)",
        description="NVML board power, sampled during each run.",
        series=power,
        available=bool(power),
        absent_reason=None if power else f"no power readings: {_missing_gpu_reason(runs)}",
    )


def _windowed_p99(
    records: list[RequestRecord], window_s: float, origin_ns: int
) -> tuple[list[float], list[float]]:
    """P99 E2E latency (ms) of requests by the window in which they finished."""
    window_ns = max(window_s, 1e-3) * NS_PER_S
    buckets: dict[int, list[float]] = {}
    for record in records:
        if record.ok:
            index = int((record.end_ns - origin_ns) // window_ns)
            buckets.setdefault(index, []).append((record.end_ns - record.start_ns) / NS_PER_MS)
    xs, ys = [], []
    for index in sorted(buckets):
        latencies = sorted(buckets[index])
        rank = min(len(latencies) - 1, max(0, math.ceil(0.99 * len(latencies)) - 1))
        xs.append((index + 1) * window_ns / NS_PER_S)
        ys.append(latencies[rank])
    return xs, ys


def _pattern_window_chart(
    runs: Sequence[RunResult],
    records: Mapping[str, list[RequestRecord]],
    names: Mapping[str, str],
    pattern: str,
) -> Chart:
    chosen = [run for run in runs if run.config.load.pattern == pattern]
    steady = pattern == "steady"
    chart = Chart(
        id="steady-state-slopes" if steady else "pulse-recovery",
        title="Steady-state drift (p99 per window)"
        if steady
        else "Pulse recovery (p99 per window)",
        x_label="time since first measured request (s)",
        y_label="E2E p99 (ms)",
    )
    if not chosen:
        chart.available = False
        chart.absent_reason = f"no {pattern}-pattern run among the runs in this report"
        return chart
    facts: list[str] = []
    for run in chosen:
        measured = _measured(records.get(run.run_id, []))
        if not measured:
            continue
        origin = min(record.start_ns for record in measured)
        window_s = float(getattr(run.config.load, "window_s", 1.0))
        xs, ys = _windowed_p99(measured, window_s, origin)
        name = names[run.run_id]
        chart.series.append(Series(name=name, x=xs, y=ys))
        for phase in run.phases:
            if not steady and "burst" in phase.name.lower():
                chart.markers.append(
                    Marker(label=f"{name} burst start", x=(phase.start_ns - origin) / NS_PER_S)
                )
                chart.markers.append(
                    Marker(label=f"{name} burst end", x=(phase.end_ns - origin) / NS_PER_S)
                )
        facts += [f"{name}: {fact}" for fact in pattern_facts(run)]
    if not chart.series:
        chart.available = False
        chart.absent_reason = f"the {pattern}-pattern runs have no stored request records"
        return chart
    lead = (
        "Per-window p99; the fitted slopes (memory, host RSS, p99) from the run's analysis: "
        if steady
        else "Per-window p99 around the burst; recovery from the run's analysis: "
    )
    chart.description = lead + ("; ".join(facts) if facts else "not reported by the run")
    return chart


def derive_charts(
    runs: Sequence[RunResult], records: Mapping[str, list[RequestRecord]]
) -> list[Chart]:
    """Every chart kind of the report, each drawn only where the runs have data for it."""
    names = series_names(runs)
    if not runs:
        reason = "no stored runs were included in this report"
        kinds = [
            ("throughput-vs-concurrency", "Output throughput vs concurrency"),
            ("p99-vs-concurrency", "P99 end-to-end latency vs concurrency"),
            ("latency-distribution", "End-to-end latency distribution"),
            ("memory-over-time", "Memory over time"),
            ("power-over-time", "GPU power over time"),
            ("steady-state-slopes", "Steady-state drift (p99 per window)"),
            ("pulse-recovery", "Pulse recovery (p99 per window)"),
        ]
        return [
            Chart(id=chart_id, title=title, available=False, absent_reason=reason)
            for chart_id, title in kinds
        ]
    return [
        *_concurrency_charts(runs, names),
        _latency_chart(runs, records, names),
        _memory_chart(runs, names),
        _power_chart(runs, names),
        _pattern_window_chart(runs, records, names, "steady"),
        _pattern_window_chart(runs, records, names, "pulse"),
    ]


# --------------------------------------------------------------------------- rendering


def vega_lite_spec(chart: Chart) -> dict[str, Any]:
    """The chart as a Vega-Lite spec (altair), ready for vl-convert."""
    import altair as alt
    import pandas as pd

    rows = [
        {"series": series.name, "x": x, "y": y}
        for series in chart.series
        for x, y in zip(series.x, series.y, strict=False)
    ]
    frame = pd.DataFrame(rows, columns=["series", "x", "y"])
    domain = [series.name for series in chart.series]
    color = alt.Color(
        "series:N",
        title=None,
        scale=alt.Scale(domain=domain, scheme="tableau10"),
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
    base = alt.Chart(frame)
    if chart.kind == "step":
        layer = base.mark_line(interpolate="step-after", strokeWidth=2).encode(x, y, color)
    elif chart.kind == "bar":
        layer = base.mark_bar().encode(x, y, color)
    else:
        layer = base.mark_line(point=True, strokeWidth=2).encode(x, y, color)
    layers: list[Any] = [layer]
    if chart.markers:
        marker_frame = pd.DataFrame([{"x": m.x, "label": m.label} for m in chart.markers])
        rules = alt.Chart(marker_frame).mark_rule(strokeDash=[4, 3], color="#555")
        # Right-aligned, staggered labels stay inside the plot even for a marker at the right
        # edge (the knee is often the last stage) and do not overprint each other.
        marker_frame["row"] = [2 + 13 * (index % 3) for index in range(len(marker_frame))]
        labels = alt.Chart(marker_frame).mark_text(
            align="right", baseline="top", dx=-4, fontSize=10, color="#333"
        )
        layers.append(rules.encode(x=alt.X("x:Q")))
        layers.append(labels.encode(x=alt.X("x:Q"), y=alt.Y("row:Q", scale=None), text="label:N"))
    composed = alt.layer(*layers).properties(
        width=CHART_WIDTH_PX, height=CHART_HEIGHT_PX, title=chart.title
    )
    composed = composed.configure(font="DejaVu Sans").configure_view(stroke="#ccc")
    return composed.to_dict()


def render_svg(chart: Chart) -> str:
    """Static SVG of an available chart (text kept as text, so it scales and prints crisply)."""
    if not chart.available:
        raise ValueError(f"chart {chart.id!r} is absent: {chart.absent_reason}")
    import vl_convert

    return vl_convert.vegalite_to_svg(vega_lite_spec(chart))


def render_png(chart: Chart, scale: float = 2.0) -> bytes:
    """PNG of an available chart at `scale` x its CSS size (2 = crisp on high-DPI and print)."""
    if not chart.available:
        raise ValueError(f"chart {chart.id!r} is absent: {chart.absent_reason}")
    import vl_convert

    return vl_convert.vegalite_to_png(vega_lite_spec(chart), scale=scale)


def render_all_svg(charts: Iterable[Chart]) -> dict[str, str]:
    """SVG text per available chart id (rendered once, shared by every format of one call)."""
    return {chart.id: render_svg(chart) for chart in charts if chart.available}
