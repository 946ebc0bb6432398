"""A job's progress as its row in the store holds it: one entry per run (its latest `RunProgress`
and a short history of `ProgressPoint`s), the run in progress, the time of the last write and,
for the ray executor, where the job waits, runs or ran.

The job runner (bench/orchestrate/job_run.py `JobProgress`) builds it, the ray executor adds the
placement, the store keeps it as JSON text and reads it back with `JobProgressState.from_stored`,
and the Benchmark page reads its fields. `from_stored` also reads rows the code before this model
wrote (free-form dicts: missing keys, a queued run's `latest` as `{}`, keys it no longer knows,
even the first layout without `runs`): what it cannot read is left at its default, never an
error that would hide the job.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, ValidationError, model_validator

from bench.core.fingerprint import ExecutorFacts
from bench.core.progress import ProgressPoint, RunProgress
from bench.core.resources import Resources
from bench.core.schema import RunStatus
from bench.core.strict import Strict

ModelT = TypeVar("ModelT", bound=BaseModel)

PlacementState = Literal["queued", "running", "finished", "refused"]
"""queued: the Ray task waits for a node; running: a node took it; finished: it ended (ran or
never started); refused: the node's library versions differ from the submitter's."""


def read_leniently(model: type[ModelT], data: Any) -> ModelT | None:
    """`data` (a stored mapping) as `model`: keys the model does not know are dropped and fields
    whose stored value no longer validates fall back to their defaults; None if what is left is
    still invalid (a required field missing or unreadable) or `data` is no mapping at all."""
    if not isinstance(data, dict):
        return None
    known = {key: value for key, value in data.items() if key in model.model_fields}
    try:
        return model.model_validate(known)
    except ValidationError as error:
        unreadable = {item["loc"][0] for item in error.errors() if item["loc"]}
    try:
        return model.model_validate(
            {key: value for key, value in known.items() if key not in unreadable}
        )
    except ValidationError:
        return None


class JobPlacement(Strict):
    """Where a job of the ray executor is: what it waits for while queued, the node and GPUs once
    a node took it. A job of the local executor has none (it runs on the runner's host)."""

    executor: str | None = Field(default=None, description='"ray" (the only one that places).')
    state: PlacementState | None = None
    resources: Resources | None = Field(default=None, description="What the job asks a node for.")
    waiting_for: str | None = Field(default=None, description="`Resources.describe()`, queued.")
    reason: str | None = Field(default=None, description="Why it waits (the cluster's answer).")
    node: ExecutorFacts | None = Field(
        default=None, description="The Ray node and GPUs once a node took it; None while queued."
    )

    @model_validator(mode="before")
    @classmethod
    def _older_rows(cls, data: Any) -> Any:
        return _node_of_older_rows(data)

    @classmethod
    def on_node(cls, node: ExecutorFacts, state: PlacementState) -> JobPlacement:
        """A job a node took (`bench.run.environment.node_placement()`), in `state`."""
        return cls(executor=node.name, state=state, node=node)

    def over(self, base: JobPlacement | None) -> JobPlacement:
        """`base` with every field this placement has set replacing its own (the submitter's
        view over what the node wrote into a shared store)."""
        if base is None:
            return self.model_copy(deep=True)
        return base.model_copy(
            update={name: getattr(self, name) for name in self.model_fields_set}, deep=True
        )

    @classmethod
    def from_stored(cls, data: Any) -> JobPlacement | None:
        return read_leniently(cls, _node_of_older_rows(data))


NODE_FIELDS = ("node_id", "node_ip", "hostname", "gpu_ids", "gpu_uuids")
"""The node's fields as rows written before `JobPlacement.node` held them: flat, beside state."""


def _node_of_older_rows(data: Any) -> Any:
    """A stored placement whose node fields are flat (the layout before `node`): those fields
    become `node` (a Ray node: the only executor that places; an unreadable field is left at its
    default), or are dropped when no node took the job (`node_id` empty)."""
    if not isinstance(data, dict) or not any(key in data for key in NODE_FIELDS):
        return data
    data = dict(data)
    flat = {key: data.pop(key) for key in NODE_FIELDS if key in data}
    node = read_leniently(ExecutorFacts, {"name": "ray", **flat}) if flat.get("node_id") else None
    if node is not None and "node" not in data:
        data["node"] = node.model_dump()
    return data


class JobRunProgress(Strict):
    """One run of a job: what it is, its status, and its live progress while it runs."""

    index: int = Field(ge=0, description="0-based position in the job's configs.")
    backend: str
    model: str
    pattern: str
    label: str | None = None
    status: RunStatus = RunStatus.QUEUED
    run_id: str | None = Field(default=None, description="Set once the run exists in the store.")
    error: str | None = Field(default=None, description="Why the run failed or did not start.")
    latest: RunProgress | None = Field(default=None, description="None until its first update.")
    history: list[ProgressPoint] = Field(
        default_factory=list, description="The live charts' points (running stage only)."
    )
    started_at: float | None = Field(
        default=None, description="Unix time the job runner started this run."
    )
    stage_since: float | None = Field(
        default=None,
        description="Unix time `latest.stage` began (the app's timer while the model loads).",
    )

    @classmethod
    def from_stored(cls, data: Any) -> JobRunProgress | None:
        """A stored `runs[]` entry; None if it lacks what names the run (index, backend...)."""
        if not isinstance(data, dict):
            return None
        history = data.get("history") if isinstance(data.get("history"), list) else []
        points = [read_leniently(ProgressPoint, point) for point in history]
        read = read_leniently(cls, {**data, "latest": None, "history": []})
        if read is None:
            return None
        return read.model_copy(
            update={
                "latest": RunProgress.from_stored(data.get("latest")),
                "history": [point for point in points if point is not None],
            }
        )


class JobProgressState(Strict):
    """The job row's `progress`: empty until the job runner (or the ray executor) first writes."""

    runs: list[JobRunProgress] = Field(default_factory=list, description="One per config.")
    current: int | None = Field(default=None, description="Index of the run in progress.")
    updated: float | None = Field(default=None, description="Unix time of the last write.")
    placement: JobPlacement | None = Field(default=None, description="Ray executor only.")

    @classmethod
    def from_stored(cls, data: Any) -> JobProgressState:
        """A row's progress as any version wrote it (see the module docstring); an unreadable
        run entry is left out, an unreadable field left at its default."""
        if not isinstance(data, dict):
            return cls()
        stored_runs = data.get("runs") if isinstance(data.get("runs"), list) else []
        runs = [JobRunProgress.from_stored(run) for run in stored_runs]
        read = read_leniently(cls, {**data, "runs": [], "placement": None}) or cls()
        return read.model_copy(
            update={
                "runs": [run for run in runs if run is not None],
                "placement": JobPlacement.from_stored(data.get("placement")),
            }
        )


__all__ = [
    "JobPlacement",
    "JobProgressState",
    "JobRunProgress",
    "PlacementState",
    "read_leniently",
]
