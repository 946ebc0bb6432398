"""The in-process run loop (inside the worker process): warm-up, then the phases of a pattern.

The backend is already loaded. Records stream out through `RunEvents.on_record` as requests
complete; phase results and progress (at least once a second) go out through the other two
callbacks. `config.load.max_duration_s` bounds warm-up and every phase together.
"""

from __future__ import annotations

import asyncio
import gc
import time
from array import array
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.core.clock import CLOCK
from bench.core.config import (
    GenerateWorkload,
    RunConfig,
)
from bench.core.errors import UserError
from bench.core.metrics import (
    DEADLINE_REACHED,
    NS_PER_MS,
    STOPPED,
    MetricsAccumulator,
    percentiles_ms,
)
from bench.core.pattern_reports import HarnessOverhead, PatternReportBase, empty_report
from bench.core.progress import RunProgress
from bench.core.schema import MetricsSummary, Percentiles, PhaseResult, RequestRecord
from bench.engines.backends.base import Backend, Chunk, Request
from bench.run.client_processes import ClientProcesses, splits
from bench.run.load.driver import (
    PhaseOutcome,
    PhaseSpec,
    PlanInterrupted,
    run_phase,
)
from bench.run.load.patterns import plan
from bench.run.request_producer import PreparedRequests
from bench.run.workload import PromptFileRequests, RequestFactory

PROGRESS_INTERVAL_S = 0.5
"""on_progress period (the contract is at least once a second)."""


@dataclass
class RunEvents:
    """Callbacks out of the run loop (the worker forwards them to the parent process)."""

    on_record: Callable[[RequestRecord], None]
    on_phase: Callable[[PhaseResult], None]
    on_progress: Callable[[RunProgress], None]


@dataclass
class ExecuteOutcome:
    """What `execute` did. `summary` covers every measured record of every phase together."""

    phases: list[PhaseResult]
    pattern_report: PatternReportBase
    warmup_s: float | None
    summary: MetricsSummary | None = None
    stopped: bool = False
    deadline_reached: bool = False
    scheduling_lag_ms: dict[str, Any] = field(default_factory=dict)


class _Progress:
    """Reads the live phase outcome and reports progress periodically."""

    def __init__(self, events: RunEvents, run_start_ns: int, total: int | None) -> None:
        self.events = events
        self.run_start_ns = run_start_ns
        self.total = total
        self.phase_name = "warmup"
        self.phase_index: int | None = None
        self.phase_duration_s: float | None = None
        self.outcome: PhaseOutcome | None = None
        self.run_completed = 0
        self.run_failed = 0

    def start_phase(
        self, name: str, index: int | None, duration_s: float | None, outcome: PhaseOutcome
    ) -> None:
        self.phase_name = name
        self.phase_index = index
        self.phase_duration_s = duration_s
        self.outcome = outcome

    def finish_phase(self, outcome: PhaseOutcome, measured: bool) -> None:
        if measured:
            self.run_completed += outcome.completed
            self.run_failed += outcome.failed

    def snapshot(self) -> RunProgress:
        now = CLOCK.now_ns()
        outcome = self.outcome
        phase_start = outcome.start_ns if outcome is not None and outcome.start_ns else now
        return RunProgress(
            stage="running",
            phase=self.phase_name,
            phase_index=self.phase_index,
            phases_total=self.total,
            completed=outcome.completed if outcome else 0,
            failed=outcome.failed if outcome else 0,
            elapsed_s=(now - self.run_start_ns) / 1e9,
            phase_elapsed_s=(now - phase_start) / 1e9,
            phase_duration_s=self.phase_duration_s,
            output_tokens=outcome.output_tokens if outcome else 0,
            in_flight=outcome.in_flight if outcome else 0,
            run_completed=self.run_completed,
            run_failed=self.run_failed,
        )

    def emit(self) -> None:
        self.events.on_progress(self.snapshot())

    async def loop(self) -> None:
        while True:
            await CLOCK.sleep(PROGRESS_INTERVAL_S)
            self.emit()


