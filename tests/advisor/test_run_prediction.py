"""The prediction attached to a planned run, from a record derived from the shipped H200 runs:
a shipped ladder level predicted from the other runs' record, and a run without a fixed level
left without one."""

from __future__ import annotations

from advisor.sizing.calibration_fit import fit_record
from advisor.sizing.measured import measured_reference_runs
from advisor.sizing.mechanics import mechanisms_of
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
        and not mechanisms_of(run)  # the H100 prefix-caching runs check that mechanic
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


def test_planned_runs_carry_the_records_prediction_and_a_smaller_engine_drifts():
    """A plan made with a record of its engine on its GPU attaches the prediction to each run
    the model can predict; the same run measured with a smaller `max_num_seqs` than the
    calibration (read as the shipped ladder's smallest level: an engine capped below 64 sequences
    steps faster than the calibrated one at 64) is flagged as drift with its ratio."""
    from advisor.plan.stage_plan import plan_for_stage
    from advisor.sizing.calibration_fit import RecordSet
    from advisor.workload.profile_input import profile_from_flags
    from bench.core.prediction import drift_words

    runs = _vllm_16_bit_runs()
    record = record_from_runs(runs)
    stage = profile_from_flags(
        model="llama-2-7b", gpu="H200", prompt_tokens=512, output_tokens=256, concurrency=64
    ).primary
    with_record = plan_for_stage(stage, records=RecordSet(yours=(record,)))
    without = plan_for_stage(stage, records=RecordSet())
    vllm = [c for c in with_record.configs if c.backend == "vllm"]
    assert vllm and all(c.prediction is not None for c in vllm)
    assert all(c.prediction.calibration_id == record.calibration_id for c in vllm)
    assert all(c.prediction.source == "yours" for c in vllm)
    assert all(c.prediction is None for c in without.configs)
    # Drift: a run at concurrency 64 whose TPOT is what the engine measured at its smallest level.
    ladder = next(r for r in runs if r.config.load.pattern == "step")
    config = ladder.config.model_copy(update={"load": ConcurrencyLoad(concurrency=64)})
    fit = fit_record(record)
    prediction = predict_run(config, fit, record)
    small = min((p for p in ladder.phases if p.summary is not None), key=lambda p: p.target)
    assert small.target < 64
    measured = ladder.model_copy(
        update={
            "config": config.model_copy(update={"prediction": prediction}),
            "summary": small.summary,
        }
    )
    checks = measured.drift()
    tpot = next(c for c in checks if c.metric == "tpot_ms_p50")
    assert tpot.outside and tpot.ratio < 1
    words = drift_words(checks)
    assert words is not None and f"x{tpot.ratio:.2f}" in words


def test_the_report_flags_a_drifted_run_with_its_ratio():
    """The report's data caveats name a run measured outside its prediction, with the ratio and
    the calibration record; a run within its interval is not named."""
    from advisor.report.caveats import data_caveats as _data_caveats

    runs = _vllm_16_bit_runs()
    record = record_from_runs(runs)
    fit = fit_record(record)
    ladder = next(r for r in runs if r.config.load.pattern == "step")
    config = ladder.config.model_copy(update={"load": ConcurrencyLoad(concurrency=64)})
    prediction = predict_run(config, fit, record)
    level = {p.target: p for p in ladder.phases if p.summary is not None}
    smallest = level[min(level)]

    def measured_as(summary):
        return ladder.model_copy(
            update={
                "config": config.model_copy(update={"prediction": prediction}),
                "summary": summary,
            }
        )

    drifted = measured_as(smallest.summary)
    ratio = next(c.ratio for c in drifted.drift() if c.metric == "tpot_ms_p50")
    caveats = _data_caveats([drifted], None)
    text = " ".join(c.text for c in caveats)
    assert f"run {ladder.run_id} measured outside" in text
    assert f"TPOT p50 x{ratio:.2f}" in text and record.calibration_id in text
    held = measured_as(level[64].summary)  # the level itself, which the record contains
    assert held.drift() and not any(c.outside for c in held.drift())
    assert not any("measured outside" in c.text for c in _data_caveats([held], None))
