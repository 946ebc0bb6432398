"""Small shared widgets and formatters for the pages (labels, numbers with units, run tables).

Display only: every figure shown here was computed by `bench` or `advisor`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
import streamlit as st
from pydantic import BaseModel

from advisor.report.numbers import figure
from bench.core.metric_catalog import METRICS_BY_NAME, SPECS_BY_KEY, Metric
from bench.core.metric_catalog import metric as catalogue_metric
from bench.core.schema import RunResult, RunStatus

STATUS_ICONS = {
    RunStatus.QUEUED.value: ":material/schedule:",
    RunStatus.RUNNING.value: ":material/progress_activity:",
    RunStatus.COMPLETED.value: ":material/check_circle:",
    RunStatus.FAILED.value: ":material/error:",
    RunStatus.STOPPED.value: ":material/stop_circle:",
}
STATUS_COLORS = {
    RunStatus.QUEUED.value: "gray",
    RunStatus.RUNNING.value: "blue",
    RunStatus.COMPLETED.value: "green",
    RunStatus.FAILED.value: "red",
    RunStatus.STOPPED.value: "orange",
}


def field_help(model: type[BaseModel], name: str) -> str | None:
    """The pydantic Field description: the one help text shared by CLI, YAML docs and the form."""
    field = model.model_fields.get(name)
    return field.description if field is not None else None


def yes_no(label: str, value: bool, key: str, help: str | None = None) -> bool:
    """A yes/no question as two radio options (clearer than a checkbox for a questionnaire)."""
    answer = st.radio(
        label, ["No", "Yes"], index=1 if value else 0, key=key, help=help, horizontal=True
    )
    return answer == "Yes"


def status_badge(status: str) -> None:
    st.badge(status.title(), icon=STATUS_ICONS.get(status), color=STATUS_COLORS.get(status, "gray"))


def _catalogued(name: str | None) -> Metric | None:
    """The catalogue's metric of a metric name (`ttft_ms_p99`) or of a spec key (`ttft_ms`)."""
    if not name:
        return None
    known = METRICS_BY_NAME.get(name)
    if known is None and name in SPECS_BY_KEY:
        known = Metric(SPECS_BY_KEY[name])
    return known


def metric_unit(name: str | None) -> str:
    """The catalogued unit of a metric name (`ttft_ms_p99` -> `ms`); "" for a name it lacks."""
    known = _catalogued(name)
    return known.unit if known is not None else ""


def metric_label(name: str | None) -> str:
    """The catalogued label of a metric name (`output_throughput_tok_s` -> `output throughput`,
    `e2e_ms_p99` -> `E2E p99`), for a table cell beside its unit; the name with spaces for a
    name the catalogue lacks, "—" for none."""
    if not name:
        return "—"
    known = _catalogued(name)
    return known.label if known is not None else name.replace("_", " ")


def format_bytes_gb(value: int | float | None) -> str:
    return "—" if value is None else f"{value / 1e9:,.2f} GB"


def run_title(run: RunResult) -> str:
    """`vllm · llama-2-7b · step · 20261129-101500` — how a run is named across the pages."""
    return f"{run.config.backend} · {run.config.model} · {run.config.load.pattern} · {run.run_id}"


def runs_frame(runs: Iterable[RunResult]) -> pd.DataFrame:
    """One row per run with its headline figures (the stored summaries, nothing recomputed)."""
    rows: list[dict[str, Any]] = []  # a DataFrame's rows: column heading -> cell, for display
    for run in runs:
        summary = run.summary
        rows.append(
            {
                "run_id": run.run_id,
                "created": run.created_at[:19].replace("T", " "),
                "backend": run.config.backend,
                "model": run.config.model,
                "precision": run.config.precision.label(),
                "pattern": run.config.load.pattern,
                "status": run.status.value,
                "validity": run.validity.status.value if run.validity else "—",
                "device": device_of(run),
                "requests": summary.successful if summary else None,
                **{heading: metric.read(summary, run) for heading, metric, _ in RUN_METRIC_COLUMNS},
                "label": run.config.label or "",
            }
        )
    return pd.DataFrame(rows)


def device_of(run: RunResult) -> str:
    """The name of the run's first GPU as its environment recorded it, else "CPU"."""
    name = run.environment.primary_gpu_name if run.environment else None
    return name or "CPU"


