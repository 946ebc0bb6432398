"""Recommendations: stages, the seed's cases, and how measurements that contradict the tree win."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.decide.recommend import MEASUREMENT_RULE, Report, recommend
from advisor.workload.profile_input import load_profile, profile_from_dict
from bench.core.schema import RunStatus
from tests.advisor.synthetic import synthetic_run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "profiles"
ALL_AVAILABLE = {
    name: "available"
    for name in ("pytorch", "torch_compile", "vllm", "tensorrt_llm", "tensorrt", "onnxruntime")
}
NO_TRTLLM = {**ALL_AVAILABLE, "tensorrt_llm": "tensorrt_llm is not installed: test availability"}
FIXED_LLM = {
    "fixed_input_shapes": True,
    "build_time_tolerance": "hours",
    "model": "llama-2-7b",
    "gpu": {"type": "H200"},
    "prompt_tokens": {"mean": 512},
    "output_tokens": {"mean": 256},
    "concurrency": 8,
    "slo": {"ttft_ms": 500},
}


def run_recommend(data: dict, runs=(), availability=ALL_AVAILABLE, tmp_path: Path | None = None):
    reference = tmp_path / "empty" if tmp_path is not None else None
    return recommend(
        profile_from_dict(data),
        runs=list(runs),
        availability=availability,
        reference_dir=reference,
    )


@pytest.mark.parametrize(
    ("example", "expected"),
    [
        ("research_dynamic_control_flow.yaml", {"main": "pytorch"}),
        ("fixed_shape_vision.yaml", {"main": "tensorrt"}),
        ("chatbot_long_generation.yaml", {"main": "vllm"}),
        ("multi_backend_edge.yaml", {"main": "onnxruntime"}),
        ("financial_risk_control.yaml", {"main": "tensorrt"}),
        ("ecommerce_two_stage.yaml", {"feature-extraction": "tensorrt", "generation": "vllm"}),
    ],
)
def test_example_profiles(example: str, expected: dict[str, str]) -> None:
    report = recommend(load_profile(EXAMPLES / example), availability=ALL_AVAILABLE)
    assert {s.stage: s.recommendation.framework for s in report.stages} == expected
    for stage in report.stages:
        assert stage.recommendation.follows == "tree"  # nothing measured
        assert stage.recommendation.confidence.level == "low"


def test_financial_risk_control_path_mentions_determinism() -> None:
    report = recommend(load_profile(EXAMPLES / "financial_risk_control.yaml"))
    path = report.stages[0].decision.path
    assert path[-1].node == "forward_determinism" and path[-1].answer == "yes"
    assert "deterministic" in path[-1].why


def test_ecommerce_stages_get_their_own_recommendation() -> None:
    report = recommend(load_profile(EXAMPLES / "ecommerce_two_stage.yaml"))
    encoder, llm = report.stages
    assert (encoder.kind, llm.kind) == ("forward", "generate")
    assert encoder.estimate.kv_cache_gb is None and llm.estimate.kv_cache_gb > 0
    data = json.loads(report.model_dump_json())
    assert [s["stage"] for s in data["stages"]] == ["feature-extraction", "generation"]
    assert data["stages"][0]["recommendation"]["framework"] == "tensorrt"
    assert data["stages"][1]["recommendation"]["framework"] == "vllm"


def test_measurements_on_the_users_gpu_overrule_the_tree(tmp_path: Path) -> None:
    runs = [
        synthetic_run("tensorrt_llm", throughput_tok_s=1000),
        synthetic_run("tensorrt_llm", throughput_tok_s=1010),
        synthetic_run("vllm", throughput_tok_s=1400),
        synthetic_run("vllm", throughput_tok_s=1420),
    ]
    report = run_recommend(FIXED_LLM, runs, tmp_path=tmp_path)
    stage = report.stages[0]
    assert stage.decision.candidates[0].framework == "tensorrt_llm"
    rec = stage.recommendation
    assert rec.framework == "vllm"
    assert rec.follows == "measurements"
    text = " ".join(rec.contradictions)
    assert "The tree ranks tensorrt_llm first" in text and "Following the measurements" in text
    assert rec.confidence.level == "high"
    assert rec.configuration.source.startswith("measured run(s)")
    alternative = next(a for a in rec.alternatives if a.framework == "tensorrt_llm")
    assert "measured on H200" in alternative.why_not_first


def test_measurements_agreeing_with_the_tree() -> None:
    runs = [synthetic_run("tensorrt_llm", throughput_tok_s=1500), synthetic_run("vllm")]
    rec = run_recommend(FIXED_LLM, runs).stages[0].recommendation
    assert rec.framework == "tensorrt_llm"
    assert rec.follows == "measurements"
    assert not any("The tree ranks" in c for c in rec.contradictions)
    assert rec.confidence.level == "medium"  # single runs
    assert "single run" in rec.confidence.why


def test_tree_first_choice_failing_the_slo_loses() -> None:
    runs = [
        synthetic_run("tensorrt_llm", throughput_tok_s=3000, ttft_p50_ms=400, ttft_p99_ms=2000),
        synthetic_run("vllm", throughput_tok_s=1000),
    ]
    rec = run_recommend(FIXED_LLM, runs).stages[0].recommendation
    assert rec.framework == "vllm"
    assert any("misses the SLOs" in c and "tensorrt_llm" in c for c in rec.contradictions)


def test_tree_first_choice_failed_on_the_gpu() -> None:
    runs = [
        synthetic_run("tensorrt_llm", status=RunStatus.FAILED, failure="engine build failed"),
        synthetic_run("vllm", throughput_tok_s=1000),
    ]
    rec = run_recommend(FIXED_LLM, runs).stages[0].recommendation
    assert rec.framework == "vllm"
    assert any("FAILED (engine build failed)" in c for c in rec.contradictions)


def test_first_choice_not_installed_and_not_measured() -> None:
    rec = run_recommend(FIXED_LLM, availability=NO_TRTLLM).stages[0].recommendation
    assert rec.framework == "tensorrt_llm"
    assert rec.follows == "tree"
    assert rec.confidence.level == "low"
    # Not installed is a gap in the evidence, not evidence disagreeing with the tree.
    assert rec.contradictions == []
    text = " ".join(rec.unmeasured)
    assert "cannot be measured here (tensorrt_llm is not installed: test availability)" in text
    assert "Runnable candidates here: vllm, pytorch" in text
    assert rec.availability["tensorrt_llm"].startswith("tensorrt_llm is not installed")


def test_first_choice_not_installed_but_runner_up_measured() -> None:
    rec = (
        run_recommend(FIXED_LLM, [synthetic_run("vllm")], availability=NO_TRTLLM)
        .stages[0]
        .recommendation
    )
    assert rec.framework == "vllm"
    assert rec.contradictions == []  # nothing measured disagrees: tensorrt_llm has no evidence
    (gap,) = rec.unmeasured
    assert "tensorrt_llm has no measurement on H200 because it cannot run in this" in gap
    assert "(tensorrt_llm is not installed" in gap and "vllm leads" in gap


def test_measurements_elsewhere_do_not_change_the_answer() -> None:
    runs = [
        synthetic_run("vllm", gpu="A100-80GB-SXM", throughput_tok_s=3000),
        synthetic_run("tensorrt_llm", gpu="A100-80GB-SXM", throughput_tok_s=1000),
    ]
    rec = run_recommend(FIXED_LLM, runs).stages[0].recommendation
    assert rec.framework == "tensorrt_llm"
    assert rec.follows == "tree"
    assert any(
        "Measured-elsewhere evidence" in c and "does not change the answer" in c
        for c in rec.contradictions
    )


def test_published_disagreement_is_stated_not_followed() -> None:
    data = {**FIXED_LLM, "model": "llama-2-13b", "gpu": {"type": "A100-80GB-PCIE"}}
    report = recommend(profile_from_dict(data), availability=ALL_AVAILABLE)
    rec = report.stages[0].recommendation
    assert rec.framework == "tensorrt_llm"  # the tree's choice
    assert any(
        "Published evidence" in c and "vllm ahead of tensorrt_llm" in c for c in rec.contradictions
    )
    assert all(row.source == "published" for row in report.stages[0].evidence)


def test_measurements_never_pick_a_framework_the_tree_excluded() -> None:
    data = {"dynamic_control_flow": True, "model": "llama-2-7b", "gpu": {"type": "H200"}}
    runs = [
        synthetic_run("vllm", throughput_tok_s=9000),
        synthetic_run("pytorch", throughput_tok_s=100),
    ]
    rec = run_recommend(data, runs).stages[0].recommendation
    assert rec.framework == "pytorch"


def test_jax_is_never_benchmarked_but_can_be_listed() -> None:
    rec = run_recommend({"dynamic_control_flow": True}).stages[0].recommendation
    jax = next(a for a in rec.alternatives if a.framework == "jax")
    assert jax.benchmarked is False


def test_diagnostics_and_learned_are_attached() -> None:
    runs = [synthetic_run("vllm", engine_args={"enforce_eager": True}, gpu_utilization_pct=50)]
    stage = run_recommend(FIXED_LLM, runs).stages[0]
    rules = {d.rule for d in stage.diagnostics}
    assert {"cuda_graphs_off", "low_gpu_utilization"} <= rules
    assert stage.learned is not None and stage.learned.fitted is False


def test_report_json_round_trips_through_the_model() -> None:
    report = run_recommend(FIXED_LLM, [synthetic_run("vllm")])
    data = json.loads(report.model_dump_json())
    assert data["rule"] == MEASUREMENT_RULE
    for key in ("recommendation", "decision", "evidence", "estimate", "diagnostics", "learned"):
        assert key in data["stages"][0]
    assert Report.model_validate_json(report.model_dump_json()) == report
    stage = data["stages"][0]
    assert set(stage["decision"]["path"][0]) >= {"question", "answer", "why"}
    assert stage["recommendation"]["framework"] in {"vllm", "tensorrt_llm"}
    assert "benchmarked" in stage["recommendation"]
    assert stage["evidence"][0]["eligible"] is True
    assert stage["estimate"]["weights_gb"] == pytest.approx(13.476831232)
