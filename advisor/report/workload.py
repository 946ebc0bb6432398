"""The workload in human terms: each stage as the profile form's questions and the answers given.

The questions are the form's (ui/advisor_page.py), so a reviewer reads what the engineer was
asked, not model keys like `stages[0].prompt_tokens.spread`.
"""

from __future__ import annotations

from advisor.report.model import StageWorkload, WorkloadAnswer
from advisor.report.numbers import number, percent
from advisor.workload.profile import StageProfile, WorkloadProfile
from advisor.workload.stage_load import stage_load
from bench.core.config import LengthDistribution
from bench.core.metric_catalog import SLO_BOUNDS

OBJECTIVE_WORDS = {
    "maximize_throughput": "Maximise throughput",
    "maximize_goodput": "Maximise goodput (requests meeting every SLO)",
    "minimize_latency": "Minimise latency",
    "minimize_cost_per_token": "Minimise cost per token",
}
BUILD_TIME_WORDS = {
    None: "Not stated",
    "none": "No build: serve seconds after load",
    "minutes": "Minutes: a JIT compile is fine",
    "hours": "Hours: long engine builds are fine",
}
CONSTRAINT_WORDS = {
    "non_nvidia_hardware": "non-NVIDIA hardware",
    "edge": "edge devices",
    "cpu_only": "CPU only",
    "multiple_runtimes": "several runtimes",
}


def _yes(value: bool) -> str:
    return "Yes" if value else "No"


def length_words(length: LengthDistribution, unit: str = "tokens") -> str:
    """`128 tokens (fixed)`, `mean 1,024 tokens, uniform ± 256, clipped to 1-2,048`."""
    if length.kind == "fixed":
        text = f"{number(length.mean)} {unit} (fixed)"
    else:
        spread = "±" if length.kind == "uniform" else "standard deviation"
        text = f"mean {number(length.mean)} {unit}, {length.kind}, {spread} {number(length.spread)}"
    if length.max is not None or length.min > 1:
        text += f", clipped to {number(length.min)}–{number(length.max) if length.max else '∞'}"
    return text


def stage_answers(stage: StageProfile) -> list[WorkloadAnswer]:
    rows: list[tuple[str, str]] = [
        ("Does the model need dynamic control flow?", _yes(stage.dynamic_control_flow)),
        ("Are all input shapes fixed?", _yes(stage.fixed_input_shapes)),
        ("Does it generate long sequences?", _yes(stage.long_sequence_generation)),
        ("Must it run on several backends / vendors?", _yes(stage.multi_backend)),
        (
            "Kind of inference",
            "LLM generation (token by token)"
            if stage.kind == "generate"
            else "Batched forward passes (encoders, vision)",
        ),
        ("Model", stage.model or "not named"),
    ]
    if stage.parameters_b is not None:
        rows.append(("Parameters", f"{number(stage.parameters_b)} billion"))
    if stage.kind == "generate":
        rows.append(("Prompt length", length_words(stage.prompt_tokens)))
        rows.append(("Output length", length_words(stage.output_tokens)))
    else:
        rows.append(("Samples per request (batch)", number(stage.batch_size)))
        if stage.sequence_length is not None:
            rows.append(("Sequence length (text encoders)", length_words(stage.sequence_length)))
        if stage.image_size is not None:
            rows.append(("Image size", f"{stage.image_size} × {stage.image_size} px"))
    if stage.concurrency is not None:
        rows.append(("Requests in flight at peak", number(stage.concurrency)))
    elif stage.kind == "generate":
        # The one load every figure of the answer was sized at (advisor/workload/stage_load.py).
        rows.append(("Requests in flight at peak", stage_load(stage).rule))
    if stage.request_rate_rps is not None:
        rows.append(("Arrival rate", f"{number(stage.request_rate_rps)} req/s"))
    peak = stage.peak_request_rate_rps
    rows.append(
        (
            "Peak traffic to size the fleet for",
            f"{number(peak)} req/s, plus {percent(stage.headroom_fraction)} headroom"
            if peak is not None
            else "Not given (the GPU count cannot be sized)",
        )
    )
    slo = stage.slo
    limits = [
        f"{bound.words} {'≥' if bound.is_minimum else '≤'} {number(value)} {bound.spec.unit}"
        for bound in SLO_BOUNDS
        if (value := getattr(slo, bound.field)) is not None
    ]
    rows.append(
        (
            f"Service-level objectives ({slo.percentile})",
            "; ".join(limits) if limits else "Not stated",
        )
    )
    rows.append(("Objective", OBJECTIVE_WORDS.get(stage.objective.value, stage.objective.value)))
    gpu = stage.gpu
    if gpu.type:
        gpu_text = f"{gpu.count} × {gpu.type}"
        if gpu.memory_gb:
            gpu_text += f", {number(gpu.memory_gb)} GB each"
    elif gpu.memory_gb:
        gpu_text = f"Not decided ({gpu.count} GPU(s) of {number(gpu.memory_gb)} GB)"
    else:
        gpu_text = "Not decided"
    rows.append(("GPU", gpu_text))
    if gpu.price_per_hour is not None:
        rows.append(("GPU price", f"${gpu.price_per_hour:,.2f} per GPU-hour (yours)"))
    precision = stage.precision
    precision_text = precision.dtype
    if precision.quantization:
        precision_text += f", {precision.quantization} weights"
    if stage.kind == "generate":  # a forward pass keeps no KV cache
        precision_text += (
            ", FP8 KV cache"
            if precision.kv_cache_dtype == "fp8"
            else ", KV cache as the model dtype"
        )
    rows.append(("Precision", precision_text))
    rows.append(("Identical outputs run to run required?", _yes(stage.determinism_required)))
    rows.append(
        ("Engine build time acceptable", BUILD_TIME_WORDS.get(stage.build_time_tolerance, "-"))
    )
    rows.append(
        (
            "Deployment constraints",
            ", ".join(CONSTRAINT_WORDS.get(c.value, c.value) for c in stage.constraints)
            or "No constraints",
        )
    )
    if stage.shared_prefix is not None:
        prefix = stage.shared_prefix
        rows.append(
            (
                "Shared prefix (system prompt, documents)",
                f"{number(prefix.tokens)} tokens, {number(prefix.count)} distinct "
                "(counted in the prompt length)",
            )
        )
    if stage.conversation is not None:
        talk = stage.conversation
        text = f"{talk.turns} turns, later user messages of {number(talk.user_tokens)} tokens"
        if talk.think_time_ms:
            text += f", {number(talk.think_time_ms)} ms between turns"
        rows.append(("Multi-turn conversations", text))
    if stage.trace_file:
        rows.append(("Request trace replayed", stage.trace_file))
    if stage.prompt_file:
        rows.append(("Your prompts", stage.prompt_file))
    rows.append(("Smallest difference that counts", f"{percent(stage.practical_threshold)}"))
    if stage.notes:
        rows.append(("Notes", stage.notes))
    return [WorkloadAnswer(question=q, answer=a) for q, a in rows]


def workload_tables(profile: WorkloadProfile) -> list[StageWorkload]:
    return [StageWorkload(stage=s.name, answers=stage_answers(s)) for s in profile.stages]
