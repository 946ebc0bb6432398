"""When each open-loop request goes: inter-arrival generators behind a one-method protocol.

As in aiperf, a strategy only answers `next_interval()` (seconds until the next send); the
driver turns intervals into planned send times, so strategies stay trivially testable.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

INTERVAL_BLOCK = 4096
"""Poisson intervals are drawn this many at a time; the sequence does not depend on it."""


class IntervalStrategy(Protocol):
    def next_interval(self) -> float:
        """Seconds from the previous planned send to the next one."""
        ...


class ConstantIntervals:
    """Evenly spaced sends: every interval is exactly 1 / rate_rps."""

    def __init__(self, rate_rps: float) -> None:
        if rate_rps <= 0:
            raise ValueError("rate_rps must be > 0")
        self.rate_rps = rate_rps
        self._interval_s = 1.0 / rate_rps

    def next_interval(self) -> float:
        return self._interval_s


class PoissonIntervals:
    """Poisson arrivals: exponential intervals with mean 1 / rate_rps from a seeded RNG."""

    def __init__(self, rate_rps: float, seed: int = 0) -> None:
        if rate_rps <= 0:
            raise ValueError("rate_rps must be > 0")
        self.rate_rps = rate_rps
        self._rng = np.random.default_rng(seed)
        self._block: list[float] = []
        self._index = 0

    def next_interval(self) -> float:
        if self._index >= len(self._block):
            self._block = self._rng.exponential(1.0 / self.rate_rps, INTERVAL_BLOCK).tolist()
            self._index = 0
        value = self._block[self._index]
        self._index += 1
        return value


def make_intervals(arrival: str, rate_rps: float, seed: int = 0) -> IntervalStrategy:
    """The strategy named by a config's `arrival` field."""
    if arrival == "poisson":
        return PoissonIntervals(rate_rps, seed)
    if arrival == "constant":
        return ConstantIntervals(rate_rps)
    raise ValueError(f"unknown arrival {arrival!r}; use poisson or constant")


class StridedIntervals:
    """One client process's share of a schedule split across `stride` processes: arrivals
    `offset`, `offset + stride`, ... of `base` (arrival 0 at the phase start). The driver starts
    this share at `first_offset_s` and then steps by `next_interval()`, so the processes together
    send exactly the schedule one process would (bench/run/client_processes.py)."""

    def __init__(self, base: IntervalStrategy, stride: int, offset: int) -> None:
        if stride < 1 or not 0 <= offset < stride:
            raise ValueError("need stride >= 1 and 0 <= offset < stride")
        self.base = base
        self.stride = stride
        self.first_offset_s = sum(base.next_interval() for _ in range(offset))

    def next_interval(self) -> float:
        return sum(self.base.next_interval() for _ in range(self.stride))
