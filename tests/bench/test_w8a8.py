"""8-bit Linear layers (bench/engines/w8a8.py) for real on the CPU: torch._int_mm and
torch._scaled_mm run here too, so the arithmetic the GPU quality run uses is checked against the
float32 layer it replaces."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bench.engines.w8a8 import W8A8Linear, quantize_linears  # noqa: E402


@pytest.mark.parametrize(("fmt", "tolerance"), [("int8", 0.02), ("fp8", 0.08)])
@pytest.mark.parametrize("rows", [3, 40])  # fewer rows than _int_mm takes, and more
def test_the_8bit_layer_tracks_the_float_layer(fmt, tolerance, rows) -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48)
    x = torch.randn(2, rows, 64)
    reference = linear(x)
    quantized = W8A8Linear(linear, fmt)(x)
    assert quantized.shape == reference.shape and quantized.dtype == reference.dtype
    error = (quantized - reference).norm() / reference.norm()
    assert 0 < error < tolerance, (fmt, float(error))  # quantized, yet close


def test_a_zero_input_row_stays_zero_plus_bias() -> None:
    linear = torch.nn.Linear(16, 8)
    out = W8A8Linear(linear, "int8")(torch.zeros(1, 16))
    torch.testing.assert_close(out, linear.bias.detach().reshape(1, -1), rtol=0, atol=1e-6)


def test_every_linear_of_a_model_is_replaced() -> None:
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Sequential(torch.nn.Linear(16, 4))
    )
    quantize_linears(model, "fp8")
    kinds = [type(module) for module in model.modules()]
    assert torch.nn.Linear not in kinds and kinds.count(W8A8Linear) == 2
    assert model(torch.randn(5, 8)).shape == (5, 4)


@pytest.mark.parametrize("fmt", ["int8", "fp8"])
def test_a_narrow_head_is_padded_to_the_kernels_widths(fmt) -> None:
    """A 2-class head over 20 inputs (neither a multiple of 16): zero channels and columns are
    added for the kernels and cut from the output."""
    torch.manual_seed(1)
    head = torch.nn.Linear(20, 2)
    layer = W8A8Linear(head, fmt)
    assert tuple(layer.weight_t.shape) == (32, 16)
    x = torch.randn(4, 20)
    out = layer(x)
    assert out.shape == (4, 2)
    error = (out - head(x)).norm() / head(x).norm()
    assert error < 0.1, float(error)
