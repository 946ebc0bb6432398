"""Assembling the report data from the advisor's real answer: every advisor field the report
shows is read by name (a renamed field fails here), evidence, sources, caveats, floors, charts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from advisor.report.build import build_report, relevant_run_ids
from advisor.report.model import Report
from advisor.report.reference import load_reference
from bench.core.fingerprint import Fingerprint
from tests.advisor.conftest import SEED_FILE, SHIPPED_REFERENCE_DIR
from tests.advisor.report.conftest import (
    real_answer,
    store_with,
    synthetic_run,
    workload_profile,
)


@pytest.fixture
def answer_and_report(tmp_path: Path):
    """The advisor's real answer and the report built from it, over one store of doubles."""
    from advisor.report.build import report_for
    from advisor.sizing.measured import read_reference_folder

    gpu = synthetic_run(
        "vllm", "concurrency", gpu=True, seed=3, engine_args={"enforce_eager": True}
    )
    step = synthetic_run("pytorch", "step", seed=1)
    store = store_with(tmp_path / "s.sqlite", [gpu, step])
    profile = workload_profile("t")
    answer = real_answer(profile, store, SHIPPED_REFERENCE_DIR)
    reference = read_reference_folder(SHIPPED_REFERENCE_DIR)
    report = report_for(profile, answer, store, reference, [gpu[0].run_id, step[0].run_id])
    return answer, report


def test_evidence_rows_carry_the_runs_own_numbers(synthetic_report: Report) -> None:
    step, _ = synthetic_run("pytorch", "step", seed=1)
    row = next(r for r in synthetic_report.evidence if r.run_id == step.run_id)
    assert step.summary is not None and step.summary.tpot_ms and step.summary.e2e_ms
    assert row.request_throughput_rps == pytest.approx(step.summary.request_throughput_rps)
    assert row.output_throughput_tok_s == pytest.approx(step.summary.output_throughput_tok_s)
    assert row.tpot_p50_ms == pytest.approx(step.summary.tpot_ms.p50)
    assert row.e2e_p99_ms == pytest.approx(step.summary.e2e_ms.p99)
    assert row.validity == "VALID"
    gpu_row = next(r for r in synthetic_report.evidence if r.framework == "vllm")
    assert gpu_row.peak_gpu_memory_gb == pytest.approx(21.1)
    assert gpu_row.energy_per_output_token_j == pytest.approx(0.42)


def test_meta_comes_from_the_profiles_free_text(synthetic_report: Report) -> None:
    assert synthetic_report.meta.title.startswith("Checkout <script>")
    assert synthetic_report.meta.for_whom == "Platform team <ml-platform@example.com>"
    assert synthetic_report.meta.description == "Review on Friday | bring numbers"
    assert synthetic_report.meta.profile_file == "checkout.yaml"


def test_every_shown_advisor_field_reaches_the_report(answer_and_report) -> None:
    """Each StageReport field equals the advisor's field it comes from: a field renamed or
    re-shaped in the advisor fails here instead of silently dropping text."""
    answer, report = answer_and_report
    stage, shown = answer.stages[0], report.stages[0]
    chosen = stage.recommendation
    assert shown.name == stage.stage and shown.kind == stage.kind == "generate"
    assert shown.framework == chosen.framework == "vllm"  # measured on the profile's GPU type
    assert chosen.follows == "measurements"
    assert shown.configuration == chosen.configuration and shown.configuration
    assert shown.confidence == chosen.confidence.level
    assert f"Confidence {chosen.confidence.level}: {chosen.confidence.why}" in shown.rationale
    assert [(s.question, s.answer, s.why) for s in shown.path] == [
        (s.question, s.answer, s.why) for s in stage.decision.path
    ]
    assert shown.path and all(s.question and s.answer for s in shown.path)
    assert shown.candidates == [c.framework for c in stage.decision.candidates]
    assert [(a.framework, a.reason) for a in shown.alternatives] == [
        (a.framework, a.why_not_first) for a in chosen.alternatives
    ]
    assert all(a.reason for a in shown.alternatives)
    expected_changes = [
        f"{a.framework}: {c}" for a in chosen.alternatives for c in a.what_would_change
    ]
    assert shown.what_would_change == list(dict.fromkeys(expected_changes))
    assert shown.caveats == list(dict.fromkeys(chosen.caveats))
    assert stage.learned is not None and shown.second_opinion
    assert stage.learned.message.rstrip(". ") in shown.second_opinion
    assert report.headline == chosen.headline
    assert chosen.headline.startswith(f"generation: vllm (confidence {chosen.confidence.level})")


