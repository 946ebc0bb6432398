"""Intervals for measurements: a run or a group of repeats, summarised with 95% bootstrap
intervals, and two measurements compared as ratios with a faster/slower/indistinguishable verdict.

Why a two-level (hierarchical) bootstrap, and which one
-------------------------------------------------------
A measurement group is R repeats of one config, each a run of n requests. Two sources of
uncertainty add up: request-to-request spread inside a run, and run-to-run spread (engine
start-up, placement, clocks, the scheduler's batching luck) that no number of requests in one run
reveals. Each bootstrap draw therefore resamples at both levels, "strategy 1" of Davison &
Hinkley (Bootstrap Methods and their Application, 1997, section 3.8): first R runs with
replacement from the group, then, inside each drawn run, that run's units with replacement; the
statistic is the median over the drawn runs of the per-run figure, the same statistic as the
point estimate (the median of the repeats). Resampling both levels slightly overstates the
variance; that errs on the side of "indistinguishable", which is the safe side for a verdict.
With one run the outer level is degenerate and the interval is the within-run one alone: it
says nothing about run-to-run spread, and every summary of a single run says so.

The units resampled inside a run depend on the metric:
- latency percentiles (TTFT, TPOT, E2E) resample requests; ITL resamples requests too and pools
  the gaps of the drawn requests (a gap is not independent of its request's other gaps);
- output tok/s resamples time blocks: the measured window is cut into equal blocks
  (RATE_BLOCKS, fewer for short runs), each block's rate counts the tokens whose chunk arrived
  in it, and a draw's rate is the mean over resampled blocks. Resampling requests would hold
  the window fixed and, with fixed output lengths and no failures, give a rate with no variance
  at all; blocks see the throughput wobble over time. Tokens are placed at their chunk times,
  not at request completion, so a single wave (every request sent at once, all finishing
  together) still has a token rate in every block.
- request rate = that token rate / mean output tokens per successful request (the mean from the
  request resample); goodput = request rate x the fraction of resampled requests meeting every
  SLO. (With no output tokens, e.g. forward batches, request rate uses completions per block.)

Percentile intervals are the plain percentile method (2.5th and 97.5th of the draws), seeded
(`seed`, default 0), `bootstrap` draws (default 1000). Every draw's quantile is numpy's default
('linear') on the resampled multiset, computed from counts on the pre-sorted values without
materialising the sample.

Minimum sample rule for a percentile: the q-quantile is reported as that percentile only from
at least `min_samples(q) = ceil(10 / (1 - q))` values, i.e. at least ten values expected beyond
it (p50: 20, p90: 100, p99: 1000). With fewer, the tail beyond it is a handful of values and the
"p99" is in effect the maximum of a small sample; the summary still carries the figure but marks
it `reliable: false` with a note, and validity notes say so (see `percentile_notes`).

A comparison of A with B is the ratio A/B of their statistics in paired bootstrap draws (each
side resampled independently, the same number of draws), with the percentile interval of the
ratios. "A is faster" only when the whole interval is beyond the practical threshold t (default
5%): for a higher-is-better metric lo > 1 + t; for lower-is-better (latencies) hi < 1 / (1 + t);
"slower" mirrors it; otherwise "indistinguishable" (a real but small difference is also
indistinguishable at that threshold). The band is symmetric on a log scale, so comparing B with A
gives the mirrored verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import Field

from bench.core.config import SLO
from bench.core.metric_catalog import LATENCY_SPECS, Better, Metric
from bench.core.metric_catalog import metric as catalogue_metric
from bench.core.metrics import (
    NS_PER_MS,
    NS_PER_S,
    min_samples,
    percentile_notes,
    request_latencies_ms,
)
from bench.core.schema import MetricsSummary, RequestRecord, RunResult
from bench.core.strict import Strict

CONFIDENCE = 0.95
BOOTSTRAP = 1000
SEED = 0
PRACTICAL_THRESHOLD = 0.05
"""Default practical threshold of a verdict: differences within 5% are not called a winner."""
RATE_BLOCKS = 10
"""Time blocks of a run's window for the rate metrics' within-run bootstrap."""
MIN_BLOCK_REQUESTS = 5
"""A block should hold about this many completions on average; shorter runs get fewer blocks."""


Verdict = Literal["faster", "slower", "indistinguishable", "unknown"]


GroupMetric = Metric
"""A metric a group summary and a comparison report: a catalogue entry
(bench.core.metric_catalog)."""

GROUP_METRICS: tuple[GroupMetric, ...] = (
    *(
        catalogue_metric(name)
        for name in ("output_throughput_tok_s", "request_throughput_rps", "goodput_rps")
    ),
    *(Metric(spec, statistic) for spec in LATENCY_SPECS for statistic in ("p50", "p90", "p99")),
)
"""What the bootstrap resamples: the rate metrics and the latency percentiles (not the means)."""
METRICS_BY_NAME = {metric.name: metric for metric in GROUP_METRICS}


# --------------------------------------------------------------------------- per-run samples


@dataclass
class RunSample:
    """One run (or one phase of it) as arrays the bootstrap resamples; internal to the bench.

    `summary_only` samples (a stored result whose per-request records are not at hand) carry
    the summary's figures and no arrays: they contribute to the outer (repeat) level only.
    """

    run_id: str
    phase: str | None
    latencies: dict[str, np.ndarray] = field(default_factory=dict)
    """family -> sorted per-request values (ms) of ttft, tpot, e2e."""
    orders: dict[str, np.ndarray] = field(default_factory=dict)
    """family -> request index of each sorted value (maps request counts onto sorted values)."""
    itl_sorted: np.ndarray | None = None
    itl_request: np.ndarray | None = None
    requests: int = 0
    block_rates: dict[str, np.ndarray] = field(default_factory=dict)
    """output_throughput_tok_s / completions_rps -> per-block rate (per s)."""
    tokens: np.ndarray | None = None
    """Output tokens of each successful request."""
    meets_slo: np.ndarray | None = None
    """Whether each successful request met every SLO set (None without SLOs)."""
    point: dict[str, float] = field(default_factory=dict)
    """metric name -> the run's own figure (its summary, vLLM's definitions)."""
    counts: dict[str, int] = field(default_factory=dict)
    """metric family -> values behind its percentiles."""
    summary_only: bool = False


def _points_from_summary(summary: MetricsSummary) -> dict[str, float]:
    point: dict[str, float] = {}
    for metric in GROUP_METRICS:
        value = metric.read(summary)
        if value is not None:
            point[metric.name] = value
    return point


def run_sample(
    result: RunResult,
    records: Iterable[RequestRecord] | None,
    phase: str | None = None,
    slo: SLO | None = None,
    rates_only: bool = False,
) -> RunSample:
    """The bootstrap's view of one run, or of one of its phases (`phase` = the phase name).

    The point figures are the run's (or phase's) summary; the arrays come from its measured,
    successful records (warm-up excluded, failures excluded from latencies as in the summary).
    Without records (None) the sample is summary-only. `rates_only`: only what the rate
    metrics draw (block rates, tokens, SLO hits; their draws are the same), not the sorted
    latencies and inter-token gaps (most of a sample's time: the report's throughput intervals
    need none of them).
    """
    summary = result.summary
    if phase is not None:
        matching = [p for p in result.phases if p.name == phase]
        if not matching:
            raise ValueError(f"run {result.run_id} has no phase {phase!r}")
        summary = matching[0].summary
    slo = slo if slo is not None else result.config.slo
    sample = RunSample(run_id=result.run_id, phase=phase)
    if summary is not None:
        sample.point = _points_from_summary(summary)
    if records is None:
        sample.summary_only = True
        return sample
    measured = [r for r in records if not r.warmup and (phase is None or r.phase == phase)]
    ok = [r for r in measured if r.error is None]
    sample.requests = len(ok)
    if not measured:
        sample.summary_only = True
        return sample
    latencies = np.array([request_latencies_ms(r) for r in ok], dtype=np.float64).reshape(-1, 3)
    if rates_only:
        sample.block_rates, sample.tokens, sample.meets_slo = _block_rates(
            measured, ok, slo, latencies
        )
        return sample
    for column, family in enumerate(("ttft", "tpot", "e2e")):
        values = latencies[:, column]
        defined = ~np.isnan(values)
        index = np.nonzero(defined)[0]
        ordered = np.argsort(values[defined], kind="stable")
        sample.latencies[family] = values[defined][ordered]
        sample.orders[family] = index[ordered]
        sample.counts[family] = int(defined.sum())
    gaps: list[np.ndarray] = []
    owners: list[np.ndarray] = []
    for index, record in enumerate(ok):
        if len(record.chunk_ns) > 1:
            gap = np.diff(np.asarray(record.chunk_ns, dtype=np.int64)) / NS_PER_MS
            gaps.append(gap)
            owners.append(np.full(gap.size, index, dtype=np.int64))
    if gaps:
        pooled = np.concatenate(gaps)
        order = np.argsort(pooled, kind="stable")
        sample.itl_sorted = pooled[order]
        sample.itl_request = np.concatenate(owners)[order]
    sample.counts["itl"] = 0 if sample.itl_sorted is None else int(sample.itl_sorted.size)
    sample.block_rates, sample.tokens, sample.meets_slo = _block_rates(measured, ok, slo, latencies)
    return sample


def _block_rates(
    measured: list[RequestRecord], ok: list[RequestRecord], slo: SLO | None, latencies: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray | None]:
    """(per-block rates, tokens per request, meets-every-SLO per request or None).

    Blocks cut the measured window (first start to last end) evenly; tokens count where their
    chunk arrived, completions where the request ended."""
    start = min(r.start_ns for r in measured)
    end = max(r.end_ns for r in measured)
    span_ns = max(1, end - start)
    blocks = max(2, min(RATE_BLOCKS, len(ok) // MIN_BLOCK_REQUESTS))
    block_s = span_ns / blocks / NS_PER_S
    chunk_times: list[int] = []
    chunk_counts: list[int] = []
    outputs: list[int] = []
    totals: list[int] = []
    lengths: list[int] = []
    for record in ok:
        # Each request's chunks carry its output_tokens in all (the summary's numerator), in
        # proportion to their token counts; a request without chunks counts at its end.
        times_ = record.chunk_ns or [record.end_ns]
        counts = record.chunk_tokens or [1] * len(times_)
        chunk_times.extend(times_)
        chunk_counts.extend(counts)
        outputs.append(record.output_tokens)
        totals.append(sum(counts) or 1)
        lengths.append(len(counts))
    # count * output_tokens / total, chunk by chunk, as whole arrays: integer products, then
    # one correctly rounded division each, the same floats a per-chunk loop gives (that loop
    # was most of a report's interval time: a run has a million chunks).
    chunk_tokens = (
        np.asarray(chunk_counts, dtype=np.int64)
        * np.repeat(np.asarray(outputs, dtype=np.int64), lengths)
    ) / np.repeat(np.asarray(totals, dtype=np.int64), lengths)
    times = np.asarray(chunk_times, dtype=np.int64)
    which = np.clip(((times - start) * blocks) // span_ns, 0, blocks - 1)
    ends = np.array([r.end_ns for r in ok], dtype=np.int64)
    ended = np.clip(((ends - start) * blocks) // span_ns, 0, blocks - 1)
    rates = {
        "output_throughput_tok_s": (
            np.bincount(which, weights=chunk_tokens, minlength=blocks) / block_s
        ),
        "completions_rps": np.bincount(ended, minlength=blocks) / block_s,
    }
    tokens = np.array([r.output_tokens for r in ok], dtype=np.float64)
    meets = None
    if slo is not None and slo.is_set() and len(ok):
        ttft, tpot, e2e = latencies[:, 0], latencies[:, 1], latencies[:, 2]
        meets = np.ones(len(ok), dtype=bool)
        if slo.ttft_ms is not None:
            meets &= ttft <= slo.ttft_ms
        if slo.tpot_ms is not None:
            meets &= np.isnan(tpot) | (tpot <= slo.tpot_ms)
        if slo.e2e_ms is not None:
            meets &= e2e <= slo.e2e_ms
    return rates, tokens, meets


# --------------------------------------------------------------------------- one draw


def _weighted_quantiles(
    sorted_values: np.ndarray, weights: np.ndarray, qs: Sequence[float]
) -> list[float]:
    """numpy 'linear' quantiles of the multiset holding sorted_values[i] weights[i] times."""
    cumulative = np.cumsum(weights)
    total = int(cumulative[-1]) if cumulative.size else 0
    if total == 0:
        return [math.nan for _ in qs]
    positions = (total - 1) * np.asarray(qs, dtype=np.float64)
    low = np.floor(positions)
    high = np.ceil(positions)
    index = np.searchsorted(cumulative, np.concatenate([low, high]), side="right")
    picked = sorted_values[index]
    low_values, high_values = picked[: len(qs)], picked[len(qs) :]
    return (low_values + (positions - low) * (high_values - low_values)).tolist()


def _draw_run(sample: RunSample, metrics: Sequence[GroupMetric], rng: np.random.Generator):
    """One within-run bootstrap draw of every metric (the point figure for summary-only)."""
    values: dict[str, float] = {}
    if sample.summary_only:
        return {m.name: sample.point.get(m.name, math.nan) for m in metrics}
    request_counts = (
        np.bincount(rng.integers(0, sample.requests, sample.requests), minlength=sample.requests)
        if sample.requests
        else np.zeros(0, dtype=np.int64)
    )
    by_family: dict[str, list[GroupMetric]] = {}
    for metric in metrics:
        by_family.setdefault(metric.family, []).append(metric)
    for family, members in by_family.items():
        if family == "rate":
            values.update(_draw_rates(sample, members, request_counts, rng))
            continue
        if family == "itl":
            if sample.itl_sorted is None:
                quantiles = [math.nan] * len(members)
            else:
                weights = request_counts[sample.itl_request]
                quantiles = _weighted_quantiles(
                    sample.itl_sorted, weights, [m.quantile or 0.5 for m in members]
                )
        else:
            sorted_values = sample.latencies.get(family)
            if sorted_values is None or sorted_values.size == 0:
                quantiles = [math.nan] * len(members)
            else:
                weights = request_counts[sample.orders[family]]
                quantiles = _weighted_quantiles(
                    sorted_values, weights, [m.quantile or 0.5 for m in members]
                )
        for metric, value in zip(members, quantiles, strict=True):
            values[metric.name] = value
    return values


def _draw_rates(
    sample: RunSample,
    members: list[GroupMetric],
    request_counts: np.ndarray,
    rng: np.random.Generator,
) -> dict[str, float]:
    """One draw of the rate metrics (see the module docstring for the estimators)."""
    tokens_rates = sample.block_rates.get("output_throughput_tok_s")
    if tokens_rates is None or tokens_rates.size == 0 or not sample.requests:
        return {m.name: math.nan for m in members}
    blocks = rng.integers(0, tokens_rates.size, tokens_rates.size)
    token_rate = float(tokens_rates[blocks].mean())
    drawn = int(request_counts.sum())
    mean_tokens = float(request_counts @ sample.tokens) / drawn if sample.tokens is not None else 0
    if mean_tokens > 0:
        request_rate = token_rate / mean_tokens
    else:  # no output tokens (forward batches): completions per block
        request_rate = float(sample.block_rates["completions_rps"][blocks].mean())
    values = {"output_throughput_tok_s": token_rate, "request_throughput_rps": request_rate}
    if sample.meets_slo is not None:
        values["goodput_rps"] = request_rate * float(request_counts @ sample.meets_slo) / drawn
    else:
        values["goodput_rps"] = math.nan
    return {m.name: values[m.name] for m in members}


def _group_draws(
    samples: Sequence[RunSample], metrics: Sequence[GroupMetric], bootstrap: int, seed: int
) -> dict[str, np.ndarray]:
    """`bootstrap` two-level draws of the group statistic (median over drawn runs) per metric."""
    rng = np.random.default_rng(seed)
    draws = {m.name: np.empty(bootstrap) for m in metrics}
    runs = len(samples)
    for index in range(bootstrap):
        chosen = rng.integers(0, runs, runs) if runs > 1 else np.zeros(1, dtype=np.int64)
        per_run = [_draw_run(samples[int(i)], metrics, rng) for i in chosen]
        if len(per_run) == 1:
            for name, value in per_run[0].items():
                draws[name][index] = value
            continue
        matrix = np.array([[values[m.name] for m in metrics] for values in per_run])
        for column, value in enumerate(np.median(matrix, axis=0)):
            draws[metrics[column].name][index] = value
    return draws


# --------------------------------------------------------------------------- models


class Interval(Strict):
    """A two-sided percentile-bootstrap interval."""

    low: float
    high: float
    confidence: float = CONFIDENCE


class MetricEstimate(Strict):
    """One metric of a measurement group: the median of the repeats and its interval."""

    metric: str
    label: str
    unit: str
    better: Better
    value: float = Field(description="Median over the repeats of each run's own figure.")
    interval: Interval | None = Field(
        None, description="95% two-level bootstrap interval (None: no records to resample)."
    )
    run_values: list[float] = Field(default_factory=list, description="Each repeat's figure.")
    cv: float | None = Field(
        None, description="Coefficient of variation across repeats (std, ddof 1 / mean)."
    )
    samples: int | None = Field(
        None, description="Values behind a percentile in the smallest repeat (requests or gaps)."
    )
    reliable: bool = Field(
        True, description="False when a percentile has fewer values than min_samples(q)."
    )
    note: str | None = None


class GroupSummary(Strict):
    """A measurement group (R repeats of one config, or one phase of them) with intervals."""

    group_id: str | None = None
    phase: str | None = None
    run_ids: list[str]
    repeats: int
    single_run: bool
    method: str = Field(description="How the intervals were computed, in words.")
    bootstrap: int
    seed: int
    metrics: list[MetricEstimate]
    notes: list[str] = Field(default_factory=list)

    def metric(self, name: str) -> MetricEstimate | None:
        return next((m for m in self.metrics if m.metric == name), None)


class MetricComparison(Strict):
    """A vs B on one metric: the ratio A/B, its interval and the verdict for A."""

    metric: str
    label: str
    unit: str
    better: Better
    a: float
    b: float
    ratio: float | None
    interval: Interval | None
    verdict: Verdict = Field(
        description="For A: faster/slower when the whole interval is beyond the threshold; "
        "indistinguishable otherwise; unknown without an interval."
    )
    significant: bool
    threshold: float
    reliable: bool = Field(
        True,
        description="False when a percentile has fewer values than min_samples(q) on a side "
        "(the figure is then near that side's maximum, not the percentile).",
    )


class GroupComparison(Strict):
    """Two measurements compared metric by metric."""

    a: str
    b: str
    a_runs: int
    b_runs: int
    phase: str | None = None
    threshold: float
    method: str
    metrics: list[MetricComparison]
    notes: list[str] = Field(default_factory=list)

    def metric(self, name: str) -> MetricComparison | None:
        return next((m for m in self.metrics if m.metric == name), None)


# --------------------------------------------------------------------------- summaries


def method_text(samples: Sequence[RunSample]) -> str:
    """The interval method in words, with what it covers for this group."""
    if any(s.summary_only for s in samples) and len(samples) == 1:
        return "single run without per-request records: no interval"
    if len(samples) == 1:
        return (
            "single run: within-run bootstrap only (requests for latencies, time blocks for "
            "rates); run-to-run spread is not in the interval"
        )
    return (
        f"{len(samples)} repeats: two-level bootstrap (repeats, then requests / time blocks "
        "within each), median over repeats"
    )


def _active_metrics(samples: Sequence[RunSample]) -> list[GroupMetric]:
    return [m for m in GROUP_METRICS if all(m.name in s.point for s in samples)]


def summarize_group(
    samples: Sequence[RunSample],
    group_id: str | None = None,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
    metrics: Sequence[str] | None = None,
) -> GroupSummary:
    """Median over the repeats, 95% interval and CV of every metric the runs all have."""
    if not samples:
        raise ValueError("a measurement group needs at least one run")
    chosen = _active_metrics(samples)
    if metrics is not None:
        chosen = [m for m in chosen if m.name in metrics]
    can_resample = not (len(samples) == 1 and samples[0].summary_only)
    draws = _group_draws(samples, chosen, bootstrap, seed) if can_resample else {}
    alpha = (1.0 - CONFIDENCE) / 2
    estimates: list[MetricEstimate] = []
    notes: list[str] = []
    for metric in chosen:
        values = [float(s.point[metric.name]) for s in samples]
        interval = None
        if metric.name in draws:
            finite = draws[metric.name][np.isfinite(draws[metric.name])]
            if finite.size:
                low, high = np.quantile(finite, [alpha, 1.0 - alpha])
                interval = Interval(low=float(low), high=float(high))
        mean = float(np.mean(values))
        cv = float(np.std(values, ddof=1) / mean) if len(values) > 1 and mean else None
        samples_behind = None
        reliable = True
        note = None
        if metric.quantile is not None:
            counts = [s.counts.get(metric.family) for s in samples if not s.summary_only]
            if counts:
                samples_behind = min(c or 0 for c in counts)
                needed = min_samples(metric.quantile)
                if samples_behind < needed:
                    reliable = False
                    note = (
                        f"{metric.label} from {samples_behind} values: fewer than the "
                        f"{needed} a p{round(metric.quantile * 100)} needs (10 / (1 - q)); "
                        "it is close to the sample's maximum, not that percentile"
                    )
                    notes.append(note)
        estimates.append(
            MetricEstimate(
                metric=metric.name,
                label=metric.label,
                unit=metric.unit,
                better=metric.better,
                value=float(np.median(values)),
                interval=interval,
                run_values=values,
                cv=cv,
                samples=samples_behind,
                reliable=reliable,
                note=note,
            )
        )
    if len(samples) == 1:
        notes.insert(0, "single run: " + method_text(samples).split(": ", 1)[-1])
    return GroupSummary(
        group_id=group_id,
        phase=samples[0].phase,
        run_ids=[s.run_id for s in samples],
        repeats=len(samples),
        single_run=len(samples) == 1,
        method=method_text(samples),
        bootstrap=bootstrap,
        seed=seed,
        metrics=estimates,
        notes=notes,
    )


def relative_width(summary: GroupSummary, metric: str) -> float | None:
    """(high - low) / median of one metric's interval; None when it has none."""
    estimate = summary.metric(metric)
    if estimate is None or estimate.interval is None or not estimate.value:
        return None
    return (estimate.interval.high - estimate.interval.low) / abs(estimate.value)


