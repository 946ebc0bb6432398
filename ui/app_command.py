"""The command that serves this app (app.py) with Streamlit, headless, on one port: one
definition for scripts/screenshot_advisor.py and the browser tests (tests/e2e)."""

from __future__ import annotations

import sys


def streamlit_command(port: int, *extra: str, address: str | None = "127.0.0.1") -> list[str]:
    """`python -m streamlit run app.py` on `port` (bound to `address`; None = Streamlit's own
    default, for a test of what the app does on other interfaces), plus `extra` options."""
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    command += ["--server.headless", "true"]
    if address is not None:
        command += ["--server.address", address]
    return [*command, *extra]
