"""TEST STAND-IN, not TensorRT-LLM: follows the documented LLM API so our adapter's argument
mapping, streaming loop and error paths can be tested.

Mirrors (as documented in NVIDIA/TensorRT-LLM): `from tensorrt_llm import LLM, SamplingParams`,
the top-level LLM being the PyTorch flow (`backend="pytorch"`, TorchLlmArgs, which rejects the
TensorRT-only `build_config`), `tensorrt_llm._tensorrt_engine.LLM` for built engines,
`tensorrt_llm.llmapi.KvCacheConfig` / `BuildConfig`, `generate_async(..., streaming=True)`
returning an async-iterable RequestOutput whose `outputs[0].token_ids` is cumulative, `abort()`
and `shutdown()`. It produces fake token ids instantly; it performs no inference at all.

Knobs for tests: `STANDIN.fail_after_tokens` (raise RequestError mid-stream),
`STANDIN.tokens_per_output` (tokens per streamed output, like stream_interval), and
`STANDIN.events`, a log of constructor kwargs, requests, aborts and shutdowns.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from tensorrt_llm.sampling_params import SamplingParams

__version__ = "0.0.0+test-standin"


@dataclass
class _StandinState:
    events: list[tuple[str, Any]] = field(default_factory=list)
    fail_after_tokens: int | None = None
    tokens_per_output: int = 1

    def reset(self) -> None:
        self.events.clear()
        self.fail_after_tokens = None
        self.tokens_per_output = 1


STANDIN = _StandinState()


class RequestError(RuntimeError):
    """The error raised when the request is failed (tensorrt_llm.executor.RequestError)."""


@dataclass
class CompletionOutput:
    index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    _last_token_ids_len: int = 0

    @property
    def token_ids_diff(self) -> list[int]:
        return self.token_ids[self._last_token_ids_len :]


class RequestOutput:
    """Async-iterable result of generate_async(streaming=True), like tensorrt_llm's."""

    def __init__(self, request_id: int, prompt_token_ids: list[int], params: SamplingParams):
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.outputs = [CompletionOutput(index=0)]
        self.finished = False
        self._params = params
        self._aborted = False

    def abort(self) -> None:
        self._aborted = True
        STANDIN.events.append(("abort", self.request_id))

    def __aiter__(self) -> RequestOutput:
        return self

    async def __anext__(self) -> RequestOutput:
        if self.finished or self._aborted:
            raise StopAsyncIteration
        await asyncio.sleep(0)
        output = self.outputs[0]
        produced = len(output.token_ids)
        limit = self._params.max_tokens
        if STANDIN.fail_after_tokens is not None and produced >= STANDIN.fail_after_tokens:
            raise RequestError(f"stand-in failure after {produced} tokens")
        step = min(STANDIN.tokens_per_output, limit - produced)
        output._last_token_ids_len = produced
        output.token_ids = output.token_ids + [7] * step  # cumulative, as documented
        if len(output.token_ids) >= limit:
            output.finish_reason = "length"
            self.finished = True
        return self


class _BaseLLM:
    _valid_kwargs: frozenset[str] = frozenset()

    def __init__(self, model: str, **kwargs: Any) -> None:
        for key in kwargs:
            if key not in self._valid_kwargs:
                raise ValueError(f"{type(self).__name__} got invalid argument: {key}")
        self.args = {"model": model, **kwargs}
        self._next_id = 0
        self._shutdown = False
        STANDIN.events.append(("init", type(self).__name__, self.args))

    def generate_async(
        self, inputs: Any, sampling_params: SamplingParams | None = None, streaming: bool = False
    ) -> RequestOutput:
        if self._shutdown:
            raise RuntimeError("LLM is shutting down")
        if not (isinstance(inputs, list) and all(isinstance(t, int) for t in inputs)):
            raise TypeError("the stand-in takes token-id prompts (list of int) only")
        params = sampling_params or SamplingParams()
        self._next_id += 1
        STANDIN.events.append(("request", self._next_id, list(inputs), params, streaming))
        return RequestOutput(self._next_id, list(inputs), params)

    def shutdown(self) -> None:
        self._shutdown = True
        STANDIN.events.append(("shutdown", type(self).__name__))


_COMMON = frozenset(
    {
        "tokenizer",
        "dtype",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "trust_remote_code",
        "kv_cache_config",
        "enable_chunked_prefill",
        "max_batch_size",
        "max_num_tokens",
        "max_seq_len",
    }
)


class LLM(_BaseLLM):
    """The PyTorch-flow LLM (TorchLlmArgs): TensorRT-only arguments are rejected."""

    _valid_kwargs = _COMMON | {"backend"}

    def __init__(self, model: str, **kwargs: Any) -> None:
        if "build_config" in kwargs:
            raise ValueError(
                "The following arguments are specific to TensorRT backend and cannot be used "
                "with PyTorch backend: ['build_config']."
            )
        super().__init__(model, **kwargs)


__all__ = ["LLM", "STANDIN", "RequestError", "SamplingParams", "__version__"]
