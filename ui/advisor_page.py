"""Advisor page: the workload questionnaire, the decision path, candidates and the recommendation.

The form builds an `advisor.workload.profile.WorkloadProfile`; `advisor.decide.recommend.recommend`
does all the thinking. Help texts are the profile's Field descriptions.
"""

from __future__ import annotations

import hashlib
from typing import Any

import altair as alt
import pandas as pd
import streamlit as st
from pydantic import ValidationError

from advisor.decide.recommend import NO_PEAK_NOTE
from advisor.report.capacity import CapacityView, capacity_view, capacity_view_for_runs
from advisor.report.numbers import figure, fixed
from advisor.sizing.capacity import choose_price
from advisor.sizing.configurations import PREDICTED_OUTPUT, PREDICTED_TPOT
from advisor.sizing.deployments import RecommendedDeployment
from advisor.workload.gpus import GPUS
from advisor.workload.profile import (
    Constraint,
    GpuProfile,
    Objective,
    ProfilePrecision,
    ProfileSLO,
    StageProfile,
    WorkloadProfile,
    describe_validation_error,
)
from advisor.workload.stage_input import (
    StageFormValues,
    draft_stage,
    load_kind_shown,
    profile_from_form,
    stage_from_form,
)
from bench.core.config import GenerateWorkload, LengthDistribution
from bench.core.errors import UserError
from bench.core.metric_catalog import SLO_BOUNDS_BY_FIELD
from ui import state
from ui.components import (
    empty_state,
    field_help,
    metric_label,
    metric_unit,
    verdict_rows,
    yes_no,
)

CUSTOM_MODEL = "Local checkpoint path…"
NO_GPU = "Not decided"
OBJECTIVE_LABELS = {
    Objective.MAXIMIZE_THROUGHPUT.value: "Maximise throughput",
    Objective.MAXIMIZE_GOODPUT.value: "Maximise goodput (requests meeting every SLO)",
    Objective.MINIMIZE_LATENCY.value: "Minimise latency",
    Objective.MINIMIZE_COST_PER_TOKEN.value: "Minimise cost per token",
}
BUILD_TIME_LABELS = {
    None: "Not stated",
    "none": "None — serve seconds after load",
    "minutes": "Minutes — JIT compile is fine",
    "hours": "Hours — long engine builds are fine",
}
QUANTIZATIONS = [None, "awq", "gptq", "int8", "int4", "fp8"]


@st.cache_data(ttl=3600, show_spinner=False)
def model_presets() -> dict[str, tuple[str, str]]:
    """Preset name -> (kind, description), from bench.engines.models (imports nothing heavy)."""
    from bench.engines.models import PRESETS

    return {name: (preset.kind, preset.description) for name, preset in PRESETS.items()}


def unknown_model(model: str | None) -> str | None:
    """Why a typed model is refused (the profile's rule, `check_stage_model`: a preset, a known
    Hugging Face id, a published speech model or a local folder with a config.json), or None
    when it is known or empty. As for a profile file, a model whose size is typed (parameters)
    is not checked."""
    from advisor.workload.profile_input import check_stage_model

    if not model or not model.strip():
        return None
    try:
        check_stage_model(model.strip())
    except UserError as exc:
        return str(exc)
    return None


def optional_number(
    column: Any, label: str, current: float | None, *, key: str, help: str
) -> float | None:
    """A number field that may be left empty (None: no limit) and stays as the person left it.

    Streamlit lets a number field be emptied only when it was created with value=None; one
    created with a number snaps back to it when cleared. So the field is created empty and the
    profile's value is put in its session state once, before its first run."""
    if key not in st.session_state:
        st.session_state[key] = current
    return column.number_input(
        label, min_value=0.001, value=None, placeholder="no limit", key=key, help=help
    )


def _key(stage_index: int, name: str) -> str:
    return f"v{st.session_state[state.FORM_VERSION_KEY]}_s{stage_index}_{name}"


# --------------------------------------------------------------------------- the form


