"""How long the app server takes to answer, measured where it answers: an ASGI middleware that
times every page run (a browser's rerun request over the websocket to the server sending that
run's "script finished" message: the page script has run and everything it drew has been
handed to the socket) and every HTTP response (the request to the response's first bytes),
and appends one JSON line per answer to a file.

On when `ADVISOR_ANSWER_TIMES` names that file (tests/e2e/test_app_under_load.py judges the
app under load by it; an operator can use it the same way); off otherwise, and then not even
installed. Times are the server's own: what a person's browser then spends drawing the page is
not in them (that runs on their machine). Queueing behind other sessions is: a run waits for
the interpreter while others run.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel
from starlette.types import ASGIApp, Message, Receive, Scope, Send

ENVIRONMENT_VARIABLE = "ADVISOR_ANSWER_TIMES"
LARGEST_FINISH_MESSAGE = 256
"""Bytes: a "script finished" ForwardMsg is a few bytes; larger messages (the page's elements)
are not parsed, so timing costs next to nothing."""


class Answer(BaseModel):
    """One answer the server gave, as written to the file (one JSON object a line)."""

    kind: Literal["page run", "fragment run", "http"]
    what: str
    """The page's name or script hash for a run, the path for HTTP. A fragment
    run redraws one part of a page (the Benchmark page's job status, once a second)."""
    seconds: float
    finished_at: float
    """Wall-clock time (Unix seconds) the answer was handed to the socket."""


def read_answers(path: Path) -> list[Answer]:
    """The answers in a file this middleware wrote."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [Answer.model_validate_json(line) for line in lines if line.strip()]


def rerun_request(payload: bytes) -> tuple[str, bool] | None:
    """The page a BackMsg asks to run and whether only a fragment of it, or None when it asks
    for something else."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    message = BackMsg()
    try:
        message.ParseFromString(payload)
    except Exception:  # not ours to judge: Streamlit answers a malformed message itself
        return None
    if message.WhichOneof("type") != "rerun_script":
        return None
    state = message.rerun_script
    return state.page_name or state.page_script_hash[:12], bool(state.fragment_id)


def finished_run(payload: bytes) -> bool | None:
    """Whether a ForwardMsg says a run finished: True for a fragment's run, False for a page's,
    None when it says something else (a run replaced by a newer request has not answered)."""
    if len(payload) > LARGEST_FINISH_MESSAGE:
        return None
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    message = ForwardMsg()
    try:
        message.ParseFromString(payload)
    except Exception:
        return None
    if message.WhichOneof("type") != "script_finished":
        return None
    return {
        ForwardMsg.FINISHED_SUCCESSFULLY: False,
        ForwardMsg.FINISHED_WITH_COMPILE_ERROR: False,
        ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY: True,
    }.get(message.script_finished)


class AnswerTimesMiddleware:
    """ASGI middleware writing an `Answer` line per page run and per HTTP response."""

    def __init__(self, app: ASGIApp, path: Path) -> None:
        self.app = app
        self.path = path
        self._lock = threading.Lock()

    def _write(self, answer: Answer) -> None:
        with self._lock, self.path.open("a", encoding="utf-8") as file:
            file.write(answer.model_dump_json() + "\n")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.monotonic()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self._write(Answer(kind="http", what=scope.get("path", ""),
                                   seconds=time.monotonic() - started,
                                   finished_at=time.time()))  # fmt: skip
            await send(message)

        await self.app(scope, receive, timed_send)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Per kind (page run, fragment run): the first request not yet answered, and its page.
        # A request that arrives while another runs replaces that run, so the answer is timed
        # from the first of them.
        waiting: dict[bool, tuple[float, str]] = {}

        async def timed_receive() -> Message:
            message = await receive()
            payload = message.get("bytes")
            if message["type"] == "websocket.receive" and payload:
                request = rerun_request(payload)
                if request is not None:
                    page, fragment = request
                    waiting.setdefault(fragment, (time.monotonic(), page))
            return message

        async def timed_send(message: Message) -> None:
            await send(message)
            payload = message.get("bytes")
            if message["type"] == "websocket.send" and payload and waiting:
                fragment = finished_run(payload)
                if fragment is not None and fragment in waiting:
                    since, page = waiting.pop(fragment)
                    self._write(Answer(kind="fragment run" if fragment else "page run",
                                       what=page, seconds=time.monotonic() - since,
                                       finished_at=time.time()))  # fmt: skip
                if fragment is False:
                    # A fragment's request that waited while the page ran is never run itself
                    # (Streamlit drops it: "the fragment ... does not exist anymore"); the page
                    # run redrew that fragment and is timed as a page run. Kept, it would time
                    # the fragment's next, unrelated answer from this old request.
                    waiting.pop(True, None)

        await self.app(scope, timed_receive, timed_send)


def answer_times_middleware() -> list:
    """The middleware to install: one when `ADVISOR_ANSWER_TIMES` names a file, else none."""
    from starlette.middleware import Middleware

    location = os.environ.get(ENVIRONMENT_VARIABLE)
    if not location:
        return []
    return [Middleware(AnswerTimesMiddleware, path=Path(location))]
