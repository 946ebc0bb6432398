"""The decision tree: every leaf and branch reached, the seed's four cases, validation failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from advisor.plan.tree import (
    DEFAULT_TREE_PATH,
    Condition,
    evaluate,
    load_tree,
    what_would_change,
)
from advisor.sizing.estimate import estimate_stage
from advisor.workload.profile_input import profile_from_dict
from bench.core.errors import UserError

TREE = load_tree()
BIG_MODEL_SMALL_GPU = {"model": "llama-2-13b", "gpu": {"type": "L4"}}
FITS = {"model": "llama-2-7b", "gpu": {"type": "H200"}}

# (profile, expected leaf, expected answers along the path; the first question of every path is
# the context window's, the second whether requests share long prefixes)
BRANCH_CASES: list[tuple[str, dict[str, Any], str, list[str]]] = [
    (
        "dynamic",
        {"dynamic_control_flow": True},
        "pytorch_eager",
        ["no", "no", "yes", "no"],
    ),
    (
        "dynamic+latency",
        {"dynamic_control_flow": True, "slo": {"ttft_ms": 200}, "build_time_tolerance": "minutes"},
        "torch_compile_first",
        ["no", "no", "yes", "yes"],
    ),
    (
        "dynamic+latency but no compile time",
        {"dynamic_control_flow": True, "slo": {"tpot_ms": 30}, "build_time_tolerance": "none"},
        "pytorch_eager",
        ["no", "no", "yes", "no"],
    ),
    (
        "fixed forward deterministic",
        {"fixed_input_shapes": True, "kind": "forward", "determinism_required": True},
        "tensorrt_deterministic",
        ["no", "no", "no", "no", "yes", "yes", "yes"],
    ),
    (
        "fixed forward no build",
        {"fixed_input_shapes": True, "kind": "forward", "build_time_tolerance": "none"},
        "onnxruntime_no_build",
        ["no", "no", "no", "no", "yes", "yes", "no", "yes"],
    ),
    (
        "fixed forward",
        {"fixed_input_shapes": True, "kind": "forward"},
        "tensorrt_fixed",
        ["no", "no", "no", "no", "yes", "yes", "no", "no"],
    ),
    (
        "fixed generate does not fit",
        {"fixed_input_shapes": True, **BIG_MODEL_SMALL_GPU},
        "trtllm_needs_more_memory",
        ["no", "no", "no", "no", "yes", "no", "yes"],
    ),
    (
        "fixed generate, no hours-long builds",
        {"fixed_input_shapes": True, "build_time_tolerance": "minutes", **FITS},
        "vllm_no_long_build",
        ["no", "no", "no", "no", "yes", "no", "no", "yes"],
    ),
    (
        "fixed generate deterministic",
        {"fixed_input_shapes": True, "determinism_required": True, "build_time_tolerance": "hours"},
        "trtllm_deterministic",
        ["no", "no", "no", "no", "yes", "no", "no", "no", "yes"],
    ),
    (
        "fixed generate",
        {"fixed_input_shapes": True, **FITS},
        "trtllm_fixed",
        ["no", "no", "no", "no", "yes", "no", "no", "no", "no"],
    ),
    (
        "long does not fit",
        {"long_sequence_generation": True, **BIG_MODEL_SMALL_GPU},
        "vllm_needs_more_memory",
        ["no", "no", "no", "no", "no", "yes", "yes"],
    ),
    (
        "long, latency objective, hours ok",
        {
            "long_sequence_generation": True,
            "objective": "minimize_latency",
            "build_time_tolerance": "hours",
        },
        "trtllm_low_latency",
        ["no", "no", "no", "no", "no", "yes", "no", "yes"],
    ),
    (
        "long, TTFT under 300 ms, hours ok",
        {
            "long_sequence_generation": True,
            "slo": {"ttft_ms": 250},
            "build_time_tolerance": "hours",
        },
        "trtllm_low_latency",
        ["no", "no", "no", "no", "no", "yes", "no", "yes"],
    ),
    (
        "long, TTFT 300 ms is not under 300",
        {
            "long_sequence_generation": True,
            "slo": {"ttft_ms": 300},
            "build_time_tolerance": "hours",
        },
        "vllm_long",
        ["no", "no", "no", "no", "no", "yes", "no", "no"],
    ),
    (
        "long",
        {"long_sequence_generation": True, **FITS},
        "vllm_long",
        ["no", "no", "no", "no", "no", "yes", "no", "no"],
    ),
    (
        "multi backend",
        {"multi_backend": True},
        "onnxruntime_portable",
        ["no", "no", "no", "no", "no", "no", "yes"],
    ),
    (
        "edge constraint: decided before input shapes (TensorRT needs an NVIDIA GPU)",
        {"constraints": ["edge"], "fixed_input_shapes": True, "kind": "forward"},
        "onnxruntime_portable",
        ["no", "no", "no", "yes"],
    ),
    (
        "cpu only, fixed-shape encoder",
        {"constraints": ["cpu_only"], "fixed_input_shapes": True, "kind": "forward"},
        "onnxruntime_portable",
        ["no", "no", "no", "yes"],
    ),
    (
        "several runtimes (a preference, not hardware): after the article's traits",
        {"constraints": ["multiple_runtimes"]},
        "onnxruntime_portable",
        ["no", "no", "no", "no", "no", "no", "yes"],
    ),
    (
        "no trait, does not fit",
        BIG_MODEL_SMALL_GPU,
        "vllm_needs_more_memory",
        ["no", "no", "no", "no", "no", "no", "no", "yes", "yes"],
    ),
    (
        "no trait, generate",
        FITS,
        "vllm_default",
        ["no", "no", "no", "no", "no", "no", "no", "yes", "no"],
    ),
    (
        "no trait, forward",
        {"kind": "forward"},
        "forward_default",
        ["no", "no", "no", "no", "no", "no", "no", "no"],
    ),
    (
        "context longer than the model's window",
        {"model": "llama-2-7b", "prompt_tokens": {"mean": 200_000}},
        "context_too_long",
        ["yes"],
    ),
    (
        "shared prefixes, no trait, generate",
        {**FITS, "prompt_tokens": {"mean": 1152}, "shared_prefix": {"tokens": 1024, "count": 8}},
        "vllm_default",
        ["no", "yes", "no", "no", "no", "no", "no", "yes", "no"],
    ),
]


def decide(data: dict[str, Any]):
    stage = profile_from_dict(data).primary
    estimate = estimate_stage(stage)
    return stage, estimate, evaluate(TREE, stage, estimate)


@pytest.mark.parametrize(
    ("data", "leaf", "answers"),
    [case[1:] for case in BRANCH_CASES],
    ids=[case[0] for case in BRANCH_CASES],
)
def test_every_branch(data: dict[str, Any], leaf: str, answers: list[str]) -> None:
    _, _, decision = decide(data)
    assert decision.leaf == leaf
    assert [step.answer for step in decision.path] == answers
    for step in decision.path:
        assert step.question and step.why
    # the leaf's candidates, ranked 1..n, in the YAML's order
    expected = [c.framework for c in TREE.leaves[leaf].candidates]
    assert [c.framework for c in decision.candidates] == expected
    assert [c.rank for c in decision.candidates] == list(range(1, len(expected) + 1))


def test_refusing_leaf_names_no_candidate_and_carries_the_estimates_reason() -> None:
    stage, estimate, decision = decide(
        {"model": "llama-2-70b", "prompt_tokens": {"mean": 6000}, "output_tokens": {"mean": 200}}
    )
    assert decision.leaf == "context_too_long" and decision.candidates == []
    assert decision.refused == estimate.refused and "6,200 tokens" in decision.refused
    assert what_would_change(TREE, stage, estimate, decision) == {}


def test_cases_cover_every_leaf_and_both_answers_of_every_question() -> None:
    leaves, taken = set(), set()
    for _, data, _, _ in BRANCH_CASES:
        _, _, decision = decide(data)
        leaves.add(decision.leaf)
        taken |= {(step.node, step.answer) for step in decision.path}
    assert leaves == set(TREE.leaves)
    assert taken == {(node, answer) for node in TREE.questions for answer in ("yes", "no")}


def test_why_names_the_tested_facts() -> None:
    _, _, decision = decide({"long_sequence_generation": True, **BIG_MODEL_SMALL_GPU})
    fit_step = next(step for step in decision.path if step.node == "long_fits")
    assert "estimate.fits = false" in fit_step.why
    long_step = next(step for step in decision.path if step.node == "long_sequence_generation")
    assert "long_sequence_generation = true" in long_step.why
    assert "estimate.context.fits = true" in decision.path[0].why


# ---------------------------------------------------------------- the seed's four cases


@pytest.mark.parametrize(
    ("trait", "kind", "first", "also"),
    [
        ("dynamic_control_flow", "generate", "pytorch", {"jax"}),
        ("fixed_input_shapes", "forward", "tensorrt", set()),
        ("fixed_input_shapes", "generate", "tensorrt_llm", set()),
        ("long_sequence_generation", "generate", "vllm", set()),
        ("multi_backend", "forward", "onnxruntime", set()),
    ],
)
def test_seed_decision_tree_trunk(trait: str, kind: str, first: str, also: set[str]) -> None:
    _, _, decision = decide(
        {trait: True, "kind": kind, **FITS}
        if kind == "generate"
        else {
            trait: True,
            "kind": kind,
        }
    )
    assert decision.candidates[0].framework == first
    assert also <= {c.framework for c in decision.candidates}


def test_jax_is_flagged_not_benchmarked() -> None:
    _, _, decision = decide({"dynamic_control_flow": True})
    jax = next(c for c in decision.candidates if c.framework == "jax")
    assert jax.benchmarked is False
    assert all(c.benchmarked for c in decision.candidates if c.framework != "jax")


def test_seed_order_earlier_trait_wins() -> None:
    """All four traits at once: dynamic control flow comes first in the seed's order."""
    _, _, decision = decide(
        {
            "dynamic_control_flow": True,
            "fixed_input_shapes": True,
            "long_sequence_generation": True,
            "multi_backend": True,
        }
    )
    assert decision.candidates[0].framework == "pytorch"
    _, _, decision = decide(
        {"fixed_input_shapes": True, "long_sequence_generation": True, "kind": "forward"}
    )
    assert decision.candidates[0].framework == "tensorrt"


