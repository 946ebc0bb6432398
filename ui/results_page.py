"""Results page: every stored run, filterable; side-by-side comparison, curves and diagnostics.

Measurements come from the results store; the article's published A100 table is shown in
its own labelled section and never mixed into a chart or table of measurements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import altair as alt
import pandas as pd
import streamlit as st

from advisor.report.numbers import fixed
from bench.core.errors import UserError
from bench.core.metric_catalog import SPECS_BY_KEY, Metric
from bench.core.metric_catalog import metric as catalogue_metric
from bench.core.prediction import drift_words
from bench.core.schema import RunResult, RunStatus
from ui import state
from ui.components import (
    RUN_COLUMN_OF,
    device_of,
    empty_state,
    pareto_front,
    run_title,
    runs_display,
    runs_frame,
    verdict_rows,
)

if TYPE_CHECKING:
    from advisor.decide.diagnose import Diagnostic
    from advisor.report.aggregate import RequestColumns

MAX_COMPARED = 8

OUTPUT_METRIC = catalogue_metric("output_throughput_tok_s")
E2E_METRIC = catalogue_metric("e2e_ms_p99")
OUTPUT_COLUMN, E2E_COLUMN = RUN_COLUMN_OF[OUTPUT_METRIC.name], RUN_COLUMN_OF[E2E_METRIC.name]
"""The runs table's throughput and latency columns the step and Pareto charts plot."""
PEAK_GPU_MEMORY = catalogue_metric("peak_gpu_memory_gb")


@st.cache_data(ttl=60, max_entries=32, show_spinner=False)
def request_columns(run_id: str, store_location: str | None) -> RequestColumns:
    """A finished run's measured records read once into columns (a few numbers per request,
    not the records); every chart below is aggregated from these in Python."""
    from advisor.report.aggregate import RequestColumns

    return RequestColumns.from_records(state.get_store().iter_records(run_id))


@st.cache_data(ttl=600, max_entries=2, show_spinner=False)
def reference_table() -> tuple[Any, str | None]:
    """The article's published table (advisor.report's loader) or why it is missing."""
    from advisor.report.reference import SEED_REFERENCE_FILE, load_reference
    from advisor.sizing.measured import DEFAULT_REFERENCE_DIR

    path = DEFAULT_REFERENCE_DIR / SEED_REFERENCE_FILE
    if not path.is_file():
        return None, f"{SEED_REFERENCE_FILE} is not in data/reference"
    return load_reference(path), None


@st.cache_data(ttl=600, max_entries=2, show_spinner=False)
def shipped_measurements() -> dict[str, list[RunResult]]:
    """Measured runs shipped in data/reference (the advisor's own loader)."""
    from advisor.sizing.measured import measured_reference_runs

    return measured_reference_runs()


@st.cache_data(ttl=60, max_entries=64, show_spinner=False)
def run_diagnostics(run_id: str, store_location: str | None) -> list[Diagnostic]:
    from advisor.decide.diagnose import diagnose

    return diagnose(state.get_store().get_run(run_id))


# --------------------------------------------------------------------------- sections


def filters(frame: pd.DataFrame) -> pd.DataFrame:
    columns = st.columns(4)
    chosen = {}
    for column, name in zip(columns, ("backend", "model", "status", "validity"), strict=True):
        options = sorted(frame[name].dropna().unique())
        chosen[name] = column.multiselect(name.title(), options, placeholder="any")
    for name, values in chosen.items():
        if values:
            frame = frame[frame[name].isin(values)]
    return frame


def compare(runs: list[RunResult]) -> None:
    st.subheader("Side by side")
    columns = side_by_side(runs)
    table = pd.DataFrame(columns)
    st.dataframe(table, width="stretch", height=35 * (len(table) + 1) + 3)


def _shown_for(runs: list[RunResult], name: str) -> bool:
    """Whether a catalogued figure has a row: some selected run is of a kind it means something
    for (a table of forward runs has no TTFT or output-token rows)."""
    kinds = catalogue_metric(name).spec.kinds
    return any(run.config.workload.kind in kinds for run in runs)


