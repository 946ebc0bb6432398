"""Tests of the NVML sampler and the telemetry summary, with the fake NVML (a test double) and,
where a GPU exists, the real pynvml."""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
import time
import urllib.request

import psutil
import pytest

from bench.core.schema import RequestRecord, TelemetrySample
from bench.run.prometheus import LiveMetrics, parse_prometheus_text
from bench.run.telemetry import (
    MAX_STORED_SAMPLES,
    NvmlSampler,
    downsample,
    gpu_processes,
    nvml_status,
    process_tree,
    summarize_telemetry,
)
from tests.bench.fake_nvml import FakeGpu, FakeNvml, FakeProcess, NVMLError_LibraryNotFound

GB = 10**9


def sample(t_s: float, **fields) -> TelemetrySample:
    return TelemetrySample(t_ns=int(t_s * 1e9), **fields)


# --------------------------------------------------------------------------- one sample


def test_sample_fields_from_fake_nvml():
    fake = FakeNvml([FakeGpu(memory_used_bytes=3 * GB, utilization_pct=87, power_mw=312_500)])
    sampler = NvmlSampler(0.1, on_sample=lambda s: None, nvml=fake)
    taken = sampler.sample_once()
    assert sampler.gpu_available is True
    assert sampler.reason is None
    assert taken.gpu_memory_used_bytes == 3 * GB
    assert taken.gpu_utilization_pct == 87.0
    assert taken.power_w == 312.5
    assert taken.energy_mj == 1_000_000
    assert taken.sm_clock_mhz == 1410
    assert taken.process_gpu_memory_bytes == 0  # this process holds no memory on the fake GPU
    assert taken.host_rss_bytes > 10_000_000  # this Python process is resident
    assert abs(taken.t_ns - time.perf_counter_ns()) < 5e9


def test_not_supported_reading_is_none_and_others_survive():
    gpu = FakeGpu(
        unsupported={"nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetUtilizationRates"}
    )
    taken = NvmlSampler(0.1, on_sample=lambda s: None, nvml=FakeNvml([gpu])).sample_once()
    assert taken.energy_mj is None
    assert taken.gpu_utilization_pct is None
    assert taken.power_w == 250.0
    assert taken.gpu_memory_used_bytes == gpu.memory_used_bytes


def test_several_devices_are_summed_and_partial_support_gives_none():
    gpus = [
        FakeGpu(memory_used_bytes=2 * GB, power_mw=100_000, utilization_pct=40, sm_clock_mhz=1000),
        FakeGpu(memory_used_bytes=5 * GB, power_mw=300_000, utilization_pct=80, sm_clock_mhz=1400),
        FakeGpu(memory_used_bytes=99 * GB),
    ]
    gpus[1].unsupported = {"nvmlDeviceGetTotalEnergyConsumption"}
    sampler = NvmlSampler(0.1, on_sample=lambda s: None, device_indices=[0, 1], nvml=FakeNvml(gpus))
    taken = sampler.sample_once()
    assert taken.gpu_memory_used_bytes == 7 * GB  # device 2 not selected
    assert taken.power_w == 400.0
    assert taken.gpu_utilization_pct == 60.0
    assert taken.sm_clock_mhz == 1200
    assert taken.energy_mj is None  # one device without a counter: no misleading partial sum


def test_missing_device_index_is_reported():
    sampler = NvmlSampler(0.1, on_sample=lambda s: None, device_indices=[3], nvml=FakeNvml())
    taken = sampler.sample_once()
    assert sampler.gpu_available is False
    assert "GPU index 3 does not exist" in sampler.reason
    assert taken.host_rss_bytes is not None


