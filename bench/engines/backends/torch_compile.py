"""`torch_compile` backend: the `pytorch` backend with a static KV cache and `torch.compile`.

generate kind: transformers compiles the decode step itself when `generate` gets a static
(compileable) cache. A static cache has a fixed batch size and length, so batches are padded to
the next of a few compiled batch-size buckets (default: powers of 4 up to `max_batch_size`, plus
`max_batch_size`), each with its own cache of `max_cache_len` positions (default: the workload's
longest prompt + longest output). Every bucket is compiled by a warm-up `generate` during
`load()`; that time is reported as compile_s. Prompt and output lengths do not recompile (the
prefill runs eagerly, decode shapes only depend on the bucket). Filler rows in a padded batch
cost compute; on a GPU, decode at small batch is memory-bound, so that cost is small.
forward kind: `torch.compile(model, mode=...)` warmed up at the workload's shape. Behind the
dynamic batcher (`max_queue_delay_ms` set) batches vary in size, and each new size would compile
(and, with CUDA graphs, record) a graph while requests wait: as vLLM does with its CUDA-graph
capture sizes, a batch is padded up to the next of the compiled batch buckets (the same default
as generate's), every bucket compiled during `load()`. A request larger than `max_batch_size`
runs alone at its own size (compiled on first sight).
"""

from __future__ import annotations

import inspect
import math
from dataclasses import replace
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from bench.core.config import ForwardWorkload, GenerateWorkload, LengthDistribution
from bench.core.errors import UserError
from bench.engines.backends.base import (
    Availability,
    ForwardRequest,
    GenerateRequest,
    WorkloadShape,
    register_backend,
)
from bench.engines.backends.pytorch import (
    PyTorchBackend,
    PyTorchOptions,
    _torch_availability,
    c_compiler_reason,
)

WARMUP_PROMPT_TOKENS = 8
WARMUP_OUTPUT_TOKENS = 4
"""Three compiled decode steps: CUDA graph trees warm up, record, then replay."""
FORWARD_WARMUP_RUNS = 3


class TorchCompileOptions(PyTorchOptions):
    """Engine arguments of `torch_compile`: those of `pytorch` plus torch.compile's own."""

    mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = (
        Field(
            "reduce-overhead",
            description="torch.compile mode; reduce-overhead and max-autotune use CUDA graphs "
            "on a GPU.",
        )
    )
    fullgraph: bool = Field(False, description="Fail instead of falling back on graph breaks.")
    dynamic: bool | None = Field(
        None,
        description="forward kind: compile with dynamic shapes (None = the workload's "
        "dynamic_shapes, else recompile once per new shape then go dynamic).",
    )
    batch_buckets: list[int] | None = Field(
        None,
        description="Batch sizes compiled ahead (batches are padded up to the next): generate "
        "kind, each with a static cache; forward kind behind the dynamic batcher "
        "(max_queue_delay_ms set). Default powers of 4 up to max_batch_size, plus it.",
    )
    max_cache_len: int | None = Field(
        None, gt=0, description="generate kind: static KV cache length (prompt + output tokens)."
    )


def default_buckets(max_batch_size: int) -> list[int]:
    buckets = [4**power for power in range(int(math.log(max_batch_size, 4)) + 1)]
    return sorted({bucket for bucket in buckets if bucket <= max_batch_size} | {max_batch_size})


def length_upper_bound(distribution: LengthDistribution) -> int:
    """The longest length a workload distribution produces (its clip, or a 4-sigma bound)."""
    if distribution.max is not None:
        return distribution.max
    if distribution.kind == "fixed":
        return distribution.mean
    if distribution.kind == "uniform":
        return math.ceil(distribution.mean + distribution.spread)
    return math.ceil(distribution.mean + 4 * distribution.spread)


