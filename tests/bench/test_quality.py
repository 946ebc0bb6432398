"""bench quality, the fast parts: the interval and verdict maths, the scorers' refusals, and bad
input (one line, exit 2) - no model is trained here (tests/bench/test_quality_cpu.py trains one)."""

from __future__ import annotations

import json
import math

import pytest

from bench.core.quality import (
    PrecisionQuality,
    QualityResult,
    WindowScore,
    accuracy_delta,
    accuracy_estimate,
    perplexity,
    perplexity_delta,
    perplexity_estimate,
)
from bench.engines.scoring import NotRun, open_scorer
from tests.bench.test_cli import assert_one_line_exit_2, bench_in_process


def _windows(nlls: list[float], tokens: int = 10) -> list[WindowScore]:
    return [WindowScore(nll=nll, tokens=tokens) for nll in nlls]


def test_perplexity_is_exp_of_mean_token_nll_with_an_interval_around_it():
    windows = _windows([20.0, 30.0, 25.0, 22.0, 28.0])
    estimate = perplexity_estimate(windows, bootstrap=500)
    assert estimate.value == pytest.approx(math.exp(125 / 50), rel=1e-12)
    assert estimate.interval is not None
    assert estimate.interval.low < estimate.value < estimate.interval.high
    assert estimate.units == 5


def test_same_scores_are_indistinguishable_and_a_uniform_loss_is_worse():
    base = _windows([20.0, 30.0, 25.0, 22.0, 28.0, 24.0])
    same = perplexity_delta(base, base, "bf16", bootstrap=300)
    assert same.value == 0.0 and same.verdict == "indistinguishable"
    worse = perplexity_delta(_windows([n + 2.0 for n in [20, 30, 25, 22, 28, 24]]), base, "bf16")
    assert worse.verdict == "worse" and worse.interval.low > 0
    assert worse.relative == pytest.approx(
        perplexity(_windows([22, 32, 27, 24, 30, 26])) / perplexity(base) - 1
    )
    assert worse.loss_pct() == pytest.approx(100 * worse.relative)


def test_paired_accuracy_delta():
    base = [True] * 40
    lost = [True] * 30 + [False] * 10
    delta = accuracy_delta(lost, base, "bf16", bootstrap=500)
    assert delta.value == pytest.approx(-0.25) and delta.verdict == "worse"
    assert delta.loss_pct() == pytest.approx(25.0)
    noisy = accuracy_delta([True, False] * 10, [False, True] * 10, "bf16", bootstrap=500)
    assert noisy.value == 0.0 and noisy.verdict == "indistinguishable"
    assert accuracy_estimate([True]).interval is None  # one item: no spread to resample


def test_a_precision_not_run_says_why_and_has_no_score():
    row = PrecisionQuality(precision="fp8-kv", method="x", status="not run", reason="no FP8 KV")
    assert row.summary() == "not run: no FP8 KV"
    assert row.perplexity is None and row.loss_pct() is None


def test_engines_that_cannot_run_a_precision_say_so_without_loading(tmp_path):
    kv = open_scorer("pytorch", tmp_path, "fp8-kv", max_model_len=64)
    assert isinstance(kv, NotRun) and "vLLM" in kv.reason
    int8 = open_scorer("vllm", tmp_path, "int8", max_model_len=64)
    assert isinstance(int8, NotRun) and "pre-quantized" in int8.reason
    served = open_scorer("openai", tmp_path, "bf16", max_model_len=64, endpoints={})
    assert isinstance(served, NotRun) and "--endpoint" in served.reason
    onnx = open_scorer("onnxruntime", tmp_path, "bf16", max_model_len=64)
    assert isinstance(onnx, NotRun)


def test_quality_result_round_trips():
    row = PrecisionQuality(
        precision="bf16",
        method="m",
        status="measured",
        perplexity=perplexity_estimate(_windows([20.0, 30.0, 25.0]), bootstrap=200),
        tokens_scored=30,
    )
    result = QualityResult(
        model="m",
        model_path="/m",
        engine="pytorch",
        baseline="bf16",
        window=8,
        bootstrap=200,
        seed=0,
        method="m",
        precisions=[row],
    )
    assert QualityResult.model_validate_json(result.model_dump_json()) == result


@pytest.fixture
def files(tmp_path):
    (tmp_path / "text.txt").write_text("def f(x):\n    return x + 1\n")
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "binary.txt").write_bytes(b"\x7fELF\x00\x01\x02")
    (tmp_path / "nolabel.jsonl").write_text(json.dumps({"prompt": "def"}) + "\n")
    (tmp_path / "badchoice.jsonl").write_text(
        json.dumps({"prompt": "import", "answer": " os", "choices": [" sys", " re"]}) + "\n"
    )
    return tmp_path


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--text", "empty.txt"], "is empty"),
        (["--text", "binary.txt"], "binary"),
        (["--labelled", "nolabel.jsonl"], "line 1: no answer"),
        (["--labelled", "badchoice.jsonl"], "not one of its choices"),
        (["--labelled", "empty.txt"], "is empty"),
        (["--text", "missing.txt"], "missing.txt"),
        (["--text", "text.txt", "--precision", "fp4"], "unknown precision 'fp4'"),
        (["--text", "text.txt", "--engine", "tgi"], "unknown engine 'tgi'"),
        ([], "give --text FILE or --labelled"),
        (["--text", "text.txt", "--endpoint", "bf16"], "expected PRECISION=URL"),
    ],
)
def test_bad_input_is_one_line_exit_2(files, extra, needle, monkeypatch):
    monkeypatch.chdir(files)
    code, _, stderr = bench_in_process(
        "quality",
        "--model",
        "tiny-llama-trained",
        "--precision",
        "bf16",
        "--out",
        "out",
        *extra,
    )
    assert_one_line_exit_2(code, stderr, needle)
    assert not (files / "out" / "quality.json").exists()


