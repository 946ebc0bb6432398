"""Backend registry: importing this package registers every adapter (none imports its framework).

`get_backend(name)` raises a UserError listing the available names for an unknown one.
"""

from __future__ import annotations

import importlib
from typing import Any

from bench.core.config import RunConfig
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


def options_with_caching(config: RunConfig) -> dict[str, Any]:
    """A run's engine options with its prefix caching under the framework's own name (vLLM's
    `enable_prefix_caching`, TensorRT-LLM's `enable_block_reuse`, through `framework_args`):
    the options a deployment of the run is typed with, its parallelism and precision said apart.
    The options as stored where the run left caching to the engine, its backend is not
    registered here, or the backend cannot take the setting."""
    backend = registry().get(config.backend)
    if config.prefix_caching is None or backend is None:
        return dict(config.engine_args)
    try:
        return backend.framework_args(config.engine_args, prefix_caching=config.prefix_caching)
    except UserError:
        return dict(config.engine_args)


def all_availability() -> list[Availability]:
    return [registry()[name].availability() for name in backend_names()]
