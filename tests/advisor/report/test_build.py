"""Assembling the report data: evidence from runs, sources, caveats, floors, charts' absence."""

from __future__ import annotations

import pytest

from advisor.report.build import build_report, load_reference, relevant_run_ids
from advisor.report.model import Report
from tests.advisor.report.conftest import (
    advisor_answer_double,
    profile_double,
    synthetic_run,
)


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
    assert synthetic_report.meta.profile_file == "checkout.yaml"
    assert synthetic_report.stages[0].framework == "vllm"
    assert synthetic_report.stages[0].path[0].question.startswith("Needs dynamic")


def test_source_is_the_advisors_mark_or_the_fingerprint_comparison() -> None:
    here, here_records = synthetic_run("pytorch", "concurrency", seed=5)
    away, away_records = synthetic_run("onnxruntime", "concurrency", seed=6)
    away.environment = {**away.environment, "hostname": "another-host"}
    report = build_report(
        profile_double("t"),
        {"stages": [{"name": "s", "recommendation": {"framework": "pytorch"}}]},
        [here, away],
        {here.run_id: here_records, away.run_id: away_records},
        environment={"hostname": "synthetic-host", "libraries": {"torch": "2.13.0"}},
    )
    sources = {row.run_id: row.source for row in report.evidence}
    assert sources == {here.run_id: "measured-here", away.run_id: "measured-elsewhere"}


def test_frameworks_not_measured_become_caveats_with_the_reason(synthetic_report: Report) -> None:
    not_measured = [c for c in synthetic_report.caveats if c.kind == "not-measured"]
    assert [c.framework for c in not_measured] == ["tensorrt_llm"]
    assert "tensorrt_llm is not installed" in not_measured[0].text


def test_seed_reference_is_never_mixed_into_the_evidence(synthetic_report: Report) -> None:
    assert synthetic_report.reference is not None
    assert all(row.source != "published" for row in synthetic_report.evidence)
    assert all(row.framework != "PyTorch native" for row in synthetic_report.evidence)


def test_advisors_other_published_rows_are_marked_but_seed_rows_are_not_repeated() -> None:
    run, records = synthetic_run("vllm", "concurrency", seed=7)
    answer = advisor_answer_double([run.run_id], ["vllm"])
    answer["stages"][0]["recommendation"]["evidence"] += [
        {
            "framework": "vllm",
            "source": "published",
            "reference": "seed_a100_llama2_13b.json: x",
            "metrics": {"request_throughput_rps": 61.8},
        },
        {
            "framework": "tensorrt_llm",
            "source": "published",
            "reference": "vendor_h100.json: y",
            "metrics": {"request_throughput_rps": 99.5, "ttft_ms": 55.0},
        },
    ]
    report = build_report(profile_double("t"), answer, [run], {run.run_id: records})
    published = [row for row in report.evidence if row.source == "published"]
    assert [(r.framework, r.request_throughput_rps, r.ttft_p50_ms) for r in published] == [
        ("tensorrt_llm", 99.5, 55.0)
    ]
    assert report.evidence[-1].source == "published"  # measurements first


def test_floor_distance_uses_datasheet_bandwidth_for_gpu_runs(synthetic_report: Report) -> None:
    from advisor.gpus import find_gpu

    spec = find_gpu("NVIDIA H100 80GB HBM3")
    assert spec is not None
    gpu = next(d for d in synthetic_report.floor_distances if d.framework == "vllm")
    expected_floor_ms = 8e9 / (spec.memory_bandwidth_tb_s * 1e12) * 1e3
    assert gpu.decode_floor_ms == pytest.approx(expected_floor_ms)
    assert gpu.ratio_to_floor == pytest.approx(gpu.measured_tpot_p50_ms / expected_floor_ms)
    assert gpu.percent_of_floor == pytest.approx(100 / gpu.ratio_to_floor)
    cpu = next(d for d in synthetic_report.floor_distances if d.framework == "pytorch")
    assert cpu.decode_floor_ms is None and "CPU" in cpu.note


def test_estimate_floor_read_from_the_advisor(synthetic_report: Report) -> None:
    assert synthetic_report.estimate.available
    assert synthetic_report.estimate.fits is True
    assert synthetic_report.estimate.decode_floor_ms == pytest.approx(7.8)
    assert "fp8 KV cache" in synthetic_report.estimate.notes


def test_charts_drawn_only_with_data_and_absence_explained(synthetic_report: Report) -> None:
    charts = {chart.id: chart for chart in synthetic_report.charts}
    assert charts["steady-state-slopes"].available is False
    assert "no steady-pattern run" in (charts["steady-state-slopes"].absent_reason or "")
    knee = charts["throughput-vs-concurrency"].markers
    assert [m.x for m in knee] == [2.0]
    assert charts["pulse-recovery"].available and len(charts["pulse-recovery"].markers) == 2
    assert "recovery_s = 1.5" in charts["pulse-recovery"].description
    assert charts["power-over-time"].available  # the GPU double has power samples


def test_no_runs_means_every_chart_absent_with_a_reason() -> None:
    report = build_report(profile_double("t"), {}, [], {})
    assert report.charts and not report.available_charts()
    assert all(chart.absent_reason for chart in report.charts)
    assert report.headline == "The advisor returned no recommendation."


def test_cpu_only_runs_say_why_power_is_absent() -> None:
    run, records = synthetic_run("pytorch", "concurrency", seed=8)
    report = build_report(profile_double("t"), {}, [run], {run.run_id: records})
    power = next(chart for chart in report.charts if chart.id == "power-over-time")
    assert not power.available and "no GPU" in (power.absent_reason or "")
    memory = next(chart for chart in report.charts if chart.id == "memory-over-time")
    assert memory.available and "host RSS" in memory.description


def test_diagnostics_and_reproduce_commands(synthetic_report: Report) -> None:
    assert synthetic_report.diagnostics[0].title == "long tail"
    assert synthetic_report.diagnostics[0].command.startswith("nsys profile")
    assert {entry.command for entry in synthetic_report.reproduce} == {
        f"python -m bench run --backend {b} --model tiny-llama --pattern {p}"
        for b, p in (("vllm", "concurrency"), ("pytorch", "step"), ("pytorch", "pulse"))
    }


def test_relevant_run_ids_from_the_advisors_evidence() -> None:
    answer = advisor_answer_double(["a", "b"], ["vllm", "pytorch"])
    assert relevant_run_ids(answer) == ["a", "b"]


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
    from advisor.report.build import SEED_REFERENCE_FILE
    from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

    table = load_reference(SHIPPED_REFERENCE_DIR / SEED_REFERENCE_FILE)
    frameworks = [row[table.keys.index("framework")] for row in table.rows]
    assert sorted(frameworks) == ["onnxruntime", "pytorch", "tensorrt_llm", "vllm"]
    vllm = table.rows[frameworks.index("vllm")]
    assert vllm[table.keys.index("request_throughput_rps")] == 61.8
    assert any("not stated" in caveat for caveat in table.caveats)
