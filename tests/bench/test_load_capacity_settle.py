"""A rate probe is judged once the engine has settled: arrivals at the probe's rate for the
end-to-end time the SLO allows are served first (warm-up, not judged, no drain), then the judged
requests; stored searches from before say they were judged from their first request.

The search generator is driven directly; every phase is answered by the same summary (a test
double's figures: the verdicts are not what these tests check, the phases are).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.core.config import SLO, CapacityLoad, ValidityRules
from bench.core.pattern_reports import CapacityReport
from bench.core.schema import RunResult
from bench.run.load.capacity import capacity_search
from bench.run.load.driver import PhaseSpec
from tests.bench.test_load_capacity_confirm import summary

SLO_CHAT = SLO(ttft_ms=300, tpot_ms=50)
REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference"


def phases_of(load: CapacityLoad, slo: SLO, output_tokens: float | None):
    """Every phase the search asks for (all answered: 0 misses below 24 req/s, 120 above)."""
    plan = capacity_search(load, slo, ValidityRules(), output_tokens)
    specs: list[PhaseSpec] = []
    spec = next(plan)
    try:
        while True:
            specs.append(spec)
            spec = plan.send(summary(0 if spec.target < 24 else 120))
    except StopIteration as done:
        return specs, CapacityReport.model_validate(done.value)


LOAD = CapacityLoad(start_rps=16, growth_factor=1.5, precision=0.1, warmup_requests=0)


def test_every_judged_rate_probe_follows_a_settle_phase_at_its_rate():
    specs, report = phases_of(LOAD, SLO_CHAT, 256)
    bound_s = (300 + 255 * 50) / 1000  # TTFT limit + (output - 1) x TPOT limit
    judged = [spec for spec in specs if not spec.name.endswith("-settle")]
    assert len(judged) == len(report.probes) and len(specs) == 2 * len(judged)
    for settle, probe_spec in zip(specs[::2], specs[1::2], strict=True):
        assert settle.name == f"{probe_spec.name}-settle"
        assert settle.warmup and not settle.drain  # not judged; the probe starts on its load
        assert settle.duration_s == pytest.approx(bound_s) and settle.max_requests is None
        assert settle.target == probe_spec.target and settle.strategy == "rate"
        assert not probe_spec.warmup and probe_spec.max_requests == report.probe_requests
    seeds = [spec.seed for spec in specs]
    assert len(set(seeds)) == len(seeds)  # fresh arrivals for every phase
    assert all(probe.settle_s == pytest.approx(bound_s) for probe in report.probes)
    assert "13.1 s" in report.settle_rule and "300 + 255 x 50" in report.settle_rule


def test_settle_can_be_given_or_turned_off():
    specs, report = phases_of(LOAD.model_copy(update={"settle_s": 5.0}), SLO_CHAT, 256)
    assert {spec.duration_s for spec in specs[::2]} == {5.0} and "given" in report.settle_rule
    specs, report = phases_of(LOAD.model_copy(update={"settle_s": None}), SLO_CHAT, 256)
    assert not [spec for spec in specs if spec.warmup]
    assert all(probe.settle_s is None for probe in report.probes)
    assert report.settle_rule.startswith("none")


def test_no_settle_without_an_end_to_end_bound_and_it_says_why():
    seconds, rule = LOAD.settle_for(SLO(ttft_ms=300), 256)
    assert seconds is None and "bounds no end-to-end time" in rule
    # An E2E limit bounds it whatever the output length; a concurrency search never settles.
    assert LOAD.settle_for(SLO(e2e_ms=2000), None)[0] == pytest.approx(2.0)
    assert CapacityLoad(over="concurrency").settle_for(SLO_CHAT, 256)[0] is None


def test_settle_is_bounded_like_any_duration():
    for bad in (-1, 1e12, "always"):
        with pytest.raises(ValueError):
            CapacityLoad(settle_s=bad)


SETTLED_FILE = "h200_llama2-7b_capacity_settled_runs.json"
"""The shipped H200 search made with settled probes."""
SETTLED_FILES = {
    SETTLED_FILE,
    "h100_llama2-7b_capacity_heldout_runs.json",
    "h100_llama2-7b_capacity_heldout_long_runs.json",
}
"""The shipped searches made with settled probes (the two H100 ones too); the others ran before
settling existed."""


def test_stored_searches_read_as_judged_from_their_first_request():
    files = sorted(REFERENCE.glob("*capacity*_runs.json"))
    assert len(files) > 1
    for path in files:
        if path.name in SETTLED_FILES:
            continue
        for data in json.loads(path.read_text(encoding="utf-8"))["runs"]:
            run = RunResult.model_validate(data)
            if run.config.load.pattern != "capacity":
                continue
            assert run.config.load.settle_s is None, path.name
            assert isinstance(run.pattern_report, CapacityReport)
            assert run.pattern_report.settle_rule == ""
            assert all(probe.settle_s is None for probe in run.pattern_report.probes)


@pytest.mark.parametrize("name", sorted(SETTLED_FILES))
def test_the_settled_search_shipped_keeps_its_rule_and_each_probes_settle(name):
    data = json.loads((REFERENCE / name).read_text(encoding="utf-8"))
    (run,) = [RunResult.model_validate(raw) for raw in data["runs"]]
    assert run.config.load.settle_s == "slo"
    report = run.pattern_report
    assert isinstance(report, CapacityReport)
    # the rule: TTFT limit + (output - 1) x TPOT limit (chat 300 + 255 x 50 = 13.05 s; the
    # long-prompt search 1,000 + 127 x 50 = 7.35 s)
    slo, output = run.config.slo, run.config.workload.output_tokens.mean
    settle = (slo.ttft_ms + (output - 1) * slo.tpot_ms) / 1000
    assert report.settle_rule.startswith(f"{settle:.1f} s, the end-to-end time the SLO allows")
    assert all(probe.settle_s == pytest.approx(settle) for probe in report.probes)
    # each judged probe's settle phase ended before its judged requests began
    for probe in report.probes:
        settle = report.phase_windows[f"{probe.phase}-settle"]
        assert settle[1] <= report.phase_windows[probe.phase][0]


def test_the_plan_counts_the_settle_time_of_every_judged_probe():
    from advisor.plan.run_estimate import estimate_run
    from bench.core.config import GenerateWorkload, LengthDistribution, RunConfig

    def config(settle: float | str | None) -> RunConfig:
        return RunConfig(
            backend="vllm",
            model="llama-2-7b",
            workload=GenerateWorkload(
                prompt_tokens=LengthDistribution(mean=512),
                output_tokens=LengthDistribution(mean=256),
            ),
            load=CapacityLoad(settle_s=settle),
            slo=SLO_CHAT,
        )

    settled = estimate_run(config("slo"), cpu_only=False, gpu="H200")
    unsettled = estimate_run(config(None), cpu_only=False, gpu="H200")
    probes = CapacityLoad().planned_probes()
    assert settled.parts_s["settle"] == pytest.approx(13.05 * probes)
    assert "settle" not in unsettled.parts_s
    assert settled.duration_s == pytest.approx(unsettled.duration_s + 13.05 * probes, abs=0.1)
