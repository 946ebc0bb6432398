"""ONNX Runtime backend: forward kind via an exported, checked ONNX graph; generate kind via
onnxruntime-genai (checkpoint converted by its model builder, cached on disk).

Forward: CUDA provider with I/O binding on the GPU (inputs uploaded once, outputs left on the
device), the TensorRT provider where its libraries load, or the CPU provider. Generate: static
batches formed by the shared dynamic batcher, decoded step by step with `og.Generator`.
onnxruntime and onnxruntime_genai are imported inside methods only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

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
    GenerateRequest,
    LoadInfo,
    Request,
    WorkloadShape,
    package_version,
    register_backend,
)

GENAI_FORMAT_VERSION = 1
"""Bumped when the conversion command changes, so stale converted models are not reused."""

PROVIDER_NAMES = {
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
GRAPH_OPTIMIZATION_LEVELS = {
    "disable_all": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
# What onnxruntime-genai's model builder accepts per execution provider (builder.py's table).
GENAI_PRECISIONS = {
    "cpu": ("fp32", "int8", "int4"),
    "cuda": ("fp32", "fp16", "bf16", "int8", "int4"),
}
DTYPE_TO_GENAI = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}


class OnnxRuntimeOptions(Strict):
    """Engine options under ONNX Runtime's own names (SessionOptions / provider / builder)."""

    provider: Literal["cuda", "tensorrt", "cpu"] | None = Field(
        None, description="Execution provider; none = cuda when the run's device is a GPU."
    )
    graph_optimization_level: Literal["disable_all", "basic", "extended", "all"] = Field(
        "all", description="SessionOptions.graph_optimization_level (forward kind)."
    )
    intra_op_num_threads: int | None = Field(
        None, ge=0, description="SessionOptions.intra_op_num_threads (0/none = ORT default)."
    )
    inter_op_num_threads: int | None = Field(
        None, ge=0, description="SessionOptions.inter_op_num_threads (0/none = ORT default)."
    )
    enable_io_binding: bool = Field(
        True, description="Bind inputs/outputs to device buffers (no host round trips)."
    )
    precision: Literal["fp32", "fp16", "bf16", "int8", "int4"] | None = Field(
        None, description="onnxruntime-genai model builder precision; none = from the run dtype."
    )
    max_batch_size: int = Field(
        8,
        gt=0,
        description="Most requests (generate) or samples (forward, with max_queue_delay_ms) "
        "the dynamic batcher puts in a batch.",
    )
    max_queue_delay_ms: float | None = Field(
        None,
        ge=0,
        description="Forward kind: serve through the dynamic batcher, which joins requests into "
        "batches of up to max_batch_size samples, waiting at most this long (ms) after the "
        "oldest (needs workload.dynamic_shapes); none = each request runs as its own batch.",
    )
    batch_wait_ms: float = Field(
        2.0, ge=0, description="Generate kind: how long a batch waits for more requests (ms)."
    )
    opset_version: int = Field(18, ge=13, description="Forward kind: ONNX opset of the export.")
    check_tolerance: float | None = Field(
        None,
        gt=0,
        description="Forward kind: max relative error vs eager PyTorch (none = "
        "by precision: fp32 1e-4, TF32 5e-3, fp16 2e-2).",
    )


def _genai_installed() -> bool:
    return importlib.util.find_spec("onnxruntime_genai") is not None


def _genai_version() -> str | None:
    return package_version("onnxruntime-genai") or package_version("onnxruntime-genai-cuda")


def _resolve_device(device: str) -> str:
    if device != "auto":
        return device
    import onnxruntime

    return "cuda" if "CUDAExecutionProvider" in onnxruntime.get_available_providers() else "cpu"


