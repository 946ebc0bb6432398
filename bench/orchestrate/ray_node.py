"""What a Ray task does on the node it lands on: check versions, then run the job as a local run.

The task body (`run_job_on_node`) refuses a node whose bench code or engine libraries differ from
the submitter's (results must be comparable), then calls the same `bench.orchestrate.jobs.run_job`
(and so `bench.run.api.launch`: worker isolation, watchdog, NVML telemetry) as the local executor.
With a team store (PostgreSQL) it writes there itself. With a SQLite store, which lives on the
submitter's disk, every store write goes through a `JobChannel` actor pinned to the submitter's
node: the submitter applies them in order, so a lost node loses nothing already sent. The
channel also carries the stop request the other way. Imports Ray only when called.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from bench.core.fingerprint import COMPARABILITY_LIBRARIES, ExecutorFacts
from bench.core.job_progress import JobPlacement, JobProgressState
from bench.core.progress import RunProgress
from bench.core.strict import Strict
from bench.orchestrate.executors import StepJob, StepJobResult
from bench.run.environment import library_versions, node_placement

if TYPE_CHECKING:  # bench.storage.store pulls in SQLAlchemy; only its types are needed here
    from bench.core.schema import Failure, RequestRecord, RunResult
    from bench.storage.store import Job, JobRunStore

BENCH_DIR = Path(__file__).resolve().parents[1]
STOP_CACHE_S = 0.5
"""How long the node trusts its last read of the stop flag (the job runner polls every 0.5 s)."""
CHANNEL_TIMEOUT_S = 30.0
"""How long a read of the stop flag waits for the channel (a late answer keeps the last one)."""
FLUSH_TIMEOUT_S = 300.0
"""How long the node's last call, its barrier on the channel, waits: on a busy machine the actor
is late, not gone (a dead one answers at once, with an error), and the writes it holds are the
job's end."""


# --------------------------------------------------------------------------- versions


