"""Weight and KV-cache formats: bytes per element and the tensor-core peak each format's GEMMs
run at on a GPU.

A deployment's weight format comes from its run precision (vLLM's dynamic FP8) or, where the
profile names a pre-quantised checkpoint (AWQ, GPTQ, INT4, INT8/W8A8), from that scheme: the
checkpoint is what the engine loads, so its bytes are what a step reads. GEMM peaks: FP8 GEMMs
run at twice the 16-bit dense peak on GPUs with FP8 tensor cores (Hopper, Ada datasheets), INT8
W8A8 at twice the 16-bit peak on every catalogued GPU (INT8 tensor cores since Turing); 4-bit
weights are dequantised into 16-bit GEMMs (AWQ/GPTQ Marlin kernels), so they read half a byte per
weight and compute at the 16-bit peak. FP8 weights on a GPU without FP8 tensor cores run as
weight-only FP8 (vLLM's Marlin FP8): one byte read, the 16-bit peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.workload.gpus import GpuSpec

DTYPE_BYTES = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}
FOUR_BIT_GROUP_OVERHEAD = 4 / 128
"""Bytes per weight for a 4-bit group of 128 with an fp16 scale and an fp16 zero point."""
FOUR_BIT_BYTES = 0.5 + FOUR_BIT_GROUP_OVERHEAD
SCHEME_FORMATS = (  # (substring of the profile's scheme name, format), first match wins
    ("awq", "int4"),
    ("gptq", "int4"),
    ("int4", "int4"),
    ("w8a8", "int8"),
    ("int8", "int8"),
    ("fp8", "fp8"),
)
FORMAT_BYTES = {
    "fp32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": FOUR_BIT_BYTES,
}
DTYPE_FORMAT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class Formats:
    """How one deployment stores and computes: weight format, KV format and the GEMM class."""

    weights: str
    kv: str
    dtype: str

    @property
    def weight_bytes(self) -> float:
        return FORMAT_BYTES[self.weights]

    @property
    def kv_bytes(self) -> float:
        return FORMAT_BYTES[self.kv]

    def label(self) -> str:
        """`int4 weights + fp8 KV`, `bf16`: what a step reads, in words."""
        text = (
            self.weights if self.weights == DTYPE_FORMAT[self.dtype] else f"{self.weights} weights"
        )
        return text + (" + fp8 KV" if self.kv == "fp8" else "")


def scheme_format(scheme: str | None) -> str | None:
    """The weight format a profile's quantisation scheme name stands for (None: not named)."""
    if not scheme:
        return None
    key = scheme.lower()
    return next((fmt for name, fmt in SCHEME_FORMATS if name in key), None)


def formats_for(
    dtype: str, run_quantization: str | None, kv_cache_dtype: str, scheme: str | None = None
) -> Formats:
    """The formats of a deployment: the run's FP8 first, else the profile's pre-quantised
    scheme, else the dtype; the KV cache at FP8 or the dtype."""
    weights = "fp8" if run_quantization == "fp8" else scheme_format(scheme) or DTYPE_FORMAT[dtype]
    kv = "fp8" if kv_cache_dtype == "fp8" else DTYPE_FORMAT[dtype]
    return Formats(weights=weights, kv=kv, dtype=dtype)


def gemm_peak_tflops(gpu: GpuSpec, formats: Formats) -> float | None:
    """Dense tensor TFLOP/s the deployment's GEMMs run at (module docstring); None when the GPU
    has no tensor-core peak for the dtype."""
    base = gpu.peak_tflops(formats.dtype)
    if base is None:
        return None
    if formats.weights == "fp8" and gpu.fp8:
        return 2 * base
    if formats.weights == "int8":
        return 2 * base
    return base


__all__ = ["DTYPE_BYTES", "FORMAT_BYTES", "Formats", "formats_for", "gemm_peak_tflops"]
