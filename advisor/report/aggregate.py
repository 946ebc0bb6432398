"""Bounded summaries of per-request and per-sample data, computed in Python before any chart.

A run may hold millions of request records and hours of telemetry; a chart spec must not. Records
are read once into `RequestColumns` (numpy arrays, warm-up left out), then reduced to histogram
bins, per-window percentiles or a downsampled series whose length is capped by the caller's
budget, whatever the run's size. The report charts and the app's Results page both use these.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from bench.core.schema import RequestRecord

NS_PER_MS = 1e6
NS_PER_S = 1e9


@dataclass(frozen=True)
class RequestColumns:
    """A run's measured requests as columns (one row per non-warm-up record, store order).

    `first_chunk_ns` is -1 for a request without chunks; `ok` is False for failed requests.
    """

    start_ns: np.ndarray
    end_ns: np.ndarray
    first_chunk_ns: np.ndarray
    output_tokens: np.ndarray
    ok: np.ndarray

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord]) -> RequestColumns:
        """Read records once (an iterator from the store works: nothing is kept but numbers)."""
        start, end, first, tokens, ok = [], [], [], [], []
        for record in records:
            if record.warmup:
                continue
            start.append(record.start_ns)
            end.append(record.end_ns)
            first.append(record.chunk_ns[0] if record.chunk_ns else -1)
            tokens.append(record.output_tokens)
            ok.append(record.error is None)
        return cls(
            start_ns=np.asarray(start, dtype=np.int64),
            end_ns=np.asarray(end, dtype=np.int64),
            first_chunk_ns=np.asarray(first, dtype=np.int64),
            output_tokens=np.asarray(tokens, dtype=np.int64),
            ok=np.asarray(ok, dtype=bool),
        )

    @classmethod
    def empty(cls) -> RequestColumns:
        return cls.from_records(())

    def __len__(self) -> int:
        return int(self.start_ns.size)

    @property
    def successful(self) -> int:
        return int(self.ok.sum())

    def e2e_ms(self) -> np.ndarray:
        """E2E = end - start, successful requests only (vLLM's definition)."""
        return (self.end_ns[self.ok] - self.start_ns[self.ok]) / NS_PER_MS

    def ttft_ms(self) -> np.ndarray:
        """TTFT = first chunk - start, successful requests that received a chunk."""
        keep = self.ok & (self.first_chunk_ns >= 0)
        return (self.first_chunk_ns[keep] - self.start_ns[keep]) / NS_PER_MS

    def tpot_ms(self) -> np.ndarray:
        """TPOT = (E2E - TTFT) / (output tokens - 1), requests with > 1 token and a chunk."""
        keep = self.ok & (self.first_chunk_ns >= 0) & (self.output_tokens > 1)
        decode_ns = self.end_ns[keep] - self.first_chunk_ns[keep]
        return decode_ns / (self.output_tokens[keep] - 1) / NS_PER_MS

    def latencies_ms(self, metric: Literal["ttft", "tpot", "e2e"]) -> np.ndarray:
        return {"ttft": self.ttft_ms, "tpot": self.tpot_ms, "e2e": self.e2e_ms}[metric]()


@dataclass(frozen=True)
class Histogram:
    """Shared bin edges and, per name, the share (%) of its values in each bin."""

    edges: list[float]
    shares: dict[str, list[float]]


def histogram(values_by_name: dict[str, np.ndarray], bins: int) -> Histogram:
    """Histogram of every named array over one common range (so runs compare bin by bin);
    shares are percentages of each array's own size, so runs of different sizes compare."""
    present = {name: values for name, values in values_by_name.items() if values.size}
    if not present:
        return Histogram(edges=[], shares={})
    low = float(min(values.min() for values in present.values()))
    high = float(max(values.max() for values in present.values()))
    if high <= low:
        high = low + max(abs(low) * 0.01, 1e-3)
    edges = np.linspace(low, high, bins + 1)
    shares = {
        name: (100.0 * np.histogram(values, bins=edges)[0] / values.size).tolist()
        for name, values in present.items()
    }
    return Histogram(edges=edges.tolist(), shares=shares)


def windowed_percentile(
    columns: RequestColumns, window_s: float, max_windows: int, quantile: float = 99.0
) -> tuple[list[float], list[float]]:
    """Per-window `quantile` of E2E latency (ms) of successful requests by the window in which
    they finished (nearest rank within a window); x = window end, in s from the first measured
    start. Windows widen when the run is longer than `max_windows` of them, so the result never
    exceeds `max_windows` points."""
    if not columns.successful:
        return [], []
    origin = int(columns.start_ns.min())
    end_ns = columns.end_ns[columns.ok]
    latency = columns.e2e_ms()
    span_ns = max(int(end_ns.max()) - origin, 1)
    window_ns = max(window_s, 1e-3) * NS_PER_S
    window_ns = max(window_ns, span_ns / max(max_windows, 1))
    index = ((end_ns - origin) // window_ns).astype(np.int64)
    index = np.minimum(index, max_windows - 1)
    order = np.lexsort((latency, index))
    index, latency = index[order], latency[order]
    windows, starts, counts = np.unique(index, return_index=True, return_counts=True)
    ranks = starts + np.maximum(np.ceil(quantile / 100 * counts).astype(np.int64) - 1, 0)
    xs = ((windows + 1) * window_ns / NS_PER_S).tolist()
    return xs, latency[ranks].tolist()


def downsample(
    xs: Sequence[float] | np.ndarray,
    ys: Sequence[float] | np.ndarray,
    max_points: int,
    how: Literal["max", "mean"] = "mean",
) -> tuple[list[float], list[float]]:
    """At most `max_points` points: consecutive samples merged into equal-count buckets, x the
    bucket's mean and y its mean or max (`max` keeps peaks: a memory peak must not vanish)."""
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.size <= max_points:
        return x.tolist(), y.tolist()
    starts = np.linspace(0, x.size, max(max_points, 1) + 1).astype(np.int64)[:-1]
    starts = np.unique(starts)
    counts = np.diff(np.append(starts, x.size))
    merged_x = np.add.reduceat(x, starts) / counts
    if how == "max":
        merged_y = np.maximum.reduceat(y, starts)
    else:
        merged_y = np.add.reduceat(y, starts) / counts
    return merged_x.tolist(), merged_y.tolist()


__all__ = [
    "Histogram",
    "RequestColumns",
    "downsample",
    "histogram",
    "windowed_percentile",
]
