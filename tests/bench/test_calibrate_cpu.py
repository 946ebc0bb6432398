"""`bench calibrate` end to end on a real engine (vLLM's CPU build, tiny-llama): the ladder, the
settled search, the record in the store and in --out, within its budget; then the advisor fits
the record, and a run measured with a smaller `max_num_seqs` than the calibration, carrying the
advisor's prediction, is flagged as drift by `bench runs`. Slow: a real engine is loaded once
per mix, once for the settled levels and once for the drifted run."""

from __future__ import annotations

import contextlib
import io

import pytest

from advisor.sizing.calibration_fit import fit_record
from advisor.sizing.run_prediction import predict_run
from bench.cli import main
from bench.core.calibration import CalibrationRecord
from bench.core.config import ConcurrencyLoad, GenerateWorkload, LengthDistribution, RunConfig
from bench.run.api import launch
from bench.storage.calibrations import get_calibration
from bench.storage.store import ResultStore

pytestmark = pytest.mark.slow

BUDGET_S = 300


def _vllm_installed() -> bool:
    from bench.engines.backends.vllm import vllm_version

    return vllm_version() is not None


@pytest.mark.skipif(not _vllm_installed(), reason="vLLM is not installed")
def test_vllm_cpu_calibration_runs_within_budget_fits_and_flags_drift(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    store, out = tmp_path / "store.sqlite", tmp_path / "record.json"
    args = [
        "calibrate",
        "--backend",
        "vllm",
        "--model",
        "tiny-llama",
        "--device",
        "cpu",
        "--dtype",
        "bfloat16",
        "--engine-arg",
        "max_model_len=256",
        "--engine-arg",
        "enforce_eager=true",
        "--mix",
        "16x16",
        "--ladder",
        "1,2,4",
        "--stage-duration-s",
        "3",
        "--settled-probes",
        "3",
        "--level-duration-s",
        "3",
        "--budget-s",
        str(BUDGET_S),
        "--store",
        str(store),
        "--out",
        str(out),
    ]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(args)
    assert code == 0, err.getvalue()[-2000:]
    record = CalibrationRecord.model_validate_json(out.read_text())
    assert record.engine == "vllm" and record.device_type == "cpu"
    assert [level.level for level in record.levels if level.kind == "ladder"] == [1.0, 2.0, 4.0]
    # the settled search runs when the ladder left time for it; on a machine too slow for that
    # it is skipped and says so (the record stays usable: the ladder alone fits)
    if not record.settled_levels:
        assert any("skipped, it would overrun" in note for note in record.notes), record.notes
    # the budget bounds the runs it starts (a run in flight ends by its own time bound)
    assert record.elapsed_s <= BUDGET_S * 1.5, record.elapsed_s
    with ResultStore(store, create=False) as opened:
        assert get_calibration(opened, record.calibration_id) == record
    assert "[1/2] ladder 16/16: loading" in err.getvalue()
    fit = fit_record(record)
    assert fit is not None and fit.calibration.calibrated
    assert fit.calibration.factors.overhead_ms + fit.calibration.factors.memory > 0

    # Drift: the calibrated engine (max_num_seqs as the engine set it, 128 or more) predicted
    # at 8 in flight with 64-token outputs; the run schedules one sequence at a time, so 7 of 8
    # requests queue a whole generation or more for their first token: a TTFT many times the
    # prediction, beyond the interval even of a calibration measured on a busy machine (whose
    # leave-one-level-out errors, and so its interval, are wide: a flag must not be noise).
    drifted = RunConfig(
        backend="vllm",
        model="tiny-llama",
        device="cpu",
        precision={"dtype": "bfloat16"},
        engine_args={"max_model_len": 256, "enforce_eager": True, "max_num_seqs": 1},
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=64)
        ),
        load=ConcurrencyLoad(concurrency=8, duration_s=6),
        validity={"min_duration_s": 1, "min_requests": 5},
    )
    prediction = predict_run(drifted, fit, record)
    assert prediction is not None and prediction.calibration_id == record.calibration_id
    drifted = drifted.model_copy(update={"prediction": prediction})
    with ResultStore(store) as opened:
        result = launch(drifted, store=opened)
    ttft = next(check for check in result.drift() if check.metric == "ttft_ms_p50")
    assert ttft.outside and ttft.ratio > 1, ttft
    capsys.readouterr()
    assert main(["runs", "--store", str(store)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(result.run_id))
    assert "drift: TTFT p50 x" in line, line
