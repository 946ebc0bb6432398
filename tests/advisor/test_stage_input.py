"""The Advisor form's edit of the typed profile (advisor/workload/stage_input.py) on the shipped
example profiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from advisor.workload.profile import StageProfile
from advisor.workload.profile_input import load_profile
from advisor.workload.stage_input import (
    DRAFT_FIELDS,
    FIELDS_KEPT_AS_GIVEN,
    StageFormValues,
    draft_stage,
    load_kind_shown,
    profile_from_form,
    stage_from_form,
)
from bench.engines.models import PRESETS

PROFILES = sorted((Path(__file__).parents[2] / "examples" / "profiles").glob("*.yaml"))
STAGES = [
    pytest.param(stage, id=f"{path.stem}:{stage.name}")
    for path in PROFILES
    for stage in load_profile(path).stages
]


def unedited(stage: StageProfile) -> StageFormValues:
    """The values the form's widgets hold for `stage` before the user changes anything."""
    prefix, conversation = stage.shared_prefix, stage.conversation
    return StageFormValues(
        name=stage.name,
        dynamic_control_flow=stage.dynamic_control_flow,
        fixed_input_shapes=stage.fixed_input_shapes,
        long_sequence_generation=stage.long_sequence_generation,
        multi_backend=stage.multi_backend,
        kind=stage.kind,
        model=stage.model,
        custom_model=stage.model not in PRESETS,
        parameters_b=stage.parameters_b,
        prompt_mean=stage.prompt_tokens.mean,
        output_mean=stage.output_tokens.mean,
        shared_prefix_tokens=prefix.tokens if prefix else None,
        shared_prefix_count=prefix.count if prefix else 1,
        conversation_turns=conversation.turns if conversation else None,
        user_message_tokens=conversation.user_tokens if conversation else 64,
        trace_file=stage.trace_file or "",
        prompt_file=stage.prompt_file or "",
        batch_size=stage.batch_size,
        image_size=stage.image_size,
        sequence_mean=stage.sequence_length.mean if stage.sequence_length else None,
        load_kind=load_kind_shown(stage),
        concurrency=stage.concurrency or 16,
        request_rate_rps=stage.request_rate_rps or 10.0,
        slo_percentile=stage.slo.percentile,
        ttft_ms=stage.slo.ttft_ms,
        tpot_ms=stage.slo.tpot_ms,
        e2e_ms=stage.slo.e2e_ms,
        min_output_throughput_tok_s=stage.slo.min_output_throughput_tok_s,
        min_request_throughput_rps=stage.slo.min_request_throughput_rps,
        objective=stage.objective.value,
        gpu_type=stage.gpu.type,
        gpu_count=stage.gpu.count,
        gpu_memory_gb=stage.gpu.memory_gb,
        dtype=stage.precision.dtype,
        quantization=stage.precision.quantization,
        kv_cache_dtype=stage.precision.kv_cache_dtype,
        determinism_required=stage.determinism_required,
        build_time_tolerance=stage.build_time_tolerance,
        constraints=[constraint.value for constraint in stage.constraints],
    )


@pytest.mark.parametrize("stage", STAGES)
def test_an_unedited_form_gives_back_the_stage(stage):
    assert len(STAGES) >= 12, "every shipped profile's stages"
    assert stage_from_form(stage, unedited(stage)) == stage


@pytest.mark.parametrize("path", PROFILES, ids=[path.stem for path in PROFILES])
def test_an_unedited_form_gives_back_the_profile(path):
    profile = load_profile(path)
    rebuilt = profile_from_form(profile, profile.title, [unedited(s) for s in profile.stages])
    assert rebuilt == profile


def test_fields_without_widgets_are_kept_by_an_edit():
    shipped = next(s.values[0] for s in STAGES if s.values[0].kind == "generate")
    stage = shipped.model_copy(
        update={
            "notes": "free text of a YAML profile",
            "peak_request_rate_rps": 40.0,
            "headroom_fraction": 0.5,
            "practical_threshold": 0.1,
            "gpu": shipped.gpu.model_copy(update={"memory_bandwidth_tb_s": 4.0}),
        }
    )
    edited = stage_from_form(stage, unedited(stage).model_copy(update={"output_mean": 99}))
    assert edited.output_tokens.mean == 99
    for name in (*FIELDS_KEPT_AS_GIVEN, "notes"):
        assert getattr(edited, name) == getattr(stage, name), name
    assert edited.gpu.memory_bandwidth_tb_s == 4.0  # measured on this GPU type: kept
    other_gpu = unedited(stage).model_copy(update={"gpu_type": "L40S"})
    assert stage_from_form(stage, other_gpu).gpu.memory_bandwidth_tb_s is None  # not this GPU's