class _Overhead:
    """The harness's own cost over the measured phases (HarnessOverhead in the report)."""

    def __init__(self) -> None:
        self.lag_ns = array("q")
        self.cpu_s = 0.0
        self.loop_cpu_s = 0.0
        self.wall_ns = 0
        self.prepare_before_s = 0.0
        self.waits = 0
        self.sent = 0

    def measured(self, outcome: PhaseOutcome, cpu_s: float, loop_cpu_s: float) -> None:
        self.lag_ns.extend(outcome.lag_ns)
        self.cpu_s += cpu_s
        self.loop_cpu_s += loop_cpu_s
        self.wall_ns += max(0, outcome.end_ns - outcome.start_ns)
        self.sent += outcome.sent

    def report(self) -> HarnessOverhead:
        lag = None
        if self.lag_ns:
            import numpy as np

            lag = percentiles_ms(np.frombuffer(self.lag_ns, dtype=np.int64) / NS_PER_MS)
        return HarnessOverhead(
            scheduling_lag_p50_ms=None if lag is None else lag.p50,
            scheduling_lag_p99_ms=None if lag is None else lag.p99,
            timed_sends=len(self.lag_ns),
            client_cpu_s=round(self.cpu_s, 3),
            loop_cpu_s=round(self.loop_cpu_s, 3),
            measured_wall_s=round(self.wall_ns / 1e9, 3),
            prepare_before_s=round(self.prepare_before_s, 3),
            producer_waits=self.waits,
            achieved_rps=(
                round(self.sent / (self.wall_ns / 1e9), 1) if self.wall_ns and self.sent else None
            ),
        )


def _phase_result(
    spec: PhaseSpec, outcome: PhaseOutcome, config: RunConfig, gpus: int | None
) -> PhaseResult:
    return PhaseResult(
        name=spec.name,
        strategy=spec.strategy,
        target=spec.target,
        start_ns=outcome.start_ns,
        end_ns=outcome.end_ns,
        summary=outcome.summary(config.slo, gpus),
    )


def traffic_source(
    config: RunConfig, backend: Backend, model: Any
) -> tuple[PreparedRequests, Callable[[Request], AsyncIterator[Chunk]]]:
    """The run's request iterator and send function for its workload's traffic shape.

    Generated prompts (optionally from a prefix pool), the user's prompt file (tokenised with
    the model's tokenizer), or multi-turn conversations over either; each request passes through
    the backend's preparation ahead of the sending loop (`prepared_requests`).
    Conversations also wrap the send, so each turn's output reaches the next turn's prompt.
    """
    workload = config.workload
    send = backend.stream
    source: Iterator[Request]
    if isinstance(workload, GenerateWorkload) and workload.prompt_file is not None:
        from transformers import AutoTokenizer

        from bench.run.traffic_files import read_prompt_file

        tokenizer = AutoTokenizer.from_pretrained(model.path)
        source = PromptFileRequests(workload, read_prompt_file(workload.prompt_file), tokenizer)
    else:
        source = RequestFactory(workload, model.vocab_size, workload.seed)
    if isinstance(workload, GenerateWorkload) and workload.conversation is not None:
        from bench.run.conversations import ConversationRequests

        factory = source if isinstance(source, RequestFactory) else None
        if factory is None:
            raise UserError("conversations over a prompt file are not supported yet")
        conversations = ConversationRequests(
            factory, workload.conversation, workload.seed, backend.text_codec()
        )
        source = conversations
        send = conversations.observe(send)
    conversational = isinstance(workload, GenerateWorkload) and workload.conversation is not None
    return (
        prepared_requests(backend, source, ahead=not conversational),
        send,
    )


def prepared_requests(
    backend: Backend, source: Iterator[Request], ahead: bool = True
) -> PreparedRequests:
    """`source` through the backend's preparation: by a worker thread ahead of the sending loop
    when the backend prepares requests (`prepare_requests`: the openai client's text and chat
    prompts), else as each is taken (the others' `prepare_request` returns the request as it
    is, and generating a token-ID prompt costs microseconds)."""
    prepare_many = getattr(backend, "prepare_requests", None)
    return PreparedRequests(
        source, backend.prepare_request, prepare_many, ahead=ahead and prepare_many is not None
    )


def prefetch_count(spec: PhaseSpec) -> int:
    """How many requests a phase is expected to send (what `PreparedRequests.fill` prepares
    before its clock starts)."""
    if spec.max_requests is not None:
        return spec.max_requests
    if spec.duration_s is None:
        return 0
    if spec.strategy == "rate":
        return int(spec.target * spec.duration_s * 1.2) + 16
    return max(64, 8 * round(spec.target))


