"""Benchmark page: the plan for the current profile, this machine, and live jobs with a Stop.

Runs never happen in the script thread: Run writes a job into the store and makes sure the
detached runner (`bench.orchestrate.jobs`) is up; a fragment polls the job row once a second.
Reloading the page, switching pages or closing the tab loses nothing: the job lives in the store.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import altair as alt
import pandas as pd
import streamlit as st

from advisor.plan.plan_table import PLAN_ROW, chosen_runs, plan_table
from advisor.plan.run_estimate import estimate_runs
from advisor.plan.stage_plan import CONFIRM_ABOVE_S, StagePlan
from advisor.report.numbers import fixed
from advisor.workload.profile import StageProfile
from bench.core.config import PATTERN_NAMES, RunConfig
from bench.core.errors import UserError
from bench.core.fingerprint import Fingerprint
from bench.core.job_progress import JobRunProgress
from bench.core.metric_catalog import Metric
from bench.core.metric_catalog import metric as catalogue_metric
from bench.core.schema import RunResult, RunStatus
from bench.orchestrate.web_policy import check_web_jobs
from bench.storage.store import Job, ResultStore
from ui import state
from ui.components import empty_state, status_badge
from ui.session_plan import PLAN_KEY, PlanShown

if TYPE_CHECKING:  # the run layer reads NVML: imported when the machine is first read
    from bench.engines.backends.base import Availability
    from bench.run.environment import PreflightItem

LOG_TAIL_LINES = 60
POLL_S = 1.0
LIVE_RECORDS_SHOWN = 5000  # newest measured records in the live latency chart
LOAD_HELP = (
    "concurrency: requests in flight · rate: requests/s · step: highest concurrency of the "
    "ladder · steady/pulse: capacity in requests/s (empty = found first with a ladder)"
)
DURATION_HELP = (
    "concurrency/rate/steady: measured length · step: each stage · pulse: baseline before the burst"
)


# --------------------------------------------------------------------------- cached reads


@st.cache_data(ttl=30, max_entries=2, show_spinner="Reading the machine (GPU, clocks, memory)…")
def machine_facts() -> tuple[Fingerprint, list[PreflightItem]]:
    """The environment fingerprint and its preflight findings (read-only, refreshed every 30 s)."""
    from bench.run.environment import fingerprint, preflight

    facts = fingerprint()
    return facts, preflight(facts)


@st.cache_data(ttl=60, max_entries=2, show_spinner="Checking which frameworks are installed…")
def backend_availability() -> list[Availability]:
    """Each registered backend's own check: installed here or not, and why."""
    from bench.engines.backends import all_availability

    return all_availability()


@st.cache_resource(max_entries=1, ttl=3600, show_spinner=False)
def decision_tree() -> Any:
    from advisor.plan.tree import load_tree

    return load_tree()


def plan_for(stage: StageProfile, quick: bool) -> StagePlan:
    """The advisor's benchmark plan for one stage (its tree candidates, its workload shape),
    sized for this machine: without a GPU the quick plan runs the CPU-sized model; on a GPU the
    full plan adds the configuration search's most promising TP x replicas x precision runs."""
    from advisor.plan.run_estimate import host_busy_factor
    from advisor.plan.stage_plan import plan_for_stage

    cpu_only = not machine_facts()[0].gpu_available
    return plan_for_stage(
        stage,
        quick=quick,
        tree=decision_tree(),
        cpu_only=cpu_only,
        configurations=not quick,
        busy=host_busy_factor(),
    )


@st.cache_data(ttl=2, max_entries=16, show_spinner=False)
def records_frame(run_id: str, store_location: str | None) -> pd.DataFrame:
    """The newest 5000 measured records of a run as rows (time since the first of them, TTFT,
    E2E); only those are read, so a long run's chart costs the same every poll."""
    from bench.core.metrics import request_latencies_ms

    rows = []
    for record in state.get_store().latest_records(run_id, LIVE_RECORDS_SHOWN):
        if record.error is not None:
            continue
        ttft_ms, _tpot_ms, e2e_ms = request_latencies_ms(record)
        rows.append(
            {
                "start_ns": record.start_ns,
                "TTFT (ms)": ttft_ms,
                "E2E (ms)": e2e_ms,
                "output tokens": record.output_tokens,
            }
        )
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame["time (s)"] = (frame["start_ns"] - frame["start_ns"].min()) / 1e9
    return frame


# --------------------------------------------------------------------------- machine panel


