"""8-bit weights and activations for a model's Linear layers on a GPU, as serving engines run
them (vLLM's W8A8 INT8 and dynamic FP8 paths): weights quantized once per output channel,
activations per token at run time, the product accumulated at full precision and scaled back.

- int8: symmetric INT8 (scale = max |x| / 127), `torch._int_mm` (INT8 x INT8 -> INT32);
- fp8: e4m3 (scale = max |x| / 448), `torch._scaled_mm` with row-wise scales (FP8 tensor cores:
  compute capability 8.9 and later; elsewhere the first batch fails and the caller says why).

The activation quantization runs as separate elementwise kernels (amax, scale, round, cast),
which serving engines fuse into the GEMM: the accuracy is theirs, the speed is eager PyTorch's
(3.6-7.0x slower than float16 on an H100, data/reference/h100_encoders_8bit_runs.json).

`quantize_linears(model, fmt)` swaps every `torch.nn.Linear` (a classifier's head too, as the CPU
INT8 path does) for its 8-bit counterpart; everything else runs at the model's own dtype. Used by
`bench quality` (bench/engines/encoder_scoring.py) to measure what INT8 and FP8 cost an encoder's
accuracy on the GPU that would serve it, and by the `pytorch` backend for forward runs at
`precision.quantization` int8/fp8. Imports torch at the top: callers import this module
inside the function that needs it.
"""

from __future__ import annotations

from typing import Literal

import torch

Format = Literal["int8", "fp8"]
INT8_MAX = 127.0
FP8_E4M3_MAX = 448.0
INT_MM_MIN_ROWS = 17
"""torch._int_mm on CUDA needs more than 16 rows; shorter inputs are padded with zero rows."""
ALIGN = 16
"""The GPU kernels want both matrix widths in multiples of 16 (8 for INT8): a classifier's
2-class head is padded with zero channels (and a narrow input with zero columns), which adds
nothing to the product, and the padding is cut from the output."""


def _padded(width: int) -> int:
    return -(-width // ALIGN) * ALIGN


def _row_scales(x: torch.Tensor, limit: float) -> torch.Tensor:
    """One float32 scale per row (token or output channel) so that its largest |value| maps to
    the format's largest; an all-zero row gets scale 1 (its codes are 0 either way)."""
    amax = x.abs().amax(dim=-1, keepdim=True).float()
    return torch.where(amax > 0, amax / limit, torch.ones_like(amax))


class W8A8Linear(torch.nn.Module):
    """A Linear layer whose weight is stored 8-bit per output channel and whose input is
    quantized per token on every call."""

    def __init__(self, linear: torch.nn.Linear, fmt: Format) -> None:
        super().__init__()
        self.fmt = fmt
        self.out_features = linear.out_features
        self.out_dtype = linear.weight.dtype
        weight = linear.weight.detach().float()
        self.in_features = weight.shape[1]
        weight = torch.nn.functional.pad(
            weight,
            (
                0,
                _padded(weight.shape[1]) - weight.shape[1],
                0,
                _padded(weight.shape[0]) - weight.shape[0],
            ),
        )
        self.register_buffer("weight_scale", _row_scales(weight, self._limit()).reshape(1, -1))
        codes = weight / self.weight_scale.reshape(-1, 1)
        if fmt == "int8":
            stored = codes.round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
        else:
            stored = codes.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
        # (in, out), column-major for _scaled_mm's second operand: the transpose of (out, in).
        self.register_buffer("weight_t", stored.t())
        bias = linear.bias.detach() if linear.bias is not None else None
        self.register_buffer("bias", bias)

    def _limit(self) -> float:
        return INT8_MAX if self.fmt == "int8" else FP8_E4M3_MAX

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1]).float()
        if self.weight_t.shape[0] > self.in_features:
            rows = torch.nn.functional.pad(rows, (0, self.weight_t.shape[0] - self.in_features))
        scale = _row_scales(rows, self._limit())
        if self.fmt == "int8":
            codes = (rows / scale).round().clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
            count = codes.shape[0]
            if count < INT_MM_MIN_ROWS:
                codes = torch.nn.functional.pad(codes, (0, 0, 0, INT_MM_MIN_ROWS - count))
            product = torch._int_mm(codes, self.weight_t)[:count].float()
            out = product * scale * self.weight_scale
        else:
            codes = (rows / scale).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)
            out = torch._scaled_mm(
                codes,
                self.weight_t,
                scale_a=scale,
                scale_b=self.weight_scale.float(),
                out_dtype=torch.bfloat16,
            ).float()
        out = out[:, : self.out_features]
        if self.bias is not None:
            out = out + self.bias.float()
        return out.to(self.out_dtype).reshape(*shape[:-1], self.out_features)


def quantize_linears(model: torch.nn.Module, fmt: Format) -> torch.nn.Module:
    """Every Linear of `model` replaced in place by its W8A8 version; returns the model."""
    for module in list(model.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, child_name, W8A8Linear(child, fmt))
    return model
