"""Backend registry: importing this package registers every adapter (none imports its framework).

`get_backend(name)` raises a UserError listing the available names for an unknown one.
"""

from __future__ import annotations

import importlib

from bench.core.errors import UserError
from bench.engines.backends.base import Availability, Backend, registry

# Each module registers itself with @register_backend; a module not written yet is skipped so the
# registry lists what exists.
_MODULES = (
    "fake",
    "pytorch",
    "torch_compile",
    "vllm",
    "openai",
    "onnxruntime",
    "tensorrt_llm",
    "tensorrt",
)

for _module in _MODULES:
    try:
        importlib.import_module(f"bench.engines.backends.{_module}")
    except ModuleNotFoundError as exc:  # only our own missing module, never a framework
        if exc.name != f"bench.engines.backends.{_module}":
            raise


def backend_names() -> list[str]:
    return sorted(registry())


def get_backend(name: str) -> type[Backend]:
    """The backend class registered as `name`; UserError lists the known names otherwise."""
    try:
        return registry()[name]
    except KeyError:
        raise UserError(
            f"unknown backend {name!r}; available: {', '.join(backend_names())}"
        ) from None


def all_availability() -> list[Availability]:
    return [registry()[name].availability() for name in backend_names()]