def test_estimate_is_the_advisors(answer_and_report) -> None:
    answer, report = answer_and_report
    estimate = answer.stages[0].estimate
    assert report.estimate.available
    assert report.estimate.fits == estimate.fits
    assert report.estimate.decode_floor_ms == estimate.decode_floor_ms_per_token
    assert report.estimate.decode_floor_ms is not None
    assert report.estimate.notes == [*estimate.notes, *estimate.suggestions]
    keys = {item.key for item in report.estimate.items}
    assert {"Weights (GB)", "Required (GB)", "Decode floor (ms per token)"} <= keys


def test_diagnostics_are_the_advisors_findings_for_the_reported_runs(answer_and_report) -> None:
    answer, report = answer_and_report
    reported = {run.run_id for run in report.runs}
    expected = {
        (d.run_id, d.rule.replace("_", " "), d.finding, d.command)
        for stage in answer.stages
        for d in stage.diagnostics
        if d.run_id in reported
    }
    shown = {(d.run_id, d.title, d.finding, d.command) for d in report.diagnostics}
    assert shown == expected
    cuda = [d for d in report.diagnostics if d.title == "cuda graphs off"]
    assert cuda and cuda[0].framework == "vllm" and cuda[0].command.startswith("nsys profile")


def test_source_is_the_advisors_mark(answer_and_report) -> None:
    _, report = answer_and_report
    sources = {row.framework: row.source for row in report.evidence if row.run_id}
    assert sources == {"vllm": "measured-here", "pytorch": "measured-elsewhere"}
    assert {ref.framework: ref.source for ref in report.runs} == sources


def test_a_run_the_advisor_did_not_weigh_is_compared_by_fingerprint(tmp_path: Path) -> None:
    """Runs named for the report but not in the advisor's evidence (here: not in its store),
    with no GPU type in the profile: measured-here only on this machine's fingerprint."""
    here = synthetic_run("pytorch", "concurrency", seed=5)
    away = synthetic_run("onnxruntime", "concurrency", seed=6)
    away[0].environment = away[0].environment.model_copy(update={"hostname": "another-host"})
    store = store_with(tmp_path / "s.sqlite", [])
    profile = workload_profile("t", gpu=None)
    report = build_report(
        profile,
        real_answer(profile, store, SHIPPED_REFERENCE_DIR),
        [here[0], away[0]],
        {here[0].run_id: here[1], away[0].run_id: away[1]},
        environment=Fingerprint(hostname="synthetic-host", libraries={"torch": "2.13.0"}),
    )
    sources = {row.run_id: row.source for row in report.evidence if row.run_id}
    assert sources == {here[0].run_id: "measured-here", away[0].run_id: "measured-elsewhere"}


def test_frameworks_not_measured_become_caveats_with_the_advisors_reason(
    answer_and_report,
) -> None:
    answer, report = answer_and_report
    availability = answer.stages[0].recommendation.availability
    not_measured = {c.framework: c.text for c in report.caveats if c.kind == "not-measured"}
    candidates = [c.framework for c in answer.stages[0].decision.candidates]
    assert set(not_measured) == set(candidates) - {"vllm", "pytorch"}
    for name, text in not_measured.items():
        state = availability[name]
        assert (state in text) if state != "available" else ("no stored run" in text)


def test_seed_reference_is_never_mixed_into_the_evidence(synthetic_report: Report) -> None:
    assert synthetic_report.reference is not None
    assert all(row.source != "published" for row in synthetic_report.evidence)


