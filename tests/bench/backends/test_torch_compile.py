"""`torch_compile` backend for real on CPU (inductor): static-cache generate, compiled forward."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from bench.core.config import ForwardWorkload, GenerateWorkload, LengthDistribution, Precision
from bench.core.errors import UserError
from bench.core.schema import ModelInfo
from bench.engines.backends import get_backend
from bench.engines.backends.base import ForwardRequest, GenerateRequest
from bench.engines.backends.torch_compile import default_buckets, length_upper_bound

FP32 = Precision(dtype="float32")


def test_default_buckets_reach_max_batch_size() -> None:
    assert default_buckets(1) == [1]
    assert default_buckets(4) == [1, 4]
    assert default_buckets(32) == [1, 4, 16, 32]
    assert default_buckets(256) == [1, 4, 16, 64, 256]


def test_length_upper_bound() -> None:
    assert length_upper_bound(LengthDistribution(mean=128)) == 128
    assert length_upper_bound(LengthDistribution(kind="uniform", mean=100, spread=20)) == 120
    assert length_upper_bound(LengthDistribution(kind="normal", mean=100, spread=10)) == 140
    assert (
        length_upper_bound(LengthDistribution(kind="lognormal", mean=100, spread=50, max=150))
        == 150
    )


def test_availability_and_options() -> None:
    backend_class = get_backend("torch_compile")
    availability = backend_class.availability()
    assert availability.available, availability.reason
    with pytest.raises(UserError, match="mode"):
        backend_class({"mode": "turbo"})


async def stream_times(backend, request) -> list[int]:
    return [chunk.t_ns async for chunk in backend.stream(request)]


@pytest.mark.slow
async def test_generate_compiles_static_cache_and_streams_exact_lengths(
    tiny_llama: ModelInfo,
) -> None:
    from bench.engines.backends.torch_compile import _unique_graphs

    workload = GenerateWorkload(
        prompt_tokens=LengthDistribution(kind="uniform", mean=16, spread=8),
        output_tokens=LengthDistribution(kind="uniform", mean=8, spread=4),
    )
    backend = get_backend("torch_compile")({"max_batch_size": 4, "batch_wait_ms": 100})
    info = await backend.load(tiny_llama, workload, FP32, "cpu")
    assert info.compile_s is not None and info.compile_s > 0
    assert info.engine.extra["kv_cache"] == "static" and info.engine.extra["batch_buckets"] == [
        1,
        4,
    ]
    assert info.engine.extra["max_cache_len"] == 24 + 12
    assert backend.compiled_graphs >= 1  # the decode step really went through Dynamo
    graphs_after_load = _unique_graphs()

    shapes = [(8, 4), (24, 12), (13, 1), (17, 7)]
    requests = [
        GenerateRequest(f"r{i}", [100 + i + j for j in range(p)], n)
        for i, (p, n) in enumerate(shapes)
    ]
    results = await asyncio.gather(*(stream_times(backend, r) for r in requests))
    assert [len(times) for times in results] == [n for _, n in shapes]
    for times in results:
        assert all(later > earlier for earlier, later in itertools.pairwise(times))
    assert backend.batch_stats.batch_sizes == [4]

    # Three requests run padded to the 4-row bucket; a lone one uses the 1-row bucket.
    results = await asyncio.gather(
        *(stream_times(backend, GenerateRequest(f"p{i}", [200 + i] * 10, 3 + i)) for i in range(3))
    )
    assert [len(times) for times in results] == [3, 4, 5]
    assert len(await stream_times(backend, GenerateRequest("lone", [7] * 5, 6))) == 6
    assert backend.batch_stats.batch_sizes[1:] == [3, 1]
    assert _unique_graphs() == graphs_after_load  # no recompilation while serving

    with pytest.raises(RuntimeError, match="static cache"):
        await stream_times(backend, GenerateRequest("too-long", [9] * 30, 10))
    await backend.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fixture", "workload", "shape"),
    [
        (
            "tiny_bert",
            ForwardWorkload(batch_size=2, sequence_length=LengthDistribution(mean=16)),
            (2, 16, None),
        ),
        ("tiny_resnet", ForwardWorkload(batch_size=2, image_size=32), (2, None, 32)),
    ],
)
async def test_compiled_forward_agrees_with_eager(fixture, workload, shape, request) -> None:
    import torch

    model_info: ModelInfo = request.getfixturevalue(fixture)
    outputs = {}
    for name in ("pytorch", "torch_compile"):
        backend = get_backend(name)({})
        info = await backend.load(model_info, workload, FP32, "cpu")
        if name == "torch_compile":
            assert info.compile_s is not None and info.compile_s > 0
            assert info.engine.extra["compile_mode"] == "reduce-overhead"
        chunks = [chunk async for chunk in backend.stream(ForwardRequest("f", *shape))]
        assert len(chunks) == 1 and chunks[0].tokens == shape[0]
        outputs[name] = await backend.forward_output(*shape)
        await backend.close()
    torch.testing.assert_close(outputs["torch_compile"], outputs["pytorch"], rtol=1e-4, atol=1e-4)
