"""Trace replay: one open-loop phase that sends each trace row at its (scaled) timestamp.

The trace's rows become requests with its input and output lengths. Mooncake rows with
`hash_ids` build their prompt from blocks of `block_size` token IDs, one block per hash ID,
each block seeded by (seed, hash ID): equal hash IDs give equal blocks, so the replay has the
trace's prefix reuse (the last block is cut to the row's input length). Rows without hash IDs
get unique random prompts. Send lateness (actual - scheduled) is the driver's scheduling lag,
recorded per request (`start_ns - scheduled_ns`) and summarised per phase; the run is INVALID
when its p99 exceeds `ReplayLoad.max_lateness_ms` (`replay_validity_reasons`).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Generator

import numpy as np

from bench.core.config import ReplayLoad
from bench.core.pattern_reports import PatternReportBase, ReplayReport
from bench.core.schema import MetricsSummary
from bench.engines.backends.base import GenerateRequest
from bench.run.load.driver import PhaseSpec, PlanInterrupted
from bench.run.traffic_files import TraceRow, file_sha256, read_trace
from bench.run.workload import TOKEN_ID_OFFSET

REPLAY_PHASE = "replay"


class TraceIntervals:
    """Intervals between consecutive trace rows, scaled (the driver's IntervalStrategy)."""

    def __init__(self, rows: list[TraceRow], time_scale: float) -> None:
        times = [row.t_ms for row in rows]
        self._gaps_s = [(b - a) * time_scale / 1000.0 for a, b in itertools.pairwise(times)]
        self._index = 0

    def next_interval(self) -> float:
        if self._index >= len(self._gaps_s):
            return 0.0  # past the last row: the request iterator is exhausted too
        gap = self._gaps_s[self._index]
        self._index += 1
        return gap


class TraceRequests:
    """The trace's rows as GenerateRequests, in order; ids "t000001", ...

    `prefix_tokens` = tokens in blocks whose hash ID an earlier row already used (what a
    prefix cache could reuse when it keeps every block); `prefix_id` = the first hash ID.
    """

    def __init__(
        self,
        rows: list[TraceRow],
        vocab_size: int,
        block_size: int,
        seed: int = 0,
        max_input_tokens: int | None = None,
        max_output_tokens: int | None = None,
    ) -> None:
        self.rows = rows
        self.max_input_tokens = max_input_tokens
        self.max_output_tokens = max_output_tokens
        self.block_size = block_size
        self.seed = seed
        self.token_low = min(TOKEN_ID_OFFSET, vocab_size // 2)
        self.token_high = vocab_size
        self._seen: set[int] = set()
        self._unique_rng = np.random.default_rng([seed, 1 << 20])
        self._index = 0

    def block(self, hash_id: int) -> list[int]:
        """The token IDs of one hash block (the same for the same hash ID and seed)."""
        rng = np.random.default_rng([self.seed, hash_id & 0xFFFFFFFFFFFF])
        return rng.integers(
            self.token_low, self.token_high, size=self.block_size, dtype=np.int64
        ).tolist()

    def __iter__(self) -> TraceRequests:
        return self

    def __next__(self) -> GenerateRequest:
        if self._index >= len(self.rows):
            raise StopIteration
        row = self.rows[self._index]
        self._index += 1
        length = min(row.input_tokens, self.max_input_tokens or row.input_tokens)
        output_tokens = min(row.output_tokens, self.max_output_tokens or row.output_tokens)
        prefix_tokens = 0
        prefix_id = None
        if row.hash_ids:
            ids: list[int] = []
            reusing = True  # a prefix cache reuses the leading run of known blocks only
            for hash_id in row.hash_ids:
                if len(ids) >= length:
                    break
                block = self.block(hash_id)[: length - len(ids)]
                if reusing and hash_id in self._seen:
                    prefix_tokens += len(block)
                else:
                    reusing = False
                self._seen.add(hash_id)
                ids.extend(block)
            prefix_id = row.hash_ids[0]
            if len(ids) < length:  # the trace says more tokens than its blocks hold
                ids.extend(self._unique(length - len(ids)))
        else:
            ids = self._unique(length)
        return GenerateRequest(
            id=f"t{self._index:06d}",
            prompt_token_ids=ids,
            output_tokens=output_tokens,
            prefix_id=prefix_id,
            prefix_tokens=prefix_tokens,
        )

    def _unique(self, count: int) -> list[int]:
        return self._unique_rng.integers(
            self.token_low, self.token_high, size=count, dtype=np.int64
        ).tolist()


class Replay:
    """A loaded trace: its rows, identity (path and content hash) and the replay's phase."""

    def __init__(self, load: ReplayLoad) -> None:
        self.load = load
        self.rows = read_trace(load)
        self.sha256 = file_sha256(load.trace)

    @property
    def span_s(self) -> float:
        return self.rows[-1].t_ms * self.load.time_scale / 1000.0

    def phase(self, vocab_size: int) -> PhaseSpec:
        """The one open-loop phase: trace schedule, trace requests, drained at the end."""
        rate = len(self.rows) / self.span_s if self.span_s > 0 else float(len(self.rows))
        return PhaseSpec(
            name=REPLAY_PHASE,
            strategy="rate",
            target=rate,
            duration_s=None,
            max_requests=len(self.rows),
            arrival="trace",
            intervals=TraceIntervals(self.rows, self.load.time_scale),
            requests=TraceRequests(
                self.rows,
                vocab_size,
                self.load.block_size,
                self.load.seed,
                self.load.max_input_tokens,
                self.load.max_output_tokens,
            ),
        )

    def report(self) -> ReplayReport:
        return ReplayReport(
            trace=self.load.trace,
            trace_sha256=self.sha256,
            trace_rows=len(self.rows),
            time_scale=self.load.time_scale,
            trace_span_s=self.span_s,
            max_lateness_ms=self.load.max_lateness_ms,
        )


def plan_replay(
    replay: Replay, vocab_size: int
) -> Generator[PhaseSpec, MetricsSummary, ReplayReport]:
    """The replay pattern's plan: one phase, then its report (trace identity and schedule). A
    replay cut short (max_duration_s, a stop) still reports its trace and row count: the
    validity rule counts the rows it never sent against them."""
    with contextlib.suppress(PlanInterrupted):
        yield replay.phase(vocab_size)
    return replay.report()


def replay_validity_reasons(
    load: ReplayLoad, pattern_report: PatternReportBase | None
) -> list[str]:
    """Why a replay run is INVALID: the generator fell behind the trace's schedule.

    Rules: p99 of send lateness (actual send - scheduled send) over the replay phase above
    `load.max_lateness_ms`; a replay with no lateness recorded also fails (nothing was sent); so
    does one that left trace rows unsent (a trace whose later rows lie past `max_duration_s`,
    or a `time_scale` that puts them there): what it measured is not the trace's traffic."""
    lag = pattern_report.scheduling_lag_ms.get(REPLAY_PHASE) if pattern_report else None
    if lag is None:
        return ["replay: no send was recorded"]
    reasons = []
    rows = getattr(pattern_report, "trace_rows", None)
    if rows is not None and lag.count is not None and lag.count < rows:
        why = f" ({pattern_report.incomplete})" if pattern_report.incomplete else ""
        span = getattr(pattern_report, "trace_span_s", None)
        spans = f"; the trace spans {span:.4g} s at time_scale {load.time_scale:g}" if span else ""
        reasons.append(
            f"replay left {rows - lag.count:,} of {rows:,} trace rows unsent{why}{spans}"
        )
    if lag.p99 > load.max_lateness_ms:
        reasons.append(
            f"replay fell behind its trace: p99 send lateness {lag.p99:.1f} ms > "
            f"{load.max_lateness_ms:g} ms"
        )
    return reasons