@register_backend("onnxruntime")
class OnnxRuntimeBackend(Backend):
    """ONNX Runtime: forward (exported graph) and generate (onnxruntime-genai) kinds."""

    kinds = frozenset({"generate", "forward"})
    options_model = OnnxRuntimeOptions

    @classmethod
    def recommended_args(cls, shape: WorkloadShape) -> dict[str, Any]:
        """I/O binding (no host copies per call) and every graph optimisation; for generation
        the batcher sized to the requests in flight."""
        args: dict[str, Any] = {"enable_io_binding": True, "graph_optimization_level": "all"}
        if shape.kind == "generate":
            args["max_batch_size"] = shape.concurrency
        return args

    options: OnnxRuntimeOptions

    def __init__(
        self, engine_args: dict[str, Any] | None = None, prefix_caching: bool | None = None
    ) -> None:
        super().__init__(engine_args, prefix_caching)
        self._runner: _ForwardRunner | _GenerateRunner | None = None

    @classmethod
    def availability(cls) -> Availability:
        version = package_version("onnxruntime") or package_version("onnxruntime-gpu")
        if importlib.util.find_spec("onnxruntime") is None:
            return Availability(
                cls.name, False, reason="onnxruntime is not installed (pip install onnxruntime)"
            )
        import onnxruntime

        details = {
            "providers": onnxruntime.get_available_providers(),
            "onnxruntime_genai": _genai_version() if _genai_installed() else None,
        }
        return Availability(
            cls.name, True, version=version or onnxruntime.__version__, details=details
        )

    async def load(
        self,
        model: ModelInfo,
        workload: GenerateWorkload | ForwardWorkload,
        precision: Precision,
        device: str,
        parallelism: ParallelismConfig = ONE_ENGINE_ONE_DEVICE,
    ) -> LoadInfo:
        if workload.kind == "forward":
            self._runner = _ForwardRunner(self.options, model, workload, precision, device)
        else:
            self._runner = _GenerateRunner(self.options, model, precision, device)
        return await asyncio.to_thread(self._runner.load)

    async def stream(self, request: Request) -> AsyncIterator[Chunk]:
        if self._runner is None:
            raise RuntimeError("onnxruntime backend: stream() before load()")
        async for chunk in self._runner.stream(request):
            yield chunk

    @property
    def batcher_stats(self) -> Any:
        """Batch sizes the dynamic batcher formed (generate kind), else None."""
        runner = self._runner
        if isinstance(runner, _GenerateRunner) and runner._batcher is not None:
            return runner._batcher.stats
        return None

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.aclose()
            self._runner = None


# --------------------------------------------------------------------------- shared


def _check_provider(provider: str) -> str:
    import onnxruntime

    ort_name = PROVIDER_NAMES[provider]
    available = onnxruntime.get_available_providers()
    if ort_name not in available:
        raise BackendUnavailable(
            f"onnxruntime provider {provider!r} ({ort_name}) is not in this build; available: "
            f"{', '.join(available)} (the CUDA build is the onnxruntime-gpu package)"
        )
    return ort_name


def _session_options(options: OnnxRuntimeOptions) -> Any:
    import onnxruntime

    session_options = onnxruntime.SessionOptions()
    level = GRAPH_OPTIMIZATION_LEVELS[options.graph_optimization_level]
    session_options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level)
    if options.intra_op_num_threads:
        session_options.intra_op_num_threads = options.intra_op_num_threads
    if options.inter_op_num_threads:
        session_options.inter_op_num_threads = options.inter_op_num_threads
    return session_options


# --------------------------------------------------------------------------- forward kind


