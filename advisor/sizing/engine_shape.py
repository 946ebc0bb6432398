"""A stage as the shape an engine is tuned for: bench's WorkloadShape, the GPUs one engine spans,
each framework's expert engine settings for it, and the tolerance within which two workload
shapes count as the same (for calibration and evidence matching alike).
"""

from __future__ import annotations

import math
from typing import Any

from advisor.sizing.estimate import estimate_stage
from advisor.workload.architectures import architecture_for, context_limits, upper_tokens
from advisor.workload.profile import StageProfile
from advisor.workload.stage_load import stage_load
from bench.engines.backends.base import Backend, WorkloadShape

SHAPE_TOLERANCE = 0.25
"""Prompt/output means and load level within 25% of the profile's count as the same shape."""


def workload_shape(stage: StageProfile, framework: str | None = None) -> WorkloadShape:
    """The stage as the shape an engine is tuned for (bench's WorkloadShape); `framework` caps
    the sequence limit at what that engine accepts for the model (vLLM refuses a max_model_len
    past the model's window)."""
    # Engine limits cover the longest sequence the generator can send, rounded up to 256, but
    # never past the model's window: 4,000 tokens on a 4,096-position model is max_model_len
    # 4096, not 4352.
    context = upper_tokens(stage.prompt_tokens) + upper_tokens(stage.output_tokens)
    limit = int(math.ceil(context / 256) * 256)
    architecture, _ = architecture_for(stage.model)
    if architecture is not None:
        window, engine_limits, _ = context_limits(architecture)
        cap = engine_limits.get(framework or "", window)
        if cap is not None:
            limit = min(limit, cap)
    return WorkloadShape(
        kind=stage.kind,
        max_sequence_tokens=limit,
        concurrency=stage_load(stage).per_engine,
        fixed_input_shapes=stage.fixed_input_shapes,
        build_time_tolerance=stage.build_time_tolerance,
        quantization=stage.precision.quantization,
    )


def stage_tensor_parallel(stage: StageProfile) -> int:
    """GPUs one engine spans in the stage's own configuration: the fewest that hold the model at
    the profile's precision (the estimate; more GPUs are the configuration search's to weigh as
    TP or replicas), or the GPU count when the GPU memory is unknown."""
    estimate = estimate_stage(stage)
    if estimate.fits is None:
        return stage.gpu.count
    return estimate.tensor_parallel_needed or stage.gpu.count


def expert_engine_args(framework: str, stage: StageProfile) -> dict[str, Any]:
    """Each framework at its own experts' usual settings for this stage's shape: the backend's
    `recommended_args`, checked against its options (an unknown option is an error); {} for a
    framework the bench does not run."""
    backend = registered_backend(framework)
    return {} if backend is None else backend.expert_args(workload_shape(stage, framework))


def registered_backend(framework: str) -> type[Backend] | None:
    """The installed adapter class for `framework`, or None (absent, or failing to import)."""
    try:
        from bench.engines.backends import registry

        return registry().get(framework)
    except Exception:  # an adapter failing to import must not break planning
        return None


def backend_runs_kind(framework: str, kind: str) -> bool | None:
    backend = registered_backend(framework)
    return None if backend is None else kind in backend.kinds


__all__ = [
    "SHAPE_TOLERANCE",
    "backend_runs_kind",
    "expert_engine_args",
    "registered_backend",
    "stage_tensor_parallel",
    "workload_shape",
]