def stage_form(index: int, previous: StageProfile, name: str) -> StageFormValues:
    """Widgets for one stage, each starting at the stage's own value; returns what they hold
    (advisor.workload.stage_input.profile_from_form writes it over the stage)."""
    presets = model_presets()
    values = StageFormValues(name=name or f"stage {index + 1}")

    st.markdown("##### 1 · The four questions of the article's decision tree")
    traits = st.columns(2)
    for position, trait, label in (
        (0, "dynamic_control_flow", "Does the model need dynamic control flow?"),
        (1, "fixed_input_shapes", "Are all input shapes fixed?"),
        (0, "long_sequence_generation", "Does it generate long sequences?"),
        (1, "multi_backend", "Must it run on several backends / vendors?"),
    ):
        with traits[position]:
            answer = yes_no(
                label,
                getattr(previous, trait),
                key=_key(index, trait),
                help=field_help(StageProfile, trait),
            )
            setattr(values, trait, answer)

    st.markdown("##### 2 · Model and workload shape")
    left, right = st.columns(2)
    with left:
        kinds = ["generate", "forward"]
        values.kind = st.radio(
            "Kind of inference",
            kinds,
            index=kinds.index(previous.kind),
            format_func={
                "generate": "generate (LLM decoding)",
                "forward": "forward (encoder / CV batches)",
            }.get,
            horizontal=True,
            key=_key(index, "kind"),
            help=field_help(StageProfile, "kind"),
        )
        names = [name for name, (kind, _) in presets.items() if kind == values.kind]
        options = [*names, CUSTOM_MODEL]
        current = previous.model
        choice = st.selectbox(
            "Model",
            options,
            index=options.index(current) if current in names else len(options) - 1,
            format_func=lambda n: n if n == CUSTOM_MODEL else f"{n} — {presets[n][1]}",
            key=_key(index, "model_choice"),
            help=field_help(StageProfile, "model"),
        )
        values.custom_model = choice == CUSTOM_MODEL
        if choice == CUSTOM_MODEL:
            values.model = st.text_input(
                "Checkpoint folder or Hugging Face id",
                value=current if current and current not in presets else "",
                placeholder="/models/my-llama, or meta-llama/Llama-3.1-8B-Instruct",
                key=_key(index, "model_path"),
            )
            values.parameters_b = st.number_input(
                "Parameters (billions)",
                min_value=0.001,
                value=previous.parameters_b,
                step=1.0,
                key=_key(index, "parameters_b"),
                help=field_help(StageProfile, "parameters_b"),
            )
            model_problem = None if values.parameters_b else unknown_model(values.model)
            if model_problem:
                st.error(model_problem)
        else:
            values.model = choice
    with right:
        if values.kind == "generate":
            lengths = st.columns(2)
            values.prompt_mean = lengths[0].number_input(
                "Prompt length (tokens)",
                min_value=1,
                max_value=1_000_000,
                value=previous.prompt_tokens.mean,
                step=64,
                key=_key(index, "prompt_mean"),
                help=field_help(StageProfile, "prompt_tokens"),
            )
            values.output_mean = lengths[1].number_input(
                "Output length (tokens)",
                min_value=1,
                max_value=1_000_000,
                value=previous.output_tokens.mean,
                step=64,
                key=_key(index, "output_mean"),
                help=field_help(StageProfile, "output_tokens"),
            )
            _traffic_fields(index, previous, values)
        else:
            shape = st.columns(2)
            values.batch_size = shape[0].number_input(
                "Batch size",
                min_value=1,
                value=previous.batch_size,
                key=_key(index, "batch_size"),
                help=field_help(StageProfile, "batch_size"),
            )
            values.image_size = shape[1].number_input(
                "Image side (px, CV models)",
                min_value=1,
                value=previous.image_size,
                placeholder="text model: leave empty",
                key=_key(index, "image_size"),
                help=field_help(StageProfile, "image_size"),
            )
            values.sequence_mean = st.number_input(
                "Sequence length (tokens, text encoders)",
                min_value=1,
                value=previous.sequence_length.mean if previous.sequence_length else None,
                placeholder="CV model: leave empty",
                key=_key(index, "sequence_mean"),
                help=field_help(StageProfile, "sequence_length"),
            )
        show_field_problems(draft_stage(previous, values))  # the context window, at the lengths
        load_kinds = ["concurrency", "rate", "peak"]
        values.load_kind = load_kind = st.radio(
            "Load is described by",
            load_kinds,
            index=load_kinds.index(load_kind_shown(previous)),
            format_func={
                "concurrency": "requests in flight",
                "rate": "arrival rate",
                "peak": "peak rate (sizes the fleet)",
            }.get,
            horizontal=True,
            key=_key(index, "load_kind"),
        )
        if load_kind == "concurrency":
            values.concurrency = st.number_input(
                "Requests in flight at peak",
                min_value=1,
                max_value=100_000,
                value=previous.concurrency or 16,
                key=_key(index, "concurrency"),
                help=field_help(StageProfile, "concurrency"),
            )
        elif load_kind == "rate":
            values.request_rate_rps = st.number_input(
                "Arrival rate (requests/s)",
                min_value=0.01,
                value=float(previous.request_rate_rps or 10.0),
                key=_key(index, "rate"),
                help=field_help(StageProfile, "request_rate_rps"),
            )
        else:
            values.peak_request_rate_rps = st.number_input(
                "Peak arrival rate (requests/s)",
                min_value=0.01,
                value=float(previous.peak_request_rate_rps or 10.0),
                key=_key(index, "peak"),
                help=field_help(StageProfile, "peak_request_rate_rps"),
            )

    st.markdown("##### 3 · Service-level objectives")
    slo = previous.slo
    slo_cols = st.columns(4)
    for column, name in zip(
        slo_cols, ("ttft_ms", "tpot_ms", "e2e_ms", "min_output_throughput_tok_s"), strict=True
    ):
        bound = optional_number(
            column,
            SLO_BOUNDS_BY_FIELD[name].form_label(slo.percentile),
            getattr(slo, name),
            key=_key(index, f"slo_{name}"),
            help=field_help(ProfileSLO, name),
        )
        setattr(values, name, bound)
    with st.expander("More SLO options"):
        more = st.columns(2)
        values.slo_percentile = more[0].selectbox(
            "Percentile judged",
            ["p99", "p90", "p50"],
            index=["p99", "p90", "p50"].index(slo.percentile),
            key=_key(index, "slo_percentile"),
            help=field_help(ProfileSLO, "percentile"),
        )
        values.min_request_throughput_rps = optional_number(
            more[1],
            SLO_BOUNDS_BY_FIELD["min_request_throughput_rps"].form_label(slo.percentile),
            slo.min_request_throughput_rps,
            key=_key(index, "slo_min_rps"),
            help=field_help(ProfileSLO, "min_request_throughput_rps"),
        )

    st.markdown("##### 4 · Deployment")
    gpu = previous.gpu
    precision = previous.precision
    deploy = st.columns(4)
    objectives = list(OBJECTIVE_LABELS)
    values.objective = deploy[0].selectbox(
        "Objective",
        objectives,
        index=objectives.index(previous.objective.value),
        format_func=OBJECTIVE_LABELS.get,
        key=_key(index, "objective"),
        help=field_help(StageProfile, "objective"),
    )
    gpu_options = [NO_GPU, *GPUS]
    gpu_type = deploy[1].selectbox(
        "GPU type",
        gpu_options,
        index=gpu_options.index(gpu.type) if gpu.type in GPUS else 0,
        key=_key(index, "gpu_type"),
        help=field_help(GpuProfile, "type"),
    )
    values.gpu_count = deploy[2].number_input(
        "GPU count",
        min_value=1,
        max_value=64,
        value=gpu.count,
        key=_key(index, "gpu_count"),
        help=field_help(GpuProfile, "count"),
    )
    values.gpu_type = None if gpu_type == NO_GPU else gpu_type
    if gpu_type == NO_GPU:
        values.gpu_memory_gb = deploy[3].number_input(
            "GPU memory (GB each)",
            min_value=1.0,
            # A memory derived from the GPU type chosen before is not the user's: start empty.
            value=gpu.memory_gb if gpu.type is None else None,
            placeholder="unknown",
            key=_key(index, "gpu_memory"),
            help=field_help(GpuProfile, "memory_gb"),
        )
    dtypes = ["float16", "bfloat16", "float32"]
    more_deploy = st.columns(4)
    values.dtype = more_deploy[0].selectbox(
        "Precision",
        dtypes,
        index=dtypes.index(precision.dtype),
        key=_key(index, "dtype"),
        help=field_help(ProfilePrecision, "dtype"),
    )
    values.quantization = more_deploy[1].selectbox(
        "Weight quantisation",
        QUANTIZATIONS,
        index=QUANTIZATIONS.index(precision.quantization)
        if precision.quantization in QUANTIZATIONS
        else 0,
        format_func=lambda q: "none" if q is None else q,
        key=_key(index, "quantization"),
        help=field_help(ProfilePrecision, "quantization"),
    )
    kv_options = ["auto", "fp8"]
    values.kv_cache_dtype = st.selectbox(
        "KV cache",
        kv_options,
        index=kv_options.index(precision.kv_cache_dtype),
        format_func=lambda kv: "as the model dtype" if kv == "auto" else "FP8 (vLLM)",
        key=_key(index, "kv_cache_dtype"),
        help=field_help(ProfilePrecision, "kv_cache_dtype"),
    )
    with more_deploy[2]:
        values.determinism_required = yes_no(
            "Identical outputs run to run?",
            previous.determinism_required,
            key=_key(index, "determinism"),
            help=field_help(StageProfile, "determinism_required"),
        )
    build_options = list(BUILD_TIME_LABELS)
    values.build_time_tolerance = more_deploy[3].selectbox(
        "Build / compile time acceptable",
        build_options,
        index=build_options.index(previous.build_time_tolerance),
        format_func=BUILD_TIME_LABELS.get,
        key=_key(index, "build_time"),
        help=field_help(StageProfile, "build_time_tolerance"),
    )
    values.constraints = st.multiselect(
        "Deployment constraints",
        [c.value for c in Constraint],
        default=[c.value for c in previous.constraints],
        format_func=lambda c: c.replace("_", " "),
        key=_key(index, "constraints"),
        help=field_help(StageProfile, "constraints"),
    )
    _quality_fields(index, previous, values)
    show_slo_problems(previous, values)  # the SLO against its floor, once GPU and SLO are set
    return values


