"""The engine's own error line reaches the run's failure (bench/engines/engine_log.py).

The log is a real one: vLLM CPU 0.32 failing to start on this project's 24 GB test host with its
default CPU memory utilisation (before the backend sized the KV cache itself), as written by the
worker (`bench run --backend vllm --model tiny-llama ...`).
"""

from __future__ import annotations

from pathlib import Path

from bench.engines.engine_log import root_cause, with_root_cause
from bench.run.worker import advice_for

VLLM_LOG = (Path(__file__).parent / "data" / "vllm_cpu_start_failure.log").read_text()
FRONT_END = (
    "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"
)


def test_the_vllm_worker_error_is_found_behind_the_pointers() -> None:
    found = root_cause(VLLM_LOG)
    assert found is not None
    assert found.startswith("ValueError: Available memory on node 0")
    assert "gpu-memory-utilization" in found
    # The two pointer errors after it in the log are not taken for the cause.
    assert "See stack trace" in VLLM_LOG and "See root cause above" in VLLM_LOG


def test_cause_leads_with_the_root_cause_and_keeps_the_front_end_error() -> None:
    cause = with_root_cause(FRONT_END, VLLM_LOG)
    assert cause.startswith("ValueError: Available memory")
    assert "Engine core initialization failed" in cause
    assert with_root_cause(FRONT_END, "no error in this log\n") == FRONT_END
    assert with_root_cause("ValueError: x", "ValueError: x\n") == "ValueError: x"


def test_warnings_and_bare_names_are_not_causes() -> None:
    log = "UserWarning: something deprecated\nKeyboardInterrupt\nINFO all fine\n"
    assert root_cause(log) is None


def test_host_memory_failure_gets_cpu_advice_not_gpu_advice() -> None:
    advice = advice_for(with_root_cause(FRONT_END, VLLM_LOG))
    assert advice is not None and "kv_cache_memory_bytes" in advice
    assert "GPU" not in advice
