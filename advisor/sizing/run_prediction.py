"""The prediction the advisor attaches to a run it plans (`RunConfig.prediction`): median TTFT
and TPOT at the run's fixed level, from a calibration record's fit, with the interval of its
leave-one-level-out step errors. Bench stores it with the run and flags drift.

The prediction is of the engine as calibrated: the record's engine limits (`max_num_seqs`, the
token budget), not the run's. A run whose engine behaves otherwise than the calibrated one (a
smaller `max_num_seqs`, another release, a throttled GPU) measures outside the interval: drift.
"""

from __future__ import annotations

from advisor.sizing.calibration_fit import RecordFit, level_shape
from advisor.sizing.serving_model import Workload, error_scales, scaled, simulate
from bench.core.calibration import CalibrationRecord
from bench.core.config import GenerateWorkload, RunConfig
from bench.core.prediction import PredictedFigure, RunPrediction

PREDICTION_REQUESTS = 200
"""Simulated requests per prediction (after as many warm-up requests at the same load)."""


def predict_run(
    config: RunConfig, fit: RecordFit, record: CalibrationRecord
) -> RunPrediction | None:
    """The run's predicted medians; None for a run without one fixed level or of another kind."""
    fixed = config.load.fixed_level()
    if fixed is None or not isinstance(config.workload, GenerateWorkload):
        return None
    shape = level_shape(record, record.levels[0].engine_limits if record.levels else {})
    if shape is None:
        return None
    over, level = fixed
    workload = Workload(
        config.workload.prompt_tokens,
        config.workload.output_tokens,
        requests=PREDICTION_REQUESTS,
        warmup=PREDICTION_REQUESTS if over == "rate" else max(1, int(level)),
    )
    slow, fast = error_scales(fit.step_errors)
    figures = []
    for scale in (1.0, slow, fast):
        factors = scaled(fit.calibration.factors, scale)
        if over == "rate":
            latency = simulate(shape, factors, workload, 1, rate_rps=level)
        else:
            latency = simulate(shape, factors, workload, 1, concurrency=int(level))
        figures.append(latency)
    central, slower, faster = figures

    def figure(metric: str) -> PredictedFigure | None:
        values = [getattr(f, metric) for f in (central, slower, faster)]
        if any(v is None for v in values):
            return None
        p50s = [v.p50 for v in values]
        if min(p50s) <= 0:
            return None
        return PredictedFigure(value=p50s[0], low=min(p50s), high=max(p50s))

    return RunPrediction(
        calibration_id=record.calibration_id,
        source=fit.basis.source,  # type: ignore[arg-type]
        device_type=record.device_type,
        ttft_ms_p50=figure("ttft_ms"),
        tpot_ms_p50=figure("tpot_ms"),
    )


__all__ = ["PREDICTION_REQUESTS", "predict_run"]
