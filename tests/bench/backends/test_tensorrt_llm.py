"""Our tensorrt_llm adapter against a TEST STAND-IN of TensorRT-LLM (the real one cannot be
installed here): argument mapping, token counting over streamed outputs, errors, shutdown."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest

from bench.core.config import GenerateWorkload, ParallelismConfig, Precision
from bench.core.errors import BackendUnavailable, UserError
from bench.core.schema import ModelInfo
from bench.engines.backends import get_backend
from bench.engines.backends.base import ForwardRequest, GenerateRequest
from bench.engines.backends.tensorrt_llm import NOT_INSTALLED_REASON

STANDINS = Path(__file__).resolve().parents[2] / "standins"
MODEL = ModelInfo(name="tiny-llama", path="/models/tiny-llama", vocab_size=32000)


def _drop_tensorrt_llm_modules() -> None:
    for name in [n for n in sys.modules if n == "tensorrt_llm" or n.startswith("tensorrt_llm.")]:
        del sys.modules[name]


@pytest.fixture
def standin(monkeypatch):
    """Put the stand-in package first on sys.path; yields its STANDIN knobs/event log."""
    _drop_tensorrt_llm_modules()
    monkeypatch.syspath_prepend(str(STANDINS))
    import tensorrt_llm

    assert "TEST STAND-IN" in tensorrt_llm.__doc__  # never the real library by accident
    tensorrt_llm.STANDIN.reset()
    yield tensorrt_llm.STANDIN
    _drop_tensorrt_llm_modules()


def _init_event(standin):
    inits = [event for event in standin.events if event[0] == "init"]
    assert len(inits) == 1
    return inits[0][1], inits[0][2]


async def _collect(backend, request):
    return [chunk async for chunk in backend.stream(request)]


@pytest.mark.skipif(
    importlib.util.find_spec("tensorrt_llm") is not None, reason="tensorrt_llm is installed"
)
def test_unavailable_says_plainly_it_was_not_run() -> None:
    availability = get_backend("tensorrt_llm").availability()
    assert availability.available is False
    assert availability.reason == NOT_INSTALLED_REASON
    assert "has NOT been run against the real library" in availability.reason
    backend = get_backend("tensorrt_llm")({})
    with pytest.raises(BackendUnavailable, match=r"pypi\.nvidia\.com"):
        asyncio.run(backend.load(MODEL, GenerateWorkload(), Precision(), "cuda"))


def test_options_are_validated_under_tensorrt_llm_names() -> None:
    backend = get_backend("tensorrt_llm")
    with pytest.raises(UserError, match="max_batch"):
        backend({"max_batch": 32})
    with pytest.raises(UserError, match="backend=tensorrt"):
        backend({"gemm_plugin": "float16"})  # a build option on the PyTorch flow
    with pytest.raises(UserError, match="kv_cache_free_gpu_memory_fraction"):
        backend({"kv_cache_free_gpu_memory_fraction": 1.5})
    with pytest.raises(UserError, match="backend"):
        backend({"backend": "onnx"})


def test_seed_build_options_map_to_a_build_config(standin) -> None:
    """The seed's `--gemm_plugin float16 --max_batch_size 32`, tensor parallel 2, engine flow."""
    backend = get_backend("tensorrt_llm")(
        {
            "backend": "tensorrt",
            "max_batch_size": 32,
            "gemm_plugin": "float16",
            "max_seq_len": 4096,
            "kv_cache_free_gpu_memory_fraction": 0.85,
        }
    )
    tp2 = ParallelismConfig(tensor_parallel_size=2)
    info = asyncio.run(
        backend.load(MODEL, GenerateWorkload(), Precision(dtype="float16"), "cuda", tp2)
    )
    cls_name, kwargs = _init_event(standin)
    assert cls_name == "LLM"
    assert info.engine.extra["llm_class"] == "tensorrt_llm._tensorrt_engine.LLM"
    assert kwargs["model"] == MODEL.path and kwargs["tokenizer"] == MODEL.path
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["dtype"] == "float16"
    build_config = kwargs["build_config"]
    assert build_config.max_batch_size == 32 and build_config.max_seq_len == 4096
    assert build_config.plugin_config.gemm_plugin == "float16"
    assert "max_batch_size" not in kwargs  # engine limits live in the build config
    assert kwargs["kv_cache_config"].free_gpu_memory_fraction == 0.85
    assert info.build_s is not None and info.build_s >= 0
    asyncio.run(backend.close())