class _ForwardRunner:
    """An exported graph in an InferenceSession; one request = one batch, run one at a time."""

    def __init__(
        self,
        options: OnnxRuntimeOptions,
        model: ModelInfo,
        workload: ForwardWorkload,
        precision: Precision,
        device: str,
    ) -> None:
        self.options = options
        self.model = model
        self.workload = workload
        self.precision = precision
        self.device = device
        self.session: Any = None
        self.config: Any = None
        self.bound_device = "cpu"
        self._device_inputs: dict[Any, dict[str, Any]] = {}
        # ORT runs one batch at a time here: concurrent runs of one session only contend for the
        # same cores/stream, and queueing shows up in the client's latency as it should.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ort-forward")
        self.export: Any = None
        self.batcher: Any = None

    def _provider(self) -> str:
        if self.options.provider is not None:
            return self.options.provider
        return "cuda" if _resolve_device(self.device) == "cuda" else "cpu"

    def _load_shape(self) -> Any:
        from bench.engines.onnx_export import resolve_shape

        distribution = self.workload.sequence_length
        sequence = None
        if distribution is not None:
            variable = distribution.kind != "fixed" and distribution.spread > 0
            if variable and not self.workload.dynamic_shapes:
                raise UserError(
                    "variable sequence lengths need workload.dynamic_shapes = true for onnxruntime "
                    "(a fixed-shape export serves one shape)"
                )
            sequence = distribution.mean
            if distribution.max is not None:
                sequence = min(sequence, distribution.max)
        return resolve_shape(
            self.config, self.workload.batch_size, sequence, self.workload.image_size
        )

    def load(self) -> LoadInfo:
        import onnxruntime

        from bench.engines import onnx_export
        from bench.engines.models import load_config

        started = time.perf_counter()
        provider = self._provider()
        ort_provider = _check_provider(provider)
        dtype = self.precision.dtype
        if dtype == "bfloat16":
            raise UserError(
                "onnxruntime forward runs float32 or float16 graphs; set precision.dtype to "
                "float32 or float16 for this comparison"
            )
        if dtype == "float16" and provider == "cpu":
            raise UserError("onnxruntime's CPU provider has few float16 kernels; use float32")
        self.config = load_config(self.model.path)
        shape = self._load_shape()
        # TensorRT builds its own fp16 engine from an fp32 graph (trt_fp16_enable).
        export_dtype = "float32" if provider == "tensorrt" else dtype
        self.export = onnx_export.export_onnx(
            self.model.path,
            shape,
            dynamic=self.workload.dynamic_shapes,
            dtype=export_dtype,
            opset=self.options.opset_version,
        )
        provider_options: dict[str, Any] = {}
        engine: dict[str, Any] = {
            "onnxruntime": onnxruntime.__version__,
            "requested_provider": ort_provider,
            "graph_optimization_level": self.options.graph_optimization_level,
            "intra_op_num_threads": self.options.intra_op_num_threads or 0,
            "inter_op_num_threads": self.options.inter_op_num_threads or 0,
            "onnx_path": str(self.export.path),
            "export_cached": self.export.cached,
            "export_s": round(self.export.export_s, 3),
            "dynamic_shapes": self.workload.dynamic_shapes,
            "shape": shape.key(),
            "dtype": dtype,
        }
        if provider == "cuda":
            # ORT's CUDA provider allows TF32 unless told otherwise; PyTorch's fp32 does not.
            provider_options = {"device_id": 0, "use_tf32": int(self.precision.allow_tf32)}
            engine["use_tf32"] = bool(self.precision.allow_tf32)
        elif provider == "tensorrt":
            from bench.engines.models import model_cache_dir

            cache = model_cache_dir() / "ort-trt-engines"
            cache.mkdir(parents=True, exist_ok=True)
            provider_options = {
                "device_id": 0,
                "trt_fp16_enable": dtype == "float16",
                "trt_engine_cache_enable": True,
                "trt_engine_cache_path": str(cache),
            }
            engine["tf32"] = "TensorRT default (allowed); ORT exposes no switch"
        providers: list[Any] = [(ort_provider, provider_options)]
        if provider == "tensorrt":
            providers.append(("CUDAExecutionProvider", {"device_id": 0}))
        self.session = onnxruntime.InferenceSession(
            str(self.export.path), sess_options=_session_options(self.options), providers=providers
        )
        active = self.session.get_providers()
        engine["providers"] = active
        if active[0] != ort_provider:
            # ORT silently falls back (e.g. TensorRT's libnvinfer missing): say so, do not time it.
            raise BackendUnavailable(
                f"onnxruntime could not start {ort_provider} (active: {', '.join(active)}); "
                "its libraries are missing or incompatible"
            )
        self.bound_device = "cuda" if provider in ("cuda", "tensorrt") else "cpu"
        engine["io_binding"] = self.options.enable_io_binding

        # Correctness before timing: the graph at the run's precision vs eager fp32 PyTorch.
        inputs = onnx_export.make_inputs(self.config, shape, seed=self.workload.seed)
        first_run_started = time.perf_counter()
        actual = self.session.run([self.export.output_name], inputs)[0]
        first_run_s = time.perf_counter() - first_run_started
        expected = onnx_export.eager_reference(self.model.path, inputs)
        tolerance = self.options.check_tolerance or onnx_export.default_tolerance(
            dtype, self.precision.allow_tf32 or provider == "tensorrt"
        )
        check = onnx_export.check_outputs(
            actual, expected, tolerance, f"ONNX export of {self.model.name} on {ort_provider}"
        )
        engine["export_check"] = {
            "relative_error": check.relative_error,
            "tolerance": check.tolerance,
            "passed": check.passed,
        }
        self._inputs_for(shape)  # upload the fixed-shape inputs once
        if self.options.max_queue_delay_ms is not None:
            from bench.engines.backends.forward_batcher import ForwardBatcher

            if not self.workload.dynamic_shapes:
                raise UserError(
                    "onnxruntime's forward batcher runs batches of varying size: set "
                    "workload.dynamic_shapes = true (a fixed-shape export serves one batch size)"
                )
            # Every batch size up to the limit will occur, and on a GPU a size's first run
            # selects its kernels (tens of ms: data/reference/README.md, h100_encoders), so
            # warm them all before the first request, as TEI and Triton do.
            for size in range(1, self.options.max_batch_size + 1):
                self._run_once(dataclasses.replace(shape, batch_size=size))
            engine["warmed_batch_sizes"] = self.options.max_batch_size
            self.batcher = ForwardBatcher(
                self._run_request,
                self._executor,
                max_batch_size=self.options.max_batch_size,
                max_queue_delay_ms=self.options.max_queue_delay_ms,
            )
            engine.update(
                batching="dynamic batcher (forward)",
                max_batch_size=self.options.max_batch_size,
                max_queue_delay_ms=self.options.max_queue_delay_ms,
            )
        build_s = self.export.export_s + (first_run_s if provider == "tensorrt" else 0.0)
        return LoadInfo(
            load_s=time.perf_counter() - started,
            build_s=build_s,
            engine=EngineFacts.model_validate(engine),
        )

    def _inputs_for(self, shape: Any) -> dict[str, Any]:
        """Inputs of `shape` as OrtValues on the bound device, made once per shape."""
        cached = self._device_inputs.get(shape)
        if cached is not None:
            return cached
        import onnxruntime

        from bench.engines import onnx_export

        arrays = onnx_export.make_inputs(self.config, shape, seed=self.workload.seed)
        values = {
            name: onnxruntime.OrtValue.ortvalue_from_numpy(array, self.bound_device, 0)
            for name, array in arrays.items()
        }
        self._device_inputs[shape] = values
        return values

    def _request_shape(self, request: ForwardRequest) -> Any:
        from bench.engines.onnx_export import resolve_shape

        shape = resolve_shape(
            self.config, request.batch_size, request.sequence_length, request.image_size
        )
        if not self.workload.dynamic_shapes and shape != self.export.shape:
            raise ValueError(
                f"request shape {shape.key()} differs from the fixed export "
                f"{self.export.shape.key()}"
            )
        return shape

    def _run_once(self, shape: Any) -> None:
        inputs = self._inputs_for(shape)
        if self.options.enable_io_binding:
            binding = self.session.io_binding()
            for name, value in inputs.items():
                binding.bind_ortvalue_input(name, value)
            # Output stays on the device (ORT allocates it from its arena): no copy to the host.
            binding.bind_output(self.export.output_name, self.bound_device, 0)
            self.session.run_with_iobinding(binding)
            binding.synchronize_outputs()
        else:
            self.session.run_with_ort_values([self.export.output_name], inputs)

    def _run_request(self, request: ForwardRequest) -> int:
        """In the engine thread: one batch of the request's shape; returns its end (ns)."""
        self._run_once(self._request_shape(request))
        return CLOCK.now_ns()

    async def stream(self, request: Request) -> AsyncIterator[Chunk]:
        if not isinstance(request, ForwardRequest):
            raise TypeError("a forward-kind run takes ForwardRequest")
        if self.batcher is not None:
            yield Chunk(t_ns=await self.batcher.run(request), tokens=request.batch_size)
            return
        shape = self._request_shape(request)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._run_once, shape)
        yield Chunk(t_ns=CLOCK.now_ns(), tokens=request.batch_size)

    async def aclose(self) -> None:
        if self.batcher is not None:
            await self.batcher.close()
        await asyncio.to_thread(self._executor.shutdown, wait=True)
        self._device_inputs.clear()
        self.session = None


