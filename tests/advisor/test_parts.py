"""A stage split into parts (advisor/decide/parts.py): each part routed by the real decision tree
on its own traits, the split said on page 1, and bad splits refused when the profile loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.decide.recommend import recommend
from advisor.report.decision import stage_decision
from advisor.workload.profile_input import load_profile, profile_from_dict
from bench.core.errors import UserError

SPEECH = Path(__file__).resolve().parents[2] / "examples" / "profiles" / "speech_split_stage.yaml"
GRAPH_RUNTIMES = {"tensorrt", "onnxruntime"}
CONTROL_FLOW_RUNTIMES = {"pytorch", "torch_compile"}


def test_each_part_is_routed_on_its_own_traits():
    profile = load_profile(SPEECH)
    stage = recommend(profile).stages[0]
    # Taken whole, the decode loop's control flow keeps the stage off graph runtimes ...
    assert stage.recommendation.framework not in GRAPH_RUNTIMES
    routes = {route.part: route for route in stage.parts}
    assert set(routes) == {"encoder", "decode_loop"}
    # ... split, the static encoder goes to one and the loop stays where control flow runs.
    assert routes["encoder"].framework in GRAPH_RUNTIMES
    assert routes["decode_loop"].framework in CONTROL_FLOW_RUNTIMES
    assert routes["encoder"].flops_fraction == pytest.approx(0.9)
    sentence = stage_decision(stage, profile.stages[0], {}, set()).sentence
    assert "Split it: encoder (static, 90% of the FLOPs)" in sentence


def test_a_stage_without_parts_has_no_split():
    data = load_profile(SPEECH).model_dump()
    data["stages"][0]["parts"] = []
    stage = recommend(profile_from_dict(data)).stages[0]
    assert stage.parts == []
    assert (
        "Split it"
        not in stage_decision(stage, profile_from_dict(data).stages[0], {}, set()).sentence
    )


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        (
            [{"name": "a", "flops_fraction": 0.5}, {"name": "b", "flops_fraction": 0.2}],
            "add up to 1",
        ),
        ([{"name": "a", "flops_fraction": 1.0}], "two or more"),
        ([{"name": "a", "flops_fraction": 0.5}, {"name": "a", "flops_fraction": 0.5}], "distinct"),
    ],
)
def test_a_bad_split_is_refused_in_one_line(parts, message):
    data = load_profile(SPEECH).model_dump()
    data["stages"][0]["parts"] = parts
    with pytest.raises(UserError, match=message):
        profile_from_dict(data)


def test_the_split_example_names_no_run_of_another_modality_as_a_reason():
    """The speech example is an audio model: the shipped ResNet-50 and BERT runs are context in
    the evidence table (with why), never "nearest measurement" on page 1."""
    from advisor.report.decision import decision_facts
    from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

    profile = load_profile(SPEECH)
    assert profile.stages[0].modality == "audio"
    stage = recommend(profile, reference_dir=SHIPPED_REFERENCE_DIR).stages[0]
    assert stage.recommendation.nearest  # the shipped forward runs are there as context ...
    assert all(not row.match.matches for row in stage.recommendation.nearest if row.match)
    facts = " ".join(fact.text for fact in decision_facts(stage))
    assert "Nearest measurement" not in facts  # ... and none of them is a reason
