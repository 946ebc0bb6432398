"""Client fidelity (bench/orchestrate/client_fidelity.py): the verdict rule, the pairing of repeats,
and one real check on the CPU (vLLM CPU server, this harness's openai client and vLLM's own
client)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from bench.orchestrate.client_fidelity import (
    ClientFidelityCheck,
    ClientFidelityResult,
    ClientRun,
    compare,
    run_client_fidelity,
    verdict,
)


def _run(side: str, level: int, repeat: int, tok_s: float, ttft: float, tpot: float) -> ClientRun:
    return ClientRun(
        side=side,
        level=level,
        repeat=repeat,
        requests=32,
        output_throughput_tok_s=tok_s,
        ttft_p50_ms=ttft,
        tpot_p50_ms=tpot,
        started_at=0.0,
        wall_s=1.0,
        source="x",
    )


def test_verdict_needs_every_repeat_inside_or_outside_the_band():
    assert verdict([0.97, 1.01, 1.04], 0.05) == "agrees"
    assert verdict([0.80, 0.85, 0.90], 0.05) == "differs"
    assert verdict([1.10, 1.20], 0.05) == "differs"
    assert verdict([0.93, 1.00, 1.02], 0.05) == "inconclusive"
    assert verdict([0.90, 1.10], 0.05) == "inconclusive"


def test_compare_pairs_runs_of_the_same_repeat_and_skips_unpaired_ones():
    check = ClientFidelityCheck(model="tiny-llama", levels=[1, 16], repeats=2)
    runs = [
        _run("harness", 1, 0, 100.0, 10.0, 5.0),
        _run("vllm_bench_serve", 1, 0, 100.0, 10.0, 5.0),
        _run("vllm_bench_serve", 1, 1, 100.0, 10.0, 5.0),
        _run("harness", 1, 1, 80.0, 12.0, 5.1),
        _run("harness", 16, 0, 1000.0, 20.0, 6.0),  # its partner never ran
    ]
    levels = compare(check, runs)
    assert [level.level for level in levels] == [1]
    by_metric = {metric.metric: metric for metric in levels[0].metrics}
    throughput = by_metric["output_throughput_tok_s"]
    assert throughput.ratios == [1.0, 0.8]
    assert throughput.min_ratio == 0.8 and throughput.max_ratio == 1.0
    assert throughput.verdict == "inconclusive"
    assert by_metric["ttft_p50_ms"].ratios == [1.0, 1.2]
    assert by_metric["tpot_p50_ms"].verdict == "agrees"


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM (CPU build) missing")
def test_both_clients_drive_one_cpu_server_alternately(tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    check = ClientFidelityCheck(
        model="tiny-llama",
        dtype="bfloat16",
        device="cpu",
        levels=[2],
        repeats=2,
        min_requests=8,
        warmup_requests=2,
        prompt_tokens=16,
        prefix_tokens=32,  # one shared prefix: ours a one-prefix pool, vLLM's --random-prefix-len
        output_tokens=16,
        server_args={"max_model_len": 256, "enforce_eager": True},
    )
    result = run_client_fidelity(check, tmp_path, "test")
    sides = [(run.repeat, run.side) for run in result.runs]
    # ours first on even repeats, vLLM's client first on odd ones
    assert sides == [(0, "harness"), (0, "vllm_bench_serve"), (1, "vllm_bench_serve"),
                     (1, "harness")]  # fmt: skip
    for run in result.runs:
        assert run.requests == 8
        assert run.output_throughput_tok_s > 0 and run.ttft_p50_ms > 0
        # The server's own count (usage) on both sides: our text now re-tokenises to the
        # requested length (32 shared + 16 unique), as vLLM's random dataset does (a plain
        # decode comes back ~10% longer).
        assert run.mean_input_tokens is not None and 47.5 <= run.mean_input_tokens <= 49
    assert [metric.metric for metric in result.levels[0].metrics] == [
        "output_throughput_tok_s",
        "ttft_p50_ms",
        "tpot_p50_ms",
    ]
    saved = ClientFidelityResult.model_validate_json(
        (tmp_path / "client-fidelity.json").read_text()
    )
    assert saved == result
    vllm_side = json.loads((tmp_path / "vllm-bench-serve-c2-r0.json").read_text())
    assert vllm_side["completed"] == 8


def test_the_cli_check_needs_an_out_folder_and_refuses_non_finite_options(capsys):
    from bench.cli import main

    assert main(["fidelity", "--engine", "vllm-bench-serve", "--model", "tiny-llama"]) == 2
    assert "needs --out" in capsys.readouterr().err
    code = main(
        ["fidelity", "--engine", "vllm-bench-serve", "--model", "tiny-llama",
         "--option", "tolerance=nan", "--out", "/tmp/unused-client-fidelity"]
    )  # fmt: skip
    assert code == 2
    assert "tolerance" in capsys.readouterr().err