def machine_panel() -> bool:
    """GPU, clocks, free memory, other processes and preflight; returns whether a GPU is here."""
    facts, findings = machine_facts()
    gpu_available = facts.gpu_available
    gpus = facts.gpus
    title = (
        f"This machine: {len(gpus)} × {gpus[0].name}"
        if gpu_available and gpus
        else "This machine: CPU only"
    )
    warnings = sum(1 for item in findings if item.severity == "warn")
    if warnings:
        title += f" · {warnings} preflight warning{'s' if warnings != 1 else ''}"
    with st.expander(title, icon=":material/developer_board:"):
        if gpu_available:
            rows = [
                {
                    "GPU": f"{gpu.index}: {gpu.name}",
                    "free memory (GB)": _gb(gpu.memory_free_bytes),
                    "total memory (GB)": _gb(gpu.memory_total_bytes),
                    "SM clock now (MHz)": gpu.sm_clock_mhz,
                    "SM clock max (MHz)": gpu.max_sm_clock_mhz,
                    "persistence": _on_off(gpu.persistence_mode),
                    "power limit (W)": gpu.power_limit_w,
                    "MIG": _on_off(gpu.mig_enabled),
                }
                for gpu in gpus
            ]
            st.dataframe(
                pd.DataFrame(rows),
                hide_index=True,
                column_config={
                    "free memory (GB)": st.column_config.NumberColumn(format="%.1f"),
                    "total memory (GB)": st.column_config.NumberColumn(format="%.1f"),
                },
            )
            others = facts.gpu_processes
            st.caption(
                f"Driver {facts.driver_version or '—'} · CUDA "
                f"{facts.cuda_driver_version or '—'} · "
                f"{len(others)} other process(es) holding GPU memory"
            )
        cpu, memory, system = facts.cpu, facts.host_memory, facts.os
        st.caption(
            f"Host {facts.hostname or '—'} · {system.distribution or ''} · "
            f"{cpu.model or 'CPU'} ({cpu.usable_cores or '?'} usable cores) · "
            f"{fixed(_gb(memory.total_bytes), 'GB', 0)} RAM"
        )
        if findings:
            st.markdown(
                "**Preflight**: what would make runs unrepeatable. Read-only: the app never "
                "changes GPU settings; the commands are for an admin."
            )
            for item in findings:
                text = f"**{item.what}** — {item.why}"
                if item.severity == "warn":
                    st.warning(text, icon=":material/warning:")
                else:
                    st.info(text, icon=":material/info:")
                if item.admin_command:
                    st.code(item.admin_command, language="bash")
        else:
            st.success("Preflight: nothing found that would make runs unrepeatable.")
    return gpu_available


def _gb(value: Any) -> float | None:
    return value / 1e9 if isinstance(value, int | float) else None


def _on_off(value: Any) -> str:
    return "—" if value is None else ("on" if value else "off")


def availability_panel() -> list[Availability]:
    items = backend_availability()
    # `test_double` is a fact of the backend's own (Availability.details, its open map).
    usable = [item.name for item in items if item.available and not item.details.get("test_double")]
    with st.expander(
        f"Frameworks installed here: {', '.join(usable) or 'none'}", icon=":material/extension:"
    ):
        frame = pd.DataFrame(
            [
                {
                    "backend": item.name,
                    "available": item.available,
                    "version": item.version or "—",
                    "reason": item.reason,
                    "test double": bool(item.details.get("test_double")),
                }
                for item in items
            ]
        )
        st.dataframe(
            frame,
            hide_index=True,
            column_config={
                "available": st.column_config.CheckboxColumn(),
                "reason": st.column_config.TextColumn(width="large"),
            },
        )
    return items


# --------------------------------------------------------------------------- plan editor