# --------------------------------------------------------------------------- comparisons


def judge(
    ratio_interval: Interval | None, better: Better, threshold: float = PRACTICAL_THRESHOLD
) -> Verdict:
    """The verdict for A from the interval of A/B (see the module docstring)."""
    if ratio_interval is None:
        return "unknown"
    upper, lower = 1.0 + threshold, 1.0 / (1.0 + threshold)
    if ratio_interval.low > upper:
        return "faster" if better == "higher" else "slower"
    if ratio_interval.high < lower:
        return "slower" if better == "higher" else "faster"
    return "indistinguishable"


@dataclass
class GroupDraws:
    """A group's samples with its bootstrap draws of every metric they all have (computed once,
    reused by every comparison the group takes part in)."""

    samples: Sequence[RunSample]
    draws: dict[str, np.ndarray]
    metrics: list[GroupMetric]

    @property
    def resampled(self) -> bool:
        return bool(self.draws)


def group_draws(
    samples: Sequence[RunSample],
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
    metrics: Sequence[str] | None = None,
) -> GroupDraws:
    """Bootstrap draws of a group for `compare_draws` (none for one summary-only run); only of
    `metrics` when given (faster when one metric decides)."""
    if not samples:
        raise ValueError("a measurement group needs at least one run")
    metrics_ = _active_metrics(samples)
    if metrics is not None:
        metrics_ = [m for m in metrics_ if m.name in metrics]
    can = not (len(samples) == 1 and samples[0].summary_only)
    draws = _group_draws(samples, metrics_, bootstrap, seed) if can else {}
    return GroupDraws(samples=samples, draws=draws, metrics=metrics_)


