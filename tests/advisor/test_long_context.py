"""Long-context prefill, request by request, from the shipped H100 sweep
(data/reference/h100_llama3.1-8b_long_context_prefill_runs.json and the records in its raw
campaign folder): llama-3.1-8b, one request at a time, prompts 8,000-112,000 tokens."""

from __future__ import annotations

import pytest

from advisor.sizing.long_context import NO_ATTENTION
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR, reference_tables


@pytest.fixture(scope="module")
def check():
    found = reference_tables().long_context_check(SHIPPED_REFERENCE_DIR)
    assert found is not None, "the shipped long-context sweep is not covered by the model"
    return found


def test_the_sweep_is_not_fitted_on_but_every_measured_request_is_predicted(check):
    from advisor.sizing.measured import measured_reference_runs
    from advisor.sizing.serving_model import run_shape

    (run,) = measured_reference_runs(SHIPPED_REFERENCE_DIR)[
        "h100_llama3.1-8b_long_context_prefill_runs.json"
    ]
    assert run.validity is not None and run.validity.status.value == "VALID"
    # prompts spread far around their mean: the mean-shape model leaves it out of every fit
    assert run_shape(run) is None
    assert len(check.rows) == run.summary.requests == 24
    lengths = [row.prompt_tokens for row in check.rows]
    assert lengths == sorted(lengths) and lengths[0] < 10_000 and lengths[-1] > 100_000
    assert check.gpu == "H100-SXM" and check.max_num_batched_tokens == 2048
    for row in check.rows:
        assert set(row.predicted_ttft_ms) == set(check.bases)


def test_ttft_grows_faster_than_the_prompt_and_attention_flops_explain_it(check):
    first, last = check.rows[0], check.rows[-1]
    per_token = [row.measured_ttft_ms / row.prompt_tokens for row in (first, last)]
    assert per_token[1] > 1.8 * per_token[0]  # quadratic attention, measured
    errors = {e.basis: e for e in check.errors}
    # the GEMM-only floor misses most of a long prefill; with attention the defaults are close
    assert errors[NO_ATTENTION].median_error < -0.4
    assert errors["uncalibrated"].median_abs_error < 0.15
    assert check.attention_share_longest > 0.5


def test_the_h100_record_predicts_long_prefill_once_its_gemms_are_held_to_the_gpus_ceiling(
    check, monkeypatch
):
    """The record's levels (prompts of at most 1,024 tokens) pin its compute factor loosely:
    fitted freely it makes GEMMs run at 95% of the datasheet peak and under-predicts these
    prefills by over a fifth; held to the fastest GEMM measured on the H100 (75%,
    data/reference/h100_kernel_peaks/gemm_attention_peak.json) it is within a tenth."""
    import advisor.sizing.serving_calibration as serving_calibration

    errors = {e.basis: e for e in check.errors}
    assert abs(errors["this GPU"].median_error) < 0.1
    table = reference_tables().long_context_table(check)
    assert f"{check.rows[-1].prompt_tokens:,}" in table and "median (worst) error" in table
    # every fit is held to the ceilings by one function there (within_ceilings)
    monkeypatch.setattr(serving_calibration, "MIN_COMPUTE_FACTOR", 0.0)
    monkeypatch.setattr(serving_calibration, "MIN_MEMORY_FACTOR", 0.0)
    free = reference_tables().long_context_check(SHIPPED_REFERENCE_DIR)
    assert {e.basis: e for e in free.errors}["this GPU"].median_error < -0.2


def test_a_prediction_for_prompts_far_past_the_calibrations_says_it_extrapolates(check):
    from advisor.sizing.calibration_fit import shipped_records, stage_calibration
    from advisor.sizing.configurations import Deployment
    from advisor.sizing.serving_model import predict_stage_capacity
    from advisor.workload.profile import StageProfile
    from bench.core.config import PrecisionConfig

    vllm = Deployment(framework="vllm", precision=PrecisionConfig(dtype="float16"))
    records = shipped_records(SHIPPED_REFERENCE_DIR)

    def predicted(prompt: int):
        stage = StageProfile(
            model="llama-2-7b",
            prompt_tokens={"mean": prompt},
            output_tokens={"mean": 128},
            peak_request_rate_rps=2,
            slo={"ttft_ms": 5000, "tpot_ms": 50},
            gpu={"type": "H100-SXM"},
        )
        fit = stage_calibration(stage, vllm, shipped=records)
        assert fit.basis.calibration_id == "cal-8bcea2af8fe9"  # mixes of at most 1,024 tokens
        return predict_stage_capacity(stage, vllm, [], calibration=fit.calibration, seeds=1)

    long = predicted(3900)
    assert long is not None and long.prompt_extrapolated is not None
    assert "1,024" in long.prompt_extrapolated and "Long context" in long.prompt_extrapolated
    # the figure it quotes is the shipped sweep's, recomputed
    short_by = -100 * {e.basis: e for e in check.errors}["this GPU"].median_error
    assert f"prefill {short_by:.0f}% short at the median" in long.prompt_extrapolated
    assert long.prompt_extrapolated in long.notes
    short = predicted(1024)
    assert short is not None and short.prompt_extrapolated is None


def test_the_compute_ceiling_is_the_fastest_gemm_measured_on_the_h100():
    """MIN_COMPUTE_FACTOR is the datasheet's dense bf16 peak over the fastest GEMM of the shipped
    kernel measurement (not a chosen number); attention there runs slower than that GEMM."""
    import json

    from advisor.sizing.serving_sim import MIN_COMPUTE_FACTOR
    from advisor.workload.gpus import find_gpu

    data = json.loads((SHIPPED_REFERENCE_DIR / "h100_kernel_peaks" / "gemm_attention_peak.json")
                      .read_text())  # fmt: skip
    assert "H100" in data["environment"]["gpu"] and data["command"].startswith("python ")
    bf16 = [row for row in data["rows"] if row["dtype"] == "bfloat16"]
    chunk_gemms = [
        row["tflops"] for row in bf16 if row["kind"] == "gemm" and "chunk" in row["shape"]
    ]
    peak = find_gpu("H100-SXM").peak_tflops("bfloat16")
    assert pytest.approx(peak / max(chunk_gemms), rel=0.001) == MIN_COMPUTE_FACTOR
    long_attention = [row["tflops"] for row in bf16
                      if row["kind"] == "attention" and row["context"] >= 16384]  # fmt: skip
    assert max(long_attention) < max(chunk_gemms)