def plan_editor(profile_digest: str, stage: StageProfile, available: set[str]) -> None:
    plan: PlanShown | None = st.session_state.get(PLAN_KEY)
    buttons = st.container(horizontal=True)
    quick = buttons.button(
        "Quick plan",
        type="primary" if not plan else "secondary",
        icon=":material/bolt:",
        help=(
            "One short closed-loop run per candidate: a first answer in minutes (each run's "
            "estimated time and disk use show before Run). Without a GPU it runs the CPU-sized "
            "model of your model's family."
        ),
    )
    full = buttons.button(
        "Full plan",
        icon=":material/tune:",
        help="Longer runs at your load (or a step ladder): deeper, slower.",
    )
    if quick or full:
        try:
            stage_plan = plan_for(stage, quick=bool(quick))
        except UserError as exc:
            st.error(str(exc))
            return
        plan = PlanShown(
            digest=profile_digest, plan=stage_plan, version=plan.version + 1 if plan else 1
        )
        st.session_state[PLAN_KEY] = plan
    if not plan:
        empty_state(
            "No plan yet.",
            "Press **Quick plan** for one short run per framework the advisor suggests, or "
            "**Full plan** for longer runs at your load. You can edit every row before running.",
        )
        return
    stale = plan.digest != profile_digest
    if stale:  # what is offered is for the profile on screen: an older plan cannot run
        with st.container(key="stale_plan"):
            st.warning(
                "**This plan was made for another profile — make a new plan.** It was made for "
                f"stage {plan.plan.stage} with model {plan.plan.profile_model or '—'}; press "
                "**Quick plan** or **Full plan** to plan the profile shown above. Run stays "
                "disabled until then.",
                icon=":material/history:",
            )
    comparison, searches = plan.plan.configs, plan.plan.capacity_configs
    repeats = plan.plan.repeats
    configs = plan.plan.all_configs()
    if not configs:
        empty_state("The advisor found no benchmarkable candidate for this stage.")
        return
    st.caption(
        f"{'Quick' if plan.plan.quick else 'Full'} plan for stage **{plan.plan.stage}**: one "
        f"comparison run per candidate{f', each made {repeats} times' if repeats > 1 else ''}, "
        "in the stage's workload shape"
        + (f", then {len(searches)} SLO capacity search(es)" if searches else "")
        + ". Edit the cells; untick a row to skip it."
    )
    if plan.plan.note:
        st.info(plan.plan.note, icon=":material/memory:")
    plan_summary(plan.plan)
    from bench.engines.backends import backend_names

    engines_missing_notice(
        [config.backend for config in configs], not machine_facts()[0].gpu_available
    )
    edited = st.data_editor(
        plan_table(comparison, available, repeats, searches),
        key=f"plan_editor_{plan.version}",
        hide_index=True,
        num_rows="dynamic",
        column_config={
            PLAN_ROW: None,  # hidden; read back by chosen_runs
            "run": st.column_config.CheckboxColumn("run", width="small"),
            "role": st.column_config.TextColumn(
                "role",
                disabled=True,
                help="comparison: a run the candidates are compared on; capacity search: the "
                "highest request rate that meets the SLO (sizes the fleet on the Advisor page).",
            ),
            "repeats": st.column_config.NumberColumn(
                "repeats",
                min_value=1,
                max_value=20,
                step=1,
                help="Times the run is made (repeats give the comparison its 95% interval; "
                "queued as separate runs of one job, one after another).",
            ),
            "backend": st.column_config.SelectboxColumn(
                "backend", options=backend_names(), required=True
            ),
            "model": st.column_config.TextColumn("model", help="Preset name or checkpoint path."),
            "prompt / output": st.column_config.TextColumn(
                "prompt / output",
                disabled=True,
                help="Request lengths the run sends (the profile's, scaled or clipped to the "
                "model's context window where the note above says so).",
            ),
            "pattern": st.column_config.SelectboxColumn(
                "pattern", options=list(PATTERN_NAMES), required=True
            ),
            "load": st.column_config.NumberColumn("load", help=LOAD_HELP, min_value=0.01),
            "duration (s)": st.column_config.NumberColumn(
                "duration (s)", help=DURATION_HELP, min_value=1
            ),
            "engine args": st.column_config.TextColumn(
                "engine args",
                width="medium",
                help="key=value, key=value under the framework's own option names; checked "
                "against the adapter's known options.",
            ),
            "device": st.column_config.SelectboxColumn("device", options=["auto", "cuda", "cpu"]),
        },
    )
    chosen, problems = chosen_runs(edited, configs, available)
    for problem in problems:
        st.error(problem, icon=":material/error:")
    confirmed = plan_cost(chosen, stage, plan.plan.cpu_only)
    # A marker of what the server has taken in from the table (how many runs, each one's
    # duration), so a browser test clicks Run only after its edits arrived.
    durations = "_".join(str(int(config.load.table_duration() or 0)) for config in chosen)
    st.container(key=f"plan_chosen_{len(chosen)}_{durations or 'none'}", height=1, border=False)
    run = st.button(
        f"Run {len(chosen)} benchmark{'s' if len(chosen) != 1 else ''}",
        type="primary",
        icon=":material/play_arrow:",
        disabled=stale or bool(problems) or not chosen or not confirmed,
        key=f"run_plan_{plan.version}",
        help="This plan was made for another profile: make a new plan." if stale else None,
    )
    if run and not stale:
        start_job(chosen, label=f"{stage.name}: {'quick' if plan.plan.quick else 'full'} plan")


