"""The tensorrt backend where TensorRT is absent: availability, options, clean load errors, and
the optimization-profile shapes (the engine itself needs a GPU host with TensorRT)."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from bench.core.config import ForwardWorkload, GenerateWorkload, Precision
from bench.core.errors import BackendUnavailable, UserError
from bench.core.schema import ModelInfo
from bench.engines.backends import get_backend
from bench.engines.backends.tensorrt import NOT_INSTALLED_REASON, optimization_profile
from bench.engines.onnx_export import ForwardShape

MODEL = ModelInfo(name="tiny-resnet", path="/nonexistent/tiny-resnet", kind="forward")
tensorrt_missing = pytest.mark.skipif(
    importlib.util.find_spec("tensorrt") is not None, reason="tensorrt is installed here"
)


@tensorrt_missing
def test_unavailable_with_reason_and_load_refuses_cleanly() -> None:
    backend_cls = get_backend("tensorrt")
    availability = backend_cls.availability()
    assert availability.available is False and availability.reason == NOT_INSTALLED_REASON
    backend = backend_cls({})
    with pytest.raises(BackendUnavailable, match="tensorrt is not installed"):
        asyncio.run(backend.load(MODEL, ForwardWorkload(), Precision(dtype="float16"), "cuda"))
    asyncio.run(backend.close())


def test_forward_kind_only_and_options_validated() -> None:
    backend_cls = get_backend("tensorrt")
    assert backend_cls.kinds == {"forward"}
    with pytest.raises(UserError, match="workspace"):
        backend_cls({"workspace": 4})
    with pytest.raises(UserError, match="builder_optimization_level"):
        backend_cls({"builder_optimization_level": 9})
    options = backend_cls({"workspace_gib": 2, "max_batch_size": 64}).options
    assert options.workspace_gib == 2 and options.max_batch_size == 64


def test_user_errors_come_before_any_gpu_work(monkeypatch) -> None:
    # Pretend TensorRT is importable so the argument checks after the install check run.
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "tensorrt" else real_find_spec(name, *a),
    )
    backend = get_backend("tensorrt")({})
    with pytest.raises(UserError, match="forward kind"):
        asyncio.run(backend.load(MODEL, GenerateWorkload(), Precision(), "cuda"))
    with pytest.raises(UserError, match="GPUs only"):
        asyncio.run(backend.load(MODEL, ForwardWorkload(), Precision(), "cpu"))
    asyncio.run(backend.close())


def test_fixed_profile_is_min_opt_max_equal() -> None:
    profile = optimization_profile(
        ("input_ids", "attention_mask"), ForwardShape(8, sequence_length=128), False, None, None
    )
    assert profile["input_ids"] == ((8, 128),) * 3 and profile["attention_mask"] == ((8, 128),) * 3
    images = optimization_profile(
        ("pixel_values",), ForwardShape(4, image_size=224), False, 64, None
    )
    assert images["pixel_values"] == ((4, 3, 224, 224),) * 3  # bounds ignored when fixed


def test_dynamic_profile_ranges() -> None:
    text = optimization_profile(("input_ids",), ForwardShape(8, sequence_length=128), True, 64, 512)
    assert text["input_ids"] == ((1, 1), (8, 128), (64, 512))
    images = optimization_profile(
        ("pixel_values",), ForwardShape(4, image_size=224), True, None, None
    )
    # Max defaults to the workload's batch; only the batch axis of images is dynamic.
    assert images["pixel_values"] == ((1, 3, 224, 224), (4, 3, 224, 224), (4, 3, 224, 224))
