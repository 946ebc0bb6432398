"""The jinja2 environment the formatters share: template loading, autoescape and number filters.

HTML templates are autoescaped (profile text is user input); Markdown templates escape through
the `md` filter instead, since Markdown has its own special characters.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from advisor.report import numbers
from advisor.report.model import FORWARD_SPEED_COLUMNS, RESOURCE_COLUMNS, SECTIONS, SPEED_COLUMNS

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
MISSING = numbers.MISSING


def format_number(value: Any) -> str:
    """Readable figure with precision by size; "—" for a missing value (same in every format)."""
    return numbers.number(value)


def format_percent(fraction: Any) -> str:
    """A 0-1 fraction as a percentage ("0.5%", "12%")."""
    return numbers.percent(fraction)


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
    from advisor.report.display import flatten

    return [(item.key, item.value) for item in flatten(data)]


def as_sentence(text: Any) -> str:
    """Text ending in exactly one full stop (facts are written without one)."""
    value = "" if text is None else str(text).rstrip()
    return value if value.endswith((".", "!", "?")) else value + "."


def when(iso_time: Any) -> str:
    """`2026-12-01T13:30:07+00:00` -> `2026-12-01 13:30 UTC` (the stored value stays ISO)."""
    text = "" if iso_time is None else str(iso_time)
    if len(text) >= 16 and text[10] == "T" and text.endswith(("+00:00", "Z")):
        return f"{text[:10]} {text[11:16]} UTC"
    return text


def _framework_label(name: Any) -> str:
    from advisor.report.decision import framework_label

    return framework_label(None if name is None else str(name))


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
    env.filters["framework"] = _framework_label
    env.filters["sentence"] = as_sentence
    env.filters["when"] = when
    env.globals["SECTIONS"] = dict(SECTIONS)
    env.globals["SPEED_COLUMNS"] = SPEED_COLUMNS
    env.globals["FORWARD_SPEED_COLUMNS"] = FORWARD_SPEED_COLUMNS
    env.globals["RESOURCE_COLUMNS"] = RESOURCE_COLUMNS
    return env