def engines_missing_notice(backends: list[str], cpu_only: bool) -> None:
    """Which of the plan's frameworks cannot run in this install (the backends' own availability
    check), and the one command that adds those this project's setup installs: scripts/app.sh
    sets up without the engines, yet the advisor plans vLLM."""
    from ui.engines import missing_engines

    missing = missing_engines(
        backends,
        {item.name: (item.available, item.reason) for item in backend_availability()},
        cpu_only=cpu_only,
    )
    if missing is None:
        return
    one = len(missing.backends) == 1
    with st.container(key="engines_missing"):
        st.warning(
            f"**Cannot run in this install: {', '.join(missing.backends)}.** "
            + ("Its row starts" if one else "Their rows start")
            + " unticked (see *Frameworks installed here*); the advisor's answer will say "
            + ("it" if one else "they")
            + " could not be measured.",
            icon=":material/extension_off:",
        )
        if missing.command:
            st.markdown(
                f"Add {', '.join(missing.installable)} with one command (it installs "
                f"{', '.join(f'`{file}`' for file in missing.requirements_files)}), then "
                "restart the app:"
            )
            st.code(missing.command, language="bash")
            for note in missing.file_notes:
                st.caption(note)
        for backend, why in missing.elsewhere.items():
            st.caption(f"**{backend}**: {why}")


def plan_summary(plan: StagePlan) -> None:
    """The plan's own time, as made (before edits): total, what the repeats add, what the
    capacity searches take, and how the searches are set (or why there is none)."""
    parts = [f"about **{format_duration(plan.duration_s)}** in all"]
    if plan.repeats > 1:
        parts.append(
            f"{plan.repeats} repeats of each comparison run add "
            f"{format_duration(plan.repeats_added_s)}"
        )
    if plan.capacity_configs:
        parts.append(f"the capacity searches take {format_duration(plan.capacity_s)}")
    with st.container(key="plan_summary"):
        st.caption("The plan as made: " + "; ".join(parts) + " (estimates, not measurements).")
        if plan.capacity_note:
            st.caption(f"Capacity search: {plan.capacity_note}")


def plan_cost(chosen: list[RunConfig], stage: StageProfile, cpu_only: bool) -> bool:
    """Estimated duration and new disk use of the ticked runs, shown before Run; returns False
    while a plan estimated over CONFIRM_ABOVE_S is not confirmed."""
    if not chosen:
        return True
    from advisor.plan.run_estimate import host_busy_factor

    busy = host_busy_factor() if cpu_only else 1.0
    estimates = estimate_runs(chosen, cpu_only=cpu_only, gpu=stage.gpu.type, busy=busy)
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "backend": item.backend,
                    "model": item.model,
                    "estimated time": format_duration(item.duration_s),
                    "new disk": format_bytes(item.disk_bytes)
                    + (" (checkpoint cached)" if item.checkpoint_cached else ""),
                    "where the time goes": ", ".join(
                        f"{name} {format_duration(value)}" for name, value in item.parts_s.items()
                    ),
                }
                for item in estimates
            ]
        ),
        hide_index=True,
        key="plan_cost",
    )
    total_s = sum(item.duration_s for item in estimates)
    total_disk = sum(item.disk_bytes for item in estimates)
    st.caption(
        f"Estimated for the ticked runs: **{format_duration(total_s)}** and "
        f"**{format_bytes(total_disk)}** of new disk (estimates from model size and load, not "
        "measurements)."
        + (
            f" This machine is busy with other work: CPU parts are counted {busy:.1f}x slower."
            if busy > 1.05
            else ""
        )
    )
    if total_s <= CONFIRM_ABOVE_S:
        return True
    st.warning(
        f"This plan is estimated to take {format_duration(total_s)}"
        + (" on this machine's CPU" if cpu_only else "")
        + ". Shorten it (Quick plan, fewer rows, shorter durations) or confirm.",
        icon=":material/hourglass_top:",
    )
    return st.checkbox(f"Run it anyway (about {format_duration(total_s)})", key="confirm_long_plan")


