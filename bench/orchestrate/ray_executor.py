"""The `ray` executor: each job is one Ray task on a node that has exactly the job's resources.

The submitter (the job runner, a campaign) joins the cluster at `--ray-address`, or starts a
local Ray instance for the command and stops it at the end. Per job it submits
`bench.orchestrate.ray_node.run_job_on_node` with the job's GPUs, GPU type and CPUs, never retried,
and supervises it: while queued the job's progress says what it waits for (and whether any node in
the cluster could ever run it); once started, where it runs. A stop cancels a queued task at once
and asks a running one to stop (the bench's own stop: grace, then the engine's process group is
killed); a task that ignores that is force-cancelled after a grace period, and the engine
process, whose parent is gone, kills its own group. A lost node or crashed task ends the job
FAILED with the reason; the records written so far stay in the store.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.core.errors import UserError
from bench.core.fingerprint import ExecutorFacts
from bench.core.job_progress import JobPlacement, JobProgressState
from bench.core.progress import RunProgress
from bench.core.resources import NORMAL_PRIORITY_RUNTIME_ENV
from bench.core.schema import Failure, RunStatus
from bench.orchestrate.executors import (
    ExecutorSettings,
    Resources,
    StepJob,
    StepJobResult,
    job_resources,
)
from bench.orchestrate.ray_node import FORWARDED_JOB_WRITES, FORWARDED_WRITES

if TYPE_CHECKING:  # bench.storage.store pulls in SQLAlchemy; only its types are needed here
    from bench.storage.store import Job, RunWriter, Store

log = logging.getLogger("bench.orchestrate.ray_executor")

POLL_S = 0.5
FEASIBILITY_CHECK_S = 5.0
"""How often a queued job re-reads the cluster's nodes to say whether any could run it."""
STOP_GRACE_S = 60.0
"""A running job asked to stop gets this long (the bench's own grace and kill take ~30 s at
most) before its Ray task is force-cancelled."""
CHANNEL_TIMEOUT_S = 30.0
FINAL_READ_TIMEOUT_S = 300.0
"""How long the last read of a channel, once the node's task has ended, may wait for the actor:
on a machine this busy the writes are late, not gone (a dead actor answers at once, with an
error)."""
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
"""Object store of a Ray instance started for one command: jobs pass configs and records only."""


def is_shared_store(location: str | None) -> bool:
    """Whether nodes can write to the store themselves (a PostgreSQL URL) rather than through
    the submitter (a SQLite file on the submitter's disk)."""
    from bench.storage.store_url import parse_store_url

    return bool(location) and parse_store_url(location).backend == "postgresql"


RAY_PROBE_TIMEOUT_S = 5.0


def _check_reachable(address: str) -> None:
    """One clear line for a cluster that does not answer: `ray.init` would retry for minutes.
    `auto` (the cluster started on this host) is left to Ray."""
    if address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=RAY_PROBE_TIMEOUT_S).close()
    except (OSError, ValueError) as error:
        raise UserError(
            f"cannot reach the Ray cluster at {address!r} ({_first_line(error)}): is "
            "`ray start --head` running there, and is the address host:port?"
        ) from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:500]


def _what_ended_it(ray: Any, error: BaseException, where: str) -> str:
    """Why a task ended without its outcome: its own code raised (the node is fine), or the
    node or worker under it went (crash, lost node, out of memory)."""
    if isinstance(error, ray.exceptions.RayTaskError):
        cause = error.cause if isinstance(error.cause, BaseException) else error
        return f"the task raised on {where} ({_first_line(cause)})"
    return f"lost {where} ({_first_line(error)})"


Event = tuple[str, tuple, dict]
"""One store write (or placement/progress notice) a node sent: name, args, kwargs."""


