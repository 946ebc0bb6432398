"""Request records -> metric summaries with vLLM's benchmark definitions, plus run validity.

Every latency is computed from integer-nanosecond timestamps and converted to milliseconds only
here, for the summary. The accumulator keeps compact numeric arrays, never the records, so a
one-hour soak (360,000 requests) fits in well under 500 MB.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.core.config import SLO, ValidityRules
from bench.core.engine_facts import PrometheusSample
from bench.core.errors import UserError
from bench.core.metric_catalog import LATENCY_SPECS, REQUEST_SLO_BOUNDS, Kind
from bench.core.schema import (
    MetricsSummary,
    Percentiles,
    PhaseResult,
    RequestRecord,
    TurnMetrics,
    Validity,
    ValidityStatus,
)

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
PERCENTILES = (50.0, 90.0, 99.0)
ITL_BLOCK_VALUES = 1 << 20
"""Inter-token gaps are pooled in float32 blocks of this many values (4 MiB each)."""
MAX_DISTINCT_ERRORS = 20
"""Distinct error messages counted by the accumulator; the rest are counted as 'other'."""

STOPPED = "stopped"
DEADLINE_REACHED = "stopped: run deadline reached (max_duration_s)"
SINK_FAILED = "stopped: the record sink failed"
ENDED_EARLY = "ended early"
"""Start of the error of the requests a phase's `end_early` check cancelled."""


def cancelled_by_the_harness(error: str | None) -> bool:
    """Whether a record's error is the harness's own cancellation (a stop, the run deadline, a
    phase ended early), not a failure of the engine. The summary counts these apart from the
    failures: an engine that answered everything it was sent has no errors, even when the run
    was stopped or a capacity probe was ended early with requests in flight."""
    return error is not None and (
        error == STOPPED or error.startswith(("stopped: ", ENDED_EARLY + ":"))
    )


TAIL_VALUES = 10
"""The minimum sample rule: a q-quantile needs this many values expected beyond it."""


def min_samples(quantile: float) -> int:
    """Values needed before the q-quantile is read as that percentile: ceil(10 / (1 - q)).

    Ten values expected beyond the quantile (p50: 20, p90: 100, p99: 1000): with fewer, the tail
    is a handful of values and the "p99" is in effect the sample's maximum (the relative error
    of the tail fraction is about 1 / sqrt(tail values), some 30% at ten).
    """
    return math.ceil(TAIL_VALUES / (1.0 - quantile) - 1e-9)


def percentile_notes(summary: MetricsSummary | None, kind: Kind = "generate") -> list[str]:
    """Notes for percentiles computed from too few values (the rule of `min_samples`).

    Uses each Percentiles' `count`; summaries stored before counts existed get none. Only the
    latencies a run of `kind` is shown in are noted (a forward run's E2E, not its TTFT)."""
    if summary is None:
        return []
    notes = []
    for spec in LATENCY_SPECS:
        if kind not in spec.kinds:
            continue
        percentiles = getattr(summary, spec.key)
        count = percentiles.count if percentiles is not None else None
        if count is None:
            continue
        short = [q for q in (0.5, 0.9, 0.99) if count < min_samples(q)]
        if short:
            labels = "/".join(f"p{round(q * 100)}" for q in short)
            needs = ", ".join(f"p{round(q * 100)} {min_samples(q)}" for q in short)
            notes.append(
                f"{spec.label} {labels} from {count} values: too few for that percentile "
                f"(needs {needs}: 10 / (1 - q)); read it as a bound near the maximum, not as "
                "that percentile"
            )
    return notes


def percentiles_ms(values_ms: np.ndarray | array | list[float]) -> Percentiles | None:
    """Mean, p50, p90, p99 (numpy `percentile`, method 'linear') of values in ms; None if empty."""
    data = np.asarray(values_ms, dtype=np.float64)
    if data.size == 0:
        return None
    p50, p90, p99 = np.percentile(data, PERCENTILES)
    return Percentiles(
        mean=float(data.mean()), p50=float(p50), p90=float(p90), p99=float(p99), count=data.size
    )


def _order_keys(values: np.ndarray) -> np.ndarray:
    """float32 -> uint32 keys with the same order (sign bit flipped; negatives fully inverted)."""
    bits = values.view(np.uint32)
    return bits ^ np.where(bits >> 31, np.uint32(0xFFFFFFFF), np.uint32(0x80000000))


