"""The capacity search on a real engine (PyTorch eager, tiny-llama on the CPU), then checked.

A constant-rate run at the rate the search found must hold the same SLO (same percentile,
attainment target and request count as a probe). Slow: a real engine is loaded twice.
"""

from __future__ import annotations

import pytest

from bench.api import launch
from bench.config import (
    SLO,
    CapacityLoad,
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    RateLoad,
    RunConfig,
)
from bench.load.capacity import CapacityReport, judge_probe

pytestmark = pytest.mark.slow


def test_cpu_engine_capacity_holds_at_a_constant_rate(tiny_llama, tmp_path):
    workload = GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=4)
    )
    engine = {
        "backend": "pytorch",
        "model": "tiny-llama",
        # One request decoded at a time: a capacity that exists on any machine (batched, an idle
        # CI machine served 20 requests at once within the SLO up to the search's ceiling).
        "engine_args": {"max_batch_size": 1},
        "precision": {"dtype": "float32"},
        "device": "cpu",
        "workload": workload,
        "validity": {"min_duration_s": 1, "min_requests": 5},
    }
    # The machine is shared: the SLO is set from what one request at a time takes here (p90
    # TTFT x 3, at least 300 ms), so the search has a boundary to find above the serial rate.
    serial = launch(
        RunConfig(**engine, load=ConcurrencyLoad(concurrency=1, max_requests=6, duration_s=None)),
        out_dir=tmp_path / "serial",
    )
    slo = SLO(ttft_ms=max(300.0, 3 * serial.summary.ttft_ms.p90))
    search = CapacityLoad(
        arrival="constant",
        percentile="p90",
        attainment_target=0.9,
        probe_requests=20,
        precision=0.1,
        warmup_requests=2,
        max_duration_s=140,
    )
    base = RunConfig(**engine, load=search, slo=slo)
    result = launch(base, out_dir=tmp_path / "search")
    report = CapacityReport.model_validate(result.pattern_report)
    assert report.converged and report.result == "found", (report.result, report.notes)
    assert result.validity.status == "VALID", result.validity.reasons
    assert report.max_rate_rps and report.first_infeasible_rps > report.max_rate_rps
    assert report.relative_gap <= search.precision
    # The search states its capacity to within `precision` (10%) from probes of 20 requests on
    # a shared CPU; a constant-rate run at the low end of that band must hold the SLO (at the
    # boundary itself a rerun of 20 requests is a coin toss: 3 misses of 20 already fail 90%).
    confirm_rps = report.max_rate_rps * (1 - search.precision)
    check = base.model_copy(
        update={
            "load": RateLoad(
                rate_rps=confirm_rps,
                arrival="constant",
                duration_s=None,
                max_requests=report.probe_requests,
                warmup_requests=2,
            )
        }
    )
    confirmed = launch(check, out_dir=tmp_path / "check")
    feasible, reasons, _ = judge_probe(
        confirmed.summary, slo, search.percentile, search.attainment_target
    )
    assert feasible, (report.max_rate_rps, confirm_rps, reasons)
