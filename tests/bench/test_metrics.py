"""Metric formulas against hand-computed cases, validity reasons and JSONL parsing errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.core.config import SLO, ValidityRules
from bench.core.engine_facts import PrometheusSample
from bench.core.errors import UserError
from bench.core.metrics import (
    MetricsAccumulator,
    judge_validity,
    read_records_jsonl,
    summarize,
)
from bench.core.schema import ValidityStatus
from tests.conftest import make_record


def test_hand_computed_summary(tiny_records):
    summary = summarize(tiny_records)
    # r1..r3 succeed, r4 fails, w1 is warm-up and not counted at all.
    assert (summary.requests, summary.successful, summary.failed) == (4, 3, 1)
    assert summary.error_rate == pytest.approx(0.25)
    # Window: first start 0 ms .. last end 500 ms (the failed r4 still spans the window).
    assert summary.duration_s == pytest.approx(0.5)
    assert summary.request_throughput_rps == pytest.approx(3 / 0.5)
    assert summary.output_tokens == 3 + 2 + 1
    assert summary.output_throughput_tok_s == pytest.approx(6 / 0.5)
    assert summary.goodput_rps is None
    ttft = np.array([100.0, 50.0, 200.0])
    assert summary.ttft_ms.mean == pytest.approx(ttft.mean())
    assert summary.ttft_ms.p50 == pytest.approx(100.0)
    assert summary.ttft_ms.p90 == pytest.approx(np.percentile(ttft, 90))  # 180
    assert summary.ttft_ms.p90 == pytest.approx(180.0)
    assert summary.ttft_ms.p99 == pytest.approx(198.0)
    # TPOT only for > 1 output token: r1 (130-100)/2 = 15, r2 (80-50)/1 = 30.
    assert summary.tpot_ms.mean == pytest.approx(22.5)
    assert summary.tpot_ms.p50 == pytest.approx(22.5)
    # ITL pooled: r1 gaps 10, 20; r2 gap 20.
    assert summary.itl_ms.mean == pytest.approx(50 / 3)
    assert summary.itl_ms.p50 == pytest.approx(20.0)
    assert summary.itl_ms.p99 == pytest.approx(20.0)
    # E2E 130, 80, 200 (r4's 470 ms is not a latency sample).
    assert summary.e2e_ms.mean == pytest.approx(410 / 3)
    assert summary.e2e_ms.p50 == pytest.approx(130.0)
    assert summary.e2e_ms.p99 == pytest.approx(np.percentile([130, 80, 200], 99))


def test_per_user_and_per_gpu_speed(tiny_records):
    """tok/s per user = 1000 / TPOT p50; its mean is over requests; per GPU = tok/s / GPUs."""
    summary = summarize(tiny_records, gpus=2)
    # TPOT 15 and 30 ms (see above): p50 22.5 ms -> 44.4 tok/s; mean of 66.7 and 33.3 = 50.
    assert summary.tok_s_per_user == pytest.approx(1000 / 22.5)
    assert summary.tok_s_per_user_mean == pytest.approx((1000 / 15 + 1000 / 30) / 2)
    assert summary.gpus == 2
    assert summary.output_throughput_tok_s_per_gpu == pytest.approx(6 / 0.5 / 2)
    on_cpu = summarize(tiny_records)
    assert on_cpu.gpus is None and on_cpu.output_throughput_tok_s_per_gpu is None
    assert summarize([]).tok_s_per_user is None


def test_goodput_counts_requests_meeting_every_slo(tiny_records):
    # TTFT <= 120 passes r1 (100) and r2 (50); E2E <= 100 passes only r2 (80) and r1 fails.
    assert summarize(tiny_records, SLO(ttft_ms=120)).goodput_rps == pytest.approx(2 / 0.5)
    assert summarize(tiny_records, SLO(ttft_ms=120, e2e_ms=100)).goodput_rps == pytest.approx(
        1 / 0.5
    )
    # TPOT <= 20: r1 (15) passes, r2 (30) fails, r3 has no TPOT and passes (vLLM's rule).
    assert summarize(tiny_records, SLO(tpot_ms=20)).goodput_rps == pytest.approx(2 / 0.5)
    assert summarize(tiny_records, SLO()).goodput_rps is None


def test_multi_token_chunks_follow_vllm():
    # Two chunks: 1 token at 40 ms, then 4 tokens at 100 ms. One ITL gap (60 ms), not four;
    # TPOT = (100 - 40) / (5 - 1) = 15 ms.
    record = make_record("m", 0, [40, 100], chunk_tokens=[1, 4])
    summary = summarize([record])
    assert summary.output_tokens == 5
    assert summary.itl_ms.mean == pytest.approx(60.0)
    assert summary.tpot_ms.mean == pytest.approx(15.0)
    assert summary.ttft_ms.mean == pytest.approx(40.0)


def test_long_outputs_use_the_same_itl_values():
    # > 48 chunks takes the numpy path: the pooled gaps must equal the plain-Python ones.
    chunks = [10.0 + 2.5 * i for i in range(100)]
    long_summary = summarize([make_record("a", 0, chunks)])
    short_summary = summarize([make_record(f"b{i}", 0, chunks[i : i + 2]) for i in range(99)])
    assert long_summary.itl_ms.mean == pytest.approx(2.5)
    assert long_summary.itl_ms == short_summary.itl_ms


def test_empty_and_all_failed():
    empty = summarize([])
    assert empty.requests == 0 and empty.duration_s == 0
    assert empty.ttft_ms is None and empty.e2e_ms is None and empty.itl_ms is None
    assert empty.request_throughput_rps == 0 and empty.error_rate == 0
    failed = summarize([make_record("x", 0, [], 10, error="boom")])
    assert failed.failed == 1 and failed.error_rate == 1.0 and failed.e2e_ms is None
    assert failed.request_throughput_rps == 0


def test_the_harness_cancellations_are_counted_apart_from_failures():
    """A stop, the run deadline and a phase ended early are the harness's doing: counted as
    cancelled, out of the failures and of the error rate's denominator; an engine error stays a
    failure. The counts survive a merge (a run-wide summary from its phases)."""
    from bench.core.metrics import DEADLINE_REACHED, ENDED_EARLY, STOPPED

    records = [
        make_record("ok1", 0, [5, 9], 9),
        make_record("ok2", 1, [6, 10], 10),
        make_record("ok3", 2, [7, 11], 11),
        make_record("boom", 3, [], 12, error="engine said no"),
        make_record("s", 4, [], 13, error=STOPPED),
        make_record("d", 5, [], 14, error=DEADLINE_REACHED),
        make_record("e", 6, [], 15, error=f"{ENDED_EARLY}: 3 of 20 planned requests missed"),
        make_record("not-ours", 7, [], 16, error="stopped by the server"),  # the engine's words
    ]
    summary = summarize(records)
    assert (summary.requests, summary.successful, summary.failed, summary.cancelled) == (8, 3, 2, 3)
    assert summary.error_rate == 2 / 5
    first, second = MetricsAccumulator(), MetricsAccumulator()
    first.add_many(records[:4])
    second.add_many(records[4:])
    first.merge(second)
    assert first.summary() == summary
    only_cancelled = summarize(records[4:7])
    assert only_cancelled.failed == 0 and only_cancelled.error_rate == 0.0


def test_accumulator_is_incremental_and_merges(tiny_records):
    whole = summarize(tiny_records)
    first, second = MetricsAccumulator(), MetricsAccumulator()
    first.add_many(tiny_records[:2])
    partial = first.summary()
    assert partial.requests == 2
    second.add_many(tiny_records[2:])
    first.merge(second)
    assert first.summary() == whole
    assert first.summary() == whole  # summary() twice gives the same answer
    assert first.warmup_skipped == 1
    assert first.errors == {"boom": 1}


def test_accumulator_memory_is_compact():
    accumulator = MetricsAccumulator()
    record = make_record("r", 0, [float(i) for i in range(1, 129)])
    for _ in range(2000):
        accumulator.add(record)
    gap_bytes = sum(block.buffer_info()[1] * block.itemsize for block in accumulator._itl_blocks)
    assert gap_bytes == 2000 * 127 * 4  # float32 per gap, nothing per record object
    assert accumulator.summary().itl_ms.p99 == pytest.approx(1.0)


# --------------------------------------------------------------------------- validity


def test_validity_reasons(tiny_records):
    rules = ValidityRules(min_duration_s=10, min_requests=20, max_error_rate=0.01)
    validity = judge_validity(summarize(tiny_records), rules)
    assert validity.status == ValidityStatus.INVALID
    text = " | ".join(validity.reasons)
    assert "below the minimum 10 s" in text
    assert "3 successful requests is below the minimum 20" in text
    assert "error rate 25.00% (1/4) is over the budget 1.00%" in text
    assert len(validity.reasons) == 3


def test_validity_all_failed_and_none():
    rules = ValidityRules(min_duration_s=0, min_requests=0, max_error_rate=1)
    assert judge_validity(None, rules).reasons == ["no measured requests"]
    assert judge_validity(summarize([]), rules).reasons == ["no measured requests"]
    failed = summarize([make_record("x", 0, [], 10, error="e")])
    assert judge_validity(failed, rules).reasons == ["all 1 measured requests failed"]


def test_valid_run():
    records = [make_record(f"r{i}", i * 1000, [i * 1000 + 5, i * 1000 + 9]) for i in range(30)]
    validity = judge_validity(summarize(records), ValidityRules(min_duration_s=20))
    assert validity.status == ValidityStatus.VALID and validity.reasons == []


# --------------------------------------------------------------------------- JSONL


def write_lines(tmp_path, lines):
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD = {
    "id": "a",
    "start_ns": 0,
    "chunk_ns": [5, 9],
    "end_ns": 10,
    "input_tokens": 3,
    "output_tokens": 2,
    "error": None,
}


def test_read_records_round_trip(tmp_path, tiny_records):
    path = tmp_path / "r.jsonl"
    path.write_text("".join(r.model_dump_json() + "\n" for r in tiny_records))
    assert read_records_jsonl(path) == tiny_records
    path = write_lines(
        tmp_path, [json.dumps(GOOD), "", json.dumps({**GOOD, "chunk_tokens": [1, 3]})]
    )
    records = read_records_jsonl(path)
    assert [r.chunk_tokens for r in records] == [[], [1, 3]]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "bad JSON"),
        ("[1, 2]", "expected a JSON object"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "end_ns"}), "missing field(s): end_ns"),
        (json.dumps({**GOOD, "colour": 1}), "unknown field(s): colour"),
        (json.dumps({**GOOD, "start_ns": "0"}), "start_ns must be"),
        (json.dumps({**GOOD, "start_ns": 20, "chunk_ns": []}), "end_ns (10) is before start_ns"),
        (json.dumps({**GOOD, "chunk_ns": [9, 5]}), "chunks out of order"),
        (json.dumps({**GOOD, "chunk_ns": [5, 11]}), "after end_ns"),
        (json.dumps({**GOOD, "chunk_tokens": [1]}), "chunk_tokens has 1 entries"),
        (json.dumps({**GOOD, "output_tokens": -1}), "output_tokens must be"),
        (json.dumps({**GOOD, "error": 3}), "error must be null or a string"),
    ],
)
def test_read_records_errors_name_the_line(tmp_path, line, message):
    path = write_lines(tmp_path, [json.dumps(GOOD), line])
    with pytest.raises(UserError) as caught:
        read_records_jsonl(path)
    assert f"{path}:2:" in str(caught.value)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_read_records_unreadable_file(tmp_path):
    with pytest.raises(UserError, match=r"records file .*missing\.jsonl does not exist"):
        read_records_jsonl(tmp_path / "missing.jsonl")
    binary = tmp_path / "b.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UserError, match=r"b\.jsonl:1: not UTF-8"):
        read_records_jsonl(binary)


def test_itl_percentiles_match_numpy_across_blocks(monkeypatch):
    # Small blocks force many of them; the radix selection must equal np.percentile exactly
    # (up to float32 storage), ties and a negative gap (an out-of-order input) included.
    monkeypatch.setattr("bench.core.metrics.ITL_BLOCK_VALUES", 1000)
    rng = np.random.default_rng(0)
    accumulator = MetricsAccumulator()
    gaps_ms = []
    for index in range(300):
        gaps = rng.lognormal(2, 1, size=rng.integers(1, 60)).round(3)
        if index == 7:
            gaps[0] = -0.5
        chunk_ms = np.concatenate([[5.0], 5.0 + np.cumsum(gaps)])
        chunk_ns = np.round(chunk_ms * 1_000_000).astype(np.int64)
        record = make_record(f"r{index}", 0, [0.0] * len(chunk_ns))
        record = record.model_copy(
            update={"chunk_ns": chunk_ns.tolist(), "end_ns": int(chunk_ns[-1])}
        )
        accumulator.add(record)
        gaps_ms.extend((np.diff(chunk_ns) / 1_000_000).astype(np.float32).tolist())
    assert len(accumulator._itl_blocks) > 5
    expected = np.percentile(np.asarray(gaps_ms, dtype=np.float64), [50, 90, 99])
    itl = accumulator.summary().itl_ms
    assert [itl.p50, itl.p90, itl.p99] == pytest.approx(expected.tolist(), rel=1e-6)
    assert itl.mean == pytest.approx(np.mean(gaps_ms), rel=1e-9)


def test_request_latencies_ms_hand_computed():
    """One request: start 0, chunks at 10/20/40 ms, end 40 ms, 3 tokens -> TTFT 10, TPOT 15."""
    import math

    from bench.core.metrics import request_latencies_ms
    from bench.core.schema import RequestRecord

    ms = 1_000_000
    record = RequestRecord(
        id="a", start_ns=0, chunk_ns=[10 * ms, 20 * ms, 40 * ms], end_ns=40 * ms, output_tokens=3
    )
    assert request_latencies_ms(record) == (10.0, 15.0, 40.0)
    one_token = record.model_copy(update={"chunk_ns": [10 * ms], "output_tokens": 1})
    ttft, tpot, e2e = request_latencies_ms(one_token)
    assert (ttft, e2e) == (10.0, 40.0) and math.isnan(tpot)
    ttft, tpot, e2e = request_latencies_ms(record.model_copy(update={"chunk_ns": []}))
    assert math.isnan(ttft) and math.isnan(tpot) and e2e == 40.0


def test_prefix_cache_window_takes_reads_answered_before_it_and_asked_after_it():
    """A /metrics read holds the counters of some moment between its request (t_ns) and its
    answer (t_received_ns): one asked before the window but answered inside it may already hold
    the window's first hits, so it cannot be the window's start; the in-process engine's samples
    (t_ns only, read instantly) are taken by t_ns."""
    from bench.core.metrics import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES, prefix_cache_hit_rate

    def read(t_ns, t_received_ns, queries, hits):
        values = {PREFIX_CACHE_QUERIES: queries, PREFIX_CACHE_HITS: hits}
        return PrometheusSample(t_ns=t_ns, t_received_ns=t_received_ns, values=values)

    window = (100, 200)
    samples = [
        read(230, 240, 1000.0, 700.0),  # asked after the window: its end (listed first: sorted)
        read(10, 20, 100.0, 0.0),  # answered before the window: its start
        read(90, 130, 300.0, 100.0),  # asked before, answered inside: not the start
        read(150, 160, 600.0, 400.0),
    ]
    assert prefix_cache_hit_rate(samples, window) == (700 / 900, 900.0)
    instant = [read(10, None, 100.0, 0.0), read(95, None, 200.0, 0.0)]
    instant.append(read(205, None, 600.0, 300.0))
    assert prefix_cache_hit_rate(instant, window) == (300 / 400, 400.0)
    assert prefix_cache_hit_rate(samples[:1], window) == (None, None)
