"""Where a results store lives: a SQLite file or a PostgreSQL database, named by URL.

`sqlite:///relative/path`, `sqlite:////absolute/path` or a plain path select the embedded SQLite
file; `postgresql://user@host:port/db` (also `postgres://`, `postgresql+psycopg://`) a team's
PostgreSQL server through psycopg 3. Credentials come from the URL or, when it leaves them out,
from libpq's standard environment variables (PGPASSWORD, PGUSER, PGHOST, PGPORT, PGDATABASE,
PGPASSFILE, PGSSLMODE ...), which psycopg reads itself. A location is shown only in its
`display` form, password masked; `scrub` removes the password from any text before it is shown.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from bench.core.errors import UserError

STORE_APPLICATION = "inference-advisor"
POSTGRES_SCHEMES = ("postgresql", "postgres", "postgresql+psycopg")
MASK = "***"


def default_location() -> Path:
    """`$XDG_DATA_HOME/inference-advisor/results.sqlite`, else under ~/.local/share."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / STORE_APPLICATION / "results.sqlite"


@dataclass(frozen=True)
class StoreURL:
    """A parsed store location. `url` holds the password (its repr masks it); show `display`."""

    backend: Literal["sqlite", "postgresql"]
    url: URL
    path: Path | None = None
    """The database file (SQLite only)."""

    @property
    def display(self) -> str:
        """The location as a user wrote it, password masked (safe to print, log and store)."""
        if self.path is not None:
            return str(self.path)
        return self.url.set(drivername="postgresql").render_as_string(hide_password=True)

    @property
    def identity(self) -> str:
        """What names the same database for every user (no password): for runner lock files."""
        if self.path is not None:
            return str(self.path.expanduser().resolve())
        return self.display

    def scrub(self, text: str) -> str:
        """`text` with the URL's password (if any) replaced by ***."""
        secrets = [self.url.password, os.environ.get("PGPASSWORD")]
        for secret in secrets:
            if secret:
                text = text.replace(str(secret), MASK)
        return text


def parse_store_url(location: str | Path | None = None) -> StoreURL:
    """The store a location names: a path, a sqlite:/// or postgresql:// URL, $ADVISOR_STORE
    or the default file. Raises UserError (one line, password masked) for a malformed one."""
    if location is None or str(location) == "":
        location = os.environ.get("ADVISOR_STORE") or default_location()
    text = str(location)
    if "://" not in text:
        path = Path(text).expanduser()
        return StoreURL("sqlite", URL.create("sqlite", database=str(path)), path)
    scheme = text.partition("://")[0].lower()
    if scheme == "sqlite":
        rest = text.partition("://")[2]
        if not rest.startswith("/") or rest == "/":
            raise UserError(f"store URL {text!r} names no file: use sqlite:///path/to/file")
        path = Path(rest[1:]).expanduser()  # sqlite:///rel -> rel, sqlite:////abs -> /abs
        return StoreURL("sqlite", URL.create("sqlite", database=str(path)), path)
    if scheme not in POSTGRES_SCHEMES:
        raise UserError(
            f"store URL scheme {scheme!r} is not supported: use sqlite:///path/to/file or "
            "postgresql://user@host:port/database"
        )
    try:
        url = make_url(text)
    except (ArgumentError, ValueError) as error:
        shown = redact_urls(text)
        reason = "bad port" if isinstance(error, ValueError) else "not a URL"
        raise UserError(
            f"store URL {shown} is malformed ({reason}): use postgresql://user@host:port/database"
        ) from None
    if url.port is not None and not 0 < url.port < 65536:
        raise UserError(f"store URL {redact_urls(text)} is malformed (port {url.port})")
    return StoreURL("postgresql", url.set(drivername="postgresql+psycopg"))


_URL_PASSWORD = re.compile(r"(?P<head>\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^\s]*(?P<at>@)", re.I)


def redact_urls(text: str) -> str:
    """`text` with the password of every URL in it masked, parsed or not: for messages and for
    command lines written into result files (`--store postgresql://user:PASSWORD@...`)."""
    return _URL_PASSWORD.sub(lambda match: f"{match['head']}{MASK}{match['at']}", text)
