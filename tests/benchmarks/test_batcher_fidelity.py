"""benchmarks/batcher_fidelity.py's paired mode: plain generate and the harness, one model."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from bench.models import resolve_model
from bench.schema import RequestRecord

ROOT = Path(__file__).resolve().parents[2]


def load_fidelity_module():
    spec = importlib.util.spec_from_file_location(
        "batcher_fidelity", ROOT / "benchmarks" / "batcher_fidelity.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("batcher_fidelity", module)
    spec.loader.exec_module(module)
    return module


def record(chunks_ms: list[float], warmup: bool = False, error: str | None = None):
    chunk_ns = [int(ms * 1e6) for ms in chunks_ms]
    return RequestRecord(
        id="r",
        start_ns=0,
        chunk_ns=chunk_ns,
        end_ns=chunk_ns[-1] if chunk_ns else 1,
        input_tokens=8,
        output_tokens=len(chunk_ns),
        error=error,
        warmup=warmup,
    )


def test_step_gaps_come_from_a_measured_successful_record() -> None:
    fidelity = load_fidelity_module()
    records = [
        record([0, 100, 300], warmup=True),  # warm-up: not this batch's steps
        record([0, 5], error="boom"),
        record([10, 30, 70, 80]),
    ]
    assert fidelity.step_gaps_ms(records) == [20.0, 40.0, 10.0]
    assert fidelity.step_gaps_ms([record([0, 5], warmup=True)]) == []
    assert fidelity.percentile([20.0, 40.0, 10.0], 0.10) == 10.0
    assert fidelity.percentile([20.0, 40.0, 10.0], 0.50) == 20.0
    assert fidelity.percentile([], 0.5) is None


@pytest.mark.slow
async def test_paired_mode_alternates_plain_and_harness_on_one_model() -> None:
    """Real tiny-llama on CPU: every pair ran both sides in ABBA order, on full batches."""
    fidelity = load_fidelity_module()
    model = resolve_model("tiny-llama", dtype="float32")
    result = await fidelity.paired_fidelity(
        model, batch=4, prompt_len=16, output_len=8, pairs=4, dtype="float32", device="cpu"
    )
    pairs = result["pairs"]
    assert [pair["plain_first"] for pair in pairs] == [True, False, False, True]
    for pair in pairs:
        plain, ours = pair["plain"], pair["backend"]
        # Plain: 4 rows x 8 tokens in elapsed_s; ours: the harness's measured phase.
        assert plain["output_throughput_tok_s"] == pytest.approx(4 * 8 / plain["elapsed_s"])
        assert ours["output_throughput_tok_s"] == pytest.approx(4 * 8 / ours["duration_s"])
        assert pair["ratio"] == pytest.approx(
            ours["output_throughput_tok_s"] / plain["output_throughput_tok_s"]
        )
        assert 0 < ours["step_ms_p10"] <= ours["step_ms_p50"]
    ratios = sorted(pair["ratio"] for pair in pairs)
    assert result["ratio_median"] == pytest.approx((ratios[1] + ratios[2]) / 2)
    assert result["ratio_best_of_each"] == pytest.approx(
        result["backend_best_tok_s"] / result["plain_best_tok_s"]
    )
    assert result["passed"] == (result["ratio_median"] >= 0.90)
    assert result["engine"]["max_batch_size"] == 4
    assert result["engine"]["compiled"] is False
