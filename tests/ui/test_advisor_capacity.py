"""AppTest of the Advisor page's "Capacity and cost" panel on real capacity searches.

The runs are real capacity searches of the `fake` backend (a labelled TEST DOUBLE with a known
service time: 4 slots ~ 20 req/s, 2 slots ~ 10 req/s), made by the real load driver in virtual
time (tests/bench/test_load_capacity.py's `run_search`) and filed under candidate names by
tests/advisor/test_recommend_capacity.py's `as_candidate` (labelled: not measurements of them).
They are stored in the test's scratch store; the page reads them from there.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from bench.core.config import SLO, CapacityLoad
from bench.core.schema import RunResult, RunStatus
from tests.advisor.test_recommend_capacity import as_candidate, capacity_profile
from tests.bench.test_load_capacity import ITL_S, SLO_TTFT_MS, TTFT_S, run_search
from tests.conftest import virtual_time


def capacity_runs() -> list[RunResult]:
    async def search() -> list[RunResult]:
        found = []
        with virtual_time(asyncio.get_running_loop()):
            for backend, slots in (("vllm", 4), ("torch_compile", 2)):
                engine_args = {"ttft_s": TTFT_S, "itl_s": ITL_S, "max_parallel": slots}
                _report, outcome, config = await run_search(
                    CapacityLoad(arrival="constant", warmup_requests=0),
                    SLO(ttft_ms=SLO_TTFT_MS),
                    engine_args,
                )
                run = RunResult(
                    config=config,
                    status=RunStatus.COMPLETED,
                    phases=outcome.phases,
                    summary=outcome.summary,
                    pattern_report=outcome.pattern_report,
                )
                found.append(as_candidate(run, backend))
        return found

    return asyncio.run(search())


@pytest.fixture
def stored_capacity_runs(store_path):
    from bench.storage.store import ResultStore

    runs = capacity_runs()
    store = ResultStore(store_path)
    for run in runs:
        store.create_run(run)
        store.update_run(run)
    store.close()
    return runs


def capacity_page(app_test, profile: dict):
    from advisor.workload.profile_input import profile_from_dict
    from ui import state

    at = app_test()
    at.session_state[state.PROFILE_KEY] = profile_from_dict(profile)
    return at.run()


def gpus_by_candidate(at) -> dict[str, str]:
    frame = next(d.value for d in at.dataframe if "GPUs at peak" in getattr(d.value, "columns", []))
    return dict(zip(frame["Candidate"], frame["GPUs at peak"], strict=True))


def measured_rows(at) -> dict:
    return {k: v for k, v in gpus_by_candidate(at).items() if "predicted" not in k}


def test_capacity_panel_resizes_when_the_peak_doubles_without_a_new_run(
    app_test, stored_capacity_runs, store_path
):
    from bench.storage.store import ResultStore

    at = capacity_page(app_test, capacity_profile())
    assert not at.exception
    assert any(m.value == "#### Capacity and cost" for m in at.markdown)
    # The stage's one-sentence answer sits under the framework (advisor.decide.recommend.headline).
    assert any(m.value.startswith("**main: ") for m in at.markdown)
    peak = next(n for n in at.number_input if n.label == "Peak rate (req/s)")
    headroom = next(n for n in at.number_input if n.label == "Headroom")
    headroom.set_value(0.0).run()
    peak = next(n for n in at.number_input if n.label == "Peak rate (req/s)")
    peak.set_value(35.0).run()
    assert not at.exception
    # the measured searches' rows (a predicted configuration the fleet answer chose may sit
    # beside them, labelled "predicted, not measured")
    before = measured_rows(at)
    # 35 req/s on units of ~20 and ~10 req/s (each within the search's 5%): 2 and 4 GPUs.
    assert sorted(before.values()) == ["2", "4"], before
    next(n for n in at.number_input if n.label == "Peak rate (req/s)").set_value(70.0).run()
    assert not at.exception
    after = measured_rows(at)
    rates = sorted(run.pattern_report.max_rate_rps for run in stored_capacity_runs)
    expected = sorted(str(math.ceil(70.0 / rate)) for rate in rates)  # 1 GPU a unit, no headroom
    assert sorted(after.values()) == sorted(expected), (after, rates)
    assert all(int(after[k]) > int(before[k]) for k in before)
    # Re-sized only: the store holds the same two runs, the saved profile's GPU price is kept.
    store = ResultStore(store_path)
    assert len(store.list_runs()) == len(stored_capacity_runs)
    store.close()
    from ui import state

    assert at.session_state[state.PROFILE_KEY].stages[0].peak_request_rate_rps != 70.0


def test_without_a_capacity_search_the_panel_says_why_and_what_measures_it(app_test):
    at = capacity_page(app_test, capacity_profile())
    assert not at.exception
    info = " ".join(i.value for i in at.info)
    assert "No capacity measured on H200 for this workload" in info
    assert "capacity search" in info and "Benchmark page" in info
