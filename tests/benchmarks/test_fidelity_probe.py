"""benchmarks/fidelity_probe.py: the summary pairs each variant's runs with vLLM's of the same
level and repeat, and bad input ends with one line on stderr and exit code 2 (the runs themselves
need a server: the probe was run against a vLLM CPU server, see docs/fidelity.md)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_module():
    spec = importlib.util.spec_from_file_location(
        "fidelity_probe", ROOT / "benchmarks" / "fidelity_probe.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(variant: str, level: int, repeat: int, tok_s: float, ttft: float) -> dict:
    return {
        "variant": variant,
        "level": level,
        "repeat": repeat,
        "output_tok_s": tok_s,
        "ttft_p50_ms": ttft,
        "tpot_p50_ms": 5.0,
        "itl_p50_ms": 5.0,
        "e2e_p50_ms": 700.0,
        "server_prompt_tokens_mean": 128.0,
        "client_cpu_s": 1.0,
    }


def test_summary_ratios_are_paired_by_repeat() -> None:
    module = load_module()
    runs = [
        _run("vllm", 16, 0, 1000.0, 50.0),
        _run("ours", 16, 0, 900.0, 60.0),
        _run("vllm", 16, 1, 2000.0, 40.0),
        _run("ours", 16, 1, 2000.0, 40.0),
        _run("ours", 16, 2, 5.0, 5.0),  # vLLM's run of repeat 2 never happened: not paired
    ]
    rows = {row["variant"]: row for row in module.summarise(runs)}
    ratio = rows["ours"]["output_tok_s_ratio"]
    assert ratio["per_repeat"] == [0.9, 1.0]
    assert ratio["min"] == 0.9 and ratio["max"] == 1.0
    assert rows["ours"]["ttft_p50_ms_ratio"]["per_repeat"] == [1.2, 1.0]
    assert rows["ours"]["runs"] == 3 and "output_tok_s_ratio" not in rows["vllm"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--variants", "vllm,nonsense"], "unknown variants"),
        ([], "no served model"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message) -> None:
    module = load_module()
    # Port 9 (discard) on localhost: nothing listens there.
    code = module.main(["--base-url", "http://127.0.0.1:9", "--out", str(tmp_path), *argv])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
