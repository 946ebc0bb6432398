"""Measurement groups: one config run N times with a cooldown between, stored as one group.

`launch_group` runs the repeats through `bench.run.api.launch` one after another (never side by
side: they would share the GPU), marks each run with the group (RunResult.group, the store's
runs.group_id) and summarises the group with intervals (bench/core/stats.py). With a convergence
metric it stops once that metric's interval is narrow enough, after `min_repeats`; the outcome
says why it stopped. A repeat that does not complete is kept in the group's runs but left out of
the summary (its figures are not a measurement of the config).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from bench.core.config import RepeatPolicy, RunConfig
from bench.core.errors import UserError
from bench.core.progress import RunProgress
from bench.core.schema import GroupMembership, RequestRecord, RunResult, RunStatus
from bench.core.stats import (
    METRICS_BY_NAME,
    GroupSummary,
    relative_width,
    run_sample,
    summarize_group,
)
from bench.core.strict import Strict

if TYPE_CHECKING:  # bench.storage.store pulls in SQLAlchemy; only its types are needed here
    from bench.storage.store import RunWriter


class GroupOutcome(Strict):
    """What a measurement group produced."""

    group_id: str
    runs: list[RunResult]
    summary: GroupSummary | None = Field(
        None, description="Over the completed repeats; None when none completed."
    )
    stopped: str = Field(description="Why it stopped: all repeats, converged, or a failure.")


def new_group_id() -> str:
    return datetime.now(UTC).strftime("grp-%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]


def check_policy(policy: RepeatPolicy) -> None:
    """A convergence metric must be one the group summary has (UserError otherwise)."""
    metric = policy.convergence_metric
    if metric is not None and metric not in METRICS_BY_NAME:
        known = ", ".join(METRICS_BY_NAME)
        raise UserError(f"unknown convergence metric {metric!r}; known: {known}")


def group_records(
    run: RunResult, store: RunWriter | None, out_dir: Path | None
) -> list[RequestRecord] | None:
    """A finished repeat's measured records, from the store or its folder (None if neither)."""
    if store is not None:
        return list(store.iter_records(run.run_id))
    if out_dir is not None and (out_dir / "records.jsonl").is_file():
        from bench.core.metrics import read_records_jsonl

        return [r for r in read_records_jsonl(out_dir / "records.jsonl") if not r.warmup]
    return None


def launch_group(
    config: RunConfig,
    policy: RepeatPolicy,
    store: RunWriter | None = None,
    out_dir: Path | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
    launch: Callable[..., RunResult] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    **launch_options: Any,
) -> GroupOutcome:
    """Run `config` up to `policy.count` times as one group; see the module docstring.

    Repeat i (0-based) writes to `out_dir/repeat-{i + 1}` when `out_dir` is given; without a
    store or a folder, records go to a temporary folder so the group still gets intervals.
    `launch` defaults to `bench.run.api.launch` (injectable for tests of the stopping rule).
    """
    check_policy(policy)
    if launch is None:
        from bench.run.api import launch as launch_run

        launch = launch_run
    group_id = new_group_id()
    runs: list[RunResult] = []
    samples = []
    summary: GroupSummary | None = None
    stopped = f"all {policy.count} repeats"
    scratch = tempfile.TemporaryDirectory(prefix="bench-group-") if not (store or out_dir) else None
    try:
        base = Path(out_dir) if out_dir is not None else (Path(scratch.name) if scratch else None)
        for index in range(policy.count):
            if index and policy.cooldown_s:
                if on_progress is not None:
                    on_progress(
                        RunProgress(
                            stage="cooldown", repeat=index + 1, repeats_planned=policy.count
                        )
                    )
                sleep(policy.cooldown_s)
            folder = base / f"repeat-{index + 1}" if base is not None else None
            membership = GroupMembership(
                group_id=group_id, index=index, planned=policy.count, cooldown_s=policy.cooldown_s
            )

            def progress(p: RunProgress, index: int = index) -> None:
                if on_progress is not None:
                    repeat = {"repeat": index + 1, "repeats_planned": policy.count}
                    on_progress(p.model_copy(update=repeat))

            run = launch(
                config,
                store=store,
                out_dir=folder,
                on_progress=progress,
                group=membership,
                **launch_options,
            )
            runs.append(run)
            if run.status != RunStatus.COMPLETED or run.summary is None:
                continue
            samples.append(run_sample(run, group_records(run, store, folder)))
            summary = summarize_group(samples, group_id=group_id)
            metric = policy.convergence_metric
            if metric is not None and len(samples) >= policy.min_repeats:
                width = relative_width(summary, metric)
                if width is not None and width <= policy.convergence_width:
                    stopped = (
                        f"converged after {len(samples)} repeats: {metric} interval width "
                        f"{width:.1%} of its median <= {policy.convergence_width:.1%}"
                    )
                    break
        else:
            if policy.convergence_metric is not None and summary is not None:
                width = relative_width(summary, policy.convergence_metric)
                shown = "n/a" if width is None else f"{width:.1%}"
                stopped = (
                    f"all {policy.count} repeats without converging: "
                    f"{policy.convergence_metric} interval width {shown} of its median > "
                    f"{policy.convergence_width:.1%}"
                )
        completed = len(samples)
        if completed < len(runs):
            stopped += f"; {len(runs) - completed} repeat(s) did not complete (left out)"
    finally:
        if scratch is not None:
            scratch.cleanup()
    return GroupOutcome(group_id=group_id, runs=runs, summary=summary, stopped=stopped)


__all__ = ["GroupOutcome", "check_policy", "group_records", "launch_group", "new_group_id"]
