"""The prediction a run carries and the drift check: inside/outside the interval, the words
`bench runs` prints, and a config with a prediction round-tripping through JSON."""

from __future__ import annotations

import pytest

from bench.core.config import RunConfig
from bench.core.prediction import PredictedFigure, RunPrediction, drift_checks, drift_words

PREDICTION = RunPrediction(
    calibration_id="cal-1",
    source="yours",
    device_type="NVIDIA H100 80GB HBM3",
    ttft_ms_p50=PredictedFigure(value=40.0, low=36.0, high=46.0),
    tpot_ms_p50=PredictedFigure(value=10.0, low=9.0, high=11.0),
)


def test_inside_the_interval_is_no_drift():
    checks = drift_checks(PREDICTION, ttft_p50=45.0, tpot_p50=9.5)
    assert [c.outside for c in checks] == [False, False]
    assert drift_words(checks) is None


def test_outside_is_drift_with_the_ratio_and_the_interval():
    checks = drift_checks(PREDICTION, ttft_p50=160.0, tpot_p50=10.0)
    ttft, tpot = checks
    assert ttft.outside and ttft.ratio == pytest.approx(4.0) and not tpot.outside
    assert drift_words(checks) == "drift: TTFT p50 x4.00 (interval x0.90-1.15)"


def test_no_prediction_or_no_measurement_checks_nothing():
    assert drift_checks(None, 1.0, 1.0) == []
    assert [c.metric for c in drift_checks(PREDICTION, None, 10.0)] == ["tpot_ms_p50"]


def test_a_config_carries_its_prediction_through_json():
    config = RunConfig(backend="vllm", model="tiny-llama", prediction=PREDICTION)
    assert RunConfig.model_validate_json(config.model_dump_json()).prediction == PREDICTION
    assert RunConfig(backend="vllm", model="tiny-llama").prediction is None
