"""The serving model on the shipped H200 runs: predictions, the leave-one-out table the docs
state, speed, the interval and monotonicity in the rate."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from advisor.sizing.configurations import Deployment
from advisor.sizing.measured import measured_reference_runs
from advisor.sizing.serving_model import (
    CapacityPrediction,
    in_flight,
    predict_latency,
    predict_stage_capacity,
    run_shape,
)
from advisor.sizing.serving_validation import validate
from advisor.workload.profile import StageProfile
from bench.core.config import PrecisionConfig
from bench.core.pattern_reports import CapacityReport
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

DOC = Path(__file__).resolve().parents[2] / "docs" / "capacity-model.md"
CHAT = {
    "model": "llama-2-7b",
    "prompt_tokens": {"mean": 512},
    "output_tokens": {"mean": 256},
    "peak_request_rate_rps": 40,
    "slo": {"ttft_ms": 300, "tpot_ms": 50},
    "gpu": {"type": "H200"},
}
VLLM_16 = Deployment(framework="vllm", precision=PrecisionConfig(dtype="float16"))


@pytest.fixture(scope="module")
def shipped() -> dict:
    return measured_reference_runs(SHIPPED_REFERENCE_DIR)


@pytest.fixture(scope="module")
def runs(shipped) -> list:
    return [run for file_runs in shipped.values() for run in file_runs]


@pytest.fixture(scope="module")
def validation(shipped):
    return validate((run, name) for name, file_runs in shipped.items() for run in file_runs)


def _searches(runs) -> list:
    return [
        run
        for run in runs
        if isinstance(run.pattern_report, CapacityReport) and run_shape(run) is not None
    ]


def test_chat_prediction_is_calibrated_on_the_h200_runs_and_near_the_shipped_search(runs):
    stage = StageProfile.model_validate(CHAT)
    prediction = predict_stage_capacity(stage, VLLM_16, runs)
    assert isinstance(prediction, CapacityPrediction)
    assert prediction.calibrated
    search = next(
        r
        for r in _searches(runs)
        if r.config.precision.quantization is None and run_shape(r).gpu == "H200"
    )
    assert search.run_id in prediction.calibration_runs
    assert prediction.low_rps <= prediction.max_rate_rps <= prediction.high_rps
    assert prediction.binding_constraint in ("ttft_ms", "tpot_ms", "attainment")
    measured = search.pattern_report.max_rate_rps
    # Within twice the validation's own median error of the shipped search (it saw that run).
    assert prediction.expected_error is not None
    assert abs(prediction.max_rate_rps / measured - 1) <= 2 * prediction.expected_error
    assert prediction.curve and prediction.curve[0].level < prediction.max_rate_rps


def test_stages_the_model_cannot_predict_get_none(runs):
    assert (
        predict_stage_capacity(
            StageProfile.model_validate(CHAT), Deployment(framework="pytorch"), runs
        )
        is None
    )
    no_gpu = StageProfile.model_validate({**CHAT, "gpu": {}})
    assert predict_stage_capacity(no_gpu, VLLM_16, runs) is None
    forward = StageProfile.model_validate({**CHAT, "kind": "forward", "model": "bert-base"})
    assert predict_stage_capacity(forward, VLLM_16, runs) is None


def test_a_gpu_without_runs_is_uncalibrated_and_says_so(runs):
    stage = StageProfile.model_validate({**CHAT, "gpu": {"type": "L40S"}})
    prediction = predict_stage_capacity(stage, VLLM_16, runs, expected_error=0.5)
    assert prediction is not None and not prediction.calibrated
    assert prediction.calibration_runs == []
    assert any(note.startswith("uncalibrated") for note in prediction.notes)


def test_one_prediction_takes_under_a_second(runs):
    stage = StageProfile.model_validate(CHAT)
    predict_stage_capacity(stage, VLLM_16, runs, expected_error=0.1)  # warm the lazy imports
    started = time.perf_counter()
    predict_stage_capacity(stage, VLLM_16, runs, expected_error=0.1)
    assert time.perf_counter() - started < 1.0


def test_latency_rises_with_the_rate_and_in_flight_is_littles_law(runs):
    stage = StageProfile.model_validate(CHAT)
    previous = None
    for rate in (4.0, 8.0, 12.0, 16.0, 20.0, 24.0):
        latency = predict_latency(stage, VLLM_16, runs, rate_rps=rate).latency
        figures = (latency.ttft_ms.p99, latency.tpot_ms.p50, latency.e2e_ms.p50)
        if previous is not None:
            assert all(now >= before for now, before in zip(figures, previous, strict=True))
        previous = figures
    e2e_p99 = predict_latency(stage, VLLM_16, runs, rate_rps=10.0).latency.e2e_ms.p99
    assert in_flight(stage, VLLM_16, runs, rate_rps=10.0) == pytest.approx(10.0 * e2e_p99 / 1e3)


def _doc_percent(row: str) -> float:
    line = next(line for line in DOC.read_text().splitlines() if line.startswith(f"| {row} |"))
    return float(re.findall(r"([\d.]+)%", line)[0]) / 100


def test_the_docs_state_the_tables_median_errors(validation):
    assert _doc_percent("SLO capacity") == pytest.approx(
        round(validation.capacity_median_error(), 3), abs=5e-4
    )
    for figure, label in (
        ("ttft_p50", "TTFT p50"),
        ("tpot_p50", "TPOT p50"),
        ("e2e_p50", "E2E p50"),
    ):
        assert _doc_percent(label) == pytest.approx(
            round(validation.median_error(figure), 3), abs=5e-4
        )


def test_every_shipped_search_is_in_the_table_and_its_interval_meets_the_measured_bracket(
    validation, runs
):
    searches = {run.run_id for run in _searches(runs)}
    assert {row.run_id for row in validation.capacities} == searches and searches
    text = DOC.read_text()
    stated = re.search(r"covers the measured `max_rate_rps` in\s+(\d+) of (\d+)", text)
    assert stated is not None
    assert int(stated.group(1)) == sum(row.covered for row in validation.capacities)
    for row in validation.capacities:
        # The search only places its boundary in [max_rate_rps, first infeasible rate).
        assert row.high_rps >= row.measured_rps
        assert row.low_rps <= row.predicted_rps <= row.high_rps
        if not row.settled:  # searches judged from an empty engine: the interval meets the bracket
            assert not row.above_bracket, row.run_id
        # An interval above the bracket (the settled H200 search: the model over-predicts a
        # sustained rate) is said so in the doc, beside the row.
        said = re.search(rf"{row.run_id}[^\n]*lies above the rate that failed", text)
        assert bool(said) == row.above_bracket, row.run_id


def test_a_model_too_large_for_the_gpu_gets_zero_bound_by_memory(runs):
    stage = StageProfile.model_validate({**CHAT, "model": "llama-2-70b", "gpu": {"type": "L4"}})
    prediction = predict_stage_capacity(stage, VLLM_16, runs, expected_error=0.1)
    assert prediction is not None
    assert prediction.max_rate_rps == 0.0 and prediction.binding_constraint == "memory"


def _h200_shape(**args):
    from advisor.sizing.serving_model import engine_shape
    from advisor.workload.architectures import architecture_for
    from advisor.workload.gpus import GPUS

    architecture, _ = architecture_for("llama-2-7b")
    return engine_shape(architecture.parameters, architecture, GPUS["H200"], VLLM_16, args)


def test_one_request_alone_takes_one_prefill_step_then_one_decode_step_per_token():
    from advisor.sizing.serving_model import Factors, Workload, simulate
    from bench.core.config import LengthDistribution

    shape = _h200_shape()
    factors = Factors(overhead_ms=0.7, memory=1.1, compute=1.9, front_end_ms=5.0)
    prompt, output = 300, 40
    workload = Workload(
        LengthDistribution(mean=prompt), LengthDistribution(mean=output), 20, "constant"
    )
    # One request every 10 s: each finds the engine idle (the decode stretch is jumped over).
    latency = simulate(shape, factors, workload, rate_rps=0.1)
    ttft = shape.step_ms(factors, 0, prompt, 0) + factors.front_end_ms
    decode = [shape.step_ms(factors, 1, 0, prompt + j) for j in range(output - 1)]
    assert latency.ttft_ms.p50 == pytest.approx(ttft, rel=1e-9)
    assert latency.tpot_ms.p50 == pytest.approx(sum(decode) / len(decode), rel=1e-9)
    assert latency.e2e_ms.p99 == pytest.approx(ttft + sum(decode), rel=1e-9)


def test_the_batch_never_exceeds_max_num_seqs_or_the_kv_cache():
    from advisor.sizing.serving_model import Factors, Workload, simulate
    from bench.core.config import LengthDistribution

    workload = Workload(LengthDistribution(mean=512), LengthDistribution(mean=256), 600)
    limited = _h200_shape(max_num_seqs=32)
    assert simulate(limited, Factors(), workload, concurrency=400).mean_batch <= 32
    small_kv = _h200_shape(gpu_memory_utilization=0.2)  # ~12 GB of KV: ~30 requests of 768
    by_kv = small_kv.kv_capacity_tokens // 768
    assert 0 < by_kv < 256
    assert simulate(small_kv, Factors(), workload, concurrency=400).mean_batch <= by_kv


def test_jumping_decode_stretches_gives_the_step_by_step_result(monkeypatch):
    from advisor.sizing import serving_sim
    from advisor.sizing.serving_model import Factors, Workload, simulate
    from bench.core.config import LengthDistribution

    shape = _h200_shape()
    workload = Workload(
        LengthDistribution(kind="uniform", mean=400, spread=300),
        LengthDistribution(kind="uniform", mean=150, spread=100),
        300,
        seed=3,
    )
    fast = simulate(shape, Factors(), workload, rate_rps=3.0)
    monkeypatch.setattr(serving_sim, "JUMP_DECODE_STRETCHES", False)
    slow = simulate(shape, Factors(), workload, rate_rps=3.0)
    for figure in ("ttft_ms", "tpot_ms", "e2e_ms"):
        for level in ("p50", "p90", "p99"):
            a, b = getattr(getattr(fast, figure), level), getattr(getattr(slow, figure), level)
            assert a == pytest.approx(b, rel=1e-6), (figure, level)