def test_unstated_build_tolerance_caveat_on_tensorrt() -> None:
    _, _, decision = decide({"fixed_input_shapes": True, "kind": "forward"})
    assert any("Build-time tolerance is not stated" in c for c in decision.caveats)


def test_conditional_caveat() -> None:
    _, _, with_det = decide({"long_sequence_generation": True, "determinism_required": True})
    _, _, without = decide({"long_sequence_generation": True})
    assert any("Determinism is required" in c for c in with_det.caveats)
    assert not any("Determinism is required" in c for c in without.caveats)


def test_does_not_fit_adds_estimate_suggestions() -> None:
    _, _, decision = decide({"long_sequence_generation": True, **BIG_MODEL_SMALL_GPU})
    assert any("tensor_parallel_size=2" in c for c in decision.caveats)


def test_what_would_change() -> None:
    stage, estimate, decision = decide({"long_sequence_generation": True, **FITS})
    changes = what_would_change(TREE, stage, estimate, decision)
    assert "pytorch" in changes  # flipping "dynamic control flow" puts PyTorch first
    assert any("dynamic control flow" in text for text in changes["pytorch"])
    assert "vllm" not in changes


# ---------------------------------------------------------------- the condition language


@pytest.mark.parametrize(
    ("condition", "context", "expected"),
    [
        ({"field": "a", "equals": True}, {"a": True}, True),
        ({"field": "a", "equals": True}, {"a": None}, False),
        ({"field": "a.b", "lt": 300}, {"a": {"b": 250}}, True),
        ({"field": "a.b", "lt": 300}, {"a": {"b": 300}}, False),
        ({"field": "a.b", "lt": 300}, {"a": {"b": None}}, False),
        ({"field": "a.b", "ge": 3}, {"a": {}}, False),
        ({"field": "a", "in": ["x", "y"]}, {"a": "y"}, True),
        ({"field": "a", "not_in": ["x", "y"]}, {"a": "y"}, False),
        ({"field": "a", "not_equals": "none"}, {"a": None}, False),
        ({"field": "a", "is_set": True}, {"a": []}, False),
        ({"field": "a", "is_set": True}, {"a": ["edge"]}, True),
        ({"field": "a", "contains_any": ["edge", "cpu_only"]}, {"a": ["cpu_only"]}, True),
        ({"field": "a", "contains_any": ["edge"]}, {"a": ["multiple_runtimes"]}, False),
        ({"field": "a", "contains_any": ["edge"]}, {"a": "edge"}, False),  # not a list
        ({"field": "a", "is_set": False}, {"a": None}, True),
        ({"field": "a", "gt": 1}, {"a": True}, False),  # booleans are not numbers here
        ({"not": {"field": "a", "equals": 1}}, {"a": 2}, True),
        (
            {"all": [{"field": "a", "equals": 1}, {"any": [{"field": "b", "le": 0}]}]},
            {"a": 1, "b": 0},
            True,
        ),
    ],
)
def test_condition_language(condition: dict, context: dict, expected: bool) -> None:
    assert Condition.model_validate(condition).evaluate(context) is expected


