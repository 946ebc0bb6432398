"""What a run produces: RequestRecord, metric summaries, validity and the versioned RunResult.

All timestamps are integer nanoseconds from `time.perf_counter_ns` (see bench/core/clock.py); they
are converted to ms/s only in summaries and for display. Every model round-trips through JSON.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, model_validator

from bench import SCHEMA_VERSION
from bench.core.config import RunConfig, stored_config
from bench.core.engine_facts import EngineFacts, PrometheusSample, RunEngine
from bench.core.fingerprint import StoredFingerprint
from bench.core.metric_catalog import (
    E2E_MS,
    ENERGY_PER_OUTPUT_TOKEN_J,
    ERROR_RATE,
    GOODPUT_RPS,
    ITL_MS,
    MEAN_GPU_UTILIZATION_PCT,
    OUTPUT_THROUGHPUT_TOK_S,
    OUTPUT_THROUGHPUT_TOK_S_PER_GPU,
    PEAK_GPU_MEMORY_GB,
    PREFIX_CACHE_HIT_RATE,
    REQUEST_THROUGHPUT_RPS,
    TOK_S_PER_USER,
    TOK_S_PER_USER_MEAN,
    TPOT_MS,
    TTFT_MS,
)
from bench.core.pattern_reports import PatternReport, older_report
from bench.core.percentiles import Percentiles
from bench.core.prediction import DriftCheck, drift_checks
from bench.core.strict import Strict

Record = Strict  # result models are strict too: a corrupt file is caught, not read


class RequestRecord(Record):
    """One request as the client saw it. `chunk_tokens[i]` tokens arrived at `chunk_ns[i]`."""

    id: str
    start_ns: int = Field(description="When the request was issued (includes client queueing).")
    chunk_ns: list[int] = Field(default_factory=list, description="Arrival time of each chunk.")
    chunk_tokens: list[int] = Field(
        default_factory=list, description="Tokens per chunk; empty = 1 token per chunk."
    )
    end_ns: int = Field(description="When the last byte arrived or the request failed.")
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    error: str | None = None
    phase: str = Field("", description="Name of the load phase that sent it.")
    scheduled_ns: int | None = Field(
        None, description="Planned send time (open loop); start_ns - scheduled_ns = harness lag."
    )
    warmup: bool = Field(False, description="Warm-up requests are stored but never measured.")
    replica: int = Field(
        0, ge=0, description="Which engine replica served it (0 with one replica)."
    )
    prefix_id: int | None = Field(
        None, description="Which prefix of the workload's pool (or trace block chain) it used."
    )
    prefix_tokens: int = Field(
        0, ge=0, description="Tokens of its prompt that are shared with other requests."
    )
    conversation: int | None = Field(None, description="Multi-turn: conversation number.")
    turn: int | None = Field(None, ge=0, description="Multi-turn: turn index (0 = first).")

    @property
    def ok(self) -> bool:
        return self.error is None


class TurnMetrics(Record):
    """Latency of the requests at one turn index of multi-turn conversations."""

    turn: int = Field(ge=0, description="Turn index (0 = first turn).")
    requests: int = Field(ge=0, description="Successful requests at this turn.")
    input_tokens_mean: float = Field(description="Mean prompt length at this turn (tokens).")
    ttft_ms: Percentiles | None = TTFT_MS.stored_field(None)
    e2e_ms: Percentiles | None = E2E_MS.stored_field(None)


class MetricsSummary(Record):
    """Summary of a set of records; formulas in bench/core/metrics.py (vLLM's definitions).

    A metric field is declared from its catalogue entry (`SPEC.stored_field`,
    bench/core/metric_catalog.py): the name and type here, the definition, unit and direction
    there; the counts beside them are the summary's own."""

    requests: int = Field(description="Measured requests: successful + failed + cancelled.")
    successful: int
    failed: int = Field(description="Requests the engine failed (an error that is not the "
                        "harness's own cancellation).")  # fmt: skip
    cancelled: int = Field(
        0,
        ge=0,
        description="Requests the harness cancelled (the run stopped or hit its deadline, a "
        "phase ended early: bench.core.metrics.cancelled_by_the_harness); not failures. Results "
        "stored before this count existed have 0 here and their cancellations among `failed`.",
    )
    duration_s: float
    request_throughput_rps: float = REQUEST_THROUGHPUT_RPS.stored_field()
    output_throughput_tok_s: float = OUTPUT_THROUGHPUT_TOK_S.stored_field()
    input_tokens: int = 0
    output_tokens: int = 0
    goodput_rps: float | None = GOODPUT_RPS.stored_field(None)
    error_rate: float = ERROR_RATE.stored_field()
    ttft_ms: Percentiles | None = TTFT_MS.stored_field(None)
    tpot_ms: Percentiles | None = TPOT_MS.stored_field(None)
    itl_ms: Percentiles | None = ITL_MS.stored_field(None)
    e2e_ms: Percentiles | None = E2E_MS.stored_field(None)
    tok_s_per_user: float | None = TOK_S_PER_USER.stored_field(None)
    tok_s_per_user_mean: float | None = TOK_S_PER_USER_MEAN.stored_field(None)
    gpus: int | None = Field(
        None, description="GPUs the run used (tensor_parallel_size x replicas); none on CPU."
    )
    output_throughput_tok_s_per_gpu: float | None = OUTPUT_THROUGHPUT_TOK_S_PER_GPU.stored_field(
        None
    )
    prefix_tokens: int = Field(
        0, ge=0, description="Input tokens of successful requests that are a shared prefix."
    )
    prefix_share_of_input_tokens: float | None = Field(
        None, description="prefix_tokens / input_tokens (none when no request had a prefix)."
    )
    by_turn: list[TurnMetrics] = Field(
        default_factory=list, description="Multi-turn runs: TTFT and E2E per turn index."
    )
    prefix_cache_hit_rate: float | None = PREFIX_CACHE_HIT_RATE.stored_field(None)
    prefix_cache_queries: float | None = Field(
        None, description="Prefix-cache query tokens over the run (the hit rate's denominator)."
    )


class ValidityStatus(StrEnum):
    VALID = "VALID"
    INVALID = "INVALID"


class Validity(Record):
    status: ValidityStatus
    reasons: list[str] = Field(default_factory=list)
    notes: list[str] = Field(
        default_factory=list,
        description="What limits the figures without making the run INVALID (e.g. a p99 from "
        "too few requests).",
    )


class RunStatus(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"


class PhaseResult(Record):
    """One measured phase of a load pattern (a ladder stage, the soak, the pulse baseline...)."""

    name: str
    strategy: Literal["concurrency", "rate"]
    target: float = Field(description="Concurrency (closed loop) or request rate (open loop).")
    start_ns: int
    end_ns: int
    summary: MetricsSummary


class ModelInfo(Record):
    """The checkpoint a run used and the sizes that memory efficiency and roofline need."""

    name: str = Field(description="Preset name or the checkpoint path as given.")
    path: str
    architecture: str = ""
    parameters: int = Field(0, ge=0)
    weight_bytes: int = Field(0, ge=0, description="Bytes of weights at the run's dtype.")
    vocab_size: int | None = Field(None, gt=0, description="Tokenizer size (generate kind).")
    kind: Literal["generate", "forward"] = "generate"
    random_weights: bool = True


class TelemetrySample(Record):
    """One sampler tick; None where the device does not support the reading."""

    t_ns: int
    gpu_memory_used_bytes: int | None = None
    process_gpu_memory_bytes: int | None = None
    gpu_utilization_pct: float | None = None
    power_w: float | None = None
    energy_mj: int | None = None
    sm_clock_mhz: int | None = None
    host_rss_bytes: int | None = None
    gpus: list[GpuReading] = Field(
        default_factory=list, description="Per-GPU readings behind the summed/mean fields."
    )


class GpuReading(Record):
    """One GPU's readings in one sampler tick (NVML index), None where unsupported."""

    index: int
    memory_used_bytes: int | None = None
    utilization_pct: float | None = None
    power_w: float | None = None
    energy_mj: int | None = None


class GpuTelemetry(Record):
    """One GPU over the run: NVML index, what it did (means over the measured window)."""

    index: int
    mean_utilization_pct: float | None = None
    peak_memory_used_gb: float | None = Field(
        None, description="Peak device memory used on this GPU (all processes)."
    )
    mean_power_w: float | None = None
    energy_j: float | None = None


class TelemetrySummary(Record):
    gpu_available: bool = False
    reason: str | None = Field(None, description="Why GPU readings are missing, if they are.")
    peak_gpu_memory_gb: float | None = PEAK_GPU_MEMORY_GB.stored_field(None)
    peak_gpu_memory_source: Literal["process", "device"] | None = Field(
        None,
        description="process = memory NVML attributes to the engine's processes; "
        "device = all memory used on the GPU(s) (per-process figures unavailable).",
    )
    mean_gpu_utilization_pct: float | None = MEAN_GPU_UTILIZATION_PCT.stored_field(None)
    mean_power_w: float | None = None
    energy_j: float | None = None
    energy_source: Literal["counter", "power_integral"] | None = Field(
        None,
        description="counter = NVML total-energy counter delta; power_integral = power "
        "samples integrated over time (the counter is unsupported).",
    )
    energy_per_output_token_j: float | None = ENERGY_PER_OUTPUT_TOKEN_J.stored_field(None)
    memory_efficiency_gb_per_b_params: float | None = None
    peak_host_rss_gb: float | None = None
    gpu_indices: list[int] = Field(
        default_factory=list, description="NVML indices of the GPUs sampled (the run's GPUs)."
    )
    per_gpu: list[GpuTelemetry] = Field(default_factory=list)
    samples: list[TelemetrySample] = Field(default_factory=list)


class Timings(Record):
    """Time outside steady-state measurement, reported apart from it."""

    load_s: float | None = None
    compile_s: float | None = None
    build_s: float | None = None
    warmup_s: float | None = None


class Failure(Record):
    cause: str
    advice: str | None = None
    log_tail: str | None = None


class ReplicaResult(Record):
    """One engine replica of a run: where it ran, how it ended, and its share of the load."""

    replica: int = Field(ge=0)
    cuda_visible_devices: str | None = Field(
        None, description="The replica's CUDA_VISIBLE_DEVICES (none on CPU)."
    )
    pid: int | None = None
    status: RunStatus = RunStatus.COMPLETED
    exit_code: int | None = None
    failure: Failure | None = None
    load_s: float | None = None
    log_path: str | None = Field(None, description="This replica's engine log.")
    summary: MetricsSummary | None = Field(
        None, description="This replica's measured records alone (the run's summary is all)."
    )
    engine: EngineFacts = Field(
        default_factory=EngineFacts, description="What this replica's engine reported at load."
    )


class GroupMembership(Record):
    """Where a run sits in a measurement group: N repeats of one config
    (bench/orchestrate/repeats.py)."""

    group_id: str = Field(description="Shared by every repeat of the group.")
    index: int = Field(ge=0, description="This repeat's position, 0-based.")
    planned: int = Field(ge=1, description="Repeats asked for (convergence may stop earlier).")
    cooldown_s: float = Field(0.0, ge=0, description="Pause before each repeat after the first.")


def new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:8]


class RunResult(Record):
    """Everything about one run except the per-request records (stored beside it)."""

    schema_version: int = SCHEMA_VERSION
    run_id: str = Field(default_factory=new_run_id)
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat())
    status: RunStatus = RunStatus.QUEUED
    config: RunConfig
    command: str = Field("", description="The exact command that reproduces this run.")
    environment: StoredFingerprint = Field(
        None, description="Where it measured (bench/core/fingerprint.py); None when none was taken."
    )
    model: ModelInfo | None = None
    engine: RunEngine = Field(
        default_factory=RunEngine,
        description="Engine facts (version, CUDA graphs, attention kernel), how its worker ended "
        "and the run's wall time (bench/core/engine_facts.py).",
    )
    timings: Timings = Field(default_factory=Timings)
    phases: list[PhaseResult] = Field(default_factory=list)
    summary: MetricsSummary | None = Field(
        None, description="All measured (non-warm-up) records of the run together."
    )
    pattern_report: PatternReport | None = Field(
        None,
        description="Knee/capacity, soak slopes or pulse recovery: one model per load pattern "
        "(bench/core/pattern_reports.py); None when the run ended before its load plan returned.",
    )
    telemetry: TelemetrySummary = Field(default_factory=TelemetrySummary)
    server_metrics: list[PrometheusSample] = Field(
        default_factory=list, description="Scraped Prometheus samples of a served engine."
    )
    validity: Validity | None = None
    failure: Failure | None = None
    log_path: str | None = None
    replicas: list[ReplicaResult] = Field(
        default_factory=list,
        description="Per-replica breakdown (with config.parallelism.replicas > 1).",
    )
    caveats: list[str] = Field(
        default_factory=list,
        description="What the figures do not say (e.g. FP8 on random weights: speed only).",
    )
    group: GroupMembership | None = Field(
        None, description="The measurement group (repeats) this run belongs to; none = alone."
    )

    def drift(self) -> list[DriftCheck]:
        """The advisor's prediction for this run (config.prediction) against its measured
        medians; a check `outside` its interval is drift (bench/core/prediction.py)."""
        s = self.summary
        if s is None:
            return []
        return drift_checks(
            self.config.prediction,
            s.ttft_ms.p50 if s.ttft_ms else None,
            s.tpot_ms.p50 if s.tpot_ms else None,
        )

    @model_validator(mode="before")
    @classmethod
    def _older_config(cls, data: Any) -> Any:
        """Results stored by an earlier version read as they ran (`stored_config`): axes kept
        in the engine args, capacity searches from before probes settled."""
        if isinstance(data, dict) and isinstance(data.get("config"), dict):
            data = {**data, "config": stored_config(data["config"])}
        return data

    @model_validator(mode="before")
    @classmethod
    def _older_pattern_report(cls, data: Any) -> Any:
        """Results stored before the typed reports: `{}` or a report without `pattern`."""
        if isinstance(data, dict) and isinstance(data.get("pattern_report"), dict):
            config = data.get("config")
            load = config.get("load") if isinstance(config, dict) else None
            pattern = load.get("pattern", "concurrency") if isinstance(load, dict) else None
            if pattern is None and isinstance(config, RunConfig):
                pattern = config.load.pattern
            report = older_report(data["pattern_report"], pattern or "concurrency")
            data = {**data, "pattern_report": report}
        return data