def test_a_tokenizer_larger_than_the_model_vocabulary_is_refused(files, tmp_path):
    from bench.engines.models import PRESETS, _write_random_checkpoint, write_tokenizer

    config = PRESETS["tiny-llama-trained"].build_config()
    write_tokenizer(tmp_path, 512)  # 512 entries (small: trains in a second) ...
    config.vocab_size = 300  # ... for a model that embeds 300
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    _write_random_checkpoint(config, checkpoint, seed=0, dtype="float32")
    code, _, stderr = bench_in_process(
        "quality",
        "--model",
        str(checkpoint),
        "--tokenizer",
        str(tmp_path),
        "--precision",
        "fp32",
        "--text",
        str(files / "text.txt"),
        "--out",
        str(tmp_path / "out"),
    )
    assert_one_line_exit_2(code, stderr, "not this model's tokenizer")


# A TEST DOUBLE of an OpenAI-compatible server: it replays one /v1/completions answer recorded
# from a real `vllm serve` (vLLM 0.32.0, CPU) of tiny-llama-trained for the token-id prompt
# [1, 300, 400, 500] with echo, logprobs=1, max_tokens=1 (the request OpenAIScorer sends).
RECORDED_VLLM_ANSWER = {
    "choices": [
        {
            "index": 0,
            "text": "<s> ifotherint_",
            "logprobs": {
                "text_offset": [0, 3, 6, 11, 14],
                "token_logprobs": [
                    None,
                    -9.687032699584961,
                    -8.80305004119873,
                    -9.455155372619629,
                    -1.3731689453125,
                ],
                "tokens": ["<s>", " if", "other", "int", "_"],
                "top_logprobs": [
                    None,
                    {" if": -9.687032699584961, "----": -1.7339074611663818},
                    {"other": -8.80305004119873, " not": -3.3421127796173096},
                    {"int": -9.455155372619629, ",": -1.4473427534103394},
                    {"_": -1.3731689453125},
                ],
            },
        }
    ]
}


def test_openai_scorer_reads_echoed_prompt_logprobs():
    import http.server
    import threading

    from bench.engines.scoring import OpenAIScorer

    requests: list[dict] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _reply(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._reply({"data": [{"id": "tiny"}]})

        def do_POST(self):
            requests.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self._reply(RECORDED_VLLM_ANSWER)

        def log_message(self, *args):  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        scorer = OpenAIScorer(f"http://127.0.0.1:{server.server_address[1]}/v1", "bf16")
        (row,) = scorer.score([[1, 300, 400, 500]])
        scorer.close()
    finally:
        server.shutdown()
    assert requests[0]["prompt"] == [[1, 300, 400, 500]] and requests[0]["echo"] is True
    assert requests[0]["model"] == "tiny" and requests[0]["logprobs"] == 1
    assert [token.logprob for token in row] == pytest.approx([-9.687, -8.803, -9.455], abs=1e-3)
    assert [token.greedy for token in row] == [False, False, False]  # "----", " not", "," won


def test_a_precision_that_fails_to_load_is_reported_not_scored(tmp_path):
    """A real load failure (config and weights disagree on the MLP width): every precision is
    'not run: failed to load', none has a score or a delta, and the command exits 1."""
    from bench.engines.models import PRESETS, _write_random_checkpoint, write_tokenizer

    config = PRESETS["tiny-llama-trained"].build_config()
    config.vocab_size = 512
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    _write_random_checkpoint(config, checkpoint, seed=0, dtype="float32")
    write_tokenizer(checkpoint, 512)
    document = json.loads((checkpoint / "config.json").read_text())
    document["intermediate_size"] = 200  # the weights were written with 176
    (checkpoint / "config.json").write_text(json.dumps(document))
    (tmp_path / "text.txt").write_text("def f(x):\n    return x + 1\n" * 20)
    code, stdout, _ = bench_in_process(
        "quality",
        "--model",
        str(checkpoint),
        "--precision",
        "fp32",
        "--precision",
        "int8",
        "--text",
        str(tmp_path / "text.txt"),
        "--out",
        str(tmp_path / "out"),
    )
    assert code == 1
    result = QualityResult.model_validate_json((tmp_path / "out" / "quality.json").read_text())
    for row in result.precisions:
        assert row.status == "not run" and row.reason.startswith("failed to load: ")
        assert row.perplexity is None and row.deltas == []
    assert "not run: failed to load" in stdout
