"""Diagnostics: the article's troubleshooting guide (section 5) applied to one RunResult.

Every finding carries its numbers, inference-time advice and the profiling command to run. The
article's out-of-memory advice is for training and does not apply to serving; it is replaced by
inference remedies: lower gpu_memory_utilization / max_num_seqs /
max_model_len, AWQ or FP8 weights, an FP8 KV cache, tensor parallelism, a smaller batch.
Rules know the device: a CPU run gets no CUDA-graph finding (the quick plan makes vLLM eager on
the CPU on purpose) and a CPU profiler command instead of `nsys -t cuda`.
"""

from __future__ import annotations

import re
import shlex
from typing import Literal

from pydantic import BaseModel, Field

from bench.core.config import GenerateWorkload
from bench.core.engine_facts import prefix_caching_setting
from bench.core.metric_catalog import SPECS_BY_KEY, Metric
from bench.core.schema import RunResult, RunStatus, ValidityStatus
from bench.engines.backends import registry

GPU_UTILIZATION_TARGET_PCT = 90.0
"""Article section 5.1: throughput below expectation -> check GPU-Util reaches 90%."""
LONG_TAIL_RATIO = 3.0
"""p99 more than 3x p50 (E2E, else TTFT) = a long tail worth acting on; a steady service's p99 is
usually within 2x of its median, so 3x leaves room for normal queueing noise."""
MEMORY_EFFICIENCY_REFERENCE_GB_PER_B = 1.2
"""Article section 3.2 reference: peak GPU memory / parameters in billions."""
MEMORY_EFFICIENCY_FLAG_FACTOR = 2.0
"""Flag memory efficiency above 2x the reference (2.4 GB per billion parameters)."""
LOW_HIT_RATE_FRACTION = 0.5
"""Flag a prefix-cache hit rate below half the share of input tokens the workload shares (with
a warm cache nearly every shared token is a hit; half leaves room for each prefix's first use
and the text seam)."""
LOW_HIT_RATE_FLOOR = 0.1
"""Without a measured shared share (conversations): flag a hit rate below 10%."""
VLLM_BLOCK_TOKENS = {"gpu": 16, "cpu": 128}
"""vLLM's default KV-cache block size: 16 tokens on GPU, 128 on the vLLM CPU build; only whole
blocks are cached and reused."""
OOM_PATTERN = re.compile(
    r"out of memory|outofmemory|\boom\b|cuda_error_out_of_memory|failed to allocate", re.IGNORECASE
)


class Diagnostic(BaseModel):
    """One troubleshooting finding for one run."""

    run_id: str
    rule: str
    severity: Literal["info", "warning", "error"]
    finding: str = Field(description="What was seen, with the numbers.")
    advice: str = Field(description="What to change (inference-time remedies only).")
    command: str | None = Field(None, description="Profiling command to run next.")


class FindingGroup(BaseModel):
    """One finding text and the runs it was seen on."""

    finding: str
    run_ids: list[str]


class DiagnosticGroup(BaseModel):
    """Diagnostics of one rule that give the same advice, each distinct finding once with its
    runs: a terminal shows the advice paragraph once instead of once per run."""

    severity: Literal["info", "warning", "error"]
    rule: str
    advice: str
    findings: list[FindingGroup]

    @property
    def run_ids(self) -> list[str]:
        return [run_id for group in self.findings for run_id in group.run_ids]


def group_identical(diagnostics: list[Diagnostic]) -> list[DiagnosticGroup]:
    """Diagnostics grouped by (severity, rule, advice), in first-seen order; within a group,
    identical findings are merged and keep their run ids."""
    groups: dict[tuple[str, str, str], DiagnosticGroup] = {}
    for diagnostic in diagnostics:
        key = (diagnostic.severity, diagnostic.rule, diagnostic.advice)
        group = groups.setdefault(
            key,
            DiagnosticGroup(
                severity=diagnostic.severity,
                rule=diagnostic.rule,
                advice=diagnostic.advice,
                findings=[],
            ),
        )
        same = next((f for f in group.findings if f.finding == diagnostic.finding), None)
        if same is None:
            group.findings.append(FindingGroup(finding=diagnostic.finding, run_ids=[]))
            same = group.findings[-1]
        if diagnostic.run_id not in same.run_ids:
            same.run_ids.append(diagnostic.run_id)
    return list(groups.values())


