"""One stage of the Advisor form, from the values its widgets return to the data of a
`StageProfile` (the page keeps the widgets; this module has no UI and is tested on its own).

The result is the mapping `StageProfile.model_validate` reads, not a model: a half-filled form is
normal while the user types, and the page shows the profile's one validation line for it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from advisor.workload.profile import StageProfile
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
    """What one stage's widgets returned, as entered (None where a number field is empty)."""

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


def stage_data(previous: StageProfile, values: StageFormValues) -> dict[str, Any]:
    """The stage the form describes, for `StageProfile.model_validate`. A length (prompt,
    output, sequence) keeps the stage's distribution with the mean entered; fields without
    widgets (FIELDS_KEPT_AS_GIVEN, the GPU price) keep their values; a GPU memory is read only
    with no GPU type."""
    out: dict[str, Any] = {
        "name": values.name,
        "dynamic_control_flow": values.dynamic_control_flow,
        "fixed_input_shapes": values.fixed_input_shapes,
        "long_sequence_generation": values.long_sequence_generation,
        "multi_backend": values.multi_backend,
        "kind": values.kind,
        "model": (values.model or "").strip() or None if values.custom_model else values.model,
    }
    if values.custom_model:
        out["parameters_b"] = values.parameters_b
    if values.kind == "generate":
        for field, shown, mean in (
            ("prompt_tokens", previous.prompt_tokens, values.prompt_mean),
            ("output_tokens", previous.output_tokens, values.output_mean),
        ):
            out[field] = {**shown.model_dump(), "mean": shown.mean if mean is None else mean}
        out["shared_prefix"] = (
            {"tokens": values.shared_prefix_tokens, "count": values.shared_prefix_count}
            if values.shared_prefix_tokens
            else None
        )
        out["conversation"] = (
            {"turns": values.conversation_turns, "user_tokens": values.user_message_tokens}
            if values.conversation_turns
            else None
        )
        out["trace_file"] = values.trace_file.strip() or None
        out["prompt_file"] = values.prompt_file.strip() or None
    else:
        out["batch_size"] = values.batch_size
        out["image_size"] = values.image_size
        # The stage's distribution with the mean entered (the form once kept the mean only, so
        # showing a profile with a uniform sequence length turned it fixed).
        known = previous.sequence_length.model_dump() if previous.sequence_length else {}
        out["sequence_length"] = (
            {**known, "mean": values.sequence_mean} if values.sequence_mean else None
        )
    if values.load_kind == "concurrency":
        out["concurrency"] = values.concurrency
    elif values.load_kind == "rate":
        out["request_rate_rps"] = values.request_rate_rps
    out["slo"] = {
        "percentile": values.slo_percentile,
        "ttft_ms": values.ttft_ms,
        "tpot_ms": values.tpot_ms,
        "e2e_ms": values.e2e_ms,
        "min_output_throughput_tok_s": values.min_output_throughput_tok_s,
        "min_request_throughput_rps": values.min_request_throughput_rps,
    }
    out["objective"] = values.objective
    out["gpu"] = {"type": values.gpu_type, "count": values.gpu_count}
    if values.gpu_type is None:
        out["gpu"]["memory_gb"] = values.gpu_memory_gb
    if previous.gpu.price_per_hour is not None:
        out["gpu"]["price_per_hour"] = previous.gpu.price_per_hour
    out["precision"] = {
        **previous.precision.model_dump(mode="json"),
        "dtype": values.dtype,
        "quantization": values.quantization,
        "kv_cache_dtype": values.kv_cache_dtype,
    }
    out["determinism_required"] = values.determinism_required
    out["build_time_tolerance"] = values.build_time_tolerance
    out["constraints"] = list(values.constraints)
    out["quality_result"] = values.quality_result.strip() or None
    out["max_quality_loss_pct"] = values.max_quality_loss_pct
    for name in FIELDS_KEPT_AS_GIVEN:
        if getattr(previous, name) is not None:
            out[name] = previous.model_dump(mode="json", include={name})[name]
    if values.load_kind == "peak" and values.peak_request_rate_rps is not None:
        out["peak_request_rate_rps"] = values.peak_request_rate_rps  # the form's own widget
    return out


def draft_data(out: dict[str, Any]) -> dict[str, Any]:
    """The draft-stage fields of `stage_data`'s result (DRAFT_FIELDS), for the early check."""
    return {key: out[key] for key in DRAFT_FIELDS if key in out}
