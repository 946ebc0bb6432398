"""Serving this app (app.py) with Streamlit on one local port: the command, a free port and the
wait for its health check; one definition for scripts/screenshot_advisor.py and the browser
tests (tests/e2e)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request


def streamlit_command(port: int, *extra: str, address: str | None = "127.0.0.1") -> list[str]:
    """`python -m streamlit run app.py` on `port` (bound to `address`; None = Streamlit's own
    default, for a test of what the app does on other interfaces), plus `extra` options."""
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    command += ["--server.headless", "true"]
    if address is not None:
        command += ["--server.address", address]
    return [*command, *extra]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(url: str, process: subprocess.Popen, timeout_s: float) -> bool:
    """True once `url`'s Streamlit health check answers 200; False when `process` exits or
    `timeout_s` passes first (the caller says why, with its own log)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.5)
