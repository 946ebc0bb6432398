"""GPU catalogue: memory, memory bandwidth and dense tensor throughput from NVIDIA datasheets.

These are DATASHEET figures (peak, not measured): the estimate uses them for the physical floor
when no measured bandwidth is given. Names are canonical keys; `find_gpu` also accepts NVML names
("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB") and loose spellings ("h200", "rtx 4090").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from bench.core.errors import UserError


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model's datasheet figures (peak values; tensor TFLOP/s are dense, no sparsity)."""

    name: str
    memory_gb: float
    memory_bandwidth_tb_s: float
    dense_bf16_tflops: float | None
    """Dense BF16 tensor-core TFLOP/s (None where the GPU has no BF16 tensor cores)."""
    dense_fp16_tflops: float
    """Dense FP16 tensor-core TFLOP/s with FP32 accumulate."""
    fp8: bool
    """Hardware FP8 tensor cores (Ada, Hopper): FP8 weight/KV quantisation runs natively."""
    source: str
    nvml_patterns: tuple[str, ...] = ()
    """Regular expressions matched against the NVML name (lower case) to recognise this GPU."""

    @property
    def figures_kind(self) -> str:
        return "datasheet"

    def peak_tflops(self, dtype: str) -> float | None:
        """Dense tensor TFLOP/s for a dtype; FP32 uses the BF16 figure only via TF32 (not here)."""
        if dtype == "bfloat16":
            return self.dense_bf16_tflops or self.dense_fp16_tflops
        if dtype == "float16":
            return self.dense_fp16_tflops
        return None


_A100_SRC = "NVIDIA A100 Tensor Core GPU datasheet (2021): 312 TFLOP/s BF16/FP16 dense"
_H100_SRC = "NVIDIA H100 Tensor Core GPU datasheet (2023); dense = half the sparsity figure"
_H200_SRC = "NVIDIA H200 Tensor Core GPU datasheet (2024), SXM; dense = half the sparsity figure"

GPUS: dict[str, GpuSpec] = {
    spec.name: spec
    for spec in (
        GpuSpec("A100-40GB-PCIE", 40, 1.555, 312, 312, False, _A100_SRC, (r"a100.*pcie.*40",)),
        GpuSpec(
            "A100-80GB-PCIE",
            80,
            1.935,
            312,
            312,
            False,
            _A100_SRC,
            (r"a100.*80gb.*pcie", r"a100.*pcie.*80"),
        ),
        GpuSpec("A100-40GB-SXM", 40, 1.555, 312, 312, False, _A100_SRC, (r"a100.*sxm.*40",)),
        GpuSpec("A100-80GB-SXM", 80, 2.039, 312, 312, False, _A100_SRC, (r"a100.*sxm.*80",)),
        GpuSpec(
            "H100-SXM",
            80,
            3.35,
            989,
            989,
            True,
            _H100_SRC,
            (r"h100.*hbm3", r"h100.*sxm"),
        ),
        GpuSpec("H100-PCIE", 80, 2.0, 756, 756, True, _H100_SRC, (r"h100.*pcie",)),
        GpuSpec("H200", 141, 4.8, 989, 989, True, _H200_SRC, (r"h200",)),
        GpuSpec(
            "L4",
            24,
            0.3,
            121,
            121,
            True,
            "NVIDIA L4 Tensor Core GPU datasheet (2023); dense = half the sparsity figure",
            (r"\bl4\b",),
        ),
        GpuSpec(
            "L40S",
            48,
            0.864,
            362,
            362,
            True,
            "NVIDIA L40S datasheet (2023); dense = half the sparsity figure",
            (r"l40s",),
        ),
        GpuSpec(
            "A10",
            24,
            0.6,
            125,
            125,
            False,
            "NVIDIA A10 Tensor Core GPU datasheet (2021): 125 TFLOP/s BF16/FP16 dense (250 with "
            "sparsity), 600 GB/s GDDR6, 24 GB",
            (r"\ba10\b",),
        ),
        GpuSpec(
            "A10G",
            24,
            0.6,
            125,
            125,
            False,
            "NVIDIA A10 datasheet (2021); the A10G is AWS's variant with no public NVIDIA "
            "datasheet, so its compute figure is the A10's and may be optimistic",
            (r"a10g",),
        ),
        GpuSpec(
            "T4",
            16,
            0.32,
            None,
            65,
            False,
            "NVIDIA T4 datasheet (2019): 65 TFLOP/s FP16 mixed precision; no BF16 tensor cores",
            (r"\bt4\b",),
        ),
        GpuSpec(
            "RTX-4090",
            24,
            1.008,
            165.2,
            165.2,
            True,
            "NVIDIA Ada Lovelace architecture whitepaper (2022): FP16/BF16 with FP32 accumulate",
            (r"4090",),
        ),
    )
}


def _squash(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


@lru_cache(maxsize=256)
def find_gpu(name: str) -> GpuSpec | None:
    """The catalogue entry for a canonical name, a loose spelling or an NVML name; else None.
    Cached by name: the catalogue is fixed, and one answer looks GPUs up thousands of times."""
    wanted = _squash(name)
    for spec in GPUS.values():
        if _squash(spec.name) == wanted:
            return spec
    lowered = name.lower()
    for spec in GPUS.values():
        if any(re.search(pattern, lowered) for pattern in spec.nvml_patterns):
            return spec
    return None


def get_gpu(name: str) -> GpuSpec:
    """Like `find_gpu`, but an unknown name is a UserError listing the known ones."""
    spec = find_gpu(name)
    if spec is None:
        raise UserError(f"{name!r} is not a known GPU; known: {', '.join(GPUS)}")
    return spec


__all__ = ["GPUS", "GpuSpec", "find_gpu", "get_gpu"]