def test_pytorch_flow_gets_limits_as_llm_args(standin) -> None:
    backend = get_backend("tensorrt_llm")(
        {"max_batch_size": 32, "max_num_tokens": 8192, "enable_chunked_prefill": True}
    )
    info = asyncio.run(backend.load(MODEL, GenerateWorkload(), Precision(), "cuda"))
    _, kwargs = _init_event(standin)
    assert info.engine.extra["llm_class"] == "tensorrt_llm.LLM" and info.build_s is None
    assert kwargs["backend"] == "pytorch" and "build_config" not in kwargs
    assert kwargs["max_batch_size"] == 32 and kwargs["max_num_tokens"] == 8192
    assert kwargs["enable_chunked_prefill"] is True and kwargs["dtype"] == "bfloat16"
    assert "kv_cache_config" not in kwargs


def test_the_run_prefix_caching_becomes_kv_cache_block_reuse(standin) -> None:
    """RunConfig.prefix_caching reaches the engine as KvCacheConfig.enable_block_reuse; the
    engine argument itself is refused (said once, as the run setting)."""
    backend = get_backend("tensorrt_llm")({}, prefix_caching=False)
    asyncio.run(backend.load(MODEL, GenerateWorkload(), Precision(), "cuda"))
    _, kwargs = _init_event(standin)
    assert kwargs["kv_cache_config"].enable_block_reuse is False
    asyncio.run(backend.close())
    with pytest.raises(UserError, match="prefix_caching: true"):
        get_backend("tensorrt_llm")({"enable_block_reuse": True})


@pytest.mark.parametrize("tokens_per_output", [1, 3])
def test_streaming_counts_new_tokens_of_cumulative_outputs(standin, tokens_per_output) -> None:
    standin.tokens_per_output = tokens_per_output
    backend = get_backend("tensorrt_llm")({})

    async def scenario():
        await backend.load(MODEL, GenerateWorkload(), Precision(), "cuda")
        requests = [
            GenerateRequest(id=f"r{i}", prompt_token_ids=[100 + i, 101], output_tokens=n)
            for i, n in enumerate([1, 5, 10])
        ]
        outputs = await asyncio.gather(*(_collect(backend, r) for r in requests))
        await backend.close()
        return outputs

    outputs = asyncio.run(scenario())
    for chunks, wanted in zip(outputs, [1, 5, 10], strict=True):
        assert sum(chunk.tokens for chunk in chunks) == wanted
        assert len(chunks) == -(-wanted // tokens_per_output)  # one chunk per streamed output
        times = [chunk.t_ns for chunk in chunks]
        assert times == sorted(times)
    requests = [event for event in standin.events if event[0] == "request"]
    params = requests[1][3]
    assert params.max_tokens == 5 and params.min_tokens == 5 and params.ignore_eos is True
    assert params.detokenize is False and requests[1][4] is True  # streaming
    assert requests[1][2] == [101, 101]  # token-id prompt passed through
    assert standin.events[-1] == ("shutdown", "LLM")


def test_request_errors_propagate_and_shutdown_still_happens(standin) -> None:
    standin.fail_after_tokens = 2
    backend = get_backend("tensorrt_llm")({})

    async def scenario():
        await backend.load(MODEL, GenerateWorkload(), Precision(), "cuda")
        try:
            return await _collect(
                backend, GenerateRequest(id="x", prompt_token_ids=[5], output_tokens=4)
            )
        finally:
            await backend.close()

    with pytest.raises(RuntimeError, match="stand-in failure after 2 tokens"):
        asyncio.run(scenario())
    assert ("shutdown", "LLM") in standin.events


def test_a_consumer_that_gives_up_aborts_the_request(standin) -> None:
    backend = get_backend("tensorrt_llm")({})

    async def scenario():
        await backend.load(MODEL, GenerateWorkload(), Precision(), "cuda")
        stream = backend.stream(GenerateRequest(id="x", prompt_token_ids=[5], output_tokens=50))
        first = await anext(stream)
        await stream.aclose()  # what a request time-out does
        await backend.close()
        return first

    first = asyncio.run(scenario())
    assert first.tokens == 1
    assert any(event[0] == "abort" for event in standin.events)


def test_user_errors_before_anything_starts(standin) -> None:
    backend = get_backend("tensorrt_llm")({})
    with pytest.raises(UserError, match="GPUs only"):
        asyncio.run(backend.load(MODEL, GenerateWorkload(), Precision(), "cpu"))
    with pytest.raises(UserError, match="quantization"):
        asyncio.run(backend.load(MODEL, GenerateWorkload(), Precision(quantization="fp8"), "cuda"))
    assert not standin.events  # nothing was constructed


def test_forward_requests_are_refused(standin) -> None:
    backend = get_backend("tensorrt_llm")({})

    async def scenario():
        await backend.load(MODEL, GenerateWorkload(), Precision(), "cuda")
        try:
            await _collect(backend, ForwardRequest(id="f", batch_size=1))
        finally:
            await backend.close()

    with pytest.raises(TypeError, match="generate kind"):
        asyncio.run(scenario())