class ChannelReader:
    """The submitter's side of one `JobChannel`: the node's events in the order it sent them,
    none dropped.

    The actor empties its list when it runs a `drain` call, so a drain whose answer is never
    read loses those events. A busy machine showed it: a drain that took longer than its
    timeout was abandoned, and a stopped job's last writes (its status, its run ids) went with
    it. Here a drain that has not answered yet is kept and read on the next call; a new one is
    sent only after it answered."""

    def __init__(self, ray: Any, channel: Any) -> None:
        self.ray = ray
        self.channel = channel
        self._pending: Any = None

    def read(self, timeout_s: float = CHANNEL_TIMEOUT_S) -> list[Event]:
        """What arrived since the last read; [] when the drain has not answered in `timeout_s`
        (it is read next time) or the channel is gone (nothing more will come)."""
        if self.channel is None:
            return []
        if self._pending is None:
            self._pending = self.channel.drain.remote()
        try:
            events = self.ray.get(self._pending, timeout=timeout_s)
        except self.ray.exceptions.GetTimeoutError:
            return []
        except self.ray.exceptions.RayError as error:
            log.warning("the job channel is gone (%s): nothing more is read", _first_line(error))
            self.channel = self._pending = None
            return []
        self._pending = None
        return events

    def read_to_the_end(self, timeout_s: float = FINAL_READ_TIMEOUT_S) -> list[Event]:
        """Everything left once the node's task has ended: the drain still unanswered, if any,
        then one sent now (after the node's last call, its barrier on the channel)."""
        deadline = time.monotonic() + timeout_s
        events: list[Event] = []
        for _ in range(2 if self._pending is not None else 1):
            events += self.read(max(0.0, deadline - time.monotonic()))
            if self._pending is not None:
                log.warning(
                    "the job channel did not answer in %.0f s: the node's last writes are "
                    "missing from the store",
                    timeout_s,
                )
                break
        return events


