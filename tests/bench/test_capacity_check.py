"""Checking a found capacity by plain constant-rate runs (bench/orchestrate/capacity_check.py), end
to end through the command line: a real search, the written check plan, `bench campaign` running it,
and the judgement.

The engine is the `fake` backend (a test double with a known service time): 2 slots of 500 ms
and one output token serve 4 requests/s at constant arrivals with no queue, so every request's
TTFT is 500 ms, 300 ms inside the 800 ms SLO (room for a busy machine's timer jitter). Above
4 req/s the queue grows with every request: at 1.15 x the found capacity (which the 10%
precision keeps within [3.6, 4) req/s) the last of 30 requests waits about a second, so the
check must miss the SLO for far more than the 10% its p90 allows.
"""

from __future__ import annotations

import pytest
import yaml

from bench.cli import main
from bench.core.config import RateLoad
from bench.orchestrate.campaign import load_plan
from bench.orchestrate.capacity_check import checks_of, read_results, searches_among


def test_a_found_capacity_holds_and_fails_fifteen_percent_above(tmp_path, capsys):
    search_dir = tmp_path / "search"
    code = main([
        "run", "--backend", "fake", "--model", "tiny-llama", "--pattern", "capacity",
        "--no-store", "--out", str(search_dir), "--slo-ttft-ms", "800", "--output-tokens", "1",
        "--engine-arg", "ttft_s=0.5", "--engine-arg", "max_parallel=2",
        "--option", "load.arrival=constant", "--option", "load.probe_requests=30",
        "--option", "load.percentile=p90", "--option", "load.attainment_target=0.9",
        "--option", "load.precision=0.1", "--option", "load.start_rps=2.5",
        "--option", "validity.min_duration_s=0", "--warmup-requests", "0",
    ])  # fmt: skip
    assert code == 0, capsys.readouterr()
    [search] = searches_among(read_results([search_dir]))
    capacity = search.pattern_report.max_rate_rps
    assert 3.5 <= capacity < 4.1

    plan_path = tmp_path / "checks.yaml"
    assert main(["capacity-check", str(search_dir), "--plan-out", str(plan_path)]) == 0
    plan = load_plan(plan_path)
    rates = [step.config.load for step in plan.steps]
    assert all(isinstance(load, RateLoad) and load.arrival == "constant" for load in rates)
    assert [load.rate_rps for load in rates] == pytest.approx([capacity, 1.15 * capacity])
    assert all(load.max_requests == 30 and load.duration_s is None for load in rates)
    for step in plan.steps:  # everything but the load and the label is the search's
        kept = step.config.model_dump(exclude={"load", "label"})
        assert kept == search.config.model_dump(exclude={"load", "label"})
    assert yaml.safe_load(plan_path.read_text())["name"] == "capacity-checks"

    checks_dir = tmp_path / "checks"
    assert main(["campaign", str(plan_path), "--out", str(checks_dir)]) == 0
    checks = checks_of(search, read_results([checks_dir]))
    assert [check.factor for check in checks] == [1.0, 1.15]
    at, above = checks
    assert at.holds and at.as_expected and at.requests == 30, at.reasons
    assert not above.holds and above.as_expected
    assert any("ttft" in reason for reason in above.reasons)

    capsys.readouterr()
    assert main(["capacity-check", str(search_dir), str(checks_dir)]) == 0
    out = capsys.readouterr().out
    assert "x1 " in out and "holds, as expected" in out
    assert "x1.15 " in out and "fails, as expected" in out


def test_a_result_that_is_not_a_search_is_one_line(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main([
        "run", "--backend", "fake", "--model", "tiny-llama", "--no-store", "--out", str(run_dir),
        "--max-requests", "4", "--option", "validity.min_duration_s=0",
    ]) == 0  # fmt: skip
    capsys.readouterr()
    assert main(["capacity-check", str(run_dir), "--plan-out", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: no finished rate capacity search among the results"]
    (tmp_path / "bad.json").write_bytes(b"\x00\xff binary")
    assert main(["capacity-check", str(tmp_path / "bad.json")]) == 2
    assert "not a run result this version can read" in capsys.readouterr().err


def test_a_check_is_judged_by_the_one_rate_its_load_held():
    """On the shipped H200 searches and their checks: each check is judged at the rate its load
    holds; a run labelled as a check whose load holds no one open-loop rate is one line."""
    import json
    from pathlib import Path

    from bench.core.config import ConcurrencyLoad, StepLoad
    from bench.core.errors import UserError
    from bench.core.schema import RunResult
    from bench.orchestrate.capacity_check import judge_check

    shipped = Path(__file__).resolve().parents[2] / "data" / "reference"
    data = json.loads((shipped / "h200_llama2-7b_capacity_chat_slo_runs.json").read_text())
    runs = [RunResult.model_validate(run) for run in data["runs"]]
    searches = searches_among(runs)
    assert len(searches) == 2
    for search in searches:
        judged = checks_of(search, runs)
        assert [check.factor for check in judged] == [1.0, 1.15]
        by_id = {run.run_id: run for run in runs}
        for judgement in judged:
            assert judgement.rate_rps == by_id[judgement.run_id].config.load.rate_rps
    check = next(run for run in runs if run.config.label and "1.15 x 27" in run.config.label)
    # A Poisson rate run holds one open-loop rate too: the judgement does not need constant.
    poisson = check.config.load.model_copy(update={"arrival": "poisson"})
    other = check.model_copy(update={"config": check.config.model_copy(update={"load": poisson})})
    judged = judge_check(_search_of(check, searches), other)
    assert judged.rate_rps == check.config.load.rate_rps and not judged.holds
    for load in (ConcurrencyLoad(concurrency=31), StepLoad()):
        relabelled = check.config.model_copy(update={"load": load})
        wrong = check.model_copy(update={"config": relabelled})
        with pytest.raises(UserError, match="labelled a capacity check but is not a rate run"):
            judge_check(_search_of(check, searches), wrong)


def _search_of(check, searches):
    return next(search for search in searches if search.run_id in (check.config.label or ""))