def test_process_memory_summed_over_the_pid_tree():
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert child.pid in process_tree([os.getpid()])
        gpus = [
            FakeGpu(
                processes=[
                    FakeProcess(pid=os.getpid(), usedGpuMemory=1 * GB),
                    FakeProcess(pid=child.pid, usedGpuMemory=2 * GB),
                    FakeProcess(pid=999_999_999, usedGpuMemory=40 * GB),  # someone else's
                ]
            ),
            FakeGpu(processes=[FakeProcess(pid=child.pid, usedGpuMemory=4 * GB)]),
        ]
        sampler = NvmlSampler(
            0.1, on_sample=lambda s: None, pids=lambda: [os.getpid()], nvml=FakeNvml(gpus)
        )
        taken = sampler.sample_once()
        assert taken.process_gpu_memory_bytes == 7 * GB
        only_child = NvmlSampler(
            0.1, on_sample=lambda s: None, pids=lambda: [child.pid], nvml=FakeNvml(gpus)
        ).sample_once()
        assert only_child.process_gpu_memory_bytes == 6 * GB
        assert 0 < only_child.host_rss_bytes < taken.host_rss_bytes  # `sleep` < python + sleep
    finally:
        child.kill()
        child.wait()


def test_process_memory_unreported_is_none():
    gpus = [FakeGpu(processes=[FakeProcess(pid=os.getpid(), usedGpuMemory=None)])]
    taken = NvmlSampler(0.1, on_sample=lambda s: None, nvml=FakeNvml(gpus)).sample_once()
    assert taken.process_gpu_memory_bytes is None
    assert taken.gpu_memory_used_bytes is not None


def test_nvml_init_failure_keeps_host_rss():
    fake = FakeNvml(init_error=NVMLError_LibraryNotFound("NVML Shared Library Not Found"))
    sampler = NvmlSampler(0.1, on_sample=lambda s: None, nvml=fake)
    taken = sampler.sample_once()
    assert sampler.gpu_available is False
    assert "NVML library not found" in sampler.reason
    assert taken.gpu_memory_used_bytes is None and taken.power_w is None
    assert taken.host_rss_bytes > 0
    assert nvml_status(fake) == (False, sampler.reason)
    assert gpu_processes(fake) == []


def test_gpu_processes_and_status_from_fake():
    gpus = [FakeGpu(processes=[FakeProcess(pid=os.getpid(), usedGpuMemory=GB)]), FakeGpu()]
    fake = FakeNvml(gpus)
    own_name = psutil.Process().name()
    assert gpu_processes(fake) == [
        {"pid": os.getpid(), "used_bytes": GB, "device": 0, "name": own_name}
    ]
    assert nvml_status(fake) == (True, "2 NVIDIA GPU(s), driver 550.54.15")
    assert fake.initialised == 0  # every init was paired with a shutdown


# --------------------------------------------------------------------------- the thread


def test_sampler_thread_ticks_and_stops_promptly():
    fake = FakeNvml([FakeGpu(energy_step_mj=500)])
    received: list[TelemetrySample] = []
    sampler = NvmlSampler(0.02, on_sample=received.append, nvml=fake)
    sampler.start()
    time.sleep(0.25)
    started_stop = time.perf_counter()
    sampler.stop()
    stop_s = time.perf_counter() - started_stop
    assert not sampler.is_alive()
    assert stop_s < 0.5
    assert 3 <= len(received) <= 20  # ~0.25 s / 0.02 s, with slack for a busy 2-core machine
    assert all(a.t_ns < b.t_ns for a, b in itertools.pairwise(received))
    energies = [s.energy_mj for s in received]
    assert energies == sorted(energies) and energies[-1] > energies[0]
    assert fake.initialised == 0  # NVML shut down when the thread ended


def test_sampler_stops_promptly_with_a_long_interval():
    received: list[TelemetrySample] = []
    sampler = NvmlSampler(60.0, on_sample=received.append, nvml=FakeNvml())
    sampler.start()
    time.sleep(0.05)
    started_stop = time.perf_counter()
    sampler.stop()
    assert time.perf_counter() - started_stop < 1.0
    assert len(received) == 2  # the first tick and the closing sample


def test_failing_callback_does_not_kill_the_thread():
    calls = []
    event = threading.Event()

    def explode(taken: TelemetrySample) -> None:
        calls.append(taken)
        if len(calls) >= 3:
            event.set()
        raise RuntimeError("consumer bug")

    sampler = NvmlSampler(0.01, on_sample=explode, nvml=FakeNvml())
    sampler.start()
    assert event.wait(5)
    sampler.stop()
    assert len(calls) >= 3


