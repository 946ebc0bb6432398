"""Display helpers of the report's key/value tables: nested data as `a.b[0].c` rows, keys as
labels with their unit, and this checkout's absolute paths made relative."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from advisor.report.model import KeyValue
from advisor.report.numbers import scalar_text
from advisor.sizing import measured


def flatten(data: Any, prefix: str = "", skip_none: bool = True) -> list[KeyValue]:
    """Nested dicts/lists as `a.b[0].c = value` rows, for display tables."""
    rows: list[KeyValue] = []
    if isinstance(data, Mapping):
        for key, inner in data.items():
            rows += flatten(inner, f"{prefix}.{key}" if prefix else str(key), skip_none)
    elif isinstance(data, list) and data and any(isinstance(i, Mapping | list) for i in data):
        for index, inner in enumerate(data):
            rows += flatten(inner, f"{prefix}[{index}]", skip_none)
    elif data is None and skip_none:
        return rows
    elif data == [] or data == {}:
        rows.append(KeyValue(key=prefix or "value", value="none"))
    else:
        value = (
            ", ".join(scalar_text(item) for item in data)
            if isinstance(data, list)
            else scalar_text(data)
        )
        rows.append(KeyValue(key=prefix or "value", value=value))
    return rows


KEY_UNITS = (
    ("_ms_per_token", " (ms per token)"),
    ("_tok_s_per_sequence", " (tok/s per sequence)"),
    ("_tb_s", " (TB/s)"),
    ("_gb", " (GB)"),
    ("_ms", " (ms)"),
    ("_bytes", " (bytes)"),
    ("_pct", " (%)"),
    ("_b", " (billions)"),
)


def readable_key(key: str) -> str:
    """`context.engine_limits.vllm` -> `Context · engine limits · vllm`; `weights_gb` ->
    `Weights (GB)`: a label for a key/value table, unit in brackets."""
    parts = []
    for part in key.split("."):
        unit = ""
        for suffix, words in KEY_UNITS:
            if part.endswith(suffix) and len(part) > len(suffix):
                part, unit = part[: -len(suffix)], words
                break
        parts.append(part.replace("_", " ") + unit)
    text = " · ".join(parts)
    return text[:1].upper() + text[1:]


def readable(items: list[KeyValue]) -> list[KeyValue]:
    return [KeyValue(key=readable_key(item.key), value=item.value) for item in items]


REPO_ROOT = measured.DEFAULT_REFERENCE_DIR.resolve().parents[1]


def repo_relative(text: str) -> str:
    """Advisor text that names a file of this checkout by its absolute path, with the path
    made relative (`data/reference/h200_...json`): the report is read on other machines."""
    return text.replace(f"{REPO_ROOT}/", "")