def ran_on_cpu(run: RunResult) -> bool:
    """Whether the run's engine ran on the CPU: device cpu, or device auto on a machine whose
    fingerprint lists no GPU (auto falls back to the CPU there)."""
    if run.config.device == "cpu":
        return True
    if run.config.device == "cuda" or not run.environment:
        return False
    return not run.environment.gpus and not run.environment.gpu_available


def profiling_command(run: RunResult) -> str:
    """GPU runs: `nsys profile -t cuda,nvtx --stats=true -o <run_id> <the run's command>`
    (article 5.1). CPU runs: py-spy, a sampling profiler of the Python processes (the engine
    runs in a worker subprocess, hence --subprocesses)."""
    command = run.command
    if not command:
        from bench.run.api import reproduce_command

        command = reproduce_command(run.config)
    if ran_on_cpu(run):
        return f"py-spy record --subprocesses -o {shlex.quote(run.run_id + '.svg')} -- {command}"
    return f"nsys profile -t cuda,nvtx --stats=true -o {shlex.quote(run.run_id)} {command}"


def _cuda_graphs_off(run: RunResult) -> str | None:
    """Why CUDA graphs look off: engine facts say so, or the options force eager mode."""
    if run.engine.cuda_graphs is False:
        return "the engine reports cuda_graphs = false"
    args = run.config.engine_args
    if args.get("enforce_eager") is True:
        return "engine_args has enforce_eager = true"
    if run.engine.enforce_eager is True:
        return "the engine reports enforce_eager = true"
    return None


def _low_hit_rate(run: RunResult, on_cpu: bool) -> tuple[str, str, str] | None:
    """(severity, finding, advice) when a workload that declares shared prefixes or
    conversations measured a low prefix-cache hit rate; None otherwise or when not measured."""
    workload = run.config.workload
    summary = run.summary
    if not isinstance(workload, GenerateWorkload) or summary is None:
        return None
    if workload.prefix is None and workload.conversation is None:
        return None
    rate = summary.prefix_cache_hit_rate
    if rate is None:
        return None
    share = summary.prefix_share_of_input_tokens
    threshold = share * LOW_HIT_RATE_FRACTION if share else LOW_HIT_RATE_FLOOR
    if rate >= threshold:
        return None
    declared = (
        f"{share:.0%} of input tokens are shared prefixes"
        if share
        else "the workload declares multi-turn conversations (each turn resends the history)"
    )
    finding = f"prefix-cache hit rate {rate:.1%} is low: {declared} (flagged below {threshold:.1%})"
    switch = prefix_caching_setting(run.config, run.engine)
    if switch is False:
        return (
            "info",
            finding + "; prefix caching is off in this run",
            "Expected: this run has prefix caching off (prefix_caching: false, the off half of a "
            "caching on/off pair); compare it with the run that has caching on.",
        )
    backend = registry().get(run.config.backend)
    options = (
        backend.engine_options(run.config.engine_args)
        if backend is not None
        else run.config.engine_args
    )  # a launched server's own arguments, as its backend reads them
    block = options.get("block_size") or VLLM_BLOCK_TOKENS["cpu" if on_cpu else "gpu"]
    causes = [
        "caching off: check that the engine runs with prefix caching (vLLM "
        "enable_prefix_caching, on by default in vLLM V1; TensorRT-LLM enable_block_reuse)"
    ]
    if workload.prefix is not None:
        tokens = workload.prefix.tokens.mean
        if tokens < block:
            causes.append(
                f"prefixes shorter than a KV block: the shared prefix ({tokens:,} tokens) is "
                f"below one block ({block} tokens), and only whole blocks are cached"
            )
        elif tokens % block:
            causes.append(
                f"prefixes not block-aligned: {tokens:,} tokens = {tokens // block} whole "
                f"blocks of {block} + {tokens % block} tokens recomputed every request"
            )
        else:
            causes.append(
                f"block alignment is not the cause ({tokens:,} tokens = {tokens // block} "
                f"blocks of {block})"
            )
        causes.append(
            f"eviction under memory pressure: {workload.prefix.count} distinct prefixes of "
            f"{tokens:,} tokens plus the requests in flight may not fit the KV cache, so "
            "prefixes are evicted before reuse"
        )
    else:
        causes.append(
            "eviction under memory pressure: conversations in progress hold their histories in "
            "the KV cache; with think time or many conversations, history is evicted before the "
            "next turn"
        )
    if run.config.backend == "openai":
        causes.append(
            "text prompts are re-tokenised by the server, which can shift the prefix/suffix "
            "seam by a token (prompt_format=tokens avoids it)"
        )
    return (
        "warning",
        finding + ". Likely causes: " + "; ".join(causes),
        "Keep prefix caching on; make shared prefixes a multiple of the KV block size (or put "
        "the varying text after a block boundary); give the KV cache room: raise "
        "gpu_memory_utilization (or VLLM_CPU_KVCACHE_SPACE on the CPU), use an FP8 KV cache "
        "(kv_cache_dtype=fp8), lower the concurrency or the number of distinct prefixes; route "
        "requests with the same prefix to the same replica.",
    )


