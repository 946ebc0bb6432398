"""Tests of the `vllm` backend: option checks (fast) and the real vLLM engine of the installed build
(the CPU build here) on tiny-llama (slow)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path

import psutil
import pytest

from bench.core.config import ForwardWorkload, GenerateWorkload, Precision
from bench.core.errors import UserError
from bench.core.schema import ModelInfo
from bench.engines.backends import get_backend
from bench.engines.backends.base import GenerateRequest
from bench.engines.backends.vllm import (
    VllmBackend,
    check_arg_names,
    engine_arg_fields,
    vllm_version,
)

needs_vllm = pytest.mark.skipif(vllm_version() is None, reason="vLLM is not installed")


def test_registered_and_cheap_type_checks() -> None:
    assert get_backend("vllm") is VllmBackend
    VllmBackend({"block_size": 16, "gpu_memory_utilization": 0.5, "enforce_eager": True})
    with pytest.raises(UserError, match="max_num_seqs must be int"):
        VllmBackend({"max_num_seqs": "many"})
    with pytest.raises(UserError, match="enforce_eager must be bool"):
        VllmBackend({"enforce_eager": 1})
    with pytest.raises(UserError, match="gpu_memory_utilization must be in"):
        VllmBackend({"gpu_memory_utilization": 1.5})
    with pytest.raises(UserError, match=r"dtype.*precision"):
        VllmBackend({"dtype": "float16"})


@needs_vllm
def test_engine_arg_names_from_source_match_the_dataclass_list() -> None:
    names = engine_arg_fields(import_vllm=False)
    assert {"tensor_parallel_size", "block_size", "max_num_seqs", "load_format"} <= names
    with pytest.raises(UserError, match=r"'tensor_paralel_size'.*tensor_parallel_size"):
        check_arg_names({"tensor_paralel_size": 2}, names, "vLLM engine")


@needs_vllm
def test_availability_names_the_version() -> None:
    availability = VllmBackend.availability()
    assert availability.available and availability.version == vllm_version()


# vLLM's CPU attention kernels support head sizes 32, 64, 80, ... (CPUAttentionBackend.
# get_supported_head_sizes); a preset with head_dim 16 fails in the engine core with
# "Unsupported CPU attention configuration: head_dim=16".
CPU_ATTENTION_MIN_HEAD_DIM = 32


def cpu_attention_compatible(model: ModelInfo, out_dir: Path) -> ModelInfo:
    """The same checkpoint seen with fewer, wider heads when its head_dim is under 32.

    Halving the query and KV head counts while doubling head_dim leaves every weight shape
    unchanged (q/k/v/o projections are heads x head_dim wide), so the weights and tokenizer are
    linked, not copied; only config.json differs.
    """
    config = json.loads((Path(model.path) / "config.json").read_text())
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    if head_dim >= CPU_ATTENTION_MIN_HEAD_DIM:
        return model
    factor = CPU_ATTENTION_MIN_HEAD_DIM // head_dim
    assert heads % factor == 0 and kv_heads % factor == 0, "cannot widen heads evenly"
    config.update(
        num_attention_heads=heads // factor,
        num_key_value_heads=kv_heads // factor,
        head_dim=head_dim * factor,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    for item in Path(model.path).iterdir():
        if item.name != "config.json" and not (out_dir / item.name).exists():
            (out_dir / item.name).symlink_to(item)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return model.model_copy(update={"path": str(out_dir)})


@pytest.fixture(scope="session")
def vllm_tiny_llama(tiny_llama: ModelInfo, tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    return cpu_attention_compatible(tiny_llama, tmp_path_factory.mktemp("tiny-llama-hd32"))


def _engine_processes() -> list[psutil.Process]:
    """Child processes, less multiprocessing's resource tracker (one per Python process,
    started by vLLM's first spawn and kept until this process exits by design)."""
    children = psutil.Process(os.getpid()).children(recursive=True)
    return [p for p in children if "resource_tracker" not in " ".join(p.cmdline())]


@pytest.mark.slow
@needs_vllm
async def test_unknown_engine_arg_is_named_at_load(vllm_tiny_llama: ModelInfo) -> None:
    tiny_llama = vllm_tiny_llama
    # refused when the options are read (before any load), naming the close valid ones
    with pytest.raises(UserError, match=r"max_num_seq'.*max_num_seqs"):
        backend = VllmBackend({"max_num_seq": 8})
        await backend.load(tiny_llama, GenerateWorkload(), Precision(dtype="float32"), "auto")
    with pytest.raises(UserError, match="generate"):
        await VllmBackend().load(tiny_llama, ForwardWorkload(), Precision(), "auto")


@pytest.mark.slow
@needs_vllm
async def test_cpu_build_refuses_unsupported_head_size_up_front(tiny_llama: ModelInfo) -> None:
    from vllm.platforms import current_platform

    if str(current_platform.device_type) != "cpu":
        pytest.skip("CPU build only")
    config = json.loads((Path(tiny_llama.path) / "config.json").read_text())
    if config.get("head_dim", 32) >= CPU_ATTENTION_MIN_HEAD_DIM:
        pytest.skip("tiny-llama's head size is supported here")
    with pytest.raises(UserError, match="head_dim 16"):
        await VllmBackend().load(tiny_llama, GenerateWorkload(), Precision(dtype="float32"), "auto")


