"""Typed pattern reports end to end: every load pattern through `launch` and every analysis
branch (fits with and without a leak or a drift, a burst that recovers and one that does not, a
ladder with and without a knee), each result loaded back from the store and from `--out`; a
failing analysis that keeps the run; and every shipped result in data/reference loading.

The runs use the `fake` backend, a labelled TEST DOUBLE (timed fake tokens; its leak and drift
knobs allocate memory and delay tokens for real, so the telemetry and the records the analysis
reads are measured, not made up). One real CPU engine run (pytorch, tiny-llama) is marked slow.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from bench.core.config import (
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    PulseLoad,
    RateLoad,
    RunConfig,
    SteadyLoad,
    StepLoad,
)
from bench.core.metrics import iter_records_jsonl
from bench.core.pattern_reports import (
    CapacityReport,
    ConcurrencyReport,
    PulseReport,
    RateReport,
    ReplayReport,
    SteadyReport,
    StepReport,
)
from bench.core.schema import RunResult, RunStatus
from bench.run.api import launch
from bench.storage.store import ResultStore

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference"
REPORT_CLASS = {
    "concurrency": ConcurrencyReport,
    "rate": RateReport,
    "step": StepReport,
    "steady": SteadyReport,
    "pulse": PulseReport,
    "capacity": CapacityReport,
    "replay": ReplayReport,
}


def run_config(load: Any, backend: str, engine_args: dict[str, Any]) -> RunConfig:
    return RunConfig(
        backend=backend,
        model="tiny-llama",
        precision={"dtype": "float32"},
        device="cpu",
        engine_args=engine_args,
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=8)
        ),
        load=load,
        validity={"min_duration_s": 0.5, "min_requests": 5},
        telemetry_interval_s=0.2,
    )


def fake_run(load: Any, **engine_args: Any) -> RunConfig:
    return run_config(load, "fake", {"ttft_s": 0.01, "itl_s": 0.001, **engine_args})


@pytest.fixture
def store(tmp_path: Path):
    with ResultStore(tmp_path / "results.sqlite") as opened:
        yield opened


def launched(config: RunConfig, store: ResultStore, out: Path) -> RunResult:
    """Run `config`; check the result loads back, equal, from the store and from `out`, with
    every record in both; return it."""
    result = launch(config, store=store, out_dir=out)
    assert result.status == RunStatus.COMPLETED, result.failure
    assert isinstance(result.pattern_report, REPORT_CLASS[config.load.pattern])
    stored = store.get_run(result.run_id)
    written = RunResult.model_validate_json((out / "result.json").read_text())
    assert stored == result == written
    in_file = sum(1 for _ in iter_records_jsonl(out / "records.jsonl"))
    assert in_file == store.count_records(result.run_id) > 0
    return result


def test_concurrency_and_rate(store: ResultStore, tmp_path: Path) -> None:
    result = launched(
        fake_run(ConcurrencyLoad(concurrency=3, duration_s=1.0)), store, tmp_path / "c"
    )
    assert result.pattern_report.concurrency == 3
    assert list(result.pattern_report.phase_windows) == ["concurrency"]
    result = launched(
        fake_run(RateLoad(rate_rps=30, duration_s=1.0, arrival="constant")), store, tmp_path / "r"
    )
    report = result.pattern_report
    assert (report.rate_rps, report.arrival) == (30, "constant")
    assert report.scheduling_lag_ms["rate"].p99 >= 0  # open loop: the harness's send lag


def test_step_with_and_without_a_knee(store: ResultStore, tmp_path: Path) -> None:
    # Two requests at once at most: concurrency 4 gains nothing over 2, the knee. A 30% knee
    # threshold (not the default 5%): 2 doubles what 1 does and 4 adds ~0%, so a busy CI
    # machine's few-percent noise in 1 s stages cannot move the knee.
    saturating = StepLoad(levels=[1, 2, 4], stage_duration_s=1.0, warmup_requests=0, min_gain=0.3)
    result = launched(fake_run(saturating, ttft_s=0.05, max_parallel=2), store, tmp_path / "k")
    report = result.pattern_report
    assert report.knee_concurrency == 4 and report.knee_stage == 2
    assert report.capacity_concurrency == 2 and report.capacity_is_lower_bound is False
    assert report.stages[2].gain < 0.3 and report.knee_reasons
    assert [stage.concurrency for stage in report.stages] == [1, 2, 4]
    # No limit: concurrency 2 doubles what 1 does, no knee, capacity a lower bound.
    open_ladder = StepLoad(levels=[1, 2], stage_duration_s=1.0, warmup_requests=0)
    result = launched(fake_run(open_ladder, ttft_s=0.05), store, tmp_path / "n")
    report = result.pattern_report
    assert report.knee_concurrency is None and report.knee_stage is None
    assert report.capacity_concurrency == 2 and report.capacity_is_lower_bound is True


def soak(duration_s: float = 6, **engine_args: Any) -> RunConfig:
    # 0.3 s requests: a busy CI machine's scheduling spikes (~10 ms) stay under the rule's 5%
    # materiality beside them, so noise that happens to fit a slope (p < 0.01 by chance, 1 run
    # in 100) is still not flagged.
    return fake_run(
        SteadyLoad(
            capacity_rps=20, fraction=1.0, duration_s=duration_s, window_s=1, warmup_requests=0
        ),
        **{"ttft_s": 0.3, **engine_args},
    )


def test_steady_flags_a_leak_and_a_drift_and_the_run_is_kept(
    store: ResultStore, tmp_path: Path
) -> None:
    """The issue-21 soak: flagged fits (numpy.bool once) and the result still serialises."""
    result = launched(
        # 50 ms more per second: a strong trend beside a busy machine's p99 noise; 8 windows.
        soak(8, leak_bytes_per_request=1024 * 1024, ttft_growth_s_per_s=0.05),
        store,
        tmp_path / "s",
    )
    analysis = result.pattern_report.analysis
    assert analysis is not None and analysis.fits is not None
    assert analysis.leak_suspected and analysis.fits.host_rss_mb.flagged
    assert analysis.latency_drift and analysis.fits.p99_e2e_ms.flagged
    assert analysis.fits.p99_e2e_ms.slope_per_hour > 0
    assert analysis.fits.host_rss_mb.windows >= 4
    assert "no GPU memory readings" in " ".join(analysis.notes)  # CPU: no NVML


def test_steady_without_leak_or_drift(store: ResultStore, tmp_path: Path) -> None:
    result = launched(soak(), store, tmp_path / "s")
    analysis = result.pattern_report.analysis
    assert analysis is not None and analysis.fits is not None
    assert not analysis.leak_suspected and not analysis.latency_drift
    assert analysis.fits.p99_e2e_ms.windows >= 4 and analysis.fits.p99_e2e_ms.p_value is not None


def pulse(burst_s: float) -> RunConfig:
    # Four requests at once, 0.2 s each: capacity 20 req/s. Baseline 4 req/s barely queues;
    # the 40 req/s burst queues 20 requests per second of burst, drained at 16 req/s after it.
    load = PulseLoad(
        capacity_rps=20,
        baseline_fraction=0.2,
        baseline_s=3,
        burst_s=burst_s,
        recovery_s=3,
        window_s=0.5,
        warmup_requests=0,
    )
    return fake_run(load, ttft_s=0.2, itl_s=0.0, max_parallel=4)


def test_pulse_that_recovers_and_one_that_does_not(store: ResultStore, tmp_path: Path) -> None:
    result = launched(pulse(burst_s=0.5), store, tmp_path / "short")
    analysis = result.pattern_report.analysis
    assert analysis is not None and analysis.recovered and analysis.recovery_s is not None
    assert analysis.recovery_s < 3 and analysis.max_queue_depth_burst > 4
    # A 3 s burst queues about 60 requests: draining them takes longer than the 3 s recovery.
    result = launched(pulse(burst_s=3), store, tmp_path / "long")
    analysis = result.pattern_report.analysis
    assert analysis is not None and not analysis.recovered and analysis.recovery_s is None
    assert analysis.peak_e2e_ms > 2 * analysis.baseline_p99_e2e_ms


def test_a_failing_analysis_keeps_the_run_and_says_why_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI as a user runs it (in process, so the analysis can be made to fail)."""
    import bench.run.load.analysis
    from bench.cli import main

    out, db = tmp_path / "out", tmp_path / "results.sqlite"
    before_analysis: list[RunResult] = []

    def broken(*_args: Any) -> None:
        # What was measured is already written when the analysis starts.
        before_analysis.append(RunResult.model_validate_json((out / "result.json").read_text()))
        raise RuntimeError("analysis broke\nsecond line of detail")

    monkeypatch.setattr(bench.run.load.analysis, "finish_pattern_report", broken)
    code = main(
        ["run", "--backend", "fake", "--model", "tiny-llama", "--pattern", "steady",
         "--option", "load.capacity_rps=20", "--option", "load.duration_s=2",
         "--option", "load.window_s=1", "--option", "load.warmup_requests=0",
         "--store", str(db), "--out", str(out)]
    )  # fmt: skip
    printed = capsys.readouterr()
    assert code == 1
    assert "Traceback" not in printed.out + printed.err
    failure_lines = [line for line in printed.out.splitlines() if "failure:" in line]
    assert failure_lines == [
        "  failure: the load pattern's analysis failed: RuntimeError: analysis broke"
    ]
    written = RunResult.model_validate_json((out / "result.json").read_text())
    assert [r.status for r in before_analysis] == [RunStatus.COMPLETED]
    assert before_analysis[0].run_id == written.run_id
    assert written.status == RunStatus.FAILED and "analysis broke" in written.failure.cause
    assert written.summary is not None and written.summary.successful > 0  # metrics kept
    assert written.pattern_report.analysis_error == written.failure.cause
    with ResultStore(db) as store:
        assert store.get_run(written.run_id) == written
        kept = store.count_records(written.run_id)
    assert kept == sum(1 for _ in iter_records_jsonl(out / "records.jsonl")) > 0


