"""torch's dynamic INT8 of a model's Linear layers on the CPU: what `bench quality` scores as the
CPU's int8 and what the `pytorch` backend runs for a CPU forward run at `precision.quantization:
int8` (bench/engines/w8a8.py is the GPU's). Imports torch inside the function, so importing this
module stays cheap."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def int8_dynamic(model: torch.nn.Module) -> torch.nn.Module:
    """torch's dynamic INT8 quantization of the Linear layers except the LM head (a model
    without one, such as a classifier, has every Linear quantized)."""
    import warnings

    import torch
    from torch.ao.quantization import quantize_dynamic

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    names = {
        name
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.Linear) and module is not head
    }
    with warnings.catch_warnings():  # torch deprecates quantized tensors in favour of torchao
        warnings.simplefilter("ignore")
        return quantize_dynamic(model, names, dtype=torch.qint8)


__all__ = ["int8_dynamic"]