def format_duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def format_bytes(count: int) -> str:
    if count < 1e6:
        return f"{count / 1e3:.0f} kB"
    if count < 1e9:
        return f"{count / 1e6:.0f} MB"
    return f"{count / 1e9:.1f} GB"


def start_job(configs: list[RunConfig], label: str) -> None:
    """Queue the runs as one job and make sure a runner serves the store; nothing runs here."""
    from bench.orchestrate.jobs import ensure_runner

    check_web_jobs(configs)
    store = state.get_store()
    job_id = store.create_job(configs, label=label)
    ensure_runner(state.store_location(), log_path=_runner_log_path(store))
    st.session_state[state.ACTIVE_JOB_KEY] = job_id
    st.query_params["job"] = job_id
    st.toast(f"Queued job {job_id}", icon=":material/schedule:")


def _runner_log_path(store: ResultStore) -> Path | None:
    """Beside a SQLite file; for a database server, the runner's default (the temp folder)."""
    if store.path is None:
        return None
    return Path(store.path).with_name(Path(store.path).stem + "-runner.log")


# --------------------------------------------------------------------------- live job panel


def active_job_id() -> str | None:
    """The job to show: the one this session started, the URL's, or the newest in the store."""
    job_id = st.session_state.get(state.ACTIVE_JOB_KEY) or st.query_params.get("job")
    if job_id:
        return job_id
    jobs = state.get_store().list_jobs(limit=1)
    return jobs[0].job_id if jobs else None


def job_picker() -> str | None:
    jobs = state.get_store().list_jobs(limit=20)
    if not jobs:
        return None
    current = active_job_id()
    ids = [job.job_id for job in jobs]
    if current not in ids:
        ids.insert(0, current)
    labels = {
        job.job_id: f"{job.created_at[:19].replace('T', ' ')} UTC · {job.label or job.job_id}"
        for job in jobs
    }
    chosen = st.selectbox(
        "Job",
        ids,
        index=ids.index(current),
        format_func=lambda job_id: labels.get(job_id, job_id),
        help="Jobs live in the results store: close the tab and come back, they are still here.",
    )
    if chosen != current:
        st.session_state[state.ACTIVE_JOB_KEY] = chosen
        st.query_params["job"] = chosen
    return chosen


def job_panel(job: Job) -> None:
    """The job's runs with progress bars, live charts, Stop, and results or logs when done."""
    job_id = job.job_id
    head = st.columns([4, 1])
    with head[0]:
        status_badge(job.status.value)
        # On a shared store the runner may be on another host: say which one took the job.
        runner = f" · runner {job.runner}" if job.runner else ""
        st.caption(f"Job {job.job_id} · {job.label or ''} · {len(job.configs)} run(s){runner}")
    if not job.finished:
        with head[1]:
            if job.stop_requested:
                st.button("Stopping…", disabled=True, key=f"stopping_{job_id}")
            elif st.button("Stop", icon=":material/stop:", key=f"stop_{job_id}", type="primary"):
                state.get_store().request_stop(job_id)
                st.toast("Stop requested: the engine is being ended.", icon=":material/stop:")
        _runner_hint(job)
    from bench.orchestrate.executors import describe_placement

    where = describe_placement(job.progress.placement)
    if where:
        (st.info if where.startswith("Queued") else st.caption)(where)
    from bench.orchestrate.jobs import queued_runs
    from ui.run_card import job_notice

    # Until the runner claims the job it has written no progress: show every run as queued.
    runs = job.progress.runs or queued_runs(job.configs)
    notice = job_notice(job.status, job.error, runs, len(job.configs))
    if notice is not None:
        {"error": st.error, "warning": st.warning, "caption": st.caption}[notice.level](notice.text)
    for run in runs:
        run_section(run, job)
    if job.finished and job.status != RunStatus.QUEUED and job.run_ids:
        st.page_link(
            "ui/results_page.py",
            label="Compare these runs on the Results page",
            icon=":material/table_chart:",
        )


def _runner_hint(job: Any) -> None:
    from bench.orchestrate.jobs import runner_pid

    if job.status == RunStatus.QUEUED and runner_pid(state.store_location()) is None:
        st.info("Waiting for the job runner to start…")
        from bench.orchestrate.jobs import ensure_runner

        ensure_runner(state.store_location(), log_path=_runner_log_path(state.get_store()))
    elif job.status == RunStatus.QUEUED:
        from bench.orchestrate.executors import ExecutorSettings

        if ExecutorSettings.from_env().name == "local":
            st.caption("Queued: one GPU job runs at a time; this one starts when the current ends.")
        else:
            st.caption("Queued: the job runner sends it to the Ray cluster shortly.")


