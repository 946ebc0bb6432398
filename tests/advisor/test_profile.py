"""The workload profile: single- and multi-stage YAML, error messages, CLI-style flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.workload.profile import Objective, WorkloadProfile
from advisor.workload.profile_input import load_profile, profile_from_dict, profile_from_flags
from bench.core.errors import UserError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "profiles"


def write(tmp_path: Path, text: str, name: str = "profile.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_single_stage_yaml_without_stages(tmp_path: Path) -> None:
    profile = load_profile(
        write(
            tmp_path,
            "title: Chat\nlong_sequence_generation: true\nmodel: llama-2-13b\n"
            "gpu: {type: h200}\nslo: {ttft_ms: 300}\nprompt_tokens: {kind: normal, mean: 300, "
            "spread: 50}\n",
        )
    )
    assert profile.title == "Chat"
    assert len(profile.stages) == 1
    stage = profile.primary
    assert stage.name == "main"
    assert stage.long_sequence_generation is True
    assert stage.gpu.type == "H200"
    assert stage.gpu.memory_gb == 141  # derived from the type
    assert stage.slo.ttft_ms == 300
    assert stage.prompt_tokens.kind == "normal"
    assert stage.objective == Objective.MAXIMIZE_THROUGHPUT


def test_multi_stage_shares_top_level_defaults(tmp_path: Path) -> None:
    profile = load_profile(
        write(
            tmp_path,
            "title: Two\ngpu: {type: A100-80GB-SXM, count: 2}\nprecision: {dtype: float16}\n"
            "stages:\n"
            "  - {name: enc, kind: forward, fixed_input_shapes: true, model: bert-base}\n"
            "  - {name: llm, model: llama-2-7b, gpu: {count: 1}, precision: {dtype: bfloat16}}\n",
        )
    )
    encoder, llm = profile.stages
    assert encoder.gpu.type == llm.gpu.type == "A100-80GB-SXM"
    assert encoder.gpu.count == 2
    assert llm.gpu.count == 1  # the stage's own value wins; nested mappings merge
    assert encoder.precision.dtype == "float16" and llm.precision.dtype == "bfloat16"


def test_json_profile_and_round_trip(tmp_path: Path) -> None:
    data = {"title": "J", "kind": "forward", "model": "resnet-50", "image_size": 224}
    profile = load_profile(write(tmp_path, json.dumps(data), "p.json"))
    again = WorkloadProfile.model_validate(profile.model_dump(mode="json"))
    assert again == profile


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_profiles_load(path: Path) -> None:
    profile = load_profile(path)
    assert profile.title and profile.stages


def test_example_set_has_the_seed_cases() -> None:
    names = {p.stem for p in EXAMPLES.glob("*.yaml")}
    assert {
        "research_dynamic_control_flow",
        "fixed_shape_vision",
        "chatbot_long_generation",
        "multi_backend_edge",
        "ecommerce_two_stage",
        "financial_risk_control",
    } <= names


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"gpu": {"type": "H300"}},
            "gpu.type: 'H300' is not a known GPU; known: A100-40GB-PCIE, A100-80GB-PCIE",
        ),
        (
            {"stages": [{"name": "a"}, {"gpu": {"type": "H300"}}]},
            "stages[1].gpu.type: 'H300' is not a known GPU",
        ),
        ({"kind": "train"}, "kind: Input should be 'generate' or 'forward'"),
        ({"colour": "red"}, "colour: unknown field; allowed: title, owner, notes, stages"),
        ({"gpu": {"tpye": "H200"}}, "gpu.tpye: unknown field; allowed: type, count, memory_gb"),
        ({"slo": {"ttft_ms": -5}}, "slo.ttft_ms: Input should be greater than 0"),
        ({"build_time_tolerance": "days"}, "build_time_tolerance: Input should be 'none'"),
        ({"constraints": ["mars"]}, "constraints[0]: Input should be 'non_nvidia_hardware'"),
        ({"objective": "fast"}, "objective: Input should be 'maximize_throughput'"),
        ({"stages": []}, "stages: List should have at least 1 item"),
        ({"prompt_tokens": {"mean": 10, "min": 20, "max": 5}}, "prompt_tokens: max (5)"),
    ],
)
def test_invalid_values_name_the_field_and_what_is_allowed(data: dict, message: str) -> None:
    with pytest.raises(UserError) as info:
        profile_from_dict(data)
    text = str(info.value)
    assert message in text
    assert "\n" not in text


def test_missing_file_and_bad_yaml(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_profile(tmp_path / "nope.yaml")
    with pytest.raises(UserError, match="not valid YAML"):
        load_profile(write(tmp_path, "title: [unclosed\n"))
    with pytest.raises(UserError, match="not valid JSON"):
        load_profile(write(tmp_path, "{bad json", "x.json"))
    with pytest.raises(UserError, match="mapping"):
        load_profile(write(tmp_path, "- a\n- b\n"))


def test_flags_build_a_profile() -> None:
    profile = profile_from_flags(
        dynamic_control_flow="no",
        long_sequence_generation="yes",
        multi_backend="False",
        kind="generate",
        model="llama-2-13b",
        gpu="H200",
        prompt_tokens=1000,
        ttft_ms=250.0,
        concurrency=8,
    )
    stage = profile.primary
    assert stage.long_sequence_generation is True
    assert stage.dynamic_control_flow is False
    assert stage.gpu.type == "H200" and stage.gpu.memory_gb == 141
    assert stage.prompt_tokens.mean == 1000
    assert stage.slo.ttft_ms == 250
    assert stage.concurrency == 8


def test_flags_override_a_loaded_profile_and_rederive_memory() -> None:
    base = profile_from_dict({"model": "llama-2-7b", "gpu": {"type": "L4"}, "concurrency": 2})
    profile = profile_from_flags(base, gpu="H100-SXM", fixed_input_shapes="yes")
    assert profile.primary.gpu.type == "H100-SXM"
    assert profile.primary.gpu.memory_gb == 80
    assert profile.primary.fixed_input_shapes is True
    assert profile.primary.concurrency == 2  # untouched


def test_flag_errors() -> None:
    with pytest.raises(UserError, match="--dynamic-control-flow: 'maybe' is not yes or no"):
        profile_from_flags(dynamic_control_flow="maybe")
    with pytest.raises(UserError, match=r"--gpu \(gpu\.type\): 'H300' is not a known GPU"):
        profile_from_flags(gpu="H300")
    with pytest.raises(UserError, match="unknown flag"):
        profile_from_flags(colour="red")


def test_flags_on_multi_stage_need_a_stage() -> None:
    base = profile_from_dict({"stages": [{"name": "enc", "kind": "forward"}, {"name": "llm"}]})
    with pytest.raises(UserError, match="choose one with --stage"):
        profile_from_flags(base, model="llama-2-7b")
    changed = profile_from_flags(base, stage="llm", model="llama-2-7b")
    assert changed.stages[1].model == "llama-2-7b" and changed.stages[0].model is None
    with pytest.raises(UserError, match="stages: enc, llm"):
        profile_from_flags(base, stage="nope", model="x")