def test_advisors_other_published_rows_are_marked_but_seed_rows_are_not_repeated(
    tmp_path: Path,
) -> None:
    """TEST DATA: a second published table (a vendor's, invented here) beside the seed's."""
    folder = tmp_path / "reference"
    folder.mkdir()
    shutil.copy(SHIPPED_REFERENCE_DIR / SEED_FILE, folder / SEED_FILE)
    (folder / "vendor_h100.json").write_text(
        json.dumps(
            {
                "kind": "published",
                "source": {"title": "TEST DATA vendor table"},
                "model": "tiny-llama",
                "workload_kind": "generate",
                "environment": {"gpu": "H100-SXM"},
                "rows": [
                    {
                        "framework": "tensorrt_llm",
                        "request_throughput_rps": 99.5,
                        "ttft_ms_p50": 55.0,
                    }
                ],
            }
        )
    )
    run, records = synthetic_run("vllm", "concurrency", gpu=True, seed=7)
    store = store_with(tmp_path / "s.sqlite", [(run, records)])
    profile = workload_profile("t")
    answer = real_answer(profile, store, folder)
    report = build_report(profile, answer, [run], {run.run_id: records})
    published = [row for row in report.evidence if row.source == "published"]
    assert [(r.framework, r.request_throughput_rps, r.ttft_p50_ms) for r in published] == [
        ("tensorrt_llm", 99.5, 55.0)
    ]
    assert "vendor_h100.json" in published[0].context
    assert report.evidence[-1].source == "published"  # measurements first


def test_floor_distance_uses_datasheet_bandwidth_for_gpu_runs(synthetic_report: Report) -> None:
    from advisor.workload.gpus import find_gpu

    spec = find_gpu("NVIDIA H100 80GB HBM3")
    assert spec is not None
    gpu = next(d for d in synthetic_report.floor_distances if d.framework == "vllm")
    expected_floor_ms = 8e9 / (spec.memory_bandwidth_tb_s * 1e12) * 1e3
    assert gpu.decode_floor_ms == pytest.approx(expected_floor_ms)
    assert gpu.ratio_to_floor == pytest.approx(gpu.measured_tpot_p50_ms / expected_floor_ms)
    assert gpu.percent_of_floor == pytest.approx(100 / gpu.ratio_to_floor)
    cpu = next(d for d in synthetic_report.floor_distances if d.framework == "pytorch")
    assert cpu.decode_floor_ms is None and "CPU" in cpu.note


def test_charts_drawn_only_with_data_and_absence_explained(synthetic_report: Report) -> None:
    charts = {chart.id: chart for chart in synthetic_report.charts}
    assert charts["steady-state-slopes"].available is False
    assert "no steady-pattern run" in (charts["steady-state-slopes"].absent_reason or "")
    knee = charts["throughput-vs-concurrency"].markers
    assert [m.x for m in knee] == [2.0]
    assert charts["pulse-recovery"].available and len(charts["pulse-recovery"].markers) == 2
    # The synthetic recovery phase stays 20% slower than baseline: the real analysis says so.
    description = charts["pulse-recovery"].description
    assert "analysis.recovered = False" in description
    assert "analysis.baseline_p99_e2e_ms = " in description and "_ns =" not in description
    assert charts["power-over-time"].available  # the GPU double has power samples
    assert charts["latency-distribution"].available


def test_no_runs_means_every_chart_absent_with_a_reason(tmp_path: Path) -> None:
    store = store_with(tmp_path / "s.sqlite", [])
    profile = workload_profile("t")
    answer = real_answer(profile, store, SHIPPED_REFERENCE_DIR)
    report = build_report(profile, answer, [], {})
    # Every chart of runs is absent; the Pareto chart draws the configuration estimates.
    run_charts = [chart for chart in report.charts if not chart.id.startswith("pareto")]
    assert run_charts and not [chart for chart in run_charts if chart.available]
    assert all(chart.absent_reason for chart in run_charts)
    tree_first = answer.stages[0].decision.candidates[0].framework
    assert report.stages[0].framework == tree_first
    assert report.headline.startswith(f"generation: {tree_first} (confidence ")


def test_cpu_only_runs_say_why_power_is_absent(tmp_path: Path) -> None:
    run, records = synthetic_run("pytorch", "concurrency", seed=8)
    store = store_with(tmp_path / "s.sqlite", [(run, records)])
    profile = workload_profile("t")
    report = build_report(
        profile,
        real_answer(profile, store, SHIPPED_REFERENCE_DIR),
        [run],
        {run.run_id: records},
    )
    power = next(chart for chart in report.charts if chart.id == "power-over-time")
    assert not power.available and "no GPU" in (power.absent_reason or "")
    memory = next(chart for chart in report.charts if chart.id == "memory-over-time")
    assert memory.available and "host RSS" in memory.description


