"""Reading files a user names (profiles, trees, run configs, plans): every way the file can be
wrong — missing, a folder, unreadable, binary, truncated, not a mapping — is one UserError line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.errors import UserError


def read_user_text(path: str | Path, what: str) -> str:
    """The file's text (UTF-8); UserError `"{what} {path}: ..."` for anything else."""
    file = Path(path)
    if not file.exists():
        raise UserError(f"{what} {path} does not exist")
    if file.is_dir():
        raise UserError(f"{what} {path} is a folder, not a file")
    try:
        raw = file.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{what} {path}: not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x}); "
            "is this the right file?"
        ) from None


def load_user_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """A YAML or JSON file holding a mapping (`.json` is read as JSON, anything else as YAML,
    which also reads JSON); UserError with the parser's first line when it is malformed."""
    text = read_user_text(path, what)
    file = Path(path)
    if file.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserError(f"{what} {path}: not valid JSON ({exc})") from None
    else:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise UserError(f"{what} {path}: not valid YAML ({first_line})") from None
    if not isinstance(data, dict):
        raise UserError(f"{what} {path}: expected a mapping of fields at the top level")
    return data