class RayExecutor:
    """Runs jobs as Ray tasks; several at once (each in its own supervising thread)."""

    name = "ray"
    max_jobs = 64

    def __init__(self, settings: ExecutorSettings, store_location: str | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise UserError(
                "the ray executor needs Ray: pip install -r requirements.txt (it pins ray)"
            ) from None
        from bench.orchestrate.ray_node import (
            JobChannel,
            comparability_versions,
            run_job_on_node,
            run_step_on_node,
        )

        self.ray = ray
        self.settings = settings
        self.store_location = store_location
        self.started_local = settings.ray_address is None
        if not self.started_local:
            _check_reachable(settings.ray_address)
        try:
            if self.started_local:
                ray.init(
                    include_dashboard=False,
                    object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    configure_logging=False,
                )
            else:
                ray.init(
                    address=settings.ray_address, log_to_driver=False, logging_level=logging.WARNING
                )
        except (ConnectionError, RuntimeError, ValueError) as error:
            where = settings.ray_address or "a local Ray instance"
            raise UserError(f"cannot start or join Ray at {where}: {_first_line(error)}") from None
        self.versions = comparability_versions()
        self.remote_job = ray.remote(run_job_on_node)
        self.remote_step = ray.remote(run_step_on_node)
        self.channel_actor = ray.remote(JobChannel)

    def close(self) -> None:
        """Disconnect; a Ray instance this executor started stops with it."""
        with contextlib.suppress(Exception):
            self.ray.shutdown()

    # ------------------------------------------------------------------ cluster view

    def waiting_reason(self, resources: Resources) -> str:
        """Why a queued job waits: a node fits but is busy, or no node could ever run it."""
        nodes = [node for node in self.ray.nodes() if node.get("Alive")]
        wanted = resources.describe()
        if any(resources.fits(node.get("Resources") or {}) for node in nodes):
            return f"waiting for a node with {wanted} to be free"
        return (
            f"waiting for a node with {wanted}: none of the cluster's {len(nodes)} node(s) has "
            "it; the job starts when such a node joins (or stop it)"
        )

    def open_channel(self) -> Any:
        """A `JobChannel` pinned to this (the submitter's) node: a lost worker node must not
        take the records it already sent with it."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = self.ray.get_runtime_context().get_node_id()
        return self.channel_actor.options(
            num_cpus=0,
            max_restarts=0,
            runtime_env=NORMAL_PRIORITY_RUNTIME_ENV,  # a starved channel times out its reads
            scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False),
        ).remote()

    def reader(self, channel: Any) -> ChannelReader:
        """Reads the node's events from `channel` (None: the node writes to the store itself)."""
        return ChannelReader(self.ray, channel)

    # ------------------------------------------------------------------ one campaign step

    def run(
        self, job: StepJob, on_progress: Callable[[RunProgress], None] | None = None
    ) -> StepJobResult:
        """Run one campaign step as a Ray task; its folder's files and runs come back here."""
        ray = self.ray
        context = job.context
        resources = job.resources.model_copy(update={"cpus": self.settings.cpus_per_job})
        shared = is_shared_store(context.store)
        channel = None if shared else self.open_channel()
        store = None
        if channel is not None and context.store:
            from bench.storage.store import ResultStore

            store = ResultStore(context.store)
        started_at = datetime.now(UTC).isoformat()
        started = time.monotonic()
        placement: dict[str, Any] = {}
        created: list[str] = []

        def apply(events: list[Event]) -> None:
            for name, args, kwargs in events:
                if name == "placement":
                    placement.update(args[0])
                elif name == "progress":
                    if on_progress is not None:
                        on_progress(RunProgress.model_validate(args[0]))
                elif name in FORWARDED_WRITES and store is not None:
                    if name == "create_run":
                        created.append(args[0].run_id)
                    getattr(store, name)(*args, **kwargs)

        ref = self.remote_step.options(
            name=f"bench-step-{job.name}"[:120], **resources.ray_options()
        ).remote(
            job.model_dump_json(),
            channel,
            context.store if shared else None,
            self.versions,
        )
        reader = self.reader(channel)
        try:
            while not ray.wait([ref], timeout=POLL_S)[0]:
                apply(reader.read(POLL_S))
            try:
                on_node = ray.get(ref, timeout=CHANNEL_TIMEOUT_S)
            finally:
                apply(reader.read_to_the_end())
        except ray.exceptions.RayError as error:
            where = placement.get("hostname") or "its node"
            reason = f"{_what_ended_it(ray, error, where)} mid-step; no automatic retry"
            for run_id in created if store is not None else []:
                fail_run(store, run_id, RunStatus.FAILED, reason)
            return StepJobResult(
                executor=self.name,
                started_at=started_at,
                wall_s=round(time.monotonic() - started, 1),
                error=reason,
            )
        finally:
            if channel is not None:
                with contextlib.suppress(Exception):
                    ray.kill(channel)
            if store is not None:
                store.close()
        if on_node.refused or on_node.result is None:
            return StepJobResult(
                executor=self.name,
                started_at=started_at,
                wall_s=round(time.monotonic() - started, 1),
                error=on_node.refused or "the node returned no result",
            )
        for relative, data in on_node.files.items():
            path = Path(context.out_dir) / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return on_node.result

    # ------------------------------------------------------------------ one job

    def run_job(self, store: Store, job: Job, log_dir: Path | None = None) -> RunStatus:
        """Submit the job's task and supervise it until it ends; the job is left finished."""
        return _JobSupervisor(self, store, job, log_dir).run()


class _JobSupervisor:
    """One job's life on the cluster, seen from the submitter."""

    def __init__(self, executor: RayExecutor, store: Store, job: Job, log_dir: Path | None) -> None:
        from bench.orchestrate.job_run import JobProgress

        self.executor = executor
        self.ray = executor.ray
        self.store = store
        self.job = job
        self.log_dir = log_dir
        self.resources = job_resources(job.configs, executor.settings.cpus_per_job)
        self.shared = is_shared_store(executor.store_location)
        self.progress = JobProgress(list(job.configs), self._write_progress)
        self.placement = JobPlacement(
            executor="ray",
            state="queued",
            resources=self.resources,
            waiting_for=self.resources.describe(),
        )

    def _write_progress(self, state: JobProgressState) -> None:
        placed = state.model_copy(update={"placement": self.placement.model_copy(deep=True)})
        self.store.update_job(self.job.job_id, progress=placed)

    # ------------------------------------------------------------------ events from the node

    def _apply(self, events: list[Event]) -> None:
        """Apply the node's store writes to the submitter's store, in the order they were made."""
        for name, args, kwargs in events:
            if name == "placement":
                node = ExecutorFacts.model_validate(args[0])
                self.placement = JobPlacement.on_node(node, "running")
                self.progress.flush(force=True)
            elif name in FORWARDED_WRITES or name in FORWARDED_JOB_WRITES:
                getattr(self.store, name)(*args, **kwargs)

    def _started(self, channel: Any) -> bool:
        if channel is not None:
            return self.placement.state == "running"
        placement = self.store.get_job(self.job.job_id).progress.placement
        return placement is not None and placement.state == "running"

    # ------------------------------------------------------------------ supervision

    def run(self) -> RunStatus:
        from bench.orchestrate.job_run import _StopWatcher

        ray = self.ray
        job_id = self.job.job_id
        self.placement.reason = self.executor.waiting_reason(self.resources)
        self.progress.flush(force=True)
        channel = None if self.shared else self.executor.open_channel()
        reader = self.executor.reader(channel)
        ref = self.executor.remote_job.options(
            name=f"bench-job-{job_id}", **self.resources.ray_options()
        ).remote(
            self.job.model_dump_json(),
            channel,
            self.executor.store_location if self.shared else None,
            self.executor.versions,
            str(self.log_dir) if self.log_dir else None,
        )
        stop = threading.Event()
        watcher = _StopWatcher(self.store, job_id, stop)
        watcher.start()
        stop_sent_at: float | None = None
        force_cancelled = False
        last_check = time.monotonic()
        try:
            while True:
                ready, _ = ray.wait([ref], timeout=POLL_S)
                self._apply(reader.read(POLL_S))
                if ready:
                    break
                started = self._started(channel)
                if stop.is_set() and stop_sent_at is None:
                    stop_sent_at = time.monotonic()
                    if channel is not None:
                        channel.request_stop.remote()
                    if not started:
                        ray.cancel(ref, force=False)  # still queued: it never runs
                elif (
                    stop_sent_at is not None
                    and not force_cancelled
                    and time.monotonic() - stop_sent_at > STOP_GRACE_S
                ):
                    log.warning(
                        "job %s ignored its stop for %.0f s; cancelling", job_id, STOP_GRACE_S
                    )
                    ray.cancel(ref, force=True)
                    force_cancelled = True
                if not started and time.monotonic() - last_check > FEASIBILITY_CHECK_S:
                    last_check = time.monotonic()
                    self.placement.reason = self.executor.waiting_reason(self.resources)
                    self.progress.flush(force=True)
            return self._finish(ref, reader, stopped=stop.is_set())
        finally:
            watcher.done.set()
            watcher.join(timeout=5)
            if channel is not None:
                with contextlib.suppress(Exception):
                    ray.kill(channel)

    def _finish(self, ref: Any, reader: ChannelReader, stopped: bool) -> RunStatus:
        """Read the task's outcome; a refusal, a cancel or a lost node finishes the job here."""
        from bench.orchestrate.ray_node import NodeOutcome

        ray = self.ray
        try:
            outcome: NodeOutcome = ray.get(ref, timeout=CHANNEL_TIMEOUT_S)
        except ray.exceptions.RayError as error:
            self._apply(reader.read_to_the_end())  # everything the node sent before it went
            if stopped or isinstance(error, ray.exceptions.TaskCancelledError):
                return self._end(RunStatus.STOPPED, "stopped on request")
            node = self._stored_placement().node
            where = (node.hostname if node is not None else None) or "its node"
            reason = f"{_what_ended_it(ray, error, where)} mid-job; no automatic retry"
            return self._end(RunStatus.FAILED, reason)
        self._apply(reader.read_to_the_end())
        if outcome.refused:
            self.placement = JobPlacement.on_node(outcome.placement, "refused")
            return self._end(RunStatus.FAILED, outcome.refused)
        stored = self.store.get_job(self.job.job_id).progress
        placement = stored.placement or JobPlacement.on_node(outcome.placement, "finished")
        finished = placement.model_copy(update={"state": "finished"})
        self.store.update_job(
            self.job.job_id, progress=stored.model_copy(update={"placement": finished})
        )
        return RunStatus(outcome.status)

    def _stored_placement(self) -> JobPlacement:
        return self.store.get_job(self.job.job_id).progress.placement or self.placement

    def _end(self, status: RunStatus, reason: str) -> RunStatus:
        """Finish the runs the node left unfinished (kept, with their records: FAILED or
        STOPPED with the reason) and the job itself."""
        stored = self.store.get_job(self.job.job_id).progress
        runs = [run.model_copy(deep=True) for run in stored.runs or self.progress.state.runs]
        run_status = RunStatus.STOPPED if status == RunStatus.STOPPED else RunStatus.FAILED
        for run in runs:
            if run.status in (RunStatus.COMPLETED, RunStatus.FAILED):
                continue
            if run.run_id:
                fail_run(self.store, run.run_id, run_status, reason)
            run.status, run.error = run_status, reason
        placement = self.placement.over(stored.placement)
        if placement.state != "refused":
            placement.state = "finished"
        self.store.update_job(
            self.job.job_id,
            progress=stored.model_copy(update={"runs": runs, "placement": placement}),
            status=status.value,
            run_ids=[run.run_id for run in runs if run.run_id],
            error=reason,
        )
        return status


def fail_run(store: RunWriter, run_id: str, status: RunStatus, reason: str) -> None:
    """Mark a run its node never finished FAILED (or STOPPED) with the reason, summarising the
    records it wrote so far; a run already finished is left alone."""
    from bench.core.metrics import MetricsAccumulator, judge_validity
    from bench.core.schema import ValidityStatus

    try:
        result = store.get_run(run_id)
    except UserError:
        return
    if result.status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STOPPED):
        return
    measured = MetricsAccumulator()
    for record in store.iter_records(run_id):
        measured.add(record)
    result.status = status
    result.failure = Failure(cause=reason)
    result.summary = measured.summary(result.config.slo)
    result.validity = judge_validity(
        result.summary, result.config.validity, kind=result.config.workload.kind
    )
    result.validity.status = ValidityStatus.INVALID
    result.validity.reasons.append(f"run {status.value.lower()}: {reason}")
    store.update_run(result)
