"""The one number formatter (advisor.report.numbers) that the report and the app's pages share,
on the figures of the shipped runs (data/reference)."""

from __future__ import annotations

import math

import pytest

from advisor.report.numbers import MISSING, figure, fixed, number
from advisor.sizing.measured import read_reference_folder
from bench.core.metric_catalog import METRICS_BY_NAME, read_all
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR


@pytest.fixture(scope="module")
def shipped_runs():
    return [
        run for runs in read_reference_folder(SHIPPED_REFERENCE_DIR).runs.values() for run in runs
    ]


def test_every_measured_figure_of_the_shipped_runs_reads_back_to_its_value(shipped_runs) -> None:
    """Three significant digits (whole numbers from 100 up), no exponent, the catalogue's unit."""
    checked = 0
    for run in shipped_runs:
        for name, value in read_all(run.summary, run).items():
            unit = METRICS_BY_NAME[name].unit
            text = figure(value, unit)
            shown = text.removesuffix(f" {unit}") if unit else text
            assert "e" not in shown and shown != MISSING, (name, value, text)
            read_back = float(shown.replace(",", "").lstrip("<>"))
            if abs(value) >= 100 or value == int(value):
                assert abs(read_back - value) <= 0.5, (name, value, text)
            elif value != 0:
                assert abs(read_back - value) <= 0.005 * abs(value), (name, value, text)
            checked += 1
    assert checked > 500  # every shipped run's catalogued figures, not a handful


def test_whole_valued_floats_of_the_shipped_runs_read_as_whole_numbers(shipped_runs) -> None:
    """Where the app's old `format_figure` and the report's `number` differed on the shipped runs:
    set and counted values that are floats (a 5 s duration, a 22 req/s planned rate, a count
    pandas made a float). Both now write them whole, as the app did (`5.00 s` claimed digits
    nobody measured); measured figures are written as the report always wrote them."""
    plans = {run.config.load.plan_words(figure) for run in shipped_runs}
    assert any("22 req/s" in text for text in plans), plans
    # 31.05 req/s (27 x 1.15, a check rate) is not whole: three digits, as the report writes it.
    assert "31.0 req/s" in plans and not any(
        text.endswith(".0 req/s") for text in plans - {"31.0 req/s"}
    )
    durations = {
        figure(run.config.load.duration_s, "s")
        for run in shipped_runs
        if getattr(run.config.load, "duration_s", None)
    }
    assert "5 s" in durations and not any(text.endswith(".00 s") for text in durations)
    assert [number(v) for v in (32.0, 5.0, 0.0, -3.0, 22.4, 1.5)] == [
        "32",
        "5",
        "0",
        "-3",
        "22.4",
        "1.50",
    ]
    # Not finite is not a figure: the app wrote `∞ ms` for an infinity; both write MISSING.
    assert figure(math.inf, "ms") == MISSING and figure(math.nan, "ms") == MISSING


def test_fixed_decimals_as_the_caller_asks() -> None:
    assert fixed(1234.56, "ms") == "1,234.6 ms"
    assert fixed(0.91234, "req/s", 3) == "0.912 req/s"
    assert fixed(12.0, "GB", 0) == "12 GB"
    assert [fixed(v, "GB") for v in (None, math.nan)] == [MISSING, MISSING]