def run_section(run: JobRunProgress, job: Any) -> None:
    status = run.status.value
    title = f"{run.index + 1}. **{run.backend}** · {run.model} · {run.pattern}"
    with st.container(border=True):
        head = st.columns([4, 1])
        head[0].markdown(title)
        with head[1]:
            status_badge(status)
        if status == RunStatus.RUNNING.value:
            _progress_bars(run, job)
        if run.history:
            live_charts(run)
        if status in (RunStatus.COMPLETED.value, RunStatus.FAILED.value, RunStatus.STOPPED.value):
            finished_run(run)


def _progress_bars(run: JobRunProgress, job: Any) -> None:
    """The run's bar (ui/run_card.py says what it reads): a timer while the model loads, the
    measured window, and past it why the run goes on."""
    import time

    from ui.run_card import load_of, progress_line

    since = run.stage_since
    line = progress_line(
        run.latest,
        load_of(job.configs, run.index),
        None if since is None else max(0.0, time.time() - since),
    )
    st.progress(line.fraction, text=line.text)
    latest = run.latest
    phases_total = (latest.phases_total or 1) if latest is not None else 1
    if latest is not None and latest.phase_index is not None and phases_total > 1:
        duration = latest.phase_duration_s
        elapsed = latest.phase_elapsed_s or 0.0
        st.progress(
            min(1.0, elapsed / duration) if duration else 0.0,
            text=f"Phase {latest.phase or latest.phase_index + 1}: {elapsed:.0f} s"
            + (f" of its {duration:.0f} s window" if duration else ""),
        )


def live_charts(run: JobRunProgress) -> None:
    """Throughput from progress history, latency from stored records, GPU memory and power."""
    from ui.run_card import RATE_WINDOW_S, throughput_points

    # pandas wants records: one per point that has a time (the runner writes no other).
    points = [point.model_dump() for point in run.history if point.elapsed_s is not None]
    history = pd.DataFrame(points)
    if history.empty:
        return
    history = history.sort_values("elapsed_s")
    history = history[history["phase"] != "warmup"]
    if history.empty:
        return
    rates = pd.DataFrame(
        [
            {
                "time (s)": point.elapsed_s,
                "average since the phase began": point.since_start,
                f"last {RATE_WINDOW_S:.0f} s": point.last_window,
            }
            for point in throughput_points(run.history)
        ]
    )
    charts = st.columns(3)
    with charts[0]:
        st.markdown("**Throughput** (live, output tok/s)")
        if rates.empty:
            st.caption("Appears once the measured phase has run a second.")
        else:
            st.line_chart(
                rates,
                x="time (s)",
                y=["average since the phase began", f"last {RATE_WINDOW_S:.0f} s"],
                y_label="output tok/s",
                height=200,
            )
            st.caption(
                "Tokens count when a request completes, so batches arrive in bursts. The average "
                "since the phase began is the run's own figure (output tokens over the measured "
                f"window) as it stands; the last {RATE_WINDOW_S:.0f} s line shows changes."
            )
    with charts[1]:
        st.markdown("**Latency per request**")
        frame = records_frame(run.run_id, state.store_location()) if run.run_id else None
        if frame is None or frame.empty:
            st.caption("Appears as requests complete.")
        else:
            long = frame.melt(
                id_vars=["time (s)"],
                value_vars=["TTFT (ms)", "E2E (ms)"],
                var_name="metric",
                value_name="ms",
            )
            chart = (
                alt.Chart(long)
                .mark_circle(size=14, opacity=0.6)
                .encode(
                    x=alt.X("time (s):Q"),
                    y=alt.Y("ms:Q", title="latency (ms)"),
                    color=alt.Color("metric:N", legend=alt.Legend(orient="bottom", title=None)),
                )
                .properties(height=200)
            )
            st.altair_chart(chart)
    with charts[2]:
        memory = history.get("gpu_memory_used_bytes")
        if memory is not None and memory.notna().any():
            st.markdown("**GPU memory and power**")
            gpu = pd.DataFrame(
                {
                    "time (s)": history["elapsed_s"],
                    "GPU memory (GB)": memory / 1e9,
                    "power (W)": history.get("power_w"),
                }
            )
            st.line_chart(gpu, x="time (s)", y=["GPU memory (GB)", "power (W)"], height=200)
        else:
            st.markdown("**Host memory** (no GPU readings here)")
            rss = history.get("host_rss_bytes")
            if rss is not None and rss.notna().any():
                st.line_chart(
                    pd.DataFrame({"time (s)": history["elapsed_s"], "host RSS (GB)": rss / 1e9}),
                    x="time (s)",
                    y="host RSS (GB)",
                    height=200,
                )
            else:
                st.caption("No memory readings yet.")


