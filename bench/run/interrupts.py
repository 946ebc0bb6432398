"""SIGINT, SIGTERM and SIGHUP (a closed terminal or SSH session) around a run: the first stops it
politely, a second kills the worker now, and a repeat that arrives after the run has already
stopped cannot kill the process that is reporting it.

Why the last part: Ctrl-C pressed twice (or a scheduler's TERM then a terminal's INT) reaches the
CLI in two signals a fraction of a second apart. When the run stops inside that fraction, its
handlers are gone before the second one lands; under Python's default handlers that signal then
raises KeyboardInterrupt in the middle of the one-line report, or kills the interpreter on its way
out (exit status -2 instead of 130, the line half written). `hold_repeated_signals()` is what a
program entry (`python -m bench`, `python -m advisor`) installs for its lifetime: until a signal
has stopped a run it behaves as the defaults do, after that it lets the process finish its
report and exit with the run's code (the signals are ignored from the run's end to the
process's).
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Ctrl-C, a scheduler's kill, a closed terminal or SSH session: each stops a run the same way."""

# The signal that stopped a run in this process, if one did (read by the program-entry handler).
_stopped_by: int | None = None


def stopped_by_signal() -> int | None:
    """The number of the signal that stopped a run in this process, or None."""
    return _stopped_by


class RunInterrupts:
    """SIGINT, SIGTERM or SIGHUP during a run (main thread only): the first sets `stop`, a second
    sets `kill_now`; the previous handlers come back afterwards."""

    def __init__(self, stop: Any) -> None:  # stop: anything with set() (bench.run.api._AnyStop)
        self.stop = stop
        self.kill_now = threading.Event()
        self.signal_number: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def name(self) -> str | None:
        return None if self.signal_number is None else signal.Signals(self.signal_number).name

    def _handle(self, signal_number: int, _frame: FrameType | None) -> None:
        global _stopped_by
        if self.signal_number is None:
            self.signal_number = signal_number
            _stopped_by = signal_number
            self.stop.set()
        else:
            self.kill_now.set()

    def __enter__(self) -> RunInterrupts:
        if threading.current_thread() is threading.main_thread():
            for number in STOP_SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *_exc: object) -> None:
        for number, previous in self._previous.items():
            # None: the previous handler was not set from Python; the default is the best guess.
            restored = signal.SIG_DFL if previous is None else previous
            if self.signal_number is not None and previous is _program_handler:
                # A program stopped by a signal is on its way out with the run's code. Ignoring at
                # the OS level, not in Python, also covers interpreter shutdown, which resets
                # Python-level handlers to the default (a repeat then killed it with -2).
                restored = signal.SIG_IGN
            signal.signal(number, restored)
        self._previous.clear()


def _program_handler(signal_number: int, _frame: FrameType | None) -> None:
    if _stopped_by is not None:
        return  # a run was already stopped by a signal: its report and exit code are on the way
    if signal_number == signal.SIGINT:
        raise KeyboardInterrupt
    # SIGTERM or SIGHUP outside a run: die of it as the default handler would (-15, -1).
    signal.signal(signal_number, signal.SIG_DFL)
    os.kill(os.getpid(), signal_number)


def hold_repeated_signals() -> None:
    """For a program entry's main thread, for the life of the process (see the module doc)."""
    for number in STOP_SIGNALS:
        signal.signal(number, _program_handler)
