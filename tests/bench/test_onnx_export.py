"""ONNX export of the forward presets: fixed and dynamic axes, caching, and the eager check."""

from __future__ import annotations

import numpy as np
import pytest

from bench.engines import onnx_export
from bench.engines.models import load_config
from bench.engines.onnx_export import ExportCheckFailed, ForwardShape


def test_relative_error_definition() -> None:
    expected = np.array([3.0, 4.0])
    assert onnx_export.relative_error(expected, expected) == 0.0
    # ‖(3,4.5) - (3,4)‖ / ‖(3,4)‖ = 0.5 / 5
    assert onnx_export.relative_error(np.array([3.0, 4.5]), expected) == pytest.approx(0.1)
    assert onnx_export.relative_error(np.zeros(3), expected) == float("inf")


def test_check_outputs_raises_with_a_clear_message() -> None:
    expected = np.ones((2, 3), dtype=np.float32)
    passed = onnx_export.check_outputs(expected * (1 + 1e-6), expected, 1e-4, "graph")
    assert passed.passed and passed.relative_error < 1e-5
    with pytest.raises(ExportCheckFailed, match=r"relative error .* > tolerance"):
        onnx_export.check_outputs(expected * 1.1, expected, 1e-4, "graph")
    with pytest.raises(ExportCheckFailed, match="shape"):
        onnx_export.check_outputs(np.ones((2, 4)), expected, 1e-4, "graph")


def test_default_tolerances_follow_precision() -> None:
    assert onnx_export.default_tolerance("float32", False) == onnx_export.TOLERANCE_FLOAT32
    assert onnx_export.default_tolerance("float32", True) == onnx_export.TOLERANCE_TF32
    assert onnx_export.default_tolerance("float16", False) == onnx_export.TOLERANCE_FLOAT16


def test_inputs_and_shapes_follow_the_model(tiny_bert, tiny_vit) -> None:
    bert = load_config(tiny_bert.path)
    vit = load_config(tiny_vit.path)
    assert onnx_export.input_names_for(bert) == ("input_ids", "attention_mask")
    assert onnx_export.input_names_for(vit) == ("pixel_values",)
    assert onnx_export.resolve_shape(vit, 2, None, None) == ForwardShape(2, image_size=32)
    assert onnx_export.resolve_shape(bert, 2, None, None).sequence_length == 128
    inputs = onnx_export.make_inputs(bert, ForwardShape(3, sequence_length=7), seed=1)
    assert inputs["input_ids"].shape == (3, 7) and inputs["input_ids"].max() < bert.vocab_size
    again = onnx_export.make_inputs(bert, ForwardShape(3, sequence_length=7), seed=1)
    assert np.array_equal(inputs["input_ids"], again["input_ids"])
    with pytest.raises(Exception, match="max_position_embeddings"):
        onnx_export.resolve_shape(bert, 1, 4096, None)


def _ort_output(path, inputs):
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["tiny_bert", "tiny_resnet", "tiny_vit"])
def test_fixed_and_dynamic_exports_agree_with_eager(preset, request, tmp_path) -> None:
    info = request.getfixturevalue(preset)
    config = load_config(info.path)
    shape = onnx_export.resolve_shape(config, 2, 16, None)

    fixed = onnx_export.export_onnx(info.path, shape, dynamic=False, cache_dir=tmp_path)
    inputs = onnx_export.make_inputs(config, shape, seed=3)
    check = onnx_export.check_outputs(
        _ort_output(fixed.path, inputs), onnx_export.eager_reference(info.path, inputs), 1e-4, "x"
    )
    assert check.relative_error < 1e-4

    dynamic = onnx_export.export_onnx(info.path, shape, dynamic=True, cache_dir=tmp_path)
    assert dynamic.path != fixed.path
    other = onnx_export.resolve_shape(config, 5, 9, None)  # a shape the export never saw
    other_inputs = onnx_export.make_inputs(config, other, seed=4)
    actual = _ort_output(dynamic.path, other_inputs)
    assert actual.shape[0] == 5
    expected = onnx_export.eager_reference(info.path, other_inputs)
    assert onnx_export.relative_error(actual, expected) < 1e-4

    # The fixed export rejects other shapes: the axes really are fixed.
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime raises its own error types
        _ort_output(fixed.path, other_inputs)

    again = onnx_export.export_onnx(info.path, shape, dynamic=False, cache_dir=tmp_path)
    assert again.cached and again.path == fixed.path and again.export_s == 0.0


@pytest.mark.slow
def test_a_wrong_export_is_caught_by_the_check(tiny_resnet, tmp_path, monkeypatch) -> None:
    """Sabotage the export (the wrapper returns a scaled output): the check must fail."""
    config = load_config(tiny_resnet.path)
    shape = onnx_export.resolve_shape(config, 2, None, None)
    original = onnx_export.PrimaryOutput.wrap

    def broken_wrap(model, names):
        import torch

        wrapped = original(model, names)

        class Broken(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = wrapped

            def forward(self, *tensors):
                return self.inner(*tensors) * 1.5 + 0.1

        return Broken().eval()

    with monkeypatch.context() as patch:
        patch.setattr(onnx_export.PrimaryOutput, "wrap", staticmethod(broken_wrap))
        export = onnx_export.export_onnx(tiny_resnet.path, shape, dynamic=False, cache_dir=tmp_path)
    inputs = onnx_export.make_inputs(config, shape)
    expected = onnx_export.eager_reference(tiny_resnet.path, inputs)  # unpatched: the truth
    with pytest.raises(ExportCheckFailed, match="disagrees with eager PyTorch"):
        onnx_export.check_outputs(_ort_output(export.path, inputs), expected, 1e-4, "export")