@pytest.mark.parametrize(
    "condition",
    [
        {"field": "a"},
        {"field": "a", "equals": 1, "lt": 2},
        {"all": [], "any": []},
        {"field": "a", "equals": 1, "all": []},
        {"field": "a", "matches": "x"},
    ],
)
def test_condition_language_rejects_malformed(condition: dict) -> None:
    with pytest.raises(ValueError):
        Condition.model_validate(condition)


# ---------------------------------------------------------------- validation at load


def write_tree(tmp_path: Path, change) -> Path:
    data = yaml.safe_load(DEFAULT_TREE_PATH.read_text())
    data = {("yes" if k is True else "no" if k is False else k): v for k, v in data.items()}
    questions = {
        name: {("yes" if k is True else "no" if k is False else k): v for k, v in q.items()}
        for name, q in data["questions"].items()
    }
    data["questions"] = questions
    change(data)
    path = tmp_path / "tree.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_default_tree_round_trips_through_yaml_dump(tmp_path: Path) -> None:
    tree = load_tree(write_tree(tmp_path, lambda data: None))
    assert set(tree.leaves) == set(TREE.leaves)


def _missing_leaf(data):
    data["questions"]["long_fits"]["yes"] = "no_such_leaf"


def _unknown_framework(data):
    data["leaves"]["vllm_long"]["candidates"][0]["framework"] = "lmdeploy"


