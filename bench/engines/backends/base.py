"""The Backend contract every engine adapter implements, and the registry by name.

A backend module imports its framework only inside methods, so `availability()` and
`python -m bench backends` stay fast and work on machines without the framework.
Lifecycle, inside one worker process: `load(model, workload, precision)` once, then many
concurrent `stream(request)` calls, then `close()`.
"""

from __future__ import annotations

import importlib.metadata
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from bench.core.config import (
    ForwardWorkload,
    GenerateWorkload,
    ParallelismConfig,
    Precision,
    restated_axis,
)
from bench.core.engine_facts import EngineFacts
from bench.core.errors import UserError
from bench.core.schema import ModelInfo
from bench.core.strict import Strict


@dataclass(frozen=True)
class Availability:
    """Whether a backend can run here, and why not when it cannot."""

    name: str
    available: bool
    version: str | None = None
    reason: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class GenerateRequest:
    """One generation: a token-ID prompt and the exact number of tokens to produce.

    `prompt_text` / `messages`, when set, are the prompt as a client sends it (the user's own
    prompts, a conversation's history, or token IDs decoded before the request is timed);
    `prompt_token_ids` is then the same prompt tokenised (what input_tokens counts). The other
    optional fields say which traffic shape produced it and go into the request's record.
    A request the openai client prepared as text holds its IDs as a compact `array("i")`
    (only their count is read after that)."""

    id: str
    prompt_token_ids: list[int]
    output_tokens: int
    prompt_text: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    prefix_id: int | None = None
    prefix_tokens: int = 0
    conversation: int | None = None
    turn: int | None = None
    think_time_s: float = 0.0


@dataclass(frozen=True)
class ForwardRequest:
    """One batched forward pass; the backend builds inputs of this shape from the model."""

    id: str
    batch_size: int
    sequence_length: int | None = None
    image_size: int | None = None


Request = GenerateRequest | ForwardRequest


@dataclass(frozen=True)
class Chunk:
    """Tokens (or, for the forward kind, samples) that arrived at `t_ns` (perf_counter_ns)."""

    t_ns: int
    tokens: int = 1
    usage_output_tokens: int | None = None
    """Server-reported output token count of the whole request (OpenAI `usage`), set on the last
    chunk only; when present it is authoritative for the record's output_tokens."""
    usage_input_tokens: int | None = None
    """Server-reported prompt token count (text prompts may re-tokenize differently)."""
    token_ids: tuple[int, ...] | None = None
    """The output token IDs this chunk carries, where the engine returns them (multi-turn
    conversations resend the actual outputs)."""
    text: str | None = None
    """The output text this chunk carries, where the engine returns text."""


@dataclass
class LoadInfo:
    """What loading cost and what the engine is doing (reported apart from steady state)."""

    load_s: float
    compile_s: float | None = None
    build_s: float | None = None
    engine: EngineFacts = field(default_factory=EngineFacts)


ONE_ENGINE_ONE_DEVICE = ParallelismConfig()
"""A backend loaded directly (tests, fidelity references): one engine on one GPU."""


class WorkloadShape(Strict):
    """What an engine's experts tune it for: the shape of the workload it will serve."""

    kind: Literal["generate", "forward"]
    max_sequence_tokens: int = Field(
        gt=0, description="Longest prompt + output the generator can send, in tokens."
    )
    concurrency: int = Field(ge=1, description="Requests in flight at the peak.")
    fixed_input_shapes: bool = Field(False, description="Every request has the same shape.")
    build_time_tolerance: Literal["none", "minutes", "hours"] | None = Field(
        None, description="How long an engine build may take (None: not stated)."
    )
    quantization: str | None = Field(None, description="Weight quantisation (e.g. awq, fp8).")


def refuse_restated_axes(engine_args: dict[str, Any]) -> None:
    """UserError (one line, `bench.core.config.restated_axis`) when an engine argument restates the
    run's parallelism or precision: for callers that build a backend without a RunConfig."""
    restated = restated_axis(engine_args)
    if restated is not None:
        raise UserError(restated)


