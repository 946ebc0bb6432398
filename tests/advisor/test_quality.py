"""Quality beside speed in the advisor, on the shipped quality measurement
(data/reference/quality/cpu_tiny-llama-trained/quality.json, written by `python -m bench
quality`): the tolerance rule, the Quality column and page 1's measured delta."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from advisor.report.build import assemble_report
from advisor.sizing.configurations import FP8_ACCURACY_NOTE
from advisor.workload.quality import (
    QUALITY_NOTE_PREFIX,
    beyond_tolerance,
    quality_cell,
    stage_quality,
)
from bench.core.config import PrecisionConfig
from bench.core.errors import UserError
from bench.storage.store import ResultStore

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "data" / "reference" / "quality" / "cpu_tiny-llama-trained" / "quality.json"
FP8 = PrecisionConfig(dtype="bfloat16", quantization="fp8")
BF16 = PrecisionConfig(dtype="bfloat16")


def test_the_rule_reads_the_measured_loss():
    result = stage_quality(str(SHIPPED))
    assert result is not None and result.baseline == "bf16"
    loss = result.precision("fp8").loss_pct()
    assert loss is not None and loss > 0  # the shipped FP8 delta is a small increase
    assert beyond_tolerance(result, FP8, tolerance_pct=loss / 2) is not None
    assert beyond_tolerance(result, FP8, tolerance_pct=loss * 2) is None
    assert beyond_tolerance(result, BF16, tolerance_pct=0.0) is None  # the baseline: no delta
    # fp8-kv was not run on PyTorch: FP8 weights alone are its floor
    fp8_kv = PrecisionConfig(dtype="bfloat16", quantization="fp8", kv_cache_dtype="fp8")
    assert beyond_tolerance(result, fp8_kv, tolerance_pct=loss / 2).startswith("FP8 weights alone")
    assert beyond_tolerance(result, fp8_kv, tolerance_pct=loss * 2) is None
    assert quality_cell(result, fp8_kv).startswith("not run:")
    fp16_kv = PrecisionConfig(dtype="float16", kv_cache_dtype="fp8")  # measured by nothing
    assert beyond_tolerance(result, fp16_kv, tolerance_pct=0.0) is None
    assert "(baseline)" in quality_cell(result, BF16)
    assert quality_cell(result, PrecisionConfig(dtype="float16")) == "fp16 not measured"
    assert stage_quality(None) is None


def test_a_bad_quality_file_is_a_user_error(tmp_path):
    bad = tmp_path / "quality.json"
    bad.write_text('{"model": "x"}')
    with pytest.raises(UserError, match="quality result"):
        stage_quality(str(bad))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("store") / "empty.sqlite"
    ResultStore(path).close()
    return str(path)


def _report(tmp_path: Path, store: str, tolerance: float | None):
    profile = yaml.safe_load((REPO / "examples" / "profiles" / "chat_7b_h200.yaml").read_text())
    profile["precision"] = {"dtype": "bfloat16", "quantization": "fp8"}
    if tolerance is not None:
        profile["quality_result"] = str(SHIPPED)
        profile["max_quality_loss_pct"] = tolerance
    path = tmp_path / f"profile-{tolerance}.yaml"
    path.write_text(yaml.safe_dump(profile))
    return assemble_report(path, store_location=store)


def test_report_shows_quality_beside_speed_and_page_1_names_the_delta(tmp_path, store):
    report = _report(tmp_path, store, tolerance=1.0)
    (stage,) = report.stages
    table = stage.configurations
    assert table is not None and table.columns[-1] == "Quality"
    cells = {row[0]: row[-1] for row in table.rows}
    fp8_rows = [label for label in cells if "fp8 weights" in label and "KV" not in label]
    assert fp8_rows and all("ppl 296.1 (+0.0817" in cells[label] for label in fp8_rows)
    (decision,) = report.decisions
    measured = [risk for risk in decision.risks if risk.startswith(QUALITY_NOTE_PREFIX)]
    assert (
        len(measured) == 1 and "fp8 ppl 296.1 (+0.0817, +0.03%, indistinguishable)" in (measured[0])
    )
    assert FP8_ACCURACY_NOTE not in stage.caveats


def test_a_precision_beyond_the_tolerated_loss_is_not_recommended(tmp_path, store):
    report = _report(tmp_path, store, tolerance=0.01)  # below FP8's measured +0.03%
    (stage,) = report.stages
    labels = [row[0] for row in stage.configurations.rows]
    assert labels and not any("fp8 weights" in label for label in labels)
    assert "fp8" not in (stage.configuration.precision.quantization or "")
    assert any(
        "measured quality loss 0.03% vs bf16 exceeds" in c for c in stage.configurations.caveats
    )


def test_without_a_quality_file_the_risk_stays_worded_as_before(tmp_path, store):
    report = _report(tmp_path, store, tolerance=None)
    (stage,) = report.stages
    assert stage.configurations.columns[-1] != "Quality"
    (decision,) = report.decisions
    assert any(risk.startswith("FP8 accuracy is unchecked") for risk in decision.risks)


def _fp8_profile(tmp_path: Path) -> Path:
    profile = yaml.safe_load((REPO / "examples" / "profiles" / "chat_7b_h200.yaml").read_text())
    profile["precision"] = {"dtype": "bfloat16", "quantization": "fp8"}
    path = tmp_path / "fp8.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path


def test_recommend_flags_set_the_quality_fields(tmp_path, store):
    from advisor.cli import app

    args = ["recommend", "--profile", str(_fp8_profile(tmp_path)), "--json", "--store", store]
    quality = ["--quality-result", str(SHIPPED), "--max-quality-loss-pct", "0.01"]
    result = CliRunner().invoke(app, [*args, *quality])
    assert result.exit_code == 0, result.output
    (stage,) = json.loads(result.output)["stages"]
    search = stage["configurations"]
    assert search["quality_note"].startswith(QUALITY_NOTE_PREFIX)
    assert not any("fp8 weights" in row["label"] for row in search["estimates"])  # 0.03% > 0.01%
    assert any("exceeds the tolerated 0.01%" in why for why in search["excluded"])
    loose = CliRunner().invoke(app, [*args, "--quality-result", str(SHIPPED)])  # default 1%
    (stage,) = json.loads(loose.output)["stages"]
    assert any("fp8 weights" in row["label"] for row in stage["configurations"]["estimates"])


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--quality-result", "absent.json"], "absent.json"),
        (["--quality-result", str(SHIPPED), "--max-quality-loss-pct", "101"], "max-quality-loss"),
    ],
)
def test_bad_quality_flags_are_one_line_and_exit_2(tmp_path, store, flags, needle):
    from advisor.cli import app

    profile = str(_fp8_profile(tmp_path))
    result = CliRunner().invoke(app, ["recommend", "--profile", profile, "--store", store, *flags])
    assert result.exit_code == 2
    assert needle in result.output and result.output.strip().count("\n") == 0


def test_report_flags_set_the_quality_fields(tmp_path, store):
    import typer

    from advisor.report.cli import register

    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps the `app report ...` form
    profile = str(_fp8_profile(tmp_path))
    args = ["report", "--profile", profile, "--store", store, "--format", "json"]
    result = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "out"), "--quality-result", str(SHIPPED)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    (decision,) = data["decisions"]
    assert any(risk.startswith(QUALITY_NOTE_PREFIX) for risk in decision["risks"])
    bad = CliRunner().invoke(
        app, [*args, "--out", str(tmp_path / "o2"), "--quality-result", str(tmp_path)]
    )
    assert bad.exit_code == 2 and bad.output.strip().count("\n") == 0


CLASSIFIER = REPO / "data" / "reference" / "quality" / "cpu_tiny-bert-classifier" / "quality.json"


def _encoder_report(tmp_path: Path, store: str, quantization: str | None, tolerance: float):
    profile = yaml.safe_load(
        (REPO / "examples" / "profiles" / "multi_backend_edge.yaml").read_text()
    )
    profile["quality_result"] = str(CLASSIFIER)
    profile["max_quality_loss_pct"] = tolerance
    if quantization:
        profile["precision"]["quantization"] = quantization
    path = tmp_path / f"encoder-{quantization}-{tolerance}.yaml"
    path.write_text(yaml.safe_dump(profile))
    return assemble_report(path, store_location=store)


def test_an_encoder_stage_names_the_classifier_quality_on_page_1(tmp_path, store):
    """The shipped ONNX Runtime classifier measurement (fp32 baseline, fp16, quantize_dynamic
    INT8) on the ONNX Runtime encoder example, which runs at the profile's own precision (no
    configuration search): page 1 names every delta, INT8's included; INT8 weights in the
    profile are looked up as the int8 row, within a 0% tolerance since no class changed."""
    result = stage_quality(str(CLASSIFIER))
    fp16 = PrecisionConfig(dtype="float16")
    assert result.precision("int8").loss_pct() == 0.0  # 642 of 642 kept their class
    assert quality_cell(result, fp16).startswith("acc 94.4% (+0.0 pts, indistinguishable); top-1")
    assert beyond_tolerance(result, fp16, tolerance_pct=0.0) is None
    for quantization in (None, "int8"):
        report = _encoder_report(tmp_path, store, quantization, tolerance=0.0)
        (decision,) = report.decisions
        measured = [risk for risk in decision.risks if risk.startswith(QUALITY_NOTE_PREFIX)]
        assert len(measured) == 1, measured  # the deltas; no beyond-tolerance risk
        assert "int8 acc 94.4%" in measured[0] and "max |dlogit| 0.0324" in measured[0]


def test_a_fixed_precision_beyond_tolerance_is_a_page_1_risk():
    """A TEST DOUBLE: the shipped classifier's int8 row with its agreement replaced by 9 of 10
    examples kept (through the real agreement_delta): a 10% loss at the profile's INT8, beyond
    a 1% tolerance, is named; fp16 (measured, no loss) is not."""
    from advisor.workload.quality import fixed_precision_risk, profile_quality_name
    from bench.core.quality import agreement_delta

    result = stage_quality(str(CLASSIFIER))
    agreement, delta = agreement_delta([True] * 9 + [False], "fp32", bootstrap=200)
    int8 = result.precision("int8").model_copy(update={"agreement": agreement, "deltas": [delta]})
    changed = result.model_copy(
        update={"precisions": [int8 if p.precision == "int8" else p for p in result.precisions]}
    )
    assert profile_quality_name("float16", "int8") == "int8"
    assert profile_quality_name("float16", None) == "fp16"
    risk = fixed_precision_risk(changed, "int8", tolerance_pct=1.0)
    assert risk.startswith(QUALITY_NOTE_PREFIX) and "loss 10.00% vs fp32" in risk
    assert fixed_precision_risk(changed, "fp16", tolerance_pct=1.0) is None
    assert fixed_precision_risk(changed, "int8", tolerance_pct=20.0) is None


def test_a_changed_class_counts_as_quality_lost():
    """A TEST DOUBLE: the shipped classifier's int8 row with its agreement replaced by 9 of 10
    examples kept (through the real agreement_delta): 10% of classes changed is a 10% loss,
    beyond a 1% tolerance."""
    from bench.core.quality import agreement_delta

    result = stage_quality(str(CLASSIFIER))
    agreement, delta = agreement_delta([True] * 9 + [False], "fp32", bootstrap=200)
    fp16 = result.precision("fp16").model_copy(update={"agreement": agreement, "deltas": [delta]})
    changed = result.model_copy(
        update={"precisions": [fp16 if p.precision == "fp16" else p for p in result.precisions]}
    )
    reason = beyond_tolerance(changed, PrecisionConfig(dtype="float16"), tolerance_pct=1.0)
    assert reason is not None and "measured quality loss 10.00% vs fp32" in reason
