"""What an engine worker process tells its parent: one typed event per message, and the outcome
the parent builds from them.

The worker (bench/run/worker.py, and a replica worker of bench/run/replicas.py) puts these models on
its multiprocessing queue; the parent matches on their class. They are pickled, not JSON-encoded, so
a record or a pattern report crosses as the model it already is (cheaper than a dump and a
re-parse). The hot events (`Records`, `RequestDone`) are built with `model_construct` from
values the worker's own code made; the others are validated where they are built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from bench.core.engine_facts import EngineFacts, PrometheusSample
from bench.core.pattern_reports import PatternReport, PatternReportBase
from bench.core.progress import RunProgress
from bench.core.schema import Failure, PhaseResult, ReplicaResult, RequestRecord
from bench.core.strict import Strict


class Progress(Strict):
    """The worker is alive: a stage change ("loading") or the run loop's snapshot ("running")."""

    kind: Literal["progress"] = "progress"
    progress: RunProgress


class Loaded(Strict):
    """The engine has loaded: how long it took and what the engine reports about itself."""

    kind: Literal["loaded"] = "loaded"
    load_s: float | None = None
    compile_s: float | None = None
    build_s: float | None = None
    engine: EngineFacts = Field(
        default_factory=EngineFacts,
        description="Engine facts (RunResult.engine): version, kernels.",
    )


class Records(Strict):
    """A batch of finished requests."""

    kind: Literal["records"] = "records"
    records: list[RequestRecord]


class PhaseDone(Strict):
    kind: Literal["phase"] = "phase"
    phase: PhaseResult


class Outcome(Strict):
    """The load pattern returned; sent before the engine is closed, so a failing close keeps it."""

    kind: Literal["outcome"] = "outcome"
    pattern_report: PatternReport
    warmup_s: float | None = None
    stopped: bool = False
    server_metrics: list[PrometheusSample] = Field(
        default_factory=list, description="Scraped Prometheus samples of a served engine."
    )


class Closed(Strict):
    """The engine closed cleanly; the worker exits next."""

    kind: Literal["closed"] = "closed"


class WorkerError(Strict):
    """The worker failed: one-line cause and the traceback's end."""

    kind: Literal["error"] = "error"
    cause: str
    log_tail: str | None = None


StreamedChunk = tuple[int, int, int | None, int | None]
"""(t_ns, tokens, usage_output_tokens, usage_input_tokens) of one streamed chunk."""


class RequestDone(Strict):
    """A replica worker served one request the parent's load generator sent it."""

    kind: Literal["done"] = "done"
    key: int
    chunks: list[StreamedChunk]
    error: str | None = None


class Exited(Strict):
    """Made by the parent, not sent: the worker process is gone (with its exit code)."""

    kind: Literal["exited"] = "exited"
    exit_code: int | None = None


WorkerEvent = Progress | Loaded | Records | PhaseDone | Outcome | Closed | WorkerError
"""What a run worker sends (bench/run/worker.py)."""

ReplicaEvent = Loaded | Progress | RequestDone | Closed | WorkerError | Exited
"""What the parent's reader of a replica worker hands its pool (bench/run/replicas.py)."""


@dataclass
class WorkerOutcome:
    """What the parent learned from one run's worker(s); a replicated run adds `replicas`."""

    status: str  # COMPLETED | FAILED | STOPPED
    failure: Failure | None = None
    loaded: Loaded = field(default_factory=Loaded)
    phases: list[PhaseResult] = field(default_factory=list)
    pattern_report: PatternReportBase | None = None
    warmup_s: float | None = None
    exit_code: int | None = None
    server_metrics: list[PrometheusSample] = field(default_factory=list)
    survivors: list[int] = field(default_factory=list)
    replicas: list[ReplicaResult] = field(default_factory=list)


__all__ = [
    "Closed",
    "Exited",
    "Loaded",
    "Outcome",
    "PhaseDone",
    "Progress",
    "Records",
    "ReplicaEvent",
    "RequestDone",
    "StreamedChunk",
    "WorkerError",
    "WorkerEvent",
    "WorkerOutcome",
]
