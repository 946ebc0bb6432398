"""A TEST DOUBLE backend: no model, no inference; timed token chunks for scheduler tests.

Registered as "fake". It sleeps `ttft_s` before the first token and `itl_s` between tokens on
`bench.core.clock.CLOCK` (so tests can travel in time), fails a seeded fraction of requests, and can
saturate (`max_parallel`) so the step ladder has a knee to find, and can leak memory or drift in
latency (`leak_bytes_per_request`, `ttft_growth_s_per_s`) so a soak has something to flag. Never
a performance figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import zlib
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from bench.core.clock import CLOCK
from bench.core.config import ForwardWorkload, GenerateWorkload, ParallelismConfig, Precision
from bench.core.engine_facts import EngineFacts
from bench.core.limits import MAX_ENGINE_DELAY_S, MAX_SEED
from bench.core.schema import ModelInfo
from bench.core.strict import Strict
from bench.engines.backends.base import (
    ONE_ENGINE_ONE_DEVICE,
    Availability,
    Backend,
    Chunk,
    ForwardRequest,
    LoadInfo,
    Request,
    register_backend,
)

TEST_DOUBLE_REASON = "test double: no inference (timed fake tokens for harness tests)"


class FakeOptions(Strict):
    """Knobs of the fake backend (engine_args of a run with backend 'fake')."""

    # Bounded (bench/core/limits.py): `inf` or 1e300 would hold every request forever.
    ttft_s: float = Field(
        0.0, ge=0, le=MAX_ENGINE_DELAY_S, description="Delay before the first token (s)."
    )
    itl_s: float = Field(
        0.0, ge=0, le=MAX_ENGINE_DELAY_S, description="Delay between consecutive tokens (s)."
    )
    error_rate: float = Field(0.0, ge=0, le=1, description="Fraction of requests that fail.")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seed of the failure and jitter draws.")
    ttft_jitter_s: float = Field(
        0.0,
        ge=0,
        le=MAX_ENGINE_DELAY_S,
        description="Each request's first-token delay is ttft_s + U(0, ttft_jitter_s), seeded: "
        "a known distribution for interval tests (median ttft_s + ttft_jitter_s / 2).",
    )
    max_parallel: int | None = Field(
        None,
        gt=0,
        description="Requests served at once; more queue first-come-first-served, so "
        "throughput saturates at max_parallel / per-request time (a knee for step tests).",
    )
    # Slow faults for the soak (steady pattern) tests: something for the analysis to find.
    leak_bytes_per_request: int = Field(
        0,
        ge=0,
        le=16 * 1024 * 1024,
        description="Keep this many bytes alive per request served: the worker's host RSS "
        "grows, a memory leak for the soak analysis to flag.",
    )
    ttft_growth_s_per_s: float = Field(
        0.0,
        ge=0,
        le=MAX_ENGINE_DELAY_S,
        description="TTFT grows by this many seconds per second since load(): a latency drift "
        "for the soak analysis to flag.",
    )
    # Failure injection for the isolation tests (worker crash, hang, load failure).
    crash_after_requests: int | None = Field(
        None, gt=0, description="Kill the worker process (os._exit) when this request starts."
    )
    hang_after_requests: int | None = Field(
        None, gt=0, description="From this request on, stop producing tokens (a hung engine)."
    )
    load_error: str | None = Field(None, description="Raise RuntimeError(text) from load().")
    session_children: int = Field(
        0,
        ge=0,
        le=8,
        description="Start this many helper processes, each in a session of its own with a "
        "child of its own (the shape of vLLM's engine core and TP workers), for kill tests.",
    )


def fake_output_base(request_id: str) -> int:
    """First fake output token ID of a request (then +1 per token), from its id: tests can
    tell whose output a later prompt contains."""
    return 50_000 + zlib.crc32(request_id.encode()) % 10_000 * 100


class FakeInjectedError(RuntimeError):
    """The failure the fake backend injects for `error_rate`."""


@register_backend("fake")
class FakeBackend(Backend):
    """Test double: yields one Chunk per output token (forward: one chunk of batch_size) after
    configurable delays; runs nothing. With zero delays it never suspends, so it costs only the
    harness's own per-chunk work."""

    kinds: ClassVar[frozenset[str]] = frozenset({"generate", "forward"})
    options_model: ClassVar[type[BaseModel] | None] = FakeOptions
    options: FakeOptions

    def __init__(
        self, engine_args: dict[str, Any] | None = None, prefix_caching: bool | None = None
    ) -> None:
        super().__init__(engine_args, prefix_caching)
        self._failure_rng = random.Random(self.options.seed)
        # Its own stream, so adding jitter leaves the failure draws of a seed unchanged.
        self._jitter_rng = random.Random(f"jitter-{self.options.seed}")
        self._slots: Any = None
        self.active = 0
        self.max_active = 0
        self.started = 0
        self._leaked: list[bytes] = []
        self._loaded_ns = 0

    @classmethod
    def availability(cls) -> Availability:
        return Availability(
            name="fake",
            available=True,
            version=None,
            reason=TEST_DOUBLE_REASON,
            details={"test_double": True, "note": TEST_DOUBLE_REASON},
        )

    async def load(
        self,
        model: ModelInfo,
        workload: GenerateWorkload | ForwardWorkload,
        precision: Precision,
        device: str,
        parallelism: ParallelismConfig = ONE_ENGINE_ONE_DEVICE,
    ) -> LoadInfo:
        if self.options.load_error:
            raise RuntimeError(self.options.load_error)
        if self.options.max_parallel is not None:
            self._slots = asyncio.Semaphore(self.options.max_parallel)
        self._loaded_ns = CLOCK.now_ns()
        self._helpers = [_start_session_helper() for _ in range(self.options.session_children)]
        engine: dict[str, Any] = {"test_double": True, "options": self.options.model_dump()}
        if self._helpers:
            engine["helper_pids"] = [helper.pid for helper in self._helpers]
        return LoadInfo(load_s=0.0, engine=EngineFacts.model_validate(engine))

    def stream(self, request: Request) -> AsyncIterator[Chunk]:
        # No wrapper generator on the common path: one async generator per request.
        if self._slots is None:
            return self._serve(request)
        return self._serve_queued(request)

    async def _serve_queued(self, request: Request) -> AsyncIterator[Chunk]:
        async with self._slots:
            async for chunk in self._serve(request):
                yield chunk

    async def _serve(self, request: Request) -> AsyncIterator[Chunk]:
        options = self.options
        self.started += 1
        if options.crash_after_requests and self.started >= options.crash_after_requests:
            import os

            os._exit(3)  # an engine crash: the process dies without cleanup
        if options.hang_after_requests and self.started >= options.hang_after_requests:
            await asyncio.Event().wait()  # never set: no token ever comes
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if options.leak_bytes_per_request:  # written, so the pages are resident
                self._leaked.append(b"\x01" * options.leak_bytes_per_request)
            ttft_s = options.ttft_s
            if options.ttft_growth_s_per_s:
                ttft_s += options.ttft_growth_s_per_s * (CLOCK.now_ns() - self._loaded_ns) / 1e9
            if options.ttft_jitter_s:
                ttft_s += self._jitter_rng.uniform(0.0, options.ttft_jitter_s)
            if ttft_s:
                await CLOCK.sleep(ttft_s)
            if options.error_rate and self._failure_rng.random() < options.error_rate:
                raise FakeInjectedError("fake backend: injected failure (error_rate)")
            now_ns = CLOCK.now_ns
            if isinstance(request, ForwardRequest):
                yield Chunk(now_ns(), request.batch_size)
                return
            itl_s = options.itl_s
            # Conversations resend outputs: hand on fake token IDs (deterministic per request)
            # only for them, so the common path allocates nothing extra per chunk.
            base = fake_output_base(request.id) if request.conversation is not None else None
            for index in range(request.output_tokens):
                if index and itl_s:
                    await CLOCK.sleep(itl_s)
                if base is None:
                    yield Chunk(now_ns(), 1)
                else:
                    yield Chunk(now_ns(), 1, token_ids=(base + index,))
        finally:
            self.active -= 1

    async def close(self) -> None:
        self._slots = None
        self._leaked = []
        for helper in getattr(self, "_helpers", []):  # a clean engine stops its helpers
            import psutil

            with contextlib.suppress(psutil.Error):
                for process in [*psutil.Process(helper.pid).children(recursive=True), helper]:
                    process.kill()
            helper.wait(timeout=10)


HELPER_LIFETIME_S = 300
"""Helpers exit on their own after this long, so a failing kill test cannot leak them forever."""


def _start_session_helper() -> Any:
    """A process in a new session (outside the worker's process group) with a grandchild."""
    import subprocess
    import sys

    sleeper = f"import time; time.sleep({HELPER_LIFETIME_S})"
    script = (
        "import subprocess, sys, time; "
        f"subprocess.Popen([sys.executable, '-c', {sleeper!r}]); time.sleep({HELPER_LIFETIME_S})"
    )
    return subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
