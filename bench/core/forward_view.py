"""A run shown in its own units: the headline figures of a forward run (samples/s, batches/s,
batch latency, GPU time per million samples) and of a generate run, read from the metric
catalogue (`RUN_VIEW_METRICS`), for the CLI and any text view that lists runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.core.metric_catalog import RUN_VIEW_METRICS, metric

if TYPE_CHECKING:
    from bench.core.schema import RunResult


def _figure(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def headline_throughput(run: RunResult) -> str:
    """The one throughput a run list shows: `176.0 samples/s` for a forward run, `812.3 tok/s`
    (output) for a generate run, `-` without a summary."""
    if run.summary is None:
        return "-"
    headline = metric(RUN_VIEW_METRICS[run.config.workload.kind][0])
    return f"{_figure(headline.read(run.summary, run))} {headline.unit}"


def forward_summary_lines(run: RunResult) -> list[str]:
    """A forward run's summary, line by line: batches and samples, throughput per sample (and
    per input token for text encoders), the cost per million samples, the batch latency
    percentiles (a percentile from fewer values than `min_samples` asks is starred, as the
    validity note says). Empty without a summary."""
    from bench.core.metrics import min_samples

    summary = run.summary
    if summary is None:
        return []
    workload = run.config.workload
    batch = getattr(workload, "batch_size", 1)

    def read(name: str) -> float | None:
        return metric(name).read(summary, run)

    samples = metric("sample_throughput_per_s")
    lines = [
        f"batches {summary.successful}/{summary.requests} of {batch} samples"
        + (f" ({summary.cancelled} cancelled by the harness)" if summary.cancelled else "")
        + f" in {summary.duration_s:.1f} s: {summary.request_throughput_rps:.2f} batches/s, "
        f"{_figure(read(samples.name))} {samples.unit}"
    ]
    tokens = read("input_token_throughput_tok_s")
    if tokens is not None:
        lines.append(f"input tokens {_figure(tokens)} tok/s (samples/s x sequence length)")
    cost = metric("gpu_s_per_million_samples")
    if run.environment is not None and run.environment.primary_gpu_name:
        lines.append(f"{cost.words} {_figure(read(cost.name))} {cost.unit}")
    latency = summary.e2e_ms
    if latency is not None:
        cells = [
            f"{value:.2f}"
            + ("" if latency.count is None or latency.count >= min_samples(q) else "*")
            for q, value in ((0.5, latency.p50), (0.9, latency.p90), (0.99, latency.p99))
        ]
        lines.append(
            f"batch latency (ms) mean {latency.mean:.2f}  p50 {cells[0]}  p90 {cells[1]}  "
            f"p99 {cells[2]}"
        )
    return lines
