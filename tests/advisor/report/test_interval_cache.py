"""The app's interval cache: a report built with it equals one built without, a second report
over the same finished runs computes no interval again, and a run stored again with other
figures (same id) is computed afresh."""

from __future__ import annotations

from pathlib import Path

import pytest

import advisor.report.intervals as intervals_module
from advisor.report.build import build_report, report_for
from advisor.report.intervals import IntervalCache
from advisor.sizing.measured import read_reference_folder
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR
from tests.advisor.report.conftest import real_answer, store_with, synthetic_run, workload_profile


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The run ids whose intervals the cache computed (the real bootstrap, counted)."""
    calls: list[str] = []
    real = intervals_module.run_intervals

    def counting(run, kept):
        calls.append(run.run_id)
        return real(run, kept)

    monkeypatch.setattr(intervals_module, "run_intervals", counting)
    return calls


def test_a_cached_report_equals_the_computed_one_and_computes_nothing_twice(
    tmp_path: Path, counted: list[str]
) -> None:
    gpu = synthetic_run("vllm", "concurrency", gpu=True, seed=3, engine_args={"enforce_eager": 1})
    step = synthetic_run("pytorch", "step", seed=1)
    store = store_with(tmp_path / "s.sqlite", [gpu, step])
    profile = workload_profile("t")
    answer = real_answer(profile, store, SHIPPED_REFERENCE_DIR)
    reference = read_reference_folder(SHIPPED_REFERENCE_DIR)
    ids = [gpu[0].run_id, step[0].run_id]

    def build(cache: IntervalCache | None):
        return report_for(profile, answer, store, reference, ids, interval_cache=cache)

    plain = build(None)
    cache = IntervalCache()
    first = build(cache)
    assert sorted(counted) == sorted(ids)  # the empty cache computed both runs' intervals
    second = build(cache)
    assert sorted(counted) == sorted(ids)  # and the second report took them from it
    assert any(row.output_throughput_low is not None for row in plain.evidence)
    for report in (first, second):
        assert report.evidence == plain.evidence
        assert report.charts == plain.charts


def test_a_run_stored_again_with_other_figures_is_computed_afresh(
    tmp_path: Path, counted: list[str]
) -> None:
    run, records = synthetic_run("pytorch", "concurrency", seed=5)
    other, other_records = synthetic_run("pytorch", "concurrency", tpot_ms=9.0, seed=6)
    other = other.model_copy(update={"run_id": run.run_id})  # same id, other measurements
    profile = workload_profile("t")
    store = store_with(tmp_path / "s.sqlite", [(run, records)])
    answer = real_answer(profile, store, SHIPPED_REFERENCE_DIR)
    cache = IntervalCache()

    def evidence(result, items):
        report = build_report(
            profile, answer, [result], {result.run_id: items}, interval_cache=cache
        )
        return next(row for row in report.evidence if row.run_id == result.run_id)

    first = evidence(run, records)
    again = evidence(other, other_records)
    assert len(counted) == 2
    assert (first.output_throughput_low, first.output_throughput_high) != (
        again.output_throughput_low,
        again.output_throughput_high,
    )


def test_sessions_asking_for_one_run_at_once_compute_it_once(monkeypatch: pytest.MonkeyPatch):
    """Four threads (the app's sessions) ask for the same run's intervals together; the
    computation is slowed so that, without the cache's per-run lock, each would make its own."""
    import threading
    import time

    from advisor.report.intervals import KeptRecords

    run, records = synthetic_run("pytorch", "concurrency", seed=7)
    calls: list[str] = []
    real = intervals_module.run_intervals

    def slow(result, kept):
        calls.append(result.run_id)
        time.sleep(0.3)
        return real(result, kept)

    monkeypatch.setattr(intervals_module, "run_intervals", slow)
    cache = IntervalCache()
    start = threading.Barrier(4)
    found: list[dict] = []

    def ask() -> None:
        kept = KeptRecords(records)
        list(kept)  # read as build_report reads them (into columns) before the intervals
        start.wait()
        found.append(cache.intervals(run, kept))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert calls == [run.run_id]
    assert len(found) == 4 and all(value == found[0] for value in found) and found[0]


def test_warming_computes_what_the_report_then_reads_from_the_cache(
    tmp_path: Path, counted: list[str]
) -> None:
    """`warm_intervals` (the app starts it when the Advisor page shows an answer) computes the
    intervals of the runs the report cites, from the same records: the report built after it
    computes none, and equals one built without the cache. Stored and shipped runs both."""
    from advisor.report.build import relevant_run_ids, warm_intervals

    gpu = synthetic_run("vllm", "concurrency", gpu=True, seed=3, engine_args={"enforce_eager": 1})
    step = synthetic_run("pytorch", "step", seed=1)
    store = store_with(tmp_path / "s.sqlite", [gpu, step])
    profile = workload_profile("t")
    reference = read_reference_folder(SHIPPED_REFERENCE_DIR)
    answer = real_answer(profile, store, SHIPPED_REFERENCE_DIR)
    cited = relevant_run_ids(answer)
    assert cited
    cache = IntervalCache()
    warmed = warm_intervals(answer, store, reference, cache)
    assert warmed >= 1 and set(counted) <= set(cited) and len(counted) == warmed
    counted.clear()
    cached = report_for(profile, answer, store, reference, interval_cache=cache)
    assert counted == []  # every interval was there already
    plain = report_for(profile, answer, store, reference)  # every interval computed anew
    assert any(row.output_throughput_low is not None for row in plain.evidence)
    # The build time sits in meta: two builds a second apart differ there and nowhere else.
    dump = {"meta": {"generated_at"}, "environment": True}
    assert cached.model_dump(exclude=dump) == plain.model_dump(exclude=dump)
