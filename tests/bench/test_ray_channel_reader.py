"""The submitter's reading of a node's channel (bench/orchestrate/ray_executor.py ChannelReader)
loses nothing when the channel actor answers late, as it does on a busy machine.

The actor and `ray.get` are labelled test doubles here (`LateChannel`, `LateRay`): what is
tested is the reader's bookkeeping when a drain's answer comes after its timeout, which a real
cluster produces only by chance; the real actor is exercised by the slow cluster tests
(tests/bench/test_ray_executor.py, tests/bench/test_campaign_ray.py). The exception classes are
Ray's own.
"""

from __future__ import annotations

import ray.exceptions

from bench.orchestrate.ray_executor import ChannelReader, _what_ended_it
from bench.orchestrate.ray_node import ForwardingStore


class LateRef:
    """Test double of an ObjectRef: the actor has run the call (its value is fixed), but the
    answer reaches the caller only once `arrive()` is called."""

    def __init__(self, value: object) -> None:
        self.value = value
        self.arrived = False

    def arrive(self) -> None:
        self.arrived = True


class LateChannel:
    """Test double of the `JobChannel` actor handle. `drain.remote()` runs the actor's drain at
    once (the events leave its list, as in the real actor) and returns a `LateRef`; `answer_late`
    says whether that answer waits for `arrive()`."""

    def __init__(self) -> None:
        self.events: list[tuple[str, tuple, dict]] = []
        self.drains: list[LateRef] = []
        self.answer_late = False
        self.drain = self

    def send(self, name: str) -> None:
        self.events.append((name, (), {}))

    def remote(self) -> LateRef:
        taken, self.events = self.events, []
        ref = LateRef(taken)
        ref.arrived = not self.answer_late
        self.drains.append(ref)
        return ref


class LateRay:
    """Test double of the `ray` module for the reader: `get` answers a LateRef that has arrived
    and raises Ray's own GetTimeoutError for one that has not; `gone` makes it raise
    RayActorError (the actor died)."""

    exceptions = ray.exceptions

    def __init__(self) -> None:
        self.gone = False

    def get(self, ref: LateRef, timeout: float | None = None) -> object:
        if self.gone:
            raise ray.exceptions.RayActorError()
        if not ref.arrived:
            raise ray.exceptions.GetTimeoutError(f"not ready after {timeout} s")
        return ref.value


def names(events: list[tuple[str, tuple, dict]]) -> list[str]:
    return [name for name, _args, _kwargs in events]


def test_a_drain_that_answers_late_is_read_next_time_not_lost() -> None:
    channel, fake_ray = LateChannel(), LateRay()
    reader = ChannelReader(fake_ray, channel)
    channel.send("create_run")
    channel.send("update_job")
    channel.answer_late = True
    assert reader.read(0.5) == []  # the actor has taken both events; its answer is late
    channel.send("add_records")
    assert reader.read(0.5) == []  # still late: no second drain while the first is unanswered
    assert len(channel.drains) == 1
    channel.drains[0].arrive()
    channel.answer_late = False
    assert names(reader.read(0.5)) == ["create_run", "update_job"]
    assert names(reader.read(0.5)) == ["add_records"]
    assert len(channel.drains) == 2


def test_the_last_read_takes_the_late_drain_then_one_sent_after_the_end() -> None:
    channel, fake_ray = LateChannel(), LateRay()
    reader = ChannelReader(fake_ray, channel)
    channel.send("update_run")
    channel.answer_late = True
    assert reader.read(0.5) == []
    channel.send("fail_run")  # the node's last writes, after the drain the actor already ran
    channel.send("update_job")
    channel.drains[0].arrive()
    channel.answer_late = False
    assert names(reader.read_to_the_end(5)) == ["update_run", "fail_run", "update_job"]
    assert channel.events == [] and len(channel.drains) == 2


def test_the_last_read_gives_up_at_its_deadline_with_what_it_has(caplog) -> None:
    channel, fake_ray = LateChannel(), LateRay()
    reader = ChannelReader(fake_ray, channel)
    channel.send("update_run")
    channel.answer_late = True
    assert reader.read_to_the_end(0.2) == []
    assert "did not answer" in caplog.text


def test_a_gone_channel_reads_nothing_more() -> None:
    channel, fake_ray = LateChannel(), LateRay()
    reader = ChannelReader(fake_ray, channel)
    channel.send("update_run")
    fake_ray.gone = True
    assert reader.read(0.5) == [] and reader.read_to_the_end(5) == []
    assert len(channel.drains) == 1, "no drain is sent to a channel that is gone"


def test_a_task_that_raised_is_told_apart_from_a_lost_node() -> None:
    timeout = ray.exceptions.GetTimeoutError("Get timed out: some object(s) not ready.")
    raised = ray.exceptions.RayTaskError("bench-step", "Traceback ...", timeout)
    assert _what_ended_it(ray, raised, "vm") == (
        "the task raised on vm (GetTimeoutError: Get timed out: some object(s) not ready.)"
    )
    lost = ray.exceptions.NodeDiedError("node 192.0.2.2 died")
    assert _what_ended_it(ray, lost, "vm") == "lost vm (NodeDiedError: node 192.0.2.2 died)"


class SlowStopChannel:
    """Test double of the `JobChannel` handle for the node's stop read: `stop_requested.remote()`
    returns a marker that the patched `ray.get` times out on."""

    def __init__(self) -> None:
        self.stop_requested = self
        self.asked = 0

    def remote(self) -> str:
        self.asked += 1
        return "late"


def test_a_late_stop_read_keeps_the_last_answer_instead_of_failing_the_run(
    tmp_path, monkeypatch
) -> None:
    from bench.core.config import RunConfig
    from bench.storage.store import ResultStore

    with ResultStore(tmp_path / "jobs.sqlite") as submitter:
        job = submitter.get_job(submitter.create_job([RunConfig(backend="fake", model="x")]))

    def late_get(ref: object, timeout: float | None = None) -> object:
        raise ray.exceptions.GetTimeoutError(f"not ready after {timeout} s")

    monkeypatch.setattr(ray, "get", late_get)
    channel = SlowStopChannel()
    (tmp_path / "mirror").mkdir()
    store = ForwardingStore(channel, job, tmp_path / "mirror")
    try:
        assert store.get_job(job.job_id).stop_requested is False
        assert channel.asked == 1
    finally:
        store.mirror.close()