def make_static_cache(model: Any, batch_size: int, max_cache_len: int) -> Any:
    """A transformers StaticCache (5.x sizes its batch lazily; 4.5x needs it up front)."""
    from transformers import StaticCache

    parameters = inspect.signature(StaticCache.__init__).parameters
    kwargs: dict[str, Any] = {"config": model.config, "max_cache_len": max_cache_len}
    if "max_batch_size" in parameters:
        kwargs.update(max_batch_size=batch_size, device=model.device, dtype=model.dtype)
    return StaticCache(**kwargs)


def _raise_recompile_limit(minimum: int) -> None:
    """Each bucket is one more graph of the same function; Dynamo's default limit is 8."""
    import torch._dynamo

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), minimum))


def _unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


@register_backend("torch_compile")
class TorchCompileBackend(PyTorchBackend):
    """transformers `generate` with a static cache, decode step compiled; compiled forward."""

    options_model: ClassVar[type[BaseModel] | None] = TorchCompileOptions
    maps_w8a8: ClassVar[bool] = False  # W8A8 under torch.compile is not measured here

    @classmethod
    def recommended_args(cls, shape: WorkloadShape) -> dict[str, Any]:
        """`reduce-overhead` (CUDA graphs: decode is launch-bound), `max-autotune` for a
        fixed-shape forward pass; for generation a static KV cache for the longest sequence."""
        fixed_forward = shape.kind == "forward" and shape.fixed_input_shapes
        args: dict[str, Any] = {"mode": "max-autotune" if fixed_forward else "reduce-overhead"}
        if shape.kind == "generate":
            args["max_batch_size"] = shape.concurrency
            args["max_cache_len"] = shape.max_sequence_tokens
        return args

    options: TorchCompileOptions

    def __init__(
        self, engine_args: dict[str, Any] | None = None, prefix_caching: bool | None = None
    ) -> None:
        super().__init__(engine_args, prefix_caching)
        self.buckets: list[int] = []
        self.forward_buckets: list[int] = []
        self.max_cache_len = 0
        self.compiled_graphs = 0
        self._caches: dict[int, Any] = {}
        self._compile_config: Any = None

    @classmethod
    def availability(cls) -> Availability:
        def compiler_check() -> str:
            import importlib.util

            from bench.engines.backends.base import package_version

            version = package_version("torch") or ""
            if "+cpu" not in version and importlib.util.find_spec("triton") is None:
                return "triton not installed (torch.compile's GPU inductor needs it)"
            return c_compiler_reason()

        return _torch_availability(cls.name, compiler_check)

    # ------------------------------------------------------------------ load

    def _prepare_sync(self, workload: GenerateWorkload | ForwardWorkload) -> bool:
        options = self.options
        cuda_graphs = self.device == "cuda" and options.mode in ("reduce-overhead", "max-autotune")
        self.engine_info.update(compiled=True, compile_mode=options.mode, cuda_graphs=cuda_graphs)
        graphs_before = _unique_graphs()
        if self.kind == "forward":
            assert isinstance(workload, ForwardWorkload)
            self._prepare_forward(workload, options)
        else:
            assert isinstance(workload, GenerateWorkload)
            self._prepare_generate(workload, options)
        self.compiled_graphs = _unique_graphs() - graphs_before
        self.engine_info["compiled_graphs"] = self.compiled_graphs
        return True

    def _prepare_forward(self, workload: ForwardWorkload, options: TorchCompileOptions) -> None:
        import torch

        dynamic = options.dynamic if options.dynamic is not None else workload.dynamic_shapes
        request = self._warmup_forward_request(workload)
        if options.max_queue_delay_ms is not None:
            # One static graph per bucket: a dynamic-batch graph would serve every size with
            # kernels tuned for none, and CUDA graphs need static shapes anyway.
            self.forward_buckets = self._buckets(options)
            _raise_recompile_limit(len(self.forward_buckets) + 8)
            dynamic = False
            self.engine_info["batch_buckets"] = self.forward_buckets
        self._forward_call = torch.compile(
            self.model, mode=options.mode, fullgraph=options.fullgraph, dynamic=dynamic or None
        )
        self.engine_info["dynamic_shapes"] = bool(dynamic)
        sizes = self.forward_buckets or [request.batch_size]
        for size in sizes:
            for _ in range(FORWARD_WARMUP_RUNS):
                self._run_forward(replace(request, batch_size=size))

    @staticmethod
    def _buckets(options: TorchCompileOptions) -> list[int]:
        buckets = sorted(set(options.batch_buckets or default_buckets(options.max_batch_size)))
        if buckets[0] < 1 or buckets[-1] < options.max_batch_size:
            raise UserError(
                f"batch_buckets {buckets} must be positive and reach max_batch_size "
                f"{options.max_batch_size}"
            )
        return buckets

    def _run_forward(self, request: ForwardRequest) -> tuple[int, Any]:
        """A batch padded up to its bucket (the filler rows cost compute, not a recompile)."""
        if self.forward_buckets and request.batch_size <= self.forward_buckets[-1]:
            bucket = next(size for size in self.forward_buckets if size >= request.batch_size)
            request = replace(request, batch_size=bucket)
        return super()._run_forward(request)

    def _prepare_generate(self, workload: GenerateWorkload, options: TorchCompileOptions) -> None:
        from transformers import CompileConfig

        self.buckets = self._buckets(options)
        self.max_cache_len = options.max_cache_len or (
            length_upper_bound(workload.prompt_tokens) + length_upper_bound(workload.output_tokens)
        )
        self.max_cache_len = max(self.max_cache_len, WARMUP_PROMPT_TOKENS + WARMUP_OUTPUT_TOKENS)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit and self.max_cache_len > limit:
            raise UserError(
                f"max_cache_len {self.max_cache_len} exceeds the model's max_position_embeddings "
                f"({limit}); lower the workload's lengths or set max_cache_len"
            )
        _raise_recompile_limit(len(self.buckets) + 8)
        compile_config = CompileConfig(
            fullgraph=options.fullgraph, dynamic=False, mode=options.mode
        )
        # transformers only auto-compiles on accelerators unless told otherwise (CPU tests).
        compile_config._compile_all_devices = True
        self._compile_config = compile_config
        self._caches = {
            bucket: make_static_cache(self.model, bucket, self.max_cache_len)
            for bucket in self.buckets
        }
        self.engine_info.update(
            kv_cache="static",
            batch_buckets=self.buckets,
            max_cache_len=self.max_cache_len,
        )
        warmup_prompt = [self._pad_token_id + 1] * WARMUP_PROMPT_TOKENS
        for bucket in self.buckets:
            requests = [
                GenerateRequest(f"warmup-{bucket}-{row}", warmup_prompt, WARMUP_OUTPUT_TOKENS)
                for row in range(bucket)
            ]
            self._generate_batch(requests, lambda _t_ns: None)

    # ------------------------------------------------------------------ generate hooks

    def _batch_rows(self, requests: int) -> int:
        return next(bucket for bucket in self.buckets if bucket >= requests)

    def _generate_kwargs(self, batch_rows: int) -> dict[str, Any]:
        cache = self._caches[batch_rows]
        cache.reset()  # inside the caller's inference_mode (the cache holds inference tensors)
        return {"past_key_values": cache, "compile_config": self._compile_config}

    def _check_fits(self, prompt_width: int, new_tokens: int) -> None:
        if prompt_width + new_tokens > self.max_cache_len:
            raise RuntimeError(
                f"batch needs {prompt_width} + {new_tokens} cache positions, static cache has "
                f"{self.max_cache_len} (engine arg max_cache_len)"
            )

    def _check_request(self, request: GenerateRequest) -> None:
        super()._check_request(request)
        needed = len(request.prompt_token_ids) + request.output_tokens
        if self.kind == "generate" and needed > self.max_cache_len:
            raise RuntimeError(
                f"request needs {needed} cache positions, static cache has {self.max_cache_len} "
                f"(engine arg max_cache_len)"
            )
