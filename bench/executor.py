"""Where a job's runs execute: the executor seam behind the job runner and campaigns.

`local` (the default) runs jobs on this host, one at a time, exactly as `bench.jobs.run_job`
always has. `ray` sends each job to a Ray cluster as one task asking for exactly the job's
resources (`bench.ray_executor`): GPUs = tensor-parallel size x replicas, the GPU type as a
resource, CPUs. Select it with `--executor ray [--ray-address ADDR]` or, for the web app's runner,
`ADVISOR_EXECUTOR=ray` and `RAY_ADDRESS`. With no address a local Ray instance is started for the
command and stopped when it ends.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import Field

from bench.config import RunConfig
from bench.errors import UserError
from bench.schema import RunStatus
from bench.strict import Strict

EXECUTOR_NAMES = ("local", "ray")
ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"
"""Ray names a node's detected GPU model `accelerator_type:<name>` (e.g. `accelerator_type:H200`);
a node whose GPUs Ray does not detect advertises the same name as a custom resource
(`ray start --resources '{"accelerator_type:L40S": 1}'`), so one spelling serves both."""
ACCELERATOR_REQUEST = 0.001
"""A job asks for a sliver of the node's type marker (Ray's own convention for
`accelerator_type=`): it selects the node without using up the marker."""


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
        """The `python -m bench.jobs` arguments that select these settings."""
        args = ["--executor", self.name]
        if self.ray_address:
            args += ["--ray-address", self.ray_address]
        return args


def parse_settings(name: str, ray_address: str | None = None) -> ExecutorSettings:
    """Settings from CLI/environment text; an unknown name is a UserError naming the choices."""
    if name not in EXECUTOR_NAMES:
        raise UserError(f"unknown executor {name!r}: choose one of {', '.join(EXECUTOR_NAMES)}")
    if ray_address and name != "ray":
        raise UserError("--ray-address (RAY_ADDRESS) needs --executor ray (ADVISOR_EXECUTOR=ray)")
    return ExecutorSettings(name=name, ray_address=ray_address)


# --------------------------------------------------------------------------- resources


def gpus_needed(config: RunConfig) -> int:
    """GPUs one run occupies: 0 on CPU, else tensor-parallel size x replicas (1 without them)."""
    if config.device == "cpu":
        return 0
    parallelism = getattr(config, "parallelism", None)
    return int(parallelism.gpus_needed) if parallelism is not None else 1


class JobResources(Strict):
    """What one job asks the cluster for: it runs its runs in order on one node."""

    gpus: int = Field(ge=0, description="GPUs (the largest run of the job).")
    gpu_type: str | None = Field(None, description="GPU model every run of the job asks for.")
    cpus: float = Field(gt=0, description="CPUs.")

    def ray_resources(self) -> dict[str, float]:
        """Custom resources for `.options(resources=...)`: the GPU-type marker, if any."""
        if not self.gpu_type:
            return {}
        return {ACCELERATOR_RESOURCE_PREFIX + self.gpu_type: ACCELERATOR_REQUEST}

    def ray_options(self) -> dict[str, Any]:
        """`.options()` of the job's Ray task; never retried (a benchmark must not run twice)."""
        return {
            "num_cpus": self.cpus,
            "num_gpus": self.gpus,
            "resources": self.ray_resources(),
            "max_retries": 0,
            "retry_exceptions": False,
        }

    def describe(self) -> str:
        """`2 × H200, 1 CPU`, `1 × GPU, 1 CPU`, `1 CPU` — what the job waits for."""
        parts = []
        if self.gpus:
            parts.append(f"{self.gpus} × {self.gpu_type or 'GPU'}")
        elif self.gpu_type:
            parts.append(self.gpu_type)
        parts.append(f"{self.cpus:g} CPU")
        return ", ".join(parts)

    def fits(self, node_resources: dict[str, float]) -> bool:
        """Whether a node with these total resources could ever run the job."""
        wanted = {"CPU": self.cpus, "GPU": float(self.gpus), **self.ray_resources()}
        return all(
            node_resources.get(name, 0.0) >= amount for name, amount in wanted.items() if amount
        )


def job_resources(configs: Iterable[RunConfig], cpus: float = 1.0) -> JobResources:
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
    return JobResources(gpus=gpus, gpu_type=types.pop() if types else None, cpus=cpus)


# --------------------------------------------------------------------------- where a job is


def node_text(placement: dict[str, Any]) -> str:
    """`node gpu-7 (10.0.0.7, 5f2c9a1b3d4e) / GPUs GPU-21ff…, GPU-36bb…` for a Ray placement."""
    node_id = str(placement.get("node_id") or "")
    text = f"node {placement.get('hostname')} ({placement.get('node_ip')}, {node_id[:12]})"
    gpus = placement.get("gpu_uuids") or placement.get("gpu_ids") or []
    return text + (f" / GPUs {', '.join(map(str, gpus))}" if gpus else "")


def describe_placement(placement: dict[str, Any] | None) -> str | None:
    """One line for the jobs view: what a queued job waits for, where it runs or ran.
    None for a job of the local executor (it runs here)."""
    if not placement or placement.get("executor") != "ray":
        return None
    state = placement.get("state")
    if state == "queued":
        waiting = f"waiting for a node with {placement.get('waiting_for')}"
        reason = placement.get("reason") or waiting
        return f"Queued on the Ray cluster: {reason}."
    if state == "running":
        return f"Running on {node_text(placement)}."
    if state == "refused":
        return f"Refused by {node_text(placement)}."
    if placement.get("node_id"):
        return f"Ran on {node_text(placement)}."
    return "Never started on the Ray cluster."


# --------------------------------------------------------------------------- the seam


class Executor(Protocol):
    """Runs claimed jobs. `max_jobs` of them may run at once (local: 1)."""

    name: str
    max_jobs: int

    def run_job(self, store: Any, job: Any, log_dir: Path | None = None) -> RunStatus:
        """Run every RunConfig of a claimed job and leave the job finished in the store."""

    def close(self) -> None:
        """Release what the executor holds (a local Ray instance it started)."""


class LocalExecutor:
    """Today's behaviour: the job's runs one after another on this host."""

    name = "local"
    max_jobs = 1

    def run_job(self, store: Any, job: Any, log_dir: Path | None = None) -> RunStatus:
        from bench.jobs import run_job

        return run_job(store, job, log_dir=log_dir)

    def close(self) -> None:
        return None


def open_executor(settings: ExecutorSettings, store_location: str | None = None) -> Executor:
    """The executor the settings name, started (for `ray`: Ray joined or started locally).

    `store_location` is the store the jobs' results go to: a team store's URL is handed to the
    nodes, which then write there themselves.
    """
    if settings.name == "local":
        return LocalExecutor()
    from bench.ray_executor import RayExecutor

    return RayExecutor(settings, store_location)
