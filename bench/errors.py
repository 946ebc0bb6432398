"""User-facing errors: anything a user can cause (bad file, bad option) raises UserError.

The CLIs turn a UserError into one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by user input; its message is one line that says what to fix."""


class BackendUnavailable(UserError):
    """The requested backend is not installed or cannot run here; the message says why."""