OUTPUT_THROUGHPUT, REQUEST_RATE, ERROR_RATE = (
    catalogue_metric(name)
    for name in ("output_throughput_tok_s", "request_throughput_rps", "error_rate")
)
SAMPLE_THROUGHPUT = catalogue_metric("sample_throughput_per_s")
RUN_METRIC_COLUMNS: tuple[tuple[str, Metric, str], ...] = (
    (f"output {OUTPUT_THROUGHPUT.unit}", OUTPUT_THROUGHPUT, "%.1f"),
    # A forward run's throughput (generate runs leave it empty, as forward runs leave the token
    # columns: the catalogue reads a metric only for the kinds it means something for).
    (SAMPLE_THROUGHPUT.unit, SAMPLE_THROUGHPUT, "%.1f"),
    (REQUEST_RATE.unit, REQUEST_RATE, "%.2f"),
    *(
        (metric.column, metric, number_format)
        for metric, number_format in (
            (catalogue_metric("ttft_ms_p99"), "%.1f"),
            (catalogue_metric("tpot_ms_p99"), "%.2f"),
            (catalogue_metric("e2e_ms_p99"), "%.1f"),
        )
    ),
    (ERROR_RATE.label, ERROR_RATE, "percent"),
    ("peak GPU mem (GB)", catalogue_metric("peak_gpu_memory_gb"), "%.2f"),
)
"""The catalogued metrics of `runs_frame`: column heading, metric, number format. The headings
are the table's compact ones (`output tok/s`, `req/s`, `peak GPU mem (GB)`: a narrow table),
built from the catalogue's units and labels where they are the same words."""
RUN_COLUMN_OF: dict[str, str] = {metric.name: heading for heading, metric, _ in RUN_METRIC_COLUMNS}
"""A catalogued metric's column in `runs_frame` (`e2e_ms_p99` -> `E2E p99 (ms)`)."""

RUN_COLUMN_CONFIG = {
    heading: st.column_config.NumberColumn(format=number_format)
    for heading, _, number_format in RUN_METRIC_COLUMNS
}


RUN_FIGURE_UNITS = {
    "requests": "",
    **{
        heading: metric.unit
        for heading, metric, number_format in RUN_METRIC_COLUMNS
        if number_format != "percent"  # shares are shown as percentages by runs_display
    },
}
"""The figure columns of `runs_frame` and the unit each cell is shown with."""


def runs_display(frame: pd.DataFrame) -> pd.DataFrame:
    """`runs_frame` as shown: every figure with its unit and "—" where it was not measured
    (a missing cell reads "None" otherwise); the numeric frame stays for charts and filters."""
    shown = frame.copy()
    for column, unit in RUN_FIGURE_UNITS.items():
        if column in shown:
            shown[column] = [figure(None if pd.isna(v) else float(v), unit) for v in frame[column]]
    if ERROR_RATE.label in shown:
        shown[ERROR_RATE.label] = [
            "—" if pd.isna(v) else f"{float(v):.1%}" for v in frame[ERROR_RATE.label]
        ]
    return shown


def ratio_with_interval(verdict: Any) -> str:
    """`1.18x (95% CI 1.10-1.27, ±7%)` for a verdict's ratio, "—" without one."""
    if verdict.ratio is None:
        return "—"
    text = f"{verdict.ratio:.3g}x"
    interval = verdict.interval
    if interval is None:
        return text + " (no interval: no per-request records)"
    half = (interval.high - interval.low) / 2 / verdict.ratio if verdict.ratio else None
    spread = f", ±{half:.0%}" if half is not None else ""
    return f"{text} (95% CI {interval.low:.3g}–{interval.high:.3g}{spread})"


def verdict_rows(verdicts: Iterable[Any]) -> pd.DataFrame:
    """The recommendation's verdicts (advisor.decide.recommend.Recommendation.verdicts) as a table:
    who against whom, on what, the ratio with its interval, the verdict, and how many runs
    ("single run" where either side is one: its interval is within-run only)."""
    return pd.DataFrame(
        [
            {
                "leader": v.leader,
                "against": v.alternative,
                "metric": f"{metric_label(v.metric)} ({v.better} is better)",
                "leader / against": figure(v.leader_value, metric_unit(v.metric))
                + " / "
                + figure(v.alternative_value, metric_unit(v.metric)),
                "ratio": ratio_with_interval(v),
                "verdict": f"{v.verdict} (threshold {v.threshold:.0%})",
                "runs": "single run"
                if v.single_run
                else f"{v.leader_repeats} vs {v.alternative_repeats} repeats",
            }
            for v in verdicts
        ],
        columns=["leader", "against", "metric", "leader / against", "ratio", "verdict", "runs"],
    )


def empty_state(message: str, next_step: str | None = None) -> None:
    """An empty section says what is missing and what to do about it."""
    st.info(message + (f"  \n{next_step}" if next_step else ""), icon=":material/info:")


def pareto_front(points: list[tuple[float, float]]) -> list[bool]:
    """For (throughput, latency) points: True where no other point has higher-or-equal
    throughput and lower-or-equal latency with at least one strictly better."""
    flags = []
    for throughput, latency in points:
        dominated = any(
            other_t >= throughput
            and other_l <= latency
            and (other_t > throughput or other_l < latency)
            for other_t, other_l in points
        )
        flags.append(not dominated)
    return flags
