"""Capacity, verdicts and plans in the recommendation, on runs the real harness made.

The runs come from the `fake` backend (a labelled TEST DOUBLE with a known service time) driven
by the real load driver and the real capacity search in virtual time
(tests/bench/test_stats.py's `fake_run`, tests/bench/test_load_capacity.py's `run_search`).
The advisor only weighs the frameworks its tree names, so each run is then filed under a
candidate's name (`as_candidate`): its label says so, and nothing here is a measurement of
that framework.
"""

from __future__ import annotations

import pytest

from advisor.decide.recommend import recommend
from advisor.plan.stage_plan import FULL_REPEATS, plan_for_stage
from advisor.report.capacity import capacity_view
from advisor.sizing.capacity import HOURS_PER_MONTH
from advisor.workload.profile_input import profile_from_dict
from bench.core.config import (
    SLO,
    CapacityLoad,
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
)
from bench.core.fingerprint import Fingerprint, GpuFacts
from bench.core.schema import ModelInfo, RunResult, RunStatus, Validity, ValidityStatus
from tests.bench.test_load_capacity import ITL_S, OUTPUT_TOKENS, SLO_TTFT_MS, TTFT_S, run_search
from tests.bench.test_stats import fake_run

MODEL = "llama-2-7b"
AVAILABLE = {name: "available" for name in ("vllm", "torch_compile", "tensorrt_llm")}


def as_candidate(run: RunResult, backend: str, **config_update) -> RunResult:
    """A fake-backend run filed under `backend` on an H200 (TEST DOUBLE: labelled)."""
    config = run.config.model_copy(
        update={
            "backend": backend,
            "model": MODEL,
            "gpu_type": "H200",
            "label": f"TEST DOUBLE: fake backend timings filed as {backend}",
            **config_update,
        }
    )
    return run.model_copy(
        update={
            "config": config,
            "environment": Fingerprint(gpus=[GpuFacts(name="NVIDIA H200")]),
            "model": ModelInfo(name=MODEL, path="/tmp/fake", kind="generate"),
            "validity": Validity(status=ValidityStatus.VALID),
            "status": RunStatus.COMPLETED,
        }
    )


async def speed_runs(backend: str, seeds: tuple[int, ...], slowdown: float = 1.0):
    """Closed-loop runs of 120 requests at concurrency 4, as (RunResult, records) pairs."""
    out = []
    for seed in seeds:
        result, records = await fake_run(120, seed, slowdown=slowdown, concurrency=4)
        load = ConcurrencyLoad(concurrency=4, duration_s=30)
        workload = GenerateWorkload(  # what fake_run sends
            prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=8)
        )
        # Repeats of one configuration: the seed stands for run-to-run luck, not a setting.
        settings = {k: v for k, v in result.config.engine_args.items() if k != "seed"}
        candidate = as_candidate(
            result, backend, load=load, workload=workload, engine_args=settings
        )
        out.append((candidate, records))
    return out


def speed_profile(**extra) -> dict:
    """The stage the speed runs match: 16-token prompts, 8-token outputs, 4 in flight."""
    return {
        "model": MODEL,
        "gpu": {"type": "H200"},
        "prompt_tokens": {"mean": 16},
        "output_tokens": {"mean": 8},
        "concurrency": 4,
        "precision": {"dtype": "bfloat16"},
        **extra,
    }


def advise(data: dict, pairs, **kwargs):
    runs = [run for run, _ in pairs]
    records = {run.run_id: records for run, records in pairs}
    report = recommend(
        profile_from_dict(data),
        runs=runs,
        records=records,
        availability=AVAILABLE,
        reference_dir="/nonexistent-reference",
        **kwargs,
    )
    return report.stages[0].recommendation


async def test_a_20_percent_slower_candidate_is_significantly_slower(time_travel):
    pairs = await speed_runs("vllm", (1, 2)) + await speed_runs("torch_compile", (5, 6), 1.2)
    chosen = advise(speed_profile(), pairs)
    assert chosen.framework == "vllm" and chosen.follows == "measurements"
    verdict = chosen.verdicts[0]
    assert verdict.alternative == "torch_compile" and verdict.verdict == "faster"
    assert verdict.interval.low > 1.05 and not verdict.single_run
    assert verdict.leader_repeats == verdict.alternative_repeats == 2
    assert chosen.ranking_note is None
    assert chosen.confidence.level == "high", chosen.confidence.why
    alternative = next(a for a in chosen.alternatives if a.framework == "torch_compile")
    assert alternative.verdict == verdict and "95% CI" in alternative.why_not_first


