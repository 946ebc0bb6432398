"""Safe report output: atomic writes that cannot leave the folder the user chose.

Every file goes to a temporary file in its final folder, is fsynced and then `os.replace`d, so a
reader never sees half a report. Names are one path component from a small charset; the target is
resolved (symlinks followed) and must stay inside the resolved output folder, else UserError.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import unicodedata
from pathlib import Path

from bench.core.errors import UserError
from bench.core.outputs import naming_path

MAX_NAME_CHARS = 100
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_UNSAFE_RUN = re.compile(r"[^A-Za-z0-9._-]+")


def safe_filename(text: str, default: str = "report") -> str:
    """Turn free text (a profile title, a run id) into a safe file name component.

    ASCII letters, digits, `.`, `_`, `-` only; no leading dot or dash; at most 100 characters.
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    cleaned = _UNSAFE_RUN.sub("-", ascii_text).strip("-._")
    cleaned = re.sub(r"\.{2,}", ".", cleaned)[:MAX_NAME_CHARS].rstrip("-._")
    return cleaned or default


def check_name(name: str) -> str:
    """Return `name` if it is one safe path component, else raise a one-line UserError."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name) or ".." in name:
        raise UserError(
            f"refusing output file name {name!r}: use 1-{MAX_NAME_CHARS} characters from "
            "A-Z a-z 0-9 . _ - with no path separators and no leading dot"
        )
    return name


class ReportWriter:
    """Writes files into one output folder (created if missing) and never outside it."""

    def __init__(self, out_dir: str | os.PathLike[str]) -> None:
        requested = Path(out_dir).expanduser()
        if requested.exists() and not requested.is_dir():
            raise UserError(f"output path {str(requested)!r} exists and is not a folder")
        try:
            requested.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(
                f"cannot create output folder {str(requested)!r}: {exc.strerror}"
            ) from None
        # The folder the user chose is trusted as given (it may itself be a symlink); what is
        # written below it must resolve inside its resolved location.
        self.root = requested.resolve(strict=True)
        self.written: list[Path] = []

    def _inside(self, path: Path, shown: str) -> Path:
        resolved = path.resolve(strict=False)
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise UserError(
                f"refusing to write {shown!r}: it resolves to {str(resolved)!r}, "
                f"outside the output folder {str(self.root)!r}"
            )
        return resolved

    def subdir(self, name: str) -> Path:
        """A folder directly inside the output folder (for chart files), created if missing."""
        check_name(name)
        target = self._inside(self.root / name, name)
        if target.exists() and not target.is_dir():
            raise UserError(f"refusing to use {name!r} as a folder: a file of that name exists")
        target.mkdir(exist_ok=True)
        return target

    def path_for(self, name: str, folder: str | None = None) -> Path:
        """The checked target path of `name` (optionally inside the subfolder `folder`)."""
        check_name(name)
        parent = self.subdir(folder) if folder is not None else self.root
        shown = f"{folder}/{name}" if folder else name
        target = parent / name
        if target.is_symlink() or (target.exists() and not target.is_file()):
            # os.replace would swap out a link or clobber a folder; neither is a report file.
            self._inside(target, shown)
            raise UserError(f"refusing to write {shown!r}: it exists and is not a regular file")
        return self._inside(target, shown)

    def write_bytes(self, name: str, data: bytes, folder: str | None = None) -> Path:
        target = self.path_for(name, folder)
        atomic_write_bytes(target, data)
        self.written.append(target)
        return target

    def write_text(self, name: str, text: str, folder: str | None = None) -> Path:
        return self.write_bytes(name, text.encode("utf-8"), folder)


def atomic_write_bytes(target: Path, data: bytes) -> None:
    """Write `data` to `target` atomically: temp file in the same folder, fsync, os.replace."""
    folder = target.parent
    with naming_path(target):
        descriptor, temp_name = tempfile.mkstemp(
            prefix=f".{target.name}.", suffix=".tmp", dir=folder
        )
    try:
        with naming_path(target):
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temp_name, 0o644)
            os.replace(temp_name, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp_name)
        raise
    # Persist the rename itself (the directory entry), not only the file's bytes.
    with contextlib.suppress(OSError):
        dir_descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_descriptor)
        finally:
            os.close(dir_descriptor)
