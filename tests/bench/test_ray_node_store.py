"""The Ray node's store stand-ins (bench/orchestrate/ray_node.py) meet `JobRunStore` explicitly.

`ForwardingStore` and `PlacedStore` used to answer everything through `__getattr__`; now each
declares exactly the methods of `JobRunStore` (what `run_job` and `launch` call). These tests
check that declaration against the protocol and the forwarding/mirroring behaviour on a real
SQLite store; the Ray channel is a labelled test double (a recorder of `put.remote` calls) because
the real actor is exercised by the slow cluster tests (tests/bench/test_ray_executor.py).
"""

from __future__ import annotations

import inspect
import pickle
from typing import Protocol

import pytest

from bench.core.config import RunConfig
from bench.core.fingerprint import ExecutorFacts
from bench.core.job_progress import JobPlacement, JobProgressState
from bench.core.schema import Failure, RequestRecord, RunResult, RunStatus
from bench.orchestrate.ray_node import (
    FORWARDED_JOB_WRITES,
    FORWARDED_WRITES,
    ForwardingStore,
    PlacedStore,
)
from bench.storage.store import JobRunStore, JobWriter, ResultStore, RunWriter, Store


def protocol_members(protocol: type) -> set[str]:
    """The public members a protocol declares, its bases' included."""
    return {
        name
        for klass in protocol.__mro__
        if klass not in (Protocol, object) and Protocol in klass.__mro__
        for name in vars(klass)
        if not name.startswith("_")
    }