FINISHED_TILES: tuple[tuple[Metric, int, bool], ...] = (
    (catalogue_metric("output_throughput_tok_s"), 1, False),
    (catalogue_metric("request_throughput_rps"), 2, True),
    (catalogue_metric("ttft_ms_p99"), 1, False),
    (catalogue_metric("tpot_ms_p99"), 2, False),
)
"""A finished run's headline tiles: the catalogued metric, its decimals and whether the tile is
titled by the metric's column heading with the unit in it (`Requests/s`, a bare figure) rather
than its label (`TTFT p99`, the figure with its unit). The fifth tile is the peak memory, GPU
or host."""
FORWARD_TILES: tuple[tuple[Metric, int, bool], ...] = (
    (catalogue_metric("sample_throughput_per_s"), 1, False),
    (catalogue_metric("request_throughput_rps"), 2, True),
    (catalogue_metric("e2e_ms_p50"), 2, False),
    (catalogue_metric("e2e_ms_p99"), 2, False),
)
"""A forward run's tiles (one request = one batch): samples/s, batches/s and the batch latency,
never tokens (bench.core.metric_catalog.RUN_VIEW_METRICS)."""


def finished_tiles(result: RunResult) -> list[tuple[str, str]]:
    """The finished run's four headline tiles as (title, figure), in the run's own units."""
    summary = result.summary
    tiles = FORWARD_TILES if result.config.workload.kind == "forward" else FINISHED_TILES
    shown_tiles = []
    for shown, digits, by_heading in tiles:
        value = shown.read(summary, result)
        if by_heading:
            shown_tiles.append((shown.column, fixed(value, "", digits)))
        else:
            shown_tiles.append((shown.title, fixed(value, shown.unit, digits)))
    return shown_tiles


def finished_run(run: JobRunProgress) -> None:
    store = state.get_store()
    run_id = run.run_id
    if not run_id:
        if run.error:
            st.error(run.error)
        return
    try:
        result = store.get_run(run_id)
    except UserError:
        st.caption(f"Run {run_id} is not in the store.")
        return
    summary = result.summary
    if summary is not None and summary.successful:
        metrics = st.columns(5)
        for column, (title, shown_figure) in zip(metrics[:4], finished_tiles(result), strict=True):
            column.metric(title, shown_figure)
        peak_gpu = catalogue_metric("peak_gpu_memory_gb")
        if result.telemetry.peak_gpu_memory_gb is not None:
            metrics[4].metric(
                peak_gpu.title,
                fixed(peak_gpu.read(summary, result), peak_gpu.unit, 2),
            )
        else:
            metrics[4].metric(
                "Peak host memory",
                fixed(result.telemetry.peak_host_rss_gb, "GB", 2),
                help="No GPU readings on this machine: "
                + (result.telemetry.reason or "no NVIDIA GPU"),
            )
    if result.failure is not None:  # the cause first: the one red box of a failed run
        st.error(
            f"**{result.failure.cause}**"
            + (f"  \n{result.failure.advice}" if result.failure.advice else "")
        )
        log_tail = result.failure.log_tail or _read_log_tail(result.log_path)
        if log_tail:
            with st.expander("Engine log (last lines)", expanded=result.status == RunStatus.FAILED):
                st.code(log_tail, language="text")
    elif result.status == RunStatus.FAILED and run.error:  # a failure with no cause stored
        st.error(run.error)
    run_verdicts(result)
    st.caption(f"Run id `{result.run_id}` · reproduce: `{result.command}`")