def side_by_side(runs: list[RunResult]) -> dict[str, dict[str, str]]:
    """The side-by-side table, one column per run: its settings and its figures in the units
    of its kind (bench.core.metric_catalog: a forward run in samples/s and batch latency)."""
    columns: dict[str, dict[str, str]] = {}
    for run in runs:
        summary, telemetry, timings = run.summary, run.telemetry, run.timings
        key = f"{run.config.backend} · {run.run_id[-8:]}"
        columns[key] = {
            "backend": run.config.backend,
            "model": run.config.model,
            "pattern": run.config.load.pattern,
            "status / validity": f"{run.status.value} / "
            f"{run.validity.status.value if run.validity else '—'}",
            "precision": run.config.precision.label(),
            "GPUs": run.config.parallelism.label(),
            "prefix caching": {True: "on", False: "off", None: "engine default"}[
                run.config.prefix_caching
            ],
            "engine args": ", ".join(f"{k}={v}" for k, v in run.config.engine_args.items()) or "—",
            "successful requests": str(summary.successful) if summary else "—",
            **{
                catalogue_metric(name).words: _figure(run, name, digits)
                for name, digits in SIDE_BY_SIDE_FIGURES
                if _shown_for(runs, name)
            },
            **{
                f"{SPECS_BY_KEY[key].label} p50 / p99": _pair(run, key, digits)
                for key, digits in SIDE_BY_SIDE_LATENCIES
                if _shown_for(runs, f"{key}_p50")
            },
            catalogue_metric("error_rate").label: f"{summary.error_rate:.1%}" if summary else "—",
            PEAK_GPU_MEMORY.label: fixed(telemetry.peak_gpu_memory_gb, PEAK_GPU_MEMORY.unit, 2)
            if telemetry.peak_gpu_memory_gb is not None
            else f"not measured ({telemetry.reason or 'no GPU'})",
            **(
                {
                    catalogue_metric("energy_per_output_token_j").words: _figure(
                        run, "energy_per_output_token_j", 3
                    )
                }
                if _shown_for(runs, "energy_per_output_token_j")
                else {}
            ),
            "load / compile / build": " / ".join(
                fixed(value, "s") for value in (timings.load_s, timings.compile_s, timings.build_s)
            ),
            "device": device_of(run),
            "predicted (drift)": _drift(run),
        }
    return columns


def _drift(run: RunResult) -> str:
    """The run against the advisor's prediction for it: drift with the ratio, or within."""
    checks = run.drift()
    if not checks:
        return "no prediction"
    return drift_words(checks) or "within the predicted interval"


SIDE_BY_SIDE_FIGURES = (
    ("output_throughput_tok_s", 1),
    ("sample_throughput_per_s", 1),
    ("input_token_throughput_tok_s", 1),
    ("request_throughput_rps", 2),
    ("gpu_s_per_million_samples", 1),
    ("output_throughput_tok_s_per_gpu", 1),
    ("tok_s_per_user", 1),
    ("goodput_rps", 2),
)
"""Catalogued single figures of the side-by-side table, with the digits each is shown with."""
SIDE_BY_SIDE_LATENCIES = (("ttft_ms", 1), ("tpot_ms", 2), ("e2e_ms", 1))
"""Catalogued distributions shown as `p50 / p99` in the side-by-side table."""


def _figure(run: RunResult, name: str, digits: int) -> str:
    metric = catalogue_metric(name)
    return fixed(metric.read(run.summary, run), metric.unit, digits)


def _pair(run: RunResult, key: str, digits: int) -> str:
    spec = SPECS_BY_KEY[key]
    p50, p99 = (Metric(spec, statistic).read(run.summary, run) for statistic in ("p50", "p99"))
    if p50 is None or p99 is None:
        return "—"
    return f"{p50:,.{digits}f} / {p99:,.{digits}f} {spec.unit}"


def step_curves(runs: list[RunResult]) -> None:
    from advisor.report.charts import knee_concurrency

    step_runs = [run for run in runs if run.config.load.pattern == "step" and run.phases]
    st.subheader("Step-load curves")
    if not step_runs:
        empty_state(
            "None of the selected runs used the step pattern.",
            "Run a plan row with pattern **step** to see throughput and p99 latency against "
            "concurrency, with the knee marked.",
        )
        return
    rows, knees = [], []
    for run in step_runs:
        name = f"{run.config.backend} · {run.run_id[-8:]}"
        for phase in run.phases:
            summary = phase.summary
            rows.append(
                {
                    "run": name,
                    "concurrency": phase.target,
                    OUTPUT_COLUMN: OUTPUT_METRIC.read(summary),
                    E2E_COLUMN: E2E_METRIC.read(summary),
                }
            )
        knee = knee_concurrency(run)
        if knee is not None:
            knees.append({"run": name, "concurrency": knee})
    data = pd.DataFrame(rows)
    columns = st.columns(2)
    for column, metric in zip(columns, (OUTPUT_COLUMN, E2E_COLUMN), strict=True):
        base = alt.Chart(data).encode(
            x=alt.X("concurrency:Q", title="concurrency (requests in flight)"),
            y=alt.Y(f"{metric}:Q", title=metric),
            color=alt.Color("run:N", legend=alt.Legend(orient="bottom", title=None)),
        )
        chart = base.mark_line(point=True)
        if knees:
            chart = chart + alt.Chart(pd.DataFrame(knees)).mark_rule(strokeDash=[4, 4]).encode(
                x="concurrency:Q",
                color=alt.Color("run:N", legend=None),
                tooltip=["run", "concurrency"],
            )
        column.altair_chart(chart.properties(height=280))
    if knees:
        st.caption(
            "Dashed line = the knee: the first stage whose throughput gain is under the step "
            "pattern's min_gain, or that breaks the SLO or error budget."
        )


