"""The executors by name: `local` (this host) and `ray`, and test doubles registered beside them.

`open_executor(settings)` is what the job runner and `python -m bench campaign` call. It sits
above the campaign, the job body and the Ray executor that it builds on, so none of those has
to import it (bench/orchestrate/executors.py has the settings and the protocol they share).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bench.core.errors import UserError
from bench.core.progress import RunProgress
from bench.core.schema import RunStatus
from bench.orchestrate.campaign import run_step_job
from bench.orchestrate.executors import Executor, ExecutorSettings, StepJob, StepJobResult
from bench.orchestrate.job_run import run_job

if TYPE_CHECKING:
    from bench.storage.store import Job, Store


class LocalExecutor:
    """This host: a job's runs, or a campaign's steps, one after another."""

    name = "local"
    max_jobs = 1

    def run(
        self, job: StepJob, on_progress: Callable[[RunProgress], None] | None = None
    ) -> StepJobResult:
        return run_step_job(job, executor_name=self.name, on_progress=on_progress)

    def run_job(self, store: Store, job: Job, log_dir: Path | None = None) -> RunStatus:
        return run_job(store, job, log_dir=log_dir)

    def close(self) -> None:
        return None


_EXECUTORS: dict[str, Callable[[], Executor]] = {"local": LocalExecutor}
RAY = "ray"
"""Built in beside `local`; made by `open_executor`, which hands it the cluster's address."""


def register_executor(name: str, factory: Callable[[], Executor]) -> None:
    """Make an executor available to `--executor NAME`."""
    _EXECUTORS[name] = factory


def executor_names() -> list[str]:
    return sorted([*_EXECUTORS, RAY])


def get_executor(name: str) -> Executor:
    """The executor registered as `name` (Ray included, joined as `ExecutorSettings.from_env`
    says); an unknown name lists the known ones."""
    if name == RAY:
        return open_executor(ExecutorSettings(name=RAY, ray_address=os.environ.get("RAY_ADDRESS")))
    factory = _EXECUTORS.get(name)
    if factory is None:
        raise UserError(f"unknown executor {name!r}; known: {', '.join(executor_names())}")
    return factory()


def open_executor(settings: ExecutorSettings, store_location: str | None = None) -> Executor:
    """The executor the settings name, started (for `ray`: Ray joined or started locally).

    `store_location` is the store the results go to: a team store's URL is handed to the nodes,
    which then write there themselves.
    """
    if settings.name != RAY:
        return get_executor(settings.name)
    from bench.orchestrate.ray_executor import RayExecutor  # imports Ray only when it starts

    return RayExecutor(settings, store_location)


__all__ = [
    "RAY",
    "LocalExecutor",
    "executor_names",
    "get_executor",
    "open_executor",
    "register_executor",
]
