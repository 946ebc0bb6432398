"""The prediction attached to a planned run, from a record derived from the shipped H200 runs:
a shipped ladder level predicted from the other runs' record, and a run without a fixed level
left without one."""

from __future__ import annotations

from advisor.sizing.calibration_fit import fit_record
from advisor.sizing.measured import measured_reference_runs
from advisor.sizing.run_prediction import predict_run
from advisor.sizing.serving_model import run_shape
from bench.core.calibration import record_from_runs
from bench.core.config import CapacityLoad, ConcurrencyLoad
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR


def _vllm_16_bit_runs():
    return [
        run
        for file_runs in measured_reference_runs(SHIPPED_REFERENCE_DIR).values()
        for run in file_runs
        if run_shape(run) is not None
        and run.config.backend == "vllm"
        and run.config.model == "llama-2-7b"
        and run.config.precision.quantization is None
        and run.config.precision.kv_cache_dtype == "auto"
    ]


def test_a_held_out_ladder_level_is_predicted_within_a_quarter():
    runs = _vllm_16_bit_runs()
    ladder = next(r for r in runs if r.config.load.pattern == "step")
    record = record_from_runs([r for r in runs if r.run_id != ladder.run_id])
    fit = fit_record(record)
    phase = next(p for p in ladder.phases if p.target == 64)
    config = ladder.config.model_copy(update={"load": ConcurrencyLoad(concurrency=64)})
    prediction = predict_run(config, fit, record)
    assert prediction is not None and prediction.calibration_id == record.calibration_id
    tpot = prediction.tpot_ms_p50
    assert tpot.low <= tpot.value <= tpot.high
    ratio = phase.summary.tpot_ms.p50 / tpot.value
    assert 0.75 < ratio < 1.25, ratio


def test_a_run_without_a_fixed_level_gets_no_prediction():
    runs = _vllm_16_bit_runs()
    record = record_from_runs(runs)
    fit = fit_record(record)
    search = runs[0].config.model_copy(update={"load": CapacityLoad(), "slo": {"ttft_ms": 300.0}})
    assert predict_run(search, fit, record) is None
