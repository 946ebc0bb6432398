"""AppTest of the Results page's figures and verdicts on real fake-backend runs.

The runs are closed-loop runs of the `fake` backend (a labelled TEST DOUBLE with a known service
time) through the real load driver in virtual time (tests/advisor/test_recommend_capacity.py's
`speed_runs`), filed under candidate names (labelled: not measurements of them) and stored with
their per-request records in the test's scratch store.
"""

from __future__ import annotations

import asyncio

from tests.advisor.test_recommend_capacity import speed_profile, speed_runs
from tests.conftest import virtual_time
from tests.ui.conftest import stored_run

PAGE = "ui/results_page.py"


def store_pairs(store_path, pairs) -> None:
    from bench.storage.store import ResultStore

    store = ResultStore(store_path)
    for run, records in pairs:
        store.create_run(run)
        store.add_records(run.run_id, records)
        store.update_run(run)
    store.close()


def made_runs():
    async def make():
        with virtual_time(asyncio.get_running_loop()):
            # Two repeats of one, a single run of a 20% slower other: a verdict with "single run".
            return await speed_runs("vllm", (1, 2)) + await speed_runs("torch_compile", (5,), 1.2)

    return asyncio.run(make())


def test_verdicts_show_the_interval_and_single_run(app_test, store_path):
    from advisor.workload.profile_input import profile_from_dict
    from ui import state

    store_pairs(store_path, made_runs())
    at = app_test(PAGE)
    at.session_state[state.PROFILE_KEY] = profile_from_dict(speed_profile())
    at.run()
    assert not at.exception
    assert any(s.value == "Verdicts for your profile" for s in at.subheader)
    table = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
    row = table.iloc[0]
    assert (row["leader"], row["against"]) == ("vllm", "torch_compile")
    assert "95% CI" in row["ratio"] and "±" in row["ratio"]
    assert row["runs"] == "single run"
    assert row["verdict"].startswith("faster")
    assert "tok/s" in row["leader / against"]


def test_missing_figures_show_a_dash_and_figures_carry_units(app_test, store_path):
    run = stored_run(store_path)  # no GPU telemetry, no TPOT: not measured
    at = app_test(PAGE).run()
    assert not at.exception
    table = at.dataframe[0].value
    row = table[table["run_id"] == run.run_id].iloc[0]
    assert row["peak GPU mem (GB)"] == "—" and row["TPOT p99 (ms)"] == "—"
    assert row["output tok/s"] == "80 tok/s" and row["TTFT p99 (ms)"] == "11 ms"
    assert "None" not in " ".join(str(v) for v in table.to_numpy().ravel())
    assert any("No verdict yet" in i.value for i in at.info)
