"""Requests prepared ahead of the sending loop: a worker thread fills a bounded buffer.

Why a thread and a buffer, and why filled before the clock (issue 51): preparing a text prompt
(decode, then re-tokenise until its token count matches: `match_prompt_texts`) costs ~0.7 ms
of CPU per 128-token prompt with a Llama tokenizer, about what one event loop needs to send
1,400 requests. Done on the sending loop it capped a 2,000 req/s open loop at ~1,000 with
seconds of scheduling lag. So:

- Before each phase's clock starts, `fill(n)` blocks until the phase's expected requests are
  prepared (all of them when they fit `PREPARED_MAX_BYTES`): at 2,000 req/s for 20 s that is
  48,016 prompts, ~60 MB, prepared in ~20 s of wall time before the run, none during it.
  The sending loop then only pops from a deque. This is what `vllm bench serve` does (every
  prompt made before it starts), bounded so a long soak cannot exhaust memory.
- A phase that needs more than the buffer holds (a soak) is topped up by the worker thread
  while it runs: the thread prepares in batches while the loop sends. The tokenizer's batch
  calls run in Rust with the GIL released, so the thread rarely holds up the loop; what it does
  cost shows up in the run's scheduling lag, and a run whose lag passes the stated bound is
  INVALID (`bench.run.harness_overhead`). If the thread falls behind, the loop waits for it
  (counted in `waits`) rather than preparing on its own.
- Not a process: the prepared requests would cross a pipe (pickling costs about what building
  them does) and the worker already keeps the tokenizer for conversation turns.

Sources whose next request depends on earlier outputs (conversations) cannot be prepared ahead:
each turn is prepared when it is taken (`ahead=False`), as a conversation's turn must be.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from bench.engines.backends.base import GenerateRequest, Request

PREPARED_MAX_REQUESTS = 262_144
"""Most requests held prepared at once."""
PREPARED_MAX_BYTES = 96 * 1024 * 1024
"""Memory the prepared buffer may hold (estimated per request: prompt IDs, text, object)."""
BATCH = 256
"""Requests the worker prepares per call of the backend's batch preparation."""
STARVED_POLL_S = 0.0002
"""How often a loop waiting for the worker looks again (it blocks: the worker is behind)."""


def request_bytes(request: Request) -> int:
    """Rough memory of one prepared request: its prompt IDs (a list costs ~36 B per ID, an
    array its item size), its text and the object itself."""
    if not isinstance(request, GenerateRequest):
        return 200
    ids = request.prompt_token_ids
    per_id = getattr(ids, "itemsize", 36)
    return 200 + per_id * len(ids) + len(request.prompt_text or "")


class PreparedRequests:
    """An iterator of requests passed through the backend's preparation ahead of time.

    `ahead=True`: a daemon thread takes requests from `source` and prepares them in batches
    (`prepare_many`) into a FIFO buffer of at most PREPARED_MAX_REQUESTS / PREPARED_MAX_BYTES,
    never more than `fill` asked for (so nothing is prepared that no phase will send); the
    sending loop only pops. `ahead=False`: each request is prepared when taken (conversations).
    Order is the source's either way. Call `close()` when done (stops the thread).
    """

    def __init__(
        self,
        source: Iterator[Request],
        prepare: Callable[[Request], Request],
        prepare_many: Callable[[list[Request]], list[Request]] | None = None,
        ahead: bool = True,
    ) -> None:
        self.source = source
        self.prepare = prepare
        self.prepare_many = prepare_many or (lambda batch: [prepare(item) for item in batch])
        self.ahead = ahead
        self.ready: deque[Request] = deque()
        self.taken = 0  # requests handed to the sending loop (written by the loop only)
        self.produced = 0  # requests prepared (written by the worker only)
        self.limit = 0  # the worker prepares up to this many in all (set by fill / a wait)
        self.capacity = PREPARED_MAX_REQUESTS  # lowered once request sizes are known
        self.waits = 0  # times the loop found the buffer empty and had to wait for the worker
        self.prepare_s = 0.0  # wall time the worker spent preparing
        self._error: BaseException | None = None
        self._finished = False  # source exhausted (or failed): the worker has stopped
        self._closed = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def __iter__(self) -> PreparedRequests:
        return self

    def __next__(self) -> Request:
        ready = self.ready
        if ready:
            self.taken += 1
            return ready.popleft()
        if not self.ahead:
            return self.prepare(next(self.source))
        return self._wait_for_one()

    def _wait_for_one(self) -> Request:
        """The buffer is empty: let the worker prepare more and wait for it (the harness is
        behind; this shows as scheduling lag, never as preparation on the loop)."""
        self.waits += 1
        self._start()
        with self._changed:
            self.limit = max(self.limit, self.taken + BATCH)
            self._changed.notify_all()
        while True:
            if self.ready:
                self.taken += 1
                return self.ready.popleft()
            if self._error is not None:
                raise self._error
            if self._finished and not self.ready:
                raise StopIteration
            time.sleep(STARVED_POLL_S)

    def fill(self, count: int) -> int:
        """Before a phase's clock starts: have the next `count` requests prepared (as many as
        the buffer holds), blocking until they are; returns how many are ready."""
        if not self.ahead or count <= 0:
            return len(self.ready)
        self._start()
        with self._changed:
            self.limit = max(self.limit, self.taken + count)
            self._changed.notify_all()
            while (
                len(self.ready) < min(count, self.capacity)
                and not self._finished
                and self._error is None
            ):
                self._changed.wait(0.05)
        if self._error is not None:
            raise self._error
        return len(self.ready)

    def close(self) -> None:
        """Stop the worker (it finishes the batch in hand) and drop what it prepared."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.ready.clear()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="request-producer", daemon=True)
            self._thread.start()

    def _room(self) -> int:
        """How many the worker may prepare now (0: wait until the loop takes some or `fill`
        asks for more)."""
        wanted = self.limit - self.produced
        free = self.capacity - len(self.ready)
        return max(0, min(wanted, free, BATCH))

    def _work(self) -> None:
        """The worker: prepare batches while there is room, sleep on the condition otherwise."""
        bytes_seen = requests_seen = 0
        try:
            while True:
                with self._changed:
                    while not self._closed and self._room() == 0:
                        # Woken by fill() / a waiting loop; else look again as the loop drains.
                        self._changed.wait(0.005)
                    if self._closed:
                        return
                    room = self._room()
                batch: list[Request] = []
                exhausted = False
                for _ in range(room):
                    try:
                        batch.append(next(self.source))
                    except StopIteration:
                        exhausted = True
                        break
                if batch:
                    started = time.perf_counter()
                    prepared = self.prepare_many(batch)
                    self.prepare_s += time.perf_counter() - started
                    bytes_seen += sum(request_bytes(request) for request in prepared)
                    requests_seen += len(prepared)
                    per_request = max(1, bytes_seen // requests_seen)
                    self.capacity = max(
                        BATCH, min(PREPARED_MAX_REQUESTS, PREPARED_MAX_BYTES // per_request)
                    )
                    with self._changed:
                        self.ready.extend(prepared)
                        self.produced += len(prepared)
                        self._changed.notify_all()
                if exhausted:
                    return
        except BaseException as exc:  # handed to the loop: it raises it where it takes a request
            self._error = exc
        finally:
            with self._changed:
                self._finished = True
                self._changed.notify_all()
