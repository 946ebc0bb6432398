"""A forward stage sized for one framework (advisor/sizing/forward_sizing.py) from the shipped
runs (data/reference: H200 batch ladders of BERT-base and ResNet-50, float16) and the example
profile fixed_shape_vision.yaml (ResNet-50 on an L4, no ladder there): the basis is named, the
GPU count follows the peak, and an SLO the stated in-flight batches cannot meet is flagged."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from advisor.sizing.capacity import load_price_catalogue
from advisor.sizing.forward_model import HOURS_PER_MONTH
from advisor.sizing.forward_sizing import size_forward_stage
from advisor.sizing.measured import read_reference_folder
from advisor.workload.profile_input import load_profile, profile_from_dict
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

RUNS = [r for runs in read_reference_folder(SHIPPED_REFERENCE_DIR).runs.values() for r in runs]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "profiles"


def _stage(**data):
    return profile_from_dict({"title": "t", "kind": "forward", **data}).stages[0]


BERT_H200 = {
    "model": "bert-base",
    "batch_size": 64,
    "sequence_length": {"mean": 128},
    "concurrency": 4,
    "peak_request_rate_rps": 200,
    "slo": {"e2e_ms": 20},
    "gpu": {"type": "H200"},
    "precision": {"dtype": "float16"},
}


def test_a_bert_stage_on_h200_is_sized_from_the_shipped_ladder() -> None:
    sized = size_forward_stage(_stage(**BERT_H200), "pytorch", RUNS)
    assert sized is not None and sized.basis == "measured ladder"
    ladder = [r for r in RUNS if r.run_id in sized.basis_words]
    assert {r.config.workload.batch_size for r in ladder} == {1, 8, 64}
    assert all(r.config.backend == "pytorch" and r.config.model == "bert-base" for r in ladder)
    batching, fleet = sized.batching, sized.fleet
    assert batching is not None and batching.p99_bound_ms <= 20
    samples = 200 * 64
    assert fleet.gpus == math.ceil(samples * 1.2 / batching.samples_per_s_per_gpu)
    low, high = sized.gpus_range
    assert low <= fleet.gpus <= high
    price = load_price_catalogue().for_gpu("H200").usd_per_gpu_hour
    assert fleet.usd_per_month == pytest.approx(fleet.gpus * price * HOURS_PER_MONTH)
    # The 4 requests in flight spread over the fleet's GPUs: 2 batches of 64 a GPU hold 20 ms.
    verdict = sized.feasibility
    share = math.ceil(4 / fleet.gpus)
    assert (verdict.in_flight, verdict.batch) == (share, 64)
    assert verdict.feasible and verdict.model_ms <= 20
    # Without a peak rate all 4 land on the profile's one GPU: ~7.6 ms each cannot meet 20 ms.
    one_gpu = {k: v for k, v in BERT_H200.items() if k != "peak_request_rate_rps"}
    verdict = size_forward_stage(_stage(**one_gpu), "pytorch", RUNS).feasibility
    assert (verdict.in_flight, verdict.batch) == (4, 64)
    assert not verdict.feasible and verdict.model_ms > 20 > verdict.floor_ms
    assert verdict.remedies[0].startswith("fewer batches in flight per GPU: 2")


def test_torch_compile_needs_fewer_gpus_than_eager_for_the_same_peak() -> None:
    eager = size_forward_stage(_stage(**BERT_H200), "pytorch", RUNS)
    compiled = size_forward_stage(_stage(**BERT_H200), "torch_compile", RUNS)
    assert compiled.basis == "measured ladder"
    assert compiled.fleet.samples_per_s_per_gpu > eager.fleet.samples_per_s_per_gpu
    assert compiled.fleet.gpus <= eager.fleet.gpus


def test_ladders_of_another_gpu_are_carried_and_of_another_shape_do_not_calibrate() -> None:
    other_gpu = size_forward_stage(_stage(**{**BERT_H200, "gpu": {"type": "L4"}}), "pytorch", RUNS)
    assert other_gpu.basis == "carried ladder" and "carried over" in other_gpu.notes[0]
    assert other_gpu.error >= 0.5  # a carried ladder is no calibration of this GPU
    other_shape = size_forward_stage(
        _stage(**{**BERT_H200, "sequence_length": {"mean": 512}}), "pytorch", RUNS
    )
    assert other_shape.basis == "floor only"


def test_the_example_vision_profile_gets_a_floor_only_answer_that_says_so() -> None:
    stage = load_profile(EXAMPLES / "fixed_shape_vision.yaml").stages[0]
    sized = size_forward_stage(stage, "tensorrt", RUNS)
    assert sized.gpu_type == "L4" and sized.basis == "floor only"
    assert sized.batching is not None
    # 8 batches of 32 images at the L4's ResNet-50 floor fit the 100 ms p99 with room.
    assert sized.feasibility.feasible and sized.feasibility.ratio_to_floor > 1
    assert sized.fleet is None  # the profile states no peak rate


def test_a_generate_stage_is_not_a_forward_stage() -> None:
    stage = profile_from_dict({"title": "t", "model": "llama-2-7b"}).stages[0]
    assert size_forward_stage(stage, "vllm", RUNS) is None


VIT_T4 = {
    "model": "vit-base",
    "batch_size": 32,
    "image_size": 224,
    "slo": {"e2e_ms": 20},
    "gpu": {"type": "T4"},
    "precision": {"dtype": "float16"},
}


def test_a_vit_on_a_t4_at_20_ms_is_flagged_before_anything_runs() -> None:
    """The issue's example: ViT-B/16 at 224 px, 32 images a batch, on a T4 (65 TFLOP/s FP16)
    sits ~1.2x above its compute floor with one batch in flight (doubtful: within the floor
    model's error) and below it with two (impossible on any engine)."""
    from advisor.sizing.forward_sizing import floor_feasibility

    one = floor_feasibility(_stage(**VIT_T4, concurrency=1))
    assert one.feasible and one.within_error
    assert 1.1 < one.ratio_to_floor < 1.3
    two = floor_feasibility(_stage(**VIT_T4, concurrency=2))
    assert not two.feasible and two.ratio_to_floor < 1
    assert any("INT8" in remedy for remedy in two.remedies)
    relaxed = floor_feasibility(_stage(**{**VIT_T4, "slo": {"e2e_ms": 200}}, concurrency=1))
    assert relaxed.feasible and not relaxed.within_error
    assert floor_feasibility(_stage(**{**VIT_T4, "slo": {}})) is None
