"""SYNTHETIC test data for the advisor tests: RunResults with crafted summaries, never measured.

Every run built here carries `label="synthetic test data"` so nothing can mistake it for a
measurement if it ever leaked into a real store.
"""

from __future__ import annotations

from typing import Any

from bench.core.config import (
    SLO,
    ConcurrencyLoad,
    ForwardWorkload,
    GenerateWorkload,
    LengthDistribution,
    Precision,
    RunConfig,
)
from bench.core.schema import (
    Failure,
    MetricsSummary,
    ModelInfo,
    Percentiles,
    RunResult,
    RunStatus,
    TelemetrySummary,
    Validity,
    ValidityStatus,
)

SYNTHETIC_LABEL = "synthetic test data"
NVML_NAMES = {
    "H200": "NVIDIA H200",
    "A100-80GB-PCIE": "NVIDIA A100 80GB PCIe",
    "A100-80GB-SXM": "NVIDIA A100-SXM4-80GB",
    "H100-SXM": "NVIDIA H100 80GB HBM3",
    "L4": "NVIDIA L4",
    "T4": "Tesla T4",
}


def percentiles(p50: float, p99: float | None = None) -> Percentiles:
    p99 = p99 if p99 is not None else p50 * 1.5
    return Percentiles(mean=p50, p50=p50, p90=(p50 + p99) / 2, p99=p99)


def synthetic_run(
    backend: str,
    *,
    gpu: str | None = "H200",
    model: str = "llama-2-7b",
    kind: str = "generate",
    prompt_mean: int = 512,
    output_mean: int = 256,
    concurrency: int = 8,
    batch_size: int = 1,
    throughput_tok_s: float = 1000.0,
    request_rps: float | None = None,
    ttft_p50_ms: float = 100.0,
    ttft_p99_ms: float | None = None,
    tpot_p50_ms: float = 20.0,
    e2e_p50_ms: float = 3000.0,
    e2e_p99_ms: float | None = None,
    error_rate: float = 0.0,
    valid: bool = True,
    status: RunStatus = RunStatus.COMPLETED,
    failure: str | None = None,
    engine_args: dict[str, Any] | None = None,
    engine: dict[str, Any] | None = None,
    gpu_utilization_pct: float | None = None,
    memory_efficiency: float | None = None,
    dtype: str = "float16",
    run_id: str | None = None,
    command: str = "",
) -> RunResult:
    """A crafted RunResult (synthetic, labelled as such)."""
    if kind == "generate":
        workload: Any = GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=prompt_mean),
            output_tokens=LengthDistribution(mean=output_mean),
        )
    else:
        workload = ForwardWorkload(batch_size=batch_size, image_size=224)
    config = RunConfig(
        backend=backend,
        model=model,
        engine_args=engine_args or {},
        workload=workload,
        load=ConcurrencyLoad(concurrency=concurrency, duration_s=30),
        slo=SLO(),
        precision=Precision(dtype=dtype),
        label=SYNTHETIC_LABEL,
    )
    requests = 200
    failed = round(requests * error_rate)
    rps = request_rps if request_rps is not None else throughput_tok_s / max(output_mean, 1)
    summary = MetricsSummary(
        requests=requests,
        successful=requests - failed,
        failed=failed,
        duration_s=30.0,
        request_throughput_rps=rps,
        output_throughput_tok_s=throughput_tok_s,
        error_rate=error_rate,
        ttft_ms=percentiles(ttft_p50_ms, ttft_p99_ms),
        tpot_ms=percentiles(tpot_p50_ms),
        e2e_ms=percentiles(e2e_p50_ms, e2e_p99_ms),
    )
    environment: dict[str, Any] = {"gpus": [{"name": NVML_NAMES.get(gpu, gpu)}] if gpu else []}
    extra: dict[str, Any] = {}
    if run_id is not None:
        extra["run_id"] = run_id
    return RunResult(
        status=status,
        config=config,
        command=command,
        environment=environment,
        model=ModelInfo(name=model, path=f"/tmp/{model}", parameters=6_738_415_616, kind=kind),
        engine=engine or {},
        summary=None if status == RunStatus.FAILED else summary,
        telemetry=TelemetrySummary(
            gpu_available=gpu is not None,
            mean_gpu_utilization_pct=gpu_utilization_pct,
            memory_efficiency_gb_per_b_params=memory_efficiency,
        ),
        validity=Validity(
            status=ValidityStatus.VALID if valid else ValidityStatus.INVALID,
            reasons=[] if valid else ["only 5 requests completed (minimum 20)"],
        ),
        failure=Failure(cause=failure, advice="see the log") if failure else None,
        **extra,
    )
