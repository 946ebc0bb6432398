"""bench quality through PyTorch on a model trained here: tiny-llama-trained is trained from
scratch on the CPU (standard-library sources, ~10 s), then scored on held-out stdlib source at
bf16 and dynamic INT8; the same evaluation of an untrained checkpoint of the same architecture
is the reference its perplexity must be far below."""

from __future__ import annotations

import inspect
import json
import random
import tokenize

import pytest

from bench.core.quality import QualityResult
from tests.bench.test_cli import bench_in_process


def _labelled_items(source: str, count: int = 30) -> list[dict]:
    """Multiple choice from held-out code: after 200 characters of it, its next 12 characters
    vs 12 from elsewhere in the file (both real code: neither wins on token count alone)."""
    rng = random.Random(0)
    items = []
    for _ in range(count):
        at, other = rng.randrange(200, len(source) - 12), rng.randrange(0, len(source) - 12)
        answer, distractor = source[at : at + 12], source[other : other + 12]
        if answer != distractor:
            items.append(
                {"prompt": source[at - 200 : at], "answer": answer, "choices": [answer, distractor]}
            )
    return items


@pytest.mark.slow
def test_trained_model_quality_at_two_precisions(tmp_path, monkeypatch):
    from bench.engines.models import PRESETS, _write_random_checkpoint, write_tokenizer

    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path / "cache"))  # trains here, now
    source = inspect.getsource(tokenize)[:24000]  # not one of the TRAINING_MODULES
    (tmp_path / "held_out.txt").write_text(source)
    with (tmp_path / "choices.jsonl").open("w") as handle:
        for item in _labelled_items(source):
            handle.write(json.dumps(item) + "\n")
    common = [
        "--text",
        str(tmp_path / "held_out.txt"),
        "--labelled",
        str(tmp_path / "choices.jsonl"),
    ]

    code, _, stderr = bench_in_process(
        "quality",
        "--model",
        "tiny-llama-trained",
        "--precision",
        "bf16",
        "--precision",
        "int8",
        "--precision",
        "fp8-kv",
        *common,
        "--out",
        str(tmp_path / "trained"),
    )
    assert code == 0, stderr
    trained = QualityResult.model_validate_json((tmp_path / "trained" / "quality.json").read_text())

    untrained_dir = tmp_path / "untrained"
    untrained_dir.mkdir()
    config = PRESETS["tiny-llama-trained"].build_config()
    _write_random_checkpoint(config, untrained_dir, seed=0, dtype="bfloat16")
    write_tokenizer(untrained_dir, config.vocab_size)
    code, _, stderr = bench_in_process(
        "quality",
        "--model",
        str(untrained_dir),
        "--precision",
        "bf16",
        *common,
        "--out",
        str(tmp_path / "random"),
    )
    assert code == 0, stderr
    untrained = QualityResult.model_validate_json(
        (tmp_path / "random" / "quality.json").read_text()
    )

    base, untrained_base = trained.precision("bf16"), untrained.precision("bf16")
    # An untrained model is near uniform over its 2048 entries; training cuts that many times.
    assert untrained_base.perplexity.value > 1000
    assert base.perplexity.value < untrained_base.perplexity.value / 3
    # This model is too weak to be judged on accuracy (about chance on these items, as is the
    # untrained one): the check is that accuracy is scored per item with an interval.
    assert base.items == 30 and base.accuracy.interval is not None
    assert base.perplexity.interval.low < base.perplexity.value < base.perplexity.interval.high

    int8 = trained.precision("int8")
    assert int8.status == "measured" and "quantize_dynamic" in int8.method
    assert int8.perplexity.value != base.perplexity.value  # quantization moves it ...
    delta = int8.delta("perplexity")
    assert delta.interval is not None and delta.baseline == "bf16"
    assert abs(delta.relative) < 0.1  # ... by little on this model
    assert delta.verdict == (
        "indistinguishable"
        if delta.interval.low <= 0 <= delta.interval.high
        else "worse"
        if delta.interval.low > 0
        else "better"
    )
    assert int8.delta("accuracy") is not None

    not_run = trained.precision("fp8-kv")
    assert not_run.status == "not run" and not_run.perplexity is None and not_run.reason
