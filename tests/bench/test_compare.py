"""`bench compare` on the shipped H200 campaigns of data/reference (single runs: within-run
intervals only, and said so) and on a campaign of repeats run here with the `fake` backend (a
labelled TEST DOUBLE: no inference)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.core.errors import UserError
from bench.core.schema import RunResult
from bench.orchestrate.campaign import CampaignPlan, run_campaign
from bench.orchestrate.compare import compare, load_side
from bench.orchestrate.executor_registry import LocalExecutor
from tests.bench.test_repeats import fake_config

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference"
S6 = REFERENCE / "h200_llama2-7b_fidelity_event_loop_paired"
FP8 = REFERENCE / "h200_llama2-7b_vllm_fp8"


def test_same_plan_run_twice_on_one_h200(capsys):
    """One fidelity plan (asyncio vs uvloop) ran twice on one H200: shipped campaign files with
    runs-*.tgz."""
    code = main(["compare", str(S6 / "campaign-asyncio-uvloop-1.json"),
                 str(S6 / "campaign-asyncio-uvloop-2.json"),
                 "--bootstrap", "200", "--json"])  # fmt: skip
    assert code == 0
    report = json.loads(capsys.readouterr().out)["campaigns"]
    assert report["same_plan"] and report["a"]["single_run"] and report["b"]["single_run"]
    assert sum("single run" in note for note in report["notes"]) == 2
    drift = {(row["contender"], row["level"]): row["comparison"] for row in report["drift"]}
    assert set(drift) == {("pytorch", "c64"), ("vllm", "c1024"), ("vllm (uvloop)", "c1024")}
    for comparison in drift.values():
        rows = {row["metric"]: row for row in comparison["metrics"]}
        throughput = rows["output_throughput_tok_s"]
        interval = throughput["interval"]
        assert interval["low"] <= throughput["ratio"] <= interval["high"]
        assert any("single run" in note for note in comparison["notes"])
    # The asyncio and uvloop vLLM runs: one workload, two contenders, within 1%: a tie.
    [decision] = report["decisions"]
    assert decision["winner_a"].startswith("tie: vllm") and not decision["flipped"]
    assert code == 0 and main(["compare", str(S6), str(S6)]) == 2  # two campaigns: name one
    assert "several campaigns" in capsys.readouterr().err


def test_ladder_campaign_levels_from_its_steps_archive(capsys):
    """The fp8 campaign (new format; runs in steps-vllm-fp8.tgz): each ladder stage is a level."""
    report = compare(str(FP8), str(FP8 / "campaign-vllm-fp8.json"), bootstrap=100).campaigns
    ladders = [row for row in report.drift if row.level != "c1024"]  # c1024: the fidelity run
    assert {row.level for row in ladders} == {"c1", "c16", "c64", "c256"}
    assert len(ladders) == 12 and len(report.drift) == 13
    # The same measurements on both sides (independent bootstrap streams): nothing changed.
    assert report.changes == []
    for row in report.drift:
        headline = row.comparison.metric("output_throughput_tok_s")
        assert headline.verdict == "indistinguishable"
        assert headline.interval.low < 1.0 < headline.interval.high
    assert report.decisions == []  # every workload (precision) has one contender here


def test_rendered_table_says_single_run(capsys):
    from rich.console import Console

    from bench.orchestrate.compare import render

    report = compare(
        str(S6 / "campaign-asyncio-uvloop-1.json"),
        str(S6 / "campaign-asyncio-uvloop-2.json"),
        bootstrap=100,
    )
    console = Console(width=250, record=True)
    render(report, console)
    text = console.export_text()
    assert "single run" in text and "drift: asyncio-uvloop-2 / asyncio-uvloop-1" in text
    assert "no winner flipped" in text


def test_bad_sides_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such file or folder"):
        load_side("no-such-thing", store=None)
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="not a campaign file"):
        load_side(str(tmp_path / "x.json"))
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    (run_folder / "result.json").write_text(RunResult(config=fake_config()).model_dump_json())
    with pytest.raises(UserError, match="compare a campaign with a campaign"):
        compare(str(FP8), str(run_folder), threshold=0.05)
    with pytest.raises(UserError, match="--threshold"):
        compare(str(FP8), str(FP8), threshold=1.5)


def test_campaign_with_repeats_and_a_slower_contender(tmp_path, tiny_llama):
    """A plan with `repeats: 2` steps: each step is a group; the contender with 1.5x the delays
    loses (real clock on a shared machine: the exact ratio depends on its load, so only the
    direction and significance are checked; the exact 20% case is in test_stats under virtual
    time), and the same campaign compared with itself shows no flip. The delays (60 vs 90 ms a
    request) are long next to a loaded machine's timer overshoot, which at 12 vs 18 ms turned
    the verdict into a tie once."""
    plan = CampaignPlan.model_validate(
        {
            "name": "repeats",
            "steps": [
                {"kind": "run", "name": "fast", "repeats": 2,
                 "config": fake_config(ttft_s=0.02, itl_s=0.005).model_dump()},
                {"kind": "run", "name": "slow", "repeats": 2,
                 "config": fake_config(ttft_s=0.03, itl_s=0.0075).model_dump()},
            ],
        }
    )  # fmt: skip
    out = tmp_path / "campaign"
    result = run_campaign(plan, out, LocalExecutor())
    for outcome in result.steps:
        assert outcome.status == "completed" and len(outcome.runs) == 2
        assert len({run.group.group_id for run in outcome.runs}) == 1
    report = compare(str(out), str(out), bootstrap=300).campaigns
    assert not report.a.single_run and report.same_plan
    [decision] = report.decisions
    assert decision.winner_a == decision.winner_b and not decision.flipped
    assert decision.winner_a.startswith("fake {") and "0.02" in decision.winner_a
    [pair] = decision.ratios
    assert pair.ratio_a > 1.1 and pair.interval_a.low > 1.05  # the faster one, significantly


def test_two_run_folders_per_ladder_stage(tmp_path):
    """Two shipped fp8-campaign run folders (extracted to a temporary folder): FP8 weights vs
    bf16 weights, each ladder stage compared; the c1 stage's 25 requests make its p90/p99
    unreliable, and the comparison says so."""
    import tarfile

    with tarfile.open(FP8 / "steps-vllm-fp8.tgz") as archive:
        members = [
            m for m in archive.getmembers()
            if m.name.endswith(("result.json", "records.jsonl"))
            and m.name.startswith(("steps/vllm_7b_bf16/", "steps/vllm_7b_fp8_weights/"))
        ]  # fmt: skip
        archive.extractall(tmp_path, members=members, filter="data")
    [fp8] = (tmp_path / "steps" / "vllm_7b_fp8_weights" / "runs").iterdir()
    [bf16] = (tmp_path / "steps" / "vllm_7b_bf16" / "runs").iterdir()
    report = compare(str(fp8), str(bf16), bootstrap=200).measurements
    assert [level.level for level in report.levels] == ["c1", "c16", "c64", "c256"]
    assert report.a.single_run and report.b.single_run
    c1 = report.levels[0].comparison
    throughput = c1.metric("output_throughput_tok_s")
    assert throughput.verdict == "faster" and throughput.ratio > 1.2  # FP8 weights, batch 1
    assert not c1.metric("ttft_ms_p99").reliable and c1.metric("ttft_ms_p50").reliable
    assert sum("single run" in note for note in report.notes) == 2


def test_same_plan_twice_names_no_winner_on_an_unreliable_percentile(capsys):
    """The asyncio-uvloop plan ran twice (same configurations): pytorch c64's TPOT p99 and E2E
    p99 come from too few requests for a p99, and their bootstrap intervals alone read "slower";
    no verdict may be drawn from such a percentile, so they read indistinguishable."""
    from rich.console import Console

    from bench.core.stats import compare_draws
    from bench.orchestrate.compare import _campaign_units, render

    a_spec = str(S6 / "campaign-asyncio-uvloop-1.json")
    b_spec = str(S6 / "campaign-asyncio-uvloop-2.json")
    report = compare(a_spec, b_spec, bootstrap=200)
    a, b = load_side(a_spec), load_side(b_spec)
    units_a, units_b = _campaign_units(a, 200, 0), _campaign_units(b, 200, 1)
    unreliable_winners = 0  # what the interval alone would have said
    for key, unit_a in units_a.items():
        raw = compare_draws(units_b[key].draws, unit_a.draws, b.name, a.name, 0.05)
        unreliable_winners += sum(row.significant and not row.reliable for row in raw.metrics)
    assert unreliable_winners >= 2  # the case exists in this data
    for row in report.campaigns.drift:
        for metric in row.comparison.metrics:
            if not metric.reliable:
                assert not metric.significant and metric.verdict == "indistinguishable", metric
    console = Console(width=250, record=True)
    render(report, console)
    (pytorch,) = [line for line in console.export_text().splitlines() if "pytorch" in line]
    e2e_p99 = pytorch.split("│")[-2]  # the last column: x1.196, which read "slower" before
    assert e2e_p99.strip().startswith("1.196") and "slower" not in e2e_p99, pytorch


def test_measurement_verdicts_say_not_enough_data_and_within_spread():
    """Verdict wording: an unreliable percentile says "not enough data"; repeats whose values
    overlap say indistinguishable (within the spread), even with an interval beyond the
    threshold; a winner is named only past all three checks."""
    from bench.core.stats import GroupDraws, Interval, MetricComparison, RunSample
    from bench.orchestrate.compare import verdict_text, within_spread

    def group(*values: float) -> GroupDraws:
        samples = [RunSample(f"r{i}", None, point={"ttft_ms_p50": v}) for i, v in enumerate(values)]
        return GroupDraws(samples=samples, draws={}, metrics=[])

    assert within_spread("ttft_ms_p50", group(10, 14), group(12, 20))
    assert not within_spread("ttft_ms_p50", group(10, 11), group(12, 20))
    assert not within_spread("ttft_ms_p50", group(10), group(12, 20))  # a single run: no spread
    row = MetricComparison(
        metric="ttft_ms_p99", label="TTFT p99", unit="ms", better="lower", a=1.0, b=2.0,
        ratio=0.5, interval=Interval(low=0.4, high=0.6), verdict="faster", significant=True,
        threshold=0.05,
    )  # fmt: skip
    assert verdict_text(row, "A") == "A faster"
    assert verdict_text(row.model_copy(update={"reliable": False}), "A") == "not enough data"
    assert verdict_text(row, "A", spread=True).startswith("indistinguishable")
