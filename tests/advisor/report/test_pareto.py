"""The Pareto chart (tok/s per GPU vs tok/s per user) on the shipped H200 runs."""

from __future__ import annotations

import pytest

from advisor.report.charts import PARETO_MAX_CONFIGURATIONS, pareto_chart, render_svg
from advisor.sizing.calibration import calibration_from
from advisor.sizing.configurations import search_configurations
from advisor.sizing.measured import read_reference_folder
from advisor.workload.profile_input import profile_from_flags
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR


@pytest.fixture(scope="module")
def search():
    calibration = calibration_from([], read_reference_folder(SHIPPED_REFERENCE_DIR).runs)
    stage = profile_from_flags(
        model="llama-2-7b", gpu="H200", prompt_tokens=128, output_tokens=128, concurrency=256
    ).primary
    return search_configurations(
        stage,
        "vllm",
        calibration[1].lookup(stage),
        lambda deployment: calibration[0].measured_levels(stage, deployment),
    )


def test_pareto_chart_on_shipped_runs(search) -> None:
    chart = pareto_chart(search)
    assert chart.available
    names = [series.name for series in chart.series]
    measured = [s for s in chart.series if s.name.endswith("(measured)")]
    assert measured, names  # the shipped vLLM TP=1 ladder on the H200 is drawn as measured
    tp1 = measured[0]
    assert tp1.name.startswith("vllm TP=1")
    # x = 1000 / TPOT p50: the batch-1 level is the fastest per user, the c256 level the slowest
    assert tp1.x == sorted(tp1.x) and len(tp1.x) >= 4
    assert max(tp1.x) > 150 and min(tp1.x) < 60
    # y = output tok/s per GPU: one GPU, so the c256 level is the ~10k tok/s the runs measured
    assert max(tp1.y) > 9000
    assert len({s.name.removesuffix(" (estimate)") for s in chart.series}) <= 2 * (
        PARETO_MAX_CONFIGURATIONS
    )
    assert chart.markers and chart.markers[0].label.startswith("recommended: ")
    assert "(measured)" in chart.markers[0].label
    svg = render_svg(chart)
    assert "<svg" in svg and "tok/s per user" in svg


def test_pareto_chart_absent_without_a_search() -> None:
    chart = pareto_chart(None)
    assert not chart.available and chart.absent_reason


def test_report_formats_carry_the_search_the_chart_and_the_calibration(
    tmp_path, monkeypatch
) -> None:
    """The shipped chat profile through `advisor report` over the shipped runs: the Pareto chart
    with the recommended (measured) point, the configuration table, the leave-one-out table."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from advisor.cli import app
    from advisor.sizing import measured
    from bench.storage.store import ResultStore

    monkeypatch.setattr(measured, "DEFAULT_REFERENCE_DIR", SHIPPED_REFERENCE_DIR)
    ResultStore(tmp_path / "empty.sqlite").close()
    profile = Path(__file__).resolve().parents[3] / "examples" / "profiles" / "chat_7b_h200.yaml"
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            *("report", "--profile", str(profile), "--out", str(out)),
            *("--format", "md,html,json", "--store", str(tmp_path / "empty.sqlite")),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads((out / "chat_7b_h200.json").read_text())
    (chart,) = [c for c in data["charts"] if c["id"] == "pareto-per-gpu-vs-per-user"]
    assert chart["available"] and chart["markers"][0]["label"].startswith("recommended: vllm")
    assert any(s["name"].endswith("(measured)") for s in chart["series"])
    table = data["stages"][0]["configurations"]
    assert table["rows"][0][0] == "vllm TP=1 float16"
    assert table["rows"][0][6] is not None  # measured TPOT beside the prediction
    calibration = data["calibration"]
    assert len(calibration["rows"]) >= 20 and "10%-per-partition gate" in calibration["note"]
    for name in ("chat_7b_h200.md", "chat_7b_h200.html"):
        text = (out / name).read_text()
        assert "Estimate accuracy" in text and "Configurations of vllm" in text
        assert "lm-evaluation-harness" in text
    assert (out / "chat_7b_h200-charts" / "pareto-per-gpu-vs-per-user.svg").is_file()
