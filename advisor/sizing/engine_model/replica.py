"""One replica's shape from the model facts, the formats, the GPU, the engine's limits and the
traffic's prefix reuse: what the memory fit, the floors and the serving model read.

Memory (per GPU), the one rule the memory fit, the configuration search and the serving model
use: a serving engine takes `gpu_memory_utilization` of the GPU (vLLM's default 0.9; a
datasheet's "80 GB" of HBM is 80 GiB), holds the weights / TP and RUNTIME_OVERHEAD_GIB_PER_GPU
(CUDA context, the activations of its largest batch, workspaces, CUDA graphs), and gives the KV
pool the rest; shared prefix blocks sit in that pool once. Checked against the KV pool vLLM
reported on every shipped GPU run whose engine log has it (advisor/sizing/memory_validation.py,
docs/capacity-model.md "The KV pool").
"""

from __future__ import annotations

from collections.abc import Mapping

from advisor.sizing.engine_model.facts import ModelFacts
from advisor.sizing.engine_model.formats import Formats, gemm_peak_tflops
from advisor.sizing.engine_model.prefix import PrefixReuse
from advisor.sizing.engine_model.step import TP_EFFICIENCY_ASSUMED, EngineShape
from advisor.workload.gpus import GpuSpec

GB = 1e9
"""Weights and KV are stated in decimal GB, as model cards state weights."""
GIB = 2**30
RUNTIME_OVERHEAD_GIB_PER_GPU = 1.5
"""What an engine's share of a GPU holds besides weights and the KV pool. vLLM's own accounting
(KV pool = utilization x memory - weights - the rest) left 0.9-1.9 GiB on the shipped runs of
llama-2-7b, llama-3.1-8b and qwen3-30b-a3b on the H100 and H200 (memory_validation.py): a
constant, not a share of the weights (a 10% share claimed 6 GiB for a 61 GB MoE and cut its
KV pool to a third)."""
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_TOKEN_BUDGET = 2048
"""max_num_batched_tokens the shipped H200 vLLM runs recorded (run.engine) when not set."""
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
"""vLLM's default share of GPU memory for weights, activations and the KV cache."""


def kv_bytes_per_token(facts: ModelFacts, formats: Formats) -> float | None:
    """KV bytes one token holds for the whole model (all TP ranks); None when sizes unknown."""
    elements = facts.kv_elements_per_token()
    return None if elements is None else elements * formats.kv_bytes


def weight_bytes(facts: ModelFacts, formats: Formats) -> float:
    """Bytes of all weights (every expert of a mixture-of-experts)."""
    return facts.parameters * formats.weight_bytes


def engine_memory_bytes(
    memory_gb: float, utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
) -> float:
    """Bytes of one GPU a serving engine takes: `utilization` of the datasheet size, read as
    binary (nvidia-smi shows an "80 GB" H100 as 79.6 GiB, a "141 GB" H200 as 140.4 GiB)."""
    return memory_gb * GIB * utilization


def free_for_kv_bytes(
    facts: ModelFacts,
    formats: Formats,
    memory_gb: float,
    tensor_parallel: int,
    utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
) -> float:
    """Bytes per GPU left for the KV pool after the weights and the runtime."""
    weights = weight_bytes(facts, formats) / tensor_parallel
    return free_after_weights(weights, memory_gb, utilization)


def free_after_weights(
    weights_per_gpu: float, memory_gb: float, utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
) -> float:
    """Bytes per GPU left for the KV pool once `weights_per_gpu` and the runtime are held."""
    return (
        engine_memory_bytes(memory_gb, utilization)
        - RUNTIME_OVERHEAD_GIB_PER_GPU * GIB
        - weights_per_gpu
    )


def _positive(value: object, default: float) -> float:
    return float(value) if isinstance(value, int | float) and value > 0 else default


def replica_shape(
    facts: ModelFacts,
    formats: Formats,
    gpu: GpuSpec,
    tensor_parallel: int,
    engine_args: Mapping[str, object] | None = None,
    memory_gb: float | None = None,
    bandwidth_tb_s: float | None = None,
    reuse: PrefixReuse | None = None,
    prompt_tokens: float = 0.0,
    cascade: bool = False,
) -> EngineShape | None:
    """The replica's shape; None when the KV size or the GPU's tensor peak is unknown.
    `prompt_tokens` is the mean served prompt (for the keys a prefilled token attends over);
    `cascade`: the engine reads a batch-wide common prefix once per step (vLLM)."""
    per_token = kv_bytes_per_token(facts, formats)
    tflops = gemm_peak_tflops(gpu, formats)
    if per_token is None or tflops is None:
        return None
    args = engine_args or {}
    reuse = reuse or PrefixReuse.none()
    tp = tensor_parallel
    utilization = _positive(args.get("gpu_memory_utilization"), DEFAULT_GPU_MEMORY_UTILIZATION)
    kv_token = per_token / tp
    free = free_for_kv_bytes(facts, formats, memory_gb or gpu.memory_gb, tp, utilization)
    capacity = max(0, int(free // kv_token) - int(reuse.shared_kv_tokens))
    cached = min(reuse.cached_tokens, max(prompt_tokens - 1, 0.0))
    return EngineShape(
        facts=facts,
        tensor_parallel=tp,
        weight_bytes=weight_bytes(facts, formats) / tp,
        kv_bytes_per_token=kv_token,
        bandwidth_bytes_per_ms=(bandwidth_tb_s or gpu.memory_bandwidth_tb_s) * 1e12 / 1e3,
        peak_flops_per_ms=tflops * 1e12 / 1e3,
        tp_efficiency=TP_EFFICIENCY_ASSUMED.get(tp, 0.6),
        max_num_seqs=int(_positive(args.get("max_num_seqs"), DEFAULT_MAX_NUM_SEQS)),
        token_budget=int(_positive(args.get("max_num_batched_tokens"), DEFAULT_TOKEN_BUDGET)),
        kv_capacity_tokens=capacity,
        cached_prompt_tokens=cached,
        prefill_keys_per_token=cached + (prompt_tokens - cached) / 2,
        pooled_prompt_tokens=min(reuse.per_sequence_shared_tokens, cached),
        common_prefix_tokens=min(reuse.common_tokens, cached) if cascade else 0.0,
    )


__all__ = [
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MAX_NUM_SEQS",
    "DEFAULT_TOKEN_BUDGET",
    "GB",
    "GIB",
    "RUNTIME_OVERHEAD_GIB_PER_GPU",
    "engine_memory_bytes",
    "free_after_weights",
    "free_for_kv_bytes",
    "kv_bytes_per_token",
    "replica_shape",
    "weight_bytes",
]
