"""How the project writes a number: sensible digits for its size, a unit, never scientific notation.

One rule for every report format, for text the builder writes into sentences (`4,890 tok/s`,
`13.5 GB`, `8.81 ms`, `0.0795 J`) and for the app's pages (ui/ imports these; this module imports
nothing of the app), so no table shows `1.031e+04` or `4889.7054` and a figure reads the same on a
page and in the report.
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "—"
"""Shown only where there is no value (a figure not measured, a field not given)."""


def number(value: Any) -> str:
    """A figure with precision by size: thousands separated at 100 and up, three significant
    digits below (never an exponent); MISSING for None, NaN and infinities.

    A float with a whole value is written as a whole number (`5 s`, `22 req/s`, `64 tokens`):
    such floats are set or counted values (a duration, a planned rate, a length, a count pandas
    made a float), never measured to that precision, and `5.00 s` would claim digits nobody
    measured."""
    if value is None or isinstance(value, bool):
        return MISSING
    if not isinstance(value, int | float):
        return str(value)
    if not math.isfinite(value):
        return MISSING
    magnitude = abs(value)
    if isinstance(value, int) or magnitude >= 100 or value == int(value):
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude == 0:
        return "0"
    # Three significant digits in fixed notation; below a millionth it is noise for a report.
    digits = min(2 - math.floor(math.log10(magnitude)), 8)
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".")
    return text if float(text) != 0 else ("<0.000001" if value > 0 else ">-0.000001")


def figure(value: Any, unit: str = "") -> str:
    """`number(value)` followed by its unit (`7,179 tok/s`); MISSING alone when absent."""
    text = number(value)
    if text == MISSING or not unit:
        return text
    return f"{text} {unit}"


def fixed(value: float | None, unit: str = "", digits: int = 1) -> str:
    """A figure with a caller-chosen number of decimals (`1,234.5 ms`, `0.912 req/s`), for
    figures whose precision is the caller's (a capacity to 3 decimals, a memory in 2);
    MISSING for a missing value (never a misleading zero)."""
    if value is None or isinstance(value, bool) or not math.isfinite(value):
        return MISSING
    return f"{value:,.{digits}f} {unit}".strip()


def percent(fraction: Any, digits: int | None = None) -> str:
    """A 0-1 fraction as a percentage: `0.5%`, `12%`, `0.03%`; MISSING when absent."""
    if fraction is None or isinstance(fraction, bool) or not isinstance(fraction, int | float):
        return MISSING
    if not math.isfinite(fraction):
        return MISSING
    value = fraction * 100
    if digits is None:
        digits = 0 if abs(value) >= 10 or value == int(value) else (1 if abs(value) >= 1 else 2)
    return f"{value:.{digits}f}%"


def scalar_text(value: Any) -> str:
    """One readable line from a scalar or a list, for key/value tables: yes/no for booleans,
    `number()` for figures, '' for None."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float):
        return number(value)
    if isinstance(value, list | tuple):
        return "; ".join(scalar_text(inner) for inner in value)
    return str(value)