def _traffic_fields(index: int, previous: StageProfile, values: StageFormValues) -> None:
    """The traffic the benchmarks send (advisor/workload/traffic.py): a shared context,
    conversations, or a trace / prompt file on the machine that runs the app (a path)."""
    prefix, conversation = previous.shared_prefix, previous.conversation
    files = previous.trace_file or previous.prompt_file
    with st.expander(
        "Traffic: shared prompts, conversations, trace",
        expanded=bool(prefix or conversation or files),
    ):
        cols = st.columns(2)
        values.shared_prefix_tokens = cols[0].number_input(
            "Shared context (tokens, inside the prompt)",
            min_value=1,
            max_value=1_000_000,
            value=prefix.tokens if prefix else None,
            placeholder="none: prompts unrelated",
            key=_key(index, "shared_prefix_tokens"),
            help=field_help(StageProfile, "shared_prefix"),
        )
        values.shared_prefix_count = cols[1].number_input(
            "Distinct shared contexts",
            min_value=1,
            max_value=100_000,
            value=prefix.count if prefix else 1,
            key=_key(index, "shared_prefix_count"),
        )
        cols = st.columns(2)
        values.conversation_turns = cols[0].number_input(
            "Turns per conversation",
            min_value=1,
            max_value=1_000,
            value=conversation.turns if conversation else None,
            placeholder="none: single-turn",
            key=_key(index, "conversation_turns"),
            help=field_help(StageProfile, "conversation"),
        )
        values.user_message_tokens = cols[1].number_input(
            "User message (tokens, later turns)",
            min_value=1,
            max_value=1_000_000,
            value=conversation.user_tokens if conversation else 64,
            key=_key(index, "user_message_tokens"),
        )
        values.trace_file = st.text_input(
            "Trace file to replay (path)",
            value=previous.trace_file or "",
            placeholder="examples/traces/mooncake_small.jsonl",
            key=_key(index, "trace_file"),
            help=field_help(StageProfile, "trace_file"),
        )
        values.prompt_file = st.text_input(
            "Prompt file (path)",
            value=previous.prompt_file or "",
            placeholder="examples/traces/prompts.jsonl",
            key=_key(index, "prompt_file"),
            help=field_help(StageProfile, "prompt_file"),
        )


def _quality_fields(index: int, previous: StageProfile, values: StageFormValues) -> None:
    """Your model's measured quality per precision (the quality.json of `python -m bench
    quality`, uploaded or a path) and the loss tolerated: a precision losing more is not
    recommended. Without a file the precision risks stay worded as unchecked."""
    from bench.core.quality import load_quality_result

    with st.expander(
        "Quality: your evaluation result and the loss you tolerate",
        expanded=bool(previous.quality_result),
    ):
        st.caption(
            "Measure it with `python -m bench quality --model M --precision bf16 --precision fp8 "
            "--text FILE --out DIR` (docs/quality.md), then upload DIR/quality.json or give its "
            "path. Optional: without it, FP8/INT8 accuracy is shown as yours to check."
        )
        cols = st.columns([3, 1])
        with cols[0]:
            upload = st.file_uploader(
                "Upload quality.json",
                type=["json"],
                key=f"quality_upload_{st.session_state[state.FORM_VERSION_KEY]}_{index}",
                help=field_help(StageProfile, "quality_result"),
            )
            path = st.text_input(
                "…or its path",
                value=previous.quality_result or "",
                placeholder="none: FP8/INT8 accuracy unchecked",
                key=_key(index, "quality_result"),
                help=field_help(StageProfile, "quality_result"),
                disabled=upload is not None,
            )
        values.max_quality_loss_pct = cols[1].number_input(
            "Tolerated quality loss (%)",
            min_value=0.0,
            max_value=100.0,
            value=float(previous.max_quality_loss_pct),
            step=0.1,
            key=_key(index, "max_quality_loss_pct"),
            help=field_help(StageProfile, "max_quality_loss_pct"),
        )
        if upload is not None:
            try:
                path = state.save_uploaded_quality(upload.getvalue(), upload.name)
            except UserError as exc:
                st.error(f"{exc}. Not used.")
                path = ""
        values.quality_result = path.strip()
        if values.quality_result:
            try:
                result = load_quality_result(values.quality_result)
            except UserError as exc:
                st.error(f"{exc}. Not used: the advice below is without it.")
                values.quality_result = ""
            else:
                measured = [r.precision for r in result.precisions if r.status == "measured"]
                st.caption(
                    f"Read: {result.model} on {result.engine}, baseline {result.baseline}; "
                    f"measured {', '.join(measured) or 'none'}."
                )


# --------------------------------------------------------------------------- profile actions


def show_field_problems(draft: StageProfile | None, slo: bool = False) -> None:
    """The advisor's per-field feasibility problems (advisor.sizing.field_problems): the
    lengths' (the context window) under the length fields, or with `slo` the SLO's against its
    floor under the SLO and GPU fields; nothing until the draft is valid (None: the form's own
    validation message says what is missing)."""
    from advisor.sizing.field_problems import feasibility_problems

    if draft is None:
        return
    for problem in feasibility_problems([draft]):
        if problem.field.startswith("slo.") != slo:
            continue
        show = st.error if problem.severity == "error" else st.warning
        show(f"**{problem.field}**: {problem.message}")
    message = forward_floor_message(draft) if slo else None
    if message is not None:
        (st.error if message[0] else st.warning)(message[1])


def show_slo_problems(previous: StageProfile, values: StageFormValues) -> None:
    """The stage as the whole form describes it, its SLO judged against its floor."""
    try:
        stage = stage_from_form(previous, values)
    except (ValidationError, ValueError):  # the form's own validation line says why
        return
    show_field_problems(stage, slo=True)


def forward_floor_message(draft: StageProfile) -> tuple[bool, str] | None:
    """(infeasible, text) when a forward stage's p99 SLO is below the floor of its in-flight
    batches on its GPU type, or within the floor model's error of it (advisor.sizing.
    forward_sizing.floor_feasibility); None otherwise."""
    from advisor.sizing.forward_sizing import floor_feasibility

    verdict = floor_feasibility(draft)
    if verdict is None or (verdict.feasible and not verdict.within_error):
        return None
    head = (
        f"**SLO**: {verdict.in_flight} batch(es) of {verdict.batch} in flight on one "
        f"{draft.gpu.type} need at least {verdict.floor_ms:.3g} ms at the floor against the "
        f"{verdict.slo_ms:g} ms p99"
    )
    head += (
        " — below the floor: no engine can meet it."
        if not verdict.feasible
        else " — within the floor model's error: it may not hold."
    )
    return not verdict.feasible, head + " Would make it feasible: " + "; ".join(verdict.remedies)


def _add_stage() -> None:
    profile = state.current_profile()
    names = {stage.name for stage in profile.stages}
    number = len(profile.stages) + 1
    while f"stage {number}" in names:
        number += 1
    stages = [*profile.stages, state.default_stage(f"stage {number}")]
    # Validated again as a whole: the profile's own limits (number of stages) still hold.
    state.replace_profile(WorkloadProfile.model_validate({**dict(profile), "stages": stages}))


def _remove_stage(index: int) -> None:
    profile = state.current_profile()
    if len(profile.stages) > 1:
        stages = [stage for position, stage in enumerate(profile.stages) if position != index]
        state.replace_profile(profile.model_copy(update={"stages": stages}))


def _reset_profile() -> None:
    state.replace_profile(state.default_profile())


