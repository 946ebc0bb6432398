"""launch() and the isolated worker: stored results, crash/hang/OOM/stop handling, kill test.

The failure-injection runs use the `fake` backend (a labelled test double) because a real engine
cannot be made to crash on demand; the kill test uses the real `pytorch` engine.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest

from bench.cli import build_run_config
from bench.core.config import ConcurrencyLoad, GenerateWorkload, LengthDistribution, RunConfig
from bench.core.schema import RunStatus
from bench.run.api import launch, reproduce_command
from bench.storage.store import ResultStore


def fake_config(**engine_args) -> RunConfig:
    return RunConfig(
        backend="fake",
        model="tiny-llama",
        precision={"dtype": "float32"},
        engine_args={"ttft_s": 0.002, "itl_s": 0.0005, **engine_args},
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=8)
        ),
        load=ConcurrencyLoad(concurrency=4, duration_s=1.5, warmup_requests=2),
        validity={"min_duration_s": 1, "min_requests": 10},
    )


@pytest.fixture
def store(tmp_path):
    with ResultStore(tmp_path / "results.sqlite") as s:
        yield s


def group_gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_launch_stores_run_records_and_files(store, tmp_path, tiny_llama):
    out = tmp_path / "out"
    result = launch(fake_config(), store=store, out_dir=out)
    assert result.status == RunStatus.COMPLETED
    assert result.validity.status.value == "VALID", result.validity.reasons
    stored = store.get_run(result.run_id)
    assert stored.status == RunStatus.COMPLETED
    assert stored.summary == result.summary
    # every measured record reached the store and the JSONL; warm-up kept but not measured
    measured = list(store.iter_records(result.run_id))
    assert len(measured) == result.summary.requests > 10
    lines = (out / "records.jsonl").read_text().splitlines()
    warmups = [json.loads(line) for line in lines if json.loads(line)["warmup"]]
    assert len(lines) == len(measured) + len(warmups) and len(warmups) == 2
    on_disk = json.loads((out / "result.json").read_text())
    assert on_disk["schema_version"] == 1 and on_disk["run_id"] == result.run_id
    assert result.telemetry.peak_host_rss_gb and result.telemetry.peak_host_rss_gb > 0.01
    assert not result.telemetry.gpu_available and result.telemetry.reason


def test_worker_event_loop_is_the_configs_and_recorded(store, tiny_llama):
    """asyncio by default; uvloop on request (vLLM's own server runs on it); the engine facts
    say which loop the worker really ran, and the reproduce command carries the choice."""
    pytest.importorskip("uvloop")
    default = launch(fake_config(), store=store)
    assert default.status == RunStatus.COMPLETED and default.engine.event_loop == "asyncio"
    config = fake_config().model_copy(update={"event_loop": "uvloop"})
    result = launch(config, store=store)
    assert result.status == RunStatus.COMPLETED, result.failure
    assert result.engine.event_loop == "uvloop" and result.summary.requests > 10
    assert "event_loop=" in reproduce_command(config)


def test_uvloop_asked_for_but_missing_is_a_user_error(monkeypatch, tiny_llama):
    import importlib.util

    from bench.core.errors import UserError
    from bench.run.api import check_runnable

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "uvloop" else real_find_spec(name, *a),
    )
    with pytest.raises(UserError, match="uvloop is not installed"):
        check_runnable(fake_config().model_copy(update={"event_loop": "uvloop"}))
    check_runnable(fake_config())  # the default loop needs nothing extra


def test_reproduce_command_rebuilds_the_same_config():
    config = fake_config(max_parallel=3)
    config = config.model_copy(update={"label": "x y", "device": "cpu", "event_loop": "uvloop"})
    args = shlex.split(reproduce_command(config))
    assert args[:4] == ["python", "-m", "bench", "run"]
    rebuilt = build_run_config(
        None,
        args[args.index("--backend") + 1],
        args[args.index("--model") + 1],
        args[args.index("--pattern") + 1],
        {},
        [args[i + 1] for i, a in enumerate(args) if a == "--engine-arg"],
        [args[i + 1] for i, a in enumerate(args) if a == "--option"],
    )
    assert rebuilt == config


def test_worker_crash_is_failed_with_partial_records_and_next_run_works(store, tiny_llama):
    crashed = launch(fake_config(crash_after_requests=40), store=store)
    assert crashed.status == RunStatus.FAILED
    assert "exited with code 3" in crashed.failure.cause
    kept = list(store.iter_records(crashed.run_id))
    assert 0 < len(kept) < 40  # what arrived before the crash is kept
    assert crashed.validity.status.value == "INVALID"
    assert store.get_run(crashed.run_id).status == RunStatus.FAILED
    again = launch(fake_config(), store=store)
    assert again.status == RunStatus.COMPLETED


def test_hung_engine_is_killed_by_the_watchdog(store, tiny_llama):
    config = fake_config(hang_after_requests=12).model_copy(update={"watchdog_s": 2.0})
    pids: list[int] = []
    started = time.monotonic()
    result = launch(config, store=store, on_progress=lambda p: pids.append(p.worker_pid))
    assert time.monotonic() - started < 30
    assert result.status == RunStatus.FAILED
    assert "hung" in result.failure.cause and result.failure.advice
    pid = next(p for p in pids if p)
    assert group_gone(pid)


def test_load_out_of_memory_gets_inference_advice(store, tiny_llama):
    result = launch(
        fake_config(load_error="CUDA out of memory. Tried to allocate 2 GiB"), store=store
    )
    assert result.status == RunStatus.FAILED
    assert "out of memory" in result.failure.cause
    advice = result.failure.advice.lower()
    assert "gpu_memory_utilization" in advice and "quantis" in advice
    assert "gradient checkpointing" not in advice
    assert "RuntimeError" in (result.failure.log_tail or "")


def test_stop_event_stops_the_run(store, tiny_llama):
    config = fake_config().model_copy(
        update={"load": ConcurrencyLoad(concurrency=4, duration_s=60, warmup_requests=1)}
    )
    stop = threading.Event()
    pids: list[int] = []

    def on_progress(p):
        pids.append(p.worker_pid)
        if p.stage == "running":
            stop.set()

    started = time.monotonic()
    result = launch(config, store=store, on_progress=on_progress, stop=stop)
    assert time.monotonic() - started < 30
    assert result.status == RunStatus.STOPPED
    assert group_gone(next(p for p in pids if p))


@pytest.mark.slow
def test_kill_real_engine_mid_run_then_next_run_succeeds(store, tiny_llama):
    """The issue's kill test on the real PyTorch engine: SIGKILL the worker group mid-run."""
    config = RunConfig(
        backend="pytorch",
        model="tiny-llama",
        precision={"dtype": "float32"},
        device="cpu",
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=8)
        ),
        load=ConcurrencyLoad(concurrency=2, duration_s=30, warmup_requests=1),
        validity={"min_duration_s": 1, "min_requests": 3},
    )
    killed = threading.Event()

    def on_progress(p):
        if p.stage == "running" and (p.completed or 0) >= 3 and not killed.is_set():
            killed.set()
            os.killpg(p.worker_pid, signal.SIGKILL)

    result = launch(config, store=store, on_progress=on_progress)
    assert killed.is_set()
    assert result.status == RunStatus.FAILED
    assert "-9" in result.failure.cause
    assert len(list(store.iter_records(result.run_id))) >= 3
    short = config.model_copy(
        update={"load": ConcurrencyLoad(concurrency=2, duration_s=2, warmup_requests=1)}
    )
    again = launch(short, store=store)
    assert again.status == RunStatus.COMPLETED
    assert again.summary.successful >= 3
    for record in store.iter_records(again.run_id):
        assert record.output_tokens == 8
        assert record.chunk_ns == sorted(record.chunk_ns)


