"""Optional Prometheus side of a run: a live /metrics endpoint, and a parser for engines' /metrics.

`LiveMetrics` exposes request latencies, counts and GPU telemetry while a run goes, for teams that
watch long steady runs in Grafana (the article collects P99 through a Prometheus client). It keeps
its own CollectorRegistry, so several runs in one process never collide and the global default
registry is left alone. Exact figures always come from the stored records, not from these
histograms (their buckets only approximate percentiles).
"""

from __future__ import annotations

import math
import threading
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from bench.core.schema import RequestRecord, TelemetrySample

LATENCY_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75,
    1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 20.0, 30.0, 60.0, 120.0,
)  # fmt: skip
"""Histogram buckets (s): fine around the article's 300 ms TTFT and 500 ms P99 references."""


class LiveMetrics:
    """Live run metrics on a Prometheus endpoint (prefix `bench_`), fed by the load generator.

    Call `request_started()` when a request is sent and `observe(record)` when it ends (success
    or failure); warm-up records are not counted. `observe_sample()` mirrors each telemetry tick.
    """

    def __init__(self, namespace: str = "bench") -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._server: Any = None
        self._in_flight_count = 0
        self._lock = threading.Lock()
        registry, ns = self.registry, namespace
        self.ttft_seconds = Histogram(
            "ttft_seconds", "Time to first token (first chunk - request start)",
            namespace=ns, buckets=LATENCY_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.e2e_seconds = Histogram(
            "e2e_seconds", "End-to-end request latency (end - start) of successful requests",
            namespace=ns, buckets=LATENCY_BUCKETS_S, registry=registry,
        )  # fmt: skip
        self.requests = Counter(
            "requests", "Requests finished (successful or failed)", namespace=ns, registry=registry
        )
        self.errors = Counter("request_errors", "Failed requests", namespace=ns, registry=registry)
        self.output_tokens = Counter(
            "output_tokens", "Output tokens of successful requests", namespace=ns, registry=registry
        )
        self.in_flight = Gauge(
            "requests_in_flight", "Requests sent and not finished", namespace=ns, registry=registry
        )
        self._telemetry = {
            field: Gauge(name, help_text, namespace=ns, registry=registry)
            for field, name, help_text in (
                ("gpu_memory_used_bytes", "gpu_memory_used_bytes", "Device memory used"),
                ("process_gpu_memory_bytes", "process_gpu_memory_bytes", "Engine GPU memory"),
                ("gpu_utilization_pct", "gpu_utilization_percent", "GPU utilisation (%)"),
                ("power_w", "gpu_power_watts", "GPU power draw"),
                ("energy_mj", "gpu_energy_millijoules", "NVML total-energy counter"),
                ("sm_clock_mhz", "gpu_sm_clock_mhz", "SM clock"),
                ("host_rss_bytes", "host_rss_bytes", "Resident memory of the engine processes"),
            )
        }

    def start(self, port: int, addr: str = "127.0.0.1") -> int:
        """Serve /metrics on addr:port (default loopback; port 0 = a free one); returns the port."""
        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        self._server = server
        return int(server.server_address[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def request_started(self) -> None:
        with self._lock:
            self._in_flight_count += 1
            self.in_flight.set(self._in_flight_count)

    def observe(self, record: RequestRecord) -> None:
        """Count one finished request; latencies of successful ones go to the histograms."""
        with self._lock:
            if self._in_flight_count > 0:  # only requests announced by request_started()
                self._in_flight_count -= 1
                self.in_flight.set(self._in_flight_count)
        if record.warmup:
            return
        self.requests.inc()
        if not record.ok:
            self.errors.inc()
            return
        self.output_tokens.inc(record.output_tokens)
        if record.chunk_ns:
            self.ttft_seconds.observe((record.chunk_ns[0] - record.start_ns) / 1e9)
        self.e2e_seconds.observe((record.end_ns - record.start_ns) / 1e9)

    def observe_sample(self, sample: TelemetrySample) -> None:
        """Set the telemetry gauges from one sampler tick (readings that are None are skipped)."""
        for field, gauge in self._telemetry.items():
            value = getattr(sample, field)
            if value is not None:
                gauge.set(value)


def parse_prometheus_text(text: str) -> list[dict[str, Any]]:
    """Samples of a Prometheus text exposition (e.g. a vLLM server's /metrics), flattened.

    Each item: {"name", "labels", "value", "type"} (type of the metric family: counter,
    gauge, histogram...). NaN and infinite values become None so results stay valid JSON.
    Raises ValueError with the parser's message when the text is not Prometheus format.
    """
    samples: list[dict[str, Any]] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                value = float(sample.value)
                samples.append(
                    {
                        "name": sample.name,
                        "labels": dict(sample.labels),
                        "value": value if math.isfinite(value) else None,
                        "type": family.type,
                    }
                )
    except (ValueError, TypeError, IndexError) as error:
        raise ValueError(f"not Prometheus text format: {error}") from None
    return samples
