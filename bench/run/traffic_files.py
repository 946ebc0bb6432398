"""Readers of the user's traffic files: request traces (Mooncake JSONL, CSV) and prompt files.

Every way a file can be wrong (missing, a folder, too large, binary, a missing column, a
non-numeric or negative value, timestamps going backwards) is one UserError line naming the
file and the line. Files are read through the shared bounded reader (bench/core/files.py) with a
size cap of their own (`MAX_TRAFFIC_FILE_BYTES`); the whole file is parsed before a run starts.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.core.config import PromptFile, ReplayLoad
from bench.core.errors import UserError
from bench.core.limits import LIMITS_DOC, MAX_HASH_IDS, MAX_TOKENS

MAX_TRAFFIC_FILE_BYTES = 256 * 1024 * 1024
"""Trace and prompt files larger than this are refused (a cap, not a streaming reader: the
whole file is held in memory while it is parsed)."""
MAX_ROWS = 2_000_000
"""Rows at most (a trace longer than this is cut with max_requests or split by the user)."""


@dataclass(frozen=True)
class TraceRow:
    """One request of a trace: send time (ms from the trace's first row), lengths, blocks."""

    t_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class PromptRow:
    """One prompt of a prompt file: text or chat messages, optionally its output length."""

    text: str | None
    messages: tuple[dict[str, str], ...] | None
    output_tokens: int | None


def read_bounded_bytes(path: str | Path, what: str) -> bytes:
    """The file's bytes through the shared bounded reader (bench/core/files.py: a regular file only,
    never a FIFO or device, at most MAX_TRAFFIC_FILE_BYTES); UserError otherwise."""
    from bench.core.files import read_user_bytes

    return read_user_bytes(path, what, MAX_TRAFFIC_FILE_BYTES)


def read_bounded_text(path: str | Path, what: str) -> str:
    """UTF-8 text of a bounded file; binary content (NUL bytes, invalid UTF-8) is a UserError."""
    raw = read_bounded_bytes(path, what)
    if b"\x00" in raw[:65536]:
        raise UserError(f"{what} {path}: binary data (NUL bytes), not a text file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{what} {path}: not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x})"
        ) from None
    if not text.strip():
        raise UserError(f"{what} {path} is empty")
    return text


def file_sha256(path: str | Path) -> str:
    """Content hash of a (bounded) traffic file, stored with the run beside its path."""
    return hashlib.sha256(read_bounded_bytes(path, "file")).hexdigest()


def _tokens(value: object, where: str, name: str) -> int:
    """A token count of a row: a whole number from 0 to MAX_TOKENS (bench/core/limits.py); a
    row asking for 1e9 tokens would otherwise build a prompt of gigabytes, or decode for hours."""
    count = _count(value, where, name)
    if count > MAX_TOKENS:
        raise UserError(f"{where}: {name} {count:,} is above the {MAX_TOKENS:,}-token limit")
    return count


def _count(value: object, where: str, name: str) -> int:
    """A non-negative whole count from JSON/CSV text."""
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise UserError(f"{where}: {name} {value!r} is not a number") from None
    if not math.isfinite(number) or number < 0 or number != int(number):
        raise UserError(f"{where}: {name} {value!r} is not a whole number >= 0")
    return int(number)


def _check_order(times: list[float], where_of: list[str]) -> None:
    for index in range(1, len(times)):
        if times[index] < times[index - 1]:
            raise UserError(
                f"{where_of[index]}: timestamp goes backwards ({times[index]:g} after "
                f"{times[index - 1]:g}); sort the trace by time"
            )


def _json_lines(text: str, source: str) -> Iterator[tuple[str, Any]]:
    """(where, value) of each non-blank JSONL line, parsed by the shared bounded parser
    (bench/core/files.parse_json: one line for bad JSON or nesting past its limit)."""
    from bench.core.files import parse_json

    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            where = f"{source} line {number}"
            yield where, parse_json(line, where)


def read_mooncake(path: str | Path, max_rows: int | None = None) -> list[TraceRow]:
    """Mooncake JSONL: one object per line with `timestamp` (ms), `input_length`,
    `output_length` and optional `hash_ids` (list of ints, one per prompt block)."""
    text = read_bounded_text(path, "trace")
    rows: list[TraceRow] = []
    times: list[float] = []
    wheres: list[str] = []
    for where, item in _json_lines(text, f"trace {path}"):
        if not isinstance(item, dict):
            raise UserError(f"{where}: expected a JSON object")
        for key in ("timestamp", "input_length", "output_length"):
            if key not in item:
                raise UserError(f"{where}: missing field {key!r} (Mooncake trace layout)")
        t_ms = float(_count(item["timestamp"], where, "timestamp"))
        hash_ids = item.get("hash_ids")
        if hash_ids is not None:
            if isinstance(hash_ids, list) and len(hash_ids) > MAX_HASH_IDS:
                raise UserError(
                    f"{where}: hash_ids holds {len(hash_ids):,} blocks, over the limit of "
                    f"{MAX_HASH_IDS:,} per row (MAX_HASH_IDS in {LIMITS_DOC})"
                )
            if not isinstance(hash_ids, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
            ):
                raise UserError(f"{where}: hash_ids must be a list of integers")
            hash_ids = tuple(hash_ids)
        output = _tokens(item["output_length"], where, "output_length")
        rows.append(
            TraceRow(t_ms, _tokens(item["input_length"], where, "input_length"), output, hash_ids)
        )
        times.append(t_ms)
        wheres.append(where)
        if len(rows) > MAX_ROWS:
            raise UserError(f"trace {path}: more than {MAX_ROWS} rows")
        if max_rows is not None and len(rows) >= max_rows:
            break
    _check_order(times, wheres)
    return _validated(rows, path)


def _csv_time(value: str, unit: str, where: str, column: str) -> float:
    """A CSV timestamp in ms: seconds or ms as numbers, or ISO-like datetime text (Azure)."""
    text = value.strip()
    if unit in ("s", "ms", "auto"):
        try:
            number = float(text)
        except ValueError:
            if unit != "auto":
                raise UserError(f"{where}: {column} {value!r} is not a number") from None
        else:
            if not math.isfinite(number) or number < 0:
                raise UserError(f"{where}: {column} {value!r} is not a time >= 0")
            return number if unit == "ms" else number * 1000.0
    try:
        # Azure traces: "2023-11-16 18:15:46.6805900" (7 fraction digits: cut to microseconds).
        head, dot, fraction = text.partition(".")
        moment = datetime.fromisoformat(head + (dot + fraction[:6] if dot else ""))
    except ValueError:
        raise UserError(f"{where}: {column} {value!r} is neither a number nor a datetime") from None
    return moment.timestamp() * 1000.0


def read_csv_trace(
    path: str | Path,
    timestamp_column: str,
    input_column: str,
    output_column: str,
    timestamp_unit: str = "auto",
    max_rows: int | None = None,
) -> list[TraceRow]:
    """CSV with a header row; the three columns are named by the caller (defaults: the Azure LLM
    inference trace layout TIMESTAMP, ContextTokens, GeneratedTokens)."""
    text = read_bounded_text(path, "trace")
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [c for c in (timestamp_column, input_column, output_column) if c not in header]
    if missing:
        raise UserError(
            f"trace {path}: missing column(s) {', '.join(missing)} (has: {', '.join(header)}); "
            "name them with load.timestamp_column / input_column / output_column"
        )
    rows: list[TraceRow] = []
    times: list[float] = []
    wheres: list[str] = []
    try:
        for number, item in enumerate(reader, start=2):
            where = f"trace {path} line {number}"
            t_ms = _csv_time(item[timestamp_column] or "", timestamp_unit, where, timestamp_column)
            rows.append(
                TraceRow(
                    t_ms,
                    _tokens(item[input_column], where, input_column),
                    _tokens(item[output_column], where, output_column),
                )
            )
            times.append(t_ms)
            wheres.append(where)
            if len(rows) > MAX_ROWS:
                raise UserError(f"trace {path}: more than {MAX_ROWS} rows")
            if max_rows is not None and len(rows) >= max_rows:
                break
    except csv.Error as exc:
        raise UserError(f"trace {path}: not valid CSV ({exc})") from None
    _check_order(times, wheres)
    return _validated(rows, path)


def _validated(rows: list[TraceRow], path: str | Path) -> list[TraceRow]:
    """Rows re-based to the first send at 0 ms; an empty trace or zero lengths refused."""
    if not rows:
        raise UserError(f"trace {path} has no requests")
    for index, row in enumerate(rows):
        if row.input_tokens < 1 or row.output_tokens < 1:
            raise UserError(
                f"trace {path} row {index + 1}: input and output lengths must be >= 1 "
                f"(got {row.input_tokens}, {row.output_tokens})"
            )
    start = rows[0].t_ms
    return [TraceRow(r.t_ms - start, r.input_tokens, r.output_tokens, r.hash_ids) for r in rows]


def read_trace(load: ReplayLoad) -> list[TraceRow]:
    """The rows of a `ReplayLoad`'s trace (format by option or by extension)."""
    path = load.trace
    fmt = load.format
    if fmt == "auto":
        suffix = Path(path).suffix.lower()
        if suffix in (".jsonl", ".json"):
            fmt = "mooncake"
        elif suffix == ".csv":
            fmt = "csv"
        else:
            raise UserError(
                f"trace {path}: cannot tell the format from {suffix or 'no extension'!r}; "
                "set load.format=mooncake or csv"
            )
    cap = load.max_requests
    if fmt == "mooncake":
        return read_mooncake(path, cap)
    return read_csv_trace(
        path,
        load.timestamp_column,
        load.input_column,
        load.output_column,
        load.timestamp_unit,
        cap,
    )


def _messages(value: object, where: str) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list) or not value:
        raise UserError(f"{where}: messages must be a non-empty list of {{role, content}}")
    out = []
    for message in value:
        if (
            not isinstance(message, dict)
            or not isinstance(message.get("role"), str)
            or not isinstance(message.get("content"), str)
        ):
            raise UserError(f"{where}: each message needs a string role and content")
        out.append({"role": message["role"], "content": message["content"]})
    return tuple(out)


