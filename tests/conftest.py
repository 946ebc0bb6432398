"""Shared test fixtures: `time_travel` (virtual clock for load tests) and `tiny_records`.

`time_travel` makes the running asyncio loop and `bench.core.clock.CLOCK` read a virtual clock that
jumps straight to the next timer whenever every task is waiting, so a 60 s load phase runs in
milliseconds and every timestamp is exact (no CPU time passes on the virtual clock).
Also sets OMP_WAIT_POLICY=PASSIVE for the suite's CPU engines (why: the comment below).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator

import pytest

from bench.core.clock import CLOCK
from bench.core.schema import RequestRecord

# Real CPU engines in this suite share their cores with the load generator, pytest and whatever
# else the CI machine runs. libgomp's default wait policy spins at every parallel-region barrier,
# so a preempted OpenMP thread costs a whole scheduler slice per region: beside `stress-ng --cpu
# 2` on 2 cores, the tiny-cpu campaign's PyTorch step served 8, 8 and 20 requests in its 5 s
# (3-48 tok/s per user; one suite-run got 4 and failed the 8-request validity floor) and 132, 176
# and 212 with OMP_WAIT_POLICY=PASSIVE. Set before torch loads here or in any engine process the
# tests start (they inherit it); a developer's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

VIRTUAL_EPOCH_NS = 1_000_000_000_000
"""Virtual time starts at 1000 s, like a perf_counter reading on a machine that has been up."""


class VirtualClock:
    """Integer-nanosecond virtual time shared by the event loop and CLOCK."""

    def __init__(self, start_ns: int = VIRTUAL_EPOCH_NS) -> None:
        self.ns = start_ns
        self.jumps = 0

    def now_ns(self) -> int:
        return self.ns

    def time(self) -> float:
        return self.ns / 1e9

    def advance(self, seconds: float) -> None:
        # Round the absolute target, not the delay: the loop computed the delay as a float
        # difference, and rounding it up would land a nanosecond past exact timer times.
        target_ns = round((self.ns / 1e9 + seconds) * 1e9)
        self.ns = target_ns if target_ns > self.ns else self.ns + 1


@contextlib.contextmanager
def virtual_time(loop: asyncio.AbstractEventLoop) -> Iterator[VirtualClock]:
    """Put `loop` and CLOCK on a virtual clock for the duration of the block.

    The loop's `time()` reads the virtual clock and its selector, asked to block for `t`
    seconds with nothing to do, advances the clock by `t` instead (a poll for real I/O still
    happens, so call_soon_threadsafe keeps working). Work in other threads takes no virtual
    time, so do not await thread results with time-outs under it. The driver's timer slack
    (a real-clock workaround) is switched off: virtual timers fire exactly.
    """
    from bench.run.load import driver

    clock = VirtualClock()
    selector = loop._selector  # type: ignore[attr-defined]
    real_select = selector.select

    def select(timeout: float | None = None):
        events = real_select(0)
        if events or timeout == 0:
            return events
        if timeout is None:  # nothing scheduled: only real I/O can wake us
            return real_select(None)
        clock.advance(timeout)
        clock.jumps += 1
        return []

    saved = (CLOCK.__dict__.get("now_ns"), driver.TIMER_SLACK_NS)
    loop.time = clock.time  # type: ignore[method-assign]
    selector.select = select
    CLOCK.now_ns = clock.now_ns  # type: ignore[method-assign]
    driver.TIMER_SLACK_NS = 0
    try:
        yield clock
    finally:
        del loop.time
        del selector.select
        if saved[0] is None:
            CLOCK.__dict__.pop("now_ns", None)
        else:
            CLOCK.now_ns = saved[0]  # type: ignore[method-assign]
        driver.TIMER_SLACK_NS = saved[1]


@pytest.fixture
async def time_travel() -> Iterator[VirtualClock]:
    """Virtual time for the running test's loop: sleeps return at once, timestamps are exact."""
    with virtual_time(asyncio.get_running_loop()) as clock:
        yield clock


def make_record(
    record_id: str = "r1",
    start_ms: float = 0.0,
    chunk_ms: list[float] | None = None,
    end_ms: float | None = None,
    *,
    chunk_tokens: list[int] | None = None,
    output_tokens: int | None = None,
    input_tokens: int = 10,
    error: str | None = None,
    warmup: bool = False,
    scheduled_ms: float | None = None,
    phase: str = "",
) -> RequestRecord:
    """A record from millisecond offsets (converted to ns), for hand-computed metric cases."""
    chunk_ms = chunk_ms or []
    chunk_tokens = chunk_tokens or []
    if end_ms is None:
        end_ms = chunk_ms[-1] if chunk_ms else start_ms
    if output_tokens is None:
        output_tokens = sum(chunk_tokens) if chunk_tokens else len(chunk_ms)
    ms = 1_000_000
    return RequestRecord(
        id=record_id,
        start_ns=round(start_ms * ms),
        chunk_ns=[round(t * ms) for t in chunk_ms],
        chunk_tokens=chunk_tokens,
        end_ns=round(end_ms * ms),
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        error=error,
        warmup=warmup,
        scheduled_ns=None if scheduled_ms is None else round(scheduled_ms * ms),
        phase=phase,
    )


@pytest.fixture
def tiny_records() -> list[RequestRecord]:
    """Three successes, one failure, one warm-up: small enough to check by hand.

    r1: start 0, chunks 100,110,130 ms -> TTFT 100, E2E 130, TPOT 15, gaps 10,20
    r2: start 10, chunks 60,80 ms, end 90 -> TTFT 50, E2E 80, TPOT 30, gap 20
    r3: start 20, one chunk at 220 -> TTFT 200, E2E 200, no TPOT, no gap
    r4: failed at 500 ms; w1: warm-up 600..800 ms (excluded, also from the window)
    """
    return [
        make_record("r1", 0, [100, 110, 130]),
        make_record("r2", 10, [60, 80], 90),
        make_record("r3", 20, [220]),
        make_record("r4", 30, [], 500, error="boom"),
        make_record("w1", 600, [700, 800], warmup=True),
    ]


# --------------------------------------------------------------------------- store backends


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server: the one scripts/test.sh started ($ADVISOR_TEST_PG_URL and
    $ADVISOR_TEST_PG_ROOT), else a throwaway one started here, else the test is skipped."""
    import os

    from tests.pg_server import ROOT_ENV, URL_ENV, ThrowawayPostgres, find_bindir

    if os.environ.get(URL_ENV) and os.environ.get(ROOT_ENV):
        yield ThrowawayPostgres.attach(os.environ[ROOT_ENV])
        return
    if find_bindir() is None:
        pytest.skip(
            "PostgreSQL tests skipped: no initdb on PATH or under /usr/lib/postgresql/*/bin "
            "(apt-get install postgresql, or set ADVISOR_TEST_PG_URL and ADVISOR_TEST_PG_ROOT)"
        )
    server = ThrowawayPostgres.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    """A fresh, empty store location on each backend: a SQLite file or a new PG database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/results.sqlite"
    return request.getfixturevalue("postgres").create_database()
