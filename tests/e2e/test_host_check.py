"""The running app's Host check, with real HTTP requests and websocket handshakes: a foreign Host
(a DNS-rebinding page: Host and Origin both `evil.example:PORT`) gets 403 on HTTP and on the
websocket; the loopback names are served; `--server.address 0.0.0.0` serves this machine's names
and IP literals; a configured server.allowedHosts is the whole list."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO, _stop_group
from ui.app_command import free_port, streamlit_command

pytestmark = [pytest.mark.e2e]


def http_status(port: int, host: str, path: str = "/_stcore/health") -> tuple[int, bytes]:
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    return _exchange(port, request)


def websocket_status(port: int, host: str) -> tuple[int, bytes]:
    """Status of a websocket handshake on Streamlit's stream route (101 = accepted)."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        "GET /_stcore/stream HTTP/1.1\r\n"
        f"Host: {host}\r\nOrigin: http://{host}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Protocol: streamlit\r\n\r\n"
    )
    return _exchange(port, request)


def _exchange(port: int, request: str) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(request.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.lower().split(b"\r\n")
                if line.startswith(b"content-length:")
            ),
            0,
        )
        while len(body) < length:
            chunk = sock.recv(4096)
            if not chunk:
                break
            body += chunk
        data = head + b"\r\n\r\n" + body
    status_line = data.split(b"\r\n", 1)[0]
    return int(status_line.split()[1]), data


def start_app(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    log = (tmp_path / "streamlit.log").open("wb")
    process = subprocess.Popen(
        streamlit_command(port, *extra, address=None),
        cwd=REPO,
        env={**os.environ, "ADVISOR_STORE": str(tmp_path / "store.sqlite")},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while True:  # up once it answers the health route at all (which status is the test's)
        try:
            http_status(port, f"localhost:{port}")
            return process, port
        except (OSError, IndexError, ValueError):
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            _stop_group(process)
            raise RuntimeError((tmp_path / "streamlit.log").read_text())
        time.sleep(0.5)


def test_loopback_app_refuses_a_rebinding_host_on_http_and_websocket(tmp_path):
    process, port = start_app(tmp_path, "--server.address", "127.0.0.1")
    try:
        evil = f"evil.example:{port}"
        status, body = http_status(port, evil)
        assert status == 403 and b"not a name this app is served under" in body
        assert http_status(port, evil, "/")[0] == 403
        assert websocket_status(port, evil)[0] == 403
        for good in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
            assert http_status(port, good)[0] == 200, good
            assert websocket_status(port, good)[0] == 101, good
        assert http_status(port, f"localhost.evil.example:{port}")[0] == 403
    finally:
        _stop_group(process)


def test_served_on_every_interface_accepts_this_machine_and_ip_literals(tmp_path):
    process, port = start_app(tmp_path, "--server.address", "0.0.0.0")
    try:
        for good in (f"{socket.gethostname()}:{port}", f"10.1.2.3:{port}", f"localhost:{port}"):
            assert http_status(port, good)[0] == 200, good
            assert websocket_status(port, good)[0] == 101, good
        assert http_status(port, f"evil.example:{port}")[0] == 403
        assert websocket_status(port, f"evil.example:{port}")[0] == 403
    finally:
        _stop_group(process)


def test_configured_allowed_hosts_are_the_whole_list(tmp_path):
    process, port = start_app(
        tmp_path, "--server.address", "0.0.0.0", "--server.allowedHosts", "advisor.team.internal"
    )
    try:
        assert http_status(port, f"advisor.team.internal:{port}")[0] == 200
        assert websocket_status(port, f"advisor.team.internal:{port}")[0] == 101
        for bad in (f"evil.example:{port}", f"10.1.2.3:{port}"):
            assert http_status(port, bad)[0] == 403, bad
            assert websocket_status(port, bad)[0] == 403, bad
    finally:
        _stop_group(process)