@pytest.mark.slow
@needs_vllm
async def test_real_engine_exact_lengths_ordered_times_clean_close(
    vllm_tiny_llama: ModelInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny_llama = vllm_tiny_llama
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    before = {p.pid for p in _engine_processes()}
    backend = VllmBackend({"max_model_len": 512, "max_num_seqs": 8, "enforce_eager": True})
    info = await backend.load(tiny_llama, GenerateWorkload(), Precision(dtype="float32"), "auto")
    engine_children = [p for p in _engine_processes() if p.pid not in before]
    try:
        assert info.load_s > 0
        assert info.engine.version == vllm_version()
        assert info.engine.extra["max_num_seqs"] == 8 and info.engine.enforce_eager is True
        assert info.engine.cuda_graphs is False  # eager, and no CUDA on this machine
        assert info.engine.dtype == "float32"
        # Stats logging off by default, as vLLM's offline LLM (the fidelity reference) has it.
        assert info.engine.extra["log_stats"] is False
        assert engine_children, "vLLM V1 runs its engine core in a child process"

        lengths = [1, 7, 16, 33, 5, 12]
        # Same id twice on purpose: the backend must make vLLM request ids unique.
        requests = [
            GenerateRequest("same-id", [100 + i] * (4 + 3 * i), n) for i, n in enumerate(lengths)
        ]

        async def run(request: GenerateRequest) -> list:
            return [chunk async for chunk in backend.stream(request)]

        results = await asyncio.gather(*(run(r) for r in requests))
        for request, chunks in zip(requests, results, strict=True):
            assert sum(c.tokens for c in chunks) == request.output_tokens
            assert all(c.tokens > 0 for c in chunks)
            assert all(a.t_ns <= b.t_ns for a, b in itertools.pairwise(chunks))
        # Continuous batching: the longest request streams while others finish.
        assert len(results[3]) > 1
    finally:
        await backend.close()
    _gone, alive = psutil.wait_procs(engine_children, timeout=30)
    assert not alive, f"engine processes still running: {[p.pid for p in alive]}"


@pytest.mark.slow
@needs_vllm
def test_llm_generate_reference(
    vllm_tiny_llama: ModelInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench.orchestrate.fidelity's reference: vLLM's own LLM.generate on given prompts, in its own
    process."""
    from bench.orchestrate.fidelity import llm_generate_throughput, run_in_subprocess

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # the spawned child inherits it
    # Longer than a KV block (128 on CPU), so a prompt seen before could be a prefix-cache hit.
    prompts = [[100 + i] * (140 + i) for i in range(6)]
    engine_args = {"enforce_eager": True, "max_model_len": 512, "max_num_seqs": 4}
    reference = run_in_subprocess(
        llm_generate_throughput, vllm_tiny_llama.path, prompts, 9, engine_args,
        Precision(dtype="float32"), 4, True, 4,
    )  # fmt: skip
    result = reference.model_dump()
    assert result["requests"] == 6 and result["output_tokens"] == 6 * 9
    assert result["input_tokens"] == sum(len(p) for p in prompts)
    assert result["output_throughput_tok_s"] > 0 and result["elapsed_s"] > 0
    # 6 prompts with 4 seqs in flight: the engine admits the last two as the first ones finish.
    assert result["engine_args"]["max_num_seqs"] == 4
    wave = result["single_wave"]
    assert wave["requests"] == 4 and wave["output_tokens"] == 4 * 9 and wave["elapsed_s"] > 0
    # The warm-up and the single wave saw these prompts; the timed calls must not reuse them.
    assert result["cached_prompt_tokens"] == 0 and wave["cached_prompt_tokens"] == 0


@pytest.mark.slow
@needs_vllm
def test_vllm_fidelity_check_on_cpu(
    vllm_tiny_llama: ModelInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole `vllm` fidelity check: LLM.generate in its own process, then the backend through
    bench.run.api.launch on the same prompts; the ratio is the two throughputs'."""
    from bench.orchestrate.fidelity import VllmFidelityCheck, run_check

    # No VLLM_CPU_KVCACHE_SPACE: both sides size the CPU KV cache from the workload themselves
    # (vLLM's default of 92% of the node's memory fails whenever other work holds some of it).
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    check = VllmFidelityCheck(
        model=vllm_tiny_llama.path,
        dtype="float32",
        device="cpu",
        prompt_tokens=16,
        output_tokens=8,
        requests=8,
        max_num_seqs=4,
        warmup_requests=2,
        engine_args={"enforce_eager": True, "max_model_len": 512},
    )
    result = run_check(check, None, tmp_path)
    reference = result.vllm_reference
    assert reference is not None
    assert reference.requests == 8 and reference.output_tokens == 8 * 8
    assert reference.cached_prompt_tokens == 0
    assert reference.single_wave is not None and reference.single_wave.requests == 4
    assert reference.engine_args["max_num_seqs"] == 4
    (run,) = result.runs
    sized = reference.engine_args["kv_cache_memory_bytes"]
    assert 0 < sized < 4 * 2**30
    assert run.engine.extra["kv_cache_memory_bytes"] == sized  # the same on both sides
    assert run.status.value == "COMPLETED", run.failure
    assert run.summary is not None and run.summary.successful == 8
    assert run.config.load.concurrency == 4 and run.config.engine_args["max_num_seqs"] == 4
    assert result.ratio == pytest.approx(
        run.summary.output_throughput_tok_s / reference.output_throughput_tok_s
    )
    assert (tmp_path / "runs" / "vllm_fidelity_c4" / "result.json").is_file()