# --------------------------------------------------------------------------- summary


def test_summary_memory_efficiency_hand_computed():
    samples = [
        sample(0, gpu_memory_used_bytes=30 * GB, process_gpu_memory_bytes=20 * GB),
        sample(1, gpu_memory_used_bytes=31 * GB, process_gpu_memory_bytes=int(28.7 * GB)),
        sample(2, gpu_memory_used_bytes=30 * GB, process_gpu_memory_bytes=25 * GB),
    ]
    summary = summarize_telemetry(samples, 100, 13_000_000_000, True, None)
    assert summary.peak_gpu_memory_gb == pytest.approx(28.7)
    assert summary.peak_gpu_memory_source == "process"
    # 28.7 GB / 13 B parameters = 2.2077 GB per billion parameters
    assert summary.memory_efficiency_gb_per_b_params == pytest.approx(2.2077, abs=1e-4)


def test_summary_falls_back_to_device_memory():
    samples = [
        sample(0, gpu_memory_used_bytes=10 * GB, process_gpu_memory_bytes=0),
        sample(1, gpu_memory_used_bytes=12 * GB, process_gpu_memory_bytes=0),
    ]
    summary = summarize_telemetry(samples, 0, 6_000_000_000, True, None)
    assert summary.peak_gpu_memory_gb == pytest.approx(12.0)
    assert summary.peak_gpu_memory_source == "device"
    assert summary.memory_efficiency_gb_per_b_params == pytest.approx(2.0)
    assert summary.energy_per_output_token_j is None  # no output tokens


def test_energy_from_counter():
    samples = [
        sample(0, energy_mj=1_000_000, power_w=999.0),
        sample(5, energy_mj=1_600_000, power_w=999.0),
        sample(10, energy_mj=3_000_000, power_w=999.0),
    ]
    summary = summarize_telemetry(samples, 400, None, True, None)
    assert summary.energy_source == "counter"
    assert summary.energy_j == pytest.approx(2000.0)  # (3,000,000 - 1,000,000) mJ
    assert summary.energy_per_output_token_j == pytest.approx(5.0)
    assert summary.mean_power_w == pytest.approx(999.0)
    assert summary.memory_efficiency_gb_per_b_params is None  # parameters unknown


def test_energy_from_power_integration_when_counter_unsupported():
    samples = [sample(0, power_w=100.0), sample(2, power_w=300.0), sample(3, power_w=300.0)]
    summary = summarize_telemetry(samples, 100, None, True, None)
    assert summary.energy_source == "power_integral"
    # trapezoids: (100+300)/2*2 + (300+300)/2*1 = 400 + 300 = 700 J
    assert summary.energy_j == pytest.approx(700.0)
    assert summary.energy_per_output_token_j == pytest.approx(7.0)


def test_counter_reset_falls_back_to_integration():
    samples = [sample(0, energy_mj=5_000, power_w=10.0), sample(1, energy_mj=100, power_w=10.0)]
    summary = summarize_telemetry(samples, 1, None, True, None)
    assert summary.energy_source == "power_integral"
    assert summary.energy_j == pytest.approx(10.0)


def test_summary_means_rss_and_no_gpu():
    samples = [
        sample(0, gpu_utilization_pct=50.0, host_rss_bytes=1 * GB),
        sample(1, gpu_utilization_pct=None, host_rss_bytes=3 * GB),
        sample(2, gpu_utilization_pct=100.0, host_rss_bytes=2 * GB),
    ]
    summary = summarize_telemetry(samples, 10, None, True, None)
    assert summary.mean_gpu_utilization_pct == pytest.approx(75.0)
    assert summary.peak_host_rss_gb == pytest.approx(3.0)
    cpu_only = [sample(t, host_rss_bytes=GB) for t in range(3)]
    summary = summarize_telemetry(cpu_only, 10, 10**9, False, "no NVIDIA driver")
    assert summary.gpu_available is False
    assert summary.reason == "no NVIDIA driver"
    assert summary.peak_gpu_memory_gb is None
    assert summary.energy_j is None and summary.energy_source is None
    assert summary.memory_efficiency_gb_per_b_params is None
    assert summary.peak_host_rss_gb == pytest.approx(1.0)


