"""User-facing errors: anything a user can cause (bad file, bad option) raises UserError.

The CLIs turn a UserError into one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by user input; its message is one line that says what to fix."""


class BackendUnavailable(UserError):
    """The requested backend is not installed or cannot run here; the message says why."""


class RunAborted(Exception):
    """A run ended for a reason outside the engine: its results store or output folder could not
    be written (a full disk, a lost database). The message is one line saying what was kept
    where; `result` is the run as far as it got. CLIs print it and exit with code 1."""

    exit_code = 1

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


class RunInterrupted(BaseException):
    """A run ended by SIGINT or SIGTERM after its worker was stopped, its row marked FAILED
    ("interrupted by SIGINT") and its records kept. Not an Exception, so a campaign or a job
    loop (`except Exception`) stops too, and not a KeyboardInterrupt, which typer turns into a
    silent exit; CLIs print the one-line message and exit with 128 + the signal number."""

    def __init__(self, message: str, signal_number: int, result: object = None) -> None:
        super().__init__(message)
        self.signal_number = signal_number
        self.exit_code = 128 + signal_number
        self.result = result