def compare_draws(
    a: GroupDraws,
    b: GroupDraws,
    a_name: str = "A",
    b_name: str = "B",
    threshold: float = PRACTICAL_THRESHOLD,
    metrics: Sequence[str] | None = None,
) -> GroupComparison:
    """A vs B per metric: ratio of the group statistics, interval from the paired draws."""
    if threshold < 0:
        raise ValueError("the practical threshold must be >= 0")
    names = {m.name for m in a.metrics} & {m.name for m in b.metrics}
    chosen = [
        m for m in GROUP_METRICS if m.name in names and (metrics is None or m.name in metrics)
    ]
    alpha = (1.0 - CONFIDENCE) / 2
    rows: list[MetricComparison] = []
    for metric in chosen:
        value_a = float(np.median([s.point[metric.name] for s in a.samples]))
        value_b = float(np.median([s.point[metric.name] for s in b.samples]))
        ratio = value_a / value_b if value_b else None
        interval = None
        if a.resampled or b.resampled:
            # A side without records contributes its point figure to every draw.
            draw_a = a.draws.get(metric.name, np.full(1, value_a))
            draw_b = b.draws.get(metric.name, np.full(1, value_b))
            with np.errstate(divide="ignore", invalid="ignore"):
                ratios = draw_a / draw_b
            finite = ratios[np.isfinite(ratios)]
            if finite.size:
                low, high = np.quantile(finite, [alpha, 1.0 - alpha])
                interval = Interval(low=float(low), high=float(high))
        verdict = judge(interval, metric.better, threshold)
        reliable = metric.quantile is None or all(
            sample.counts.get(metric.family, 0) >= min_samples(metric.quantile)
            for side in (a, b)
            for sample in side.samples
            if not sample.summary_only
        )
        rows.append(
            MetricComparison(
                reliable=reliable,
                metric=metric.name,
                label=metric.label,
                unit=metric.unit,
                better=metric.better,
                a=value_a,
                b=value_b,
                ratio=ratio,
                interval=interval,
                verdict=verdict,
                significant=verdict in ("faster", "slower"),
                threshold=threshold,
            )
        )
    notes = [
        f"{name}: {method_text(side.samples)}"
        for name, side in ((a_name, a), (b_name, b))
        if len(side.samples) == 1
    ]
    return GroupComparison(
        a=a_name,
        b=b_name,
        a_runs=len(a.samples),
        b_runs=len(b.samples),
        phase=a.samples[0].phase,
        threshold=threshold,
        method="ratio A/B of the group statistics in paired bootstrap draws, each side "
        "resampled on its own (two-level with repeats, within-run only for a single run); "
        f"verdict beyond a {threshold:.0%} practical threshold",
        metrics=rows,
        notes=notes,
    )