def _profile_file_panel(profile: WorkloadProfile) -> None:
    with st.expander("Profile file (YAML): download, upload, reset"):
        left, right = st.columns([1, 2])
        with left:
            st.download_button(
                "Download profile (YAML)",
                state.profile_yaml(profile),
                file_name="workload-profile.yaml",
                mime="application/x-yaml",
                icon=":material/download:",
            )
            st.button("Reset to the example", on_click=_reset_profile, type="tertiary")
        with right:
            upload = st.file_uploader(
                "Upload a profile (YAML or JSON)",
                type=["yaml", "yml", "json"],
                key=f"upload_{st.session_state[state.FORM_VERSION_KEY]}",
                help="A profile written by `python -m advisor` or downloaded here (max 256 KB).",
            )
            if upload is not None:
                try:
                    uploaded = state.read_uploaded_profile(upload.getvalue(), upload.name)
                except UserError as exc:
                    st.error(str(exc))
                else:
                    if st.button("Use this profile", type="primary"):
                        state.replace_profile(uploaded)
                        st.rerun()


# --------------------------------------------------------------------------- the advice


def path_graph(decision: Any) -> str:
    """The decision path as Graphviz DOT: each question, the answer taken, then the leaf."""

    def quote(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [
        "digraph path {",
        '  rankdir=TB; bgcolor="transparent";',
        '  node [shape=box, style="rounded,filled", fillcolor="#f0f2f6", color="#c0c4cc", '
        'fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=10, color="#808495"];',
    ]
    for number, step in enumerate(decision.path, start=1):
        label = _wrap(f"{number}. {step.question}", 38)
        lines.append(f"  q{number} [label={quote(label)}];")
    leaf_label = _wrap(
        f"{decision.title}\n→ " + ", ".join(c.framework for c in decision.candidates), 38
    )
    lines.append(f'  leaf [label={quote(leaf_label)}, fillcolor="#d3f0dc", color="#21a35a"];')
    targets = [f"q{n}" for n in range(2, len(decision.path) + 1)] + ["leaf"]
    for number, (step, target) in enumerate(zip(decision.path, targets, strict=True), start=1):
        colour = "#21a35a" if step.answer == "yes" else "#808495"
        lines.append(
            f"  q{number} -> {target} [label={quote(step.answer)}, color={quote(colour)}];"
        )
    lines.append("}")
    return "\n".join(lines)


def _wrap(text: str, width: int) -> str:
    words, lines, line = text.split(), [], ""
    for word in words:
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    lines.append(line)
    return "\n".join(lines)


def show_path(decision: Any) -> None:
    st.markdown("#### How the tree decided")
    left, right = st.columns([2, 3])
    with left:
        st.graphviz_chart(path_graph(decision))
    with right:
        for number, step in enumerate(decision.path, start=1):
            answer = ":green[**yes**]" if step.answer == "yes" else ":gray[**no**]"
            st.markdown(f"**{number}. {step.question}**  \n{answer} — {step.why}")
        st.markdown(f"**Leaf:** {decision.title}")


def show_candidates(stage_result: Any, scope: str = "s0") -> None:
    decision, estimate = stage_result.decision, stage_result.estimate
    availability = stage_result.recommendation.availability
    st.markdown("#### Candidates and feasibility")
    for candidate in decision.candidates:
        runs_here = availability.get(candidate.framework)
        if not candidate.benchmarked:
            where = "not benchmarked by this tool"
        elif runs_here == "available":
            where = "installed here: can be measured"
        else:
            where = f"cannot be measured here: {runs_here or 'no adapter'}"
        st.markdown(f"**{candidate.rank}. {candidate.framework}** — {candidate.rationale}")
        st.caption(where)
    show_estimate(estimate, scope)


PART_COLOURS = {"weights": "#f58518", "KV cache": "#4c78a8", "runtime overhead": "#9ecae9"}
"""Each memory part's colour, whichever parts a breakdown has."""


def memory_chart_spec(parts: dict[str, float], available_gb: float | None) -> dict[str, Any]:
    """The memory breakdown as a Vega-Lite spec: the parts stacked in one bar, the GPU's memory
    as a red rule. Written as the spec itself, not through altair: Streamlit validates an altair
    chart against the whole Vega-Lite schema on every draw (0.8 of 6 s of the Advisor page's
    server time with 20 sessions at once, py-spy --gil)."""
    bars = [{"what": name, "GB": value, "row": "needed"} for name, value in parts.items()]
    colours = {"domain": list(parts), "range": [PART_COLOURS[name] for name in parts]}
    layers: list[dict[str, Any]] = [
        {
            "data": {"values": bars},
            "mark": {"type": "bar", "size": 28},
            "encoding": {
                "x": {"aggregate": "sum", "field": "GB", "type": "quantitative",
                      "title": "GB needed (stacked) and available"},
                "y": {"field": "row", "type": "nominal", "title": None, "axis": None},
                # Blues and orange, never red: red is the GPU's memory line beside them.
                "color": {"field": "what", "type": "nominal",
                          "scale": colours,
                          "legend": {"orient": "top", "title": None}},
                "order": {"field": "what", "type": "nominal"},
                "tooltip": [{"field": "what", "type": "nominal"},
                            {"field": "GB", "type": "quantitative", "format": ".2f"}],
            },
        }
    ]  # fmt: skip
    if available_gb:
        available = {"values": [{"GB": available_gb, "label": f"available {available_gb:.1f} GB"}]}
        rule = {"type": "rule", "color": "#d33", "strokeWidth": 3}
        layers.append({"data": available, "mark": rule,
                       "encoding": {"x": {"field": "GB", "type": "quantitative"}}})  # fmt: skip
        layers.append(
            {
                "data": available,
                "mark": {"type": "text", "align": "right", "dx": -4, "dy": -22,
                         "color": "#d33", "fontSize": 11},
                "encoding": {"x": {"field": "GB", "type": "quantitative"},
                             "text": {"field": "label", "type": "nominal"}},
            }
        )  # fmt: skip
    # The plot's own height, with the legend and axis added around it: Streamlit's default
    # autosize (fit) squeezes a short chart's plot to nothing and clips the axis.
    return {"layer": layers, "height": 44, "autosize": {"type": "fit-x", "contains": "padding"}}


def show_estimate(estimate: Any, scope: str = "s0") -> None:
    columns = st.columns(4)
    verdict = estimate.fit_verdict  # "no GPU to fit against" when the GPU is not decided
    columns[0].metric(
        "Memory",
        verdict,
        delta=None if estimate.headroom_gb is None else f"{estimate.headroom_gb:+.1f} GB headroom",
        # Positive headroom green, a shortfall red (never a green minus).
        delta_color="normal",
        help="Weights + KV cache at the stage's concurrency and context + activation margin + "
        "runtime overhead, against the GPU memory.",
    )
    columns[1].metric(
        "Needed / available",
        fixed(estimate.required_gb, "", 1) + " / " + fixed(estimate.available_gb, "GB", 1),
    )
    columns[2].metric(
        "Decode floor (batch 1)",
        "—"
        if estimate.decode_floor_ms_per_token is None
        else f"{estimate.decode_floor_ms_per_token:.3g} ms/token",
        help="Weight bytes / memory bandwidth: no engine decodes one sequence faster "
        f"({estimate.bandwidth_source or 'bandwidth source unknown'}).",
    )
    columns[3].metric(
        "Max concurrency that fits",
        fixed(estimate.max_concurrency_that_fits, "", 0),
        help=f"Concurrency used: {estimate.concurrency} ({estimate.concurrency_source}).",
    )
    parts = {
        "weights": estimate.weights_gb,
        "KV cache": estimate.kv_cache_gb,
        "runtime overhead": estimate.runtime_overhead_gb,
    }
    parts = {name: value for name, value in parts.items() if value}
    if parts:
        with st.container(key=f"memory_chart_{scope}"):
            st.vega_lite_chart(memory_chart_spec(parts, estimate.available_gb))
        st.caption(
            f"Memory breakdown for {estimate.gpu_count} × {estimate.gpu or 'GPU'} "
            f"({estimate.precision}); red line = the memory a serving engine takes (90% of "
            "the GPU's, vLLM's gpu_memory_utilization default)"
            + (
                f" · parameters: {estimate.parameters_label} ({estimate.parameters_source})"
                if estimate.parameters
                else ""
            )
        )
    for suggestion in estimate.suggestions:
        st.warning(suggestion, icon=":material/lightbulb:")
    if estimate.notes:
        with st.expander("How the estimate was made"):
            for note in estimate.notes:
                st.markdown(f"- {note}")


CONFIDENCE_COLOURS = {"high": "green", "medium": "orange", "low": "gray"}


def show_recommendation(stage_result: Any, view_gpu: str | None = None) -> None:
    """The answer for the stage; `view_gpu` names the GPU of a published-runs view (its
    measurements are on that GPU, not on the user's)."""
    recommendation = stage_result.recommendation
    st.markdown("#### Recommendation")
    basis = recommendation.basis  # yours / published / tree / refused, in words
    if view_gpu:
        basis += f" — a view of the published runs on {view_gpu}, not of your GPU"
    st.success(f"### {recommendation.framework}\n{basis}", icon=":material/recommend:")
    if recommendation.headline:  # the answer in one sentence: GPUs and cost when measured
        st.markdown(f"**{recommendation.headline}**")
    st.badge(
        f"confidence: {recommendation.confidence.level}",
        color=CONFIDENCE_COLOURS.get(recommendation.confidence.level, "gray"),
    )
    st.caption(recommendation.confidence.why)
    for contradiction in recommendation.contradictions:
        st.warning(
            f"**Evidence disagrees with the tree.** {contradiction}", icon=":material/warning:"
        )
    for gap in recommendation.unmeasured:  # an engine not installed: no evidence, no dispute
        st.info(f"**Not measured here.** {gap}", icon=":material/extension_off:")
    for caveat in recommendation.caveats:
        st.markdown(f"- {caveat}")
    if recommendation.configuration:
        with st.expander("Configuration to deploy"):
            show_configuration(recommendation.configuration)
    show_evidence(stage_result, view_gpu)
    if recommendation.verdicts:
        with st.expander("Measured comparison: ratios with 95% intervals"):
            st.dataframe(verdict_rows(recommendation.verdicts), hide_index=True)
    if recommendation.alternatives:
        with st.expander("Alternatives and what would change the answer"):
            for alternative in recommendation.alternatives:
                st.markdown(
                    f"**{alternative.framework}** (tree rank {alternative.rank}) — "
                    f"{alternative.why_not_first}"
                )
                for change in alternative.what_would_change:
                    st.markdown(f"  - {change}")
    learned = stage_result.learned
    if learned is not None:
        with st.expander("Second opinion: a decision tree fitted on stored evidence"):
            st.markdown(learned.message)
            if learned.shown and learned.cv_accuracy is not None:
                st.caption(
                    f"Cross-validated accuracy {learned.cv_accuracy:.0%} ({learned.cv_scheme}); "
                    f"always guessing the most common winner: "
                    f"{fixed((learned.baseline_accuracy or 0) * 100, '%', 0)}"
                )


TPOT_UNIT, OUTPUT_UNIT = PREDICTED_TPOT.unit, PREDICTED_OUTPUT.unit
"""The catalogue's units of the step model's two figures (the configuration tables use them)."""
FIGURE_LABELS = {
    "predicted_tpot_ms": (f"{PREDICTED_TPOT.spec.label} (predicted)", TPOT_UNIT),
    "predicted_output_throughput_tok_s": (f"{PREDICTED_OUTPUT.title} (predicted)", OUTPUT_UNIT),
    "predicted_tok_s_per_gpu": ("Output per GPU (predicted)", OUTPUT_UNIT),
    "predicted_tok_s_per_user": ("Speed per user (predicted)", OUTPUT_UNIT),
}


def _length(distribution: LengthDistribution | None) -> str:
    if distribution is None:
        return "—"
    text = f"{figure(distribution.mean, 'tokens')}"
    return text if distribution.kind == "fixed" else f"{text} ({distribution.kind}, mean)"


def configuration_rows(configuration: RecommendedDeployment) -> list[dict[str, str]]:
    """The recommendation's configuration as setting/value rows a person reads: deployment,
    GPUs, precision, engine arguments one per row, workload and load, figures with units.
    Unset values are left out (a row never says None)."""
    rows: list[dict[str, str]] = []

    def add(setting: str, value: Any) -> None:
        if value is None or value == "" or value == {} or value == []:
            return
        if isinstance(value, bool):
            value = "yes" if value else "no"
        elif isinstance(value, float):
            value = figure(value)
        rows.append({"setting": setting, "value": str(value)})

    add("Deployment", configuration.label)
    parallelism = configuration.parallelism
    if parallelism is not None:
        replicas = parallelism.replicas
        add(
            "GPUs",
            f"{parallelism.gpus_needed} (tensor parallel {parallelism.tensor_parallel_size} × "
            f"{replicas} replica{'s' if replicas != 1 else ''})",
        )
    precision = configuration.precision
    if precision is not None:
        add("Precision", precision.dtype)
        add("Weight quantisation", precision.quantization or "none")
        kv = precision.kv_cache_dtype
        if configuration.workload is None or configuration.workload.kind == "generate":
            add("KV cache", "as the model dtype" if kv == "auto" else kv)
        add("TF32 matmuls allowed", precision.allow_tf32)
    for name, value in sorted(configuration.typed_engine_args().items()):
        add(f"Engine argument: {name}", value)
    workload = configuration.workload
    if workload is not None:
        add("Kind", workload.kind)
        if isinstance(workload, GenerateWorkload):
            add("Prompt length", _length(workload.prompt_tokens))
            add("Output length", _length(workload.output_tokens))
    load = configuration.load
    if load is not None:
        level = load.plan_words(figure)
        duration = getattr(load, "duration_s", None)
        add(
            "Benchmark load",
            f"{level}"
            + (f" for {figure(duration, 's')}" if duration else "")
            + (f", {load.warmup_requests} warm-up requests" if load.warmup_requests else ""),
        )
    figures = configuration.figures
    if figures is not None:
        basis = figures.basis
        add("Chosen on", {"measured": "measurements", "estimate": "the estimate"}.get(basis, basis))
        at = figures.at_concurrency
        for key, (label, unit) in FIGURE_LABELS.items():
            value = getattr(figures, key)
            if value is not None:
                suffix = f" at concurrency {at}" if at else ""
                add(label, figure(value, unit) + suffix)
    add("Source", configuration.source)
    for text in configuration.trade_offs:
        add("Trade-off", text)
    add("Estimate accuracy", configuration.estimate_accuracy)
    add("shape", configuration.shape)
    return rows


def show_configuration(configuration: RecommendedDeployment) -> None:
    rows = configuration_rows(configuration)
    st.table(pd.DataFrame(rows, columns=["setting", "value"]), hide_index=True, border="horizontal")
    engine_args = configuration.typed_engine_args()
    if engine_args:
        st.caption("Engine arguments as `key=value` (the Benchmark page's and the CLI's form):")
        st.code(", ".join(f"{k}={v}" for k, v in sorted(engine_args.items())), language="text")


def show_evidence(stage_result: Any, view_gpu: str | None = None) -> None:
    rows = stage_result.evidence
    if not rows:
        empty_state(
            "No evidence yet for this stage.",
            "Run the plan on the **Benchmark** page to settle the choice with measurements.",
        )
        return
    table = pd.DataFrame(
        [
            {
                "framework": row.framework,
                "source": row.label,  # provenance and device in words (your run, CPU)
                "GPU": row.gpu or "—",
                "model": row.model or "—",
                "shape": row.shape,
                "status": row.status,
                "meets SLOs": "yes" if row.meets_slo else ("no" if row.meets_slo is False else "—"),
                "objective": metric_label(row.objective_metric),
                "value": figure(row.objective_value, metric_unit(row.objective_metric)),
                "runs": row.repeats,
            }
            for row in rows
        ]
    )
    st.markdown("**Evidence** (ranked: eligible first, then how close to your case)")
    st.dataframe(table, hide_index=True)
    caption = provenance_caption(rows)
    if caption:
        st.caption(caption)


def provenance_caption(rows: list[Any]) -> str:
    """What the sources in the evidence table are, in the advisor's provenance words (your
    runs / this project's published runs / the article's figures), for the kinds present."""
    from advisor.evidence.rows import PROVENANCE_WORDS

    kinds = {row.provenance.kind for row in rows if row.provenance is not None}
    parts = []
    if "yours" in kinds:
        parts.append(f"'your run' rows are {PROVENANCE_WORDS['yours']}")
    if "published" in kinds:
        parts.append(
            f"'published run' rows are {PROVENANCE_WORDS['published']}, each with its host "
            "and date: measured by this project, not by you"
        )
    if "article" in kinds:
        parts.append(
            f"'the article' rows are {PROVENANCE_WORDS['article']} (A100, workload not "
            "stated), for orientation only"
        )
    if not parts:
        return ""
    text = "; ".join(parts)
    return (
        text[:1].upper()
        + text[1:]
        + ". Only measurements that match this workload on your GPU type change the answer."
    )


@st.cache_data(ttl=600, show_spinner=False)
def shipped_gpus(model: str | None = None) -> list[str]:
    """GPU types of the measured runs shipped in data/reference (catalogue names, e.g. H200),
    the one with the most runs of `model` first, then the most runs of any: the view offers
    that one (the GPU whose runs say most about this workload)."""
    from collections import Counter

    from advisor.sizing.measured import run_gpu_name

    runs = [run for runs in state.reference_files().runs.values() for run in runs]
    counts = Counter(gpu for gpu in map(run_gpu_name, runs) if gpu)
    of_model = Counter(run_gpu_name(run) for run in runs if run.config.model == model)
    return sorted(counts, key=lambda gpu: (-of_model[gpu], -counts[gpu], gpu))


def published_gpu_view(profile: WorkloadProfile, index: int, gpu: str) -> WorkloadProfile:
    """The profile as it would read on `gpu`, for a view only: the session's profile is not
    touched (the user's GPU stays theirs)."""
    stage = profile.stages[index]
    # Only the type and count: memory, bandwidth and price follow the view's GPU, not the user's.
    viewed = stage.model_copy(update={"gpu": GpuProfile(type=gpu, count=stage.gpu.count)})
    stages = [viewed if position == index else s for position, s in enumerate(profile.stages)]
    return profile.model_copy(update={"stages": stages})


def evidence_gpu_notice(
    index: int, profile: WorkloadProfile, stage: StageProfile, stage_result: Any
) -> None:
    """When no measurement counts for the stage's GPU, say which GPU the shipped measurements
    were taken on and offer a view of what they say (the answer here is the tree's alone)."""
    from advisor.sizing.measured import same_gpu_type

    gpus = shipped_gpus(stage.model)
    covered = any(same_gpu_type(gpu, stage.gpu.type) for gpu in gpus)
    measured_here = any(row.source == "measured-here" for row in stage_result.evidence)
    if covered or measured_here or not gpus:
        return
    named = f"**{stage.gpu.type}**" if stage.gpu.type else "an unstated GPU"
    st.info(
        f"No measurement counts for {named} yet, so this answer rests on the decision tree. "
        f"The measurements published with the advisor (`data/reference`) were taken on "
        f"{', '.join(f'**{gpu}**' for gpu in gpus)}: you can see what the {gpus[0]} ones say "
        "for this workload (your profile "
        "keeps its GPU), or run the benchmark plan on your GPU.",
        icon=":material/info:",
    )
    shown = st.toggle(
        f"See what the published {gpus[0]} runs say",
        key=_key(index, "published_gpu_view"),
        help="A view of the answer on the GPU the published runs were measured on. It does "
        "not change your profile, its GPU, the plan or the report.",
    )
    if not shown:
        return
    view = published_gpu_view(profile, index, gpus[0])
    try:
        answer = state.advise(view, state.store_location())
    except UserError as exc:
        st.error(str(exc))
        return
    with st.container(border=True, key=f"published_view_{index}"):
        st.markdown(
            f"##### On {gpus[0]}, as the published runs measured it — a view, not your answer"
        )
        st.caption(
            f"Your profile still says {stage.gpu.type or 'no GPU'}; everything outside this box "
            f"is the answer for it. The figures here are {gpus[0]} figures."
        )
        show_recommendation(answer.stages[index], view_gpu=gpus[0])
        show_configurations(answer.stages[index], answer.calibration, f"s{index}_view")


def gpu_use(needed: int, budget: int, short: bool = False) -> str:
    """`uses 1 of the profile's 2 GPUs`; beyond the budget `needs 4 GPUs; the profile has 1`."""
    plural = "s" if needed != 1 else ""
    if needed <= budget:
        if short:
            return f"{needed} of {budget}"
        return f"uses {needed} of the profile's {budget} GPU{'s' if budget != 1 else ''}"
    if short:
        return f"{needed} (profile has {budget})"
    return f"needs {needed} GPU{plural}; the profile has {budget}"


def format_percent(value: float | None) -> str:
    return "—" if value is None else f"{value:+.0%}"


def show_configurations(stage_result: Any, calibration: Any, scope: str = "s0") -> None:
    """The configuration search: TP x replicas x precision, predicted beside measured, the
    Pareto chart with the recommended point, and the estimate's leave-one-out error."""
    from advisor.report.charts import pareto_chart

    search = stage_result.configurations
    if search is None or not search.estimates:
        return
    best = search.best()
    st.markdown("#### Configuration: GPUs per engine, replicas, precision")
    basis = "measured" if search.recommended_basis == "measured" else "an estimate (not measured)"
    st.info(
        f"**{best.label}** — {gpu_use(best.deployment.gpus, search.gpu_budget)} — {basis}",
        icon=":material/memory:",
    )
    rows = []
    with_quality = any(estimate.quality for estimate in search.estimates)
    for estimate in search.estimates:
        prediction = estimate.prediction
        measured = next((m for m in estimate.measured if m.concurrency == search.concurrency), None)
        rows.append(
            {
                "configuration": estimate.label,
                # Measured quality next to the label, in view beside the speed columns (the
                # table is wider than the page: a last column is scrolled out of sight).
                **({"Quality": estimate.quality or "—"} if with_quality else {}),
                "GPUs": gpu_use(estimate.deployment.gpus, search.gpu_budget, short=True),
                "weights / GPU": figure(estimate.weights_gb_per_gpu, "GB"),
                "KV cache / GPU": figure(estimate.kv_cache_gb_per_gpu, "GB"),
                "TPOT predicted": figure(prediction.tpot_ms if prediction else None, TPOT_UNIT),
                "TPOT measured": figure(measured.measured_tpot_ms if measured else None, TPOT_UNIT),
                "output predicted": figure(
                    prediction.output_throughput_tok_s if prediction else None, OUTPUT_UNIT
                ),
                "output measured": figure(
                    measured.measured_output_tok_s if measured else None, OUTPUT_UNIT
                ),
                "floor / step": figure(estimate.efficiency),
                "calibration": estimate.efficiency_source or "—",
            }
        )
    st.caption(
        f"At concurrency {search.concurrency}; best first on your objective; — = not measured."
    )
    with st.container(key=f"configurations_table_{scope}"):
        st.dataframe(pd.DataFrame(rows), hide_index=True)
    from advisor.workload.quality import BEYOND_TOLERANCE

    beyond = [why for why in search.excluded if BEYOND_TOLERANCE in why]
    if beyond:
        st.warning(
            "Not recommended: measured quality loss beyond your tolerance\n"
            + "\n".join(f"- {why}" for why in beyond),
            icon=":material/rule:",
        )
    for text in search.trade_offs:
        st.markdown(f"- {text}")
    chart = pareto_chart(search)
    if chart.available:
        spec = chart_spec(chart.model_dump_json())
        # The report's spec sizes the plot area; Streamlit's default autosize (fit) would fit
        # plot, legend and title into that height and squeeze the plot to a line at 0.
        spec["autosize"] = {"type": "fit-x", "contains": "padding"}
        with st.container(key=f"pareto_chart_{scope}"):
            st.vega_lite_chart(spec)
        st.caption(chart.description)
    for note in search.notes:
        st.caption(note)
    if calibration is not None and calibration.verdict:
        with st.expander("How accurate is the estimate? (predicted beside measured)"):
            st.markdown(calibration.verdict)
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "engine / TP / precision": point.partition,
                            "model": point.model,
                            "concurrency": point.concurrency,
                            "TPOT measured": figure(point.measured_tpot_ms, TPOT_UNIT),
                            "TPOT predicted": figure(point.predicted_tpot_ms, TPOT_UNIT),
                            "TPOT error": format_percent(point.tpot_error),
                            "output measured": figure(point.measured_output_tok_s, OUTPUT_UNIT),
                            "output predicted": figure(point.predicted_output_tok_s, OUTPUT_UNIT),
                            "output error": format_percent(point.throughput_error),
                        }
                        for point in calibration.points
                    ]
                ),
                hide_index=True,
            )
            st.caption(
                "Each prediction leaves its own run out (leave-one-out) before the serving "
                "model's factors are fitted: the calibration the fleet uses too."
            )


