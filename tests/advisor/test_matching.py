"""The evidence match rule (docs/configurations.md, "When a measurement settles an answer") and
provenance, on the shipped data/reference runs
(H200, llama-2-7b/13b, mostly 128-token prompts and outputs): only a measurement matching the
stage settles it; nearer-but-different ones are context with their distance; shipped runs are
`published`, never the user's own."""

from __future__ import annotations

import pytest

from advisor.decide.recommend import recommend
from advisor.evidence.rows import MATCH_BAND, workload_match
from advisor.sizing.measured import read_reference_folder
from advisor.workload.profile_input import profile_from_dict
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

SHIPPED = read_reference_folder(SHIPPED_REFERENCE_DIR)


def _answer(**data):
    profile = profile_from_dict({"title": "t", **data})
    return recommend(profile, reference=SHIPPED, availability={}).stages[0]


CHAT_128 = {
    "model": "llama-2-7b",
    "long_sequence_generation": True,
    "prompt_tokens": {"mean": 128},
    "output_tokens": {"mean": 128},
    "concurrency": 64,
    "gpu": {"type": "H200"},
    "precision": {"dtype": "float16"},
}


def _shipped_vllm_ladder():
    """The shipped llama-2-7b vLLM fp16 step ladder at 128/128 tokens (phases 1/16/64/256)."""
    for runs in SHIPPED.runs.values():
        for run in runs:
            if (
                run.config.backend == "vllm"
                and run.config.model == "llama-2-7b"
                and run.config.precision.dtype == "float16"
                and run.config.load.pattern == "step"
                and run.config.workload.prompt_tokens.mean == 128
            ):
                return run
    raise AssertionError("the shipped data has no such run")


def test_the_shipped_128_token_runs_settle_the_128_token_profile_as_published() -> None:
    stage = _answer(**CHAT_128)
    chosen = stage.recommendation
    assert chosen.follows == "measurements" and chosen.settled_by == "published"
    assert chosen.settled_by_runs
    settling = [row for row in stage.evidence if set(row.run_ids) & set(chosen.settled_by_runs)]
    assert settling and all(row.match is not None and row.match.matches for row in settling)
    assert all(
        row.provenance is not None and row.provenance.kind == "published" for row in settling
    )
    first = settling[0].provenance
    assert first.host and first.date and first.command.startswith("python -m bench")
    # Never "measured on the user's GPU": the user ran nothing (CPU-only machine, empty store).
    assert "user's GPU" not in chosen.confidence.why
    assert "this project's published run" in chosen.confidence.why
    assert all(not row.label.startswith("your run") for row in stage.evidence)
    assert all("measured-here" not in row.label for row in stage.evidence)


@pytest.mark.parametrize("prompt", [3000, 1024])
def test_a_long_prompt_profile_is_not_settled_by_128_token_runs(prompt: int) -> None:
    stage = _answer(**{**CHAT_128, "prompt_tokens": {"mean": prompt}})
    chosen = stage.recommendation
    assert chosen.follows == "tree" and chosen.settled_by == "tree"
    assert chosen.settled_by_runs == [] and chosen.confidence.level == "low"
    assert chosen.confidence.why.startswith("rests on the decision tree and the estimate")
    assert chosen.nearest, "the nearer-but-different runs are shown as context"
    for row in chosen.nearest:
        assert row.match is not None and not row.match.matches
        # the nearest shipped prompts are <= 512 (distance kept to 3 decimals)
        assert row.match.distance >= round(prompt / 512, 3) - 1e-9
    assert f"vs the stage's {prompt:,} tok" in chosen.confidence.why


def test_a_200k_prompt_is_refused_not_settled() -> None:
    stage = _answer(**{**CHAT_128, "prompt_tokens": {"mean": 200_000}})
    chosen = stage.recommendation
    assert chosen.framework == "none" and chosen.follows == "refused"
    assert chosen.settled_by == "refused" and chosen.settled_by_runs == []
    assert "200,128 tokens" in chosen.confidence.why and "4,096" in chosen.confidence.why
    assert stage.decision.candidates == [] and stage.configurations is None


def test_the_band_is_25_percent_of_the_stage() -> None:
    run = _shipped_vllm_ladder()
    stage = profile_from_dict(CHAT_128).primary
    assert MATCH_BAND == 0.25
    inside = stage.model_copy(
        update={"prompt_tokens": stage.prompt_tokens.model_copy(update={"mean": 160})}
    )  # 128 is within 25% of 160
    outside = stage.model_copy(
        update={"prompt_tokens": stage.prompt_tokens.model_copy(update={"mean": 180})}
    )  # 128 is 29% below 180
    assert workload_match(run, stage).matches
    assert workload_match(run, inside).matches
    assert not workload_match(run, outside).matches
    assert workload_match(run, outside).distance == pytest.approx(180 / 128, abs=1e-3)


def test_a_distance_says_what_it_measures() -> None:
    """An evidence row's label said "25x off" without saying in what: it names the length or
    load level that differs most, and the summary leads with it."""
    run = _shipped_vllm_ladder()
    stage = profile_from_dict(CHAT_128).primary
    longer_output = stage.model_copy(
        update={
            "prompt_tokens": stage.prompt_tokens.model_copy(update={"mean": 256}),  # 2x
            "output_tokens": stage.output_tokens.model_copy(update={"mean": 128 * 25}),  # 25x
        }
    )
    match = workload_match(run, longer_output)
    assert match.farthest == "output length" and match.distance == pytest.approx(25)
    assert match.distance_text == "output length off by 25x"
    assert match.summary.startswith("output length off by 25x: prompt 128 vs the stage's 256")
    assert workload_match(run, stage).distance_text == "matches"


def test_traffic_shape_and_precision_are_part_of_the_match() -> None:
    run = _shipped_vllm_ladder()
    stage = profile_from_dict(CHAT_128).primary
    open_loop = stage.model_copy(update={"concurrency": None, "request_rate_rps": 20.0})
    result = workload_match(run, open_loop)
    assert not result.matches and not result.traffic
    assert result.summary == "differs: a step pattern without a phase at the stage's load"
    closed = next(
        run
        for runs in SHIPPED.runs.values()
        for run in runs
        if run.config.load.pattern == "concurrency" and run.config.workload.kind == "generate"
    )
    result = workload_match(closed, open_loop)
    assert not result.traffic and "the stage states the other loop" in result.summary
    between = stage.model_copy(update={"concurrency": 128})  # no phase at 128 in the ladder
    result = workload_match(run, between)
    assert not result.traffic and "without a phase at the stage's load" in result.summary
    bf16 = profile_from_dict({**CHAT_128, "precision": {"dtype": "bfloat16"}}).primary
    result = workload_match(run, bf16)
    assert not result.matches and not result.precision and result.lengths
    no_load = stage.model_copy(update={"concurrency": None})
    assert workload_match(run, no_load).matches  # a stage stating no load matches any level