def compare_samples(
    a: Sequence[RunSample],
    b: Sequence[RunSample],
    a_name: str = "A",
    b_name: str = "B",
    threshold: float = PRACTICAL_THRESHOLD,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
    metrics: Sequence[str] | None = None,
) -> GroupComparison:
    """A vs B per metric (see the module docstring); the two sides get different seeds, being
    independent measurements."""
    return compare_draws(
        group_draws(a, bootstrap, seed, metrics),
        group_draws(b, bootstrap, seed + 1, metrics),
        a_name,
        b_name,
        threshold,
        metrics,
    )


# --------------------------------------------------------------------------- for the advisor


@dataclass
class MeasuredRun:
    """One run as the advisor holds it: the result, its measured records when at hand (the
    store's `iter_records`, or `bench.orchestrate.compare.reference_records` for data/reference),
    and the phase the evidence is about (a ladder stage's name; None = the whole run)."""

    result: RunResult
    records: Sequence[RequestRecord] | None = None
    phase: str | None = None


class CandidateVerdict(Strict):
    """The leading candidate against one alternative on one metric."""

    leader: str
    alternative: str
    metric: str
    better: Better
    leader_value: float
    alternative_value: float
    ratio: float | None = Field(description="leader / alternative (median of repeats each).")
    interval: Interval | None = Field(description="95% bootstrap interval of the ratio.")
    verdict: Verdict = Field(description="For the leader: faster, slower, indistinguishable.")
    indistinguishable: bool = Field(
        description="True when the interval does not clear the practical threshold (the two "
        "are a tie on this evidence: rank them on the next criterion)."
    )
    threshold: float
    leader_repeats: int
    alternative_repeats: int
    single_run: bool = Field(description="Either side is a single run (within-run interval).")
    method: str
    notes: list[str] = Field(default_factory=list)