class RecordingChannel:
    """Test double of the `JobChannel` actor handle: `put.remote(event)` appends the event;
    `flushed.remote()` records the barrier and answers the count, as the actor does."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple, dict]] = []
        self.put = self
        self.flushed = _Flushed(self.events)

    def remote(self, event: tuple[str, tuple, dict]) -> None:
        self.events.append(event)


class _Flushed:
    def __init__(self, events: list[tuple[str, tuple, dict]]) -> None:
        self.events = events

    def remote(self) -> int:
        self.events.append(("<flushed>", (), {}))
        return len(self.events) - 1


def answered(ref: object) -> object:
    """`ray.get` for the test double: its `remote()` already answered."""
    return ref


def make_result() -> RunResult:
    return RunResult(config=RunConfig(backend="fake", model="tiny-llama"))


def make_records(count: int) -> list[RequestRecord]:
    return [
        RequestRecord(
            id=f"r{i}",
            start_ns=1_000 * i,
            chunk_ns=[1_000 * i + 10],
            chunk_tokens=[2],
            end_ns=1_000 * i + 20,
            input_tokens=3,
            output_tokens=2,
            phase="main",
        )
        for i in range(count)
    ]


def test_the_protocols_split_the_store_without_losing_a_method():
    assert protocol_members(RunWriter) == {
        "display",
        "create_run",
        "update_run",
        "heartbeat",
        "add_records",
        "fail_run",
        "get_run",
        "iter_records",
    }
    assert protocol_members(JobWriter) == {"get_job", "job_heartbeat", "update_job"}
    assert protocol_members(JobRunStore) == protocol_members(RunWriter) | protocol_members(
        JobWriter
    )
    assert protocol_members(JobRunStore) < protocol_members(Store)
    missing = {name for name in protocol_members(Store) if not hasattr(ResultStore, name)}
    assert not missing


@pytest.mark.parametrize("stand_in", [ForwardingStore, PlacedStore])
def test_stand_ins_declare_every_job_run_method_with_its_signature(stand_in):
    assert "__getattr__" not in vars(stand_in)
    for name in protocol_members(JobRunStore):
        declared = inspect.getattr_static(stand_in, name)
        wanted = inspect.getattr_static(JobRunStore, name)
        if isinstance(wanted, property):
            assert isinstance(declared, property), name
            continue
        assert inspect.signature(declared) == inspect.signature(wanted), name


def test_forwarding_store_mirrors_run_writes_and_forwards_them_in_order(tmp_path):
    channel = RecordingChannel()
    forwarding = ForwardingStore(channel, None, tmp_path, wait=answered)
    result, records = make_result(), make_records(3)
    try:
        forwarding.create_run(result)
        forwarding.heartbeat(result.run_id)
        forwarding.add_records(result.run_id, records)
        assert forwarding.fail_run(result.run_id, Failure(cause="boom")) is True
        forwarding.update_job("job-1", progress=JobProgressState())
        forwarding.job_heartbeat("job-1", run_id=result.run_id)
        # reads answer from the node's mirror
        assert forwarding.get_run(result.run_id).status == RunStatus.FAILED
        assert [r.id for r in forwarding.iter_records(result.run_id)] == ["r0", "r1", "r2"]
        assert forwarding.display == forwarding.mirror.display
    finally:
        forwarding.close()
    names = [name for name, _args, _kwargs in channel.events]
    assert names == [
        "create_run",
        "heartbeat",
        "add_records",
        "fail_run",
        "update_job",
        "job_heartbeat",
        "<flushed>",  # close's barrier, after every write
    ]
    assert set(names[:-1]) <= set(FORWARDED_WRITES) | set(FORWARDED_JOB_WRITES)

    # The submitter applies the events as ray_executor does: its store ends where the mirror did.
    submitter = ResultStore(tmp_path / "submitter.sqlite")
    try:
        for name, args, kwargs in channel.events:
            if name in FORWARDED_WRITES:
                getattr(submitter, name)(*args, **kwargs)
        stored = submitter.get_run(result.run_id)
        assert stored.status == RunStatus.FAILED
        assert stored.failure is not None and stored.failure.cause == "boom"
        assert submitter.count_records(result.run_id) == 3
    finally:
        submitter.close()


def test_placed_store_adds_the_placement_to_job_progress_only(tmp_path):
    channel = RecordingChannel()
    base = ForwardingStore(channel, None, tmp_path, wait=answered)
    placement = ExecutorFacts(name="ray", node_id="n1", hostname="host-a", node_ip="127.0.0.1")
    placed = PlacedStore(base, placement)
    result = make_result()
    try:
        placed.create_run(result)
        placed.update_job("job-1", progress=JobProgressState(current=0), status="RUNNING")
        placed.update_job("job-1", run_ids=[result.run_id])
        placed.job_heartbeat("job-1", run_id=result.run_id)
        assert placed.get_run(result.run_id).run_id == result.run_id
        assert placed.display == base.display
    finally:
        base.close()
    calls = [event for event in channel.events if event[0] == "update_job"]
    first, second = (kwargs for _name, _args, kwargs in calls)
    assert first["progress"].placement == JobPlacement(
        executor="ray", state="running", node=placement
    )
    assert first["progress"].current == 0 and first["status"] == "RUNNING"
    assert second == {"run_ids": [result.run_id]}
    assert [name for name, _a, _k in channel.events] == [
        "create_run",
        "update_job",
        "update_job",
        "job_heartbeat",
        "<flushed>",
    ]


def test_job_progress_written_on_a_node_reaches_the_submitters_job_row(tmp_path):
    """The ray executor's SQLite path without Ray: a node's JobProgress writes through PlacedStore
    and ForwardingStore; every event crosses pickled (as Ray sends it) and the submitter applies
    the job writes; its job row then reads back the node's state with the node's placement."""
    from bench.core.progress import RunProgress
    from bench.orchestrate.executors import describe_placement
    from bench.orchestrate.job_run import JobProgress

    config = RunConfig(backend="fake", model="tiny-llama")
    submitter = ResultStore(tmp_path / "submitter.sqlite")
    job_id = submitter.create_job([config])
    channel = RecordingChannel()
    base = ForwardingStore(channel, None, tmp_path, wait=answered)
    placement = ExecutorFacts(
        name="ray", node_id="n1", hostname="host-a", node_ip="127.0.0.1", gpu_ids=["0"]
    )
    placed = PlacedStore(base, placement)
    try:
        progress = JobProgress([config], lambda state: placed.update_job(job_id, progress=state))
        progress.start_run(0)
        progress.on_progress(
            0, RunProgress(stage="running", run_id="run-0", phase="p", elapsed_s=0.5, completed=3)
        )
        progress.finish_run(0, RunStatus.COMPLETED, "run-0", None)
        for event in channel.events:
            name, args, kwargs = pickle.loads(pickle.dumps(event))
            if name in FORWARDED_JOB_WRITES:
                getattr(submitter, name)(*args, **kwargs)
        stored = submitter.get_job(job_id).progress
    finally:
        base.close()
        submitter.close()
    assert stored.runs == progress.state.runs
    assert stored.runs[0].status == RunStatus.COMPLETED
    assert stored.runs[0].history[0].completed == 3
    assert stored.placement == JobPlacement(executor="ray", state="running", node=placement)
    assert (
        describe_placement(stored.placement) == "Running on node host-a (127.0.0.1, n1) / GPUs 0."
    )


def test_a_node_store_closes_only_once_the_channel_holds_every_write(tmp_path):
    """The node's last act is a barrier on the channel (`JobChannel.flushed`, waited on): the
    submitter drains the channel once the task has ended, and a write still on its way then
    was lost (a stopped job's final status under load: the row stayed RUNNING). The barrier
    comes after every write; the real actor class answers how many writes it holds."""
    from bench.orchestrate.ray_node import JobChannel

    channel = RecordingChannel()
    waited: list[object] = []
    forwarding = ForwardingStore(channel, None, tmp_path, wait=waited.append)
    forwarding.update_job("job-1", progress=JobProgressState())
    forwarding.job_heartbeat("job-1")
    forwarding.close()
    assert [name for name, _args, _kwargs in channel.events] == [
        "update_job",
        "job_heartbeat",
        "<flushed>",
    ]
    assert waited == [2], "close waits on the barrier's answer"
    actor = JobChannel()
    actor.put(("update_job", ("job-1",), {}))
    actor.put(("job_heartbeat", ("job-1",), {}))
    assert actor.flushed() == 2
