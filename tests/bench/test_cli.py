"""`python -m bench`: the stable CLI surface, run as a user runs it (subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def bench(*args: str, env: dict | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def write_records(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


MS = 1_000_000


def test_summarize_hand_computed(tmp_path):
    # two requests: A  ttft 10 ms, 3 tokens at 10/20/40 ms, end 40 ms
    #               B  ttft 20 ms, 2 tokens at 20/50 ms, end 60 ms; C failed
    records = [
        {
            "id": "a",
            "start_ns": 0,
            "chunk_ns": [10 * MS, 20 * MS, 40 * MS],
            "end_ns": 40 * MS,
            "input_tokens": 5,
            "output_tokens": 3,
            "error": None,
        },
        {
            "id": "b",
            "start_ns": 0,
            "chunk_ns": [20 * MS, 50 * MS],
            "chunk_tokens": [1, 1],
            "end_ns": 60 * MS,
            "input_tokens": 5,
            "output_tokens": 2,
            "error": None,
        },
        {
            "id": "c",
            "start_ns": 10 * MS,
            "chunk_ns": [],
            "end_ns": 30 * MS,
            "input_tokens": 5,
            "output_tokens": 0,
            "error": "boom",
        },
    ]
    out = bench(
        "summarize", str(write_records(tmp_path / "r.jsonl", records)), "--slo-ttft-ms", "15"
    )
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert (s["requests"], s["successful"], s["failed"]) == (3, 2, 1)
    assert s["duration_s"] == pytest.approx(0.060)
    assert s["request_throughput_rps"] == pytest.approx(2 / 0.060)
    assert s["output_throughput_tok_s"] == pytest.approx(5 / 0.060)
    assert s["goodput_rps"] == pytest.approx(1 / 0.060)  # only A meets TTFT <= 15 ms
    assert s["error_rate"] == pytest.approx(1 / 3)
    assert s["ttft_ms"]["mean"] == pytest.approx(15.0)
    # TPOT: A (40-10)/2 = 15 ms, B (60-20)/1 = 40 ms
    assert s["tpot_ms"]["mean"] == pytest.approx(27.5)
    # ITL pooled: A 10, 20; B 30
    assert s["itl_ms"]["mean"] == pytest.approx(20.0)
    assert s["e2e_ms"]["p50"] == pytest.approx(50.0)
    assert set(s["e2e_ms"]) == {"mean", "p50", "p90", "p99", "count"}
    assert (s["e2e_ms"]["count"], s["itl_ms"]["count"]) == (2, 3)  # 2 successes; 3 pooled gaps


def test_summarize_without_slo_has_no_goodput(tmp_path):
    path = write_records(
        tmp_path / "r.jsonl",
        [
            {
                "id": "a",
                "start_ns": 0,
                "chunk_ns": [MS],
                "end_ns": 2 * MS,
                "input_tokens": 1,
                "output_tokens": 1,
                "error": None,
            }
        ],
    )
    s = json.loads(bench("summarize", str(path)).stdout)
    assert "goodput_rps" not in s and s["tpot_ms"] is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("summarize", "/nonexistent/records.jsonl"), "records.jsonl"),
        (("run", "--backend", "nope", "--model", "tiny-llama"), "unknown backend 'nope'"),
        (
            ("run", "--backend", "fake", "--model", "tiny-llama", "--pattern", "zigzag"),
            "unknown pattern",
        ),
        (
            (
                "run",
                "--backend",
                "fake",
                "--model",
                "tiny-llama",
                "--pattern",
                "rate",
                "--rate",
                "-3",
            ),
            "rate_rps",
        ),
        (("run", "--backend", "fake", "--model", "/no/such/checkpoint"), "does not exist"),
        (("run", "--backend", "fake", "--model", "tiny-llama", "--engine-arg", "warp=9"), "warp"),
        (("run", "--backend", "tensorrt_llm", "--model", "tiny-llama"), "not installed"),
        (
            ("run", "--backend", "fake", "--model", "tiny-llama", "--option", "load.bogus=1"),
            "bogus",
        ),
        (
            ("run", "--backend", "fake", "--model", "tiny-llama", "--option", 'event_loop="trio"'),
            "event_loop",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, args, needle):
    store = tmp_path / "store.sqlite"
    out_dir = tmp_path / "out"
    extra = ("--store", str(store), "--out", str(out_dir)) if args[0] == "run" else ()
    result = bench(*args, *extra)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.stderr
    assert not store.exists() and not out_dir.exists()


def test_malformed_record_names_the_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"id": "a", "start_ns": 0, "chunk_ns": [], "end_ns": 1, '
        '"input_tokens": 1, "output_tokens": 0, "error": null}\n{not json\n'
    )
    result = bench("summarize", str(path))
    assert result.returncode == 2
    assert ":2" in result.stderr or "line 2" in result.stderr


def test_backends_json_lists_every_backend_with_reasons():
    result = bench("backends", "--json")
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert {
        "pytorch",
        "torch_compile",
        "vllm",
        "tensorrt_llm",
        "tensorrt",
        "onnxruntime",
        "openai",
        "fake",
    } <= set(rows)
    assert rows["tensorrt_llm"]["available"] is False
    assert "NOT been run" in rows["tensorrt_llm"]["reason"]
    assert rows["fake"]["details"]["test_double"] is True


def test_env_json_has_fingerprint_and_preflight():
    data = json.loads(bench("env", "--json").stdout)
    assert data["fingerprint"]["python"]
    assert any("CPU-only" in item["what"] or "GPU" in item["what"] for item in data["preflight"])


def test_run_fake_backend_writes_store_and_out(tmp_path):
    store = tmp_path / "store.sqlite"
    out = tmp_path / "out"
    result = bench(
        "run",
        "--backend",
        "fake",
        "--model",
        "tiny-llama",
        "--pattern",
        "concurrency",
        "--concurrency",
        "2",
        "--duration-s",
        "1",
        "--dtype",
        "float32",
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "4",
        "--engine-arg",
        "itl_s=0.001",
        "--option",
        "validity.min_duration_s=0.5",
        "--option",
        "validity.min_requests=5",
        "--store",
        str(store),
        "--out",
        str(out),
        "--json",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run = json.loads(result.stdout)
    assert run["status"] == "COMPLETED" and run["validity"]["status"] == "VALID"
    assert (out / "result.json").exists() and (out / "records.jsonl").exists()
    listed = bench("runs", "--store", str(store))
    assert run["run_id"] in listed.stdout
