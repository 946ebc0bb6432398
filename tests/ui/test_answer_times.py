"""The app server's answer log (ui/answer_times.py) on its own: which Streamlit messages start and
end a timed page run, and the lines the middleware writes. Messages are built with Streamlit's
own protobuf classes; the ASGI app behind the middleware is a labelled TEST DOUBLE that answers
the way Streamlit's websocket does (the served app under load is tests/e2e/test_app_under_load.py,
which judges it by this log)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from ui.answer_times import (
    ENVIRONMENT_VARIABLE,
    AnswerTimesMiddleware,
    answer_times_middleware,
    finished_run,
    read_answers,
    rerun_request,
)


def rerun(page: str = "report_page", fragment: str = "") -> bytes:
    message = BackMsg()
    message.rerun_script.page_name = page
    message.rerun_script.fragment_id = fragment
    return message.SerializeToString()


def finished(status: int) -> bytes:
    message = ForwardMsg()
    message.script_finished = status
    return message.SerializeToString()


def test_requests_and_endings_are_read_from_streamlits_messages():
    assert rerun_request(rerun("report_page")) == ("report_page", False)
    assert rerun_request(rerun("benchmark_page", fragment="f1")) == ("benchmark_page", True)
    heartbeat = BackMsg()
    heartbeat.app_heartbeat = True
    assert rerun_request(heartbeat.SerializeToString()) is None
    assert rerun_request(b"\xff\xfe not protobuf") is None
    assert finished_run(finished(ForwardMsg.FINISHED_SUCCESSFULLY)) is False
    assert finished_run(finished(ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY)) is True
    # A run replaced by a newer request has not answered it.
    assert finished_run(finished(ForwardMsg.FINISHED_EARLY_FOR_RERUN)) is None
    assert finished_run(b"x" * 1000) is None  # a page's elements: not parsed


def test_middleware_is_installed_only_when_asked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.delenv(ENVIRONMENT_VARIABLE, raising=False)
    assert answer_times_middleware() == []
    monkeypatch.setenv(ENVIRONMENT_VARIABLE, str(tmp_path / "answers.jsonl"))
    (middleware,) = answer_times_middleware()
    assert middleware.cls is AnswerTimesMiddleware


def test_a_page_run_is_timed_from_its_first_request_to_its_end(tmp_path: Path):
    """TEST DOUBLE server: two rerun requests arrive (the second replaces the first run, which
    ends early), then the run finishes 0.2 s after the first request; a fragment run and an
    HTTP response are logged apart."""
    path = tmp_path / "answers.jsonl"
    incoming = [rerun("report_page"), rerun("report_page"), rerun("benchmark_page", "frag")]

    async def streamlit_double(scope, receive, send):
        if scope["type"] == "http":
            await asyncio.sleep(0.05)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        for _ in incoming[:2]:
            await receive()
        await send(
            {"type": "websocket.send", "bytes": finished(ForwardMsg.FINISHED_EARLY_FOR_RERUN)}
        )
        await asyncio.sleep(0.2)
        await send({"type": "websocket.send", "bytes": b"d" * 5000})  # the page's elements
        await send({"type": "websocket.send", "bytes": finished(ForwardMsg.FINISHED_SUCCESSFULLY)})
        await receive()
        await send(
            {
                "type": "websocket.send",
                "bytes": finished(ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY),
            }
        )

    middleware = AnswerTimesMiddleware(streamlit_double, path=path)
    queue = list(incoming)

    async def receive():
        return {"type": "websocket.receive", "bytes": queue.pop(0)}

    async def send(message):
        return None

    async def http_receive():
        return {"type": "http.request", "body": b""}

    async def both():
        await middleware({"type": "websocket"}, receive, send)
        await middleware({"type": "http", "path": "/media/x.json"}, http_receive, send)

    asyncio.run(both())
    page, fragment, http = read_answers(path)
    assert (page.kind, page.what) == ("page run", "report_page")
    assert 0.2 <= page.seconds < 1.0
    assert (fragment.kind, fragment.what) == ("fragment run", "benchmark_page")
    assert fragment.seconds < page.seconds
    assert (http.kind, http.what) == ("http", "/media/x.json") and 0.05 <= http.seconds < 1.0


def test_a_fragment_request_the_page_run_answered_does_not_time_a_later_fragment(
    tmp_path: Path,
):
    """TEST DOUBLE server: a fragment's rerun request arrives while a page run is under way;
    Streamlit drops it (the page run redraws the fragment). The fragment's next request, 2 s
    later, is answered at once: it is timed from its own request, not from the dropped one."""
    path = tmp_path / "answers.jsonl"
    incoming = [rerun("benchmark_page"), rerun("benchmark_page", "frag"),
                rerun("benchmark_page", "frag")]  # fmt: skip

    async def streamlit_double(scope, receive, send):
        await receive()  # the page's request
        await receive()  # the fragment's, while the page runs: dropped
        await send({"type": "websocket.send", "bytes": finished(ForwardMsg.FINISHED_SUCCESSFULLY)})
        await asyncio.sleep(2.0)
        await receive()  # the fragment's next request
        fragment_done = finished(ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY)
        await send({"type": "websocket.send", "bytes": fragment_done})

    queue = list(incoming)

    async def receive():
        return {"type": "websocket.receive", "bytes": queue.pop(0)}

    async def send(message):
        return None

    asyncio.run(AnswerTimesMiddleware(streamlit_double, path=path)({"type": "websocket"},
                                                                   receive, send))  # fmt: skip
    page, fragment = read_answers(path)
    assert page.kind == "page run" and fragment.kind == "fragment run"
    assert fragment.seconds < 0.5, fragment  # 2 s and more when timed from the dropped request