LATENCY_METRICS = {"TTFT (ms)": "ttft", "TPOT (ms)": "tpot", "E2E (ms)": "e2e"}
LATENCY_BINS = 40


def latency_distributions(runs: list[RunResult]) -> None:
    """Share of requests per latency bin (bins computed here, shared by the runs) and p50/p90/p99
    per run: the chart holds LATENCY_BINS points per run whatever the run's size."""
    from advisor.report.aggregate import histogram
    from bench.core.metrics import percentiles_ms

    st.subheader("Latency distributions")
    metric = (
        st.segmented_control(
            "Metric", list(LATENCY_METRICS), default="E2E (ms)", key="latency_metric"
        )
        or "E2E (ms)"
    )
    values = {}
    for run in runs:
        columns = request_columns(run.run_id, state.store_location())
        latencies = columns.latencies_ms(LATENCY_METRICS[metric])  # type: ignore[arg-type]
        if latencies.size:
            values[f"{run.config.backend} · {run.run_id[-8:]}"] = latencies
    if not values:
        empty_state(f"No measured request of these runs has a {metric.split()[0]}.")
        return
    bins = histogram(values, LATENCY_BINS)
    data = pd.DataFrame(
        [
            {"run": name, metric: edge, "% of requests": share}
            for name, shares in bins.shares.items()
            for edge, share in zip(bins.edges, [*shares, shares[-1]], strict=True)
        ]
    )
    chart = (
        alt.Chart(data)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X(f"{metric}:Q"),
            y=alt.Y("% of requests:Q"),
            color=alt.Color("run:N", legend=alt.Legend(orient="bottom", title=None)),
        )
        .properties(height=260)
    )
    st.altair_chart(chart)
    table = []
    for name, latencies in values.items():
        summary = percentiles_ms(latencies)
        if summary is not None:
            table.append(
                {
                    "run": name,
                    "requests": int(latencies.size),
                    "p50": summary.p50,
                    "p90": summary.p90,
                    "p99": summary.p99,
                    "mean": summary.mean,
                }
            )
    st.dataframe(pd.DataFrame(table), hide_index=True)
    st.caption(f"{metric} of successful measured requests; warm-up excluded; {LATENCY_BINS} bins.")


def pareto(frame: pd.DataFrame) -> None:
    st.subheader("Throughput against latency (Pareto view)")
    data = frame.dropna(subset=[OUTPUT_COLUMN, E2E_COLUMN])
    data = data[data["status"] == RunStatus.COMPLETED.value]
    if data.empty:
        empty_state("No completed run with throughput and latency to plot yet.")
        return
    data = data.assign(
        frontier=pareto_front(list(zip(data[OUTPUT_COLUMN], data[E2E_COLUMN], strict=True)))
    )
    points = (
        alt.Chart(data)
        .mark_point(filled=True, size=90)
        .encode(
            x=alt.X(
                f"{E2E_COLUMN}:Q",
                title=f"{E2E_METRIC.label} latency ({E2E_METRIC.unit}), "
                f"{E2E_METRIC.better} is better",
                axis=alt.Axis(format=",.0f"),
            ),
            y=alt.Y(
                f"{OUTPUT_COLUMN}:Q", title=f"{OUTPUT_COLUMN}, {OUTPUT_METRIC.better} is better"
            ),
            color=alt.Color("backend:N", legend=alt.Legend(orient="bottom")),
            shape=alt.Shape("validity:N", legend=alt.Legend(orient="bottom")),
            tooltip=["run_id", "backend", "model", "pattern", OUTPUT_COLUMN, E2E_COLUMN],
        )
    )
    front = (
        alt.Chart(data[data["frontier"]].sort_values(E2E_COLUMN))
        .mark_line(strokeDash=[4, 3], color="gray")
        .encode(x=f"{E2E_COLUMN}:Q", y=f"{OUTPUT_COLUMN}:Q")
    )
    st.altair_chart((front + points).properties(height=340))
    st.caption(
        "Dashed line joins the runs no other run beats on both axes. Runs on different "
        "machines, models or workloads are not comparable: filter first."
    )


def diagnostics(runs: list[RunResult]) -> None:
    st.subheader("Diagnostics (article section 5, applied per run)")
    for run in runs:
        findings = run_diagnostics(run.run_id, state.store_location())
        label = f"{run_title(run)} — {len(findings)} finding{'s' if len(findings) != 1 else ''}"
        with st.expander(label, expanded=False):
            if not findings:
                st.success("No rule fired: nothing measured here calls for troubleshooting.")
            for item in findings:
                show = {"error": st.error, "warning": st.warning}.get(item.severity, st.info)
                show(f"**{item.rule.replace('_', ' ')}** — {item.finding}  \n{item.advice}")
                if item.command:
                    st.code(item.command, language="bash")