def _from_order_key(key: int) -> float:
    bits = key ^ 0x80000000 if key & 0x80000000 else key ^ 0xFFFFFFFF
    return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])


def _select_ranks(blocks: list[np.ndarray], ranks: list[int]) -> list[float]:
    """Exact k-th smallest values (0-based `ranks`) of float32 blocks, as if concatenated.

    Pass 1 counts the high 16 bits of each order key; pass 2, per needed high bucket, counts
    the low 16 bits of the values in it. Memory: one block-sized temporary at a time.
    """
    high_counts = np.zeros(1 << 16, dtype=np.int64)
    for block in blocks:
        high_counts += np.bincount(_order_keys(block) >> 16, minlength=1 << 16)
    high_cumulative = np.cumsum(high_counts)
    wanted: dict[int, list[tuple[int, int]]] = {}
    for index, rank in enumerate(ranks):
        bucket = int(np.searchsorted(high_cumulative, rank, side="right"))
        below = int(high_cumulative[bucket - 1]) if bucket else 0
        wanted.setdefault(bucket, []).append((index, rank - below))
    results = [0.0] * len(ranks)
    for bucket, items in wanted.items():
        low_counts = np.zeros(1 << 16, dtype=np.int64)
        for block in blocks:
            keys = _order_keys(block)
            low_counts += np.bincount(keys[(keys >> 16) == bucket] & 0xFFFF, minlength=1 << 16)
        low_cumulative = np.cumsum(low_counts)
        for index, rank_in_bucket in items:
            low = int(np.searchsorted(low_cumulative, rank_in_bucket, side="right"))
            results[index] = _from_order_key((bucket << 16) | low)
    return results


def request_latencies_ms(record: RequestRecord) -> tuple[float, float, float]:
    """(TTFT, TPOT, E2E) of one request in ms, NaN where undefined; the one place these
    per-request formulas live (the accumulator and the app's per-request charts use it).

    TTFT = first chunk - start (NaN without chunks); TPOT = (E2E - TTFT) / (output_tokens - 1),
    NaN for requests with <= 1 output token or no chunks; E2E = end - start.
    """
    e2e_ns = record.end_ns - record.start_ns
    if not record.chunk_ns:
        return math.nan, math.nan, e2e_ns / NS_PER_MS
    ttft_ns = record.chunk_ns[0] - record.start_ns
    output_tokens = record.output_tokens
    tpot_ms = (
        (e2e_ns - ttft_ns) / (output_tokens - 1) / NS_PER_MS if output_tokens > 1 else math.nan
    )
    return ttft_ns / NS_PER_MS, tpot_ms, e2e_ns / NS_PER_MS