def test_an_unserialisable_report_fails_the_run_and_keeps_the_measured_one(
    store: ResultStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue-21 failure itself, forced: an analysis hands back a numpy value unvalidated."""
    import numpy as np

    import bench.run.load.analysis

    def unvalidated(report: Any, *_args: Any) -> Any:
        return report.model_copy(update={"capacity_note": np.bool_(True)})  # no validation

    monkeypatch.setattr(bench.run.load.analysis, "finish_pattern_report", unvalidated)
    config = soak().model_copy(
        update={"load": SteadyLoad(capacity_rps=20, duration_s=1, window_s=1, warmup_requests=0)}
    )
    result = launch(config, store=store, out_dir=tmp_path)
    assert result.status == RunStatus.FAILED
    assert result.failure.cause.startswith("the run's result could not be serialised: ")
    assert "\n" not in result.failure.cause
    assert isinstance(result.pattern_report, SteadyReport)
    assert result.pattern_report.capacity_note is None  # the report as measured
    assert store.get_run(result.run_id) == result
    assert RunResult.model_validate_json((tmp_path / "result.json").read_text()) == result
    assert store.count_records(result.run_id) > 0


# --------------------------------------------------------------------------- shipped results


def shipped_results() -> list[tuple[str, dict]]:
    """(where, stored JSON) of every RunResult shipped in data/reference: the `*_runs.json`
    files and every `result.json` inside the campaigns' archives."""
    found: list[tuple[str, dict]] = []
    for path in sorted(REFERENCE.glob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, dict) and "runs" in data:
            found += [(f"{path.name}[{i}]", run) for i, run in enumerate(data["runs"])]
    for archive in sorted(REFERENCE.rglob("*.tgz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.name.endswith("/result.json"):
                    data = json.load(tar.extractfile(member))  # type: ignore[arg-type]
                    found.append((f"{archive.name}:{member.name}", data))
    return found


DERIVED_ON_LOAD = frozenset({"attainment_low", "attainment_high", "percentile"})
"""Fields added since that a stored report gets on load from what it stored (CapacityProbe's
attainment interval, from its attainment and request count; the SLO's percentile, from the
search's)."""


def holds(dumped: Any, stored: Any) -> bool:
    """`dumped` keeps every stored value; fields added since (None when absent, or derived on
    load from stored values) may be extra."""
    if isinstance(stored, dict) and isinstance(dumped, dict):
        return all(
            key in dumped and holds(dumped[key], value) for key, value in stored.items()
        ) and all(
            dumped[key] is None or key in DERIVED_ON_LOAD for key in dumped.keys() - stored.keys()
        )
    if isinstance(stored, list) and isinstance(dumped, list):
        return len(stored) == len(dumped) and all(map(holds, dumped, stored))
    return dumped == stored


def test_every_shipped_result_loads_with_a_typed_report_that_keeps_every_field(
    tmp_path: Path,
) -> None:
    shipped = shipped_results()
    assert len(shipped) >= 100  # 26 step and 78 concurrency results when this was written
    patterns = set()
    with ResultStore(tmp_path / "results.sqlite") as store:
        for where, data in shipped:
            result = RunResult.model_validate(data)
            report = result.pattern_report
            assert isinstance(report, REPORT_CLASS[result.config.load.pattern]), where
            patterns.add(report.pattern)
            dumped = report.model_dump(mode="json")
            for key, value in data["pattern_report"].items():  # nothing stored is lost
                assert holds(dumped[key], value), (where, key)
            if isinstance(report, StepReport) and report.knee_stage is not None:
                assert report.knee_concurrency == report.stages[report.knee_stage].concurrency
            store.put_run(result, [])
            assert store.get_run(result.run_id) == result, where
    assert patterns == {"step", "concurrency", "steady", "pulse", "capacity", "rate", "replay"}


def test_older_report_shapes_load() -> None:
    """Before the typed reports a run that failed before its plan returned stored `{}`; a report
    without `pattern` is read as its run's load pattern."""
    where, data = next(
        (w, d) for w, d in shipped_results() if d["config"]["load"]["pattern"] == "step"
    )
    empty = RunResult.model_validate({**data, "pattern_report": {}})
    assert empty.pattern_report is None, where
    without = {k: v for k, v in data["pattern_report"].items() if k != "pattern"}
    report = RunResult.model_validate({**data, "pattern_report": without}).pattern_report
    assert isinstance(report, StepReport) and report.stages
    with pytest.raises(ValueError, match="pattern_report"):  # a wrong field is still an error
        RunResult.model_validate({**data, "pattern_report": {**without, "knee": 3}})


def test_a_store_of_the_previous_release_reads_its_empty_pattern_reports(tmp_path: Path) -> None:
    """tests/bench/data/store_v1.sqlite holds runs written with `"pattern_report": {}`."""
    import shutil
    import sqlite3

    path = tmp_path / "v1.sqlite"
    shutil.copy(Path(__file__).parent / "data" / "store_v1.sqlite", path)
    with sqlite3.connect(path) as raw:
        stored = [json.loads(row[0])["pattern_report"] for row in raw.execute(
            "SELECT result_json FROM runs ORDER BY run_id")]  # fmt: skip
    assert stored == [{}, {}]
    with ResultStore(path) as store:
        runs = store.list_runs()
        assert len(runs) == 2 and all(run.pattern_report is None for run in runs)


@pytest.mark.slow
def test_soak_and_burst_on_a_real_cpu_engine(store: ResultStore, tmp_path: Path, tiny_llama):
    """The real PyTorch engine on the CPU (tiny-llama): a short soak and a short burst finish,
    are analysed and load back (the issue-21 soak lost its run on real engines too)."""
    steady = SteadyLoad(capacity_rps=4, fraction=1.0, duration_s=5, window_s=1, warmup_requests=1)
    result = launched(run_config(steady, "pytorch", {}), store, tmp_path / "steady")
    analysis = result.pattern_report.analysis
    assert analysis is not None and analysis.fits is not None
    assert analysis.fits.host_rss_mb.windows >= 3 and analysis.fits.p99_e2e_ms.windows >= 3
    burst = PulseLoad(
        capacity_rps=4, baseline_s=2, burst_s=1, recovery_s=2, window_s=0.5, warmup_requests=1
    )
    result = launched(run_config(burst, "pytorch", {}), store, tmp_path / "pulse")
    analysis = result.pattern_report.analysis
    assert analysis is not None and analysis.baseline_requests > 0
    assert analysis.windows and any(window.in_burst for window in analysis.windows)