def shipped_measurements_section() -> None:
    """Runs measured by this project elsewhere (data/reference), apart from the user's store."""
    shipped = shipped_measurements()
    if not shipped:
        return
    st.subheader("Reference measurements shipped with the advisor")
    for name, runs in shipped.items():
        gpus = sorted({device_of(run) for run in runs})
        st.info(
            f"**Measured by this project, not in your store:** `data/reference/{name}`, "
            f"{len(runs)} runs on {', '.join(gpus)}. Each run keeps its environment fingerprint "
            "and the exact command that reproduces it; the advisor counts them as "
            "measured-here only when your profile names the same GPU.",
            icon=":material/science:",
        )
        st.dataframe(runs_display(runs_frame(runs)), hide_index=True)


def reference_section() -> None:
    st.subheader("Published reference: the article's A100 table")
    table, absent = reference_table()
    if table is None:
        empty_state(f"The published table is missing: {absent}.")
        return
    st.warning(
        "**Published figures, not measured here.** Llama2-13B on an NVIDIA A100 80GB PCIe as "
        "the article reports them; workload and settings differ between rows and are "
        "partly unstated. Shown for orientation only; never mixed with the measurements above.",
        icon=":material/menu_book:",
    )
    st.dataframe(pd.DataFrame(table.rows, columns=table.columns), hide_index=True)
    st.caption(f"Source: {table.source}. {table.conditions}")
    if table.note:
        with st.expander("Caveats of the published table"):
            st.markdown(table.note)


# --------------------------------------------------------------------------- page


def render() -> None:
    state.init_session()
    st.title("Results")
    location = state.store_location()
    runs = state.stored_runs(location)
    store = state.get_store()
    st.caption(
        f"Every run in the {store.backend} results store `{store.display}` "
        "(set by `$ADVISOR_STORE`; a password is never shown)."
    )
    if not runs:
        empty_state(
            "The store has no runs yet.",
            "Go to **Benchmark**, make a plan and press **Run**; finished runs appear here.",
        )
        shipped_measurements_section()
        reference_section()
        return
    by_id = {run.run_id: run for run in runs}
    frame = filters(runs_frame(runs))
    st.caption(
        f"{len(frame)} of {len(runs)} runs. Tick rows to compare them (up to {MAX_COMPARED})."
    )
    selection = st.dataframe(
        runs_display(frame),  # the same rows, figures with units and "—" where missing
        hide_index=True,
        column_config={"run_id": st.column_config.TextColumn("run id")},
        on_select="rerun",
        selection_mode="multi-row",
        key="results_table",
    )
    rows = selection.selection.rows if selection else []
    selected_ids = [frame.iloc[i]["run_id"] for i in rows][:MAX_COMPARED]
    st.session_state[state.SELECTED_RUNS_KEY] = selected_ids
    if not selected_ids:
        empty_state(
            "No run selected.",
            "Tick the box at the left of one or more rows to compare them, see their latency "
            "distributions, step curves and diagnostics. The Pareto view below shows every "
            "filtered run.",
        )
    else:
        chosen = [by_id[run_id] for run_id in selected_ids]
        compare(chosen)
        step_curves(chosen)
        latency_distributions(chosen)
        diagnostics(chosen)
    verdicts_section()
    pareto(frame)
    shipped_measurements_section()
    reference_section()


def verdicts_section() -> None:
    """The advisor's verdicts for the current profile: the leader against each measured
    alternative, the ratio with its 95% interval, and "single run" where either side is one."""
    st.subheader("Verdicts for your profile")
    try:
        profile = state.current_profile()
        report = state.advise(profile, state.store_location())
    except UserError as exc:
        st.error(str(exc))
        return
    shown = False
    for stage, stage_result in zip(profile.stages, report.stages, strict=True):
        recommendation = stage_result.recommendation
        if not recommendation.verdicts:
            continue
        shown = True
        st.markdown(f"**{stage.name}**: {recommendation.headline or recommendation.framework}")
        with st.container(key=f"verdicts_{stage.name}"):
            st.dataframe(verdict_rows(recommendation.verdicts), hide_index=True)
        if recommendation.ranking_note:
            st.caption(recommendation.ranking_note)
    if not shown:
        empty_state(
            "No verdict yet: no two candidates are measured on the profile's workload and GPU.",
            "Run the Benchmark page's plan (its repeats give each comparison an interval).",
        )


# Streamlit runs a page file as __main__; importing it (tests) only defines its functions.
if __name__ == "__main__":
    render()