class MetricsAccumulator:
    """Incremental summary of request records (vLLM `benchmark_serving` definitions).

    Per measured request (warm-up records, `warmup=True`, are skipped entirely):

    - E2E (end-to-end latency) = `end_ns - start_ns`.
    - TTFT (time to first token) = `chunk_ns[0] - start_ns`; a request with no chunk has none.
    - TPOT (time per output token) = `(E2E - TTFT) / (output_tokens - 1)`, only for requests
      with more than one output token (vLLM leaves the others out).
    - ITL (inter-token latency) = every gap `chunk_ns[i] - chunk_ns[i-1]` between consecutive
      chunks, pooled over all requests. As in vLLM's bench, a chunk carrying k > 1 tokens adds
      one gap (the time before it), not k gaps; TPOT is the per-token figure.

    Failed requests (`error` set) are counted (requests, failed, error rate) and their time span
    counts in the window, but they never enter a latency metric or a throughput numerator. A
    request the harness itself cancelled (`cancelled_by_the_harness`: the run was stopped or hit
    its deadline, a phase was ended early) is counted as `cancelled`, not as failed: it says
    nothing about the engine, so it stays out of the error rate too.

    Storage: per successful request three float64 values (TTFT, TPOT, E2E in ms; NaN where not
    defined) and the pooled ITL gaps as float32 ms (relative rounding <= 6e-8, i.e. 6 ns on a
    100 ms gap) in fixed-size blocks, so memory grows by ~4 bytes per token, never doubles on a
    resize, and the ITL percentiles are selected exactly across the blocks without a copy.
    """

    def __init__(self) -> None:
        self.requests = 0
        self.successful = 0
        self.failed = 0
        self.cancelled = 0
        self.warmup_skipped = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.first_start_ns: int | None = None
        self.last_end_ns: int | None = None
        self.errors: Counter[str] = Counter()
        self._ttft_ms = array("d")
        self._tpot_ms = array("d")
        self._e2e_ms = array("d")
        self._itl_blocks: list[array] = [array("f")]  # only the last one is ever appended to
        self.prefix_tokens = 0
        self.with_prefix = 0  # successful requests that declared a shared prefix
        # Multi-turn: turn index -> [TTFT ms values, E2E ms values, input tokens sum].
        self._turns: dict[int, tuple[array, array, list[int]]] = {}

    def __len__(self) -> int:
        return self.requests

    def add(self, record: RequestRecord) -> None:
        """Fold one record in (warm-up records are skipped and only counted)."""
        if record.warmup:
            self.warmup_skipped += 1
            return
        start_ns = record.start_ns
        end_ns = record.end_ns
        self.requests += 1
        if self.first_start_ns is None or start_ns < self.first_start_ns:
            self.first_start_ns = start_ns
        if self.last_end_ns is None or end_ns > self.last_end_ns:
            self.last_end_ns = end_ns
        error = record.error
        if error is not None:
            if cancelled_by_the_harness(error):
                self.cancelled += 1
            else:
                self.failed += 1
            if error in self.errors or len(self.errors) < MAX_DISTINCT_ERRORS:
                self.errors[error] += 1
            else:
                self.errors["other"] += 1
            return
        self.successful += 1
        output_tokens = record.output_tokens
        self.input_tokens += record.input_tokens
        self.output_tokens += output_tokens
        ttft_ms, tpot_ms, e2e_ms = request_latencies_ms(record)
        self._ttft_ms.append(ttft_ms)
        self._tpot_ms.append(tpot_ms)
        self._e2e_ms.append(e2e_ms)
        if record.prefix_id is not None or record.prefix_tokens:
            self.with_prefix += 1
            self.prefix_tokens += record.prefix_tokens
        if record.turn is not None:
            turn = self._turns.get(record.turn)
            if turn is None:
                turn = self._turns[record.turn] = (array("d"), array("d"), [0])
            turn[0].append(ttft_ms)
            turn[1].append(e2e_ms)
            turn[2][0] += record.input_tokens
        chunk_ns = record.chunk_ns
        if len(chunk_ns) > 1:
            self._add_gaps(chunk_ns)

    def _add_gaps(self, chunk_ns: list[int]) -> None:
        if len(chunk_ns) > 48:  # numpy pays off for long outputs only
            gaps = (np.diff(np.asarray(chunk_ns, dtype=np.int64)) / NS_PER_MS).astype(np.float32)
            block = self._itl_blocks[-1]
            if len(block) + gaps.size > ITL_BLOCK_VALUES:
                block = array("f")
                self._itl_blocks.append(block)
            block.frombytes(gaps.tobytes())
            return
        previous = chunk_ns[0]
        gaps_ms = []
        for t_ns in chunk_ns[1:]:
            gaps_ms.append((t_ns - previous) / NS_PER_MS)
            previous = t_ns
        block = self._itl_blocks[-1]
        if len(block) + len(gaps_ms) > ITL_BLOCK_VALUES:
            block = array("f")
            self._itl_blocks.append(block)
        block.extend(gaps_ms)

    def add_many(self, records: Iterable[RequestRecord]) -> MetricsAccumulator:
        for record in records:
            self.add(record)
        return self

    def merge(self, other: MetricsAccumulator) -> None:
        """Fold another accumulator in (e.g. a run-wide summary from its phases)."""
        self.requests += other.requests
        self.successful += other.successful
        self.failed += other.failed
        self.cancelled += other.cancelled
        self.warmup_skipped += other.warmup_skipped
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        if other.first_start_ns is not None and (
            self.first_start_ns is None or other.first_start_ns < self.first_start_ns
        ):
            self.first_start_ns = other.first_start_ns
        if other.last_end_ns is not None and (
            self.last_end_ns is None or other.last_end_ns > self.last_end_ns
        ):
            self.last_end_ns = other.last_end_ns
        self.errors.update(other.errors)
        self.prefix_tokens += other.prefix_tokens
        self.with_prefix += other.with_prefix
        for index, (ttft, e2e, inputs) in other._turns.items():
            mine = self._turns.setdefault(index, (array("d"), array("d"), [0]))
            mine[0].extend(ttft)
            mine[1].extend(e2e)
            mine[2][0] += inputs[0]
        self._ttft_ms.extend(other._ttft_ms)
        self._tpot_ms.extend(other._tpot_ms)
        self._e2e_ms.extend(other._e2e_ms)
        # Share the other's gap blocks (no copy); both sides seal them by starting new ones.
        self._itl_blocks[-1:-1] = [block for block in other._itl_blocks if len(block)]
        other._itl_blocks.append(array("f"))

    def itl_count(self) -> int:
        return sum(len(block) for block in self._itl_blocks)

    def _itl_percentiles(self) -> Percentiles | None:
        """ITL mean and percentiles over the pooled blocks without concatenating them.

        np.percentile needs one array (a copy as large as the pool, ~180 MB for a one-hour soak
        at 128 tokens); instead the needed order statistics are selected exactly with a two-pass
        radix select over the float32 bit patterns, block by block, then interpolated linearly
        as numpy's default method does.
        """
        blocks = [np.frombuffer(block, dtype=np.float32) for block in self._itl_blocks if block]
        count = sum(block.size for block in blocks)
        if count == 0:
            return None
        mean = sum(float(block.sum(dtype=np.float64)) for block in blocks) / count
        positions = [(count - 1) * q / 100 for q in PERCENTILES]
        ranks = sorted({math.floor(h) for h in positions} | {math.ceil(h) for h in positions})
        values = dict(zip(ranks, _select_ranks(blocks, ranks), strict=True))
        results = []
        for position in positions:
            low, high = math.floor(position), math.ceil(position)
            results.append(values[low] + (position - low) * (values[high] - values[low]))
        return Percentiles(mean=mean, p50=results[0], p90=results[1], p99=results[2], count=count)

    def meeting_slo(self, slo: SLO) -> int:
        """Successful requests meeting every SLO that is set (the goodput numerator).

        As in vLLM, a request without a TPOT (<= 1 output token) meets a TPOT SLO; a request
        without a TTFT (no chunk arrived) fails a TTFT SLO. Cheap enough to call while a phase
        runs (the capacity search's early end reads it).
        """
        ttft = np.frombuffer(self._ttft_ms, dtype=np.float64) if self._ttft_ms else np.empty(0)
        tpot = np.frombuffer(self._tpot_ms, dtype=np.float64) if self._tpot_ms else np.empty(0)
        e2e = self.e2e_ms()
        per_request = {"ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": e2e}
        meets = np.ones(e2e.size, dtype=bool)
        for bound in REQUEST_SLO_BOUNDS:
            limit = getattr(slo, bound.field)
            if limit is None:
                continue
            values = per_request[bound.spec.key]
            within = values <= limit  # NaN (the figure is undefined) compares False
            meets &= (within | np.isnan(values)) if bound.missing_meets else within
        return int(meets.sum())

    def e2e_ms(self) -> np.ndarray:
        return np.frombuffer(self._e2e_ms, dtype=np.float64) if self._e2e_ms else np.empty(0)

    def summary(self, slo: SLO | None = None, gpus: int | None = None) -> MetricsSummary:
        """The summary of everything added so far (can be called repeatedly).

        - duration_s = last `end_ns` - first `start_ns` over measured records (failed included).
        - request_throughput_rps = successful requests / duration_s.
        - output_throughput_tok_s = output tokens of successful requests / duration_s.
        - goodput_rps = successful requests meeting every SLO that is set / duration_s; only
          when `slo.is_set()`. As in vLLM, a request without a TPOT (<= 1 output token) meets a
          TPOT SLO; a request without a TTFT (no chunk arrived) fails a TTFT SLO.
        - error_rate = failed / (requests - cancelled): the share of the requests that ran to an
          answer or an engine error; what the harness cancelled is neither.
        - tok_s_per_user = 1000 / TPOT p50 (ms): the decode speed one user sees, from the
          median request; tok_s_per_user_mean = mean over requests of 1000 / TPOT (ms).
        - output_throughput_tok_s_per_gpu = output_throughput_tok_s / gpus, when `gpus` (the
          GPUs the run used, tensor_parallel_size x replicas) is given.
        A zero duration gives zero throughputs rather than a division error.
        """
        duration_ns = (
            0
            if self.first_start_ns is None or self.last_end_ns is None
            else max(0, self.last_end_ns - self.first_start_ns)
        )
        duration_s = duration_ns / NS_PER_S
        per_s = (1.0 / duration_s) if duration_s > 0 else 0.0
        ttft = np.frombuffer(self._ttft_ms, dtype=np.float64) if self._ttft_ms else np.empty(0)
        tpot = np.frombuffer(self._tpot_ms, dtype=np.float64) if self._tpot_ms else np.empty(0)
        e2e = self.e2e_ms()
        goodput_rps = None
        if slo is not None and slo.is_set():
            goodput_rps = self.meeting_slo(slo) * per_s
        itl_summary = self._itl_percentiles()
        tpot_defined = tpot[~np.isnan(tpot)]
        tpot_summary = percentiles_ms(tpot_defined)
        positive = tpot_defined[tpot_defined > 0]
        output_throughput = self.output_tokens * per_s
        answered = self.requests - self.cancelled
        return MetricsSummary(
            requests=self.requests,
            successful=self.successful,
            failed=self.failed,
            cancelled=self.cancelled,
            duration_s=duration_s,
            request_throughput_rps=self.successful * per_s,
            output_throughput_tok_s=output_throughput,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            goodput_rps=goodput_rps,
            error_rate=self.failed / answered if answered else 0.0,
            ttft_ms=percentiles_ms(ttft[~np.isnan(ttft)]),
            tpot_ms=tpot_summary,
            itl_ms=itl_summary,
            e2e_ms=percentiles_ms(e2e),
            tok_s_per_user=(
                1000.0 / tpot_summary.p50 if tpot_summary and tpot_summary.p50 > 0 else None
            ),
            tok_s_per_user_mean=float(np.mean(1000.0 / positive)) if positive.size else None,
            gpus=gpus or None,
            output_throughput_tok_s_per_gpu=output_throughput / gpus if gpus else None,
            prefix_tokens=self.prefix_tokens,
            prefix_share_of_input_tokens=(
                self.prefix_tokens / self.input_tokens
                if self.with_prefix and self.input_tokens
                else None
            ),
            by_turn=self._by_turn(),
        )

    def _by_turn(self) -> list[TurnMetrics]:
        """Per turn index: successful requests, mean prompt length, TTFT and E2E percentiles."""
        rows = []
        for index in sorted(self._turns):
            ttft_values, e2e_values, inputs = self._turns[index]
            ttft = np.frombuffer(ttft_values, dtype=np.float64)
            count = len(e2e_values)
            rows.append(
                TurnMetrics(
                    turn=index,
                    requests=count,
                    input_tokens_mean=inputs[0] / count if count else 0.0,
                    ttft_ms=percentiles_ms(ttft[~np.isnan(ttft)]),
                    e2e_ms=percentiles_ms(np.frombuffer(e2e_values, dtype=np.float64)),
                )
            )
        return rows


