"""bench quality for classifiers (encoders with a class head): the agreement maths, the refusals
(one line, exit 2) before anything loads, a precision that fails to load, and one real run of
the tiny-bert-classifier preset through PyTorch and ONNX Runtime (INT8 included)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.core.quality import (
    PrecisionQuality,
    QualityResult,
    agreement_delta,
    max_abs_difference,
)
from tests.bench.test_cli import assert_one_line_exit_2, bench_in_process


def test_full_agreement_is_indistinguishable_and_changed_classes_are_a_loss():
    estimate, delta = agreement_delta([True] * 40, "fp32", bootstrap=300)
    assert estimate.value == 1.0 and delta.value == 0.0
    assert delta.verdict == "indistinguishable" and delta.loss_pct() == 0.0
    estimate, delta = agreement_delta([True] * 30 + [False] * 10, "fp32", bootstrap=300)
    assert estimate.value == pytest.approx(0.75) and delta.value == pytest.approx(-0.25)
    assert delta.verdict == "worse" and delta.interval.high < 0
    assert delta.loss_pct() == pytest.approx(25.0)  # a quarter of the examples changed class
    row = PrecisionQuality(
        precision="int8",
        method="m",
        status="measured",
        agreement=estimate,
        max_abs_logit_diff=0.5,
        examples=40,
        deltas=[delta],
    )
    assert row.loss_pct() == pytest.approx(25.0)
    assert row.summary() == "top-1 agree 75.0% (worse), max |dlogit| 0.5"
    _, single = agreement_delta([False], "fp32")
    assert single.verdict == "unknown"  # one example: no spread to resample


def test_max_abs_difference_is_over_every_example_and_class():
    base = np.array([[0.0, 1.0], [2.0, -1.0]])
    assert max_abs_difference(base + np.array([[0.1, -0.3], [0.0, 0.2]]), base) == pytest.approx(
        0.3
    )
    with pytest.raises(ValueError):
        max_abs_difference(base[:1], base)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    """A tiny-bert-classifier checkpoint written by the real writer (random weights, float32),
    without a tokenizer: every refusal below comes before the tokenizer is read."""
    from bench.engines.models import PRESETS, _write_random_checkpoint

    checkpoint = tmp_path_factory.mktemp("classifier")
    _write_random_checkpoint(
        PRESETS["tiny-bert-classifier"].build_config(), checkpoint, seed=0, dtype="float32"
    )
    (checkpoint / "lines.txt").write_text("def f(x):\n    return x + 1\n")
    (checkpoint / "choices.jsonl").write_text(
        json.dumps({"prompt": "import os", "answer": "LABEL_0", "choices": ["LABEL_0", "a"]}) + "\n"
    )
    (checkpoint / "unknown.jsonl").write_text(
        json.dumps({"prompt": "import os", "answer": "positive"}) + "\n"
    )
    return checkpoint


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--engine", "vllm", "--precision", "fp32"], "does not serve encoders"),
        (["--engine", "onnxruntime", "--precision", "bf16"], "onnxruntime runs fp32, fp16, int8"),
        (
            ["--engine", "pytorch", "--precision", "fp8-kv"],
            "pytorch runs fp32, bf16, fp16, int8, fp8",
        ),
        (["--precision", "fp32", "--labelled", "choices.jsonl"], "choices are for causal LMs"),
        (["--precision", "fp32", "--labelled", "unknown.jsonl"], "not one of the model's labels"),
    ],
)
def test_an_encoder_precision_or_input_the_engine_cannot_take_is_one_line_exit_2(
    classifier, extra, needle, monkeypatch
):
    monkeypatch.chdir(classifier)
    text = [] if "--labelled" in extra else ["--text", "lines.txt"]
    code, _, stderr = bench_in_process(
        "quality", "--model", str(classifier), "--out", "out", *text, *extra
    )
    assert_one_line_exit_2(code, stderr, needle)
    assert not (classifier / "out" / "quality.json").exists()


def test_int8_on_vllm_needs_a_pre_quantized_checkpoint(tmp_path):
    from bench.engines.models import PRESETS, _write_random_checkpoint

    _write_random_checkpoint(
        PRESETS["tiny-llama-trained"].build_config(), tmp_path, seed=0, dtype="float32"
    )
    (tmp_path / "text.txt").write_text("def f(x):\n    return x + 1\n")
    code, _, stderr = bench_in_process(
        "quality",
        "--model",
        str(tmp_path),
        "--engine",
        "vllm",
        "--precision",
        "bf16",
        "--precision",
        "int8",
        "--text",
        str(tmp_path / "text.txt"),
        "--out",
        str(tmp_path / "out"),
    )
    assert_one_line_exit_2(code, stderr, "pre-quantized checkpoint")


def test_an_encoder_precision_that_fails_to_load_is_reported_not_scored(tmp_path):
    """A real load failure (config and weights disagree on the MLP width) on both engines:
    'not run: failed to load', no agreement, no delta, exit code 1."""
    from bench.engines.models import PRESETS, _write_random_checkpoint, write_tokenizer

    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    _write_random_checkpoint(
        PRESETS["tiny-bert-classifier"].build_config(), checkpoint, seed=0, dtype="float32"
    )
    write_tokenizer(checkpoint, 512)  # small: trains in a second; fits the 1024 embeddings
    document = json.loads((checkpoint / "config.json").read_text())
    document["intermediate_size"] = 200  # the weights were written with 128
    (checkpoint / "config.json").write_text(json.dumps(document))
    (tmp_path / "lines.txt").write_text("def f(x):\n    return x + 1\n")
    for engine, second in (("pytorch", "int8"), ("onnxruntime", "int8")):
        out = tmp_path / engine
        code, stdout, _ = bench_in_process(
            "quality",
            "--model",
            str(checkpoint),
            "--engine",
            engine,
            "--precision",
            "fp32",
            "--precision",
            second,
            "--text",
            str(tmp_path / "lines.txt"),
            "--out",
            str(out),
        )
        assert code == 1, stdout
        result = QualityResult.model_validate_json((out / "quality.json").read_text())
        for row in result.precisions:
            assert row.status == "not run" and row.reason.startswith("failed to load: ")
            assert row.agreement is None and row.deltas == []


@pytest.mark.slow
def test_trained_classifier_through_pytorch_and_onnxruntime_int8(tmp_path, monkeypatch):
    """The tiny-bert-classifier preset trained here (seconds, on lines of two standard-library
    modules), scored on lines it did not train on: accuracy far above chance, and INT8 moves the
    logits of both engines by rounding (ONNX Runtime's fp32 export was checked against eager
    PyTorch before use)."""
    from bench.engines.models import CLASSIFIER_MODULES, classifier_lines

    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path / "cache"))  # trains here, now
    held_out = classifier_lines(held_out=True)
    picked = [  # 40 lines of each module
        pair for label in (0, 1) for pair in [p for p in held_out if p[1] == label][:40]
    ]
    (tmp_path / "lines.txt").write_text("\n".join(line for line, _ in held_out[-40:]) + "\n")
    with (tmp_path / "labelled.jsonl").open("w") as handle:
        for line, label in picked:
            handle.write(json.dumps({"prompt": line, "answer": CLASSIFIER_MODULES[label]}) + "\n")
    results = {}
    for engine in ("pytorch", "onnxruntime"):
        code, stdout, stderr = bench_in_process(
            "quality",
            "--model",
            "tiny-bert-classifier",
            "--engine",
            engine,
            "--precision",
            "fp32",
            "--precision",
            "int8",
            "--text",
            str(tmp_path / "lines.txt"),
            "--labelled",
            str(tmp_path / "labelled.jsonl"),
            "--bootstrap",
            "200",
            "--out",
            str(tmp_path / engine),
        )
        assert code == 0, stderr
        results[engine] = QualityResult.model_validate_json(
            (tmp_path / engine / "quality.json").read_text()
        )
        assert "top-1 agree" in stdout
    for engine, result in results.items():
        base, int8 = result.precision("fp32"), result.precision("int8")
        assert base.status == "measured" and base.examples == 120 and base.items == 80
        assert base.agreement is None and base.accuracy.value > 0.75, engine  # chance: 0.5
        assert int8.status == "measured" and int8.agreement is not None
        assert int8.max_abs_logit_diff > 0  # quantization moved the logits ...
        assert int8.max_abs_logit_diff < 0.5  # ... by rounding, not by breaking the model
        assert {d.metric for d in int8.deltas} == {"agreement", "accuracy"}
        assert "quantize_dynamic" in int8.method, engine
    assert "onnxruntime.quantization" in results["onnxruntime"].precision("int8").method
