"""Fixtures for the report tests: labelled test doubles (synthetic runs, an advisor answer) for
the fast tests, and real stored runs made with `bench.api.launch` for the slow ones."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from bench.config import (
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    PulseLoad,
    RunConfig,
    StepLoad,
    ValidityRules,
)
from bench.schema import (
    ModelInfo,
    PhaseResult,
    RequestRecord,
    RunResult,
    RunStatus,
    TelemetrySample,
    TelemetrySummary,
)

NS_PER_MS = 1_000_000
XSS_TITLE = 'Checkout <script>alert("x")</script> & "LLM" | review'


def synthetic_records(
    phase: str, start_ns: int, count: int, ttft_ms: float, tpot_ms: float, seed: int
) -> list[RequestRecord]:
    """TEST DOUBLE: request records with seeded latencies (not a measurement)."""
    rng = random.Random(seed)
    records = []
    t = start_ns
    for index in range(count):
        first = int((ttft_ms + rng.uniform(0, ttft_ms)) * NS_PER_MS)
        chunks = [t + first + int(i * tpot_ms * NS_PER_MS) for i in range(16)]
        records.append(
            RequestRecord(
                id=f"{phase}-{index}",
                start_ns=t,
                chunk_ns=chunks,
                end_ns=chunks[-1],
                input_tokens=32,
                output_tokens=16,
                phase=phase,
            )
        )
        t += int(tpot_ms * NS_PER_MS * 4)
    return records


def synthetic_run(
    backend: str,
    pattern: str = "step",
    gpu: bool = False,
    ttft_ms: float = 20.0,
    tpot_ms: float = 5.0,
    seed: int = 0,
) -> tuple[RunResult, list[RequestRecord]]:
    """TEST DOUBLE: a finished RunResult with phases, telemetry and records, built in process."""
    from bench.metrics import judge_validity, summarize

    load: Any = {
        "step": StepLoad(start=1, step=1, max=2, stage_duration_s=2),
        "concurrency": ConcurrencyLoad(concurrency=2, duration_s=2),
        "pulse": PulseLoad(capacity_rps=10, baseline_s=2, burst_s=1, recovery_s=2, window_s=0.5),
    }[pattern]
    config = RunConfig(
        backend=backend,
        model="tiny-llama",
        load=load,
        device="cuda" if gpu else "cpu",
        validity=ValidityRules(min_duration_s=0.1, min_requests=5),
        workload=GenerateWorkload(output_tokens=LengthDistribution(mean=16)),
    )
    origin = 10**12 + seed * 10**10
    phases_spec = {
        "step": [("step-c1", "concurrency", 1, 1.0), ("step-c2", "concurrency", 2, 1.6)],
        "concurrency": [("concurrency", "concurrency", 2, 1.0)],
        "pulse": [
            ("pulse-baseline", "rate", 5, 1.0),
            ("pulse-burst", "rate", 20, 3.0),
            ("pulse-recovery", "rate", 5, 1.2),
        ],
    }[pattern]
    records: list[RequestRecord] = []
    phases = []
    t = origin
    for index, (name, strategy, target, slowdown) in enumerate(phases_spec):
        phase_records = synthetic_records(
            name, t, 40, ttft_ms * slowdown, tpot_ms * slowdown, seed + index
        )
        end = max(r.end_ns for r in phase_records)
        phases.append(
            PhaseResult(
                name=name,
                strategy=strategy,
                target=target,
                start_ns=t,
                end_ns=end,
                summary=summarize(phase_records),
            )
        )
        records += phase_records
        t = end
    summary = summarize(records)
    samples = [
        TelemetrySample(
            t_ns=origin + i * 500 * NS_PER_MS,
            host_rss_bytes=int(1.2e9 + i * 1e7),
            gpu_memory_used_bytes=int(20e9 + i * 1e8) if gpu else None,
            power_w=250.0 + 10 * (i % 3) if gpu else None,
        )
        for i in range(12)
    ]
    telemetry = TelemetrySummary(
        gpu_available=gpu,
        reason=None if gpu else "TEST DOUBLE: no GPU in this synthetic run",
        peak_gpu_memory_gb=21.1 if gpu else None,
        memory_efficiency_gb_per_b_params=1.31 if gpu else None,
        energy_per_output_token_j=0.42 if gpu else None,
        peak_host_rss_gb=1.31,
        samples=samples,
    )
    pattern_report: dict[str, Any] = {}
    if pattern == "step":
        pattern_report = {
            "pattern": "step",
            "knee_stage": 1,
            "knee_concurrency": 2,
            "capacity_concurrency": 1,
            "capacity_rps": 9.5,
        }
    elif pattern == "pulse":
        pattern_report = {"pulse": {"recovery_s": 1.5, "peak_p99_ms": 210.0}}
    environment = {
        "hostname": "synthetic-host",
        "cpu": {"model": "Synthetic CPU"},
        "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] if gpu else [],
        "gpu_available": gpu,
        "libraries": {"torch": "2.13.0"},
    }
    run = RunResult(
        run_id=f"synthetic-{backend}-{pattern}-{seed}",
        status=RunStatus.COMPLETED,
        config=config,
        command=f"python -m bench run --backend {backend} --model tiny-llama --pattern {pattern}",
        environment=environment,
        model=ModelInfo(
            name="tiny-llama",
            path="/tmp/tiny-llama",
            parameters=4_000_000,
            weight_bytes=8_000_000_000 if gpu else 8_000_000,
        ),
        phases=phases,
        summary=summary,
        telemetry=telemetry,
        pattern_report=pattern_report,
        validity=judge_validity(summary, config.validity),
    )
    return run, records


def advisor_answer_double(run_ids: list[str], frameworks: list[str]) -> dict[str, Any]:
    """TEST DOUBLE of the advisor's recommend() output (issue #5's JSON shape), not a decision."""
    return {
        "stages": [
            {
                "name": "generation",
                "kind": "generate",
                "path": [
                    {
                        "question": "Needs dynamic control flow?",
                        "answer": "no",
                        "why": "profile says dynamic_control_flow: false",
                    },
                    {
                        "question": "Long sequence generation?",
                        "answer": "yes",
                        "why": "outputs of 512 tokens and more",
                    },
                ],
                "candidates": ["vllm", "tensorrt_llm", "pytorch"],
                "estimate": {
                    "fits": True,
                    "weights_gb": 26.0,
                    "decode_floor_ms_per_token": 7.8,
                    "prefill_floor_ms": 12.5,
                    "suggestions": ["fp8 KV cache"],
                },
                "recommendation": {
                    "framework": frameworks[0],
                    "configuration": {"gpu_memory_utilization": 0.9},
                    "confidence": "medium",
                    "rationale": ["fastest measured output throughput among VALID runs"],
                    "alternatives": [{"framework": f, "why": "slower here"} for f in frameworks[1:]]
                    + [{"framework": "tensorrt_llm", "why": "not installed"}],
                    "what_would_change": ["a TensorRT-LLM measurement on the target GPU"],
                    "caveats": ["measured on CPU with random weights"],
                    "evidence": [
                        {"framework": f, "source": "measured-here", "run_ids": [rid]}
                        for f, rid in zip(frameworks, run_ids, strict=False)
                    ],
                },
                "diagnostics": [
                    {
                        "title": "long tail",
                        "severity": "warning",
                        "run_id": run_ids[0],
                        "finding": "p99 is 3x p50",
                        "advice": "enable a request priority queue",
                        "command": "nsys profile -t cuda,nvtx --stats=true python benchmark.py",
                    }
                ],
            }
        ]
    }


def profile_double(title: str = XSS_TITLE) -> dict[str, Any]:
    """TEST DOUBLE profile as plain data (the advisor's WorkloadProfile shape)."""
    return {
        "title": title,
        "owner": "Platform team <ml-platform@example.com>",
        "notes": "Review on Friday | bring numbers",
        "stages": [
            {
                "name": "generation",
                "kind": "generate",
                "model": "tiny-llama",
                "long_sequence_generation": True,
                "concurrency": 2,
            }
        ],
    }


@pytest.fixture
def synthetic_report():
    return make_synthetic_report()


def make_synthetic_report(title: str = XSS_TITLE):
    """A Report from synthetic (test double) runs: step + pulse on CPU, a GPU concurrency run."""
    from advisor.report.build import build_report
    from advisor.report.model import ReferenceTable

    step, step_records = synthetic_run("pytorch", "step", seed=1)
    pulse, pulse_records = synthetic_run("pytorch", "pulse", seed=2)
    gpu, gpu_records = synthetic_run("vllm", "concurrency", gpu=True, tpot_ms=3.0, seed=3)
    runs = [gpu, step, pulse]
    records = {step.run_id: step_records, pulse.run_id: pulse_records, gpu.run_id: gpu_records}
    reference = ReferenceTable(
        title="Seed article: Llama2-13B on A100 80GB PCIe",
        source="seed article (published)",
        columns=["framework", "throughput_rps", "p99_latency_ms"],
        rows=[["PyTorch native", 18.7, 1120], ["vLLM", 61.8, 380]],
    )
    return build_report(
        profile_double(title),
        advisor_answer_double([gpu.run_id, step.run_id], ["vllm", "pytorch"]),
        runs,
        records,
        environment={
            "hostname": "synthetic-host",
            "gpu_available": False,
            "gpu_reason": "TEST DOUBLE: no GPU",
            "libraries": {"torch": "2.13.0"},
        },
        preflight=[
            {
                "severity": "warn",
                "what": "clocks not locked",
                "why": "variance",
                "admin_command": "nvidia-smi -lgc 1410,1410",
            }
        ],
        availability={
            "tensorrt_llm": {
                "name": "tensorrt_llm",
                "available": False,
                "reason": "tensorrt_llm is not installed",
            }
        },
        reference=reference,
        profile_file="checkout.yaml",
    )


@pytest.fixture(scope="session")
def real_report_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """All four formats written by the `report` command from REAL stored runs.

    The run is made by `bench.api.launch` (worker process, store, records, telemetry) with the
    CPU `pytorch` engine on tiny-llama when that backend is available here; otherwise with the
    `fake` backend, a TEST DOUBLE engine (timed fake tokens) behind the same real harness.
    """
    import typer
    from typer.testing import CliRunner

    from advisor.report.cli import register
    from bench.api import launch
    from bench.backends import backend_names, get_backend
    from bench.store import ResultStore

    root = tmp_path_factory.mktemp("real-report")
    store = ResultStore(root / "results.sqlite")
    real = "pytorch" in backend_names() and get_backend("pytorch").availability().available
    config = RunConfig(
        backend="pytorch" if real else "fake",
        model="tiny-llama",
        device="cpu",
        engine_args={} if real else {"ttft_s": 0.01, "itl_s": 0.002},
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=8)
        ),
        validity=ValidityRules(min_duration_s=1.0, min_requests=3),
        load=StepLoad(
            start=1, step=1, max=2, stage_duration_s=2.5, warmup_requests=1, stop_at_knee=False
        ),
    )
    run = launch(config, store=store)
    store.close()
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)
    out = root / "out"
    result = CliRunner().invoke(
        app,
        [
            "report",
            "--profile",
            str(PROFILE),
            "--run",
            run.run_id,
            "--store",
            str(root / "results.sqlite"),
            "--format",
            "all",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    return {"run": run, "out": out, "stem": PROFILE.stem, "real_engine": real}


PROFILE = (
    Path(__file__).resolve().parents[3] / "examples" / "profiles" / "chatbot_long_generation.yaml"
)
