"""The jinja2 environment the formatters share: template loading, autoescape and number filters.

HTML templates are autoescaped (profile text is user input); Markdown templates escape through
the `md` filter instead, since Markdown has its own special characters.
"""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path
from typing import Any

from advisor.report.model import SECTIONS

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
MISSING = "—"


def format_number(value: Any) -> str:
    """Readable figure with precision by size; "—" for a missing value (same in every format)."""
    if value is None or isinstance(value, bool):
        return MISSING
    if not isinstance(value, int | float):
        return str(value)
    if not math.isfinite(value):
        return MISSING
    magnitude = abs(value)
    if isinstance(value, int) or magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude == 0:
        return "0"
    return f"{value:.3g}"


def format_percent(fraction: Any) -> str:
    """A 0-1 fraction as a percentage ("0.50%")."""
    if fraction is None or not isinstance(fraction, int | float):
        return MISSING
    return f"{fraction * 100:.2f}%"


_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>|#])")


def markdown_escape(value: Any) -> str:
    """Text safe inside Markdown (tables included): specials escaped, newlines flattened, and
    `<`/`>` written as entities so raw HTML in a profile never renders on a code host."""
    text = "" if value is None else str(value)
    text = text.replace("\r\n", "\n").replace("\n", " ")
    text = text.replace("&", "&amp;")
    text = _MD_SPECIAL.sub(
        lambda m: {"<": "&lt;", ">": "&gt;"}.get(m.group(1), "\\" + m.group(1)), text
    )
    return text


def markdown_code(value: Any) -> str:
    """Inline code span that survives backticks and pipes inside table cells."""
    text = ("" if value is None else str(value)).replace("\n", " ").replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def css_string(value: Any) -> Any:
    """A quoted CSS string literal: anything but plain letters, digits and spaces is written as
    a CSS hex escape, so no value can close the string or the <style> element."""
    from markupsafe import Markup

    text = "" if value is None else str(value)
    escaped = "".join(
        char if char.isascii() and (char.isalnum() or char == " ") else f"\\{ord(char):x} "
        for char in text
    )
    return Markup(f'"{escaped}"')


def _flat_items(data: Any) -> list[tuple[str, str]]:
    """Nested configuration as (dotted key, value) rows for a two-column table."""
    from advisor.report.build import flatten

    return [(item.key, item.value) for item in flatten(data)]


@cache
def environment(kind: str):  # -> jinja2.Environment (imported lazily: keeps CLI start fast)
    """A jinja2 environment; kind = "html" (autoescape on) or "markdown" (autoescape off)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=kind == "html",
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = format_number
    env.filters["pct"] = format_percent
    env.filters["md"] = markdown_escape
    env.filters["mdcode"] = markdown_code
    env.filters["css_string"] = css_string
    env.filters["flat"] = _flat_items
    env.globals["SECTIONS"] = dict(SECTIONS)
    return env
