"""A run's live progress: one model from the run loop to the worker's event, the launch callback,
the CLI bar, the job row in the store and the app's live readout.

The run loop (bench/run/runner.py) fills the phase and request counts; the worker adds nothing,
`bench.run.api.launch` adds the run id, the worker's pid and the latest telemetry; a repeat group
adds the repeat. The job runner (bench/orchestrate/job_run.py) keeps it in the job row's
`JobProgressState` (bench/core/job_progress.py), which reads it back with
`RunProgress.from_stored`: that also reads rows written before this model existed (free-form
dicts with the same keys, a repeat's total as "of").
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, ValidationError

from bench.core.schema import RunStatus, TelemetrySample
from bench.core.strict import Strict

Stage = Literal["loading", "loaded", "running", "done", "cooldown"]
"""loading/loaded: the engine; running: the run loop's snapshots; done: the run is stored with
its final status; cooldown: between repeats."""


class RunProgress(Strict):
    """One progress update of a run. Run-loop fields are None before the run loop starts."""

    stage: Stage
    run_id: str | None = Field(default=None, description="Set by launch once the run exists.")
    worker_pid: int | None = None
    status: RunStatus | None = Field(default=None, description="The run's final status (done).")
    telemetry: TelemetrySample | None = Field(
        default=None, description="The latest sampler readings (older ticks fill its gaps)."
    )
    load_s: float | None = Field(default=None, description="Engine load time (stage loaded).")
    compile_s: float | None = None
    build_s: float | None = None
    phase: str | None = Field(default=None, description='The current phase ("warmup" first).')
    phase_index: int | None = Field(default=None, description="0-based; None during warm-up.")
    phases_total: int | None = Field(default=None, description="None if the pattern cannot say.")
    completed: int | None = Field(default=None, description="Current phase.")
    failed: int | None = Field(default=None, description="Current phase.")
    output_tokens: int | None = Field(default=None, description="Current phase.")
    in_flight: int | None = Field(default=None, description="Current phase.")
    elapsed_s: float | None = Field(default=None, description="Since the run loop started.")
    phase_elapsed_s: float | None = None
    phase_duration_s: float | None = Field(default=None, description="None if open-ended.")
    run_completed: int | None = Field(default=None, description="Finished measured phases.")
    run_failed: int | None = Field(default=None, description="Finished measured phases.")
    repeat: int | None = Field(default=None, description="1-based repeat of a measurement group.")
    repeats_planned: int | None = None

    @property
    def counts_requests(self) -> bool:
        """Whether the run loop has started counting (the bar shows `N ok, M failed`)."""
        return self.completed is not None

    @classmethod
    def from_stored(cls, data: Any) -> RunProgress | None:
        """A job row's `latest`, as any version of the job runner wrote it; None if it holds no
        progress yet (a queued run's `{}`) or nothing this model can read.

        Rows written before this model: the same keys as free-form JSON, a repeat's total as
        "of", telemetry `{}` before the first sample; keys this model does not know are dropped
        rather than failing the page.
        """
        if not isinstance(data, dict) or data.get("stage") not in STAGES:
            return None
        known = {key: value for key, value in data.items() if key in cls.model_fields}
        if "of" in data and "repeats_planned" not in data:
            known["repeats_planned"] = data["of"]
        if "telemetry" in known:
            try:
                known["telemetry"] = TelemetrySample.model_validate(known["telemetry"])
            except ValidationError:  # `{}` before the first sample
                known["telemetry"] = None
        try:
            return cls.model_validate(known)
        except ValidationError:
            return cls(stage=data["stage"])


STAGES: frozenset[str] = frozenset(get_args(Stage))


class ProgressPoint(Strict):
    """One point of a running run's history in the job row (the app's live charts)."""

    elapsed_s: float | None = None
    phase_elapsed_s: float | None = Field(
        default=None, description="Since its phase began (where a phase's rate starts)."
    )
    completed: int | None = None
    failed: int | None = None
    output_tokens: int | None = None
    in_flight: int | None = None
    phase: str | None = None
    gpu_memory_used_bytes: int | None = None
    power_w: float | None = None
    host_rss_bytes: int | None = None

    @classmethod
    def of(cls, progress: RunProgress) -> ProgressPoint:
        telemetry = progress.telemetry
        return cls(
            elapsed_s=progress.elapsed_s,
            phase_elapsed_s=progress.phase_elapsed_s,
            completed=progress.completed,
            failed=progress.failed,
            output_tokens=progress.output_tokens,
            in_flight=progress.in_flight,
            phase=progress.phase,
            gpu_memory_used_bytes=telemetry.gpu_memory_used_bytes if telemetry else None,
            power_w=telemetry.power_w if telemetry else None,
            host_rss_bytes=telemetry.host_rss_bytes if telemetry else None,
        )


__all__ = ["STAGES", "ProgressPoint", "RunProgress", "Stage"]
