"""The latency percentile model shared by metric summaries and pattern reports.

It lives apart from bench/core/schema.py so that bench/core/pattern_reports.py (imported by the
schema for `RunResult.pattern_report`) can use it without importing the schema back.
"""

from __future__ import annotations

from pydantic import Field

from bench.core.strict import Strict


class Percentiles(Strict):
    """Mean and percentiles of one latency metric, in milliseconds."""

    mean: float
    p50: float
    p90: float
    p99: float
    count: int | None = Field(
        None, description="Values behind them (requests, or gaps for ITL); None in old results."
    )