def candidate_verdict(
    leader: Sequence[MeasuredRun],
    alternative: Sequence[MeasuredRun],
    metric: str = "output_throughput_tok_s",
    threshold: float = PRACTICAL_THRESHOLD,
    leader_name: str | None = None,
    alternative_name: str | None = None,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
) -> CandidateVerdict:
    """Is the leader really ahead of the alternative on `metric`? The ratio leader/alternative
    with its interval (two-level bootstrap with repeats, within-run for single runs) and the
    verdict beyond `threshold`. `verdict == "unknown"` (and `indistinguishable` False) when
    neither side has records to resample: the caller must say so rather than call a winner."""
    if metric not in METRICS_BY_NAME:
        raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS_BY_NAME)}")
    if not leader or not alternative:
        raise ValueError("each side needs at least one run")
    leader_name = leader_name or leader[0].result.config.backend
    alternative_name = alternative_name or alternative[0].result.config.backend
    samples_a = [run_sample(run.result, run.records, run.phase) for run in leader]
    samples_b = [run_sample(run.result, run.records, run.phase) for run in alternative]
    comparison = compare_samples(
        samples_a, samples_b, leader_name, alternative_name, threshold, bootstrap, seed, [metric]
    )
    row = comparison.metric(metric)
    if row is None:
        raise ValueError(f"{metric} is not in both sides' summaries")
    return CandidateVerdict(
        leader=leader_name,
        alternative=alternative_name,
        metric=metric,
        better=row.better,
        leader_value=row.a,
        alternative_value=row.b,
        ratio=row.ratio,
        interval=row.interval,
        verdict=row.verdict,
        indistinguishable=row.verdict == "indistinguishable",
        threshold=threshold,
        leader_repeats=len(leader),
        alternative_repeats=len(alternative),
        single_run=len(leader) == 1 or len(alternative) == 1,
        method=comparison.method,
        notes=comparison.notes,
    )


__all__ = [
    "BOOTSTRAP",
    "CONFIDENCE",
    "GROUP_METRICS",
    "PRACTICAL_THRESHOLD",
    "CandidateVerdict",
    "GroupComparison",
    "GroupDraws",
    "GroupMetric",
    "GroupSummary",
    "Interval",
    "MeasuredRun",
    "MetricComparison",
    "MetricEstimate",
    "RunSample",
    "candidate_verdict",
    "compare_draws",
    "compare_samples",
    "group_draws",
    "judge",
    "min_samples",
    "percentile_notes",
    "relative_width",
    "run_sample",
    "summarize_group",
]
