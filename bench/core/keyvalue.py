"""`key=value` options as the CLI (`--engine-arg`, `--option`) and the web form's plan table take
them: one grammar, so `max_num_seqs=256` or `enforce_eager=yes` mean the same thing everywhere.

A value is read as JSON first (numbers, `true`, `null`, `{"a": 1}`), then as a YAML scalar or flow
collection (`yes`/`no`/`on`/`off` are booleans, `[1, 2]` a list), and is kept as text otherwise.
"""

from __future__ import annotations

import json
import re
from typing import Any

from bench.core.errors import UserError

KEY_PATTERN = r"[A-Za-z_][\w.\-]*"
_NEXT_KEY = re.compile(rf"\s*{KEY_PATTERN}\s*=")
_OPENERS, _CLOSERS = "[{(", "]})"


def parse_value(text: str) -> Any:
    """One option value: JSON, else YAML, else the text itself (stripped)."""
    text = text.strip()
    if not text:
        return ""
    from bench.core.files import InputTooComplex, parse_json, parse_yaml, shown_path

    # The bounded parsers: `[[[...` 100,000 deep on a command line is one line, not a
    # RecursionError; a value that is neither JSON nor YAML is text.
    source = f"value {shown_path(text)!r}"
    try:
        return parse_json(text, source)
    except InputTooComplex:
        raise
    except UserError:
        pass
    try:
        return parse_yaml(text, source)
    except InputTooComplex:
        raise
    except UserError:
        return text


def parse_pairs(pairs: list[str], what: str) -> dict[str, Any]:
    """Repeated `key=value` arguments -> dict; UserError names the first malformed one."""
    parsed: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(KEY_PATTERN, key):
            raise UserError(f"{what} {pair.strip()!r} must look like key=value")
        parsed[key] = parse_value(value)
    return parsed


def parse_pairs_text(text: str | None, what: str) -> dict[str, Any]:
    """`key=value, key=value` in one string (the plan table's cell) -> dict."""
    text = (text or "").strip()
    if not text:
        return {}
    return parse_pairs(_split_pairs(text), what)


def _split_pairs(text: str) -> list[str]:
    """Split at commas outside quotes and brackets that a new `key=` follows, so
    `levels=[1, 16], name="a, b=c"` is two pairs."""
    pieces: list[str] = []
    depth, quote, start = 0, "", 0
    for index, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'" and text[:index].rstrip()[-1:] in ("", *"=[{(,:"):
            quote = char  # a quoted value or item; an apostrophe inside a word is text
        elif char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth = max(0, depth - 1)
        elif char == "," and depth == 0 and _NEXT_KEY.match(text, index + 1):
            pieces.append(text[start:index])
            start = index + 1
    pieces.append(text[start:])
    return pieces


def format_pairs(values: dict[str, Any]) -> str:
    """The inverse of `parse_pairs_text`: text stays bare, everything else is written as JSON."""
    return ", ".join(
        f"{key}={value if isinstance(value, str) and _reads_back(value) else json.dumps(value)}"
        for key, value in values.items()
    )


def _reads_back(text: str) -> bool:
    """True when bare `text` parses back to the same string (not `yes`, `1`, `null`, `a, b=`)."""
    return parse_value(text) == text and len(_split_pairs(f"k={text}")) == 1


__all__ = ["format_pairs", "parse_pairs", "parse_pairs_text", "parse_value"]
