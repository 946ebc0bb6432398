"""Each backend's expert defaults (`recommended_args`) are valid options of that backend, follow
the workload's shape, and an unknown option is an error rather than silently dropped."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from bench.core.errors import UserError
from bench.engines.backends import registry
from bench.engines.backends.base import WorkloadShape
from bench.engines.backends.pytorch import PyTorchBackend

SHAPES = [
    WorkloadShape(
        kind=kind,
        max_sequence_tokens=tokens,
        concurrency=concurrency,
        fixed_input_shapes=fixed,
        build_time_tolerance=tolerance,
        quantization=quantization,
    )
    for kind, tokens, concurrency, fixed, tolerance, quantization in itertools.product(
        ("generate", "forward"),
        (256, 4096),
        (1, 512),
        (False, True),
        (None, "minutes"),
        (None, "awq"),
    )
]


@pytest.mark.parametrize("name", sorted(registry()))
def test_every_backends_recommended_args_are_its_own_options(name: str) -> None:
    backend = registry()[name]
    for shape in SHAPES:
        args = backend.expert_args(shape)  # raises UserError on an option the backend lacks
        assert args == backend.recommended_args(shape)


def test_recommended_args_follow_the_shape() -> None:
    backends = registry()
    chat = WorkloadShape(kind="generate", max_sequence_tokens=1024, concurrency=512)
    vllm = backends["vllm"].recommended_args(chat)
    assert vllm["max_model_len"] == 1024 and vllm["max_num_seqs"] == 512
    assert vllm["enforce_eager"] is False  # CUDA graphs on
    small = backends["vllm"].recommended_args(chat.model_copy(update={"concurrency": 16}))
    assert "max_num_seqs" not in small  # vLLM's default 256 already covers 16
    awq = chat.model_copy(update={"quantization": "awq"})
    # A checkpoint's format is an engine arg; fp8 is a run axis (precision), never an arg.
    assert backends["vllm"].recommended_args(awq)["quantization"] == "awq"
    fp8 = backends["vllm"].recommended_args(awq.model_copy(update={"quantization": "fp8"}))
    assert "quantization" not in fp8
    fixed = WorkloadShape(
        kind="forward", max_sequence_tokens=256, concurrency=8, fixed_input_shapes=True
    )
    assert backends["torch_compile"].recommended_args(fixed) == {"mode": "max-autotune"}
    assert backends["torch_compile"].recommended_args(chat)["max_cache_len"] == 1024
    trt = backends["tensorrt_llm"].recommended_args(fixed.model_copy(update={"kind": "generate"}))
    assert trt["backend"] == "tensorrt"
    no_build = fixed.model_copy(update={"kind": "generate", "build_time_tolerance": "minutes"})
    assert "backend" not in backends["tensorrt_llm"].recommended_args(no_build)
    assert backends["openai"].recommended_args(chat) == {}  # the server decides


class MisspeltPyTorch(PyTorchBackend):
    """TEST DOUBLE (not registered): a backend whose expert defaults name an option it lacks."""

    @classmethod
    def recommended_args(cls, shape: WorkloadShape) -> dict[str, Any]:
        return {"max_batch_sise": shape.concurrency}


def test_an_unknown_recommended_option_is_an_error_not_dropped() -> None:
    shape = WorkloadShape(kind="generate", max_sequence_tokens=512, concurrency=4)
    with pytest.raises(UserError, match="max_batch_sise"):
        MisspeltPyTorch.expert_args(shape)


def test_shape_is_strict() -> None:
    with pytest.raises(ValueError):
        WorkloadShape(kind="generate", max_sequence_tokens=512, concurrency=4, max_seqs=8)
