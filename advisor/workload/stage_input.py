"""The Advisor form's edit of the typed profile: the values its widgets return (`StageFormValues`)
written over the session's `StageProfile`s, giving the next `WorkloadProfile` (the page keeps the
widgets; this module has no UI and is tested on its own).

A half-filled form is normal while the user types: the edit raises pydantic's ValidationError,
whose paths (`stages[0].prompt_tokens.mean`) the page shows on one line, and the session keeps
the last valid profile.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError

from advisor.workload.profile import StageProfile, WorkloadProfile
from bench.core.strict import StrictInput

FIELDS_KEPT_AS_GIVEN = ("peak_request_rate_rps", "headroom_fraction", "practical_threshold")
"""Stage fields the form has no widget for (set in a YAML profile or the capacity panel's
inputs): kept as they were, never dropped by an edit of another field."""
DRAFT_FIELDS = (
    "kind",
    "model",
    "parameters_b",
    "prompt_tokens",
    "output_tokens",
    "sequence_length",
)
"""The fields of a draft stage whose feasibility (the context window) is shown at the length
fields, before the rest of the form is filled in."""


class StageFormValues(StrictInput):
    """What one stage's widgets returned, as entered (None where a number field is empty). The
    page fills it widget by widget; each assignment is checked against the field's type."""

    model_config = ConfigDict(**StrictInput.model_config, validate_assignment=True)

    name: str
    dynamic_control_flow: bool = False
    fixed_input_shapes: bool = False
    long_sequence_generation: bool = False
    multi_backend: bool = False
    kind: Literal["generate", "forward"] = "generate"
    model: str | None = Field(None, description="A preset name, or the checkpoint path typed.")
    custom_model: bool = Field(False, description="The model is a local checkpoint path.")
    parameters_b: float | None = Field(None, description="Read only for a custom checkpoint.")
    # generate
    prompt_mean: int | None = None
    output_mean: int | None = None
    shared_prefix_tokens: int | None = None
    shared_prefix_count: int = 1
    conversation_turns: int | None = None
    user_message_tokens: int = 64
    trace_file: str = ""
    prompt_file: str = ""
    # forward
    batch_size: int = 1
    image_size: int | None = None
    sequence_mean: int | None = None
    # load
    load_kind: Literal["concurrency", "rate", "peak"] = "concurrency"
    concurrency: int = 16
    request_rate_rps: float = 10.0
    peak_request_rate_rps: float | None = None
    # SLOs
    slo_percentile: Literal["p50", "p90", "p99"] = "p99"
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    min_output_throughput_tok_s: float | None = None
    min_request_throughput_rps: float | None = None
    # deployment
    objective: str | None = None
    gpu_type: str | None = Field(None, description="None = not decided.")
    gpu_count: int = 1
    gpu_memory_gb: float | None = Field(None, description="Read only when no GPU type is set.")
    dtype: str = "float16"
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    determinism_required: bool = False
    build_time_tolerance: str | None = None
    constraints: list[str] = Field(default_factory=list)
    # quality
    quality_result: str = Field("", description="Path of a `bench quality` quality.json.")
    max_quality_loss_pct: float = 1.0


def load_kind_shown(previous: StageProfile) -> Literal["concurrency", "rate", "peak"]:
    """How the form first describes the stage's load: by its rate when it has a rate and no
    concurrency, by its peak rate when that is all it gives (advisor/workload/stage_load.py reads
    either), else by requests in flight."""
    if previous.request_rate_rps and not previous.concurrency:
        return "rate"
    if previous.peak_request_rate_rps and not previous.concurrency:
        return "peak"
    return "concurrency"


