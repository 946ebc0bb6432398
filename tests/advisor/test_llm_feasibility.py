"""An LLM's TTFT and TPOT limits against their floors, before anything runs: flagged on page 1,
in the sizing line, in the form's fields and in the CLI's caveats; never for the shipped examples,
whose limits hold."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.decide.recommend import recommend
from advisor.report.decision import stage_decision
from advisor.sizing.estimate import estimate_stage
from advisor.sizing.field_problems import feasibility_problems
from advisor.sizing.llm_feasibility import llm_floor_verdict
from advisor.workload.profile_input import load_profile, profile_from_dict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "profiles"
LLAMA_8B_PARAMETERS = 8_030_261_248
IMPOSSIBLE = {
    "title": "A 32k-token prompt answered in 100 ms on an L4",
    "kind": "generate",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "prompt_tokens": {"mean": 32000},
    "output_tokens": {"mean": 100},
    "peak_request_rate_rps": 1,
    "slo": {"ttft_ms": 100, "tpot_ms": 20},
    "gpu": {"type": "L4"},
    "precision": {"dtype": "bfloat16"},
}


def test_limits_below_their_floors_are_found_with_what_would_meet_them():
    stage = profile_from_dict(IMPOSSIBLE).stages[0]
    verdict = llm_floor_verdict(stage)
    assert verdict is not None
    checks = {check.metric: check for check in verdict.failing}
    assert set(checks) == {"TTFT", "TPOT"}
    # TPOT: one step reads the 8B's bf16 weights at the L4's 300 GB/s.
    by_hand = LLAMA_8B_PARAMETERS * 2 / 300e9 * 1e3  # 53.5 ms
    assert checks["TPOT"].floor_ms == pytest.approx(by_hand, rel=1e-3)
    assert checks["TTFT"].floor_ms == estimate_stage(stage).prefill_floor_ms
    assert checks["TTFT"].floor_ms > 2 * LLAMA_8B_PARAMETERS * 32000 / 121e12 * 1e3
    tpot = next(r for r in verdict.remedies if r.startswith("for TPOT:"))
    # 53.5 / 2 = 26.8 ms misses 20 ms; 53.5 / 4 = 13.4 ms meets it. FP8 halves it: still 26.8.
    assert "tensor parallelism over 4 × L4" in tpot and "FP8" not in tpot
    assert "H100-SXM" in tpot and "T4" not in tpot
    ttft = next(r for r in verdict.remedies if r.startswith("for TTFT:"))
    shorter = round(32000 / checks["TTFT"].times_the_limit)
    assert f"at most about {shorter:,} tokens" in ttft


def test_page_one_the_sizing_line_the_form_and_the_cli_say_so():
    profile = profile_from_dict(IMPOSSIBLE)
    report = recommend(profile)
    (stage,) = report.stages
    decision = stage_decision(stage, profile.stages[0], {}, set())
    assert "its SLO cannot hold on any engine" in decision.sentence
    assert decision.risks[0].startswith("The SLO cannot hold: TTFT <= 100 ms is below the floor")
    assert "the SLO cannot hold on L4" in stage.recommendation.headline
    assert stage.recommendation.caveats[0].startswith("The SLO cannot hold")
    fields = {(p.field, p.severity) for p in feasibility_problems(profile.stages)}
    assert fields == {("slo.ttft_ms", "error"), ("slo.tpot_ms", "error")}


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_the_shipped_examples_limits_are_above_their_floors(name):
    for stage in load_profile(EXAMPLES / name).stages:
        assert llm_floor_verdict(stage) is None


def test_a_model_that_needs_several_gpus_is_judged_on_the_fewest_that_hold_it():
    """Llama-3.1-70B in bf16 on H100s: TP=2 is the fewest that hold it (70.6 GB a GPU), whose
    decode floor is 141 GB / 2 / 3.35 TB/s = 21 ms; one GPU's 42 ms is no layout anyone serves.
    A 405B that nothing holds at bf16 up to 8-way gets no floor verdict (the memory fit says
    why; the fleet serves it at FP8 over 8 GPUs)."""
    base = {
        "kind": "generate",
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "prompt_tokens": {"mean": 1000},
        "output_tokens": {"mean": 200},
        "peak_request_rate_rps": 4,
        "gpu": {"type": "H100-SXM"},
        "precision": {"dtype": "bfloat16"},
    }
    holds = profile_from_dict({**base, "slo": {"ttft_ms": 2000, "tpot_ms": 30}}).stages[0]
    assert llm_floor_verdict(holds) is None  # 21 ms on 2 GPUs meets 30 ms
    tight = profile_from_dict({**base, "slo": {"ttft_ms": 2000, "tpot_ms": 15}}).stages[0]
    verdict = llm_floor_verdict(tight)
    assert verdict is not None and verdict.gpus == 2
    (check,) = verdict.failing
    assert check.floor_ms == pytest.approx(70_553_706_496 * 2 / 2 / 3.35e12 * 1e3, rel=1e-3)
    assert "tensor parallelism over 4 × H100-SXM" in verdict.remedies[0]
    big = profile_from_dict(
        {**base, "model": "meta-llama/Llama-3.1-405B-Instruct", "slo": {"tpot_ms": 80}}
    ).stages[0]
    assert llm_floor_verdict(big) is None


def test_a_refused_stage_keeps_its_refusal_first():
    """Prompts past the model's window are refused before anything else is judged: no floor
    verdict is put ahead of the refusal."""
    profile = profile_from_dict(
        {**IMPOSSIBLE, "model": "llama-2-7b", "prompt_tokens": {"mean": 6000}}
    )
    chosen = recommend(profile).stages[0].recommendation
    assert chosen.caveats[0].startswith("Refused")
    assert not any(c.startswith("The SLO cannot hold") for c in chosen.caveats)