async def test_identical_configs_are_indistinguishable_and_the_answer_says_so(time_travel):
    pairs = await speed_runs("vllm", (1, 2)) + await speed_runs("torch_compile", (3, 4))
    chosen = advise(speed_profile(), pairs)
    verdict = chosen.verdicts[0]
    assert verdict.indistinguishable and verdict.verdict == "indistinguishable"
    # No measured cost separates them: the next criterion is simplicity (no compile step).
    assert chosen.framework == "vllm"
    assert "indistinguishable" in chosen.ranking_note and "simplicity" in chosen.ranking_note
    assert any("indistinguishable" in line for line in chosen.contradictions)
    assert chosen.confidence.level == "medium"
    assert "indistinguishable" in chosen.confidence.why


async def test_single_runs_say_single_run_and_a_wider_threshold_makes_a_tie(time_travel):
    pairs = await speed_runs("vllm", (1,)) + await speed_runs("torch_compile", (5,), 1.2)
    chosen = advise(speed_profile(), pairs)
    assert chosen.verdicts[0].single_run and chosen.framework == "vllm"
    assert chosen.confidence.level == "medium" and "single run" in chosen.confidence.why
    # A 50% practical threshold (profile or call) is more than the 20% difference: a tie.
    wide = advise(speed_profile(practical_threshold=0.5), pairs)
    assert wide.verdicts[0].indistinguishable and wide.threshold == 0.5
    assert advise(speed_profile(), pairs, threshold=0.5).verdicts[0].indistinguishable


# --------------------------------------------------------------------------- capacity


@pytest.fixture
async def capacity_runs(time_travel):
    """Two real capacity searches: 4 slots (20 req/s) filed as vllm, 2 slots (10 req/s) as
    pytorch: capacities in a ratio of 2."""
    found = []
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


def capacity_profile(**extra) -> dict:
    """The stage the capacity searches are about (their workload and SLO), peak 35 req/s."""
    return {
        "model": MODEL,
        "gpu": {"type": "H200", "price_per_hour": 2.0},
        "prompt_tokens": {"mean": GenerateWorkload().prompt_tokens.mean},
        "output_tokens": {"mean": OUTPUT_TOKENS},
        "precision": {"dtype": "bfloat16"},
        "slo": {"ttft_ms": SLO_TTFT_MS, "percentile": "p99"},
        "peak_request_rate_rps": 35,
        "headroom_fraction": 0,
        **extra,
    }


async def test_capacities_in_a_ratio_of_two_give_gpu_counts_in_that_ratio(capacity_runs):
    pairs = [(run, []) for run in capacity_runs]
    chosen = advise(capacity_profile(), pairs)
    by_framework = {c.framework: c.capacity for c in chosen.measured_capacities()}
    vllm, pytorch = by_framework["vllm"], by_framework["torch_compile"]
    assert vllm.max_rate_rps / pytorch.max_rate_rps == pytest.approx(2, rel=0.1)
    # 35 req/s on units of ~20 and ~10 req/s (each within the search's 5%).
    assert (vllm.gpus_needed, pytorch.gpus_needed) == (2, 4)
    assert vllm.monthly_cost == pytest.approx(2 * 2.0 * HOURS_PER_MONTH)
    assert vllm.source == "measured" and chosen.measured_capacities()[0].framework == "vllm"
    assert chosen.framework == "vllm" and chosen.capacity == vllm
    assert "2 x H200 for 35 req/s at p99 TTFT <= 100 ms" in chosen.headline
    assert "about $2,920/month" in chosen.headline
    assert "torch_compile would need 4" in chosen.headline
    pytorch_alternative = next(a for a in chosen.alternatives if a.framework == "torch_compile")
    assert pytorch_alternative.capacity == pytorch


