"""TensorRT backend (forward kind): an engine built with the TensorRT 10 Python API from the
checked ONNX export (bench/engines/onnx_export.py), run on torch CUDA tensors with
`execute_async_v3`.

Fixed shapes build one optimization profile with min = opt = max (TensorRT's fixed-shape
advantage); dynamic shapes build ranges. Engines are cached by export, profile, precision,
TensorRT version and GPU. tensorrt and torch are imported inside methods only.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import time
import uuid
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pydantic import Field

from bench.core.clock import CLOCK
from bench.core.config import ForwardWorkload, GenerateWorkload, ParallelismConfig, Precision
from bench.core.engine_facts import EngineFacts
from bench.core.errors import BackendUnavailable, UserError
from bench.core.schema import ModelInfo
from bench.core.strict import Strict
from bench.engines.backends.base import (
    ONE_ENGINE_ONE_DEVICE,
    Availability,
    Backend,
    Chunk,
    ForwardRequest,
    LoadInfo,
    Request,
    package_version,
    register_backend,
)

NOT_INSTALLED_REASON = (
    "tensorrt is not installed here: `pip install tensorrt` on a CUDA host pulls its libraries "
    "(tensorrt-cu13-libs) from NVIDIA's index; this adapter has NOT been run against the real "
    "library"
)
ENGINE_FORMAT_VERSION = 1


class TensorRTOptions(Strict):
    """Build options under TensorRT's names (IBuilderConfig) plus the dynamic-profile bounds."""

    workspace_gib: float = Field(
        8.0, gt=0, description="set_memory_pool_limit(MemoryPoolType.WORKSPACE, ...) in GiB."
    )
    builder_optimization_level: int | None = Field(
        None, ge=0, le=5, description="IBuilderConfig.builder_optimization_level (TRT default 3)."
    )
    max_batch_size: int | None = Field(
        None, gt=0, description="Dynamic shapes: profile max batch (default: the workload's)."
    )
    max_sequence_length: int | None = Field(
        None, gt=0, description="Dynamic shapes: profile max sequence (default: workload max)."
    )
    engine_cache: bool = Field(True, description="Reuse a built engine with the same inputs.")
    opset_version: int = Field(18, ge=13, description="ONNX opset of the export.")
    check_tolerance: float | None = Field(
        None, gt=0, description="Max relative error vs eager PyTorch (none = by precision)."
    )