def test_live_prometheus_endpoint_serves_run_metrics(store, tiny_llama):
    """--prometheus-port: while the run lasts, /metrics counts its requests."""
    import urllib.request

    from bench.engines.launchers import free_port
    from bench.run.prometheus import parse_prometheus_text

    port = free_port()
    scraped: list[list[dict]] = []

    def on_progress(p):
        if p.stage == "running" and (p.completed or 0) > 5 and not scraped:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                scraped.append(parse_prometheus_text(r.read().decode()))

    result = launch(fake_config(), store=store, on_progress=on_progress, prometheus_port=port)
    assert result.status == RunStatus.COMPLETED
    assert scraped, "the endpoint was never scraped"
    requests = [s for s in scraped[0] if s["name"].endswith("requests_total")]
    assert requests and requests[0]["value"] > 0


def test_telemetry_is_summarised_over_the_measured_window(store, tiny_llama, monkeypatch):
    """Energy per token, utilisation and power must exclude load and warm-up: launch hands
    summarize_telemetry the first measured start and last measured end."""
    import bench.run.telemetry as telemetry

    seen: dict = {}
    real = telemetry.summarize_telemetry

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(telemetry, "summarize_telemetry", spy)
    result = launch(fake_config(), store=store)
    measured = list(store.iter_records(result.run_id))
    assert seen["window_ns"] == (
        min(r.start_ns for r in measured),
        max(r.end_ns for r in measured),
    )


