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