def bench_code_digest() -> str:
    """A short hash of the bench package's source: two hosts with the same digest run the same
    harness (timestamps, load generation, metrics)."""
    digest = hashlib.sha256()
    for path in sorted(BENCH_DIR.rglob("*.py")):
        digest.update(str(path.relative_to(BENCH_DIR)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def comparability_versions() -> dict[str, str | None]:
    """What must match between submitter and node: bench code, Python, engine libraries."""
    return {
        "bench": bench_code_digest(),
        "python": ".".join(map(str, sys.version_info[:2])),
        **library_versions(COMPARABILITY_LIBRARIES),
    }


def version_differences(submitter: dict[str, str | None], node: dict[str, str | None]) -> list[str]:
    """One `name: node X, submitter Y` line per differing entry (empty when comparable)."""
    return [
        f"{name}: {node.get(name) or 'not installed'} on the node, "
        f"{submitter.get(name) or 'not installed'} on the submitter"
        for name in sorted(set(submitter) | set(node))
        if submitter.get(name) != node.get(name)
    ]


# --------------------------------------------------------------------------- the channel


class JobChannel:
    """Actor on the submitter's node: store writes flow in, the stop request flows out."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple, dict]] = []
        self.stop = False

    def put(self, event: tuple[str, tuple, dict]) -> None:
        self.events.append(event)

    def drain(self) -> list[tuple[str, tuple, dict]]:
        events, self.events = self.events, []
        return events

    def flushed(self) -> int:
        """The node's last call before its task returns, waited on: the actor runs one caller's
        calls in order, so once this answers every write the node sent is in `events`. Without
        it the submitter's last drain (right after the task ends) could come before the node's
        final writes had arrived, and a busy machine lost a stopped job's end that way: the job
        row stayed RUNNING with no run ids."""
        return len(self.events)

    def request_stop(self) -> None:
        self.stop = True

    def stop_requested(self) -> bool:
        return self.stop


FORWARDED_WRITES = ("create_run", "update_run", "heartbeat", "add_records", "fail_run")
"""Run writes the submitter applies to its store, in order (also kept in the node's mirror)."""
FORWARDED_JOB_WRITES = ("update_job", "job_heartbeat")
"""Job-row writes the submitter applies (the job row exists only in the submitter's store)."""


class ForwardingStore:
    """The store `run_job` sees on a node when the real store is the submitter's SQLite file.

    It meets `JobRunStore` (what `run_job` and `launch` call) and nothing more. Run writes go to
    a node-local SQLite mirror (so `launch` can read a run's records back for the soak/pulse
    analysis) and, in the same order, to the channel; run reads come from the mirror. Job writes
    only go to the channel (the job row lives in the submitter's store). `get_job` answers with
    the job as submitted and the channel's stop flag.
    """

    def __init__(
        self,
        channel: Any,
        job: Job | None,
        mirror_dir: Path,
        wait: Callable[[Any], object] | None = None,
    ) -> None:
        from bench.storage.store import ResultStore

        self.channel = channel
        self._wait = wait or _wait_for_the_channel
        self.job = job
        self.mirror = ResultStore(mirror_dir / "mirror.sqlite")
        self._stop_read = (0.0, False)
        self._lock = threading.Lock()

    def _forward(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.channel.put.remote((name, args, kwargs))  # ordered: one caller, one actor

    # run writes (FORWARDED_WRITES): the mirror first, then the channel
    def create_run(self, result: RunResult) -> None:
        self.mirror.create_run(result)
        self._forward("create_run", result)

    def update_run(self, result: RunResult) -> None:
        self.mirror.update_run(result)
        self._forward("update_run", result)

    def heartbeat(self, run_id: str) -> None:
        self.mirror.heartbeat(run_id)
        self._forward("heartbeat", run_id)

    def add_records(self, run_id: str, records: Sequence[RequestRecord]) -> None:
        self.mirror.add_records(run_id, records)
        self._forward("add_records", run_id, records)

    def fail_run(self, run_id: str, failure: Failure) -> bool:
        marked = self.mirror.fail_run(run_id, failure)
        self._forward("fail_run", run_id, failure)
        return marked

    # run reads: the mirror
    @property
    def display(self) -> str:
        return self.mirror.display

    def get_run(self, run_id: str) -> RunResult:
        return self.mirror.get_run(run_id)

    def iter_records(self, run_id: str, include_warmup: bool = False) -> Iterator[RequestRecord]:
        return self.mirror.iter_records(run_id, include_warmup=include_warmup)

    # job writes (FORWARDED_JOB_WRITES): the channel only
    def update_job(self, job_id: str, **fields: Any) -> None:
        self._forward("update_job", job_id, **fields)

    def job_heartbeat(self, job_id: str, run_id: str | None = None) -> None:
        self._forward("job_heartbeat", job_id, run_id=run_id)

    def get_job(self, job_id: str) -> Job:
        import ray

        if self.job is None:
            raise RuntimeError(f"no job {job_id} on this node: the store serves a campaign step")
        with self._lock:
            read_at, stop = self._stop_read
            if time.monotonic() - read_at > STOP_CACHE_S:
                with contextlib.suppress(ray.exceptions.GetTimeoutError):  # asked again later
                    stop = bool(
                        ray.get(self.channel.stop_requested.remote(), timeout=CHANNEL_TIMEOUT_S)
                    )
                self._stop_read = (time.monotonic(), stop)
        return self.job.model_copy(update={"stop_requested": stop})

    def close(self) -> None:
        """Wait until the channel holds every write sent (`JobChannel.flushed`), then drop the
        mirror; a channel that does not answer in FLUSH_TIMEOUT_S raises (the task fails,
        and the submitter says so) rather than letting writes vanish unnoticed."""
        try:
            self._wait(self.channel.flushed.remote())
        finally:
            self.mirror.close()


def _wait_for_the_channel(ref: Any) -> object:
    import ray

    return ray.get(ref, timeout=FLUSH_TIMEOUT_S)


class PlacedStore:
    """Wraps the store a node writes to: every job progress write carries the node placement,
    so the app shows where the job runs. Everything else goes to `base` as it is."""

    def __init__(self, base: JobRunStore, placement: ExecutorFacts) -> None:
        self.base = base
        self.placement = JobPlacement.on_node(placement, "running")

    def update_job(self, job_id: str, **fields: Any) -> None:
        progress = fields.get("progress")
        if isinstance(progress, JobProgressState):
            fields["progress"] = progress.model_copy(update={"placement": self.placement})
        self.base.update_job(job_id, **fields)

    def get_job(self, job_id: str) -> Job:
        return self.base.get_job(job_id)

    def job_heartbeat(self, job_id: str, run_id: str | None = None) -> None:
        self.base.job_heartbeat(job_id, run_id=run_id)

    @property
    def display(self) -> str:
        return self.base.display

    def create_run(self, result: RunResult) -> None:
        self.base.create_run(result)

    def update_run(self, result: RunResult) -> None:
        self.base.update_run(result)

    def heartbeat(self, run_id: str) -> None:
        self.base.heartbeat(run_id)

    def add_records(self, run_id: str, records: Sequence[RequestRecord]) -> None:
        self.base.add_records(run_id, records)

    def fail_run(self, run_id: str, failure: Failure) -> bool:
        return self.base.fail_run(run_id, failure)

    def get_run(self, run_id: str) -> RunResult:
        return self.base.get_run(run_id)

    def iter_records(self, run_id: str, include_warmup: bool = False) -> Iterator[RequestRecord]:
        return self.base.iter_records(run_id, include_warmup=include_warmup)


# --------------------------------------------------------------------------- the task body


@contextlib.contextmanager
def node_store(
    channel: Any, store_location: str | None, job: Job | None = None
) -> Iterator[JobRunStore]:
    """The store a task writes to: the team store itself (`store_location`, a URL every node
    reaches), else a `ForwardingStore` whose writes travel through `channel` to the submitter."""
    if channel is None:
        from bench.storage.store import open_store

        store = open_store(store_location)
        try:
            yield store
        finally:
            store.close()
        return
    with tempfile.TemporaryDirectory(prefix="bench-ray-node-") as mirror_dir:
        forwarding = ForwardingStore(channel, job, Path(mirror_dir))
        try:
            yield forwarding
        finally:
            forwarding.close()


def _start(
    channel: Any, submitter_versions: dict[str, str | None]
) -> tuple[ExecutorFacts, str | None]:
    """Announce where the task runs; the refusal text when versions differ, else None."""
    placement = node_placement()
    if placement is None:
        raise RuntimeError("this function must run inside a Ray task")
    if channel is not None:
        channel.put.remote(("placement", (placement.model_dump(),), {}))
    differences = version_differences(submitter_versions, comparability_versions())
    if not differences:
        return placement, None
    return placement, (
        f"{placement.describe()} refused the job (results would not be comparable): "
        + "; ".join(differences)
    )


class NodeOutcome(Strict):
    """What the task returns to the submitter (the runs themselves went through the store)."""

    placement: ExecutorFacts
    status: str | None = Field(None, description="The job's final status; None when refused.")
    refused: str | None = Field(None, description="Why the node refused the job.")


def run_job_on_node(
    job_json: str,
    channel: Any,
    store_location: str | None,
    submitter_versions: dict[str, str | None],
    log_dir: str | None,
) -> NodeOutcome:
    """The Ray task of a job: refuse on a version difference, else run the job as the local
    runner does. `store_location` is the team store's URL when the node writes there itself,
    None when its writes travel through `channel` to the submitter's SQLite store."""
    from bench.orchestrate.job_run import run_job
    from bench.storage.store import Job

    placement, refused = _start(channel, submitter_versions)
    if refused:
        return NodeOutcome(placement=placement, refused=refused)
    job = Job.model_validate_json(job_json)
    with node_store(channel, store_location, job) as store:
        status = run_job(
            PlacedStore(store, placement), job, log_dir=Path(log_dir) if log_dir else None
        )
    return NodeOutcome(placement=placement, status=status.value)


class StepOnNode(Strict):
    """A campaign step's result from its node: the step body's result and its folder's files."""

    placement: ExecutorFacts
    refused: str | None = None
    result: StepJobResult | None = None
    files: dict[str, bytes] = Field(default_factory=dict, description="Step folder, by path.")


def run_step_on_node(
    job_json: str,
    channel: Any,
    store_location: str | None,
    submitter_versions: dict[str, str | None],
) -> StepOnNode:
    """The Ray task of a campaign step: `bench.orchestrate.campaign.run_step_job` in a node-local
    folder whose files go back to the submitter (paths in the outcome name the submitter's
    folder)."""
    from bench.orchestrate.campaign import run_step_job

    placement, refused = _start(channel, submitter_versions)
    if refused:
        return StepOnNode(placement=placement, refused=refused)
    job = StepJob.model_validate_json(job_json)

    def on_progress(progress: RunProgress) -> None:
        channel.put.remote(("progress", (progress.model_dump(mode="json"),), {}))

    with (
        node_store(channel, store_location) as store,
        tempfile.TemporaryDirectory(prefix="bench-ray-step-") as folder,
    ):
        here = job.context.model_copy(update={"out_dir": Path(folder) / "step"})
        result = run_step_job(
            job.model_copy(update={"context": here}),
            executor_name="ray",
            on_progress=on_progress if channel is not None else None,
            store_handle=store,
        )
        files = {
            str(path.relative_to(here.out_dir)): path.read_bytes()
            for path in sorted(here.out_dir.rglob("*"))
            if path.is_file()
        }
        if result.outcome_json is not None:
            text = result.outcome_json.replace(str(here.out_dir), str(job.context.out_dir))
            result = result.model_copy(update={"outcome_json": text})
    return StepOnNode(placement=placement, result=result, files=files)
