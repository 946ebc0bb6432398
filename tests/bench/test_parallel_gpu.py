"""Parallelism on a real multi-GPU host: vLLM with tensor parallelism 2, two replicas, FP8, and
kill -9 of a TP=2 worker mid-run leaving no process on any GPU (vllm#55510's orphan pattern).

Skipped (with the reason) unless at least two NVIDIA GPUs are visible and a CUDA build of vLLM
is installed. Run: `python -m pytest tests/bench/test_parallel_gpu.py -q -m gpu`;
BENCH_GPU_TEST_MODEL picks the preset (default tiny-llama; llama-2-7b is the measured one).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from bench.core.config import ConcurrencyLoad, GenerateWorkload, LengthDistribution, RunConfig
from bench.core.progress import RunProgress
from bench.core.schema import RunStatus
from bench.run.api import launch
from bench.run.placement import visible_devices
from bench.run.proctree import ProcessTree
from bench.run.telemetry import gpu_processes

pytestmark = pytest.mark.gpu


def _two_gpus_and_cuda_vllm() -> str | None:
    entries, _ = visible_devices()
    if len(entries) < 2:
        return f"needs 2 visible NVIDIA GPUs, {len(entries)} visible"
    from bench.engines.backends.base import package_version

    if package_version("vllm") is None:
        return "needs the CUDA build of vLLM (package vllm)"
    return None


SKIP = _two_gpus_and_cuda_vllm()
skip_without_two_gpus = pytest.mark.skipif(SKIP is not None, reason=SKIP or "")


def vllm_config(duration_s: float = 10.0, **fields) -> RunConfig:
    return RunConfig.model_validate(
        {
            "backend": "vllm",
            "model": os.environ.get("BENCH_GPU_TEST_MODEL", "tiny-llama"),
            "device": "cuda",
            "precision": {"dtype": "bfloat16"},
            "engine_args": {"max_model_len": 512, "gpu_memory_utilization": 0.3},
            "workload": GenerateWorkload(
                prompt_tokens=LengthDistribution(mean=128),
                output_tokens=LengthDistribution(mean=128),
            ),
            "load": ConcurrencyLoad(concurrency=16, duration_s=duration_s, warmup_requests=4),
            "validity": {"min_duration_s": 5, "min_requests": 10},
            **fields,
        }
    )


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@skip_without_two_gpus
def test_tp2_runs_one_engine_on_both_gpus(tmp_path):
    result = launch(vllm_config(parallelism={"tensor_parallel_size": 2}), out_dir=tmp_path)
    assert result.status == RunStatus.COMPLETED, result.failure
    assert result.engine.extra["tensor_parallel_size"] == 2
    assert result.engine.extra["engine_args"]["distributed_executor_backend"] == "mp"
    assert result.telemetry.gpu_indices == [0, 1]
    assert all(
        gpu.peak_memory_used_gb and gpu.peak_memory_used_gb > 1 for gpu in result.telemetry.per_gpu
    )
    summary = result.summary
    assert summary.gpus == 2
    assert summary.output_throughput_tok_s_per_gpu == pytest.approx(
        summary.output_throughput_tok_s / 2
    )
    assert summary.tok_s_per_user == pytest.approx(1000 / summary.tpot_ms.p50)
    assert result.engine.processes_left == [] and result.engine.gpu_processes_left == []


@skip_without_two_gpus
def test_two_replicas_one_gpu_each(tmp_path):
    result = launch(vllm_config(parallelism={"replicas": 2}), out_dir=tmp_path)
    assert result.status == RunStatus.COMPLETED, result.failure
    assert [r.cuda_visible_devices for r in result.replicas] == ["0", "1"]
    assert all(r.summary and r.summary.successful > 0 for r in result.replicas)
    assert sum(r.summary.requests for r in result.replicas) == result.summary.requests
    assert result.summary.gpus == 2
    assert result.telemetry.gpu_indices == [0, 1]
    assert result.engine.gpu_processes_left == []


@skip_without_two_gpus
def test_fp8_weights_and_kv_cache_are_recorded_with_the_caveat(tmp_path):
    config = vllm_config(
        precision={"dtype": "bfloat16", "quantization": "fp8", "kv_cache_dtype": "fp8"}
    )
    result = launch(config, out_dir=tmp_path)
    assert result.status == RunStatus.COMPLETED, result.failure
    assert result.engine.extra["quantization"] == "fp8"
    assert result.engine.extra["kv_cache_dtype"].startswith("fp8")
    assert any("accuracy" in caveat for caveat in result.caveats)


@skip_without_two_gpus
def test_kill_9_of_a_tp2_worker_leaves_no_gpu_process(tmp_path):
    """SIGKILL the worker of a TP=2 run mid-run: engine core and both TP workers die too."""
    worker: list[int] = []
    seen: set[int] = set()
    running = threading.Event()

    def on_progress(p: RunProgress) -> None:
        if p.worker_pid and not worker:
            worker.append(p.worker_pid)
        if p.stage == "running" and (p.completed or 0) > 0:
            running.set()

    def killer() -> None:
        if not running.wait(600):
            return
        tree = ProcessTree(worker[0])
        tree.snapshot()
        seen.update(tree.known)
        seen.update(p["pid"] for p in gpu_processes() if p["pid"] in tree.known)
        os.kill(worker[0], signal.SIGKILL)

    thread = threading.Thread(target=killer)
    thread.start()
    config = vllm_config(duration_s=300, parallelism={"tensor_parallel_size": 2})
    result = launch(config, out_dir=tmp_path, on_progress=on_progress)
    thread.join()
    assert result.status == RunStatus.FAILED
    assert "code -9" in result.failure.cause
    assert len(seen) >= 3  # engine core + 2 TP workers at least
    time.sleep(2)
    assert not [pid for pid in seen if alive(pid)]
    left = [p for p in gpu_processes() if p["pid"] in seen or p["pid"] == worker[0]]
    assert left == [] and result.engine.processes_left == []