def summarize(
    records: Iterable[RequestRecord], slo: SLO | None = None, gpus: int | None = None
) -> MetricsSummary:
    """Summary of records with the definitions of `MetricsAccumulator` (warm-up excluded)."""
    return MetricsAccumulator().add_many(records).summary(slo, gpus)


def judge_validity(
    summary: MetricsSummary | None,
    rules: ValidityRules,
    phases: Iterable[PhaseResult] = (),
    kind: Kind = "generate",
) -> Validity:
    """VALID, or INVALID with every rule broken as a reason.

    Rules: at least one measured request; not all failed; measured duration >= min_duration_s;
    successful requests >= min_requests (failures have their own rule: a latency sample needs a
    success); error_rate <= max_error_rate. Notes (not reasons: the run stays VALID) name every
    percentile computed from fewer values than `min_samples` asks, the run's and, when it has
    several `phases` (a ladder's stages), each phase's.
    """
    reasons: list[str] = []
    if summary is None or summary.requests == 0:
        reasons.append("no measured requests")
    else:
        if summary.successful == 0:
            reasons.append(f"all {summary.requests} measured requests failed")
        if summary.duration_s < rules.min_duration_s:
            reasons.append(
                f"measured duration {summary.duration_s:.2f} s is below the minimum "
                f"{rules.min_duration_s:g} s"
            )
        if summary.successful < rules.min_requests:
            reasons.append(
                f"{summary.successful} successful requests is below the minimum "
                f"{rules.min_requests}"
            )
        if summary.error_rate > rules.max_error_rate:
            reasons.append(
                f"error rate {summary.error_rate:.2%} ({summary.failed}/{summary.requests}) is "
                f"over the budget {rules.max_error_rate:.2%}"
            )
    status = ValidityStatus.INVALID if reasons else ValidityStatus.VALID
    notes = percentile_notes(summary, kind)
    phases = list(phases)
    if len(phases) > 1:
        notes += [
            f"phase {phase.name}: {note}"
            for phase in phases
            for note in percentile_notes(phase.summary, kind)
        ]
    return Validity(status=status, reasons=reasons, notes=notes)


