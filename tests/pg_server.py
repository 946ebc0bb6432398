"""A throwaway PostgreSQL server for the store tests (Debian's binaries, nothing downloaded).

initdb in a temporary folder; listens on 127.0.0.1 only, on a free port, with its unix socket in
that folder; password (scram-sha-256) authentication over TCP, so the tests can try a wrong
password. As root, the server runs as the `postgres` user (initdb refuses root).

    eval "$(python -m tests.pg_server start)"   # exports ADVISOR_TEST_PG_URL, ADVISOR_TEST_PG_ROOT
    python -m tests.pg_server stop "$ADVISOR_TEST_PG_ROOT"
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

URL_ENV = "ADVISOR_TEST_PG_URL"
ROOT_ENV = "ADVISOR_TEST_PG_ROOT"
SUPERUSER = "advisor"


def find_bindir() -> Path | None:
    """Where initdb and pg_ctl live: on PATH, else the newest /usr/lib/postgresql/<ver>/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    candidates = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not candidates:
        return None
    newest = max(candidates, key=lambda path: int(Path(path).parent.parent.name.split(".")[0]))
    return Path(newest).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ThrowawayPostgres:
    """One server in `root` (data/, socket, log, state.json); start, restart, stop."""

    def __init__(self, root: Path, bindir: Path, port: int, password: str) -> None:
        self.root = root
        self.bindir = bindir
        self.port = port
        self.password = password

    @property
    def url(self) -> str:
        return f"postgresql://{SUPERUSER}:{self.password}@127.0.0.1:{self.port}/postgres"

    def database_url(self, name: str) -> str:
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    @staticmethod
    def _as_server_user() -> list[str]:
        if os.geteuid() != 0:
            return []
        return ["runuser", "-u", "postgres", "--"]

    def _pg_ctl(self, *args: str) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} "
            "-c fsync=off -c full_page_writes=off -c max_connections=200"
        )
        subprocess.run(
            [
                *self._as_server_user(),
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.root / "data"),
                "-l",
                str(self.root / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                *args,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )

    @classmethod
    def start(cls, bindir: Path | None = None) -> ThrowawayPostgres:
        bindir = bindir or find_bindir()
        if bindir is None:
            raise RuntimeError("no PostgreSQL binaries (initdb) found")
        root = Path(tempfile.mkdtemp(prefix="advisor-pg-"))
        server = cls(root, bindir, _free_port(), secrets.token_hex(12))
        password_file = root / "password"
        password_file.write_text(server.password + "\n")
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(root, user.pw_uid, user.pw_gid)
            os.chown(password_file, user.pw_uid, user.pw_gid)
        subprocess.run(
            [
                *cls._as_server_user(),
                str(bindir / "initdb"),
                "-D",
                str(root / "data"),
                "-U",
                SUPERUSER,
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                f"--pwfile={password_file}",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        password_file.unlink()
        server._pg_ctl("start")
        (root / "state.json").write_text(
            json.dumps({"bindir": str(bindir), "port": server.port, "password": server.password})
        )
        return server

    @classmethod
    def attach(cls, root: Path) -> ThrowawayPostgres:
        state = json.loads((Path(root) / "state.json").read_text())
        return cls(Path(root), Path(state["bindir"]), state["port"], state["password"])

    def restart(self, down_s: float = 0.0) -> None:
        """Restart the server (every connection is cut); with `down_s`, it stays down that long
        first, so a client that writes every second or two is sure to meet the outage."""
        if not down_s:
            self._pg_ctl("restart", "-m", "fast")
            return
        self._pg_ctl("stop", "-m", "fast")
        time.sleep(down_s)
        self._pg_ctl("start")

    def stop(self) -> None:
        try:
            self._pg_ctl("stop", "-m", "immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def create_database(self) -> str:
        """A new empty database for one test; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.pg_server")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("start", help="Start a server; print shell exports of its URL and folder.")
    stop = sub.add_parser("stop", help="Stop the server in ROOT and delete ROOT.")
    stop.add_argument("root", type=Path)
    args = parser.parse_args(argv)
    if args.command == "start":
        server = ThrowawayPostgres.start()
        print(f"export {URL_ENV}='{server.url}' {ROOT_ENV}='{server.root}'")
    else:
        ThrowawayPostgres.attach(args.root).stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