async def test_the_cost_objective_ranks_on_the_measured_capacity(capacity_runs):
    # Only pytorch's search is stored: it is the measured capacity, ahead of the tree.
    chosen = advise(capacity_profile(objective="minimize_cost_per_token"), [(capacity_runs[1], [])])
    assert chosen.framework == "torch_compile" and chosen.follows == "measurements"
    assert chosen.settled_by == "yours" and "capacity" in (chosen.ranking_note or "")
    both = advise(
        capacity_profile(objective="minimize_cost_per_token"), [(r, []) for r in capacity_runs]
    )
    assert both.framework == "vllm"


async def test_searches_on_another_gpu_or_a_laxer_slo_are_left_out_with_a_note(capacity_runs):
    other_gpu = capacity_runs[0].model_copy(
        update={"config": capacity_runs[0].config.model_copy(update={"gpu_type": "A100-80GB-SXM"})}
    )
    strict = capacity_profile(slo={"ttft_ms": SLO_TTFT_MS / 2, "percentile": "p99"})
    chosen = advise(strict, [(other_gpu, []), (capacity_runs[1], [])])
    assert chosen.measured_capacities() == []
    assert any("the stage asks ttft_ms <= 50" in note for note in chosen.capacity_notes)
    # Nothing measured matches: the fleet is the serving model's prediction, said to be one.
    assert chosen.capacity is not None and chosen.capacity.source == "estimate"
    assert chosen.capacity_basis.startswith("predicted, not measured")
    elsewhere = advise(capacity_profile(), [(other_gpu, [])])
    assert any("not H200: left out" in note for note in elsewhere.capacity_notes)


def test_without_a_capacity_or_a_peak_the_answer_says_what_is_missing():
    chosen = advise(capacity_profile(peak_request_rate_rps=None), [])
    assert "no peak traffic in the profile" in chosen.headline
    assert "the GPU count is not known" in chosen.headline