# --------------------------------------------------------------------------- JSONL records

_REQUIRED_KEYS = ("id", "start_ns", "chunk_ns", "end_ns", "input_tokens", "output_tokens", "error")
_OPTIONAL_KEYS = (
    "chunk_tokens",
    "phase",
    "scheduled_ns",
    "warmup",
    "replica",
    "prefix_id",
    "prefix_tokens",
    "conversation",
    "turn",
)
_KNOWN_KEYS = frozenset(_REQUIRED_KEYS + _OPTIONAL_KEYS)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_record(data: object) -> RequestRecord:
    """Validate one decoded JSON line; ValueError says what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    missing = [key for key in _REQUIRED_KEYS if key not in data]
    if missing:
        raise ValueError(f"missing field(s): {', '.join(missing)}")
    unknown = sorted(set(data) - _KNOWN_KEYS)
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(unknown)}")
    record_id = data["id"]
    if not isinstance(record_id, str | int) or isinstance(record_id, bool):
        raise ValueError("id must be a string")
    for key in ("start_ns", "end_ns"):
        if not _is_int(data[key]) or data[key] < 0:
            raise ValueError(f"{key} must be a non-negative integer (ns)")
    for key in ("input_tokens", "output_tokens"):
        if not _is_int(data[key]) or data[key] < 0:
            raise ValueError(f"{key} must be a non-negative integer")
    start_ns, end_ns = data["start_ns"], data["end_ns"]
    if end_ns < start_ns:
        raise ValueError(f"end_ns ({end_ns}) is before start_ns ({start_ns})")
    chunk_ns = data["chunk_ns"]
    if not isinstance(chunk_ns, list) or not all(_is_int(t) for t in chunk_ns):
        raise ValueError("chunk_ns must be a list of integers (ns)")
    if chunk_ns:
        if chunk_ns[0] < start_ns:
            raise ValueError("chunk_ns[0] is before start_ns")
        if chunk_ns[-1] > end_ns:
            raise ValueError("the last chunk_ns is after end_ns")
        for index in range(1, len(chunk_ns)):
            if chunk_ns[index] < chunk_ns[index - 1]:
                raise ValueError(f"chunks out of order: chunk_ns[{index}] < chunk_ns[{index - 1}]")
    chunk_tokens = data.get("chunk_tokens")
    if chunk_tokens is None:
        chunk_tokens = []
    elif not isinstance(chunk_tokens, list) or not all(_is_int(k) and k >= 0 for k in chunk_tokens):
        raise ValueError("chunk_tokens must be a list of non-negative integers")
    elif chunk_tokens and len(chunk_tokens) != len(chunk_ns):
        raise ValueError(
            f"chunk_tokens has {len(chunk_tokens)} entries but chunk_ns has {len(chunk_ns)}"
        )
    error = data["error"]
    if error is not None and not isinstance(error, str):
        raise ValueError("error must be null or a string")
    scheduled_ns = data.get("scheduled_ns")
    if scheduled_ns is not None and not _is_int(scheduled_ns):
        raise ValueError("scheduled_ns must be null or an integer (ns)")
    warmup = data.get("warmup", False)
    if not isinstance(warmup, bool):
        raise ValueError("warmup must be true or false")
    phase = data.get("phase", "")
    if not isinstance(phase, str):
        raise ValueError("phase must be a string")
    replica = data.get("replica", 0)
    if not _is_int(replica) or replica < 0:
        raise ValueError("replica must be a non-negative integer")
    traffic: dict[str, Any] = {}
    for key in ("prefix_id", "conversation", "turn"):
        value = data.get(key)
        if value is not None and (not _is_int(value) or (key == "turn" and value < 0)):
            raise ValueError(f"{key} must be null or an integer")
        traffic[key] = value
    prefix_tokens = data.get("prefix_tokens", 0)
    if not _is_int(prefix_tokens) or prefix_tokens < 0:
        raise ValueError("prefix_tokens must be a non-negative integer")
    return RequestRecord.model_construct(
        id=str(record_id),
        start_ns=start_ns,
        chunk_ns=chunk_ns,
        chunk_tokens=chunk_tokens,
        end_ns=end_ns,
        input_tokens=data["input_tokens"],
        output_tokens=data["output_tokens"],
        error=error,
        phase=phase,
        scheduled_ns=scheduled_ns,
        warmup=warmup,
        replica=replica,
        prefix_tokens=prefix_tokens,
        **traffic,
    )


def iter_records_jsonl(path: str | Path) -> Iterator[RequestRecord]:
    """Stream records from a JSONL file (blank lines skipped); UserError names file and line.

    Read through bench.core.files: a regular file only, each line at most MAX_LINE_BYTES and nested
    no deeper than MAX_NESTING."""
    from bench.core.files import MAX_LINE_BYTES, decode_text, open_user_file, parse_json, shown_path

    shown = shown_path(path)
    with open_user_file(path, "records file") as handle:
        line_number = 0
        while True:
            try:
                raw = handle.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                raise UserError(
                    f"cannot read records file {shown}: {exc.strerror or exc}"
                ) from None
            if not raw:
                return
            line_number += 1
            where = f"{shown}:{line_number}"
            if len(raw) > MAX_LINE_BYTES:
                raise UserError(f"{where}: line longer than {MAX_LINE_BYTES // 2**20} MB")
            try:
                line = decode_text(raw, where)
            except UserError:
                raise UserError(f"{where}: not UTF-8 text (is this a records file?)") from None
            if not line.strip():
                continue
            try:
                data = parse_json(line, where)
            except UserError as exc:
                raise UserError(str(exc).replace("not valid JSON", "bad JSON", 1)) from None
            try:
                yield _parse_record(data)
            except ValueError as exc:
                raise UserError(f"{where}: {exc}") from None


def read_records_jsonl(path: str | Path) -> list[RequestRecord]:
    """All records of a JSONL file; see `iter_records_jsonl` for the format checks."""
    return list(iter_records_jsonl(path))


PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"


def _answered_ns(sample: PrometheusSample) -> int:
    return sample.t_ns if sample.t_received_ns is None else sample.t_received_ns


def prefix_cache_hit_rate(
    server_metrics: Sequence[PrometheusSample], window_ns: tuple[int, int] | None = None
) -> tuple[float | None, float | None]:
    """(hit rate, query tokens) of the engine's prefix cache from scraped counters.

    Hit rate = increase of `vllm:prefix_cache_hits` / increase of `vllm:prefix_cache_queries`
    (token counts, vLLM v1) between the last sample answered at or before the window start and
    the first sample requested at or after its end (the measured records' span; the whole series
    without a window). A scrape's counters are read somewhere between its request (`t_ns`) and
    its answer (`t_received_ns`, when recorded): only a sample answered before the window holds
    none of its counts, and only one requested after it holds all of them. None when the
    counters are absent or did not move (no queries)."""
    samples = [
        s
        for s in server_metrics
        if PREFIX_CACHE_QUERIES in s.values and PREFIX_CACHE_HITS in s.values
    ]
    if len(samples) < 2:
        return None, None
    samples.sort(key=lambda s: s.t_ns)
    first, last = samples[0], samples[-1]
    if window_ns is not None:
        before = [s for s in samples if _answered_ns(s) <= window_ns[0]]
        after = [s for s in samples if s.t_ns >= window_ns[1]]
        first = before[-1] if before else samples[0]
        last = after[0] if after else samples[-1]
    queries = last.values[PREFIX_CACHE_QUERIES] - first.values[PREFIX_CACHE_QUERIES]
    hits = last.values[PREFIX_CACHE_HITS] - first.values[PREFIX_CACHE_HITS]
    if queries <= 0:
        return None, None
    return hits / queries, queries
