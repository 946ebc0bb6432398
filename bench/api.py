"""The one programmatic entry: `launch(config)` runs a benchmark and returns its RunResult.

It serves the CLI, the web app's job runner, the tests and the benchmarks alike. Steps: check the
backend and model (user errors raised before anything starts), fingerprint the environment,
register the run in the store, sample telemetry while an isolated worker process runs the engine,
stream records to the store and `records.jsonl` as they complete, then summarise, judge validity
and store what was measured, and only then analyse the load pattern and store the finished result
(`result.json` with `out_dir`). A failing analysis or an unserialisable result marks the run
FAILED with the cause in one line; what was measured is kept.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shlex
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic_core import PydanticSerializationError

from bench.backends import get_backend
from bench.config import FP8_RANDOM_WEIGHTS_NOTE, ReplayLoad, RunConfig
from bench.errors import BackendUnavailable, UserError
from bench.load.reports import HeldLoadReport, PatternReportBase
from bench.placement import Placement, place
from bench.schema import (
    Failure,
    GroupMembership,
    RequestRecord,
    RunResult,
    RunStatus,
    TelemetrySample,
    Timings,
    ValidityStatus,
)

STORE_FLUSH_S = 0.5
HEARTBEAT_S = 5.0


def check_runnable(config: RunConfig) -> Placement:
    """Raise a UserError for an unknown/unavailable backend, bad engine arguments, a missing
    model path or a parallelism the visible GPUs cannot hold, before anything is stored or
    started; return where the run's replicas go."""
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
    check_traffic_files(config)
    placement = place(config, backend_cls)
    if config.event_loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        raise UserError("event_loop 'uvloop' asked for but uvloop is not installed")
    from bench.models import PRESETS, resolve_model

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
    from bench.backends.openai import OpenAIOptions

    default = OpenAIOptions.model_fields["prompt_format"].default
    engine_args = {**config.engine_args, "prompt_format": default}
    return config.model_copy(update={"engine_args": engine_args})


def check_traffic_files(config: RunConfig) -> None:
    """Read the run's trace and prompt file now, so a bad file (missing, binary, too large, a
    missing column, timestamps going backwards) is one UserError line before anything starts."""
    from bench.config import GenerateWorkload
    from bench.traffic_files import read_prompt_file, read_trace

    if isinstance(config.load, ReplayLoad):
        read_trace(config.load)
    workload = config.workload
    if isinstance(workload, GenerateWorkload) and workload.prompt_file is not None:
        read_prompt_file(workload.prompt_file)


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


class _RecordSink:
    """Buffers records and writes them to the store and JSONL in batches (never holds a run)."""

    def __init__(self, store: Any, run_id: str, jsonl_path: Path | None, live: Any = None) -> None:
        from bench.metrics import MetricsAccumulator

        self.store = store
        self.run_id = run_id
        self.buffer: list[RequestRecord] = []
        self.last_flush = time.monotonic()
        self.jsonl = open(jsonl_path, "a", encoding="utf-8") if jsonl_path else None  # noqa: SIM115
        self.measured = MetricsAccumulator()  # skips warm-up records itself
        self.by_replica: dict[int, Any] = {}  # replica -> MetricsAccumulator of its records
        self._accumulator = MetricsAccumulator
        self.lock = threading.Lock()
        self.live = live  # optional bench.prometheus.LiveMetrics

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

    def _flush(self) -> None:
        if self.buffer:
            if self.store is not None:
                self.store.add_records(self.run_id, self.buffer)
            if self.jsonl is not None:
                for record in self.buffer:
                    self.jsonl.write(record.model_dump_json() + "\n")
                self.jsonl.flush()
            self.buffer = []
        self.last_flush = time.monotonic()

    def close(self) -> None:
        with self.lock:
            self._flush()
            if self.jsonl is not None:
                self.jsonl.close()


