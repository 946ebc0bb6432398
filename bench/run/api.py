"""The one programmatic entry: `launch(config)` runs a benchmark and returns its RunResult.

It serves the CLI, the web app's job runner, the tests and the benchmarks alike. Steps: check the
backend and model (user errors raised before anything starts), fingerprint the environment,
register the run in the store, sample telemetry while an isolated worker process runs the engine,
stream records to the store and `records.jsonl` as they complete, then summarise, judge validity
and store what was measured, and only then analyse the load pattern and store the finished result
(`result.json` with `out_dir`). A failing analysis or an unserialisable result marks the run
FAILED with the cause in one line; what was measured is kept.

A run is never left half-written: outputs (the `out_dir`, a Prometheus port) are checked before
the run's row is created; while it runs the row is owned by this process and heartbeaten from a
thread; SIGINT/SIGTERM stop the worker (polite stop, grace, then a kill of its process group; a
second signal kills at once), mark the run FAILED and raise RunInterrupted; a results store or
output file that fails mid-run (a full disk) stops the worker, keeps the records where the disk
allows, marks the row FAILED when the store still takes a small write, and raises RunAborted.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import shlex
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticSerializationError

from bench.core.config import FP8_RANDOM_WEIGHTS_NOTE, RunConfig
from bench.core.engine_facts import GpuProcess, RunEngine
from bench.core.errors import BackendUnavailable, RunAborted, RunInterrupted, UserError
from bench.core.outputs import os_reason, prepare_out_dir, write_atomic
from bench.core.pattern_reports import HeldLoadReport, PatternReportBase
from bench.core.progress import RunProgress
from bench.core.schema import (
    Failure,
    GroupMembership,
    RequestRecord,
    RunResult,
    RunStatus,
    TelemetrySample,
    Timings,
    ValidityStatus,
)
from bench.engines.backends import get_backend
from bench.run.interrupts import RunInterrupts
from bench.run.load.patterns import validity_reasons as pattern_validity_reasons
from bench.run.memory_budget import check_memory_fits
from bench.run.placement import Placement, place
from bench.run.worker_events import WorkerOutcome

if TYPE_CHECKING:  # bench.storage.store pulls in SQLAlchemy; only its types are needed here
    from bench.storage.store import RunWriter

log = logging.getLogger("bench.run.api")

STORE_FLUSH_S = 0.5
HEARTBEAT_S = 5.0
"""How often a running run's row is heartbeaten (from a thread: loading included)."""


def check_runnable(config: RunConfig) -> Placement:
    """Raise a UserError for an unknown/unavailable backend, bad engine arguments, a load
    generator past this machine's memory, a bad trace or prompt file, a token length past the
    model's context window, a missing model path or a parallelism the visible GPUs cannot
    hold, before anything is stored or started; return where the run's replicas go."""
    backend_cls = get_backend(config.backend)
    availability = backend_cls.availability()
    if not availability.available:
        raise BackendUnavailable(
            f"backend {config.backend!r} is not available here: {availability.reason}"
        )
    if config.workload.kind not in backend_cls.kinds:
        raise UserError(
            f"backend {config.backend!r} does not run the {config.workload.kind!r} "
            f"workload kind (it runs: {', '.join(sorted(backend_cls.kinds))})"
        )
    backend_cls.validate_engine_args(config.engine_args)
    # The memory estimate first: lengths that multiply past memory are that, whatever the model.
    check_memory_fits(config)
    check_traffic_files(config)
    placement = place(config, backend_cls)
    if config.event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise UserError("event_loop 'uvloop' asked for but uvloop is not installed")
    from bench.engines.models import PRESETS, resolve_model

    if config.model not in PRESETS:  # a checkpoint path: check it now (reads config only)
        resolve_model(
            config.model, dtype=config.precision.dtype, trust_remote_code=config.trust_remote_code
        )
    return placement


def with_explicit_prompt_form(config: RunConfig) -> RunConfig:
    """The openai backend's prompt form written into the stored config (`prompt_format`), so a
    run says what it sent even after the default changes: runs stored before it was written
    sent token IDs (the old default); from now on the default is text."""
    if config.backend != "openai" or "prompt_format" in config.engine_args:
        return config
    from bench.engines.backends.openai import OpenAIOptions

    default = OpenAIOptions.model_fields["prompt_format"].default
    engine_args = {**config.engine_args, "prompt_format": default}
    return config.model_copy(update={"engine_args": engine_args})


