"""The onnxruntime backend for real on CPU: forward kind (checked export) and onnxruntime-genai."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from bench.core.config import ForwardWorkload, GenerateWorkload, LengthDistribution, Precision
from bench.core.errors import BackendUnavailable, UserError
from bench.engines.backends import get_backend
from bench.engines.backends.base import ForwardRequest, GenerateRequest
from bench.engines.onnx_export import ExportCheckFailed

FP32 = Precision(dtype="float32")


def test_registered_with_both_kinds_and_providers_listed() -> None:
    backend = get_backend("onnxruntime")
    assert backend.kinds == {"generate", "forward"}
    availability = backend.availability()
    assert availability.available and availability.version
    assert "CPUExecutionProvider" in availability.details["providers"]
    assert "onnxruntime_genai" in availability.details


def test_unknown_or_bad_engine_args_are_user_errors() -> None:
    backend = get_backend("onnxruntime")
    with pytest.raises(UserError, match="intra_op_threads"):
        backend({"intra_op_threads": 2})
    with pytest.raises(UserError, match="graph_optimization_level"):
        backend({"graph_optimization_level": "max"})
    options = backend({"provider": "cpu", "graph_optimization_level": "basic"}).options
    assert options.provider == "cpu" and options.graph_optimization_level == "basic"


def test_missing_provider_is_reported_not_faked(tiny_resnet) -> None:
    import onnxruntime

    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        pytest.skip("this machine has the CUDA provider")
    backend = get_backend("onnxruntime")({"provider": "cuda"})
    with pytest.raises(BackendUnavailable, match="CUDAExecutionProvider"):
        asyncio.run(backend.load(tiny_resnet, ForwardWorkload(batch_size=2), FP32, "cpu"))


def test_bfloat16_forward_is_refused_with_advice(tiny_resnet) -> None:
    backend = get_backend("onnxruntime")({"provider": "cpu"})
    with pytest.raises(UserError, match="float32 or float16"):
        asyncio.run(
            backend.load(tiny_resnet, ForwardWorkload(), Precision(dtype="bfloat16"), "cpu")
        )


async def _run_forward(backend, requests):
    results = []
    for request in requests:
        chunks = [chunk async for chunk in backend.stream(request)]
        results.append(chunks)
    return results


@pytest.mark.slow
@pytest.mark.parametrize(
    ("preset", "workload"),
    [
        ("tiny_bert", ForwardWorkload(batch_size=4, sequence_length=LengthDistribution(mean=16))),
        ("tiny_resnet", ForwardWorkload(batch_size=4, image_size=48)),
        ("tiny_vit", ForwardWorkload(batch_size=4)),
    ],
)
def test_forward_fixed_shape_checked_and_timed(preset, workload, request) -> None:
    model = request.getfixturevalue(preset)
    backend = get_backend("onnxruntime")({"provider": "cpu", "intra_op_num_threads": 1})

    async def scenario():
        info = await backend.load(model, workload, FP32, "cpu")
        shape = dict(
            batch_size=workload.batch_size,
            sequence_length=16 if preset == "tiny_bert" else None,
            image_size=workload.image_size,
        )
        outputs = await _run_forward(
            backend, [ForwardRequest(id=f"r{i}", **shape) for i in range(5)]
        )
        await backend.close()
        return info, outputs

    from bench.core.clock import CLOCK

    before = CLOCK.now_ns()
    info, outputs = asyncio.run(scenario())
    check = info.engine.extra["export_check"]
    assert check["passed"] and check["relative_error"] < 1e-4
    assert info.engine.extra["providers"][0] == "CPUExecutionProvider"
    assert info.build_s is not None and info.build_s >= 0
    times = [chunks[0].t_ns for chunks in outputs]
    assert all(len(chunks) == 1 and chunks[0].tokens == 4 for chunks in outputs)
    assert before < times[0] and times == sorted(times)


@pytest.mark.slow
def test_forward_dynamic_shapes_serve_several_shapes(tiny_bert) -> None:
    workload = ForwardWorkload(
        batch_size=2,
        sequence_length=LengthDistribution(kind="uniform", mean=12, spread=4),
        dynamic_shapes=True,
    )
    backend = get_backend("onnxruntime")({"provider": "cpu"})

    async def scenario():
        info = await backend.load(tiny_bert, workload, FP32, "cpu")
        outputs = await _run_forward(
            backend,
            [
                ForwardRequest(id="a", batch_size=2, sequence_length=8),
                ForwardRequest(id="b", batch_size=2, sequence_length=16),
                ForwardRequest(id="c", batch_size=3, sequence_length=5),
            ],
        )
        await backend.close()
        return info, outputs

    info, outputs = asyncio.run(scenario())
    assert info.engine.extra["dynamic_shapes"] is True
    assert [chunks[0].tokens for chunks in outputs] == [2, 2, 3]


def test_variable_lengths_without_dynamic_shapes_is_a_user_error(tiny_bert) -> None:
    workload = ForwardWorkload(
        sequence_length=LengthDistribution(kind="uniform", mean=12, spread=4)
    )
    backend = get_backend("onnxruntime")({"provider": "cpu"})
    with pytest.raises(UserError, match="dynamic_shapes"):
        asyncio.run(backend.load(tiny_bert, workload, FP32, "cpu"))


@pytest.mark.slow
def test_forward_broken_export_fails_the_run(tiny_vit, monkeypatch) -> None:
    """A graph whose outputs are wrong must fail load() before anything is timed."""
    from bench.engines import onnx_export

    real_reference = onnx_export.eager_reference
    monkeypatch.setattr(
        onnx_export, "eager_reference", lambda path, inputs: real_reference(path, inputs) * 2.0
    )
    backend = get_backend("onnxruntime")({"provider": "cpu"})
    with pytest.raises(ExportCheckFailed, match="disagrees with eager PyTorch"):
        asyncio.run(backend.load(tiny_vit, ForwardWorkload(batch_size=2), FP32, "cpu"))


# --------------------------------------------------------------------------- generate kind

needs_genai = pytest.mark.skipif(
    importlib.util.find_spec("onnxruntime_genai") is None, reason="onnxruntime-genai missing"
)


def test_genai_precision_rules(tiny_llama) -> None:
    backend = get_backend("onnxruntime")({"provider": "cpu", "precision": "fp16"})
    with pytest.raises(UserError, match="fp32, int8, int4"):
        asyncio.run(backend.load(tiny_llama, GenerateWorkload(), FP32, "cpu"))


@pytest.mark.slow
@needs_genai
def test_genai_generate_converted_cached_and_batched(tiny_llama, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path))  # conversion cache only
    lengths = [5, 9, 3, 9, 1, 7]
    prompts = [[100 + i, 200 + i, 300 + i, 400 + i][: 2 + i % 3] for i in range(len(lengths))]
    options = {"provider": "cpu", "max_batch_size": 4, "batch_wait_ms": 20}

    async def one(backend, request):
        return [chunk async for chunk in backend.stream(request)]

    async def scenario():
        backend = get_backend("onnxruntime")(options)
        info = await backend.load(tiny_llama, GenerateWorkload(), FP32, "cpu")
        requests = [
            GenerateRequest(id=f"r{i}", prompt_token_ids=p, output_tokens=n)
            for i, (p, n) in enumerate(zip(prompts, lengths, strict=True))
        ]
        outputs = await asyncio.gather(*(one(backend, r) for r in requests))
        stats = backend.batcher_stats
        await backend.close()
        return info, outputs, stats

    info, outputs, stats = asyncio.run(scenario())
    # Six concurrent requests, batches of at most 4: real batches were formed.
    assert stats.requests == 6 and max(stats.batch_sizes) > 1 and max(stats.batch_sizes) <= 4
    assert info.engine.extra["conversion_cached"] is False and info.build_s > 0
    for chunks, wanted in zip(outputs, lengths, strict=True):
        assert sum(c.tokens for c in chunks) == wanted
        times = [c.t_ns for c in chunks]
        assert times == sorted(times)
    converted = list((tmp_path / "onnx-genai").iterdir())
    assert len(converted) == 1 and (converted[0] / "genai_config.json").exists()

    # Second load: served from the cache, no rebuild.
    async def reload():
        backend = get_backend("onnxruntime")(options)
        info = await backend.load(tiny_llama, GenerateWorkload(), FP32, "cpu")
        chunks = await one(
            backend, GenerateRequest(id="x", prompt_token_ids=[7, 8], output_tokens=4)
        )
        await backend.close()
        return info, chunks

    info2, chunks = asyncio.run(reload())
    assert info2.engine.extra["conversion_cached"] is True and info2.build_s == 0.0
    assert sum(c.tokens for c in chunks) == 4