async def execute(
    config: RunConfig,
    backend: Backend,
    model: Any,
    events: RunEvents,
    stop: asyncio.Event,
    gpus: int | None = None,
) -> ExecuteOutcome:
    """Warm up, run every phase of `plan(config.load, ...)`, and return what happened.

    `gpus` = the GPUs the run uses (None on CPU), for the per-GPU throughput of the summaries.

    - Warm-up: `config.load.warmup_requests` requests, phase "warmup", `warmup=True`
      (recorded, never measured), at `load.warmup_concurrency()`; `warmup_s` is its wall time.
    - Phases: closed/open loop per `PhaseSpec`; each finished phase goes to `on_phase`.
    - Counters: `backend.sample_counters()` just before the first measured phase and once every
      measured request has finished, so a served engine's counter deltas (the prefix-cache hit
      rate) cover exactly the measured window, however short it is.
    - Hard bound: everything stops at run start + `max_duration_s` (in-flight requests are
      recorded as errors); `stop` ends the run the same way with error "stopped".
    - Progress: `on_progress` every PROGRESS_INTERVAL_S and at each phase change with a
      `RunProgress` of stage "running" and its run-loop fields filled (bench/core/progress.py).
    - Requests: prepared ahead of the sending loop (`PreparedRequests`): before each phase's
      clock starts, its expected requests are prepared (`fill`), blocking the loop on purpose
      (nothing is timed yet, and a virtual clock must not advance while a thread works).
    - Harness overhead: `report.harness` (lag p50/p99 over every measured send, client and
      sending-loop CPU, preparation time, producer waits); its lag bound makes a run INVALID
      (`validity_reasons` in bench/run/load/patterns.py).
    - Pattern report: plan()'s typed report (bench/core/pattern_reports.py; an empty one of the
    pattern
      when the run stopped first) with `phase_windows` {name: [start_ns, end_ns]}; steady keeps
      steady_start_ns/steady_end_ns, pulse burst_start_ns/burst_end_ns so
      `bench.run.load.analysis.finish_pattern_report` can analyse the records afterwards.
    """
    load = config.load
    requests, send = traffic_source(config, backend, model)
    run_start_ns = CLOCK.now_ns()
    deadline_ns = run_start_ns + int(load.max_duration_s * 1e9)
    timeout_s = load.request_timeout_s
    progress = _Progress(events, run_start_ns, load.phase_count())
    overhead = _Overhead()
    # Open-loop phases split across client processes (load.client_processes; openai only).
    clients = ClientProcesses(config, model, backend) if load.client_processes > 1 else None
    reporter = asyncio.get_running_loop().create_task(progress.loop())
    phases: list[PhaseResult] = []
    run_accumulator = MetricsAccumulator()
    waiting: list[tuple[PhaseSpec, PhaseOutcome]] = []  # non-draining phases, still finishing
    lags: dict[str, Any] = {}
    stopped = deadline_reached = False
    warmup_s: float | None = None
    report: PatternReportBase | None = None
    windows: dict[str, list[int]] = {}  # phase name -> [start_ns, end of issuing ns]

    async def settle(outcomes: list[tuple[PhaseSpec, PhaseOutcome]]) -> None:
        """Wait for the background requests of non-draining phases, then publish them."""
        for spec, outcome in outcomes:
            remaining_s = max(0.0, (deadline_ns - CLOCK.now_ns()) / 1e9)
            await outcome.wait_pending(remaining_s)
            if outcome.pending:
                outcome.cancel_pending(DEADLINE_REACHED)
                await outcome.wait_pending()
            outcome.end_ns = max(outcome.end_ns, CLOCK.now_ns())
            publish(spec, outcome)

    async def run(spec: PhaseSpec, index: int | None) -> PhaseOutcome:
        """Run one phase (warm-up: index None), reporting progress from its live outcome."""
        outcome = PhaseOutcome.for_spec(spec)
        progress.start_phase(spec.name, index, spec.duration_s, outcome)
        progress.emit()
        # A phase's own requests (trace replay) get the backend's preparation too.
        source = requests if spec.requests is None else prepared_requests(backend, spec.requests)
        # Before run_phase takes the phase's start time: preparing is not the phase's time.
        # Blocking on purpose (a virtual clock must not run while the worker prepares).
        started = time.perf_counter()
        if clients is not None and splits(spec, clients.count):
            clients.start()  # spawned once, before any phase clock
        source.fill(prefetch_count(spec))
        prepare_s = time.perf_counter() - started
        waits_before = source.waits
        cpu_before, loop_cpu_before = time.process_time(), time.thread_time()
        helper_cpu_before = 0.0 if clients is None else clients.helper_cpu_s()
        # What exists now (the prepared requests, the tokenizer, the modules) lives through the
        # phase: the collector need not walk it again on every full pass while requests are
        # sent (~6% of the sending loop's CPU at 3,000 req/s before). Freed by reference
        # counting as usual; unfrozen after the phase.
        gc.freeze()
        try:
            if clients is not None and source is requests and splits(spec, clients.count):
                outcome = await clients.run_phase(
                    spec,
                    source,
                    send,
                    events.on_record,
                    timeout_s,
                    stop,
                    deadline_ns,
                    outcome,
                    prefetch_count(spec),
                )
            else:
                outcome = await run_phase(
                    spec, send, source, events.on_record, timeout_s, stop, deadline_ns, outcome
                )
        finally:
            gc.unfreeze()
            if source is not requests:
                source.close()
        if not spec.warmup:
            overhead.prepare_before_s += prepare_s
            helper_cpu = 0.0 if clients is None else clients.helper_cpu_s() - helper_cpu_before
            overhead.measured(
                outcome,
                time.process_time() - cpu_before + helper_cpu,
                time.thread_time() - loop_cpu_before,
            )
            overhead.waits += source.waits - waits_before
        return outcome

    def publish(spec: PhaseSpec, outcome: PhaseOutcome) -> PhaseResult:
        result = _phase_result(spec, outcome, config, gpus)
        phases.append(result)
        run_accumulator.merge(outcome.accumulator)
        lag = outcome.scheduling_lag_ms()
        if lag is not None:
            lags[spec.name] = lag.model_dump()
        events.on_phase(result)
        return result

    try:
        if load.warmup_requests:
            spec = PhaseSpec(
                "warmup",
                "concurrency",
                load.warmup_concurrency(),
                None,
                max_requests=load.warmup_requests,
                warmup=True,
            )
            outcome = await run(spec, None)
            warmup_s = (outcome.end_ns - outcome.start_ns) / 1e9
            stopped, deadline_reached = outcome.stopped, outcome.deadline_reached
        if not stop.is_set():  # a served engine's counters where the measured window starts
            await backend.sample_counters()

        output = config.workload.mean_output_tokens()
        generator = plan(load, config.slo, config.validity, model.vocab_size, output)
        index = 0
        summary: MetricsSummary | None = None
        while not (stopped or deadline_reached):
            try:
                spec = next(generator) if index == 0 else generator.send(summary)  # type: ignore[arg-type]
            except StopIteration as finished:
                report = finished.value
                break
            outcome = await run(spec, index)
            stopped, deadline_reached = outcome.stopped, outcome.deadline_reached
            windows[spec.name] = [
                outcome.start_ns,
                outcome.issue_end_ns or outcome.end_ns,
            ]
            progress.finish_phase(outcome, measured=True)
            if spec.drain:
                await settle(waiting)
                waiting = []
                # A drained phase is complete: its published summary is the one plan() gets.
                summary = publish(spec, outcome).summary
            else:
                waiting.append((spec, outcome))
                summary = outcome.summary(config.slo, gpus)  # what finished by the end of issuing
            index += 1
        if stopped or deadline_reached:
            for _, outcome in waiting:
                outcome.cancel_pending(STOPPED if stopped else DEADLINE_REACHED)
            if report is None:  # a plan that can report what it found so far does so
                try:
                    generator.throw(PlanInterrupted(STOPPED if stopped else DEADLINE_REACHED))
                except StopIteration as finished:
                    report = finished.value
                except PlanInterrupted:
                    pass
            report = report or empty_report(load.pattern)
            report.incomplete = "stopped" if stopped else "max_duration_s reached"
        await settle(waiting)
        if not stop.is_set():  # ... and where it ends: every measured request has finished
            await backend.sample_counters()
    finally:
        reporter.cancel()
        for _, outcome in waiting:
            outcome.cancel_pending(STOPPED)
        if isinstance(requests, PreparedRequests):
            requests.close()
        if clients is not None:
            clients.close()
    progress.emit()

    report = (report or empty_report(load.pattern)).with_phase_windows(windows)
    report.scheduling_lag_ms = {name: Percentiles(**lag) for name, lag in lags.items()}
    report.harness = overhead.report()
    if clients is not None:
        report.harness.processes = clients.report()
    return ExecuteOutcome(
        phases=phases,
        pattern_report=report,
        warmup_s=warmup_s,
        summary=run_accumulator.summary(config.slo, gpus) if run_accumulator.requests else None,
        stopped=stopped,
        deadline_reached=deadline_reached,
        scheduling_lag_ms=lags,
    )
