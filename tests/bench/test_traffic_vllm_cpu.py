"""A REAL vLLM CPU server (launched by the openai backend, text prompts): a shared-prefix
workload reaches the engine's prefix cache with caching on, and not with it off."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.core.config import (
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    PrecisionConfig,
    PrefixPool,
    RunConfig,
    ValidityRules,
)
from bench.core.schema import ModelInfo, RunStatus
from bench.run.api import launch
from tests.bench.backends.test_vllm import cpu_attention_compatible


def _vllm_installed() -> bool:
    from bench.engines.backends.vllm import vllm_version

    return vllm_version() is not None


def _config(model_path: str, caching: bool, log: Path) -> RunConfig:
    return RunConfig(
        backend="openai",
        model=model_path,
        prefix_caching=caching,  # the launched server's enable_prefix_caching
        engine_args={
            "launch": "vllm",
            "server_args": {
                "max_model_len": 1024,
                "max_num_seqs": 4,
                "enforce_eager": True,
            },
            "server_env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
            "server_log_path": str(log),
            "startup_timeout_s": 400,
            "metrics_interval_s": 0.2,
        },
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16),
            output_tokens=LengthDistribution(mean=4),
            prefix=PrefixPool(count=2, tokens=LengthDistribution(mean=192)),
        ),
        load=ConcurrencyLoad(concurrency=2, duration_s=None, max_requests=16, warmup_requests=2),
        validity=ValidityRules(min_duration_s=0, min_requests=1),
        precision=PrecisionConfig(dtype="float32"),
    )


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_installed(), reason="vLLM is not installed")
def test_prefix_cache_hit_rate_with_caching_on_and_off(tiny_llama: ModelInfo, tmp_path: Path):
    model = cpu_attention_compatible(tiny_llama, tmp_path / "tiny-llama-hd32")
    rates = {}
    for caching in (True, False):
        result = launch(_config(model.path, caching, tmp_path / f"server-{caching}.log"))
        assert result.status == RunStatus.COMPLETED, result.failure
        assert result.engine.extra["prompt_format"] == "text"
        summary = result.summary
        assert summary.successful == 16
        assert summary.prefix_share_of_input_tokens > 0.8  # 192 of ~208 tokens are shared
        rates[caching] = summary.prefix_cache_hit_rate
        assert any("vllm:prefix_cache_queries_total" in s.values for s in result.server_metrics)
    print(f"prefix-cache hit rate: caching on {rates[True]}, off {rates[False]}")
    assert rates[True] is not None and rates[True] > 0.3, rates
    # Caching off: the counters do not move (None) or show no hits.
    assert (rates[False] or 0.0) < 0.05, rates


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_installed(), reason="vLLM is not installed")
def test_in_process_vllm_reports_the_prefix_cache_hit_rate(tiny_llama: ModelInfo, tmp_path: Path):
    model = cpu_attention_compatible(tiny_llama, tmp_path / "tiny-llama-hd32")
    config = _config(model.path, True, tmp_path / "unused.log").model_copy(
        update={
            "backend": "vllm",
            "engine_args": {
                "max_model_len": 1024,
                "max_num_seqs": 4,
                "enforce_eager": True,
            },
            "prefix_caching": True,  # the in-process engine then reports its hit rate
        }
    )
    result = launch(RunConfig.model_validate(config.model_dump()))
    assert result.status == RunStatus.COMPLETED, result.failure
    print(f"in-process prefix-cache hit rate: {result.summary.prefix_cache_hit_rate}")
    assert result.summary.prefix_cache_hit_rate is not None
    assert result.summary.prefix_cache_hit_rate > 0.3


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_installed(), reason="vLLM is not installed")
def test_conversations_against_a_real_server_resend_the_output_text(
    tiny_llama: ModelInfo, tmp_path: Path
):
    """Text prompts: each later turn's prompt is the previous prompt + the server's own output
    text + a new user message, so the server-counted prompt grows turn by turn."""
    from bench.core.config import ConversationSpec

    model = cpu_attention_compatible(tiny_llama, tmp_path / "tiny-llama-hd32")
    config = _config(model.path, True, tmp_path / "server.log")
    workload = GenerateWorkload(
        # A history of several KV blocks (vLLM CPU caches whole blocks only: a short history
        # measured a 0.0 hit rate here).
        prompt_tokens=LengthDistribution(mean=300),
        output_tokens=LengthDistribution(mean=8),
        conversation=ConversationSpec(
            turns=LengthDistribution(mean=3), user_tokens=LengthDistribution(mean=16)
        ),
    )
    load = ConcurrencyLoad(concurrency=2, duration_s=None, max_requests=12, warmup_requests=0)
    result = launch(config.model_copy(update={"workload": workload, "load": load}))
    assert result.status == RunStatus.COMPLETED, result.failure
    turns = result.summary.by_turn
    assert [t.turn for t in turns] == [0, 1, 2] and result.summary.failed == 0
    means = [t.input_tokens_mean for t in turns]
    assert means[0] < means[1] < means[2], means
    assert result.summary.prefix_cache_hit_rate > 0.3  # the history is served from the cache