def test_reproduce_commands_are_the_runs_own(synthetic_report: Report) -> None:
    assert {entry.command for entry in synthetic_report.reproduce} == {
        f"python -m bench run --backend {b} --model tiny-llama --pattern {p}"
        for b, p in (("vllm", "concurrency"), ("pytorch", "step"), ("pytorch", "pulse"))
    }


def test_relevant_run_ids_are_the_settling_runs_then_the_nearest(answer_and_report) -> None:
    answer, report = answer_and_report
    cited = relevant_run_ids(answer)
    # The vLLM GPU run matches the stage and settles it; the CPU step run (given explicitly to
    # the report) is on no GPU of the profile's type, so the default runs leave it out.
    assert (
        cited == answer.stages[0].recommendation.settled_by_runs == ["synthetic-vllm-concurrency-3"]
    )
    assert len(report.runs) == 2
    settled_or_near = [
        run_id
        for stage in answer.stages
        for run_id in [
            *stage.recommendation.settled_by_runs,
            *(i for row in stage.recommendation.nearest for i in row.run_ids),
        ]
    ]
    assert set(cited) == set(settled_or_near) and len(cited) == len(set(cited))
    every_row = {i for stage in answer.stages for row in stage.evidence for i in row.run_ids}
    assert set(cited) <= every_row


def test_load_reference_reads_the_advisors_published_layout(tmp_path) -> None:
    path = tmp_path / "seed.json"
    path.write_text(
        '{"kind": "published", "model": "Llama-2-13B", "source": {"title": "Seed article"},'
        ' "environment": {"gpu": "A100-80GB-PCIE"}, "caveats": ["workload unstated"],'
        ' "rows": [{"framework": "vllm", "request_throughput_rps": 61.8, "p99_ms": 380}]}'
    )
    table = load_reference(path)
    assert table.keys == ["framework", "request_throughput_rps", "p99_ms"]
    assert table.columns == ["Framework", "Requests/s", "p99 ms"]
    assert table.rows == [["vllm", 61.8, 380]]
    assert table.source == "Seed article"
    assert "A100-80GB-PCIE" in table.conditions and "Llama-2-13B" in table.conditions
    assert table.caveats == ["workload unstated"]


def test_the_seed_reference_file_loads_with_its_four_frameworks() -> None:
    from advisor.report.reference import SEED_REFERENCE_FILE

    table = load_reference(SHIPPED_REFERENCE_DIR / SEED_REFERENCE_FILE)
    frameworks = [row[table.keys.index("framework")] for row in table.rows]
    assert sorted(frameworks) == ["onnxruntime", "pytorch", "tensorrt_llm", "vllm"]
    vllm = table.rows[frameworks.index("vllm")]
    assert vllm[table.keys.index("request_throughput_rps")] == 61.8
    assert any("not stated" in caveat for caveat in table.caveats)


def test_same_advice_is_grouped_and_printed_once(tmp_path: Path) -> None:
    from advisor.report.build import report_for
    from advisor.report.markdown import render_markdown
    from advisor.sizing.measured import read_reference_folder

    eager = {"enforce_eager": True}
    first = synthetic_run("vllm", "concurrency", gpu=True, seed=21, engine_args=eager)
    other = synthetic_run("pytorch", "step", seed=22)
    second = synthetic_run("vllm", "concurrency", gpu=True, seed=23, engine_args=eager)
    store = store_with(tmp_path / "s.sqlite", [first, other, second])
    profile = workload_profile("t")
    answer = real_answer(profile, store, SHIPPED_REFERENCE_DIR)
    ids = [first[0].run_id, other[0].run_id, second[0].run_id]
    report = report_for(profile, answer, store, read_reference_folder(SHIPPED_REFERENCE_DIR), ids)
    titles = [d.title for d in report.diagnostics]
    cuda = [i for i, title in enumerate(titles) if title == "cuda graphs off"]
    assert len(cuda) == 2 and cuda[1] == cuda[0] + 1  # adjacent
    text = render_markdown(report, {chart.id: "x.svg" for chart in report.available_charts()})
    advice = report.diagnostics[cuda[0]].advice
    # One group per rule and advice: its findings listed, the advice printed once.
    group = next(g for g in report.diagnostic_groups() if g.title == "cuda graphs off")
    assert [d.run_id for d in group.findings] == [report.diagnostics[i].run_id for i in cuda]
    assert text.count("### cuda graphs off (warning, 2 finding(s))") == 1
    assert text.count(advice.split(":")[0]) == 1
