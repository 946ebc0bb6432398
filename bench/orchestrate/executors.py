"""Where jobs and campaign steps run: one executor seam behind the job runner and campaigns.

`local` (the default) runs on this host: a job's runs one after another
(`bench.orchestrate.job_run.run_job`), a campaign's steps in plan order
(`bench.orchestrate.campaign.run_step`); every run still gets its own worker process
(bench/run/worker.py). `ray` (`bench.orchestrate.ray_executor`) sends each job or step to a Ray
cluster as one task asking for exactly its `Resources` (GPUs = tensor parallel size x replicas, the
GPU type, CPUs) and runs several at once. Select it with `--executor ray [--ray-address ADDR]` or,
for the web app's runner, `ADVISOR_EXECUTOR=ray` and `RAY_ADDRESS`; with no address a local Ray
instance is started for the command and stopped when it ends. Other executors (test doubles)
register under a name with `register_executor`.

This module holds what every layer may import: the settings, the `Resources` a job asks for
(the model is in bench/core/resources.py: the job row records it), the executor's own job types
(`StepJob` in, `StepJobResult` out: a campaign step as an executor sees it, so an executor needs
none of the campaign's step models) and the `Executor` protocol. The executors themselves and
their registry (which import the campaign, the job body and Ray) are in
bench/orchestrate/executor_registry.py, above them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import Field, model_validator

from bench.core.config import RunConfig
from bench.core.errors import UserError
from bench.core.job_progress import JobPlacement
from bench.core.progress import RunProgress
from bench.core.resources import Resources
from bench.core.schema import RunStatus
from bench.core.strict import Strict

if TYPE_CHECKING:
    from bench.storage.store import Job, Store

SETTINGS_NAMES = ("local", "ray")
"""The executors a job runner or campaign can be set to (test doubles are got by name only)."""


class ExecutorSettings(Strict):
    """Which executor runs jobs, and for `ray`, which cluster and how many CPUs a job takes."""

    name: Literal["local", "ray"] = Field(
        "local", description="local = this host, one job at a time; ray = a Ray cluster."
    )
    ray_address: str | None = Field(
        None,
        description="Ray cluster to join (ray://host:10001 or host:6379); none = start a local "
        "Ray instance for this command and stop it at the end.",
    )
    cpus_per_job: float = Field(1.0, gt=0, description="CPUs a job asks Ray for.")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> ExecutorSettings:
        """The app's runner settings: `ADVISOR_EXECUTOR` (local|ray) and `RAY_ADDRESS`."""
        env = os.environ if environ is None else environ
        name = (env.get("ADVISOR_EXECUTOR") or "local").strip().lower()
        # RAY_ADDRESS may be set for other Ray tools; it matters only with the ray executor.
        return parse_settings(name, (env.get("RAY_ADDRESS") or None) if name == "ray" else None)

    def runner_args(self) -> list[str]:
        """The `python -m bench.orchestrate.jobs` arguments that select these settings."""
        args = ["--executor", self.name]
        if self.ray_address:
            args += ["--ray-address", self.ray_address]
        return args


# --------------------------------------------------------------------------- resources


def parse_settings(name: str, ray_address: str | None = None) -> ExecutorSettings:
    """Settings from CLI/environment text; an unknown name is a UserError naming the choices."""
    if name not in SETTINGS_NAMES:
        raise UserError(f"unknown executor {name!r}; known: {', '.join(SETTINGS_NAMES)}")
    if ray_address and name != "ray":
        raise UserError("--ray-address (RAY_ADDRESS) needs --executor ray (ADVISOR_EXECUTOR=ray)")
    return ExecutorSettings(name=name, ray_address=ray_address)


def gpus_needed(config: RunConfig) -> int:
    """GPUs one run occupies: 0 on CPU, else tensor-parallel size x replicas."""
    return 0 if config.device == "cpu" else config.parallelism.gpus_needed


def job_resources(configs: Iterable[RunConfig], cpus: float = 1.0) -> Resources:
    """A job's request: the most GPUs any of its runs needs, and their common GPU type.

    Runs of one job are compared with each other, so they share a node and a GPU type; a job
    whose runs name different GPU types is a UserError.
    """
    configs = list(configs)
    types = {config.gpu_type for config in configs if config.gpu_type}
    if len(types) > 1:
        names = ", ".join(sorted(types))
        raise UserError(f"one job runs on one node: its runs ask for different GPU types ({names})")
    gpus = max((gpus_needed(config) for config in configs), default=0)
    return Resources(gpus=gpus, gpu_type=types.pop() if types else None, cpus=cpus)


# --------------------------------------------------------------------------- where a job is


def describe_placement(placement: JobPlacement | None) -> str | None:
    """One line for the jobs view: what a queued job waits for, where it runs or ran.
    None for a job of the local executor (it runs here)."""
    if placement is None or placement.executor != "ray":
        return None
    node = placement.node
    if placement.state == "queued":
        waiting = f"waiting for a node with {placement.waiting_for}"
        reason = placement.reason or waiting
        return f"Queued on the Ray cluster: {reason}."
    where = node.describe() if node is not None else "a node of the Ray cluster"
    if placement.state == "running":
        return f"Running on {where}."
    if placement.state == "refused":
        return f"Refused by {where}."
    if node is not None:
        return f"Ran on {where}."
    return "Never started on the Ray cluster."


# --------------------------------------------------------------------------- a step as a job


class StepContext(Strict):
    """Where a step writes: its own folder and the results store (a location string, so a
    remote executor can pass it on)."""

    out_dir: Path
    store: str | None = None
    plan_dir: Path = Field(description="Folder of the plan file; relative profile paths.")


class StepJob(Strict):
    """One campaign step as an executor runs it: what to call it, what it asks for, where it
    writes, and its definition. The executor never reads the definition: it hands it to the
    step body (`bench.orchestrate.campaign.run_step_job`, here or on a Ray node), which reads it
    back as the campaign's step."""

    name: str = Field(min_length=1, description="The step's name (a Ray task is named after it).")
    resources: Resources = Field(description="GPUs, GPU type and CPUs the step asks for.")
    context: StepContext
    definition: str = Field(
        min_length=2, description="The step as JSON, as the plan defined it (a CampaignStep)."
    )


class StepJobResult(Strict):
    """What an executor hands back for a step: the step body's outcome (a StepOutcome as JSON,
    read back by the campaign), or, when the executor got none, why (a lost node, a node that
    refused the step) with when it started and how long it took."""

    executor: str
    started_at: str
    wall_s: float = Field(ge=0)
    outcome_json: str | None = None
    error: str | None = None

    @model_validator(mode="after")
    def _outcome_or_error(self) -> StepJobResult:
        if (self.outcome_json is None) == (self.error is None):
            raise ValueError("a step job's result is either its outcome or an error, not both")
        return self


# --------------------------------------------------------------------------- the seam


class Executor(Protocol):
    """Runs claimed jobs (`max_jobs` at once) and campaign steps; never raises for a failing
    run or step (it ends FAILED / `failed` with the cause)."""

    name: str
    max_jobs: int

    def run(
        self, job: StepJob, on_progress: Callable[[RunProgress], None] | None = None
    ) -> StepJobResult:
        """Run one campaign step and return its result."""

    def run_job(self, store: Store, job: Job, log_dir: Path | None = None) -> RunStatus:
        """Run every RunConfig of a claimed job and leave the job finished in the store."""

    def close(self) -> None:
        """Release what the executor holds (a local Ray instance it started)."""
