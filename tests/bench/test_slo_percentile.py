"""The SLO's percentile, one field of the run's SLO: the step ladder and the capacity search
judge at it, a capacity load's `percentile` is the same setting, and every shipped run still
loads (p99 where it was not stored)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bench.core.config import (
    SLO,
    CapacityLoad,
    RunConfig,
    StepLoad,
    ValidityRules,
    min_probe_requests,
)
from bench.core.pattern_reports import CapacityReport
from bench.core.schema import MetricsSummary, RunResult
from bench.run.load.capacity import _Search
from bench.run.load.patterns import slo_breaches

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference"
RUN_FILES = sorted(REFERENCE.glob("*_runs.json"))
RULES = ValidityRules()


def shipped_step_stage() -> MetricsSummary:
    """The last stage of the shipped vLLM step ladder on the H200 (TTFT p50 176 ms, p99 842 ms)."""
    raws = json.loads((REFERENCE / "h200_llama2-7b_vllm_fp8_runs.json").read_text())["runs"]
    run = next(
        RunResult.model_validate(raw) for raw in raws if raw["config"]["load"]["pattern"] == "step"
    )
    summary = run.phases[-1].summary
    assert summary is not None and summary.ttft_ms is not None
    return summary


@pytest.mark.parametrize("path", RUN_FILES, ids=lambda p: p.name)
def test_every_shipped_run_loads_with_its_percentile(path: Path) -> None:
    for raw in json.loads(path.read_text())["runs"]:
        run = RunResult.model_validate(raw)
        stored = raw["config"].get("slo", {}).get("percentile")
        searched = raw["config"]["load"].get("percentile")
        assert run.config.slo.percentile == (stored or searched or "p99"), raw["run_id"]
        if isinstance(run.config.load, CapacityLoad):
            assert run.config.load.percentile == run.config.slo.percentile
            report = run.pattern_report
            assert isinstance(report, CapacityReport)
            assert report.slo.percentile == report.percentile == run.config.slo.percentile
        # and the loaded config round-trips with the field now written out
        assert RunConfig.model_validate(run.config.model_dump(mode="json")) == run.config


def test_the_ladder_judges_a_stage_at_the_slos_percentile() -> None:
    summary = shipped_step_stage()
    p50, p99 = summary.ttft_ms.p50, summary.ttft_ms.p99
    limit = (p50 + p99) / 2
    at_p99 = slo_breaches(summary, SLO(ttft_ms=limit), RULES)
    assert at_p99 == [f"p99 ttft {p99:.1f} ms > SLO {limit:g} ms"]
    assert slo_breaches(summary, SLO(ttft_ms=limit, percentile="p50"), RULES) == []


def test_a_capacity_loads_percentile_and_the_slos_are_one_setting() -> None:
    base = {"backend": "fake", "model": "tiny-llama"}
    from_load = RunConfig(
        **base, load=CapacityLoad(percentile="p90"), slo=SLO(ttft_ms=100)
    )  # a stored search said it in the load
    assert from_load.slo.percentile == "p90"
    from_slo = RunConfig(**base, load=CapacityLoad(), slo=SLO(ttft_ms=100, percentile="p50"))
    assert from_slo.load.percentile == "p50"
    with pytest.raises(ValidationError, match="give the SLO percentile once"):
        RunConfig(
            **base,
            load=CapacityLoad(percentile="p90"),
            slo=SLO(ttft_ms=100, percentile="p99"),
        )
    # Other patterns keep the SLO's percentile as given (the ladder reads it).
    step = RunConfig(**base, load=StepLoad(), slo=SLO(ttft_ms=100, percentile="p90"))
    assert step.slo.percentile == "p90"


def test_the_capacity_search_reports_and_sizes_its_probes_at_the_slos_percentile() -> None:
    config = RunConfig(
        backend="fake",
        model="tiny-llama",
        load=CapacityLoad(attainment_target=0.5),  # the percentile, not attainment, sizes
        slo=SLO(ttft_ms=100, percentile="p90"),
    )
    report = _Search(config.load, config.slo).report  # made before the first probe
    assert report.percentile == "p90"
    assert report.probe_requests == min_probe_requests("p90", config.load.attainment_target)
    assert report.probe_requests != min_probe_requests("p99", config.load.attainment_target)