def test_downsampling_keeps_ends_and_peak():
    samples = [sample(i / 10, gpu_memory_used_bytes=GB) for i in range(10_001)]
    samples[4_321] = sample(432.1, gpu_memory_used_bytes=80 * GB)
    kept = downsample(samples)
    assert len(kept) <= MAX_STORED_SAMPLES
    assert kept[0] == samples[0] and kept[-1] == samples[-1]
    assert samples[4_321] in kept
    assert all(a.t_ns < b.t_ns for a, b in itertools.pairwise(kept))
    summary = summarize_telemetry(samples, 1, None, True, None)
    assert len(summary.samples) <= MAX_STORED_SAMPLES
    assert summary.peak_gpu_memory_gb == pytest.approx(80.0)  # computed on the full series
    assert downsample(samples[:50]) == samples[:50]


# --------------------------------------------------------------------------- real NVML


def test_real_nvml_when_a_gpu_is_present():
    available, reason = nvml_status()
    if not available:
        pytest.skip(f"real NVML unavailable here: {reason}")
    sampler = NvmlSampler(0.05, on_sample=lambda s: None)
    taken = sampler.sample_once()
    sampler.close()
    assert sampler.gpu_available, sampler.reason
    assert taken.gpu_memory_used_bytes is not None and taken.gpu_memory_used_bytes > 0
    assert taken.host_rss_bytes > 0
    assert isinstance(gpu_processes(), list)


def test_real_absent_nvml_still_samples_host_rss():
    available, reason = nvml_status()
    if available:
        pytest.skip("this machine has a working NVML; the no-GPU path is tested elsewhere")
    received: list[TelemetrySample] = []
    sampler = NvmlSampler(0.02, on_sample=received.append)
    sampler.start()
    time.sleep(0.1)
    sampler.stop()
    assert sampler.gpu_available is False
    assert sampler.reason == reason and reason
    assert received and all(s.host_rss_bytes and s.host_rss_bytes > 0 for s in received)
    assert all(s.gpu_memory_used_bytes is None and s.energy_mj is None for s in received)
    summary = summarize_telemetry(received, 10, None, sampler.gpu_available, sampler.reason)
    assert summary.gpu_available is False and summary.reason == reason
    assert summary.peak_host_rss_gb > 0


# --------------------------------------------------------------------------- Prometheus (live)


def _record(i: int, **changes) -> RequestRecord:
    fields = {
        "id": f"r{i}",
        "start_ns": 0,
        "chunk_ns": [250_000_000, 400_000_000],
        "end_ns": 400_000_000,
        "output_tokens": 2,
    }
    fields.update(changes)
    return RequestRecord(**fields)


def _value(samples: list[dict], name: str, **labels) -> float | None:
    for item in samples:
        if item["name"] == name and all(item["labels"].get(k) == v for k, v in labels.items()):
            return item["value"]
    return None


def test_live_metrics_served_and_parsed_back():
    live = LiveMetrics()
    port = live.start(0)
    try:
        for _ in range(4):
            live.request_started()
        live.observe(_record(0))
        live.observe(_record(1, chunk_ns=[50_000_000], end_ns=2_000_000_000, output_tokens=1))
        live.observe(_record(2, error="timeout", chunk_ns=[], output_tokens=0))
        live.observe(_record(3, warmup=True))  # not counted
        live.observe_sample(sample(1, gpu_memory_used_bytes=5 * GB, power_w=None))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            scraped = parse_prometheus_text(response.read().decode())
    finally:
        live.stop()
    assert _value(scraped, "bench_requests_total") == 3
    assert _value(scraped, "bench_request_errors_total") == 1
    assert _value(scraped, "bench_output_tokens_total") == 3
    assert _value(scraped, "bench_requests_in_flight") == 0
    assert _value(scraped, "bench_ttft_seconds_count") == 2
    assert _value(scraped, "bench_ttft_seconds_sum") == pytest.approx(0.30)
    assert _value(scraped, "bench_ttft_seconds_bucket", le="0.2") == 1  # 50 ms yes, 250 ms no
    assert _value(scraped, "bench_e2e_seconds_sum") == pytest.approx(2.4)
    assert _value(scraped, "bench_gpu_memory_used_bytes") == 5 * GB
    assert _value(scraped, "bench_gpu_power_watts") == 0  # never set: None readings skipped
    assert {item["type"] for item in scraped} >= {"counter", "histogram", "gauge"}


