"""The engine's own error line from its log: what the user needs when an engine fails to start.

Engines that run their core in a child process (vLLM's EngineCore) raise a generic error in the
front end ("Engine core initialization failed. See root cause above.") while the real cause is
the last line of the child's traceback, written to the same log. `root_cause` finds that line.
"""

from __future__ import annotations

import re

# `ValueError: ...`, `torch.OutOfMemoryError: ...`, optionally behind vLLM's per-process prefix
# `(VllmWorker-0 pid=123) ` and its log header `ERROR 11-30 21:07:01 [core.py:123] `.
_EXCEPTION_LINE = re.compile(
    r"^(?:\([^)]*pid=\d+\)\s*)?(?:[A-Z]+ \d\d-\d\d [\d:]+ \[[^\]]*\]\s*)?"
    r"(?P<type>(?:[A-Za-z_]\w*\.)*(?P<name>[A-Za-z_]\w*)): (?P<message>\S.*)$"
)
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Interrupt", "Exit")
# Errors that only point at the real cause elsewhere in the log.
_POINTERS = (
    "root cause above",
    "for root cause",
    "stack trace above",
    "failed core proc",
    "engine core initialization failed",
    "due to an exception in a background process",
)


def root_cause(log_text: str) -> str | None:
    """The last exception line in the log that is not a pointer to another one, or None (the
    last, because a front end's pointer error and its chained causes come after the child's)."""
    for raw in reversed(log_text.splitlines()):
        match = _EXCEPTION_LINE.match(raw.strip())
        if match is None or not match.group("name").endswith(_EXCEPTION_SUFFIXES):
            continue
        line = f"{match.group('type')}: {match.group('message').strip()}"
        if any(pointer in line.lower() for pointer in _POINTERS):
            continue
        return line[:400]
    return None


def with_root_cause(cause: str, log_text: str) -> str:
    """`cause`, led by the log's root-cause line when the log names a different one."""
    found = root_cause(log_text)
    if found is None or found in cause:
        return cause
    return f"{found} (engine reported: {cause})"[:700]


__all__ = ["root_cause", "with_root_cause"]