# --------------------------------------------------------------------------- generate kind


def genai_cache_dir() -> Path:
    from bench.engines.models import model_cache_dir

    return model_cache_dir() / "onnx-genai"


def genai_cache_key(model_dir: str | Path, precision: str, provider: str) -> str:
    """Key of a conversion: checkpoint fingerprint, precision, provider, builder version."""
    from bench.engines.onnx_export import checkpoint_fingerprint

    document = {
        "checkpoint": checkpoint_fingerprint(model_dir),
        "precision": precision,
        "provider": provider,
        "onnxruntime_genai": _genai_version(),
        "format": GENAI_FORMAT_VERSION,
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:16]


def convert_with_model_builder(
    model_dir: str | Path,
    precision: str,
    provider: str,
    cache_root: Path | None = None,
    log: Callable[[str], None] | None = None,
) -> tuple[Path, float, bool]:
    """(converted model dir, conversion seconds, cached?) for a Hugging Face checkpoint.

    Runs `python -m onnxruntime_genai.models.builder -i DIR -o OUT -p PRECISION -e PROVIDER` in a
    child process (its memory is returned when it exits; its output goes to build.log beside the
    model). The result is cached by `genai_cache_key`; a half-written conversion is never reused.
    """
    root = cache_root or genai_cache_dir()
    name = Path(model_dir).name
    target = (
        root / f"{name}-{precision}-{provider}-{genai_cache_key(model_dir, precision, provider)}"
    )
    if (target / "genai_config.json").exists():
        return target, 0.0, True
    staging = root / f".tmp-{target.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    out_dir = staging / "model"
    out_dir.mkdir(parents=True)
    log_path = staging / "build.log"
    command = [
        sys.executable, "-m", "onnxruntime_genai.models.builder",
        "-i", str(model_dir), "-o", str(out_dir), "-p", precision, "-e", provider,
        "-c", str(staging / "hf-cache"),
    ]  # fmt: skip
    started = time.perf_counter()
    try:
        with log_path.open("w") as log_file:
            completed = subprocess.run(
                command, stdout=log_file, stderr=subprocess.STDOUT, check=False, cwd=staging
            )
        if completed.returncode != 0:
            tail = log_path.read_text(errors="replace")[-1500:]
            raise RuntimeError(
                f"onnxruntime-genai model builder failed (exit {completed.returncode}) for "
                f"{model_dir} ({precision}, {provider}): {tail.strip().splitlines()[-1:]}"
            )
        shutil.rmtree(staging / "hf-cache", ignore_errors=True)
        shutil.move(str(log_path), str(out_dir / "build.log"))
        try:
            os.rename(out_dir, target)
        except OSError:
            if not (target / "genai_config.json").exists():
                raise
        if log:
            log(f"converted {model_dir} -> {target}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target, time.perf_counter() - started, False


class _GenerateRunner:
    """onnxruntime-genai generation: static batches from the dynamic batcher, one Generator each.

    onnxruntime-genai 0.x decodes one batch per Generator (batch_size set in GeneratorParams);
    requests of one batch are left-padded to its longest prompt with the model's pad token and
    the batch decodes until its longest request has its tokens (every row produces the same number
    of steps; each request is answered with exactly its own count). Left padding is masked by
    onnxruntime-genai through the pad token id; with random weights, padded rows' logits differ
    slightly from unpadded ones, which changes which tokens appear but not their count or the
    cost of a step. Fixed prompt lengths (the default workload) batch without padding.
    """

    def __init__(
        self, options: OnnxRuntimeOptions, model: ModelInfo, precision: Precision, device: str
    ) -> None:
        self.options = options
        self.model = model
        self.precision = precision
        self.device = device
        self.og_model: Any = None
        self.pad_token_id = 0
        self.context_length = 0
        self._batcher: Any = None
        # onnxruntime-genai runs in this one thread; the batcher hands it one batch at a time.
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ort-genai")

    def _provider(self) -> str:
        if self.options.provider == "tensorrt":
            raise UserError(
                "onnxruntime generate runs on provider cpu or cuda (onnxruntime-genai builder)"
            )
        if self.options.provider is not None:
            return self.options.provider
        if self.device == "auto":
            import onnxruntime_genai as og

            return "cuda" if og.is_cuda_available() else "cpu"
        return self.device

    def _precision(self, provider: str) -> str:
        precision = self.options.precision or DTYPE_TO_GENAI[self.precision.dtype]
        allowed = GENAI_PRECISIONS[provider]
        if precision not in allowed:
            raise UserError(
                f"onnxruntime-genai builds {', '.join(allowed)} models for provider {provider}, "
                f"not {precision}; set engine argument precision (or precision.dtype)"
            )
        return precision

    def load(self) -> LoadInfo:
        if not _genai_installed():
            raise BackendUnavailable(
                "onnxruntime-genai is not installed (pip install onnxruntime-genai, or "
                "onnxruntime-genai-cuda on a GPU host); it runs the generate kind"
            )
        import onnxruntime_genai as og

        started = time.perf_counter()
        provider = self._provider()
        precision = self._precision(provider)
        converted, build_s, cached = convert_with_model_builder(
            self.model.path, precision, provider
        )
        self.og_model = og.Model(str(converted))
        genai_config = json.loads((converted / "genai_config.json").read_text())
        model_section = genai_config.get("model", {})
        self.pad_token_id = int(model_section.get("pad_token_id", 0) or 0)
        self.context_length = int(model_section.get("context_length", 0) or 0)
        from bench.engines.backends.batcher import DynamicBatcher

        self._batcher = DynamicBatcher(
            self._run_batch,
            self._executor,
            max_batch_size=self.options.max_batch_size,
            batch_wait_ms=self.options.batch_wait_ms,
        )
        engine = {
            "onnxruntime_genai": _genai_version(),
            "provider": provider,
            "precision": precision,
            "model_dir": str(converted),
            "conversion_cached": cached,
            "batching": "static batches from the dynamic batcher (left padding), no continuous "
            "batching",
            "max_batch_size": self.options.max_batch_size,
            "batch_wait_ms": self.options.batch_wait_ms,
            "context_length": self.context_length,
        }
        return LoadInfo(
            load_s=time.perf_counter() - started,
            build_s=build_s,
            engine=EngineFacts.model_validate(engine),
        )

    def _run_batch(self, requests: list[GenerateRequest], on_step: Callable[[int], None]) -> None:
        """Decode one static batch to its longest output; `on_step(t_ns)` after every step."""
        import numpy as np
        import onnxruntime_genai as og

        prompts = [request.prompt_token_ids for request in requests]
        longest_prompt = max(len(prompt) for prompt in prompts)
        steps = max(request.output_tokens for request in requests)
        max_length = longest_prompt + steps
        if self.context_length and max_length > self.context_length:
            raise ValueError(
                f"prompt + output ({max_length} tokens) exceeds the model's context length "
                f"({self.context_length})"
            )
        batch = np.full((len(prompts), longest_prompt), self.pad_token_id, dtype=np.int32)
        for row, prompt in enumerate(prompts):
            batch[row, longest_prompt - len(prompt) :] = prompt
        params = og.GeneratorParams(self.og_model)
        # min_length = max_length: EOS cannot end a row early (outputs forced to length).
        params.set_search_options(
            max_length=max_length, min_length=max_length, do_sample=False, batch_size=len(prompts)
        )
        generator = og.Generator(self.og_model, params)
        generator.append_tokens(batch)
        for _ in range(steps):
            generator.generate_next_token()
            on_step(CLOCK.now_ns())
        del generator

    async def stream(self, request: Request) -> AsyncIterator[Chunk]:
        if not isinstance(request, GenerateRequest):
            raise TypeError("a generate-kind run takes GenerateRequest")
        async for chunk in self._batcher.stream(request):
            yield chunk

    async def aclose(self) -> None:
        if self._batcher is not None:
            await self._batcher.close()
            self._batcher = None
        self._executor.shutdown(wait=True)
        self.og_model = None