def test_live_metrics_use_their_own_registry():
    first, second = LiveMetrics(), LiveMetrics()  # a second one would clash on a shared registry
    first.observe(_record(0))
    assert first.requests._value.get() == 1
    assert second.requests._value.get() == 0
    from prometheus_client import REGISTRY

    assert "bench_requests" not in REGISTRY._names_to_collectors


def test_parse_vllm_style_metrics_text():
    text = (
        "# HELP vllm:num_requests_running Number of requests running.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="tiny"} 3.0\n'
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{model_name="tiny"} NaN\n'
    )
    parsed = parse_prometheus_text(text)
    assert parsed == [
        {
            "name": "vllm:num_requests_running",
            "labels": {"model_name": "tiny"},
            "value": 3.0,
            "type": "gauge",
        },
        {
            "name": "vllm:gpu_cache_usage_perc",
            "labels": {"model_name": "tiny"},
            "value": None,
            "type": "gauge",
        },
    ]
    with pytest.raises(ValueError, match="not Prometheus text format"):
        parse_prometheus_text("this is { not metrics\n")


def test_two_gpus_per_gpu_readings_and_energy_over_both():
    """Two fake GPUs (test double): each has its own utilisation, memory, power and energy;
    the run's energy is their sum and J per output token divides it by the run's tokens."""
    gpus = [
        FakeGpu(memory_used_bytes=30 * GB, utilization_pct=90, power_mw=600_000,
                energy_mj=5_000_000, energy_step_mj=60_000),
        FakeGpu(memory_used_bytes=20 * GB, utilization_pct=70, power_mw=400_000,
                energy_mj=9_000_000, energy_step_mj=40_000),
    ]  # fmt: skip
    sampler = NvmlSampler(0.1, on_sample=lambda s: None, device_indices=[0, 1], nvml=FakeNvml(gpus))
    samples = []
    for tick in range(5):  # 5 ticks: each GPU's counter advances by its step per read
        taken = sampler.sample_once()
        samples.append(taken.model_copy(update={"t_ns": tick * 100_000_000}))
    first = samples[0]
    assert [g.index for g in first.gpus] == [0, 1]
    assert [g.utilization_pct for g in first.gpus] == [90.0, 70.0]
    assert first.power_w == 1000.0 and first.gpu_utilization_pct == 80.0
    summary = summarize_telemetry(samples, output_tokens=1000, parameters=None,
                                  gpu_available=True, reason=None)  # fmt: skip
    assert summary.gpu_indices == [0, 1]
    per_gpu = {g.index: g for g in summary.per_gpu}
    assert per_gpu[0].energy_j == pytest.approx(4 * 60.0)  # 4 steps of 60 J
    assert per_gpu[1].energy_j == pytest.approx(4 * 40.0)
    assert per_gpu[0].peak_memory_used_gb == pytest.approx(30.0)
    assert per_gpu[1].mean_utilization_pct == pytest.approx(70.0)
    assert per_gpu[1].mean_power_w == pytest.approx(400.0)
    assert summary.energy_j == pytest.approx(per_gpu[0].energy_j + per_gpu[1].energy_j)
    assert summary.energy_per_output_token_j == pytest.approx(400.0 / 1000)
    again = type(summary).model_validate_json(summary.model_dump_json())
    assert again == summary