def diagnose(run: RunResult) -> list[Diagnostic]:
    """Apply every rule to one run; rules whose inputs were not measured stay silent."""
    findings: list[Diagnostic] = []
    profile_cmd = profiling_command(run)
    backend = run.config.backend
    on_cpu = ran_on_cpu(run)

    def add(rule: str, severity: str, finding: str, advice: str, command: str | None = None):
        findings.append(
            Diagnostic(
                run_id=run.run_id,
                rule=rule,
                severity=severity,  # type: ignore[arg-type]
                finding=finding,
                advice=advice,
                command=command,
            )
        )

    failure_text = (
        " ".join(part for part in (run.failure.cause, run.failure.log_tail) if part)
        if run.failure is not None
        else ""
    )
    if failure_text and OOM_PATTERN.search(failure_text) and on_cpu:
        add(
            "out_of_memory",
            "error",
            f"the run failed out of host memory on the CPU: "
            f"{run.failure.cause if run.failure else ''}",
            "Make the weights and KV cache fit the host RAM: a smaller model (the CPU-sized "
            "preset), fewer sequences in flight (max_num_seqs, the concurrency), a shorter "
            "max_model_len, a smaller KV-cache space for vLLM on the CPU "
            "(VLLM_CPU_KVCACHE_SPACE, in GiB), and no other large process on the machine.",
        )
    elif failure_text and OOM_PATTERN.search(failure_text):
        add(
            "out_of_memory",
            "error",
            f"the run failed out of GPU memory: {run.failure.cause if run.failure else ''}",
            "Make the weights and KV cache fit: lower gpu_memory_utilization if other processes "
            "share the GPU, cap max_num_seqs and max_model_len to the workload's concurrency and "
            "context, quantise the weights (AWQ 4-bit or FP8), use an FP8 KV cache "
            "(kv_cache_dtype=fp8), split the model with tensor parallelism "
            "(tensor_parallel_size), or send a smaller batch. Check the estimate first: "
            "python -m advisor recommend --profile <profile> shows weights + KV cache vs memory.",
        )
    elif run.status == RunStatus.FAILED and run.failure is not None:
        add(
            "run_failed",
            "error",
            f"the run failed: {run.failure.cause}",
            run.failure.advice or "Read the worker log (log_path) for the cause.",
        )

    if run.validity is not None and run.validity.status == ValidityStatus.INVALID:
        add(
            "invalid_run",
            "warning",
            "the run is INVALID: " + "; ".join(run.validity.reasons or ["no reason recorded"]),
            "Do not compare it: lengthen the measured phase (duration_s), send more requests, or "
            "fix the errors, then run again.",
        )

    summary = run.summary
    if summary is not None and summary.requests > 0:
        budget = run.config.validity.max_error_rate
        answered = summary.requests - summary.cancelled  # the harness's cancellations aside
        if answered and summary.error_rate > budget:
            aside = (
                f"; {summary.cancelled} more were cancelled by the harness and are not counted"
                if summary.cancelled
                else ""
            )
            add(
                "high_error_rate",
                "error",
                f"{summary.failed} of {answered} requests failed "
                f"(error rate {summary.error_rate:.1%} > budget {budget:.1%}{aside})",
                "Read the failures' errors in the records; lower the concurrency or request rate "
                "to the engine's capacity (find it with a step pattern), raise request_timeout_s "
                "only if requests time out while still progressing, and add admission control "
                "(a bounded queue) in front of the engine.",
            )
        # E2E where the run has it, else TTFT; words and unit from the catalogue.
        spec = SPECS_BY_KEY["e2e_ms" if summary.e2e_ms is not None else "ttft_ms"]
        tail, middle = Metric(spec, "p99"), Metric(spec, "p50")
        latency = getattr(summary, spec.key)
        long_tail = (
            latency is not None and latency.p50 > 0 and latency.p99 > LONG_TAIL_RATIO * latency.p50
        )
        tail_words = (
            f"{tail.label} {latency.p99:.1f} {tail.unit} is {latency.p99 / latency.p50:.1f}x its "
            f"{middle.statistic} {latency.p50:.1f} {middle.unit} (threshold {LONG_TAIL_RATIO:g}x)"
            if long_tail
            else ""
        )
        if long_tail and on_cpu:
            add(
                "long_tail",
                "warning",
                f"{tail_words}, on the CPU",
                "On the CPU the tail is mostly cores shared with other work: run on an idle "
                "machine, pin the engine's threads (OMP_NUM_THREADS, torch.set_num_threads) to "
                "the cores it may use, keep the concurrency at or below the core count, and set "
                "per-request time-outs so stragglers cannot pile up.",
                profile_cmd,
            )
        elif long_tail:
            add(
                "long_tail",
                "warning",
                tail_words,
                "Set per-request execution time-outs so stragglers cannot pile up; enable "
                "FlashAttention (torch.backends.cuda.enable_flash_sdp(True) for PyTorch; vLLM "
                "picks its flash backend itself); put a request priority queue in front of the "
                "engine; long prompts stalling decodes call for chunked prefill "
                "(enable_chunked_prefill) or a lower max_num_batched_tokens; keep concurrency "
                "below the knee of a step pattern.",
                profile_cmd,
            )

    low_hits = _low_hit_rate(run, on_cpu)
    if low_hits is not None:
        add("low_prefix_cache_hit_rate", *low_hits)

    telemetry = run.telemetry
    utilization = telemetry.mean_gpu_utilization_pct
    if utilization is not None and utilization < GPU_UTILIZATION_TARGET_PCT:
        add(
            "low_gpu_utilization",
            "warning",
            f"mean GPU utilisation {utilization:.0f}% < {GPU_UTILIZATION_TARGET_PCT:.0f}%",
            "The GPU waits on the host: raise the concurrency or batch size (vLLM max_num_seqs, "
            "TensorRT-LLM max_batch_size), make sure CUDA graphs are on, move tokenisation and "
            "pre-processing off the serving path, and profile to see the share of data movement "
            "(host-to-device copies) and kernel-launch gaps.",
            profile_cmd,
        )

    # CUDA graphs do not exist on the CPU (and the quick plan makes vLLM eager there itself).
    why_off = None if on_cpu else _cuda_graphs_off(run)
    if why_off is not None:
        per_backend = {
            "vllm": "drop enforce_eager (vLLM captures CUDA graphs for decode batch sizes)",
            "torch_compile": "compile with mode='reduce-overhead' (CUDA graphs)",
            "tensorrt_llm": "enable CUDA graphs (cuda_graph_config in the LLM API)",
        }
        add(
            "cuda_graphs_off",
            "warning",
            f"CUDA graphs are off: {why_off}",
            "Decode steps are short kernels and launch overhead dominates without CUDA graphs: "
            + per_backend.get(backend, "turn CUDA graphs on in the engine's options")
            + "; verify with the profile that kernel launches are replayed as graphs.",
            profile_cmd,
        )

    efficiency = telemetry.memory_efficiency_gb_per_b_params
    threshold = MEMORY_EFFICIENCY_REFERENCE_GB_PER_B * MEMORY_EFFICIENCY_FLAG_FACTOR
    if efficiency is not None and efficiency > threshold:
        add(
            "memory_efficiency",
            "info",
            f"peak GPU memory is {efficiency:.2f} GB per billion parameters, "
            f"{efficiency / MEMORY_EFFICIENCY_REFERENCE_GB_PER_B:.1f}x the article's "
            f"{MEMORY_EFFICIENCY_REFERENCE_GB_PER_B} GB/B reference (fp16 weights alone are "
            "2 GB/B, so the reference implies 8-bit weights or less)",
            "Engines such as vLLM pre-allocate a KV-cache pool up to gpu_memory_utilization, so "
            "peak memory reflects that setting, not need: lower gpu_memory_utilization to what "
            "the concurrency needs if the GPU is shared; for smaller weights use AWQ or FP8 "
            "quantisation; an FP8 KV cache halves the pool per token.",
        )
    return findings


__all__ = ["Diagnostic", "diagnose", "profiling_command", "ran_on_cpu"]
