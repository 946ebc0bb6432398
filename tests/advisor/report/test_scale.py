"""A report over one run of 1,000,000 request records and 50,000 telemetry samples: every format
renders, the charts stay bounded, the HTML stays small. The timings are printed (a benchmark, not
an assertion): run with `-s` to see them."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from advisor.report import FORMATS, generate
from advisor.report.model import MAX_CHART_POINTS
from bench.core.schema import RequestRecord, TelemetrySample
from bench.storage.store import ResultStore
from tests.advisor.report.conftest import PROFILE, synthetic_run

RECORDS = 1_000_000
TELEMETRY_SAMPLES = 50_000
BATCH = 50_000
MAX_HTML_BYTES = 5_000_000
pytestmark = pytest.mark.slow


def generated_records(origin_ns: int, seed: int = 0):
    """TEST DATA: real RequestRecords with generated (not measured) times, in batches: one
    request every 0.5 ms, lognormal TTFT, 16 tokens in two chunks, 1% failures."""
    rng = np.random.default_rng(seed)
    for first in range(0, RECORDS, BATCH):
        index = np.arange(first, min(first + BATCH, RECORDS))
        start = origin_ns + index * 500_000
        ttft = (rng.lognormal(mean=3.0, sigma=0.5, size=index.size) * 1e6).astype(np.int64)
        decode = (rng.lognormal(mean=4.0, sigma=0.3, size=index.size) * 1e6).astype(np.int64)
        failed = rng.random(index.size) < 0.01
        yield [
            RequestRecord(
                id=f"r{i}",
                start_ns=int(s),
                chunk_ns=[int(s + t), int(s + t + d)],
                chunk_tokens=[1, 15],
                end_ns=int(s + t + d),
                input_tokens=32,
                output_tokens=16,
                error="TEST DATA: generated failure" if bad else None,
                phase="pulse-burst" if (i // 100_000) % 3 == 1 else "pulse-baseline",
            )
            for i, s, t, d, bad in zip(
                index.tolist(),
                start.tolist(),
                ttft.tolist(),
                decode.tolist(),
                failed.tolist(),
                strict=True,
            )
        ]


def test_a_million_records_report_in_every_format(tmp_path: Path) -> None:
    from advisor.report.build import assemble_report

    run, _ = synthetic_run("pytorch", "pulse", seed=11)
    origin = run.telemetry.samples[0].t_ns
    run.telemetry.samples = [
        TelemetrySample(
            t_ns=origin + i * 20_000_000,
            host_rss_bytes=int(1.2e9 + (i % 1000) * 1e6),
            gpu_memory_used_bytes=None,
            power_w=None,
        )
        for i in range(TELEMETRY_SAMPLES)
    ]
    store_path = tmp_path / "big.sqlite"
    store = ResultStore(store_path)
    started = time.perf_counter()
    store.create_run(run)
    store.update_run(run)
    for batch in generated_records(origin):
        store.add_records(run.run_id, batch)
    stored_s = time.perf_counter() - started
    assert store.count_records(run.run_id) == RECORDS
    store.close()

    started = time.perf_counter()
    report = assemble_report(PROFILE, [run.run_id], str(store_path))
    built_s = time.perf_counter() - started
    started = time.perf_counter()
    written = generate(report, tmp_path / "out", FORMATS, stem="big")
    rendered_s = time.perf_counter() - started

    assert set(written) == set(FORMATS)
    assert report.runs[0].records == RECORDS
    charts = {chart.id: chart for chart in report.charts}
    for chart_id in ("latency-distribution", "memory-over-time", "pulse-recovery"):
        assert charts[chart_id].available, charts[chart_id].absent_reason
    for chart in report.charts:
        assert sum(len(series.x) for series in chart.series) <= MAX_CHART_POINTS
    size_mb = {name: path.stat().st_size / 1e6 for name, path in written.items()}
    html_bytes = written["html"].stat().st_size
    assert html_bytes < MAX_HTML_BYTES
    assert written["pdf"].read_bytes().startswith(b"%PDF")
    print(
        f"\n{RECORDS:,} records + {TELEMETRY_SAMPLES:,} telemetry samples: stored in "
        f"{stored_s:.1f} s, report built in {built_s:.1f} s, four formats rendered in "
        f"{rendered_s:.1f} s; sizes (MB): "
        + ", ".join(f"{name} {size:.2f}" for name, size in size_mb.items())
    )