def package_version(distribution: str) -> str | None:
    """Installed version of a distribution, or None, without importing it."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


class Backend(ABC):
    """An inference engine adapter. Subclasses set `name`, `kinds` and `options_model`."""

    name: ClassVar[str]
    kinds: ClassVar[frozenset[str]] = frozenset({"generate"})
    options_model: ClassVar[type[BaseModel] | None] = None
    """Known engine options (pydantic, extra='forbid'); None = free-form pass-through.

    Every engine argument is checked by `validate_engine_args` before anything loads
    (bench.run.api.check_runnable). Where the names come from: vllm, the installed EngineArgs fields
    (it overrides the check); pytorch, torch_compile, onnxruntime, tensorrt, tensorrt_llm, openai
    and fake, this model: the subset of the framework's arguments (torch.compile's mode /
    fullgraph / dynamic, ONNX Runtime SessionOptions, TensorRT-LLM LlmArgs) the adapter maps
    under the framework's names. The frameworks' full sets are not used: an argument the adapter
    does not pass through would be accepted and then ignored, and TensorRT-LLM's LlmArgs is only
    knowable by importing tensorrt_llm (GPU-only; not installed on the machines this adapter was
    tested on)."""

    options: Any
    """The parsed `options_model` instance (None for a free-form backend); subclasses narrow the
    annotation to their own options model."""

    prefix_caching: bool | None
    """The run's prefix caching (`RunConfig.prefix_caching`; None = the engine's default): a
    backend that caches prefixes maps it to its framework's argument where it builds its engine
    (`framework_args`); the others refuse a value at construction."""

    def __init__(
        self, engine_args: dict[str, Any] | None = None, prefix_caching: bool | None = None
    ) -> None:
        engine_args = engine_args or {}
        refuse_restated_axes(engine_args)
        if prefix_caching is not None:
            type(self).framework_args(engine_args, prefix_caching=prefix_caching)
        self.prefix_caching = prefix_caching
        # Parse once: typed backends read `self.options`; free-form ones keep the checked dict.
        self.options = self.parse_options(engine_args)
        self.engine_args = (
            self.validate_engine_args(engine_args)
            if self.options is None
            else self.options.model_dump(exclude_unset=True)
        )

    @classmethod
    def validate_engine_args(cls, engine_args: dict[str, Any]) -> dict[str, Any]:
        """Check options against the backend's known ones; UserError names the bad key."""
        refuse_restated_axes(engine_args)
        parsed = cls.parse_options(engine_args)
        return dict(engine_args) if parsed is None else parsed.model_dump(exclude_unset=True)

    @classmethod
    def parse_options(cls, engine_args: dict[str, Any]) -> BaseModel | None:
        """`engine_args` as an `options_model` instance (None without one); UserError names the
        bad key."""
        if cls.options_model is None:
            return None
        from pydantic import ValidationError

        try:
            parsed = cls.options_model.model_validate(engine_args)
        except ValidationError as exc:
            from bench.core.strict import describe_validation_error

            message = describe_validation_error(exc, cls.options_model)
            raise UserError(f"bad engine argument for {cls.name}: {message}") from None
        return parsed

    @classmethod
    def framework_args(
        cls,
        engine_args: dict[str, Any],
        parallelism: ParallelismConfig | None = None,
        precision: Precision | None = None,
        prefix_caching: bool | None = None,
    ) -> dict[str, Any]:
        """The engine's arguments under the framework's own names, with the run settings given
        mapped into them: `parallelism` and `precision` (None: left out, as a RunConfig's
        engine_args never hold them) and automatic prefix caching switched on or off (None: the
        engine's default). UserError (one line) when the framework cannot take a setting given.

        The one mapping of these settings: `load` builds its engine from it, `engine_args_for`
        checks a run with it, and the advisor names a deployment's arguments and switches a
        planned run's caching through it; a new engine option is added here, in the backend.
        The default, for engines that hold a model on one device per process: replicas yes
        (one worker process each); tensor parallelism, FP8 and prefix caching refused.
        Frameworks that split a model over GPUs, run FP8 or cache prefixes override it.
        """
        refuse_restated_axes(engine_args)
        if parallelism is not None and parallelism.tensor_parallel_size > 1:
            raise UserError(
                f"backend {cls.name!r} runs one engine on one device: tensor_parallel_size "
                f"{parallelism.tensor_parallel_size} is not implemented for it; use "
                f"parallelism.replicas to spread independent engines over GPUs instead"
            )
        if precision is not None and (precision.uses_fp8 or precision.quantization):
            raise UserError(
                f"backend {cls.name!r} does not map precision.quantization / kv_cache_dtype "
                f"(FP8 weights and FP8 KV cache are vLLM options here: backend vllm or openai; "
                f"INT8/FP8 W8A8 of an encoder is the pytorch backend's)"
            )
        if prefix_caching is not None:
            raise UserError(
                f"backend {cls.name!r} has no automatic prefix caching to switch on or off "
                f"(vllm and openai with launch=vllm have; tensorrt_llm as enable_block_reuse)"
            )
        return dict(engine_args)

    @classmethod
    def engine_options(cls, engine_args: dict[str, Any]) -> dict[str, Any]:
        """The options the engine itself runs with, under its framework's names, read from a
        run's engine_args (stored ones included, unchecked): the reading side of
        `framework_args`. An in-process engine's are its engine_args."""
        return dict(engine_args)

    @classmethod
    def engine_args_for(
        cls,
        engine_args: dict[str, Any],
        parallelism: ParallelismConfig,
        precision: Precision,
        prefix_caching: bool | None = None,
    ) -> dict[str, Any]:
        """The engine arguments one replica of this run is built with; UserError (one line)
        when the framework cannot run this parallelism, precision or prefix caching
        (`framework_args` decides).

        These run settings are never put into the engine arguments: the backend receives them
        typed (parallelism and precision at `load`, prefix caching at construction) and maps
        them with `framework_args`. An engine argument that restates them is refused
        (`bench.core.config.restated_axis`, the one check; RunConfig makes it at config time,
        this repeats it for callers that build a backend directly)."""
        cls.framework_args(engine_args, parallelism, precision, prefix_caching)
        return dict(engine_args)

    @classmethod
    def recommended_args(cls, shape: WorkloadShape) -> dict[str, Any]:
        """The engine options its experts would set for `shape`, under the engine's own names;
        {} leaves the engine's defaults. Subclasses override."""
        return {}

    @classmethod
    def expert_args(cls, shape: WorkloadShape) -> dict[str, Any]:
        """`recommended_args(shape)` checked against the backend's options: an option the
        backend does not know is a UserError naming it, never silently dropped. Nothing
        recommended leaves the engine's defaults (and what the user must give, like a server URL,
        to the user)."""
        args = cls.recommended_args(shape)
        return cls.validate_engine_args(args) if args else {}

    @classmethod
    def uses_local_gpus(cls, engine_args: dict[str, Any]) -> bool:
        """Whether the engine runs here, on GPUs this run places (False: a remote server)."""
        return True

    def prepare_request(self, request: Request) -> Request:
        """The request as this backend will send it, made before the request's clock starts
        (e.g. token IDs decoded to text); default: unchanged."""
        return request

    def text_codec(self) -> Any:
        """A tokenizer (encode/decode) when this backend sends text, so conversation histories
        can be built from output text; None when it sends token IDs."""
        return None

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability:
        """Installed? Which version? If not usable here, why (one line)."""

    @abstractmethod
    async def load(
        self,
        model: ModelInfo,
        workload: GenerateWorkload | ForwardWorkload,
        precision: Precision,
        device: str,
        parallelism: ParallelismConfig = ONE_ENGINE_ONE_DEVICE,
    ) -> LoadInfo:
        """Load (and compile/build) the model; time spent here is reported apart.

        `precision` and `parallelism` are the run's (one replica's engine): a backend that maps
        them to its framework's arguments does it here, from these typed values."""

    @abstractmethod
    def stream(self, request: Request) -> AsyncIterator[Chunk]:
        """Run one request, yielding chunks as they arrive (async generator)."""

    async def sample_counters(self) -> None:  # noqa: B027 - optional hook
        """Read a served engine's cumulative counters now; the runner calls it where the measured
        window starts and where it ends. In-process engines sample their own counters as they
        step, so the default reads nothing."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release the engine (GPU memory, threads, child processes)."""


_REGISTRY: dict[str, type[Backend]] = {}


def register_backend(name: str) -> Callable[[type[Backend]], type[Backend]]:
    """Class decorator: register a backend under `name` (= config `backend` = results field)."""

    def wrap(cls: type[Backend]) -> type[Backend]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"backend {name!r} registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def registry() -> dict[str, type[Backend]]:
    return dict(_REGISTRY)
