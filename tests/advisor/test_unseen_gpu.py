"""The serving model on a GPU it was never fitted on, from the shipped H100 measurements: the
`bench calibrate` record (data/reference/h100_llama2-7b_openai_calibration.json), the held-out
512/256 and 2,048/128 capacity searches (h100_llama2-7b_capacity_heldout_runs.json,
h100_llama2-7b_capacity_heldout_long_runs.json) and `vllm bench serve` at 1, 1.1 and 1.25 times
each found rate (h100_llama2-7b_calibration/vllm-bench-serve.tar.xz)."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.sizing.calibration_fit import shipped_records, stage_calibration
from advisor.sizing.configurations import Deployment
from advisor.workload.profile import StageProfile
from bench.core.config import PrecisionConfig
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR, reference_tables

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checks():
    found = reference_tables().unseen_gpu_checks(SHIPPED_REFERENCE_DIR)
    assert [c.shape for c in found] == ["512/256", "2048/128"], (
        "both shipped H100 held-out searches must be covered by the model"
    )
    return found


@pytest.fixture(scope="module")
def check(checks):
    return checks[0]


@pytest.fixture(scope="module")
def long_check(checks):
    return checks[1]


def test_no_basis_has_seen_the_held_out_searches(checks):
    (record,) = [r for r in shipped_records(SHIPPED_REFERENCE_DIR) if "H100" in r.device_type]
    mixes = {f"{m.prompt_tokens}/{m.output_tokens}" for m in record.plan.mixes}
    for check in checks:
        assert check.calibration_id == record.calibration_id
        # the record's mixes leave the held-out shape out, and the search is not among its runs
        assert check.shape not in mixes
        assert check.run_id not in record.run_ids
        # the other GPU's basis is fitted on H200 runs only (no run of the held-out GPU)
        (other,) = [b for b in check.bases if b.kind == "other GPU only"]
        assert check.other_gpu == "H200" and "on H200" in other.words
        assert "H100" not in other.words
        assert [b.kind for b in check.bases] == ["uncalibrated", "other GPU only", "this GPU"]


def test_over_both_held_out_searches_the_gpus_own_record_meets_the_goal(checks):
    """The issue's bar on held-out rows, calibrated: median |error| <= 10%, intervals that
    hold >= 80%; and the uncalibrated error on the unseen GPU is stated (larger)."""
    from advisor.sizing.unseen_gpu import summarize_unseen

    rows = {row.kind: row for row in summarize_unseen(checks)}
    this, plain = rows["this GPU"], rows["uncalibrated"]
    assert this.searches == plain.searches == 2
    assert this.median_abs_error <= 0.10 and this.covered / this.searches >= 0.8
    assert plain.median_abs_error > this.median_abs_error
    table = reference_tables().unseen_summary_table(checks)
    assert f"{100 * this.median_abs_error:.1f}%" in table and "2 of 2" in table


def test_each_interval_holds_the_capacity_errors_of_the_other_gpus_searches(checks):
    from advisor.sizing.serving_calibration import widen_to_residuals

    for check in checks:
        for basis, row in zip(check.bases, check.capacities, strict=True):
            assert basis.residuals, basis.kind  # the H200 searches, each without itself
            worst = max(basis.residuals)
            assert row.low_rps <= row.predicted_rps / (1 + max(worst, 0)) + 1e-9
    # the rule itself: a model that over-predicted others by up to 25% widens the low end
    assert widen_to_residuals(20.0, 19.0, 21.0, [0.25, -0.05]) == pytest.approx((16.0, 21.05), 1e-3)
    assert widen_to_residuals(20.0, 19.0, 21.0, []) == (19.0, 21.0)


def test_the_long_prompt_search_is_invalid_and_says_so_but_never_sizes_a_fleet(long_check):
    """It stopped at its time budget (9 passed once, failed its confirmation; 10 and 12 failed):
    kept as a held-out check with its reasons, left out of every fit and every fleet."""
    from advisor.evidence.rows import capacity_runs_for
    from advisor.sizing.measured import measured_reference_runs
    from advisor.sizing.serving_model import run_shape

    assert long_check.search_invalid and any("converge" in r for r in long_check.search_invalid)
    (run,) = measured_reference_runs(SHIPPED_REFERENCE_DIR)[
        "h100_llama2-7b_capacity_heldout_long_runs.json"
    ]
    assert run_shape(run) is None  # never fitted on
    stage = StageProfile(
        model="llama-2-7b",
        prompt_tokens={"mean": 2048},
        output_tokens={"mean": 128},
        peak_request_rate_rps=30,
        slo={"ttft_ms": 1000, "tpot_ms": 50},
        gpu={"type": "H100-SXM"},
        precision={"dtype": "bfloat16"},
    )
    kept, notes = capacity_runs_for(stage, [run])
    assert kept == [] and any(run.run_id in note for note in notes)


def test_serve_levels_go_to_the_search_of_their_prompt_length(checks):
    for check in checks:
        prompt = float(check.shape.split("/")[0])
        rates = [item.level.rate_rps for item in check.serve_levels]
        assert len(rates) == 3 and rates == sorted(rates)
        assert rates[0] == pytest.approx(check.measured_rps, rel=0.01)
        assert rates[1] == pytest.approx(1.1 * check.measured_rps, rel=0.01)
        assert rates[2] == pytest.approx(1.25 * check.measured_rps, rel=0.01)
        for item in check.serve_levels:
            assert item.level.prompt_tokens == pytest.approx(prompt, rel=0.02)
            # past the found rate the engine's throughput stops growing: goodput falls
            assert item.level.goodput_rps < item.level.rate_rps


def test_calibrating_on_the_gpu_itself_gives_the_closest_capacity_and_an_interval_that_holds(
    check,
):
    by_kind = {row.kind: row for row in check.capacities}
    this, other, plain = by_kind["this GPU"], by_kind["other GPU only"], by_kind["uncalibrated"]
    assert abs(this.error) < abs(other.error) < abs(plain.error)
    assert this.covered and this.low_rps <= check.measured_rps <= this.high_rps
    assert abs(this.error) <= 0.10


def test_latency_errors_are_over_the_feasible_probes_and_shrink_with_calibration(check):
    # the search's feasible probes only: 12, 18 and the two passes at the found rate
    assert sorted(level.rate_rps for level in check.levels) == [12.0, 18.0, 20.25, 20.25]
    errors = {(e.kind, e.figure): e for e in check.errors}
    for figure in ("tpot_p50", "e2e_p50"):
        assert (
            errors[("this GPU", figure)].median_abs_error
            < errors[("uncalibrated", figure)].median_abs_error
        )
        assert errors[("this GPU", figure)].worst_abs_error >= (
            errors[("this GPU", figure)].median_abs_error
        )


def test_vllm_bench_serve_at_the_found_rate_is_read_from_the_shipped_archive(check):
    serve = check.serve_levels[0]
    level = serve.level
    assert level.source.endswith("vllm-bench-serve.tar.xz:vbs/vbs-chat-r20.25-n1500.json")
    assert level.rate_rps == pytest.approx(check.measured_rps)
    assert level.requests == 1500
    # the 1,500-request run missed the TTFT limit at the rate the 500-request probes passed
    assert level.goodput_rps < 0.9 * level.throughput_rps
    assert level.measured["ttft_p99"] > 300
    # the record's simulation of it is overloaded too (over the 300 ms limit), but queues less
    # than vLLM did: -42% of the measured p99 TTFT since the KV pool is vLLM's own size
    # (memory_validation.py; with a pool 10% too small it was within a third, by queueing more)
    predicted = serve.predicted["this GPU"]["ttft_p99"]
    assert predicted > 300
    assert abs(predicted - level.measured["ttft_p99"]) / level.measured["ttft_p99"] < 0.45


def test_a_16_bit_vllm_stage_on_an_h100_is_calibrated_by_the_shipped_record():
    stage = StageProfile(
        model="llama-2-7b",
        prompt_tokens={"mean": 512},
        output_tokens={"mean": 256},
        peak_request_rate_rps=20,
        slo={"ttft_ms": 300, "tpot_ms": 50},
        gpu={"type": "H100-SXM"},
    )
    vllm = Deployment(framework="vllm", precision=PrecisionConfig(dtype="float16"))
    fit = stage_calibration(stage, vllm, shipped=shipped_records(SHIPPED_REFERENCE_DIR))
    assert fit.__class__.__name__ == "RecordFit"
    assert fit.basis.source == "shipped" and fit.basis.calibration_id == "cal-8bcea2af8fe9"
    assert "data/reference" in fit.basis.words and "H100" in fit.basis.words


def test_the_calibrations_settled_levels_never_size_a_fleet():
    """The record's settled run is a capacity pattern with a max_rate_rps (16.4 req/s of
    1,024/128) but INVALID (three probes, not converged): for a stage it would match, it is
    left out with a note, not read as the H100's capacity."""
    from advisor.evidence.rows import capacity_runs_for
    from advisor.sizing.measured import measured_reference_runs

    runs = measured_reference_runs(SHIPPED_REFERENCE_DIR)["h100_llama2-7b_calibrate_runs.json"]
    (settled,) = [r for r in runs if r.config.load.capacity_search]
    assert settled.validity.status.value == "INVALID"
    assert settled.pattern_report.max_rate_rps is not None
    stage = StageProfile(
        model="llama-2-7b",
        prompt_tokens={"mean": 1024},
        output_tokens={"mean": 128},
        peak_request_rate_rps=40,
        slo={"ttft_ms": 300, "tpot_ms": 50},
        gpu={"type": "H100-SXM"},
        precision={"dtype": "bfloat16"},
    )
    kept, notes = capacity_runs_for(stage, [settled])
    assert kept == []
    assert any(settled.run_id in note and "INVALID, left out" in note for note in notes)


def test_every_shipped_record_has_its_held_out_check_in_the_docs_page_1_points_to():
    """Page 1 sends a prediction from a shipped record to docs/capacity-model.md for its
    capacity error on a search it did not contain: that check must exist for each record."""
    docs = (ROOT / "docs" / "capacity-model.md").read_text()
    section = docs.split("## On a GPU the model was never fitted on", 1)
    assert len(section) == 2
    for record in shipped_records(SHIPPED_REFERENCE_DIR):
        assert f"record `{record.calibration_id}`" in section[1].split("\n## ", 1)[0]
