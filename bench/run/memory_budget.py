"""Will the load generator fit in this machine's memory? An estimate made before the run.

Each bound of bench/core/limits.py is reasonable alone, but they multiply: 100,000 prefixes of
10,000,000 tokens each is 10**12 token IDs. The generator holds token IDs as Python lists (an
8-byte pointer and a 32-byte int object per ID above 256), so the run would grow to terabytes
and meet the OOM killer (or hang swapping) long after it started. `check_memory_fits` refuses
it up front, in one line, with the estimate and the memory available.
"""

from __future__ import annotations

import os

from bench.core.config import (
    CapacityLoad,
    ConcurrencyLoad,
    GenerateWorkload,
    RunConfig,
    StepLoad,
)
from bench.core.errors import UserError

BYTES_PER_TOKEN_ID = 40
"""A token ID in a Python list: the 8-byte slot and a 32-byte int object (IDs above 256)."""
BYTES_PER_CHUNK = 100
"""A chunk of a request record: its arrival time and token count in two lists, plus slack."""
SHARE_OF_AVAILABLE = 0.5
"""The generator may use at most half of the memory available when the run starts: the
engine, the telemetry and the records share the rest."""


def _peak_in_flight(config: RunConfig) -> int:
    """Requests a closed-loop pattern is known to keep in flight at its largest; 1 for the
    others (an open loop's in-flight count depends on the engine's speed, unknown before the
    run). A concurrency search counts its first level: how far it climbs toward
    max_concurrency is what it measures."""
    load = config.load
    if isinstance(load, ConcurrencyLoad):
        return load.concurrency
    if isinstance(load, StepLoad):
        return max(load.levels) if load.levels else load.max
    if isinstance(load, CapacityLoad) and load.over == "concurrency":
        return load.start_concurrency
    return 1


def estimate_generator_bytes(config: RunConfig) -> tuple[int, str]:
    """Bytes the load generator holds at its peak, and what they are, in words."""
    workload = config.workload
    if not isinstance(workload, GenerateWorkload):
        return 0, "no token IDs (forward workload)"
    parts: list[tuple[int, str]] = []
    if workload.prefix is not None:
        tokens = workload.prefix.count * workload.prefix.tokens.mean
        parts.append(
            (
                tokens * BYTES_PER_TOKEN_ID,
                f"{workload.prefix.count:,} prefixes of {workload.prefix.tokens.mean:,} tokens",
            )
        )
    in_flight = _peak_in_flight(config)
    prompt = workload.mean_prompt_tokens()
    parts.append(
        (
            in_flight * prompt * BYTES_PER_TOKEN_ID,
            f"{in_flight:,} prompts of {prompt:,} tokens in flight",
        )
    )
    if isinstance(config.load, CapacityLoad) and config.load.probe_requests:
        chunks = config.load.probe_requests * workload.output_tokens.mean
        parts.append(
            (
                chunks * BYTES_PER_CHUNK,
                f"records of a {config.load.probe_requests:,}-request probe of "
                f"{workload.output_tokens.mean:,} output tokens each",
            )
        )
    total = sum(size for size, _ in parts)
    return total, " + ".join(what for _, what in parts)


def available_bytes() -> int | None:
    """Memory available to new work now (Linux MemAvailable), None where it cannot be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def check_memory_fits(config: RunConfig, available: int | None = None) -> None:
    """UserError (one line, with the figures) when the generator's estimate is over
    SHARE_OF_AVAILABLE of the memory available; `available` defaults to this machine's."""
    needed, what = estimate_generator_bytes(config)
    available = available_bytes() if available is None else available
    if available is None or needed <= SHARE_OF_AVAILABLE * available:
        return
    raise UserError(
        f"the load generator would hold about {_gb(needed)} ({what}); this machine has "
        f"{_gb(available)} available and a run may take at most half: lower the counts or "
        "lengths (docs/limits.md)"
    )


def _gb(size: float) -> str:
    return f"{size / 1e9:,.1f} GB" if size >= 1e8 else f"{size / 1e6:,.1f} MB"


__all__ = [
    "BYTES_PER_TOKEN_ID",
    "available_bytes",
    "check_memory_fits",
    "estimate_generator_bytes",
]