@pytest.mark.slow
def test_served_engine_metrics_and_usage_reach_the_result(store, tmp_path, tiny_llama):
    """openai backend launching a REAL CPU `vllm serve` through launch(): the server's /metrics
    samples are stored with the run and every record's output count is the server's usage; the
    engine's IPC sockets went to the worker's scratch folder, not the system temp folder."""
    temp = Path(tempfile.gettempdir())
    before = set(temp.iterdir())
    config = RunConfig(
        backend="openai",
        model="tiny-llama",
        precision={"dtype": "float32"},
        engine_args={
            "launch": "vllm",
            "server_args": {"max_model_len": 512, "max_num_seqs": 4, "enforce_eager": True},
            "server_env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
            "server_log_path": str(tmp_path / "server.log"),
            "startup_timeout_s": 300,
            "metrics_interval_s": 0.5,
        },
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=8)
        ),
        load=ConcurrencyLoad(concurrency=2, duration_s=3, warmup_requests=1),
        validity={"min_duration_s": 1, "min_requests": 3},
    )
    result = launch(config, store=store)
    assert result.status == RunStatus.COMPLETED, result.failure
    assert any(key.startswith("vllm:") for sample in result.server_metrics for key in sample.values)
    assert store.get_run(result.run_id).server_metrics == result.server_metrics
    records = list(store.iter_records(result.run_id))
    assert records and all(r.output_tokens == 8 for r in records)
    left = set(temp.iterdir()) - before
    assert not [path for path in left if path.is_socket()], f"the engine left sockets in {temp}"
    assert not [path for path in left if path.name.startswith("bench-engine-")], "scratch kept"


def test_a_dead_workers_last_events_go_through_the_live_handler(tmp_path, tiny_llama):
    """Events a worker queued just before dying (records, its outcome) are applied in full:
    the records reach the parent and a sent outcome counts (a crash in close() loses nothing)."""
    from bench.core.pattern_reports import ConcurrencyReport
    from bench.core.schema import RequestRecord
    from bench.run.worker import Worker, _EventState
    from bench.run.worker_events import Outcome, Records, WorkerOutcome

    worker = Worker(fake_config(), tiny_llama, tmp_path / "engine.log")  # never started
    record = RequestRecord(
        id="r0", start_ns=1, chunk_ns=[2, 3], chunk_tokens=[1, 1], end_ns=3,
        input_tokens=16, output_tokens=2,
    )  # fmt: skip
    worker._events.put(Records(records=[record]))
    worker._events.put(Outcome(pattern_report=ConcurrencyReport(concurrency=4), warmup_s=0.25))
    got: list = []
    outcome = WorkerOutcome(status="FAILED")
    worker._drain(outcome, _EventState(last_progress=0.0), got.extend, lambda _p: None)
    assert [r.id for r in got] == ["r0"] and got[0].output_tokens == 2
    assert outcome.status == "COMPLETED" and outcome.warmup_s == 0.25
    assert outcome.pattern_report == ConcurrencyReport(concurrency=4)
