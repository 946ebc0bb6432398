"""TensorRT-LLM backend, in process through its LLM API (`LLM`, `SamplingParams`, streaming
`generate_async`), options under TensorRT-LLM's own names.

NOT RUN against the real library: tensorrt_llm comes only from NVIDIA's own index and containers.
The adapter is written against the API of NVIDIA/TensorRT-LLM (tensorrt_llm/llmapi/llm.py,
llm_args.py, sampling_params.py, executor/result.py) and tested with a labelled stand-in
(tests/standins/tensorrt_llm). The `trtllm-serve` launcher lives in bench/engines/launchers.py.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import Field, model_validator

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
    GenerateRequest,
    LoadInfo,
    Request,
    WorkloadShape,
    package_version,
    register_backend,
)

NOT_INSTALLED_REASON = (
    "tensorrt_llm is not installed here: install it from NVIDIA's index (pip install "
    "--extra-index-url https://pypi.nvidia.com tensorrt-llm) or use an NGC container; this "
    "adapter has NOT been run against the real library (only against a test stand-in)"
)


class TensorRTLLMOptions(Strict):
    """The LlmArgs / BuildConfig options this adapter maps, under TensorRT-LLM's names.

    `backend` picks the runtime: "pytorch" (TensorRT-LLM's default LLM class, `TorchLlmArgs`) or
    "tensorrt" (a compiled engine, `tensorrt_llm._tensorrt_engine.LLM` with a `BuildConfig`; the
    article's `trtllm-build --gemm_plugin float16 --max_batch_size 32`).
    """

    backend: Literal["pytorch", "tensorrt"] = Field(
        "pytorch", description="TensorRT-LLM runtime: PyTorch flow or a built TensorRT engine."
    )
    max_batch_size: int | None = Field(
        None, gt=0, description="Most requests scheduled together (LlmArgs / BuildConfig)."
    )
    max_num_tokens: int | None = Field(
        None, gt=0, description="Most tokens per scheduled iteration (LlmArgs / BuildConfig)."
    )
    max_seq_len: int | None = Field(
        None, gt=0, description="Longest prompt + output (LlmArgs / BuildConfig)."
    )
    gemm_plugin: Literal["auto", "float16", "bfloat16", "float32", "disable"] | None = Field(
        None, description="BuildConfig.plugin_config.gemm_plugin (backend=tensorrt only)."
    )
    kv_cache_free_gpu_memory_fraction: float | None = Field(
        None, gt=0, le=1, description="KvCacheConfig.free_gpu_memory_fraction."
    )
    enable_chunked_prefill: bool | None = Field(None, description="LlmArgs.enable_chunked_prefill.")

    @model_validator(mode="after")
    def _build_options_need_the_engine_backend(self) -> TensorRTLLMOptions:
        if self.gemm_plugin is not None and self.backend != "tensorrt":
            raise ValueError(
                "gemm_plugin is a TensorRT engine build option; set backend=tensorrt to use it"
            )
        return self


@register_backend("tensorrt_llm")
class TensorRTLLMBackend(Backend):
    """TensorRT-LLM's LLM API in this worker process (continuous batching inside the engine)."""

    kinds = frozenset({"generate"})
    options_model = TensorRTLLMOptions

    @classmethod
    def recommended_args(cls, shape: WorkloadShape) -> dict[str, Any]:
        """Batch and sequence limits of the workload; a built engine (`backend: tensorrt`) for
        fixed shapes when an engine build is acceptable: the fixed-shape case it is chosen for."""
        args: dict[str, Any] = {
            "max_batch_size": shape.concurrency,
            "max_seq_len": shape.max_sequence_tokens,
        }
        if shape.fixed_input_shapes and shape.build_time_tolerance in (None, "hours"):
            args["backend"] = "tensorrt"
        return args

    options: TensorRTLLMOptions

    def __init__(
        self, engine_args: dict[str, Any] | None = None, prefix_caching: bool | None = None
    ) -> None:
        super().__init__(engine_args, prefix_caching)
        self._llm: Any = None
        self._sampling_params_cls: Any = None

    @classmethod
    def framework_args(
        cls,
        engine_args: dict[str, Any],
        parallelism: ParallelismConfig | None = None,
        precision: Precision | None = None,
        prefix_caching: bool | None = None,
    ) -> dict[str, Any]:
        """TensorRT-LLM splits one engine over GPUs itself (LlmArgs `tensor_parallel_size`: one
        MPI rank per GPU, `llm_kwargs` passes it at load) and caches prefixes as KV-cache block
        reuse (`enable_block_reuse`); FP8 is not mapped (refused by the base class's rule)."""
        replicas = None if parallelism is None else ParallelismConfig(replicas=parallelism.replicas)
        args = super().framework_args(engine_args, replicas, precision)
        if parallelism is not None:
            args["tensor_parallel_size"] = parallelism.tensor_parallel_size
        if prefix_caching is not None:
            args["enable_block_reuse"] = prefix_caching
        return args

    @classmethod
    def availability(cls) -> Availability:
        if importlib.util.find_spec("tensorrt_llm") is None:
            return Availability(cls.name, False, reason=NOT_INSTALLED_REASON)
        return Availability(cls.name, True, version=package_version("tensorrt-llm"))

    # ------------------------------------------------------------------ argument mapping

    def llm_kwargs(
        self,
        model: ModelInfo,
        precision: Precision,
        trust_remote_code: bool,
        parallelism: ParallelismConfig = ONE_ENGINE_ONE_DEVICE,
    ) -> dict:
        """The keyword arguments for `LLM(...)` (build/KV objects made from the imported module);
        the dtype and the tensor-parallel degree come from the run's typed precision and
        parallelism."""
        options = self.options
        kwargs: dict[str, Any] = {
            "model": model.path,
            "tokenizer": model.path,
            "dtype": precision.dtype,
            "tensor_parallel_size": parallelism.tensor_parallel_size,
            "trust_remote_code": trust_remote_code,
        }
        llmapi = importlib.import_module("tensorrt_llm.llmapi")
        kv_cache: dict[str, Any] = {}
        if options.kv_cache_free_gpu_memory_fraction is not None:
            kv_cache["free_gpu_memory_fraction"] = options.kv_cache_free_gpu_memory_fraction
        if self.prefix_caching is not None:  # the run's setting (`framework_args` names it)
            kv_cache["enable_block_reuse"] = self.prefix_caching
        if kv_cache:
            kwargs["kv_cache_config"] = llmapi.KvCacheConfig(**kv_cache)
        if options.enable_chunked_prefill is not None:
            kwargs["enable_chunked_prefill"] = options.enable_chunked_prefill
        limits = {
            key: value
            for key, value in (
                ("max_batch_size", options.max_batch_size),
                ("max_num_tokens", options.max_num_tokens),
                ("max_seq_len", options.max_seq_len),
            )
            if value is not None
        }
        if options.backend == "tensorrt":
            # Engine limits are build options: they go into the BuildConfig the engine is built
            # with (TrtLlmArgs.build_config), as trtllm-build's flags do.
            build_config = _build_config_class()(**limits)
            if options.gemm_plugin is not None:
                build_config.plugin_config.gemm_plugin = options.gemm_plugin
            kwargs["build_config"] = build_config
        else:
            kwargs.update(limits)
        return kwargs

    def _llm_class(self) -> Any:
        if self.options.backend == "tensorrt":
            try:
                # Since TensorRT-LLM 1.0 the top-level LLM is the PyTorch flow; engines use this.
                return importlib.import_module("tensorrt_llm._tensorrt_engine").LLM
            except ModuleNotFoundError:  # older releases: the top-level LLM builds engines
                return importlib.import_module("tensorrt_llm").LLM
        return importlib.import_module("tensorrt_llm").LLM

    # ------------------------------------------------------------------ lifecycle

    async def load(
        self,
        model: ModelInfo,
        workload: GenerateWorkload | ForwardWorkload,
        precision: Precision,
        device: str,
        parallelism: ParallelismConfig = ONE_ENGINE_ONE_DEVICE,
    ) -> LoadInfo:
        if importlib.util.find_spec("tensorrt_llm") is None:
            raise BackendUnavailable(NOT_INSTALLED_REASON)
        if device == "cpu":
            raise UserError("tensorrt_llm runs on NVIDIA GPUs only; use device cuda or auto")
        if precision.quantization is not None:
            raise UserError(
                "this tensorrt_llm adapter does not map precision.quantization yet; quantise the "
                "checkpoint with TensorRT-LLM's tools and pass its directory as the model"
            )
        started = time.perf_counter()
        tensorrt_llm = importlib.import_module("tensorrt_llm")
        self._sampling_params_cls = tensorrt_llm.SamplingParams
        llm_class = self._llm_class()
        kwargs = self.llm_kwargs(model, precision, trust_remote_code=False, parallelism=parallelism)
        if self.options.backend == "pytorch":
            kwargs["backend"] = "pytorch"
        # The constructor converts and (backend=tensorrt) builds the engine: minutes, blocking.
        self._llm = await asyncio.to_thread(llm_class, **kwargs)
        construct_s = time.perf_counter() - started
        engine = {
            "tensorrt_llm": getattr(tensorrt_llm, "__version__", None),
            "backend": self.options.backend,
            "llm_class": f"{llm_class.__module__}.{llm_class.__qualname__}",
            "options": self.options.model_dump(exclude_none=True),
            "dtype": precision.dtype,
            "batching": "in-flight (continuous) batching inside TensorRT-LLM",
        }
        return LoadInfo(
            load_s=construct_s,
            build_s=construct_s if self.options.backend == "tensorrt" else None,
            engine=EngineFacts.model_validate(engine),
        )

    def sampling_params(self, output_tokens: int) -> Any:
        """Exactly `output_tokens` tokens, greedy, no detokenisation.

        min_tokens = max_tokens with ignore_eos forces the length; SamplingParams is greedy when
        temperature/top_p/top_k are left unset (its documented default).
        """
        return self._sampling_params_cls(
            max_tokens=output_tokens,
            min_tokens=output_tokens,
            ignore_eos=True,
            detokenize=False,
        )

    async def stream(self, request: Request) -> AsyncIterator[Chunk]:
        if self._llm is None:
            raise RuntimeError("tensorrt_llm backend: stream() before load()")
        if not isinstance(request, GenerateRequest):
            raise TypeError("tensorrt_llm runs the generate kind only")
        result = self._llm.generate_async(
            list(request.prompt_token_ids),
            self.sampling_params(request.output_tokens),
            streaming=True,
        )
        received = 0
        finished = False
        try:
            async for output in result:
                now_ns = CLOCK.now_ns()
                # CompletionOutput.token_ids is cumulative in streaming mode (token_ids_diff is
                # the delta): count what is new since the last output, whatever each one holds.
                total = len(output.outputs[0].token_ids)
                if total > received:
                    yield Chunk(t_ns=now_ns, tokens=total - received)
                    received = total
            finished = True
        finally:
            if not finished:
                abort = getattr(result, "abort", None)  # a cancelled request frees its slot
                if abort is not None:
                    abort()
        if received != request.output_tokens:
            raise RuntimeError(
                f"tensorrt_llm produced {received} of {request.output_tokens} tokens"
            )

    async def close(self) -> None:
        if self._llm is not None:
            llm, self._llm = self._llm, None
            await asyncio.to_thread(llm.shutdown)


def _build_config_class() -> Any:
    try:
        return importlib.import_module("tensorrt_llm.llmapi").BuildConfig
    except AttributeError:  # releases that only export it from the builder module
        return importlib.import_module("tensorrt_llm.builder").BuildConfig
