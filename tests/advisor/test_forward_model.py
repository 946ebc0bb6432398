"""The forward serving model (advisor/sizing/forward_model.py) on the shipped H200 batch ladders
(data/reference: PyTorch, ONNX Runtime and torch.compile on BERT-base at 128 tokens and ResNet-50
at 224 px, float16, batches 1/8/64 at one batch in flight): the floor is a lower bound on every
measured batch, a fit on batches 1 and 64 predicts the held-out batch 8, and the dynamic
batcher's limits, GPU count, cost and feasibility follow their stated rules."""

from __future__ import annotations

import math

import pytest

from advisor.sizing.capacity import load_price_catalogue
from advisor.sizing.forward_model import (
    HOURS_PER_MONTH,
    calibrate,
    choose_batching,
    floor_model,
    forward_fleet,
    ladder_points,
    slo_below_floor,
)
from advisor.sizing.measured import read_reference_folder
from advisor.workload.architectures import ARCHITECTURES
from advisor.workload.gpus import get_gpu
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

SHIPPED = read_reference_folder(SHIPPED_REFERENCE_DIR)
RUNS = [run for runs in SHIPPED.runs.values() for run in runs]
SHAPES = {"bert-base": {"sequence_length": 128}, "resnet-50": {"image_size": 224}}
ENGINES = ("pytorch", "onnxruntime", "torch_compile")
H200 = get_gpu("H200")


def _ladder(engine: str, model: str):
    runs = [r for r in RUNS if r.config.backend == engine and r.config.model == model]
    return ladder_points(r for r in runs if r.environment.primary_gpu_name == "NVIDIA H200")


def _floor(model: str):
    return floor_model(ARCHITECTURES[model], H200, "float16", **SHAPES[model])


@pytest.mark.parametrize("model", SHAPES)
@pytest.mark.parametrize("engine", ENGINES)
def test_the_floor_is_below_every_measured_batch(engine, model) -> None:
    points = _ladder(engine, model)
    assert {batch for batch, _, _ in points} == {1, 8, 64}
    floor = _floor(model)
    for batch, measured_ms, run_id in points:
        assert floor.floor_ms(batch) < measured_ms, run_id


@pytest.mark.parametrize("model", SHAPES)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_fit_on_batches_1_and_64_predicts_batch_8_within_20_percent(engine, model) -> None:
    points = _ladder(engine, model)
    fitted = calibrate(_floor(model), [p for p in points if p[0] != 8])
    assert fitted.largest_measured_batch == 64 and "fitted" in fitted.basis
    (_, measured_ms, _) = next(p for p in points if p[0] == 8)
    assert fitted.batch_ms(8) == pytest.approx(measured_ms, rel=0.20)


def test_batch_limits_meet_the_slo_and_a_tighter_slo_never_gives_more() -> None:
    model = calibrate(_floor("bert-base"), _ladder("pytorch", "bert-base"))
    previous = math.inf
    for slo_ms in (100.0, 30.0, 20.0, 12.0):
        choice = choose_batching(model, slo_ms)
        assert choice is not None and choice.p99_bound_ms <= slo_ms
        assert choice.max_batch <= 64  # not past the measured ladder
        assert choice.samples_per_s_per_gpu <= previous
        previous = choice.samples_per_s_per_gpu
    # Batch 1 alone takes ~5 ms on this engine: a 6 ms p99 (2 batch times) cannot hold.
    assert choose_batching(model, 6.0) is None
    # Batching pays: a 20 ms SLO allows far more than batch 1 at one in flight (~200/s).
    assert choose_batching(model, 20.0).samples_per_s_per_gpu > 10 * 1000 / model.batch_ms(1)


def test_gpu_count_and_cost_follow_the_peak() -> None:
    model = calibrate(_floor("bert-base"), _ladder("torch_compile", "bert-base"))
    choice = choose_batching(model, 20.0)
    per_gpu = choice.samples_per_s_per_gpu
    price = load_price_catalogue().for_gpu("H200")
    at_edge = per_gpu * 3 / 1.2
    fleet = forward_fleet(at_edge, choice, 0.2, price.usd_per_gpu_hour)
    assert fleet.gpus == 3
    assert forward_fleet(at_edge * 1.01, choice, 0.2).gpus == 4
    assert fleet.usd_per_month == pytest.approx(3 * price.usd_per_gpu_hour * HOURS_PER_MONTH)


def test_four_batches_in_flight_cannot_meet_20_ms_and_the_remedies_say_why() -> None:
    """The issue's example: a BERT at ~7.6 ms a batch of 64 (PyTorch, H200) with 4 batches in
    flight needs ~30 ms against a 20 ms p99."""
    model = calibrate(_floor("bert-base"), _ladder("pytorch", "bert-base"))
    verdict = slo_below_floor(model, 20.0, batch=64, in_flight=4, int8_possible=True)
    assert not verdict.feasible and verdict.model_ms > 20.0
    assert verdict.floor_ms < 20.0  # the floor fits: the engine's overhead is what breaks it
    assert any("fewer batches in flight per GPU: 2" in r for r in verdict.remedies)
    assert any("INT8" in r for r in verdict.remedies)
    one = slo_below_floor(model, 20.0, batch=64, in_flight=1)
    assert one.feasible and not one.within_error and one.remedies == []
