"""The prediction the advisor attaches to a run it plans (`RunConfig.prediction`): median TTFT
and TPOT at the run's fixed level, from a calibration record's fit, with the interval of its
leave-one-level-out step errors. Bench stores it with the run and flags drift.

The prediction is of the engine as calibrated: the record's engine limits (`max_num_seqs`, the
token budget), not the run's. A run whose engine behaves otherwise than the calibrated one (a
smaller `max_num_seqs`, another release, a throttled GPU) measures outside the interval: drift.
"""

from __future__ import annotations

from collections.abc import Sequence

from advisor.sizing.calibration_fit import (
    RecordFit,
    RecordSet,
    calibration_for,
    device_spec,
    level_shape,
)
from advisor.sizing.configurations import Deployment
from advisor.sizing.serving_model import (
    EngineShape,
    Workload,
    engine_shape,
    error_scales,
    scaled,
    simulate,
)
from advisor.workload.architectures import architecture_for
from bench.core.calibration import CalibrationRecord
from bench.core.config import GenerateWorkload, RunConfig
from bench.core.prediction import PredictedFigure, RunPrediction

PREDICTION_REQUESTS = 200
"""Simulated requests per prediction (after as many warm-up requests at the same load)."""


def predict_run(
    config: RunConfig,
    fit: RecordFit,
    record: CalibrationRecord,
    shape: EngineShape | None = None,
) -> RunPrediction | None:
    """The run's predicted medians; None for a run without one fixed level or of another kind.
    `shape`: the replica the run deploys (default: the record's own model and engine)."""
    fixed = config.load.fixed_level()
    if fixed is None or not isinstance(config.workload, GenerateWorkload):
        return None
    if shape is None:
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


def planned_prediction(
    config: RunConfig, device_type: str, records: RecordSet
) -> RunPrediction | None:
    """The prediction a planned run carries: one replica of a generate workload at one fixed
    level, on a device and engine a `bench calibrate` record calibrated (yours before
    shipped); the run's own model and layout, the record's factors and engine limits. None
    where the model cannot predict it (no record, several replicas, no fixed level)."""
    if not isinstance(config.workload, GenerateWorkload) or config.load.fixed_level() is None:
        return None
    if config.parallelism.replicas != 1:
        return None  # predict_run simulates one replica at the run's whole load
    deployment = Deployment(
        framework=config.backend, parallelism=config.parallelism, precision=config.precision
    )
    found = calibration_for(
        config.backend,
        device_type,
        deployment.precision_key,
        config.model,
        records.yours,
        records.shipped,
    )
    if not isinstance(found, RecordFit):
        return None
    record = next(
        r
        for r in (*records.yours, *records.shipped)
        if r.calibration_id == found.basis.calibration_id
    )
    gpu = device_spec(device_type)
    architecture, _ = architecture_for(config.model)
    if gpu is None or architecture is None or not architecture.parameters:
        return None
    limits = record.levels[0].engine_limits if record.levels else {}
    shape = engine_shape(architecture.parameters, architecture, gpu, deployment, dict(limits))
    if shape is None:
        return None
    return predict_run(config, found, record, shape)


def with_predictions(
    configs: Sequence[RunConfig], device_type: str | None, records: RecordSet
) -> list[RunConfig]:
    """The planned runs, each the model can predict carrying its prediction (so a run measured
    later is checked for drift: `RunResult.drift()`)."""
    if device_type is None or not (records.yours or records.shipped):
        return list(configs)
    out = []
    for config in configs:
        prediction = planned_prediction(config, device_type, records)
        out.append(
            config if prediction is None else config.model_copy(update={"prediction": prediction})
        )
    return out


__all__ = ["PREDICTION_REQUESTS", "planned_prediction", "predict_run", "with_predictions"]