def launch(
    config: RunConfig,
    store: Any | None = None,
    out_dir: Path | None = None,
    on_progress: Callable[[dict], None] | None = None,
    stop: threading.Event | None = None,
    log_dir: Path | None = None,
    prometheus_port: int | None = None,
    group: GroupMembership | None = None,
) -> RunResult:
    """Run one benchmark in an isolated worker and return the stored, finished RunResult.

    User errors (unknown backend, unavailable backend, missing model path, bad engine argument)
    raise `UserError` before anything is stored. With `prometheus_port`, live run metrics
    (request/error/token counters, TTFT and E2E histograms, in-flight, GPU telemetry gauges) are
    served on 127.0.0.1:PORT/metrics for the run's duration (e.g. for Grafana on long soaks).
    `group` marks the run as one repeat of a measurement group (bench/repeats.py).
    Engine failures never raise: the run is returned (and stored) as FAILED with the cause,
    advice and the engine log's tail.
    """
    from bench.environment import fingerprint
    from bench.load.analysis import finish_pattern_report
    from bench.metrics import judge_validity, prefix_cache_hit_rate
    from bench.models import resolve_model
    from bench.telemetry import NvmlSampler, gpu_processes, nvml_status, summarize_telemetry

    placement = check_runnable(config)
    config = with_explicit_prompt_form(config)
    model = resolve_model(
        config.model, dtype=config.precision.dtype, trust_remote_code=config.trust_remote_code
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
    if out_dir is not None:
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
    logs = Path(log_dir) if log_dir else (out_dir or Path(tempfile.gettempdir()) / "bench-logs")
    logs.mkdir(parents=True, exist_ok=True)
    result.log_path = str(logs / f"engine-{result.run_id}.log")
    if store is not None:
        store.create_run(result)

    live = None
    if prometheus_port is not None:
        from bench.prometheus import LiveMetrics

        live = LiveMetrics()
        live.start(prometheus_port)
    sink = _RecordSink(store, result.run_id, out_dir / "records.jsonl" if out_dir else None, live)
    samples: list[TelemetrySample] = []
    latest: dict[str, Any] = {}

    def on_sample(sample: TelemetrySample) -> None:
        samples.append(sample)
        latest.update(sample.model_dump(exclude_none=True))
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
    last_heartbeat = [time.monotonic()]

    def forward_progress(p: dict) -> None:
        now = time.monotonic()
        if store is not None and now - last_heartbeat[0] > HEARTBEAT_S:
            store.heartbeat(result.run_id)
            last_heartbeat[0] = now
        if live is not None and "in_flight" in p:
            live.in_flight.set(p["in_flight"])
        worker_pid = pids[0] if pids else None
        progress(
            {**p, "run_id": result.run_id, "worker_pid": worker_pid, "telemetry": dict(latest)}
        )

    started = time.monotonic()
    sampler.start()
    try:
        progress({"stage": "loading", "run_id": result.run_id})
        if placement.replicas > 1:
            outcome = _run_replicated(config, model, placement, result, logs, sink, pids,
                                      forward_progress, stop)  # fmt: skip
        else:
            outcome = _run_single(config, model, placement, result, sink, pids,
                                  forward_progress, stop)  # fmt: skip
    finally:
        sampler.stop()
        sink.close()
        if live is not None:
            live.stop()
    result.engine = outcome.loaded.get("engine", {})
    result.server_metrics = getattr(outcome, "server_metrics", [])
    result.engine["worker_exit_code"] = getattr(outcome, "exit_code", None)
    result.engine["processes_left"] = outcome.survivors  # none unless a kill failed
    with contextlib.suppress(Exception):  # check no engine process is left on any GPU
        result.engine["gpu_processes_left"] = [
            p for p in gpu_processes() if p.get("pid") in set(pids)
        ]
    if placement.replicas > 1:
        result.replicas = outcome.replicas
        per_replica_gpus = (placement.gpus or 0) // placement.replicas or None
        for replica in result.replicas:
            accumulator = sink.by_replica.get(replica.replica)
            if accumulator is not None and accumulator.requests:
                replica.summary = accumulator.summary(config.slo, per_replica_gpus)
    result.timings = Timings(
        load_s=outcome.loaded.get("load_s"),
        compile_s=outcome.loaded.get("compile_s"),
        build_s=outcome.loaded.get("build_s"),
        warmup_s=outcome.warmup_s,
    )
    result.phases = outcome.phases
    result.pattern_report = outcome.pattern_report
    result.status = RunStatus(outcome.status)
    result.failure = outcome.failure
    result.summary = sink.measured.summary(config.slo, placement.gpus)
    result.validity = judge_validity(result.summary, config.validity, result.phases)
    if config.load.pattern == "capacity":  # its infeasible probes break the SLO by design
        from bench.load.capacity import capacity_validity

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
        if rate is None and "prefix_cache" in result.engine:  # in-process engine's own stats
            rate = result.engine["prefix_cache"].get("hit_rate")
            queries = result.engine["prefix_cache"].get("queries")
        result.summary.prefix_cache_hit_rate = rate
        result.summary.prefix_cache_queries = queries
    if isinstance(config.load, ReplayLoad) and result.status == RunStatus.COMPLETED:
        from bench.load.replay import replay_validity_reasons

        reasons = replay_validity_reasons(config.load, result.pattern_report)
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
    result.engine["wall_s"] = round(time.monotonic() - started, 3)

    # What was measured is stored before any analysis: a failure in the analysis or in writing
    # its findings must never lose the run (issue 21: a soak lost at serialisation).
    measured_report = result.pattern_report
    _persist(result, store, out_dir, fallback_report=None)
    if result.pattern_report is not None and result.summary is not None:
        try:
            result.pattern_report = finish_pattern_report(
                result.pattern_report, _measured_records(result.run_id, store, out_dir), samples
            )
        except Exception as exc:  # any analysis bug: the run is FAILED, its data kept
            _fail_after_measuring(result, "the load pattern's analysis failed", exc)
            result.pattern_report = _with_analysis_error(measured_report, result.failure)
    _persist(result, store, out_dir, fallback_report=measured_report)
    progress({"stage": "done", "run_id": result.run_id, "status": result.status.value})
    return result


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _fail_after_measuring(result: RunResult, what: str, exc: BaseException) -> None:
    """Mark a measured run FAILED with `what` and the error's first line (no traceback); the
    records and metrics stay as they are. A run that had already failed keeps its first cause."""
    cause = f"{what}: {_first_line(exc)}"
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


def _persist(
    result: RunResult,
    store: Any | None,
    out_dir: Path | None,
    fallback_report: PatternReportBase | None,
) -> None:
    """Store `result` and write `result.json`. A result that cannot be serialised is marked
    FAILED and written with `fallback_report` (the report as measured), else with none."""
    try:
        text = result.model_dump_json(indent=2)
    except (PydanticSerializationError, ValueError, TypeError) as exc:
        _fail_after_measuring(result, "the run's result could not be serialised", exc)
        result.pattern_report = fallback_report
        try:
            text = result.model_dump_json(indent=2)
        except (PydanticSerializationError, ValueError, TypeError):
            result.pattern_report = None
            text = result.model_dump_json(indent=2)
    if store is not None:
        store.update_run(result)
    if out_dir is not None:
        _write_atomic(out_dir / "result.json", text)


def _run_single(
    config: RunConfig,
    model: Any,
    placement: Placement,
    result: RunResult,
    sink: _RecordSink,
    pids: list[int],
    progress: Callable[[dict], None],
    stop: threading.Event | None,
) -> Any:
    """One engine: the load pattern runs inside its worker (no IPC between request and clock)."""
    from bench.worker import Worker

    worker = Worker(
        config, model, Path(result.log_path or ""), env=placement.env(0), gpus=placement.gpus
    )
    worker.start()
    pids.append(worker.pid or 0)

    def on_progress(p: dict) -> None:
        if worker.tree is not None:  # the engine's children, for telemetry and the GPU check
            pids[1:] = sorted(worker.tree.known)
        progress(p)

    outcome = worker.run(sink.add, on_progress, stop=stop)
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
    progress: Callable[[dict], None],
    stop: threading.Event | None,
) -> Any:
    """Several engines, one load generator here (bench/replicas.py); one log per replica."""
    from bench.replicas import ReplicaPool, run_replicas

    log_paths = [logs / f"engine-{result.run_id}-replica{r}.log" for r in range(placement.replicas)]
    result.log_path = str(log_paths[0])
    pool_holder: list[ReplicaPool] = []

    def on_progress(p: dict) -> None:
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


def _measured_records(run_id: str, store: Any, out_dir: Path | None) -> Iterable[RequestRecord]:
    """The run's measured (non-warm-up) records, streamed from the store or the JSONL file."""
    from bench.metrics import iter_records_jsonl

    if store is not None:
        return store.iter_records(run_id)
    if out_dir is not None and (out_dir / "records.jsonl").exists():
        return (r for r in iter_records_jsonl(out_dir / "records.jsonl") if not r.warmup)
    return []


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


__all__ = ["Failure", "check_runnable", "launch", "reproduce_command"]