def run_verdicts(result: Any) -> None:
    """VALID / INVALID with its reasons, then pass / fail of each SLO limit the run set
    (ui/run_card.py holds the rules)."""
    from ui.run_card import slo_checks, validity_mark

    mark = validity_mark(result)
    with st.container(key=f"validity_{result.run_id}"):
        if mark.valid is True:
            st.success(mark.text, icon=":material/verified:")
        elif mark.valid is False and mark.after_failure:  # the failure above is the news
            st.caption(f":material/report: {mark.text}")
        elif mark.valid is False:
            st.error(mark.text, icon=":material/report:")
        for note in mark.notes:
            st.caption(f"Note: {note}")
    checks = slo_checks(result)
    if not checks:
        st.caption("No SLO set for this run: nothing to pass or fail.")
        return
    with st.container(key=f"slo_{result.run_id}"):
        failed = [check for check in checks if check.passed is False]
        percentile = result.config.slo.percentile
        head = (
            f"**SLO at {percentile}: {len(failed)} of {len(checks)} limits failed**"
            if failed
            else f"**SLO at {percentile}: every limit met**"
            if all(check.passed for check in checks)
            else f"**SLO at {percentile}: not judged (no figures)**"
        )
        st.markdown(head)
        for check in checks:
            icon = {True: ":green[✔]", False: ":red[✘]", None: "–"}[check.passed]
            st.markdown(f"{icon} {check.text}")


def _read_log_tail(log_path: str | None) -> str | None:
    if not log_path:
        return None
    path = Path(log_path)
    if not path.is_file():
        return None
    with path.open("rb") as handle:
        handle.seek(0, 2)
        handle.seek(max(0, handle.tell() - 64 * 1024))
        lines = handle.read().decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


# --------------------------------------------------------------------------- page


def render() -> None:
    state.init_session()
    st.title("Benchmark")
    st.caption(
        "Measure the advisor's candidates on this machine with your workload's shape. Runs go "
        "to a background job runner: you can switch pages or close the tab and come back."
    )
    profile = state.current_profile()
    availability = availability_panel_and_machine()
    st.subheader("Plan")
    stage_names = [stage.name for stage in profile.stages]
    stage_index = 0
    if len(stage_names) > 1:
        stage_index = st.selectbox(
            "Stage", range(len(stage_names)), format_func=lambda i: stage_names[i]
        )
    stage = profile.stages[stage_index]
    st.caption(
        f"Profile **{profile.title}** · stage **{stage.name}** · model **{stage.model or '—'}** "
        "(change it on the Advisor page)."
    )
    # The plan is keyed by the profile's content (and the stage): any edit makes it stale.
    digest = hashlib.sha256(f"{profile.model_dump_json()}#{stage_index}".encode()).hexdigest()
    available = {item.name for item in availability if item.available}
    import importlib.util

    if importlib.util.find_spec("sglang") is not None:  # launched by the openai backend
        available.add("sglang")
    plan_editor(digest, stage, available)

    st.subheader("Jobs")
    job_id = job_picker()
    if job_id is None:
        empty_state("No benchmark has run yet.", "Make a plan above and press **Run**.")
        return
    try:
        job = state.get_store().get_job(job_id)
    except UserError:  # e.g. a ?job= link from another store
        st.warning(f"Job {job_id} is not in this store.")
        return
    if job.finished:
        job_panel(job)
        # A marker that the whole page has drawn the finished job (after the one rerun the live
        # panel asks for at the job's end), so a browser test reads the page only once it holds.
        st.container(key=f"job_done_{job_id}", height=1, border=False)
    else:
        live_job_panel(job_id)


@st.fragment(run_every=POLL_S)
def live_job_panel(job_id: str) -> None:
    """Polls the job row once a second. When the job has ended the panel drawn here is already
    the finished one (results or errors); the page is then rerun once, which stops the polling.
    Once per job: should that rerun be cut short, the next poll draws the finished panel again
    instead of asking for another rerun."""
    job = state.get_store().get_job(job_id)
    job_panel(job)
    if job.finished:
        asked = st.session_state.setdefault("finished_job_reruns", set())
        if job_id not in asked:
            asked.add(job_id)
            st.rerun()


def availability_panel_and_machine() -> list[Availability]:
    facts, _ = machine_facts()
    if not facts.gpu_available:
        st.warning(
            "**CPU-only machine: engines run on the CPU, and the figures are not GPU figures.** "
            f"{facts.gpu_reason or 'No NVIDIA GPU found'}. Use CPU runs to check the "
            "harness and to compare frameworks on a CPU, not to size a GPU deployment; the "
            "Quick plan uses the CPU-sized model of your model's family.",
            icon=":material/memory:",
        )
    columns = st.columns(2)
    with columns[0]:
        machine_panel()
    with columns[1]:
        return availability_panel()


# Streamlit runs a page file as __main__; importing it (tests) only defines its functions.
if __name__ == "__main__":
    render()