def _edited(previous: StageProfile, values: StageFormValues) -> dict[str, Any]:
    """`previous` as data with the form's fields written over it.

    A mapping, not a model, and it never leaves this module: it is the validation input, so that
    pydantic checks the edited stage as a whole and names a bad field by its path, which the page
    shows. A length (prompt, output, sequence) keeps the stage's distribution with the mean
    entered; fields without widgets (FIELDS_KEPT_AS_GIVEN, notes, the GPU price, the precision's
    TF32 switch, a conversation's think time) keep their values; a GPU memory is read only with
    no GPU type, and a measured memory bandwidth only while the GPU type stays the same."""
    data = previous.model_dump(mode="json")
    data.update(
        name=values.name,
        dynamic_control_flow=values.dynamic_control_flow,
        fixed_input_shapes=values.fixed_input_shapes,
        long_sequence_generation=values.long_sequence_generation,
        multi_backend=values.multi_backend,
        kind=values.kind,
        model=(values.model or "").strip() or None if values.custom_model else values.model,
        # A preset knows its own size: a count typed for a checkpoint does not follow it.
        parameters_b=values.parameters_b if values.custom_model else None,
    )
    if values.kind == "generate":
        for field, shown, mean in (
            ("prompt_tokens", previous.prompt_tokens, values.prompt_mean),
            ("output_tokens", previous.output_tokens, values.output_mean),
        ):
            data[field] = {**shown.model_dump(), "mean": shown.mean if mean is None else mean}
        data["shared_prefix"] = (
            {"tokens": values.shared_prefix_tokens, "count": values.shared_prefix_count}
            if values.shared_prefix_tokens
            else None
        )
        think_time_ms = previous.conversation.think_time_ms if previous.conversation else None
        data["conversation"] = (
            {
                "turns": values.conversation_turns,
                "user_tokens": values.user_message_tokens,
                "think_time_ms": think_time_ms,
            }
            if values.conversation_turns
            else None
        )
        data["trace_file"] = values.trace_file.strip() or None
        data["prompt_file"] = values.prompt_file.strip() or None
    else:
        data["batch_size"] = values.batch_size
        data["image_size"] = values.image_size
        # The stage's distribution with the mean entered (the form once kept the mean only, so
        # showing a profile with a uniform sequence length turned it fixed).
        known = previous.sequence_length.model_dump() if previous.sequence_length else {}
        data["sequence_length"] = (
            {**known, "mean": values.sequence_mean} if values.sequence_mean else None
        )
        # The LLM traffic belongs to the generate kind (StageProfile refuses it otherwise).
        data.update(shared_prefix=None, conversation=None, trace_file=None, prompt_file=None)
    data["concurrency"] = values.concurrency if values.load_kind == "concurrency" else None
    data["request_rate_rps"] = values.request_rate_rps if values.load_kind == "rate" else None
    if values.load_kind == "peak" and values.peak_request_rate_rps is not None:
        data["peak_request_rate_rps"] = values.peak_request_rate_rps  # the form's own widget
    data["slo"].update(
        percentile=values.slo_percentile,
        ttft_ms=values.ttft_ms,
        tpot_ms=values.tpot_ms,
        e2e_ms=values.e2e_ms,
        min_output_throughput_tok_s=values.min_output_throughput_tok_s,
        min_request_throughput_rps=values.min_request_throughput_rps,
    )
    data["objective"] = values.objective
    same_gpu = values.gpu_type == previous.gpu.type
    data["gpu"].update(
        type=values.gpu_type,
        count=values.gpu_count,
        memory_gb=values.gpu_memory_gb if values.gpu_type is None else None,
        memory_bandwidth_tb_s=previous.gpu.memory_bandwidth_tb_s if same_gpu else None,
    )
    data["precision"].update(
        dtype=values.dtype, quantization=values.quantization, kv_cache_dtype=values.kv_cache_dtype
    )
    data.update(
        determinism_required=values.determinism_required,
        build_time_tolerance=values.build_time_tolerance,
        constraints=list(values.constraints),
        quality_result=values.quality_result.strip() or None,
        max_quality_loss_pct=values.max_quality_loss_pct,
    )
    return data


def stage_from_form(previous: StageProfile, values: StageFormValues) -> StageProfile:
    """The stage the form describes: `previous` edited by the widgets' values (see `_edited`
    for what is kept). ValidationError names the stage's field."""
    return StageProfile.model_validate(_edited(previous, values))


def profile_from_form(
    previous: WorkloadProfile, title: str, stages: list[StageFormValues]
) -> WorkloadProfile:
    """The profile the form describes: `previous` with its title and each stage edited by that
    stage's form (in order; owner and notes, which have no widget, are kept). ValidationError
    names the field by its path in the profile (`stages[1].slo.ttft_ms`)."""
    if len(stages) != len(previous.stages):
        raise ValueError(f"{len(stages)} stage forms for {len(previous.stages)} stages")
    data = previous.model_dump(mode="json")
    data["title"] = title
    data["stages"] = [
        _edited(stage, values) for stage, values in zip(previous.stages, stages, strict=True)
    ]
    return WorkloadProfile.model_validate(data)


def draft_stage(previous: StageProfile, values: StageFormValues) -> StageProfile | None:
    """The stage with only the form's DRAFT_FIELDS (the rest at their defaults), for the early
    context-window check at the length fields; None while those fields are not valid yet (the
    profile's own validation line says why)."""
    data = _edited(previous, values)
    try:
        return StageProfile.model_validate({key: data[key] for key in DRAFT_FIELDS})
    except ValidationError:
        return None
