"""Checking a found capacity with plain constant-rate runs, outside the search that found it.

A capacity search (bench/run/load/capacity.py) accepts the last level whose probe met the SLO. Two
ordinary `rate` runs with constant arrivals check that answer the way a reviewer would: one at
the capacity itself (it should hold) and one 15% above it (it should not). Each check run has
the search's backend, model, engine arguments, workload, precision, parallelism and SLO, and as
many requests as one of its probes, so the percentile and attainment rules are the same
(`judge_probe`); only the load differs.

`check_plan` writes those runs as a `bench campaign` plan; `judge_check` reads a finished check
run against the search's report. `python -m bench capacity-check` is the command line of both.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from bench.core.config import RateLoad, RunConfig
from bench.core.errors import UserError
from bench.core.files import read_user_bytes
from bench.core.pattern_reports import CapacityReport
from bench.core.schema import RunResult
from bench.core.strict import Strict
from bench.orchestrate.campaign import CampaignPlan, RunStep
from bench.run.load.capacity import judge_probe

CHECK_FACTORS = (1.0, 1.15)
"""At the capacity (should hold) and 15% above it (should fail)."""

_LABEL = re.compile(
    r"^capacity check (?P<factor>[0-9.]+) x (?P<rate>[0-9.]+) req/s of run (?P<run>\S+)"
)


class CapacityCheck(Strict):
    """One constant-rate run judged against the capacity search it checks."""

    capacity_run_id: str
    capacity_rps: float = Field(description="The capacity the search found (requests/s).")
    factor: float = Field(description="The check's rate / the capacity.")
    run_id: str
    rate_rps: float = Field(description="The check run's constant arrival rate (requests/s).")
    requests: int
    holds: bool = Field(description="The SLO held under the search's own rule.")
    reasons: list[str] = Field(default_factory=list, description="Why it did not hold.")
    expected: Literal["holds", "fails"]
    as_expected: bool


def capacity_report(result: RunResult) -> CapacityReport:
    """The capacity report of a finished search, or one line why there is none to check."""
    report = result.pattern_report
    if not isinstance(report, CapacityReport):
        raise UserError(f"run {result.run_id} is not a capacity search (pattern "
                        f"{result.config.load.pattern})")  # fmt: skip
    if report.over != "rate" or report.max_rate_rps is None or report.result != "found":
        raise UserError(
            f"run {result.run_id}: the search found no rate capacity to check "
            f"(result {report.result}, over {report.over})"
        )
    return report


def check_label(capacity_run_id: str, factor: float, capacity_rps: float) -> str:
    return f"capacity check {factor:g} x {capacity_rps:.4g} req/s of run {capacity_run_id}"


def check_configs(search: RunResult, factors: tuple[float, ...] = CHECK_FACTORS) -> list[RunConfig]:
    """One constant-rate RunConfig per factor, as described in the module docstring."""
    report = capacity_report(search)
    assert report.max_rate_rps is not None
    base = search.config
    configs = []
    for factor in factors:
        load = RateLoad(
            # Rounded: 27 x 1.15 is 31.049999999999997 in binary, and the rate is a command word.
            rate_rps=round(report.max_rate_rps * factor, 6),
            arrival="constant",
            duration_s=None,
            max_requests=report.probe_requests,
            warmup_requests=base.load.warmup_requests,
            request_timeout_s=base.load.request_timeout_s,
            max_duration_s=base.load.max_duration_s,
        )
        configs.append(
            base.model_copy(
                update={
                    "load": load,
                    "label": check_label(search.run_id, factor, report.max_rate_rps),
                }
            )
        )
    return configs


def check_plan(searches: list[RunResult], name: str) -> CampaignPlan:
    """A campaign plan of every search's check runs, in the searches' order."""
    steps = []
    for search in searches:
        for config in check_configs(search):
            factor = config.load.rate_rps / capacity_report(search).max_rate_rps  # type: ignore[operator,union-attr]
            step_name = f"check {search.config.backend} {search.run_id} x{factor:.2f}"
            estimate = config.load.max_requests / config.load.rate_rps + 120  # type: ignore[operator,union-attr]
            steps.append(RunStep(name=step_name, config=config, estimate_s=estimate))
    return CampaignPlan(
        name=name,
        description="Constant-rate checks of capacity searches "
        "(bench/orchestrate/capacity_check.py): each "
        "search's capacity, and 1.15 x it, for as many requests as one of its probes.",
        steps=steps,
    )


def judge_check(search: RunResult, check: RunResult) -> CapacityCheck:
    """Did the SLO hold in `check` (a run of `check_configs(search)`), by the search's rule?"""
    report = capacity_report(search)
    assert report.max_rate_rps is not None
    match = _LABEL.match(check.config.label or "")
    if match is None or match["run"] != search.run_id:
        raise UserError(f"run {check.run_id} is not a capacity check of run {search.run_id}")
    # What judging needs of the check's load: one open-loop rate held for the whole run, as
    # each rate probe of the search was; the load's class says whether it is one.
    level = check.config.load.fixed_level()
    if level is None or level[0] != "rate":
        raise UserError(f"run {check.run_id} is labelled a capacity check but is not a rate run")
    rate_rps = level[1]
    if check.summary is None:
        raise UserError(f"run {check.run_id} has no measured summary ({check.status.value})")
    holds, reasons, _ = judge_probe(
        check.summary, check.config.slo, report.percentile, report.attainment_target
    )
    factor = float(match["factor"])
    expected: Literal["holds", "fails"] = "holds" if factor <= 1.0 else "fails"
    return CapacityCheck(
        capacity_run_id=search.run_id,
        capacity_rps=report.max_rate_rps,
        factor=factor,
        run_id=check.run_id,
        rate_rps=rate_rps,
        requests=check.summary.requests,
        holds=holds,
        reasons=reasons,
        expected=expected,
        as_expected=holds == (expected == "holds"),
    )


def checks_of(search: RunResult, runs: list[RunResult]) -> list[CapacityCheck]:
    """Every run among `runs` that checks `search`, judged, lowest factor first."""
    found = []
    for run in runs:
        match = _LABEL.match(run.config.label or "")
        if match is not None and match["run"] == search.run_id and run.summary is not None:
            found.append(judge_check(search, run))
    return sorted(found, key=lambda check: check.factor)


def read_results(paths: list[Path]) -> list[RunResult]:
    """Run results from result.json files, or from every result.json under a folder."""
    files: list[Path] = []
    for path in paths:
        files.extend(sorted(path.rglob("result.json")) if path.is_dir() else [path])
    if not files:
        raise UserError(f"no result.json in {', '.join(str(p) for p in paths)}")
    results = []
    for file in files:
        try:
            results.append(RunResult.model_validate_json(read_user_bytes(file, "run result")))
        except ValidationError:
            raise UserError(f"{file}: not a run result this version can read") from None
    return results


def searches_among(results: list[RunResult]) -> list[RunResult]:
    """The finished rate capacity searches among `results`, in their order."""
    found = []
    for result in results:
        report = result.pattern_report
        if (
            isinstance(report, CapacityReport)
            and report.over == "rate"
            and report.result == "found"
        ):
            found.append(result)
    return found