def check_traffic_files(config: RunConfig) -> None:
    """Read the run's trace and prompt file now, so a bad file (missing, binary, too large, a
    missing column, timestamps going backwards) is one UserError line before anything starts;
    then every token length (the workload's, each row's) against the model's context window
    (bench/run/context_check.py)."""
    from bench.core.config import GenerateWorkload
    from bench.run.context_check import check_context
    from bench.run.traffic_files import read_prompt_file, read_trace

    read: dict[str, Any] = {}
    config.load.check_input_files(lambda load: read.setdefault("trace", read_trace(load)))
    workload = config.workload
    prompts = None
    if isinstance(workload, GenerateWorkload) and workload.prompt_file is not None:
        prompts = read_prompt_file(workload.prompt_file)
    check_context(config, read.get("trace"), prompts)


def run_caveats(config: RunConfig, random_weights: bool) -> list[str]:
    """What a run's figures do not say, stored with the result (reports repeat them)."""
    caveats: list[str] = []
    if config.precision.uses_fp8:
        caveats.append(
            FP8_RANDOM_WEIGHTS_NOTE
            if random_weights
            else "FP8: the bench measures speed and memory, not accuracy; check accuracy on "
            "an evaluation set through both precisions"
        )
    return caveats


def reproduce_command(config: RunConfig) -> str:
    """The exact `python -m bench run` command line that reproduces `config`."""
    args = [
        "python",
        "-m",
        "bench",
        "run",
        "--backend",
        config.backend,
        "--model",
        config.model,
        "--pattern",
        config.load.pattern,
    ]
    for key, value in sorted(config.engine_args.items()):
        args += [
            "--engine-arg",
            f"{key}={json.dumps(value) if not isinstance(value, str) else value}",
        ]
    dumped = config.model_dump(
        mode="json", exclude_defaults=True, exclude={"backend", "model", "engine_args"}
    )
    dumped.get("load", {}).pop("pattern", None)
    for path, value in _flatten(dumped):
        args += ["--option", f"{path}={json.dumps(value)}"]
    return shlex.join(args)