def _cycle(data):
    data["questions"]["default_generate_fits"]["no"] = "dynamic_control_flow"
    del data["leaves"]["vllm_default"]


def _unknown_field(data):
    data["questions"]["long_latency"]["test"] = {"field": "slo.ttfb_ms", "lt": 300}


def _unreachable(data):
    data["leaves"]["orphan"] = {
        "title": "x",
        "candidates": [{"framework": "vllm", "rationale": "x"}],
    }


def _no_candidates(data):
    data["leaves"]["vllm_long"]["candidates"] = []


def _bad_root(data):
    data["root"] = "nowhere"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_missing_leaf, "node 'long_fits': branch 'yes' goes to 'no_such_leaf'"),
        (_unknown_framework, "leaf 'vllm_long': unknown framework 'lmdeploy'"),
        (_cycle, "is on a cycle"),
        (_unknown_field, "node 'long_latency': unknown field 'slo.ttfb_ms'"),
        (_unreachable, "node 'orphan' is unreachable"),
        (_no_candidates, "leaves.vllm_long: a leaf needs at least one candidate"),
        (_bad_root, "root 'nowhere'"),
    ],
)
def test_bad_tree_is_a_user_error_naming_the_node(tmp_path: Path, change, message: str) -> None:
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_tree(write_tree(tmp_path, change))


def test_cycle_message_shows_the_loop(tmp_path: Path) -> None:
    with pytest.raises(UserError) as info:
        load_tree(write_tree(tmp_path, _cycle))
    assert "dynamic_control_flow ->" in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_tree_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_tree(tmp_path / "none.yaml")


def test_an_unchanged_tree_file_is_parsed_once_and_an_edit_is_read(tmp_path: Path) -> None:
    """load_tree keeps a file's parse while the file is unchanged (each recommendation loads
    the tree): every caller still gets its own copy, a defect is never kept, and a file that
    changes (a fixed defect, an edited leaf) is read again."""
    import advisor.plan.tree as tree_module

    path = write_tree(tmp_path, lambda data: None)
    parses = tree_module._parsed_tree.cache_info().misses
    first = load_tree(path)
    first.leaves.clear()  # the caller's copy: the next load must not see this
    second = load_tree(path)
    assert set(second.leaves) == set(TREE.leaves) and second.source == str(path)
    assert tree_module._parsed_tree.cache_info().misses == parses + 1  # parsed once

    with pytest.raises(UserError, match="no_such_leaf"):
        load_tree(write_tree(tmp_path, _missing_leaf))
    with pytest.raises(UserError, match="no_such_leaf"):  # still broken: said again
        load_tree(path)
    fixed = load_tree(write_tree(tmp_path, lambda data: None))
    assert set(fixed.leaves) == set(TREE.leaves)


def test_the_hardware_question_and_the_sizing_line_name_the_same_constraints() -> None:
    from advisor.decide.capacities import NO_NVIDIA_GPU

    question = TREE.questions["hardware_constraint"]
    assert set(question.test.contains_any or []) == set(NO_NVIDIA_GPU)