def optimization_profile(
    input_names: tuple[str, ...],
    shape: Any,
    dynamic: bool,
    max_batch_size: int | None,
    max_sequence_length: int | None,
    channels: int = 3,
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """(min, opt, max) per input. Fixed: all three equal. Dynamic: 1..max, opt = the workload."""

    def dims(batch: int, sequence: int | None, side: int | None) -> tuple[int, ...]:
        if sequence is not None:
            return (batch, sequence)
        return (batch, channels, side or 0, side or 0)

    opt = dims(shape.batch_size, shape.sequence_length, shape.image_size)
    if not dynamic:
        return {name: (opt, opt, opt) for name in input_names}
    top_batch = max(max_batch_size or shape.batch_size, shape.batch_size)
    if shape.sequence_length is not None:
        top_sequence = max(max_sequence_length or shape.sequence_length, shape.sequence_length)
        low, high = dims(1, 1, None), dims(top_batch, top_sequence, None)
    else:  # images: only the batch is dynamic (the export fixes the side)
        low, high = dims(1, None, shape.image_size), dims(top_batch, None, shape.image_size)
    return {name: (low, opt, high) for name in input_names}


@register_backend("tensorrt")
class TensorRTBackend(Backend):
    """TensorRT engine from the ONNX export; one request = one batch, run one at a time."""

    kinds = frozenset({"forward"})
    options_model = TensorRTOptions
    options: TensorRTOptions

    def __init__(
        self, engine_args: dict[str, Any] | None = None, prefix_caching: bool | None = None
    ) -> None:
        super().__init__(engine_args, prefix_caching)
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tensorrt")
        self._engine: Any = None
        self._context: Any = None
        self._stream: Any = None
        self._buffers: dict[Any, dict[str, Any]] = {}
        self._config: Any = None
        self._export: Any = None
        self._workload: ForwardWorkload | None = None
        self._output_name = ""

    @classmethod
    def availability(cls) -> Availability:
        if importlib.util.find_spec("tensorrt") is None:
            return Availability(cls.name, False, reason=NOT_INSTALLED_REASON)
        version = package_version("tensorrt") or package_version("tensorrt-cu12")
        return Availability(cls.name, True, version=version)

    async def load(
        self,
        model: ModelInfo,
        workload: GenerateWorkload | ForwardWorkload,
        precision: Precision,
        device: str,
        parallelism: ParallelismConfig = ONE_ENGINE_ONE_DEVICE,
    ) -> LoadInfo:
        if importlib.util.find_spec("tensorrt") is None:
            raise BackendUnavailable(NOT_INSTALLED_REASON)
        if not isinstance(workload, ForwardWorkload):
            raise UserError("tensorrt runs the forward kind (use tensorrt_llm for generation)")
        if device == "cpu":
            raise UserError("tensorrt runs on NVIDIA GPUs only; use device cuda or auto")
        if precision.quantization is not None:
            raise UserError("the tensorrt backend does not map precision.quantization")
        self._workload = workload
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._load_sync, model, precision)

    # ------------------------------------------------------------------ build

    def _load_sync(self, model: ModelInfo, precision: Precision) -> LoadInfo:
        import tensorrt as trt
        import torch

        from bench.engines import onnx_export
        from bench.engines.models import load_config

        if not torch.cuda.is_available():
            raise BackendUnavailable("tensorrt needs a CUDA GPU visible to torch")
        started = time.perf_counter()
        workload = self._workload
        assert workload is not None
        self._config = load_config(model.path)
        distribution = workload.sequence_length
        sequence = None
        if distribution is not None:
            if (
                distribution.kind != "fixed"
                and distribution.spread > 0
                and not (workload.dynamic_shapes)
            ):
                raise UserError("variable sequence lengths need workload.dynamic_shapes = true")
            sequence = distribution.mean
        shape = onnx_export.resolve_shape(
            self._config, workload.batch_size, sequence, workload.image_size
        )
        # TensorRT picks fp16/bf16 kernels itself from an fp32 graph (builder flags below).
        self._export = onnx_export.export_onnx(
            model.path,
            shape,
            dynamic=workload.dynamic_shapes,
            dtype="float32",
            opset=self.options.opset_version,
        )
        max_sequence = self.options.max_sequence_length or (
            distribution.max if distribution is not None else None
        )
        profile = optimization_profile(
            self._export.input_names,
            shape,
            workload.dynamic_shapes,
            self.options.max_batch_size,
            max_sequence,
            channels=int(getattr(self._config, "num_channels", 3)),
        )
        logger = trt.Logger(trt.Logger.WARNING)
        engine_path = self._engine_path(trt, profile, precision)
        build_s = 0.0
        cached = self.options.engine_cache and engine_path.exists()
        if cached:
            serialized = engine_path.read_bytes()
        else:
            build_started = time.perf_counter()
            serialized = self._build(trt, logger, profile, precision)
            build_s = time.perf_counter() - build_started
            if self.options.engine_cache:
                engine_path.parent.mkdir(parents=True, exist_ok=True)
                staging = engine_path.with_suffix(f".{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
                staging.write_bytes(serialized)
                os.replace(staging, engine_path)
        runtime = trt.Runtime(logger)
        self._engine = runtime.deserialize_cuda_engine(serialized)
        if self._engine is None:
            raise RuntimeError("TensorRT could not deserialize the engine (see the engine log)")
        self._context = self._engine.create_execution_context()
        self._stream = torch.cuda.Stream()
        self._output_name = self._export.output_name

        # Correctness before timing: the engine's output vs eager fp32 PyTorch.
        inputs = onnx_export.make_inputs(self._config, shape, seed=workload.seed)
        actual = self._run(shape, inputs).float().cpu().numpy()
        expected = onnx_export.eager_reference(model.path, inputs)
        tolerance = self.options.check_tolerance or onnx_export.default_tolerance(
            "float32" if precision.dtype == "float32" else "float16", precision.allow_tf32
        )
        check = onnx_export.check_outputs(
            actual, expected, tolerance, f"TensorRT engine of {model.name}"
        )
        engine = {
            "tensorrt": trt.__version__,
            "api": "TensorRT Python API (OnnxParser -> build_serialized_network)",
            "engine_path": str(engine_path) if self.options.engine_cache else None,
            "engine_cached": cached,
            "dtype": precision.dtype,
            "tf32": bool(precision.allow_tf32),
            "profile": {name: [list(d) for d in dims] for name, dims in profile.items()},
            "dynamic_shapes": workload.dynamic_shapes,
            "export_check": {
                "relative_error": check.relative_error,
                "tolerance": check.tolerance,
                "passed": check.passed,
            },
        }
        return LoadInfo(
            load_s=time.perf_counter() - started,
            build_s=self._export.export_s + build_s,
            engine=EngineFacts.model_validate(engine),
        )

    def _engine_path(self, trt: Any, profile: dict, precision: Precision) -> Path:
        import torch

        from bench.engines.models import model_cache_dir

        document = {
            "onnx": str(self._export.path),
            "onnx_mtime": self._export.path.stat().st_mtime_ns,
            "profile": {name: [list(d) for d in dims] for name, dims in profile.items()},
            "dtype": precision.dtype,
            "tf32": precision.allow_tf32,
            "workspace_gib": self.options.workspace_gib,
            "level": self.options.builder_optimization_level,
            "tensorrt": trt.__version__,
            "gpu": torch.cuda.get_device_name(0),
            "format": ENGINE_FORMAT_VERSION,
        }
        key = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]
        return (
            model_cache_dir() / "tensorrt-engines" / f"{self._export.path.parent.name}-{key}.plan"
        )

    def _build(self, trt: Any, logger: Any, profile: dict, precision: Precision) -> bytes:
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(self._export.path)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT could not parse the ONNX export: {errors}")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(
            trt.MemoryPoolType.WORKSPACE, int(self.options.workspace_gib * 1024**3)
        )
        if self.options.builder_optimization_level is not None:
            config.builder_optimization_level = self.options.builder_optimization_level
        if precision.dtype == "float16":
            config.set_flag(trt.BuilderFlag.FP16)
        elif precision.dtype == "bfloat16":
            config.set_flag(trt.BuilderFlag.BF16)
        if not precision.allow_tf32:
            # TensorRT allows TF32 for fp32 layers by default; PyTorch's fp32 matmuls do not.
            config.clear_flag(trt.BuilderFlag.TF32)
        optimization_profile_ = builder.create_optimization_profile()
        for name, (low, opt, high) in profile.items():
            optimization_profile_.set_shape(name, low, opt, high)
        config.add_optimization_profile(optimization_profile_)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise RuntimeError("TensorRT engine build failed (see the engine log)")
        return bytes(serialized)

    # ------------------------------------------------------------------ run

    def _torch_dtype(self, name: str) -> Any:
        import tensorrt as trt
        import torch

        mapping = {
            trt.float32: torch.float32,
            trt.float16: torch.float16,
            trt.bfloat16: torch.bfloat16,
            trt.int32: torch.int32,
            trt.int64: torch.int64,
            trt.bool: torch.bool,
        }
        return mapping[self._engine.get_tensor_dtype(name)]

    def _buffers_for(self, shape: Any, arrays: dict[str, Any] | None = None) -> dict[str, Any]:
        """Device tensors for `shape` (inputs uploaded once, output allocated once)."""
        import torch

        from bench.engines import onnx_export

        if arrays is None and shape in self._buffers:
            return self._buffers[shape]
        if arrays is None:
            assert self._workload is not None
            arrays = onnx_export.make_inputs(self._config, shape, seed=self._workload.seed)
        buffers: dict[str, Any] = {}
        for name, array in arrays.items():
            buffers[name] = torch.from_numpy(array).to("cuda").to(self._torch_dtype(name))
            self._context.set_input_shape(name, tuple(array.shape))
        output_shape = tuple(self._context.get_tensor_shape(self._output_name))
        buffers[self._output_name] = torch.empty(
            output_shape, dtype=self._torch_dtype(self._output_name), device="cuda"
        )
        self._buffers[shape] = buffers
        return buffers

    def _run(self, shape: Any, arrays: dict[str, Any] | None = None) -> Any:
        buffers = self._buffers_for(shape, arrays)
        for name, tensor in buffers.items():
            if name != self._output_name:
                self._context.set_input_shape(name, tuple(tensor.shape))
            self._context.set_tensor_address(name, tensor.data_ptr())
        if not self._context.execute_async_v3(self._stream.cuda_stream):
            raise RuntimeError("TensorRT execute_async_v3 failed")
        self._stream.synchronize()
        return buffers[self._output_name]

    async def stream(self, request: Request) -> AsyncIterator[Chunk]:
        if self._context is None:
            raise RuntimeError("tensorrt backend: stream() before load()")
        if not isinstance(request, ForwardRequest):
            raise TypeError("tensorrt runs the forward kind only")
        from bench.engines.onnx_export import resolve_shape

        assert self._workload is not None
        shape = resolve_shape(
            self._config, request.batch_size, request.sequence_length, request.image_size
        )
        if not self._workload.dynamic_shapes and shape != self._export.shape:
            raise ValueError(
                f"request shape {shape.key()} differs from the fixed engine "
                f"{self._export.shape.key()}"
            )
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._run, shape)
        yield Chunk(t_ns=CLOCK.now_ns(), tokens=request.batch_size)

    async def close(self) -> None:
        def release() -> None:
            self._buffers.clear()
            self._context = None
            self._engine = None

        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, release)
        self._executor.shutdown(wait=True)