# --------------------------------------------------------------------------- capacity and cost


@st.cache_data(ttl=3600, max_entries=64, show_spinner=False)
def chart_spec(chart_json: str) -> dict[str, Any]:
    """The report's Vega-Lite spec of a chart, by the chart's content (a copy each call): a
    rerun of the same profile, and every session's first view of the default profile, reuse
    it instead of building it through altair again (~0.1 s of the server's CPU each)."""
    from advisor.report.charts import vega_lite_spec
    from advisor.report.model import Chart

    return vega_lite_spec(Chart.model_validate_json(chart_json))


def capacity_chart(view: CapacityView) -> alt.Chart | None:
    """GPUs needed vs peak rate (a step line per configuration), the peak as a red rule."""
    chart = view.chart
    if not chart.available or not chart.series:
        return None
    points = pd.DataFrame(
        [
            {"peak (req/s)": x, "GPUs": y, "configuration": series.name}
            for series in chart.series
            for x, y in zip(series.x, series.y, strict=True)
        ]
    )
    lines = (
        alt.Chart(points)
        .mark_line(interpolate="step-after")
        .encode(
            x=alt.X("peak (req/s):Q", title=chart.x_label),
            y=alt.Y("GPUs:Q", title=chart.y_label),
            color=alt.Color(
                "configuration:N",
                legend=alt.Legend(orient="bottom", title=None, labelLimit=0, columns=2),
            ),
            tooltip=["configuration", alt.Tooltip("peak (req/s):Q", format=".3g"), "GPUs:Q"],
        )
    )
    peak = pd.DataFrame(
        {"x": [view.peak_request_rate_rps], "label": [f"peak {view.peak_request_rate_rps:g}"]}
    )
    rule = alt.Chart(peak).mark_rule(color="#d33", strokeDash=[4, 3]).encode(x="x:Q")
    return (lines + rule).properties(height=260)


