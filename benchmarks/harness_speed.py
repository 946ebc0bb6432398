"""Harness-overhead benchmark: can the load generator itself keep up? (not a unit test)

Three checks against the in-process fake backend (a test double) with zero delay:
  rate         open loop at 5,000 req/s for 10 s on one pinned core, real clock: achieved rate
               and p99 scheduling lag (actual send - planned send) must be <= 1 ms.
  concurrency  closed loop with 256 in flight: every request sent comes back as a record.
  memory       a one-hour soak at 100 req/s (360,000 records, 128 output tokens each) streamed
               to a JSONL file, in virtual time (tests' clock; the CPU work is all real): the
               harness's RSS must stay under 500 MB.
Run from the repository root:  .venv/bin/python benchmarks/harness_speed.py [--only rate]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from bench.core.config import (
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    Precision,
    RateLoad,
    RunConfig,
    SteadyLoad,
)
from bench.core.schema import ModelInfo
from bench.engines.backends.fake import FakeBackend
from bench.run.runner import RunEvents, execute

MODEL = ModelInfo(name="fake", path="fake", vocab_size=32000)
MB = 1024 * 1024


class JsonlSink:
    """What the worker does with records: one JSON line each, written as they complete."""

    def __init__(self, path: Path) -> None:
        self.handle = path.open("w", buffering=1 << 20)
        self.count = 0
        self.ids: set[str] | None = None

    def __call__(self, record) -> None:
        self.handle.write(record.model_dump_json())
        self.handle.write("\n")
        self.count += 1
        if self.ids is not None:
            self.ids.add(record.id)

    def close(self) -> None:
        self.handle.close()


def workload(output_tokens: int) -> GenerateWorkload:
    return GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=128),
        output_tokens=LengthDistribution(mean=output_tokens),
    )


async def run(config: RunConfig, backend: FakeBackend, sink: JsonlSink) -> tuple:
    await backend.load(MODEL, config.workload, Precision(), "cpu")
    progress: list[dict] = []
    events = RunEvents(on_record=sink, on_phase=lambda _: None, on_progress=progress.append)
    started = time.perf_counter()
    outcome = await execute(config, backend, MODEL, events, asyncio.Event())
    return outcome, time.perf_counter() - started, progress


def rate_check(rate_rps: float, seconds: float, output_tokens: int, core: int, tmp: Path) -> dict:
    os.sched_setaffinity(0, {core})
    config = RunConfig(
        backend="fake",
        model="fake",
        workload=workload(output_tokens),
        load=RateLoad(rate_rps=rate_rps, duration_s=seconds, arrival="poisson", seed=1),
    )
    sink = JsonlSink(tmp / "rate.jsonl")
    process = psutil.Process()
    load_before = os.getloadavg()[0]
    switches_before = process.num_ctx_switches().involuntary
    cpu_before = time.process_time()
    outcome, wall_s, _ = asyncio.run(run(config, FakeBackend({}), sink))
    cpu_s = time.process_time() - cpu_before
    preempted = process.num_ctx_switches().involuntary - switches_before
    sink.close()
    phase = outcome.phases[0]
    lag = outcome.scheduling_lag_ms["rate"]
    return {
        "check": "rate",
        "target_rps": rate_rps,
        "seconds": seconds,
        "output_tokens": output_tokens,
        "sent": phase.summary.requests,
        "records_written": sink.count,
        "achieved_rps": phase.summary.requests / seconds,
        "lag_p50_ms": lag["p50"],
        "lag_p99_ms": lag["p99"],
        "lag_mean_ms": lag["mean"],
        "pass": lag["p99"] <= 1.0 and phase.summary.requests / seconds >= 0.97 * rate_rps,
        "wall_s": wall_s,
        # Evidence of sharing the core: CPU time we got, times the kernel preempted us, load.
        "process_cpu_s": cpu_s,
        "involuntary_context_switches": preempted,
        "loadavg_1min_before": load_before,
        "loadavg_1min_after": os.getloadavg()[0],
    }


def concurrency_check(concurrency: int, seconds: float, output_tokens: int, tmp: Path) -> dict:
    config = RunConfig(
        backend="fake",
        model="fake",
        workload=workload(output_tokens),
        load=ConcurrencyLoad(concurrency=concurrency, duration_s=seconds),
    )
    sink = JsonlSink(tmp / "concurrency.jsonl")
    sink.ids = set()
    backend = FakeBackend({"ttft_s": 0.001})  # suspends once, so all 256 really overlap
    outcome, wall_s, _ = asyncio.run(run(config, backend, sink))
    sink.close()
    summary = outcome.phases[0].summary
    measured = summary.requests
    warmup = config.load.warmup_requests
    return {
        "check": "concurrency",
        "concurrency": concurrency,
        "seconds": seconds,
        "requests": measured,
        "failed": summary.failed,
        "records_written": sink.count,
        "unique_ids": len(sink.ids),
        "max_active_in_backend": backend.max_active,
        "throughput_rps": summary.request_throughput_rps,
        "pass": sink.count == measured + warmup == len(sink.ids) and summary.failed == 0,
        "wall_s": wall_s,
    }


def memory_check(rate_rps: float, hours: float, output_tokens: int, tmp: Path) -> dict:
    from tests.conftest import virtual_time

    process = psutil.Process()
    peak = {"rss": process.memory_info().rss}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            peak["rss"] = max(peak["rss"], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start_rss = process.memory_info().rss
    config = RunConfig(
        backend="fake",
        model="fake",
        workload=workload(output_tokens),
        load=SteadyLoad(
            capacity_rps=rate_rps / 0.8, fraction=0.8, duration_s=hours * 3600, window_s=60
        ),
    )
    # 1 s to the first token, then all tokens at once: ~100 requests in flight, like a real
    # engine at this rate, while the CPU cost stays on the harness side.
    backend = FakeBackend({"ttft_s": 1.0})
    sink = JsonlSink(tmp / "memory.jsonl")

    async def main():
        with virtual_time(asyncio.get_running_loop()):
            return await run(config, backend, sink)

    outcome, wall_s, progress = asyncio.run(main())
    sink.close()
    done.set()
    sampler.join()
    peak["rss"] = max(peak["rss"], process.memory_info().rss)
    summary = outcome.phases[0].summary
    file_mb = (tmp / "memory.jsonl").stat().st_size / MB
    return {
        "check": "memory",
        "virtual_hours": hours,
        "rate_rps": rate_rps,
        "output_tokens": output_tokens,
        "records_written": sink.count,
        "measured_requests": summary.requests,
        "jsonl_mb": round(file_mb, 1),
        "rss_start_mb": round(start_rss / MB, 1),
        "rss_peak_mb": round(peak["rss"] / MB, 1),
        "progress_calls": len(progress),
        "pass": peak["rss"] < 500 * MB and sink.count >= 0.97 * rate_rps * hours * 3600,
        "wall_s": wall_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["rate", "concurrency", "memory"], action="append")
    parser.add_argument("--rate", type=float, default=5000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--memory-hours", type=float, default=1.0)
    args = parser.parse_args()
    checks = args.only or ["rate", "concurrency", "memory"]
    print(
        json.dumps(
            {
                "machine": platform.node(),
                "cpus": os.cpu_count(),
                "cpu": platform.processor() or platform.machine(),
                "python": platform.python_version(),
                "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            }
        ),
        flush=True,
    )
    ok = True
    with tempfile.TemporaryDirectory(prefix="harness-speed-") as tmp_name:
        tmp = Path(tmp_name)
        for check in checks:
            if check == "rate":
                result = rate_check(args.rate, args.seconds, args.output_tokens, args.core, tmp)
            elif check == "concurrency":
                result = concurrency_check(256, args.seconds, args.output_tokens, tmp)
            else:
                result = memory_check(100.0, args.memory_hours, 128, tmp)
            ok = ok and result["pass"]
            print(json.dumps(result), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
