"""Class logits of an encoder classifier through the engine that would serve it, at one precision.

`open_encoder_scorer(engine, model_dir, precision)` gives a scorer whose `logits(sequences)`
returns one row of class logits (float32) per token-id sequence; `bench/run/quality.py` compares
each precision's rows with the baseline's (top-1 agreement, max abs logit difference). Engines:
- pytorch: the transformers model; fp32 / bf16 / fp16 weights and activations; int8: on a GPU
  INT8 weights per channel and activations per token through `torch._int_mm` (bench/engines/
  w8a8.py), on the CPU torch's dynamic INT8 (`torch.ao.quantization.quantize_dynamic`) of every
  Linear layer; fp8 (GPU only): e4m3 weights and activations through `torch._scaled_mm`;
- onnxruntime: the checkpoint's ONNX export (bench/engines/onnx_export.py, dynamic batch and
  sequence) in an InferenceSession: fp32 (checked against eager PyTorch before it is used), fp16
  (onnxruntime's float16 conversion), int8 (`onnxruntime.quantization.quantize_dynamic`: INT8
  weights, activations quantized per batch at run time).
A precision outside an engine's table is refused (`check_encoder_precisions`, a UserError); one
that fails to load or to run its first batch raises, and the caller reports it as not run.
"""

from __future__ import annotations

import gc
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from bench.core.errors import UserError
from bench.engines.cpu_int8 import int8_dynamic

if TYPE_CHECKING:
    import numpy as np

ENCODER_ENGINES = ("pytorch", "onnxruntime")
ENCODER_BATCH = 16
EXPORT_SEQUENCE = 16
"""Sequence length of the example the ONNX export traces (batch and sequence stay dynamic)."""

ENCODER_METHODS: dict[str, dict[str, str]] = {
    "pytorch": {
        "fp32": "PyTorch eager, float32 weights and activations",
        "bf16": "PyTorch eager, bfloat16 weights and activations",
        "fp16": "PyTorch eager, float16 weights and activations",
        "int8": "PyTorch eager on the CPU, torch dynamic INT8 quantization (torch.ao "
        "quantize_dynamic): every Linear weight int8 per tensor, activations quantized per batch "
        "at run time, float32 elsewhere",
        "fp8": "PyTorch eager on a GPU with FP8 tensor cores: every Linear through "
        "torch._scaled_mm, e4m3 weights per output channel and activations per token (dynamic), "
        "bfloat16 elsewhere (bench/engines/w8a8.py)",
    },
    "onnxruntime": {
        "fp32": "ONNX Runtime, the float32 ONNX export (checked against eager PyTorch)",
        "fp16": "ONNX Runtime, the ONNX export converted to float16 (onnxruntime's float16 "
        "tool, inputs and outputs kept float32)",
        "int8": "ONNX Runtime, the float32 export quantized by onnxruntime.quantization."
        "quantize_dynamic (INT8 weights per tensor, activations quantized per batch at run "
        "time)",
    },
}


GPU_INT8_METHOD = (
    "PyTorch eager on a GPU: every Linear through torch._int_mm, INT8 weights per output channel "
    "and activations per token (dynamic), bfloat16 elsewhere (bench/engines/w8a8.py)"
)
"""What `int8` means on pytorch where a GPU is present (the table's entry is the CPU path)."""


class EncoderScorer(Protocol):
    method: str

    def logits(self, sequences: Sequence[list[int]]) -> np.ndarray: ...

    def close(self) -> None: ...


def check_encoder_precisions(engine: str, precisions: Sequence[str]) -> None:
    """UserError naming what this engine runs for encoders, before anything loads."""
    if engine not in ENCODER_ENGINES:
        raise UserError(
            f"engine {engine!r} does not serve encoders here; use one of "
            f"{', '.join(ENCODER_ENGINES)} for a classifier"
        )
    table = ENCODER_METHODS[engine]
    for name in precisions:
        if name not in table:
            raise UserError(
                f"precision {name} on {engine} for an encoder: not available; {engine} runs "
                f"{', '.join(table)} for encoders"
            )


