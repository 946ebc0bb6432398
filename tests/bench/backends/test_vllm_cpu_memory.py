"""vLLM on the CPU: the KV cache sized from the workload, and a failed engine start that names
vLLM's own error (fast sizing checks; real engine starts are slow)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from bench.core.config import GenerateWorkload, LengthDistribution
from bench.engines.backends.vllm import (
    CPU_KV_CACHE_CAP_BYTES,
    CPU_KV_CACHE_FLOOR_BYTES,
    cpu_kv_cache_bytes,
    vllm_version,
)
from bench.engines.models import PRESETS

needs_vllm = pytest.mark.skipif(vllm_version() is None, reason="vLLM is not installed")
GiB = 1024**3


def preset_config(name: str) -> dict:
    return PRESETS[name].build_config().to_dict()


def chat(prompt: int = 512, output: int = 256) -> GenerateWorkload:
    return GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=prompt), output_tokens=LengthDistribution(mean=output)
    )


def test_tiny_model_gets_the_floor_not_the_host() -> None:
    size = cpu_kv_cache_bytes(preset_config("tiny-llama"), chat(), {}, "bfloat16", 20 * GiB)
    assert size == CPU_KV_CACHE_FLOOR_BYTES


def test_7b_model_is_capped_at_a_few_gib() -> None:
    config = preset_config("llama-2-7b")
    # 2 x 32 layers x 32 KV heads x 128 x 2 bytes = 512 KiB per token.
    per_token = 2 * 32 * 32 * 128 * 2
    two = {"max_num_seqs": 2, "max_model_len": 1024}
    size = cpu_kv_cache_bytes(config, chat(), two, "bfloat16", 20 * GiB)
    assert size == per_token * 768 * 2  # two sequences of 512 + 256 tokens: 768 MiB
    assert cpu_kv_cache_bytes(config, chat(), {}, "bfloat16", 20 * GiB) == CPU_KV_CACHE_CAP_BYTES
    # Little free memory: 40% of it, but never less than one max-length sequence (4096 tokens).
    assert cpu_kv_cache_bytes(config, chat(), {}, "bfloat16", 3 * GiB) == per_token * 4096
    # An fp8 KV cache halves the bytes per token; max_model_len bounds the one-sequence floor.
    fp8 = {"kv_cache_dtype": "fp8", "max_num_seqs": 2, "max_model_len": 1024}
    assert cpu_kv_cache_bytes(config, chat(), fp8, "bfloat16", 20 * GiB) == per_token // 2 * 1536


@pytest.mark.slow
@needs_vllm
def test_impossible_kv_cache_fails_with_vllms_own_error(tmp_path: Path) -> None:
    """A real vLLM CPU start that cannot succeed (a KV cache larger than any host): the stored
    run, and the line the CLI prints, carry vLLM's root cause, not only the front end's
    "Engine core initialization failed. See root cause above."."""
    from vllm.platforms import current_platform

    if str(current_platform.device_type) != "cpu":
        pytest.skip("CPU build only")
    from bench.cli import main
    from bench.storage.store import ResultStore

    store_path = tmp_path / "store.sqlite"
    argv = ["run", "--backend", "vllm", "--model", "tiny-llama", "--store", str(store_path)]
    argv += ["--engine-arg", f"kv_cache_memory_bytes={2**50}", "--engine-arg", "max_model_len=512"]
    argv += ["--engine-arg", "enforce_eager=yes", "--option", "load.max_requests=4"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(argv)
    (result,) = ResultStore(store_path).list_runs()
    assert result.status.value == "FAILED"
    assert result.failure is not None
    cause = result.failure.cause
    # vLLM's worker error leads; the front end's pointer comes after it.
    assert "Available memory on node" in cause and "kv cache" in cause, cause
    assert cause.index("Available memory") < cause.index("See root cause above"), cause
    assert "kv_cache_memory_bytes" in (result.failure.advice or "")
    failure_line = next(x for x in printed.getvalue().splitlines() if "failure:" in x)
    assert "Available memory on node" in failure_line
