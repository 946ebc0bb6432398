"""The Host policy on its own: which Host headers a loopback, a wildcard and a configured app
accept (the running app's HTTP and websocket answers are in tests/e2e/test_host_check.py)."""

from __future__ import annotations

import asyncio

from ui.host_check import HostCheckMiddleware, HostPolicy, host_name


def test_host_name_parses_ports_and_ipv6_and_refuses_malformed_headers():
    assert host_name("LocalHost:8501") == "localhost"
    assert host_name("[::1]:8501") == "::1"
    assert host_name("example.com.") == "example.com"
    for bad in (None, "", "a b", "x@evil.example", "host:99999", "host:port", "evil/x"):
        assert host_name(bad) is None, bad


def test_loopback_app_accepts_loopback_names_only():
    policy = HostPolicy.for_server("127.0.0.1", [], ["buildbox"])
    for good in ("127.0.0.1:8501", "localhost:8501", "[::1]:8501", "localhost"):
        assert policy.allows(good), good
    for bad in ("evil.example:8741", "buildbox:8501", "10.0.0.5:8501", "localhost.evil.example"):
        assert not policy.allows(bad), bad


def test_specific_address_is_accepted_beside_loopback():
    policy = HostPolicy.for_server("192.168.1.20", [], ["buildbox"])
    assert policy.allows("192.168.1.20:8501") and policy.allows("localhost:8501")
    assert not policy.allows("192.168.1.21:8501") and not policy.allows("buildbox:8501")


def test_wildcard_address_accepts_machine_names_and_ip_literals():
    policy = HostPolicy.for_server("0.0.0.0", [], ["buildbox", "buildbox.lab.example."])
    for good in ("buildbox:8501", "BUILDBOX.lab.example:8501", "10.0.0.5:8501", "[fe80::1]:80"):
        assert policy.allows(good), good
    assert not policy.allows("evil.example:8741")


def test_configured_list_is_complete_with_subdomain_and_any_patterns():
    policy = HostPolicy.for_server("0.0.0.0", ["advisor.internal", "*.team.example"], ["buildbox"])
    assert policy.allows("advisor.internal:443") and policy.allows("a.b.team.example")
    for bad in ("localhost:8501", "buildbox", "10.0.0.5", "team.example.evil", "xteam.example"):
        assert not policy.allows(bad), bad
    assert HostPolicy.for_server("127.0.0.1", ["*"]).allows("anything.example")


def _call(policy: HostPolicy, kind: str, host: bytes) -> list[dict]:
    sent: list[dict] = []
    reached: list[bool] = []

    async def app(scope, receive, send):
        reached.append(True)

    async def receive():
        return {}

    async def send(message):
        sent.append(message)

    scope = {"type": kind, "headers": [(b"host", host)]}
    asyncio.run(HostCheckMiddleware(app, policy)(scope, receive, send))
    return sent if not reached else [{"type": "reached the app"}]


def test_middleware_answers_403_for_http_and_closes_the_websocket_handshake():
    policy = HostPolicy.for_server("127.0.0.1")
    http = _call(policy, "http", b"evil.example:8741")
    assert http[0]["status"] == 403 and b"evil.example" in http[1]["body"]
    assert _call(policy, "websocket", b"evil.example:8741") == [
        {"type": "websocket.close", "code": 1008}
    ]
    assert _call(policy, "websocket", b"localhost:8501") == [{"type": "reached the app"}]
    assert _call(policy, "http", b"127.0.0.1:8501") == [{"type": "reached the app"}]