def _batches(sequences: Sequence[list[int]], pad_id: int):
    """Right-padded int64 (input_ids, attention_mask) arrays, ENCODER_BATCH rows at a time."""
    import numpy as np

    for start in range(0, len(sequences), ENCODER_BATCH):
        batch = sequences[start : start + ENCODER_BATCH]
        width = max(len(ids) for ids in batch)
        input_ids = np.full((len(batch), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, ids in enumerate(batch):
            input_ids[row, : len(ids)] = ids
            mask[row, : len(ids)] = 1
        yield input_ids, mask


def _check_logits(rows: np.ndarray, count: int) -> np.ndarray:
    """The classifier's (examples, classes) logits; a hidden-state output is not one."""
    if rows.ndim != 2 or rows.shape[0] != count:
        raise UserError(
            f"the model's output has shape {tuple(rows.shape)}, not (examples, classes): it has "
            "no classification head (top-1 agreement needs class logits)"
        )
    return rows


class TorchEncoderScorer:
    """The transformers classifier at one precision (int8 on the CPU)."""

    def __init__(self, model_dir: str, precision: str, pad_id: int) -> None:
        import torch

        from bench.engines.backends.pytorch import load_hf_model

        self.pad_id = pad_id
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        on_gpu_8bit = self.device == "cuda" and precision in ("int8", "fp8")
        self.method = (
            GPU_INT8_METHOD
            if on_gpu_8bit and precision == "int8"
            else (ENCODER_METHODS["pytorch"][precision])
        )
        if precision == "fp8" and self.device != "cuda":
            raise RuntimeError("fp8 needs a GPU with FP8 tensor cores; this machine has no GPU")
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
        if on_gpu_8bit:
            dtype = torch.bfloat16  # what runs between the 8-bit Linear layers
        self.model = load_hf_model(model_dir, dtype, self.device, attn_implementation="eager")
        if on_gpu_8bit:
            from bench.engines.w8a8 import quantize_linears

            self.model = quantize_linears(self.model, precision)  # type: ignore[arg-type]
        elif precision == "int8":
            self.model = int8_dynamic(self.model)
        self.logits([[pad_id + 1, pad_id + 2]])  # a dtype the device cannot compute fails here

    def logits(self, sequences: Sequence[list[int]]) -> np.ndarray:
        import numpy as np
        import torch

        rows = []
        for input_ids, mask in _batches(sequences, self.pad_id):
            with torch.inference_mode():
                output = self.model(
                    input_ids=torch.from_numpy(input_ids).to(self.device),
                    attention_mask=torch.from_numpy(mask).to(self.device),
                )
            rows.append(output[0].float().cpu().numpy())
        return _check_logits(np.concatenate(rows), len(sequences))

    def close(self) -> None:
        del self.model
        gc.collect()


def quantized_int8(fp32_path: Path) -> Path:
    """`model-int8.onnx` beside the float32 export (made once): quantize_dynamic, INT8 weights."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = fp32_path.with_name("model-int8.onnx")
    if target.exists():
        return target
    staging = target.with_name(f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}-model-int8.onnx")
    quantizer_log = logging.getLogger()  # quantize_dynamic logs its pre-processing advice here
    level = quantizer_log.level
    quantizer_log.setLevel(logging.ERROR)
    try:
        quantize_dynamic(str(fp32_path), str(staging), weight_type=QuantType.QInt8)
        os.replace(staging, target)
    finally:
        quantizer_log.setLevel(level)
        staging.unlink(missing_ok=True)
    return target


class OrtEncoderScorer:
    """The classifier's ONNX export in an ONNX Runtime session at one precision."""

    def __init__(self, model_dir: str, precision: str, pad_id: int) -> None:
        import onnxruntime

        from bench.engines.models import load_config
        from bench.engines.onnx_export import (
            ForwardShape,
            check_outputs,
            default_tolerance,
            eager_reference,
            export_onnx,
            make_inputs,
        )

        self.method = ENCODER_METHODS["onnxruntime"][precision]
        self.pad_id = pad_id
        shape = ForwardShape(batch_size=2, sequence_length=EXPORT_SEQUENCE)
        export = export_onnx(
            model_dir, shape, dynamic=True, dtype="float16" if precision == "fp16" else "float32"
        )
        path = quantized_int8(export.path) if precision == "int8" else export.path
        available = onnxruntime.get_available_providers()
        providers = ["CPUExecutionProvider"]
        if "CUDAExecutionProvider" in available and precision != "int8":
            providers.insert(0, "CUDAExecutionProvider")
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # output dims named after the export's dynamic axes
        self.session = onnxruntime.InferenceSession(
            str(path), sess_options=options, providers=providers
        )
        self.providers = self.session.get_providers()
        if precision == "fp32":  # the export itself must match eager PyTorch before it is used
            inputs = make_inputs(load_config(model_dir), shape)
            on_gpu = self.providers[0] == "CUDAExecutionProvider"  # TF32 allowed there
            check_outputs(
                self._run(inputs["input_ids"], inputs["attention_mask"]),
                eager_reference(model_dir, inputs),
                default_tolerance("float32", allow_tf32=on_gpu),
                "the float32 ONNX export",
            )
        self.logits([[pad_id + 1, pad_id + 2]])  # an op the provider lacks fails here

    def _run(self, input_ids: Any, mask: Any) -> np.ndarray:
        (output,) = self.session.run(None, {"input_ids": input_ids, "attention_mask": mask})
        return output.astype("float32")

    def logits(self, sequences: Sequence[list[int]]) -> np.ndarray:
        import numpy as np

        rows = [self._run(input_ids, mask) for input_ids, mask in _batches(sequences, self.pad_id)]
        return _check_logits(np.concatenate(rows), len(sequences))

    def close(self) -> None:
        del self.session
        gc.collect()


def open_encoder_scorer(
    engine: str, model_dir: str | Path, precision: str, pad_id: int
) -> EncoderScorer:
    """The scorer for `precision` on `engine` (checked by `check_encoder_precisions` first)."""
    check_encoder_precisions(engine, [precision])
    if engine == "pytorch":
        return TorchEncoderScorer(str(model_dir), precision, pad_id)
    return OrtEncoderScorer(str(model_dir), precision, pad_id)
