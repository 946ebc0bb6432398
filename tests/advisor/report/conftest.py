"""Fixtures for the report tests. The advisor's answer always comes from the real `recommend()`
over a real results store and the shipped data/reference; the runs in the store are labelled
test doubles (synthetic runs, including a GPU run CI cannot make) for the fast tests, and real
runs made with `bench.run.api.launch` for the slow ones."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from advisor.workload.profile import GpuProfile, StageProfile, WorkloadProfile
from bench.core.config import (
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    PulseLoad,
    RunConfig,
    StepLoad,
    ValidityRules,
)
from bench.core.pattern_reports import PatternReportBase
from bench.core.schema import (
    ModelInfo,
    PhaseResult,
    RequestRecord,
    RunResult,
    RunStatus,
    TelemetrySample,
    TelemetrySummary,
)
from bench.storage.store import ResultStore
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

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


def pattern_report_of(
    config: RunConfig,
    phases: list[PhaseResult],
    records: list[RequestRecord],
    samples: list[TelemetrySample],
) -> PatternReportBase:
    """The pattern report the real code makes of these phases: `plan()` fed each phase's
    summary (the runner's part), the phase windows, then the after-the-run analysis (launch's)."""
    from bench.run.load.analysis import finish_pattern_report
    from bench.run.load.patterns import plan

    generator = plan(config.load, config.slo, config.validity)
    spec = next(generator)
    report: PatternReportBase | None = None
    for phase in phases:
        assert spec.name == phase.name, "synthetic phases must follow the pattern's plan"
        try:
            spec = generator.send(phase.summary)
        except StopIteration as finished:
            report = finished.value
    assert report is not None, "the synthetic phases must finish the pattern's plan"
    windows = {phase.name: [phase.start_ns, phase.end_ns] for phase in phases}
    return finish_pattern_report(report.with_phase_windows(windows), records, samples)


def synthetic_run(
    backend: str,
    pattern: str = "step",
    gpu: bool = False,
    ttft_ms: float = 20.0,
    tpot_ms: float = 5.0,
    seed: int = 0,
    engine_args: dict[str, Any] | None = None,
) -> tuple[RunResult, list[RequestRecord]]:
    """TEST DOUBLE: a finished RunResult with phases, telemetry and records, built in process."""
    from bench.core.metrics import judge_validity, summarize

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
        engine_args=engine_args or {},
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
    pattern_report = pattern_report_of(config, phases, records, samples)
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


def workload_profile(title: str = XSS_TITLE, gpu: str | None = "H100-SXM") -> WorkloadProfile:
    """The profile of the report tests: tiny-llama chat generation on the synthetic GPU's type,
    with free text that must be escaped in every format. Its workload is the synthetic runs'
    (128 / 16 tokens, bfloat16, concurrency 2): only a measurement matching the stage settles."""
    return WorkloadProfile(
        title=title,
        owner="Platform team <ml-platform@example.com>",
        notes="Review on Friday | bring numbers",
        stages=[
            StageProfile(
                name="generation",
                kind="generate",
                model="tiny-llama",
                long_sequence_generation=True,
                prompt_tokens=LengthDistribution(mean=128),
                output_tokens=LengthDistribution(mean=16),
                precision={"dtype": "bfloat16"},
                concurrency=2,
                gpu=GpuProfile(type=gpu),
            )
        ],
    )


def store_with(path: Path, runs: list[tuple[RunResult, list[RequestRecord]]]) -> ResultStore:
    """A real results store holding these runs and their records."""
    store = ResultStore(path)
    for run, records in runs:
        store.create_run(run)
        store.update_run(run)
        store.add_records(run.run_id, records)
    return store


def real_answer(profile: WorkloadProfile, store: ResultStore, reference_dir: Path):
    """The advisor's real answer (`recommend()`) over the store and a reference folder."""
    from advisor.decide.recommend import availability_map, recommend

    return recommend(
        profile, store=store, reference_dir=reference_dir, availability=availability_map()
    )


@pytest.fixture
def synthetic_report(tmp_path: Path):
    return make_synthetic_report(tmp_path)


def make_synthetic_report(folder: Path, title: str = XSS_TITLE):
    """A Report built by the real pipeline (store -> `recommend()` over the shipped
    data/reference -> `report_for`) from synthetic (test double) runs: step + pulse on CPU and a
    GPU concurrency run with CUDA graphs off (so the advisor's diagnostics have a finding)."""
    from advisor.report.build import report_for
    from advisor.sizing.measured import read_reference_folder

    step = synthetic_run("pytorch", "step", seed=1)
    pulse = synthetic_run("pytorch", "pulse", seed=2)
    gpu = synthetic_run(
        "vllm", "concurrency", gpu=True, tpot_ms=3.0, seed=3, engine_args={"enforce_eager": True}
    )
    store = store_with(folder / "results.sqlite", [gpu, step, pulse])
    profile = workload_profile(title)
    answer = real_answer(profile, store, SHIPPED_REFERENCE_DIR)
    run_ids = [gpu[0].run_id, step[0].run_id, pulse[0].run_id]
    reference = read_reference_folder(SHIPPED_REFERENCE_DIR)
    report = report_for(profile, answer, store, reference, run_ids, profile_file="checkout.yaml")
    store.close()
    return report


@pytest.fixture(scope="session")
def real_report_dir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """All four formats written by the `report` command from REAL stored runs.

    The run is made by `bench.run.api.launch` (worker process, store, records, telemetry) with the
    CPU `pytorch` engine on tiny-llama when that backend is available here; otherwise with the
    `fake` backend, a TEST DOUBLE engine (timed fake tokens) behind the same real harness.
    """
    import typer
    from typer.testing import CliRunner

    from advisor.report.cli import register
    from bench.engines.backends import backend_names, get_backend
    from bench.run.api import launch
    from bench.storage.store import ResultStore

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