def test_edits_land_on_the_stage_and_fields_without_widgets_are_kept():
    shipped = next(s.values[0] for s in STAGES if s.values[0].kind == "generate")
    data = shipped.model_dump(mode="json")
    data["gpu"]["price_per_hour"] = 3.5  # set by the capacity panel, which has the widget
    stage = StageProfile.model_validate(data)
    values = unedited(stage).model_copy(
        update={
            "prompt_mean": 4000,
            "load_kind": "rate",
            "request_rate_rps": 3.5,
            "gpu_type": None,
            "gpu_memory_gb": 24.0,
            "shared_prefix_tokens": 300,
            "shared_prefix_count": 4,
            "trace_file": "  ",
            "dtype": "bfloat16",
        }
    )
    rebuilt = stage_from_form(stage, values)
    assert rebuilt.prompt_tokens.mean == 4000
    assert rebuilt.prompt_tokens.kind == stage.prompt_tokens.kind  # the distribution is kept
    assert rebuilt.request_rate_rps == 3.5 and rebuilt.concurrency is None
    assert (rebuilt.gpu.type, rebuilt.gpu.memory_gb) == (None, 24.0)
    assert rebuilt.gpu.price_per_hour == stage.gpu.price_per_hour  # no widget: kept
    assert (rebuilt.shared_prefix.tokens, rebuilt.shared_prefix.count) == (300, 4)
    assert rebuilt.trace_file is None  # blank path = none
    assert rebuilt.precision.dtype == "bfloat16"
    assert rebuilt.headroom_fraction == stage.headroom_fraction
    typed = values.model_copy(update={"gpu_type": "H200", "gpu_memory_gb": 24.0})
    assert stage_from_form(stage, typed).gpu.memory_gb == 141.0  # the type's own memory counts


def test_a_custom_checkpoint_path_is_trimmed_and_a_blank_one_is_no_model():
    stage = STAGES[0].values[0]
    custom = unedited(stage).model_copy(update={"custom_model": True, "parameters_b": 7.0})
    edited = stage_from_form(stage, custom.model_copy(update={"model": "  /models/mine "}))
    assert (edited.model, edited.parameters_b) == ("/models/mine", 7.0)
    assert stage_from_form(stage, custom.model_copy(update={"model": "   "})).model is None
    preset = unedited(stage).model_copy(update={"custom_model": False, "model": "tiny-llama"})
    assert stage_from_form(stage, preset).parameters_b is None  # a preset knows its own size


def test_the_draft_is_the_length_fields_only():
    stage = STAGES[0].values[0]
    values = unedited(stage).model_copy(update={"ttft_ms": -1.0, "prompt_mean": 300})
    draft = draft_stage(stage, values)  # a bad SLO is not the draft's business
    assert draft is not None and draft.prompt_tokens.mean == 300
    assert (
        draft.model_fields_set <= set(DRAFT_FIELDS) and {"kind", "model"} <= draft.model_fields_set
    )
    assert draft_stage(stage, values.model_copy(update={"prompt_mean": 0})) is None


def test_a_bad_field_is_named_by_its_path_in_the_profile():
    path = next(p for p in PROFILES if len(load_profile(p).stages) > 1)
    profile = load_profile(path)
    forms = [unedited(s) for s in profile.stages]
    forms[1] = forms[1].model_copy(update={"ttft_ms": -1.0})
    with pytest.raises(ValidationError) as caught:
        profile_from_form(profile, profile.title, forms)
    assert [error["loc"] for error in caught.value.errors()] == [("stages", 1, "slo", "ttft_ms")]


def test_the_form_values_are_checked_as_the_widgets_fill_them():
    values = StageFormValues(name="main")
    values.prompt_mean = 300
    with pytest.raises(ValidationError):
        values.load_kind = "bursty"  # not one of the form's load descriptions
