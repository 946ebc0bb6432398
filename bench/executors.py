"""Campaign executors: "run this step, give back its outcome", behind one small interface.

(The job runner's executors, which run stored jobs, are bench/executor.py.)

`local` (the default) runs each step in this process, one after another; every run still gets
its own worker process (bench/worker.py). Another executor (e.g. one placing each step on a
cluster node with exactly `bench.campaign.step_resources(step)`) implements the same `run` and
registers itself under its name with `register_executor`; the campaign loop does not change.
A step is independent of the others: all it gets is its definition and a `StepContext`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from bench.errors import UserError

if TYPE_CHECKING:
    from bench.campaign import CampaignStep, StepContext, StepOutcome


class Executor(Protocol):
    """Runs one campaign step and returns its outcome (never raises for a failing step)."""

    name: str

    def run(
        self,
        step: CampaignStep,
        context: StepContext,
        on_progress: Callable[[dict], None] | None = None,
    ) -> StepOutcome: ...


class LocalExecutor:
    """Each step in this process, in plan order."""

    name = "local"

    def run(
        self,
        step: CampaignStep,
        context: StepContext,
        on_progress: Callable[[dict], None] | None = None,
    ) -> StepOutcome:
        from bench.campaign import run_step

        return run_step(step, context, executor_name=self.name, on_progress=on_progress)


_EXECUTORS: dict[str, Callable[[], Executor]] = {"local": LocalExecutor}


def register_executor(name: str, factory: Callable[[], Executor]) -> None:
    """Make an executor available to `python -m bench campaign --executor NAME`."""
    _EXECUTORS[name] = factory


def executor_names() -> list[str]:
    return sorted(_EXECUTORS)


def get_executor(name: str) -> Executor:
    """The executor registered as `name`; an unknown name lists the known ones."""
    factory = _EXECUTORS.get(name)
    if factory is None:
        raise UserError(f"unknown executor {name!r}; known: {', '.join(executor_names())}")
    return factory()