async def test_capacity_view_resizes_without_re_running(capacity_runs):
    chosen = advise(capacity_profile(), [(run, []) for run in capacity_runs])
    view = capacity_view(chosen.capacities, 75, price_per_gpu_hour=3.0, headroom_fraction=0.0)
    counts = {row.framework: row.gpus_needed for row in view.rows}
    assert counts == {"vllm": 4, "torch_compile": 8}  # 75 req/s on ~20 and ~10 req/s units
    assert view.rows[0].monthly_cost == pytest.approx(4 * 3.0 * HOURS_PER_MONTH)
    assert view.table is not None and len(view.table.rows) == 2 and view.estimates is None
    lines = {series.name: series for series in view.chart.series}
    assert len(lines) == 2 and view.chart.markers[0].x == 75
    vllm_line = next(s for name, s in lines.items() if name.startswith("vllm"))
    rate = chosen.measured_capacities()[0].capacity.max_rate_rps
    for x, y in zip(vllm_line.x, vllm_line.y, strict=True):
        assert y == max(1, -(-x // rate))  # ceil(x / capacity) GPUs, no headroom, 1 GPU a unit
    reference = capacity_view(chosen.capacities, 35, headroom_fraction=0.0, gpu_type="H200")
    assert reference.price_source and reference.price_source.startswith("reference:")
    # The app's entry from the stored runs: the same rows, the searches' mismatches noted.
    from advisor.report.capacity import capacity_view_for_runs

    stage = profile_from_dict(capacity_profile()).stages[0]
    direct = capacity_view_for_runs(stage, capacity_runs, 75, 3.0, 0.0)
    assert [(r.framework, r.gpus_needed) for r in direct.rows] == [
        (r.framework, r.gpus_needed) for r in view.rows
    ]
    strict = stage.model_copy(update={"slo": stage.slo.model_copy(update={"ttft_ms": 50.0})})
    none = capacity_view_for_runs(strict, capacity_runs, 75, 3.0, 0.0)
    assert none.rows == [] and not none.chart.available
    assert any("the stage asks ttft_ms <= 50" in note for note in none.notes)


# --------------------------------------------------------------------------- plans


def test_full_plan_searches_capacity_and_repeats_the_comparison():
    data = capacity_profile(concurrency=8, prompt_tokens={"mean": 512}, output_tokens={"mean": 128})
    stage = profile_from_dict(data).stages[0]
    full = plan_for_stage(stage)
    assert full.repeats == FULL_REPEATS == 3
    assert all(e.repeats == 3 for e in full.estimates)
    assert full.repeats_added_s == pytest.approx(2 * sum(e.duration_s for e in full.estimates), 1)
    assert len(full.capacity_configs) == 2
    assert {c.load.pattern for c in full.capacity_configs} == {"capacity"}
    assert full.capacity_configs[0].load.precision == 0.05
    assert full.duration_s == pytest.approx(
        sum(e.total_s for e in full.estimates) + full.capacity_s, abs=0.2
    )
    quick = plan_for_stage(stage, quick=True)
    assert quick.repeats == 1 and quick.repeats_added_s == 0
    assert "coarse" in (quick.capacity_note or "") or "Not in the quick plan" in (
        quick.capacity_note or ""
    )
    for config in quick.capacity_configs:
        assert config.load.precision == 0.25 and config.load.probe_requests == 20


def test_no_latency_slo_means_no_capacity_search_and_says_why():
    data = capacity_profile(slo={}, concurrency=8)
    plan = plan_for_stage(profile_from_dict(data).stages[0])
    assert plan.capacity_configs == [] and "no latency SLO" in (plan.capacity_note or "")


# --------------------------------------------------------------------------- report


async def test_report_carries_capacity_and_cost_in_every_format(capacity_runs, tmp_path):
    import json
    import os

    from advisor.report import generate
    from advisor.report.build import build_report
    from advisor.report.model import Report as ReportModel

    profile = profile_from_dict(capacity_profile())
    answer = recommend(
        profile,
        runs=capacity_runs,
        availability=AVAILABLE,
        reference_dir="/nonexistent-reference",
    )
    report = build_report(profile, answer, capacity_runs, {})
    section = report.capacity[0]
    assert section.absent_reason is None and section.table is not None
    assert [row[0].split(",")[0] for row in section.table.rows] == ["vllm", "torch_compile"]
    assert [row[3] for row in section.table.rows] == [2, 4]
    assert section.price_sources == ["profile"]
    assert len(section.probes) == 2 and all(table.rows for table in section.probes)
    percentile = capacity_runs[0].pattern_report.percentile
    assert section.probes[0].columns[5:9] == [
        "Attainment",
        "Attainment 95% CI (Wilson)",
        f"TTFT {percentile} (ms)",
        f"TPOT {percentile} (ms)",
    ]
    for row in section.probes[0].rows:  # every judged probe shows its interval around its share
        if row[5] is not None:
            low, high = (float(end) for end in row[6].split("-"))
            assert low <= row[5] <= high
    chart = next(c for c in report.charts if c.id == section.chart_id)
    assert chart.available and len(chart.series) == 2
    assert "2 x H200 for 35 req/s" in report.headline
    out = os.environ.get("WIRING_REPORT_DIR") or tmp_path  # set it to look at the PDF
    written = generate(report, out, stem="capacity")
    markdown = written["md"].read_text()
    assert "## Capacity and cost" in markdown
    assert "## Appendix E: capacity search probes" in markdown
    assert "GPUs needed at peak" in markdown and "$2,920" in markdown
    html = written["html"].read_text()
    assert 'id="capacity"' in html and 'data-chart="capacity-gpus"' in html
    assert ReportModel.model_validate(json.loads(written["json"].read_text())) == report
    assert written["pdf"].stat().st_size > 10_000


def test_without_a_capacity_the_report_says_why():
    from advisor.report.build import build_report

    profile = profile_from_dict(capacity_profile())
    answer = recommend(profile, availability=AVAILABLE, reference_dir="/nonexistent-reference")
    section = build_report(profile, answer, [], {}).capacity[0]
    assert section.table is None
    assert "no capacity measured on H200 for this workload" in section.absent_reason


def test_the_quick_plan_keeps_its_budget_and_says_what_it_left_out():
    data = capacity_profile(concurrency=8, prompt_tokens={"mean": 512}, output_tokens={"mean": 128})
    plan = plan_for_stage(profile_from_dict(data).stages[0], quick=True, cpu_only=True)
    assert not plan.needs_confirmation, plan.duration_s
    # The CPU quick plan runs a CPU-sized substitute: no capacity search, and it says why.
    assert plan.capacity_configs == []
    assert "No capacity search in the CPU quick plan" in (plan.capacity_note or "")
    assert "the full plan on a GPU host searches it" in plan.capacity_note