def _flatten(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    if isinstance(data, dict) and data:
        items: list[tuple[str, Any]] = []
        for key, value in data.items():
            items += _flatten(value, f"{prefix}.{key}" if prefix else key)
        return items
    # An empty mapping below the top level is a section switched on with all its defaults
    # (e.g. workload.conversation: {}): it must stay in the command.
    return [(prefix, data)] if prefix and (data != {} or "." in prefix) else []


def first_line_of(error: BaseException) -> str:
    """An exception's first line, with its type."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _error_line(error: BaseException) -> str:
    """A store or file error in one line: the driver's message, without SQL or parameters."""
    from bench.storage.store import first_line

    return first_line(error)


def _store_error_line(store: object, error: BaseException) -> str:
    """A store's failure in one line that names the store once: the store's own errors
    (StoreUnavailable) already begin with "results store <where>:"; others get it in front."""
    from bench.storage.store import StoreUnavailable

    if isinstance(error, StoreUnavailable):
        return _error_line(error)
    return f"results store {getattr(store, 'display', '')}: {_error_line(error)}"


class _RecordSink:
    """Buffers records and writes them to the store and JSONL in batches (never holds a run).

    It never raises into the worker loop: the first failed write (a full disk, a lost database)
    is remembered in `failure`, `on_failure` is called (the run stops), and records go on to
    whatever still takes them (the JSONL file, else a spill file beside the engine log).
    """

    def __init__(
        self,
        store: RunWriter | None,
        run_id: str,
        jsonl_path: Path | None,
        live: Any = None,
        spill_path: Path | None = None,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        from bench.core.metrics import MetricsAccumulator

        self.store = store
        self.run_id = run_id
        self.buffer: list[RequestRecord] = []
        self.last_flush = time.monotonic()
        self.jsonl_path = jsonl_path
        # A fresh file: a reused --out folder holds this run's records only, never two runs'.
        # Unbuffered bytes: a batch that does not fit is cut back whole (`_write_lines`), with
        # no Python buffer left to write its tail at close.
        self.jsonl = open(jsonl_path, "wb", buffering=0) if jsonl_path else None  # noqa: SIM115
        self.spill_path = spill_path
        self.spill: Any = None
        self.kept = {"store": 0, "jsonl": 0, "spill": 0}
        """Records written to each destination."""
        self.spill_failed = False
        self.store_failed = False
        self.failure: str | None = None
        """What failed first: '<what>: <reason>' (the run is FAILED with it)."""
        self.on_failure = on_failure
        self.measured = MetricsAccumulator()  # skips warm-up records itself
        self.by_replica: dict[int, Any] = {}  # replica -> MetricsAccumulator of its records
        self._accumulator = MetricsAccumulator
        self.lock = threading.Lock()
        self.live = live  # optional bench.run.prometheus.LiveMetrics

    def add(self, records: list[RequestRecord]) -> None:
        with self.lock:
            for record in records:
                if self.live is not None:
                    self.live.observe(record)
                self.measured.add(record)
                replica = record.replica
                if replica not in self.by_replica:
                    self.by_replica[replica] = self._accumulator()
                self.by_replica[replica].add(record)
            self.buffer.extend(records)
            if time.monotonic() - self.last_flush > STORE_FLUSH_S:
                self._flush()

    def _fail(self, cause: str) -> None:
        if self.failure is None:
            self.failure = cause
            self.on_failure()

    def _write_lines(self, handle: Any, batch: list[RequestRecord], where: str) -> None:
        """Append the batch's lines whole or not at all: a full disk takes part of a write, and
        the file is cut back to its last whole batch, so it never ends in half a record (which
        a reader of the file would take for a corrupt one) and holds what `kept` says."""
        data = memoryview("".join(r.model_dump_json() + "\n" for r in batch).encode("utf-8"))
        start = handle.tell()
        try:
            while data:
                data = data[handle.write(data) :]
        except OSError:
            with contextlib.suppress(OSError):
                handle.truncate(start)
                handle.seek(start)
            raise
        self.kept[where] += len(batch)

    def _flush(self) -> None:
        batch, self.buffer = self.buffer, []
        self.last_flush = time.monotonic()
        if not batch:
            return
        kept = False
        if self.jsonl is not None:  # first: a failing store must not take the file copy along
            try:
                self._write_lines(self.jsonl, batch, "jsonl")
                kept = True
            except OSError as error:
                self._fail(f"cannot write {self.jsonl_path}: {_error_line(error)}")
                with contextlib.suppress(OSError):
                    self.jsonl.close()
                self.jsonl = None
        if self.store is not None and not self.store_failed:
            try:
                self.store.add_records(self.run_id, batch)
                self.kept["store"] += len(batch)
                return
            except Exception as error:  # a full disk, a lost database: never into the worker
                self.store_failed = True
                self._fail(_store_error_line(self.store, error))
        if not kept and self.spill_path is not None and not self.spill_failed:
            try:
                if self.spill is None:
                    self.spill = open(self.spill_path, "ab", buffering=0)  # noqa: SIM115
                self._write_lines(self.spill, batch, "spill")
            except OSError:
                self.spill_failed = True  # the disk is full there too: nowhere left to keep them

    def kept_where(self) -> str:
        """Where the run's records are, for the one-line report of a failed run."""
        places = []
        if self.kept["store"] or (self.store is not None and not self.store_failed):
            places.append(f"{self.kept['store']} in the store")
        if self.kept["jsonl"]:
            places.append(f"{self.kept['jsonl']} in {self.jsonl_path}")
        if self.kept["spill"]:
            places.append(f"{self.kept['spill']} in {self.spill_path}")
        return ", ".join(places) or "none (nothing could be written)"

    def close(self) -> None:
        with self.lock:
            self._flush()
            for handle in (self.jsonl, self.spill):
                if handle is not None:
                    with contextlib.suppress(OSError):
                        handle.close()
            if self.spill is not None and not self.kept["spill"] and self.spill_path is not None:
                with contextlib.suppress(OSError):  # opened, then nothing fitted: no empty file
                    self.spill_path.unlink()


class _AnyStop:
    """Set when the caller's stop or one of the run's own reasons (a signal, a failed store) is:
    what the worker loop polls (`is_set`)."""

    def __init__(self, caller: threading.Event | None) -> None:
        self.caller = caller
        self.own = threading.Event()

    def is_set(self) -> bool:
        return self.own.is_set() or (self.caller is not None and self.caller.is_set())

    def set(self) -> None:
        self.own.set()


class _Heartbeat(threading.Thread):
    """Heartbeats the run's row every HEARTBEAT_S while the run lasts (loading included), so a
    store opened on another host can tell a live run from a lost one (see store.reap_stale)."""

    def __init__(self, store: RunWriter, run_id: str) -> None:
        super().__init__(name=f"heartbeat-{run_id}", daemon=True)
        self.store = store
        self.run_id = run_id
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(HEARTBEAT_S):
            try:
                self.store.heartbeat(self.run_id)
            except Exception as error:  # the record sink reports a failing store; keep beating
                log.debug("heartbeat of %s failed: %s", self.run_id, _error_line(error))

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)


def launch(
    config: RunConfig,
    store: RunWriter | None = None,
    out_dir: Path | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
    stop: threading.Event | None = None,
    log_dir: Path | None = None,
    prometheus_port: int | None = None,
    group: GroupMembership | None = None,
) -> RunResult:
    """Run one benchmark in an isolated worker and return the stored, finished RunResult.

    User errors (unknown backend, unavailable backend, missing model path, bad engine argument,
    an `out_dir` that cannot be written, a busy Prometheus port, a config the store could not
    read back) raise `UserError` before anything is stored. With `prometheus_port`, live run
    metrics (request/error/token counters, TTFT and E2E histograms, in-flight, GPU telemetry
    gauges) are served on 127.0.0.1:PORT/metrics for the run's duration (e.g. for Grafana on
    long soaks). `out_dir` gets this run's `result.json` and `records.jsonl`, replacing a
    previous run's (as GuideLLM's --output-path does). `group` marks the run as one repeat of a
    measurement group (bench/orchestrate/repeats.py). Engine failures never raise: the run is
    returned (and stored) as FAILED with the cause, advice and the engine log's tail. SIGINT/SIGTERM
    raise RunInterrupted and a failing store or output file RunAborted, each after the worker is
    stopped and the run marked FAILED where the store still allows.
    """
    from bench.engines.models import engine_initialises_weights, resolve_model
    from bench.run.environment import fingerprint

    placement = check_runnable(config)
    config = with_explicit_prompt_form(config)
    model = resolve_model(
        config.model,
        dtype=config.precision.dtype,
        trust_remote_code=config.trust_remote_code,
        weights=not engine_initialises_weights(config.backend, config.engine_args),
    )
    progress = on_progress or (lambda _p: None)

    result = RunResult(
        config=config,
        status=RunStatus.RUNNING,
        command=reproduce_command(config),
        environment=fingerprint(),
        model=model,
        caveats=run_caveats(config, model.random_weights),
        group=group,
    )
    # Everything that can refuse the run is checked before its row exists.
    if out_dir is not None:
        out_dir = prepare_out_dir(Path(out_dir))
        with contextlib.suppress(FileNotFoundError):  # the previous run's, not this one's
            (out_dir / "result.json").unlink()
    logs = Path(log_dir) if log_dir else (out_dir or Path(tempfile.gettempdir()) / "bench-logs")
    try:
        logs.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UserError(
            f"engine log folder {logs}: cannot create it ({os_reason(error)})"
        ) from None
    result.log_path = str(logs / f"engine-{result.run_id}.log")
    live = _start_live_metrics(prometheus_port)
    run_stop = _AnyStop(stop)
    sink: _RecordSink | None = None
    jsonl_path = out_dir / "records.jsonl" if out_dir else None
    try:
        try:
            sink = _RecordSink(
                store,
                result.run_id,
                jsonl_path,
                live,
                spill_path=logs / f"records-{result.run_id}.jsonl",
                on_failure=run_stop.set,
            )
        except OSError as error:
            raise UserError(f"cannot write {jsonl_path} ({os_reason(error)})") from None
        if store is not None:
            store.create_run(result)  # UnstorableRun (a UserError) if it would not load back
    except BaseException:
        if sink is not None:
            sink.close()
        if live is not None:
            live.stop()
        raise
    heartbeat = _Heartbeat(store, result.run_id) if store is not None else None
    with RunInterrupts(run_stop) as interrupts:
        if heartbeat is not None:
            heartbeat.start()
        try:
            measured_report = _measure(config, model, placement, result, store, out_dir, logs,
                                       sink, live, progress, run_stop, interrupts)  # fmt: skip
        except BaseException as error:  # a harness bug: the row must not stay RUNNING
            _fail_stored_row(store, result, f"harness error: {_error_line(error)}")
            raise
        finally:
            if heartbeat is not None:
                heartbeat.stop()
        problems = _persist(result, store, out_dir, sink, fallback_report=measured_report)
    progress(RunProgress(stage="done", run_id=result.run_id, status=result.status))
    if interrupts.signal_number is not None:
        raise RunInterrupted(
            f"run {result.run_id} interrupted by {interrupts.name}: worker stopped, run marked "
            f"FAILED; records kept: {sink.kept_where()}" + "".join(f"; {p}" for p in problems),
            interrupts.signal_number,
            result,
        )
    if sink.failure is not None or problems:
        first = sink.failure or problems[0]
        # Said only where the row reads FAILED now (a problem line may say it already).
        said = any("row marked FAILED" in problem for problem in problems)
        landed = store is not None and not said and _landed(store, result)
        stored = "; stored as FAILED" if landed else ""
        # A failed record write stops the worker; a failed result write comes after its end.
        stopped = "; worker stopped" if sink.failure is not None else ""
        # A later problem that begins with the same failure (the store full for the records,
        # then for the result too) says only what it adds: the store is named once.
        rest = [p.removeprefix(first).lstrip("; ") for p in problems if p != first]
        raise RunAborted(
            f"run {result.run_id} FAILED: {first}{stopped}; records kept: "
            f"{sink.kept_where()}{stored}" + "".join(f"; {p}" for p in rest if p),
            result,
        )
    return result


def _start_live_metrics(port: int | None) -> Any:
    """The Prometheus endpoint, bound before the run's row exists: a busy port is a user error,
    not a run left behind."""
    if port is None:
        return None
    from bench.run.prometheus import LiveMetrics

    live = LiveMetrics()
    try:
        live.start(port)
    except (OSError, OverflowError) as error:
        reason = os_reason(error) if isinstance(error, OSError) else str(error)
        raise UserError(
            f"--prometheus-port {port}: cannot serve metrics there ({reason})"
        ) from None
    return live


def _measure(
    config: RunConfig,
    model: Any,
    placement: Placement,
    result: RunResult,
    store: RunWriter | None,
    out_dir: Path | None,
    logs: Path,
    sink: _RecordSink,
    live: Any,
    progress: Callable[[RunProgress], None],
    run_stop: _AnyStop,
    interrupts: RunInterrupts,
) -> PatternReportBase | None:
    """Run the worker(s), then fill `result`: metrics, validity, telemetry; store what was
    measured; then the pattern analysis. Returns the pattern report as measured (before the
    analysis), which is written instead of an analysed one that cannot be serialised."""
    from bench.core.metrics import judge_validity, prefix_cache_hit_rate
    from bench.run.load.analysis import finish_pattern_report
    from bench.run.telemetry import NvmlSampler, gpu_processes, nvml_status, summarize_telemetry

    samples: list[TelemetrySample] = []
    latest: list[TelemetrySample] = []  # one merged sample: a reading a tick lacks keeps its last

    def on_sample(sample: TelemetrySample) -> None:
        samples.append(sample)
        merged = {**latest[0].model_dump(exclude_none=True)} if latest else {}
        latest[:] = [TelemetrySample.model_validate(merged | sample.model_dump(exclude_none=True))]
        if live is not None:
            live.observe_sample(sample)

    pids: list[int] = []  # every engine process the parent knows of, for telemetry
    gpu_ok, gpu_reason = nvml_status()
    sampler = NvmlSampler(
        config.telemetry_interval_s,
        on_sample,
        pids=lambda: list(pids),
        device_indices=placement.nvml_indices if placement.device == "cuda" else None,
    )

    def forward_progress(p: RunProgress) -> None:
        if live is not None and p.in_flight is not None:
            live.in_flight.set(p.in_flight)
        worker_pid = pids[0] if pids else None
        telemetry = latest[0] if latest else None
        progress(
            p.model_copy(
                update={"run_id": result.run_id, "worker_pid": worker_pid, "telemetry": telemetry}
            )
        )

    started = time.monotonic()
    sampler.start()
    try:
        progress(RunProgress(stage="loading", run_id=result.run_id))
        if placement.replicas > 1:
            outcome = _run_replicated(config, model, placement, result, logs, sink, pids,
                                      forward_progress, run_stop)  # fmt: skip
        else:
            outcome = _run_single(config, model, placement, result, sink, pids,
                                  forward_progress, run_stop, interrupts.kill_now)  # fmt: skip
    finally:
        sampler.stop()
        sink.close()
        if live is not None:
            live.stop()
    result.engine = RunEngine.model_validate(
        {
            **outcome.loaded.engine.model_dump(),
            "worker_exit_code": outcome.exit_code,
            "processes_left": outcome.survivors,  # none unless a kill failed
        }
    )
    result.server_metrics = outcome.server_metrics
    with contextlib.suppress(Exception):  # check no engine process is left on any GPU
        result.engine.gpu_processes_left = [
            GpuProcess.model_validate(p) for p in gpu_processes() if p.get("pid") in set(pids)
        ]
    if placement.replicas > 1:
        result.replicas = outcome.replicas
        per_replica_gpus = (placement.gpus or 0) // placement.replicas or None
        for replica in result.replicas:
            accumulator = sink.by_replica.get(replica.replica)
            if accumulator is not None and accumulator.requests:
                replica.summary = accumulator.summary(config.slo, per_replica_gpus)
    result.timings = Timings(
        load_s=outcome.loaded.load_s,
        compile_s=outcome.loaded.compile_s,
        build_s=outcome.loaded.build_s,
        warmup_s=outcome.warmup_s,
    )
    result.phases = outcome.phases
    result.pattern_report = outcome.pattern_report
    result.status = RunStatus(outcome.status)
    result.failure = outcome.failure
    if interrupts.signal_number is not None:
        result.status = RunStatus.FAILED
        result.failure = Failure(
            cause=f"interrupted by {interrupts.name}",
            advice="The run was stopped by a signal (Ctrl-C, or a kill from a scheduler) before "
            "it finished; the records measured until then are kept. Run it again for a "
            "complete result.",
        )
    elif sink.failure is not None:
        result.status = RunStatus.FAILED
        result.failure = Failure(
            cause=sink.failure,
            advice="A results store or output file could not be written (a full disk, a lost "
            "database): the run was stopped. Free space or fix the store, then run it again.",
        )
    result.summary = sink.measured.summary(config.slo, placement.gpus)
    result.validity = judge_validity(
        result.summary, config.validity, result.phases, config.workload.kind
    )
    if config.load.capacity_search:  # its infeasible probes break the SLO by design
        from bench.run.load.capacity import capacity_validity

        result.validity = capacity_validity(
            result.pattern_report, result.phases, result.summary, config.validity
        )
    if result.status != RunStatus.COMPLETED:
        result.validity.status = ValidityStatus.INVALID
        result.validity.reasons.append(f"run {result.status.value.lower()}")
    measured = sink.measured
    window_ns = (
        (measured.first_start_ns, measured.last_end_ns)
        if measured.first_start_ns is not None and measured.last_end_ns is not None
        else None
    )
    if result.summary is not None:  # the engine's prefix cache over the measured window
        rate, queries = prefix_cache_hit_rate(result.server_metrics, window_ns)
        stats = result.engine.prefix_cache  # an in-process engine's own stats
        if rate is None and stats is not None:
            rate, queries = stats.hit_rate, stats.queries
        result.summary.prefix_cache_hit_rate = rate
        result.summary.prefix_cache_queries = queries
    if result.status == RunStatus.COMPLETED:
        reasons = pattern_validity_reasons(config.load, result.pattern_report)
        if reasons:
            result.validity.status = ValidityStatus.INVALID
            result.validity.reasons.extend(reasons)
    result.telemetry = summarize_telemetry(  # rates and energy over the measured window only
        samples,
        measured.output_tokens,
        model.parameters,
        gpu_ok,
        None if gpu_ok else gpu_reason,
        window_ns=window_ns,
    )
    result.engine.wall_s = round(time.monotonic() - started, 3)

    # What was measured is stored before any analysis: a failure in the analysis or in writing
    # its findings must never lose the run (issue 21: a soak lost at serialisation).
    measured_report = result.pattern_report
    _persist(result, store, out_dir, sink)
    if result.pattern_report is not None and result.summary is not None:
        try:
            records_source = None if sink.store_failed else store
            result.pattern_report = finish_pattern_report(
                result.pattern_report,
                _measured_records(result.run_id, records_source, out_dir),
                samples,
            )
        except Exception as exc:  # any analysis bug: the run is FAILED, its data kept
            _fail_after_measuring(result, "the load pattern's analysis failed", exc)
            result.pattern_report = _with_analysis_error(measured_report, result.failure)
    return measured_report


def _fail_after_measuring(result: RunResult, what: str, exc: BaseException) -> None:
    """Mark a measured run FAILED with `what` and the error's first line (no traceback); the
    records and metrics stay as they are. A run that had already failed keeps its first cause."""
    cause = f"{what}: {first_line_of(exc)}"
    if result.failure is None:
        result.failure = Failure(
            cause=cause,
            advice="the measured records (records.jsonl, the store) and metrics are kept; "
            "report this error with the run's result.json",
        )
    result.status = RunStatus.FAILED
    if result.validity is not None:
        result.validity.status = ValidityStatus.INVALID
        result.validity.reasons.append(cause)


def _with_analysis_error(
    report: PatternReportBase | None, failure: Failure | None
) -> PatternReportBase | None:
    if isinstance(report, HeldLoadReport) and failure is not None:
        return report.model_copy(update={"analysis_error": failure.cause})
    return report


def _landed(store: RunWriter, result: RunResult) -> bool:
    """Whether the store's row already holds `result` as finished (its status, no longer
    RUNNING): a write that raised may still have gone in."""
    try:
        stored = store.get_run(result.run_id)
    except Exception:
        return False
    return stored.status != RunStatus.RUNNING and stored.status == result.status


def _fail_stored_row(store: RunWriter | None, result: RunResult, cause: str) -> bool:
    """Mark the run's RUNNING row FAILED with `cause` (a small write that keeps what is stored);
    False when the store cannot take even that (the row is reaped later: its owner is gone)."""
    if store is None:
        return False
    try:
        return bool(store.fail_run(result.run_id, Failure(cause=cause)))
    except Exception as error:
        log.debug("cannot mark %s FAILED: %s", result.run_id, _error_line(error))
        return False


def _serialisable(result: RunResult, fallback_report: PatternReportBase | None) -> None:
    """Make `result` serialisable: one that is not is marked FAILED and keeps `fallback_report`
    (the report as measured), or no report when even that cannot be written."""
    try:
        result.model_dump_json()
        return
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        _fail_after_measuring(result, "the run's result could not be serialised", exc)
    result.pattern_report = fallback_report
    try:
        result.model_dump_json()
    except (PydanticSerializationError, ValueError, TypeError):
        result.pattern_report = None


def _persist(
    result: RunResult,
    store: RunWriter | None,
    out_dir: Path | None,
    sink: _RecordSink,
    fallback_report: PatternReportBase | None = None,
) -> list[str]:
    """Store the result and write `result.json`; each write that failed, in one line (empty
    when both worked). An unserialisable result is FAILED and written with `fallback_report`; a
    result the store refuses (it would not load back) makes the run FAILED with that cause; a
    store that cannot be written gets the small FAILED mark instead."""
    from bench.storage.store import UnstorableRun

    _serialisable(result, fallback_report)
    problems: list[str] = []
    if store is not None:
        try:
            store.update_run(result)
        except UnstorableRun as error:
            result.status = RunStatus.FAILED
            result.failure = Failure(cause=str(error))
            if not _fail_stored_row(store, result, str(error)):
                problems.append(f"{error}; the row could not be marked FAILED either")
        except Exception as error:  # a full disk, a lost database
            reason = _store_error_line(store, error)
            if _landed(store, result):
                # SQLite can report a full disk after the row's update went in: the result is
                # stored as it is, so the run stands and the row is not rewritten.
                log.warning("%s, reported after the result was stored", reason)
            else:
                if result.status != RunStatus.FAILED:
                    result.status = RunStatus.FAILED
                    result.failure = Failure(cause=f"result not stored: {reason}")
                cause = result.failure.cause if result.failure else reason
                marked = _fail_stored_row(store, result, cause)
                problems.append(
                    f"{reason}; row marked FAILED"
                    if marked
                    else f"{reason}; the row could not be marked FAILED (it is failed as 'owner "
                    "process gone' when the store is next opened here)"
                )
    if out_dir is not None:
        path = out_dir / "result.json"
        try:
            write_atomic(path, result.model_dump_json(indent=2))
        except OSError as error:  # write_atomic leaves no partial file behind
            reason = f"cannot write {path} ({os_reason(error)})"
            problems.append(reason)
            if result.status != RunStatus.FAILED:
                _fail_for_result_file(result, store, reason, problems)
    if sink.failure is not None and sink.failure in problems:
        problems.remove(sink.failure)
    return problems


def _fail_for_result_file(
    result: RunResult, store: RunWriter | None, reason: str, problems: list[str]
) -> None:
    """The run is reported FAILED when its result.json cannot be written, so its stored row
    (COMPLETED a moment ago) must not say otherwise: stored again as FAILED with that cause,
    its metrics and records kept."""
    result.status = RunStatus.FAILED
    result.failure = Failure(cause=f"result not written: {reason}")
    if store is None:
        return
    try:
        store.update_run(result)
    except Exception as error:
        problems.append(f"{_store_error_line(store, error)}; the row still says COMPLETED")


def _run_single(
    config: RunConfig,
    model: Any,
    placement: Placement,
    result: RunResult,
    sink: _RecordSink,
    pids: list[int],
    progress: Callable[[RunProgress], None],
    stop: Any,
    kill_now: threading.Event | None = None,
) -> WorkerOutcome:
    """One engine: the load pattern runs inside its worker (no IPC between request and clock)."""
    from bench.run.worker import Worker

    worker = Worker(
        config, model, Path(result.log_path or ""), env=placement.env(0), gpus=placement.gpus
    )
    worker.start()
    pids.append(worker.pid or 0)

    def on_progress(p: RunProgress) -> None:
        if worker.tree is not None:  # the engine's children, for telemetry and the GPU check
            pids[1:] = sorted(worker.tree.known)
        progress(p)

    outcome = worker.run(sink.add, on_progress, stop=stop, kill_now=kill_now)
    pids[1:] = sorted(worker.tree.known) if worker.tree is not None else []
    outcome.survivors = list(worker.survivors)
    return outcome


def _run_replicated(
    config: RunConfig,
    model: Any,
    placement: Placement,
    result: RunResult,
    logs: Path,
    sink: _RecordSink,
    pids: list[int],
    progress: Callable[[RunProgress], None],
    stop: Any,
) -> WorkerOutcome:
    """Several engines, one load generator here (bench/run/replicas.py); one log per replica."""
    from bench.run.replicas import ReplicaPool, run_replicas

    log_paths = [logs / f"engine-{result.run_id}-replica{r}.log" for r in range(placement.replicas)]
    result.log_path = str(log_paths[0])
    pool_holder: list[ReplicaPool] = []

    def on_progress(p: RunProgress) -> None:
        if pool_holder:
            pids[:] = pool_holder[0].pids()
        progress(p)

    outcome = run_replicas(
        config, model, placement, log_paths, sink.add, on_progress, stop=stop,
        on_pool=pool_holder.append,
    )  # fmt: skip
    if pool_holder:
        pids[:] = pool_holder[0].pids()
    return outcome


def _measured_records(
    run_id: str, store: RunWriter | None, out_dir: Path | None
) -> Iterable[RequestRecord]:
    """The run's measured (non-warm-up) records, streamed from the store or the JSONL file."""
    from bench.core.metrics import iter_records_jsonl

    if store is not None:
        return store.iter_records(run_id)
    if out_dir is not None and (out_dir / "records.jsonl").exists():
        return (r for r in iter_records_jsonl(out_dir / "records.jsonl") if not r.warmup)
    return []


__all__ = [
    "Failure",
    "RunAborted",
    "RunInterrupted",
    "check_runnable",
    "launch",
    "reproduce_command",
]
