"""Page 1 of the report for forward stages (advisor/report/forward_page.py through
`stage_decision`), from the advisor's real answer on the shipped runs: the GPUs and cost come
with the batcher's limits and their basis, and an SLO the stated in-flight batches cannot meet
is the first risk, with how far and what would make it feasible."""

from __future__ import annotations

from advisor.decide.recommend import recommend
from advisor.report.decision import stage_decision
from advisor.sizing.measured import read_reference_folder
from advisor.workload.profile_input import profile_from_dict
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

SHIPPED = read_reference_folder(SHIPPED_REFERENCE_DIR)
RUNS = [run for runs in SHIPPED.runs.values() for run in runs]


def _page_one(**stage):
    profile = profile_from_dict({"title": "t", "kind": "forward", **stage})
    answer = recommend(profile, reference=SHIPPED, availability={}).stages[0]
    return stage_decision(answer, profile.stages[0], {}, set(), RUNS)


BERT = {
    "model": "bert-base",
    "batch_size": 64,
    "sequence_length": {"mean": 128},
    "peak_request_rate_rps": 200,
    "slo": {"e2e_ms": 20},
    "gpu": {"type": "H200"},
    "precision": {"dtype": "float16"},
}


def test_sixteen_batches_in_flight_are_below_the_floor_and_page_one_says_so() -> None:
    """16 requests of 64 in flight at 200 req/s (80 ms each by Little's law) spread over the
    fleet's 2 H200s: 8 batches of 64 a GPU, one after another, cannot meet 20 ms."""
    page = _page_one(**BERT, concurrency=16)
    risk = page.risks[0]
    assert "2 × H200" in page.sizing
    assert risk.startswith("The 20 ms SLO cannot hold at the stated load: 8 batches of 64")
    # The shipped ladder's batch time says so; the floor alone (11.6 ms for 8) would not.
    assert "below the physical floor itself" not in risk and "Would make it feasible" in risk
    assert "× H200" in page.sizing and "samples/s" in page.sizing and "Basis:" in page.sizing
    assert "KV cache" not in page.sentence  # a forward pass keeps none


def test_one_batch_in_flight_holds_and_no_feasibility_risk_is_raised() -> None:
    page = _page_one(**BERT, concurrency=1)
    assert not any("SLO cannot hold" in risk or "within the model's error" in risk
                   for risk in page.risks)  # fmt: skip
    assert "dynamic batching with max batch" in page.sizing


def test_a_generate_stage_page_keeps_its_llm_sizing() -> None:
    profile = profile_from_dict({"title": "t", "model": "llama-2-7b", "gpu": {"type": "H200"}})
    answer = recommend(profile, reference=SHIPPED, availability={}).stages[0]
    page = stage_decision(answer, profile.stages[0], {}, set(), RUNS)
    assert "samples/s" not in page.sizing and "dynamic batching" not in page.sizing
