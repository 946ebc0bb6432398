"""The clock the load generators use, injectable so tests can travel in time.

Everything timed by the harness reads `CLOCK.now_ns()` (time.perf_counter_ns: CLOCK_MONOTONIC on
Linux, so values are comparable across processes of one machine) and waits with
`await CLOCK.sleep_until_ns(t)`. The time-travel fixture in tests replaces both.
"""

from __future__ import annotations

import asyncio
import time


class Clock:
    """Monotonic nanosecond clock with asyncio sleeps."""

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until_ns(self, deadline_ns: int) -> None:
        delay_ns = deadline_ns - self.now_ns()
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / 1e9)


CLOCK = Clock()
"""Process-wide clock; tests monkeypatch its methods (see tests/conftest.py `time_travel`)."""