def capacity_rows(view: CapacityView) -> pd.DataFrame:
    """The measured rows then the estimates, formatted with units ("—" where unknown)."""
    return pd.DataFrame(
        [
            {
                "Candidate": row.label
                + (" (predicted, not measured)" if row.source == "estimate" else ""),
                "Max rate within the SLO": fixed(row.max_rate_rps, "req/s", 3)
                + (
                    f" ({row.low_rate_rps:.3g}–{row.high_rate_rps:.3g})"
                    if row.low_rate_rps is not None and row.high_rate_rps is not None
                    else ""
                ),
                "Binding constraint": row.binding_constraint or "—",
                "GPUs at peak": str(row.gpus_needed)
                + (
                    f" ({row.gpus_range[0]}–{row.gpus_range[1]})"
                    if row.gpus_range and row.gpus_range[0] != row.gpus_range[1]
                    else ""
                )
                + ("" if row.converged else " (search not converged)"),
                "$/month": "—" if row.monthly_cost is None else f"${row.monthly_cost:,.0f}",
                "$ per 1M output tokens": "—"
                if row.cost_per_million_output_tokens is None
                else f"${row.cost_per_million_output_tokens:,.2f}",
                "Source": row.source,
            }
            for row in view.rows
        ]
    )


def show_capacity(stage: StageProfile, stage_result: Any, scope: str = "s0") -> None:
    """The "Capacity and cost" panel: the stage's capacity searches sized for a peak, headroom
    and price the user moves here. Moving them only re-sizes (advisor.report.capacity): no
    benchmark runs and the saved profile is unchanged (these inputs are not the form's)."""
    recommendation = stage_result.recommendation
    st.markdown("#### Capacity and cost")
    if recommendation.capacity_basis:  # which capacity or calibration sized the fleet
        st.caption(f"The fleet is {recommendation.capacity_basis}")
    gpu = stage.gpu.type or "your GPU"
    searched = _stage_capacity_runs(stage) if not recommendation.capacities else ([], set())
    measured = any(entry.provenance != "estimate" for entry in recommendation.capacities)
    if not measured and not searched[0]:
        why = (
            f"No capacity measured on {gpu} for this workload"
            if stage.gpu.type
            else "No GPU type in the profile, so no capacity can be matched to it"
        )
        empty_state(
            f"{why}: "
            + (
                "the GPU count and cost below are the serving model's prediction, with its "
                "interval."
                if recommendation.capacities
                else "the GPU count and cost under the SLO are not known."
            ),
            "The Benchmark page's plan includes a capacity search (the highest request rate "
            "that meets the SLO) for the leading candidates; run it, and this panel sizes the "
            "fleet for your peak traffic.",
        )
        for note in recommendation.capacity_notes:
            st.caption(note)
        if not recommendation.capacities:
            return  # nothing to size; with estimates, the table below shows them, labelled
    try:
        price, source = choose_price(stage.gpu.type, stage.gpu.price_per_hour)
    except UserError:
        price, source = None, None
    peak_default = float(stage.peak_request_rate_rps or stage.request_rate_rps or 1.0)
    # The defaults are in the keys: a new profile value resets the inputs to it.
    inputs = st.columns(3)
    peak = inputs[0].number_input(
        "Peak rate (req/s)",
        min_value=0.001,
        value=peak_default,
        key=f"capacity_{scope}_peak_{peak_default:g}",
        help="The traffic the fleet must carry within the SLO (the profile's "
        "peak_request_rate_rps, else its request rate). Changing it here re-sizes only.",
    )
    if stage.peak_request_rate_rps is None and stage.request_rate_rps is None:
        inputs[0].caption("The profile gives no peak traffic: enter yours.")
    headroom = inputs[1].number_input(
        "Headroom",
        min_value=0.0,
        max_value=10.0,
        value=float(stage.headroom_fraction),
        step=0.05,
        format="%.2f",
        key=f"capacity_{scope}_headroom_{stage.headroom_fraction:g}",
        help="Spare capacity on top of the peak (0.2 = 20%).",
    )
    chosen_price = inputs[2].number_input(
        "GPU price ($ per GPU-hour)",
        min_value=0.01,
        value=price,
        step=0.1,
        format="%.2f",
        key=f"capacity_{scope}_price_{price}",
        help="On-demand price per GPU-hour: the profile's gpu.price_per_hour, else the "
        "reference price of data/gpu_prices.yaml.",
    )
    if price is None:
        inputs[2].caption(f"No reference price for {gpu}: enter one to see the cost.")
    elif chosen_price == price:
        inputs[2].caption(
            "From the profile"
            if source == "profile"
            else "Reference price: " + (source or "").removeprefix("reference: ")
        )
    else:
        inputs[2].caption("Your price (the profile is unchanged)")
    try:
        if recommendation.capacities:
            view = capacity_view(
                recommendation.capacities, peak, chosen_price, headroom, stage.gpu.type
            )
        else:  # searches stored, but the profile has no peak: size them at the panel's peak
            runs, published = searched
            view = capacity_view_for_runs(
                stage, runs, peak, chosen_price, headroom, frozenset(published)
            )
    except UserError as exc:
        st.error(str(exc))
        return
    if not view.rows:
        empty_state(f"No capacity measured on {gpu} for this workload.")
        for note in view.notes:
            st.caption(note)
        return
    with st.container(key=f"capacity_table_{scope}"):
        st.dataframe(capacity_rows(view), hide_index=True)
    estimates = [row for row in view.rows if row.source == "estimate"]
    if estimates:
        st.caption(
            "Rows marked (estimate, not measured) come from the configuration search's model, "
            f"not a capacity search on {gpu}; run the plan's capacity search to measure them."
        )
    chart = capacity_chart(view)
    if chart is not None:
        with st.container(key=f"capacity_chart_{scope}"):
            st.altair_chart(chart)
        st.caption(view.chart.description)
    for note in dict.fromkeys([*recommendation.capacity_notes, *view.notes]):
        # Sized here at the panel's peak: the advice's "no peak in the profile" is answered.
        if note != NO_PEAK_NOTE:
            st.caption(note)


