"""Output folders and files of runs, fidelity checks and campaigns: checked before work, written
atomically.

An `--out` folder is checked (created, and a probe file written and removed) before anything is
measured, so a folder that cannot be written (`/proc/x`, a read-only mount, a full disk) fails
in one line at once instead of after the whole run. Every result file is written to a temporary
file beside it and renamed over the old one (`os.replace`), so a reader never sees half a file
and a failed write leaves the previous file whole.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

from bench.core.errors import UserError


@contextlib.contextmanager
def naming_path(path: str | os.PathLike[str]) -> Iterator[None]:
    """An OSError raised inside carries `path` as its file name when it has none: a `write()`
    on a full disk raises `[Errno 28] No space left on device` without one, and the CLI's one
    error line should say which file could not be written."""
    try:
        yield
    except OSError as error:
        # Only an OS-raised error (errno set): a bare OSError("text") would print as
        # "[Errno None] None: path" with a file name added.
        if error.filename is None and error.errno is not None:
            error.filename = os.fspath(path)
        raise


def os_reason(error: OSError) -> str:
    """An OSError's reason without the path (the caller's message names the file)."""
    return error.strerror or type(error).__name__


def prepare_out_dir(path: Path, option: str = "--out") -> Path:
    """Create `path` if needed and check this process can write files in it; UserError (one
    line, exit 2) otherwise. Returns the path."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{option} {path} exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(f"{option} {path}: cannot create the folder ({os_reason(error)})") from None
    probe = path / f".write-check-{uuid.uuid4().hex[:8]}"
    try:
        with open(probe, "w", encoding="utf-8") as handle:
            handle.write("ok\n")
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        raise UserError(f"{option} {path}: cannot write files there ({os_reason(error)})") from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return path


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write `data` to `path` through a temporary file in the same folder and `os.replace`; on
    failure the temporary file is removed and the previous file (if any) is left whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with naming_path(path):
            if isinstance(data, bytes):
                tmp.write_bytes(data)
            else:
                tmp.write_text(data, encoding="utf-8")
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
