"""Build and load a run's backend in the process that sends its requests (an engine's worker,
or a helper client process of bench/run/client_processes.py), reporting `Loaded`."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from bench.core.config import RunConfig
from bench.core.progress import RunProgress
from bench.core.schema import ModelInfo
from bench.run.worker_events import Loaded, Progress


async def load_backend(config: RunConfig, model: ModelInfo, events: Any) -> Any:
    """Build and load the run's backend in this worker; sends the `Loaded` event."""
    from bench.engines.backends import get_backend

    backend_cls = get_backend(config.backend)
    # Refuses what this framework cannot run; parallelism and precision reach load() typed,
    # prefix caching the backend's constructor.
    engine_args = backend_cls.engine_args_for(
        dict(config.engine_args), config.parallelism, config.precision, config.prefix_caching
    )
    options = backend_cls.options_model
    if config.trust_remote_code and (
        options is None or "trust_remote_code" in options.model_fields
    ):
        engine_args.setdefault("trust_remote_code", True)  # the run-level opt-in reaches the engine
    backend = backend_cls(engine_args, config.prefix_caching)
    events.put(Progress(progress=RunProgress(stage="loading")))
    info = await backend.load(
        model, config.workload, config.precision, config.device, parallelism=config.parallelism
    )
    loop_module = type(asyncio.get_running_loop()).__module__
    info.engine.event_loop = "uvloop" if loop_module.startswith("uvloop") else "asyncio"
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        info.engine.cuda_visible_devices = os.environ["CUDA_VISIBLE_DEVICES"]
    events.put(
        Loaded(
            load_s=info.load_s, compile_s=info.compile_s, build_s=info.build_s, engine=info.engine
        )
    )
    return backend
