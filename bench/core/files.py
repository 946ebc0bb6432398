"""The one bounded reader of files and text a user hands in (profiles, decision trees, run configs,
campaign plans, records files, reference folders, app uploads, `key=value` option values).

Every way the input can be wrong is one UserError line: missing, a folder, unreadable, not a
regular file (a FIFO would block the read forever, `/dev/zero` would fill memory), larger than a
cap, binary, truncated, not a mapping, nested deeper than `MAX_NESTING` (the parsers recurse
per level: 100,000 `[` is a RecursionError otherwise) or, for YAML, expanding through anchors and
aliases to more than `MAX_YAML_NODES` nodes (a "billion laughs" file of a few hundred bytes
otherwise grows to gigabytes in whatever walks the loaded data).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import IO, Any

from bench.core.errors import UserError

MAX_FILE_BYTES = 64 * 1024 * 1024
"""A profile, tree, plan, run config or reference file (the largest shipped one is 0.7 MB)."""
MAX_LINE_BYTES = 16 * 1024 * 1024
"""One line of a records file (one request's record: its chunk times)."""
MAX_NESTING = 100
"""Containers inside containers; the shipped files nest fewer than 15 deep."""
MAX_YAML_NODES = 2_000_000
"""YAML nodes after alias expansion (the shipped campaign plans use anchors for shared configs)."""
MAX_SHOWN_PATH = 160


def shown_path(path: str | Path) -> str:
    """`path` for a one-line message: a 100,000-character name is cut, not printed whole."""
    text = str(path)
    return text if len(text) <= MAX_SHOWN_PATH else f"{text[: MAX_SHOWN_PATH - 3]}..."


def check_user_path(path: str | Path, what: str) -> Path:
    """`path` as a Path if the OS can look it up: at most PATH_MAX (4096) characters, each part
    at most NAME_MAX (255) bytes, no NUL; a UserError otherwise (not `OSError 36` after the
    work is done)."""
    text = str(path)
    if "\x00" in text:
        raise UserError(f"{what} {shown_path(path)!r} contains a NUL character")
    if len(text) > 4096:
        raise UserError(f"{what} {shown_path(path)} is {len(text):,} characters; at most 4096")
    for part in text.split("/"):
        size = len(part.encode("utf-8", "surrogateescape"))
        if size > 255:
            raise UserError(
                f"{what} {shown_path(path)}: a name in it is {size:,} bytes; at most 255"
            )
    return Path(path)


def open_user_file(path: str | Path, what: str) -> IO[bytes]:
    """The file opened for binary reading; UserError unless it is a readable regular file.

    Opened non-blocking first so a FIFO cannot stall the open itself; fstat on the open
    descriptor then decides (no window between the check and the read)."""
    shown = shown_path(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise UserError(f"{what} {shown} does not exist") from None
    except IsADirectoryError:
        raise UserError(f"{what} {shown} is a folder, not a file") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(f"cannot read {what} {shown}: {reason}") from None
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise UserError(f"{what} {shown} is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise UserError(
                f"{what} {shown} is not a regular file (a pipe, device or socket); give a file"
            )
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_user_bytes(path: str | Path, what: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The file's bytes, at most `max_bytes`; UserError for anything else."""
    with open_user_file(path, what) as handle:
        try:
            data = handle.read(max_bytes + 1)
        except OSError as exc:
            raise UserError(
                f"cannot read {what} {shown_path(path)}: {exc.strerror or exc}"
            ) from None
    if len(data) > max_bytes:
        limit = (
            f"{max_bytes // (1024 * 1024)} MB" if max_bytes >= 1024 * 1024 else f"{max_bytes} bytes"
        )
        raise UserError(
            f"{what} {shown_path(path)} is larger than the {limit} limit; is this the right file?"
        )
    return data


def decode_text(raw: bytes, source: str) -> str:
    """UTF-8 text of `raw`; UserError naming the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{source}: not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); "
            "is this the right file?"
        ) from None


def read_user_text(path: str | Path, what: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The file's text (UTF-8, at most `max_bytes`); UserError `"{what} {path}: ..."` otherwise."""
    return decode_text(read_user_bytes(path, what, max_bytes), f"{what} {shown_path(path)}")


# --------------------------------------------------------------------------- bounded parsers


class InputTooComplex(UserError):
    """Nested deeper than MAX_NESTING or expanding past MAX_YAML_NODES: refused, not parsed."""


class _TooComplex(Exception):
    """Raised inside the YAML composer; turned into InputTooComplex naming the source."""


def _nesting_depth(data: Any) -> int:
    """How deep lists and dicts nest in parsed data (iterative: no recursion to exhaust)."""
    deepest = 0
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_NESTING:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def parse_json(text: str | bytes, source: str) -> Any:
    """JSON text -> data; UserError for bad JSON or nesting deeper than MAX_NESTING."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise InputTooComplex(f"{source}: nested deeper than {MAX_NESTING} levels") from None
    except ValueError as exc:  # includes UnicodeDecodeError of bytes input
        raise UserError(f"{source}: not valid JSON ({exc})") from None
    if _nesting_depth(data) > MAX_NESTING:
        raise InputTooComplex(f"{source}: nested deeper than {MAX_NESTING} levels")
    return data


def _yaml_loader() -> type:
    """A yaml SafeLoader that refuses deep nesting while composing and, once a document is
    composed, counts its nodes as if every alias were expanded (what any walk of the loaded
    data will visit), refusing more than MAX_YAML_NODES or a recursive alias."""
    import yaml

    class BoundedSafeLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            self.depth += 1
            try:
                if self.depth > MAX_NESTING:
                    raise _TooComplex(f"nested deeper than {MAX_NESTING} levels")
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def compose_document(self) -> Any:
            node = super().compose_document()
            _check_expansion(node)
            return node

    return BoundedSafeLoader


def _node_children(node: Any) -> list[Any]:
    import yaml

    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: Any) -> None:
    """Expanded node count and depth of a composed YAML graph, by an iterative depth-first walk
    that visits each distinct node once (aliases share node objects)."""
    visiting, sizes, depths = set(), {}, {}
    stack = [(root, iter(_node_children(root)))]
    visiting.add(id(root))
    while stack:
        node, children = stack[-1]
        child = next(children, None)
        if child is None:
            stack.pop()
            own = _node_children(node)
            size = 1 + sum(sizes[id(c)] for c in own)
            depth = 1 + max((depths[id(c)] for c in own), default=0)
            if size > MAX_YAML_NODES:
                raise _TooComplex(
                    f"expands through its aliases to more than {MAX_YAML_NODES:,} values"
                )
            if depth > MAX_NESTING:
                raise _TooComplex(f"nested deeper than {MAX_NESTING} levels through its aliases")
            visiting.discard(id(node))
            sizes[id(node)], depths[id(node)] = size, depth
        elif id(child) in visiting:
            raise _TooComplex("an alias refers to a node that contains it (a recursive alias)")
        elif id(child) not in sizes:
            visiting.add(id(child))
            stack.append((child, iter(_node_children(child))))


def parse_yaml(text: str, source: str) -> Any:
    """YAML text -> data (safe tags only); UserError with the parser's first line when it is
    malformed, holds a value Python cannot build (a 5,000-digit integer, month 13), and for
    nesting or alias expansion past the bounds."""
    import yaml

    try:
        return yaml.load(text, Loader=_yaml_loader())
    except _TooComplex as exc:
        raise InputTooComplex(f"{source}: {exc}") from None
    except RecursionError:  # belt and braces: the depth check above fires far earlier
        raise InputTooComplex(f"{source}: nested deeper than {MAX_NESTING} levels") from None
    except yaml.YAMLError as exc:
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{source}: not valid YAML ({first_line})") from None
    except (ValueError, OverflowError) as exc:
        # A scalar the resolver typed but Python cannot build: an integer over Python's
        # 4,300-digit conversion limit, an impossible date such as 2026-13-45.
        first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        first_line = first_line.split("; use sys.set_int_max_str_digits")[0]  # not the user's fix
        raise UserError(f"{source}: a value cannot be read ({first_line})") from None


def parse_user_mapping(text: str, source: str, json_only: bool = False) -> dict[str, Any]:
    """A mapping from YAML or JSON text (`json_only`: JSON; YAML also reads JSON)."""
    data = parse_json(text, source) if json_only else parse_yaml(text, source)
    if not isinstance(data, dict):
        raise UserError(f"{source}: expected a mapping of fields at the top level")
    return data


def load_user_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """A YAML or JSON file holding a mapping (`.json` is read as JSON, anything else as YAML,
    which also reads JSON), read through the bounds above."""
    text = read_user_text(path, what)
    return parse_user_mapping(
        text, f"{what} {shown_path(path)}", json_only=Path(path).suffix.lower() == ".json"
    )


def load_user_json(path: str | Path, what: str) -> Any:
    """A JSON file's data (any top-level type), read through the bounds above."""
    return parse_json(read_user_text(path, what), f"{what} {shown_path(path)}")


__all__ = [
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "MAX_NESTING",
    "MAX_YAML_NODES",
    "InputTooComplex",
    "check_user_path",
    "decode_text",
    "load_user_json",
    "load_user_mapping",
    "open_user_file",
    "parse_json",
    "parse_user_mapping",
    "parse_yaml",
    "read_user_bytes",
    "read_user_text",
    "shown_path",
]
