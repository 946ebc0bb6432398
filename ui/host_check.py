"""Host-header check for the app's HTTP routes and its websocket: the defence against DNS rebinding.

A web page on `evil.example` can make its own name resolve to 127.0.0.1; the browser then treats
the app on a loopback port as same-origin with that page (the Origin and the Host header both say
`evil.example:PORT`), so an Origin check alone lets it in. The Host header is what such a page
cannot fake: every request whose Host is not a name this app is served under gets 403 before
Streamlit sees it.

Names accepted, by default: `localhost`, `127.0.0.1`, `::1` and the served address
(`server.address`) when it is a specific one. Served on every interface (`--server.address
0.0.0.0`, the opt-in of scripts/app.sh and docs/cluster.md), also the machine's own host names
and any IP literal: an IP literal cannot be a rebinding (the attacker's page would have to be
served from that very address). A non-empty `server.allowedHosts` (Streamlit's own option,
`*.example.com` and `*` allowed) is the complete list instead: Streamlit checks the websocket
against it too, so both channels follow one list.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
WILDCARD_ADDRESSES = ("", "0.0.0.0", "::")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def host_name(header: str | None) -> str | None:
    """The name part of a Host header (`[::1]:8501` -> `::1`), lower case; None if malformed."""
    if not header or any(ch in header for ch in "/?#@\\ "):
        return None
    try:
        parts = urlsplit(f"//{header}")
        _ = parts.port  # a non-numeric or out-of-range port makes the header malformed
    except ValueError:
        return None
    return (parts.hostname or "").rstrip(".") or None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HostPolicy:
    """Which Host names the app answers; built once from the server settings."""

    names: frozenset[str]
    patterns: tuple[str, ...] = ()
    """`*.example.com` entries of server.allowedHosts (a leading dot matches any subdomain)."""
    any_host: bool = False
    """`*` in server.allowedHosts: the operator turned the check off (e.g. behind a proxy)."""
    ip_literals: bool = False
    """Served on every interface: any IP-literal Host is one of this machine's addresses."""

    @classmethod
    def for_server(
        cls, address: str | None, allowed_hosts: Iterable[str] = (), own_names: Iterable[str] = ()
    ) -> HostPolicy:
        entries = [entry.strip().lower().rstrip(".") for entry in allowed_hosts]
        entries = [entry for entry in entries if entry]
        if entries:  # the operator's list is the whole list (as Streamlit's websocket check)
            names = {host_name(e) or e for e in entries if e != "*" and not e.startswith("*.")}
            patterns = tuple(e[1:] for e in entries if e.startswith("*."))
            return cls(frozenset(names), patterns, any_host="*" in entries)
        address = (address or "").strip().strip("[]").lower()
        names = set(LOOPBACK_HOSTS)
        wildcard = address in WILDCARD_ADDRESSES
        if wildcard:
            names.update(name.lower().rstrip(".") for name in own_names if name)
        else:
            names.add(address)
        return cls(frozenset(names), ip_literals=wildcard)

    def allows(self, header: str | None) -> bool:
        name = host_name(header)
        if name is None:
            return False
        if self.any_host or name in self.names:
            return True
        if any(name.endswith(suffix) for suffix in self.patterns):
            return True
        return self.ip_literals and _is_ip(name)


def machine_names() -> list[str]:
    """This machine's host name and fully qualified name (what colleagues type in a URL)."""
    names = [socket.gethostname()]
    with contextlib.suppress(OSError):
        names.append(socket.getfqdn())
    return names


def policy_from_streamlit_config() -> HostPolicy:
    from streamlit import config

    return HostPolicy.for_server(
        config.get_option("server.address"),
        config.get_option("server.allowedHosts") or [],
        machine_names(),
    )


def _rejection(host: str | None) -> bytes:
    shown = (host or "(none)")[:200]
    return (
        f"403: Host {shown!r} is not a name this app is served under. Open it at "
        "http://localhost:PORT, or add the name to server.allowedHosts "
        "(.streamlit/config.toml) when serving it to others.\n"
    ).encode()


class HostCheckMiddleware:
    """ASGI middleware: HTTP requests and websocket handshakes with a foreign Host get 403."""

    def __init__(self, app: ASGIApp, policy: HostPolicy | None = None) -> None:
        self.app = app
        self.policy = policy or policy_from_streamlit_config()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        hosts = [value for key, value in scope.get("headers") or [] if key == b"host"]
        host = hosts[0].decode("latin-1") if len(hosts) == 1 else None
        if self.policy.allows(host):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            # Closing before accepting makes the server answer the handshake with HTTP 403.
            await send({"type": "websocket.close", "code": 1008})
            return
        body = _rejection(host)
        await send(
            {
                "type": "http.response.start",
                "status": 403,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
