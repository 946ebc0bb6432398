"""`pytorch` backend for real on CPU: tiny-llama through the batcher, forward on tiny models."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from bench.core.config import ForwardWorkload, GenerateWorkload, LengthDistribution, Precision
from bench.core.errors import UserError
from bench.core.schema import ModelInfo
from bench.engines.backends import get_backend
from bench.engines.backends.base import ForwardRequest, GenerateRequest

FP32 = Precision(dtype="float32")


def test_availability_without_loading_torch_state() -> None:
    availability = get_backend("pytorch").availability()
    assert availability.available, availability.reason
    assert availability.version and availability.details["transformers"]


def test_bad_engine_argument_is_a_user_error() -> None:
    with pytest.raises(UserError, match="max_batch_sise"):
        get_backend("pytorch")({"max_batch_sise": 4})
    with pytest.raises(UserError, match="max_batch_size"):
        get_backend("pytorch")({"max_batch_size": 0})


async def stream_times(backend, request) -> list[int]:
    return [chunk.t_ns async for chunk in backend.stream(request)]


def prompt(length: int, offset: int = 100) -> list[int]:
    return [offset + i for i in range(length)]


@pytest.mark.slow
async def test_generate_batches_concurrent_requests_and_streams_exact_lengths(
    tiny_llama: ModelInfo,
) -> None:
    backend = get_backend("pytorch")({"max_batch_size": 4, "batch_wait_ms": 100})
    info = await backend.load(tiny_llama, GenerateWorkload(), FP32, "auto")
    assert info.engine.cuda_graphs is False
    assert info.engine.extra["attn_implementation"] == "sdpa"
    assert info.compile_s is None and info.load_s > 0
    shapes = [(5, 3), (23, 11), (9, 1), (14, 6)]  # (prompt tokens, output tokens)
    requests = [GenerateRequest(f"r{i}", prompt(p, 100 + i), n) for i, (p, n) in enumerate(shapes)]
    results = await asyncio.gather(*(stream_times(backend, r) for r in requests))
    assert [len(times) for times in results] == [n for _, n in shapes]
    for times in results:
        assert all(later > earlier for earlier, later in itertools.pairwise(times))
    assert backend.batch_stats.batch_sizes == [4]  # one batch, not four

    # Six more with room for four: a full batch then the rest.
    more = [GenerateRequest(f"m{i}", prompt(4 + i), 2 + i) for i in range(6)]
    results = await asyncio.gather(*(stream_times(backend, r) for r in more))
    assert [len(times) for times in results] == [2 + i for i in range(6)]
    assert backend.batch_stats.batch_sizes[1:] == [4, 2]
    await backend.close()


@pytest.mark.slow
async def test_left_padding_does_not_change_greedy_tokens(tiny_llama: ModelInfo) -> None:
    """A short prompt batched with a long one decodes the same tokens as alone (pad + mask)."""
    import torch

    from bench.engines.backends.pytorch import left_padded_batch, load_hf_model, pad_token_id_of

    model = load_hf_model(tiny_llama.path, torch.float32, "cpu")
    pad = pad_token_id_of(model)
    short, long = prompt(4, 300), prompt(12, 700)
    ids, mask = left_padded_batch([short, long], pad, "cpu")
    assert ids[0, :8].tolist() == [pad] * 8 and mask[0].sum() == 4
    kwargs = {"max_new_tokens": 5, "min_new_tokens": 5, "do_sample": False, "pad_token_id": pad}
    with torch.inference_mode():
        batched = model.generate(input_ids=ids, attention_mask=mask, **kwargs)[0, -5:]
        alone = model.generate(input_ids=torch.tensor([short]), **kwargs)[0, -5:]
    assert batched.tolist() == alone.tolist()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fixture", "workload"),
    [
        ("tiny_bert", ForwardWorkload(batch_size=3, sequence_length=LengthDistribution(mean=16))),
        ("tiny_resnet", ForwardWorkload(batch_size=2, image_size=32)),
    ],
)
async def test_forward_runs_the_real_model(fixture: str, workload, request) -> None:
    import torch

    from bench.engines.backends.pytorch import forward_inputs, load_hf_model, primary_output

    model_info: ModelInfo = request.getfixturevalue(fixture)
    backend = get_backend("pytorch")({})
    await backend.load(model_info, workload, FP32, "cpu")
    sequence = workload.sequence_length.mean if workload.sequence_length else None
    forward = ForwardRequest("f1", workload.batch_size, sequence, workload.image_size)
    chunks = [chunk async for chunk in backend.stream(forward)]
    assert len(chunks) == 1 and chunks[0].tokens == workload.batch_size
    output = await backend.forward_output(workload.batch_size, sequence, workload.image_size)
    await backend.close()

    reference_model = load_hf_model(model_info.path, torch.float32, "cpu", None)
    inputs = forward_inputs(
        reference_model.config,
        workload.batch_size,
        sequence,
        workload.image_size,
        "cpu",
        torch.float32,
    )
    with torch.inference_mode():
        expected = primary_output(reference_model(**inputs))
    assert output.shape == expected.shape and output.shape[0] == workload.batch_size
    torch.testing.assert_close(output, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
async def test_forward_autocast_bf16_close_to_fp32(tiny_bert: ModelInfo) -> None:
    import torch

    workload = ForwardWorkload(batch_size=2, sequence_length=LengthDistribution(mean=8))
    results = {}
    for autocast, precision in ((False, FP32), (True, Precision(dtype="bfloat16"))):
        backend = get_backend("pytorch")({"autocast": autocast})
        info = await backend.load(tiny_bert, workload, precision, "cpu")
        assert info.engine.extra["autocast"] is autocast
        assert info.engine.extra["weights_dtype"] == "float32"
        results[autocast] = await backend.forward_output(2, 8)
        await backend.close()
    assert not torch.equal(results[True], results[False])  # autocast really changed the math
    torch.testing.assert_close(results[True], results[False], rtol=0.05, atol=0.05)


async def test_kind_mismatch_is_a_user_error(tiny_bert: ModelInfo) -> None:
    backend = get_backend("pytorch")({})
    with pytest.raises(UserError, match="forward model"):
        await backend.load(tiny_bert, GenerateWorkload(), FP32, "cpu")
    await backend.close()


async def test_forward_int8_runs_the_quantized_model(tiny_bert: ModelInfo) -> None:
    """precision.quantization int8 on the CPU is torch's dynamic INT8 of the Linear layers:
    the engine says so, and its output is near float32's but not equal to it."""
    import torch

    workload = ForwardWorkload(batch_size=2, sequence_length=LengthDistribution(mean=8))
    outputs = {}
    for precision in (FP32, Precision(dtype="float32", quantization="int8")):
        backend = get_backend("pytorch")({})
        info = await backend.load(tiny_bert, workload, precision, "cpu")
        outputs[precision.quantization] = await backend.forward_output(2, 8)
        quantized_with = info.engine.extra.get("quantization")
        await backend.close()
    assert quantized_with is not None and "int8 dynamic" in str(quantized_with)
    assert not torch.equal(outputs["int8"], outputs[None])
    torch.testing.assert_close(outputs["int8"], outputs[None], rtol=0.1, atol=0.1)


async def test_w8a8_is_refused_where_it_cannot_run(tiny_bert: ModelInfo, tiny_llama) -> None:
    workload = ForwardWorkload(batch_size=1, sequence_length=LengthDistribution(mean=8))
    backend = get_backend("pytorch")({})
    with pytest.raises(UserError, match="FP8 tensor cores"):
        await backend.load(
            tiny_bert, workload, Precision(dtype="float32", quantization="fp8"), "cpu"
        )
    with pytest.raises(UserError, match="forward runs only"):
        await backend.load(tiny_llama, GenerateWorkload(), Precision(quantization="int8"), "cpu")
    await backend.close()
    compiled = get_backend("torch_compile")({})
    with pytest.raises(UserError, match="does not support quantization"):
        await compiled.load(
            tiny_bert, workload, Precision(dtype="float32", quantization="int8"), "cpu"
        )
    await compiled.close()
