"""The capacity search on a real engine (vLLM's CPU build, tiny-llama), then checked by a plain
constant-rate run written by bench/orchestrate/capacity_check.py and judged by its rule (same
percentile, attainment target and request count as a probe). Slow: a real engine is loaded twice.
"""

from __future__ import annotations

import pytest

from bench.core.config import (
    SLO,
    CapacityLoad,
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    RunConfig,
)
from bench.orchestrate.capacity_check import check_configs, judge_check
from bench.run.api import launch
from bench.run.load.capacity import CapacityReport
from tests.bench.backends.test_vllm import cpu_attention_compatible

pytestmark = pytest.mark.slow


def _vllm_installed() -> bool:
    from bench.engines.backends.vllm import vllm_version

    return vllm_version() is not None


@pytest.mark.skipif(not _vllm_installed(), reason="vLLM is not installed")
def test_vllm_cpu_capacity_holds_at_a_constant_rate(tiny_llama, tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    model = cpu_attention_compatible(tiny_llama, tmp_path / "tiny-llama-hd32")
    workload = GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=16)
    )
    engine = {
        "backend": "vllm",
        "model": model.path,
        # One sequence scheduled at a time: a capacity that exists on any machine (a batching
        # engine on an idle machine can meet a loose SLO up to the search's ceiling).
        "engine_args": {"max_num_seqs": 1, "max_model_len": 256, "enforce_eager": True},
        "precision": {"dtype": "bfloat16"},
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
        probe_requests=40,
        precision=0.1,
        warmup_requests=2,
        max_duration_s=140,
    )
    result = launch(RunConfig(**engine, load=search, slo=slo), out_dir=tmp_path / "search")
    report = CapacityReport.model_validate(result.pattern_report)
    assert report.converged and report.result == "found", (report.result, report.notes)
    assert result.validity.status == "VALID", result.validity.reasons
    assert report.max_rate_rps and report.first_infeasible_rps > report.max_rate_rps
    assert report.relative_gap <= search.precision
    # The search states its capacity to within `precision` (10%) from probes of 40 requests on
    # a shared CPU, where one engine step can take twice as long when another process runs
    # between the search and the check (CI failed at 0.8 x: 14.3 req/s found, 11.5 req/s
    # checked, p90 TTFT 662 ms against 300 ms). With one sequence at a time, half the capacity
    # holds the SLO through a slowdown of up to 2x, so a search that overstates the capacity by
    # more than that still fails here. At the boundary itself a rerun is a coin toss, and the
    # 1.0 x and 1.15 x checks (CHECK_FACTORS) are the GPU campaign's (a quiet machine).
    [check_config] = check_configs(result, factors=(0.5,))
    # The run's SLO is judged at the search's percentile (RunConfig keeps the two equal), and
    # the check run carries it.
    assert result.config.slo == slo.model_copy(update={"percentile": "p90"})
    assert check_config.load.max_requests == 40 and check_config.slo == result.config.slo
    checked = launch(check_config, out_dir=tmp_path / "check")
    judged = judge_check(result, checked)
    assert judged.expected == "holds" and judged.requests == 40
    assert judged.holds, (report.max_rate_rps, judged.rate_rps, judged.reasons)