def _stage_capacity_runs(stage: StageProfile) -> tuple[list[Any], set[str]]:
    """The stored and shipped capacity searches that match the stage (its workload, SLO and
    GPU type), with the shipped ones' ids, for a profile without a peak rate."""
    from advisor.evidence.rows import capacity_runs_for

    reference = state.reference_files()
    published = [run for runs in reference.runs.values() for run in runs]
    runs = [*state.stored_runs(state.store_location()), *published]
    kept, _notes = capacity_runs_for(stage, runs)
    return kept, {run.run_id for run in published}


def render_stage_advice(
    stage_result: Any,
    calibration: Any = None,
    scope: str = "s0",
    stage: StageProfile | None = None,
) -> None:
    """The path, candidates, estimate, recommendation, capacity and configuration for one
    stage (the capacity panel needs the stage's profile: its peak, headroom and price)."""
    show_path(stage_result.decision)
    show_candidates(stage_result, scope)
    show_recommendation(stage_result)
    if stage is not None:
        show_capacity(stage, stage_result, scope)
    show_configurations(stage_result, calibration, scope)


# --------------------------------------------------------------------------- page


def render() -> None:
    state.init_session()
    st.title("Which inference framework?")
    st.caption(
        "Describe the workload. The advisor walks the decision tree of the article *A panoramic "
        "analysis of AI inference framework performance testing*, checks what fits on the GPU, "
        "and settles the choice on measurements that match your workload: your runs, or this "
        "project's published runs (data/reference)."
    )
    profile = state.current_profile()
    head = st.columns([3, 2])
    title = head[0].text_input(
        "Workload title",
        value=profile.title,
        key=f"v{st.session_state[state.FORM_VERSION_KEY]}_title",
        help=field_help(WorkloadProfile, "title"),
    )

    stage_forms: list[StageFormValues] = []
    tabs = st.tabs([f"Stage {i + 1}: {stage.name}" for i, stage in enumerate(profile.stages)])
    for index, (tab, stage) in enumerate(zip(tabs, profile.stages, strict=True)):
        stage_name = stage.name
        with tab:
            if len(profile.stages) > 1:
                row = st.columns([3, 1])
                stage_name = row[0].text_input(
                    "Stage name",
                    value=stage.name,
                    key=_key(index, "name"),
                    help=field_help(StageProfile, "name"),
                )
                row[1].button(
                    "Remove this stage",
                    key=_key(index, "remove"),
                    on_click=_remove_stage,
                    args=(index,),
                    icon=":material/delete:",
                )
            stage_forms.append(stage_form(index, stage, stage_name))
    st.button(
        "Add a stage",
        on_click=_add_stage,
        icon=":material/add:",
        help="A pipeline of models (the article's e-commerce case: a TensorRT encoder feeding a "
        "vLLM generator); each stage gets its own recommendation.",
    )

    try:
        profile = profile_from_form(profile, title, stage_forms)
    except ValidationError as exc:
        st.error(f"The profile is not complete: {describe_validation_error(exc)}")
        return
    if any(stage.parameters_b is None and unknown_model(stage.model) for stage in profile.stages):
        # Said at the field; no advice (and no run) for a model nobody can size.
        st.error("The profile names a model the advisor does not know: see the Model field.")
        return
    state.keep_profile(profile)
    _profile_file_panel(profile)

    st.divider()
    st.header("Advice")
    try:  # one advice for the whole profile; each stage shows its part
        report = state.advise(profile, state.store_location())
    except UserError as exc:
        st.error(str(exc))
    else:
        state.warm_report(report, state.store_location())
        for index, (stage, stage_result) in enumerate(
            zip(profile.stages, report.stages, strict=True)
        ):
            if len(profile.stages) > 1:
                st.subheader(f"Stage {index + 1}: {stage.name}")
            evidence_gpu_notice(index, profile, stage, stage_result)
            render_stage_advice(stage_result, report.calibration, f"s{index}", stage)
    st.page_link(
        "ui/benchmark_page.py",
        label="Settle it with measurements: open the Benchmark page",
        icon=":material/speed:",
    )
    # Last on the page and keyed by the profile's content: once it carries this profile's
    # digest, everything above was drawn for this profile (a browser test waits on it).
    digest = hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:16]
    st.container(key=f"advisor_profile_{digest}", height=1, border=False)


# Streamlit runs a page file as __main__; importing it (tests) only defines its functions.
if __name__ == "__main__":
    render()