def read_prompt_file(spec: PromptFile) -> list[PromptRow]:
    """The prompts of a `PromptFile` spec: JSONL (text or messages per line) or CSV."""
    path = spec.path
    fmt = spec.format
    text_field = spec.text_field
    messages_field = spec.messages_field
    output_field = spec.output_tokens_field
    if fmt == "auto":
        suffix = Path(path).suffix.lower()
        fmt = "csv" if suffix == ".csv" else "jsonl" if suffix in (".jsonl", ".json") else None
        if fmt is None:
            raise UserError(
                f"prompt file {path}: cannot tell the format from {suffix or 'no extension'!r}; "
                "set workload.prompt_file.format=jsonl or csv"
            )
    text = read_bounded_text(path, "prompt file")
    rows: list[PromptRow] = []
    if fmt == "jsonl":
        for where, item in _json_lines(text, f"prompt file {path}"):
            if isinstance(item, str):
                item = {text_field: item}
            if not isinstance(item, dict):
                raise UserError(f"{where}: expected a JSON object")
            prompt = item.get(text_field)
            messages = item.get(messages_field)
            if prompt is None and messages is None:
                raise UserError(f"{where}: needs a {text_field!r} or {messages_field!r} field")
            if prompt is not None and not isinstance(prompt, str):
                raise UserError(f"{where}: {text_field!r} must be a string")
            output = item.get(output_field) if output_field else None
            rows.append(
                PromptRow(
                    prompt,
                    _messages(messages, where) if messages is not None else None,
                    _tokens(output, where, output_field) if output is not None else None,
                )
            )
            if len(rows) > MAX_ROWS:
                raise UserError(f"prompt file {path}: more than {MAX_ROWS} prompts")
    else:
        reader = csv.DictReader(io.StringIO(text))
        header = reader.fieldnames or []
        if text_field not in header:
            raise UserError(
                f"prompt file {path}: missing column {text_field!r} (has: {', '.join(header)}); "
                "name it with workload.prompt_file.text_field"
            )
        try:
            for number, item in enumerate(reader, start=2):
                where = f"prompt file {path} line {number}"
                output = item.get(output_field) if output_field else None
                rows.append(
                    PromptRow(
                        item[text_field] or "",
                        None,
                        _tokens(output, where, output_field) if output not in (None, "") else None,
                    )
                )
        except csv.Error as exc:
            raise UserError(f"prompt file {path}: not valid CSV ({exc})") from None
    if not rows:
        raise UserError(f"prompt file {path} has no prompts")
    for index, row in enumerate(rows):
        if row.output_tokens is not None and row.output_tokens < 1:
            raise UserError(f"prompt file {path} prompt {index + 1}: output length must be >= 1")
        if row.messages is None and not (row.text or "").strip():
            raise UserError(f"prompt file {path} prompt {index + 1}: empty prompt")
    return rows
