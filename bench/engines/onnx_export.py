"""Export a forward-kind checkpoint (BERT, ResNet, ViT...) to ONNX, cached, and check it.

The export is checked against eager PyTorch (relative error ‖onnx − torch‖ / ‖torch‖) before any
engine built from it is timed; a failing check raises `ExportCheckFailed`, a run failure.
torch, transformers and onnxruntime are imported inside functions only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.core.errors import UserError

if TYPE_CHECKING:
    import numpy as np
    import torch

# Bumped when the exported graph changes for the same inputs (wrapper, opset, exporter choice),
# so stale cached exports are not reused.
EXPORT_FORMAT_VERSION = 1
DEFAULT_OPSET = 18
DEFAULT_IMAGE_SIZE = 224
DEFAULT_SEQUENCE_LENGTH = 128
OUTPUT_NAME = "output"
TEXT_INPUT_NAMES = ("input_ids", "attention_mask")
VISION_INPUT_NAMES = ("pixel_values",)

TOLERANCE_FLOAT32 = 1e-4
"""Relative error allowed for an fp32 export run in fp32 (observed ~1e-7 on CPU)."""
TOLERANCE_TF32 = 5e-3
"""fp32 graph with TF32 matmuls allowed (10-bit mantissa inputs): ~1e-3 is typical."""
TOLERANCE_FLOAT16 = 2e-2
"""fp16 graph against the fp32 eager reference."""


class ExportCheckFailed(RuntimeError):
    """The ONNX graph's outputs disagree with eager PyTorch beyond the tolerance."""


@dataclass(frozen=True)
class ForwardShape:
    """The concrete input shape of one forward batch."""

    batch_size: int
    sequence_length: int | None = None
    image_size: int | None = None

    def key(self) -> str:
        parts = [f"b{self.batch_size}"]
        if self.sequence_length is not None:
            parts.append(f"s{self.sequence_length}")
        if self.image_size is not None:
            parts.append(f"px{self.image_size}")
        return "-".join(parts)


@dataclass
class ExportResult:
    """Where the ONNX file is and how it was made (export_s is 0.0 when served from cache)."""

    path: Path
    input_names: tuple[str, ...]
    output_name: str
    dynamic: bool
    shape: ForwardShape
    dtype: str
    export_s: float
    cached: bool
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    relative_error: float
    tolerance: float
    passed: bool


# --------------------------------------------------------------------------- model and inputs


def is_vision_config(config: Any) -> bool:
    """Image models take pixel_values (their configs carry num_channels); text models token ids."""
    return hasattr(config, "num_channels") and not hasattr(config, "vocab_size")


def input_names_for(config: Any) -> tuple[str, ...]:
    return VISION_INPUT_NAMES if is_vision_config(config) else TEXT_INPUT_NAMES


def default_image_size(config: Any) -> int:
    size = getattr(config, "image_size", None)
    if isinstance(size, (list, tuple)):
        size = size[0]
    return int(size) if size else DEFAULT_IMAGE_SIZE


def resolve_shape(
    config: Any, batch_size: int, sequence_length: int | None, image_size: int | None
) -> ForwardShape:
    """Fill the dimension the model needs (sequence for text, image side for vision)."""
    if is_vision_config(config):
        return ForwardShape(batch_size, image_size=image_size or default_image_size(config))
    sequence = sequence_length or DEFAULT_SEQUENCE_LENGTH
    max_positions = getattr(config, "max_position_embeddings", None)
    if max_positions and sequence > max_positions:
        raise UserError(
            f"sequence length {sequence} exceeds the model's max_position_embeddings "
            f"({max_positions})"
        )
    return ForwardShape(batch_size, sequence_length=sequence)


class PrimaryOutput:
    """Factory for a torch module that takes positional tensors and returns the first output.

    transformers models take keyword inputs and return ModelOutput objects; exporters and
    engines want positional tensors in and one tensor out (last_hidden_state or logits).
    """

    @staticmethod
    def wrap(model: torch.nn.Module, input_names: tuple[str, ...]) -> torch.nn.Module:
        import torch

        class _Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.model = model
                self.input_names = input_names

            def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
                output = self.model(**dict(zip(self.input_names, tensors, strict=True)))
                return output[0]

        return _Wrapped().eval()


