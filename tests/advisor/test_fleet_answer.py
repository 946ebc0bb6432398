"""One fleet answer (advisor/sizing/fleet.py, advisor/decide/fleet_answer.py) on the product's
real functions and the data it ships: every viable configuration sized for the peak, the
cheapest within the SLO and quality tolerance chosen, and page 1 agreeing with itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from advisor.decide.recommend import recommend
from advisor.report.decision import stage_decision
from advisor.sizing.capacity import Capacity
from advisor.sizing.configurations import same_configuration
from advisor.sizing.deployments import Deployment
from advisor.sizing.fleet import CapacityBasis, FleetOption, choose
from advisor.workload.profile_input import load_profile, profile_from_dict
from bench.core.config import ParallelismConfig, PrecisionConfig
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "profiles"
ASSISTANT_13B = {
    "title": "13B assistant, one 3,000-token system prompt",
    "long_sequence_generation": True,
    "kind": "generate",
    "model": "llama-2-13b",
    "prompt_tokens": {"mean": 3400},
    "output_tokens": {"mean": 300},
    "shared_prefix": {"tokens": 3000},
    "peak_request_rate_rps": 20,
    "slo": {"ttft_ms": 1000, "tpot_ms": 60, "percentile": "p99"},
    "gpu": {"type": "H100-SXM", "count": 1},
    "precision": {"dtype": "bfloat16"},
}


def fleet_deployment(recommendation) -> Deployment:
    option = recommendation.fleet.chosen
    return Deployment(
        framework=option.framework, parallelism=option.parallelism, precision=option.precision
    )


def chosen_of(data: dict, reference_dir=None):
    report = recommend(profile_from_dict(data), reference_dir=reference_dir)
    return report.stages[0].recommendation


def test_removing_a_shared_prefix_raises_the_fleet():
    cached = chosen_of(ASSISTANT_13B)
    plain = chosen_of({k: v for k, v in ASSISTANT_13B.items() if k != "shared_prefix"})
    assert cached.fleet is not None and plain.fleet is not None
    assert cached.capacity.gpus_needed < plain.capacity.gpus_needed
    assert cached.fleet.chosen.prefix_caching and not plain.fleet.chosen.prefix_caching


def test_fp8_is_sized_and_chosen_where_cheaper():
    chosen = chosen_of(load_profile(EXAMPLES / "code_completion_h100.yaml").model_dump())
    fleet = chosen.fleet
    assert fleet is not None and fleet.chosen.precision.quantization == "fp8"
    asked = [o for o in fleet.alternatives if o.precision.quantization is None]
    assert asked, "the profile's own precision is sized too"
    assert fleet.chosen.gpus <= asked[0].gpus
    assert fleet.chosen.capacity.monthly_cost < asked[0].capacity.monthly_cost
    assert "99.7%" in (fleet.chosen.quality or "")  # the published FP8 recovery, labelled
    # The decision deploys what the fleet sized: one configuration, one GPU count.
    configuration = chosen.configuration
    assert configuration.precision == fleet.chosen.precision
    assert configuration.gpus == chosen.capacity.gpus_needed


def test_the_peak_profile_names_its_measured_alternative():
    chosen = chosen_of(
        load_profile(EXAMPLES / "chat_7b_h200_peak.yaml").model_dump(),
        reference_dir=SHIPPED_REFERENCE_DIR,
    )
    fleet = chosen.fleet
    measured = [o for o in [fleet.chosen, *fleet.alternatives] if o.basis.measured]
    assert measured, "the shipped settled search is one of the options on page 1"
    search = next(o for o in measured if o.basis.settled)
    assert search.basis.source == "shipped" and search.departures == 0
    assert search.gpus == 3 and search.capacity.max_rate_rps == pytest.approx(20)
    # Whatever is chosen is no dearer than the measured configuration.
    assert fleet.chosen.gpus <= search.gpus
    assert f"{chosen.capacity.gpus_needed} x H200" in chosen.headline


@pytest.mark.parametrize(
    "name", sorted(path.name for path in EXAMPLES.glob("*.yaml")), ids=lambda n: n[:-5]
)
def test_page_one_agrees_with_itself(name):
    profile = load_profile(EXAMPLES / name)
    report = recommend(profile, reference_dir=SHIPPED_REFERENCE_DIR)
    for stage, stage_profile in zip(report.stages, profile.stages, strict=True):
        chosen = stage.recommendation
        # A forward stage with a peak rate is in the one fleet answer like an LLM stage.
        has_peak = (
            stage_profile.peak_request_rate_rps or stage_profile.request_rate_rps
        ) is not None
        if stage.kind == "forward" and has_peak and stage_profile.gpu.type:
            assert chosen.fleet is not None and chosen.fleet.chosen is not None, stage.stage
        if chosen.fleet is None or chosen.fleet.chosen is None:
            continue
        assert chosen.configuration.gpus == chosen.capacity.gpus_needed
        assert chosen.capacity == chosen.fleet.chosen.capacity
        measured = chosen.fleet.chosen.basis.measured
        assert ("predicted" in chosen.capacity_basis) is not measured
        # The decision sentence's GPU count is the fleet's.
        sentence = stage_decision(stage, stage_profile, {}, set()).sentence
        counted = re.search(r" on (\d+) × ", sentence)
        assert counted is not None, sentence
        assert int(counted.group(1)) == chosen.capacity.gpus_needed, sentence
        # The table of layouts recommends the configuration the fleet deploys.
        search = stage.configurations
        if search is not None and search.best() is not None:
            assert same_configuration(search.best().deployment, fleet_deployment(chosen)), (
                search.recommended,
                chosen.fleet.chosen.label,
            )


FINANCIAL = EXAMPLES / "financial_risk_control.yaml"
BERT_QUALITY = SHIPPED_REFERENCE_DIR / "quality" / "cpu_tiny-bert-classifier" / "quality.json"


def test_a_forward_stage_is_sized_by_its_batcher_in_the_fleet():
    chosen = chosen_of(load_profile(FINANCIAL).model_dump())
    fleet = chosen.fleet
    assert fleet is not None and fleet.chosen.samples_per_request == 16
    args = fleet.chosen.engine_args
    assert args["max_batch_size"] >= 1 and args["max_queue_delay_ms"] >= 0
    # Capacity in requests/s = samples/s per GPU / samples per request.
    assert fleet.chosen.capacity.max_rate_rps == pytest.approx(
        fleet.chosen.samples_per_s_per_gpu / 16
    )
    assert chosen.configuration.engine_args["max_batch_size"] == args["max_batch_size"]
    assert "samples/s per GPU" in chosen.capacity_basis
    # INT8 (A10G has INT8 tensor cores) is offered, but with no accuracy measured on the model
    # it is an alternative, never the choice, though it needs fewer GPUs here.
    int8 = [o for o in fleet.alternatives if o.weight_format == "int8"]
    assert int8 and int8[0].unvetted and "not measured" in (int8[0].quality or "")
    assert fleet.chosen.weight_format is None
    assert int8[0].gpus < fleet.chosen.gpus
    assert not any(o.weight_format == "fp8" for o in fleet.alternatives)  # A10G: no FP8


def test_int8_with_a_measured_accuracy_within_tolerance_is_chosen():
    data = load_profile(FINANCIAL).model_dump()
    data["stages"][0]["quality_result"] = str(BERT_QUALITY)
    chosen = chosen_of(data)
    fleet = chosen.fleet
    assert fleet.chosen.weight_format == "int8" and not fleet.chosen.unvetted
    assert "top-1 agree" in fleet.chosen.quality
    assert chosen.configuration.weight_format == "int8"
    assert chosen.configuration.gpus == chosen.capacity.gpus_needed
    profile = profile_from_dict(data)
    sentence = stage_decision(recommend(profile).stages[0], profile.stages[0], {}, set()).sentence
    assert "INT8 weights and activations" in sentence


def _option(gpus: int, source: str, low: int, high: int, quantization=None) -> FleetOption:
    capacity = Capacity(
        source="measured" if source in ("yours", "shipped") else "estimate",
        max_rate_rps=10,
        converged=True,
        gpus_per_replica=1,
        replicas_needed=gpus,
        gpus_needed=gpus,
        peak_request_rate_rps=10 * gpus,
        headroom_fraction=0,
        gpus_range=(low, high),
        monthly_cost=1000.0 * gpus,
    )
    precision = PrecisionConfig(quantization=quantization)
    return FleetOption(
        framework="vllm",
        label=f"vllm {gpus} {source} {quantization}",
        parallelism=ParallelismConfig(),
        precision=precision,
        weights="fp8 weights" if quantization else "bf16",
        departures=int(quantization is not None),
        capacity=capacity,
        basis=CapacityBasis(source=source),
    )


def test_the_cheapest_is_chosen_and_a_tie_is_said():
    measured = _option(3, "shipped", 3, 3)
    predicted = _option(2, "calibrated", 2, 3, quantization="fp8")
    answer = choose([measured, predicted], "H200")
    assert answer.chosen is predicted and answer.alternatives == [measured]
    assert answer.tie is not None and "cannot be told apart" in answer.tie
    clear = _option(2, "calibrated", 2, 2, quantization="fp8")
    assert choose([measured, clear], "H200").tie is None
    # At the same count a measurement stands over a prediction.
    same = _option(3, "calibrated", 3, 3, quantization="fp8")
    assert choose([same, measured], "H200").chosen is measured


def test_a_quantised_precision_beyond_tolerance_is_left_out():
    # A real `bench quality` file with measured INT8 and FP8 losses (0.12% and 0.03% perplexity
    # on tiny-llama-trained): the gate reads the losses, whatever the model they came from.
    data = load_profile(FINANCIAL).model_dump()
    stage = data["stages"][0]
    stage["quality_result"] = str(
        SHIPPED_REFERENCE_DIR / "quality" / "cpu_tiny-llama-trained" / "quality.json"
    )
    stage["max_quality_loss_pct"] = 0.05
    stage["gpu"] = {"type": "H100-SXM"}
    fleet = chosen_of(data).fleet
    options = [fleet.chosen, *fleet.alternatives]
    assert not any(o.weight_format == "int8" for o in options)
    assert any(
        "INT8" in note and "beyond the tolerance of 0.05%" in note for note in fleet.excluded
    )
    fp8 = [o for o in options if o.weight_format == "fp8"]
    assert fp8 and not fp8[0].unvetted and "measured" in fp8[0].quality


LONG_DOCUMENTS_8B = {
    "title": "Long-document QA, 32k-token prompts",
    "kind": "generate",
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "prompt_tokens": {"mean": 32000},
    "output_tokens": {"mean": 256},
    "peak_request_rate_rps": 2,
    "slo": {"ttft_ms": 5000, "tpot_ms": 60},
    "gpu": {"type": "H100-SXM"},
    "precision": {"dtype": "bfloat16"},
}


def test_an_engine_holding_part_of_the_peak_is_a_configuration_and_the_table_follows_the_fleet():
    """8B at 32k tokens: one H100 holds the weights and 14 of the 41 sequences in flight. Before,
    the layouts table excluded every one-GPU layout ("needs 191 GB") and recommended TP=4 with
    the caveat "nothing holds the model on 1", beside a fleet of one-GPU replicas."""
    report = recommend(profile_from_dict(LONG_DOCUMENTS_8B), reference_dir=SHIPPED_REFERENCE_DIR)
    (stage,) = report.stages
    chosen = stage.recommendation
    search = stage.configurations
    assert chosen.fleet is not None and search is not None
    one_gpu_bf16 = next(
        e for e in search.estimates if e.label == "vllm TP=1 bfloat16" and e.within_gpu_budget
    )
    held = one_gpu_bf16.max_concurrency_per_replica
    assert held is not None and 1 <= held < search.concurrency
    assert one_gpu_bf16.prediction.batch_per_replica == held
    assert any(f"holds {held} of the {search.concurrency}" in n for n in one_gpu_bf16.notes)
    assert same_configuration(search.best().deployment, fleet_deployment(chosen))
    assert search.recommended == search.best().label
    assert not any("nothing holds the model" in c for c in chosen.caveats)
    fact = stage_decision(stage, report.profile.stages[0], {}, set())
    assert any(f"{held} of the 41 sequences in flight fit" in f.text for f in fact.facts), fact


def test_a_pre_quantised_checkpoint_is_named_in_the_layouts_and_fp8_is_not_read_twice():
    awq = recommend(
        profile_from_dict(
            {
                "kind": "generate",
                "model": "Qwen/Qwen2.5-7B-Instruct",
                "prompt_tokens": {"mean": 600},
                "output_tokens": {"mean": 250},
                "peak_request_rate_rps": 4,
                "slo": {"ttft_ms": 1000, "tpot_ms": 60},
                "gpu": {"type": "L4"},
                "precision": {"dtype": "float16", "quantization": "awq"},
            }
        )
    ).stages[0]
    labels = [e.label for e in awq.configurations.estimates]
    assert "vllm TP=1 float16 + awq weights" in labels
    awq_row = next(e for e in awq.configurations.estimates if e.label.endswith("awq weights"))
    assert awq_row.weights_gb_per_gpu < 4.5  # 7.6 B parameters at 4 bits and their scales
    # A profile at FP8 runs FP8 itself: its 16-bit layout reads 2 bytes a weight, not FP8's 1.
    fp8 = recommend(
        profile_from_dict(
            {**LONG_DOCUMENTS_8B, "precision": {"dtype": "bfloat16", "quantization": "fp8"}}
        )
    ).stages[0]
    rows = {e.label: e for e in fp8.configurations.estimates}
    assert not any(label.count("fp8 weights") > 1 for label in rows)
    assert rows["vllm TP=1 bfloat16"].weights_gb_per_gpu == pytest.approx(
        2 * rows["vllm TP=1 bfloat16 + fp8 weights"].weights_gb_per_gpu
    )


def test_a_model_that_needs_tensor_parallelism_is_told_the_smallest_layout_the_fleet_can_use():
    """70B at bf16 on H100 with a peak rate: TP=2 holds the weights and some sequences (the
    fleet's replicas take the rest), FP8 weights fit one GPU; before, TP=4 and "FP8 still does
    not fit", counting all 156 sequences in flight in one engine."""
    from advisor.sizing.estimate import estimate_stage

    profile = profile_from_dict(
        {
            "kind": "generate",
            "model": "meta-llama/Llama-3.1-70B-Instruct",
            "prompt_tokens": {"mean": 1500},
            "output_tokens": {"mean": 300},
            "peak_request_rate_rps": 8,
            "slo": {"ttft_ms": 1500, "tpot_ms": 60},
            "gpu": {"type": "H100-SXM"},
            "precision": {"dtype": "bfloat16"},
        }
    )
    estimate = estimate_stage(profile.stages[0])
    assert estimate.fits is False and estimate.tensor_parallel_needed == 2
    fp8 = next(s for s in estimate.suggestions if s.startswith("weight quantisation fp8"))
    assert "-> fits (with replicas" in fp8
    with_concurrency = profile_from_dict(
        {**profile.stages[0].model_dump(exclude_none=True), "concurrency": 156}
    )
    # The profile's own concurrency on its own GPUs: every sequence must fit, as before.
    assert estimate_stage(with_concurrency.stages[0]).tensor_parallel_needed == 4