def load_forward_model(model_dir: str | Path, dtype: str = "float32") -> torch.nn.Module:
    """The checkpoint as an eval-mode torch module returning its primary output tensor."""
    import torch

    from bench.engines.models import load_config, model_class_for

    config = load_config(model_dir)
    cls = model_class_for(config)
    model = cls.from_pretrained(str(model_dir), dtype=getattr(torch, dtype))
    return PrimaryOutput.wrap(model.eval(), input_names_for(config))


def make_inputs(config: Any, shape: ForwardShape, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded numpy inputs of `shape`: token ids + all-ones mask, or normal pixel values."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if is_vision_config(config):
        channels = int(getattr(config, "num_channels", 3))
        side = shape.image_size or default_image_size(config)
        pixels = rng.standard_normal((shape.batch_size, channels, side, side), dtype=np.float32)
        return {"pixel_values": pixels}
    sequence = shape.sequence_length or DEFAULT_SEQUENCE_LENGTH
    vocab = int(getattr(config, "vocab_size", 1000))
    # Skip the low ids (pad/special tokens in most vocabularies).
    ids = rng.integers(min(5, vocab - 1), vocab, size=(shape.batch_size, sequence), dtype=np.int64)
    mask = np.ones((shape.batch_size, sequence), dtype=np.int64)
    return {"input_ids": ids, "attention_mask": mask}


# --------------------------------------------------------------------------- export + cache


def export_cache_dir() -> Path:
    from bench.engines.models import model_cache_dir

    return model_cache_dir() / "onnx-export"


def checkpoint_fingerprint(model_dir: str | Path) -> str:
    """sha256 over config.json's bytes and each weight file's name, size and mtime.

    Hashing multi-GB weights on every load would cost more than the export; name+size+mtime
    changes whenever a checkpoint is rewritten.
    """
    root = Path(model_dir).resolve()
    digest = hashlib.sha256(str(root).encode())
    config_path = root / "config.json"
    if config_path.exists():
        digest.update(config_path.read_bytes())
    for weights in sorted(root.glob("*.safetensors")) + sorted(root.glob("*.bin")):
        stat = weights.stat()
        digest.update(f"{weights.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def _export_key(
    model_dir: str | Path, shape: ForwardShape, dynamic: bool, dtype: str, opset: int
) -> str:
    import torch

    document = {
        "checkpoint": checkpoint_fingerprint(model_dir),
        "shape": "dynamic" if dynamic else shape.key(),
        "dtype": dtype,
        "opset": opset,
        "torch": torch.__version__,
        "format": EXPORT_FORMAT_VERSION,
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]


def export_onnx(
    model_dir: str | Path,
    shape: ForwardShape,
    *,
    dynamic: bool,
    dtype: str = "float32",
    opset: int = DEFAULT_OPSET,
    cache_dir: Path | None = None,
) -> ExportResult:
    """Export (or reuse a cached export of) the checkpoint at `shape`.

    Fixed shapes bake `shape` into the graph; `dynamic` marks batch (and sequence) as symbolic so
    one file serves every shape. Uses the TorchScript exporter (`dynamo=False`): with torch 2.13
    it exports these HF models with dynamic axes, where the torch.export-based one fails on
    batch/sequence guards. float16 = the fp32 export converted by onnxruntime's float16 tool,
    inputs and outputs kept fp32 (casts at the graph edges).
    """
    if dtype not in ("float32", "float16"):
        raise UserError(f"ONNX export supports float32 and float16, not {dtype}")
    from bench.engines.models import load_config

    config = load_config(model_dir)
    names = input_names_for(config)
    key = _export_key(model_dir, shape, dynamic, dtype, opset)
    root = cache_dir or export_cache_dir()
    target_dir = root / f"{Path(model_dir).name}-{key}"
    onnx_path = target_dir / "model.onnx"
    meta_path = target_dir / "export.json"
    if onnx_path.exists() and meta_path.exists():
        return ExportResult(
            path=onnx_path,
            input_names=names,
            output_name=OUTPUT_NAME,
            dynamic=dynamic,
            shape=shape,
            dtype=dtype,
            export_s=0.0,
            cached=True,
            details=json.loads(meta_path.read_text()),
        )
    started = time.perf_counter()
    staging = root / f".tmp-{target_dir.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        fp32_path = staging / ("model.onnx" if dtype == "float32" else "model-fp32.onnx")
        _torch_export(model_dir, config, names, shape, dynamic, opset, fp32_path)
        if dtype == "float16":
            _convert_to_float16(fp32_path, staging / "model.onnx")
            for leftover in staging.glob("model-fp32.onnx*"):
                leftover.unlink()
        export_s = time.perf_counter() - started
        details = {
            "exporter": "torchscript",
            "opset": opset,
            "dynamic": dynamic,
            "shape": shape.key(),
            "dtype": dtype,
            "export_s": round(export_s, 3),
        }
        (staging / "export.json").write_text(json.dumps(details, indent=2))
        try:
            os.rename(staging, target_dir)
        except OSError:
            if not onnx_path.exists():
                raise
            shutil.rmtree(staging, ignore_errors=True)  # a concurrent exporter won the race
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ExportResult(
        path=onnx_path,
        input_names=names,
        output_name=OUTPUT_NAME,
        dynamic=dynamic,
        shape=shape,
        dtype=dtype,
        export_s=export_s,
        cached=False,
        details=details,
    )


def _torch_export(
    model_dir: str | Path,
    config: Any,
    names: tuple[str, ...],
    shape: ForwardShape,
    dynamic: bool,
    opset: int,
    out_path: Path,
) -> None:
    import warnings

    import torch

    wrapped = load_forward_model(model_dir, "float32")
    example = tuple(torch.from_numpy(v) for v in make_inputs(config, shape).values())
    dynamic_axes = None
    if dynamic:
        dynamic_axes = {name: {0: "batch"} for name in (*names, OUTPUT_NAME)}
        if not is_vision_config(config):
            for name in (*names, OUTPUT_NAME):
                dynamic_axes[name][1] = "sequence"
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(
            wrapped,
            example,
            str(out_path),
            input_names=list(names),
            output_names=[OUTPUT_NAME],
            dynamic_axes=dynamic_axes,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )


def _convert_to_float16(src: Path, dst: Path) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    converted = convert_float_to_float16(model, keep_io_types=True)
    onnx.save(converted, str(dst))


# --------------------------------------------------------------------------- correctness check


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """‖actual − expected‖₂ / ‖expected‖₂ over all elements (inf when shapes differ)."""
    import numpy as np

    if actual.shape != expected.shape:
        return float("inf")
    actual64 = actual.astype(np.float64)
    expected64 = expected.astype(np.float64)
    denominator = float(np.linalg.norm(expected64))
    numerator = float(np.linalg.norm(actual64 - expected64))
    if denominator == 0.0:
        return 0.0 if numerator == 0.0 else float("inf")
    return numerator / denominator


def default_tolerance(dtype: str, allow_tf32: bool) -> float:
    if dtype == "float16":
        return TOLERANCE_FLOAT16
    return TOLERANCE_TF32 if allow_tf32 else TOLERANCE_FLOAT32


def eager_reference(model_dir: str | Path, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The eager PyTorch fp32 output for `inputs`: the strict reference, TF32 off.

    Runs on the GPU when torch sees one (a bert-base batch of 64 x 512 takes long on CPU), with
    TF32 disabled for matmuls and cuDNN convolutions (cuDNN allows it by default), else on CPU.
    """
    import torch

    wrapped = load_forward_model(model_dir, "float32")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tensors = tuple(torch.from_numpy(v).to(device) for v in inputs.values())
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.no_grad():
            output = wrapped.to(device)(*tensors).float().cpu().numpy()
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
        del wrapped
        if device == "cuda":
            torch.cuda.empty_cache()
    return output


def check_outputs(
    actual: np.ndarray, expected: np.ndarray, tolerance: float, what: str
) -> CheckResult:
    """Raise ExportCheckFailed when the relative error exceeds `tolerance`; else the result."""
    error = relative_error(actual, expected)
    result = CheckResult(relative_error=error, tolerance=tolerance, passed=error <= tolerance)
    if not result.passed:
        detail = (
            f"shape {actual.shape} vs {expected.shape}"
            if actual.shape != expected.shape
            else f"relative error {error:.3g} > tolerance {tolerance:.3g}"
        )
        raise ExportCheckFailed(
            f"{what} disagrees with eager PyTorch ({detail}); the export is wrong, not timed"
        )
    return result


__all__ = [
    "CheckResult",
    "ExportCheckFailed",
    "ExportResult",
    "ForwardShape",
    "check_outputs",
    "default_tolerance",
    "eager_reference",
    "export_onnx",
    "input_names_for",
    "is_vision_config",
    "load_forward_model",
    "make_inputs",
    "relative_error",
    "resolve_shape",
]
