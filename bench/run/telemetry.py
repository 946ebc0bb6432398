"""GPU and host telemetry during a run: an NVML sampler thread and the run's telemetry summary.

NVML comes from nvidia-ml-py (`pynvml`), imported lazily and injectable (`nvml=`) so tests can
pass a labelled fake. Every reading is optional: a device that does not support one (or any
failing call) gives None for that field, and a machine without GPU or driver still samples host RSS.
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections.abc import Callable, Container, Iterable
from typing import Any

import psutil

from bench.core.schema import GpuReading, GpuTelemetry, TelemetrySample, TelemetrySummary

log = logging.getLogger(__name__)

BYTES_PER_GB = 1e9
"""Memory figures are reported in decimal gigabytes (1 GB = 1e9 bytes), as NVIDIA's spec sheets."""

MAX_STORED_SAMPLES = 2000
"""The summary keeps at most this many samples (evenly spaced, the peak-memory one kept)."""


# --------------------------------------------------------------------------- NVML access


def load_nvml(nvml: Any = None) -> Any:
    """The NVML module to use: the one given (a test double), else `pynvml` imported now."""
    if nvml is not None:
        return nvml
    import pynvml  # lazy: nvidia-ml-py is light, but machines without it must still import bench

    return pynvml


def _nvml_error_reason(error: BaseException) -> str:
    """A one-line reason for an NVML initialisation failure, in words a user can act on."""
    name = type(error).__name__
    if "LibraryNotFound" in name:
        return "NVML library not found (no NVIDIA driver installed on this machine)"
    if "DriverNotLoaded" in name:
        return "NVIDIA driver is not loaded"
    if "NoPermission" in name:
        return "no permission to query the GPU through NVML"
    return f"NVML initialisation failed: {name}: {error}"


def open_nvml(nvml: Any = None) -> tuple[Any, str | None]:
    """Import and initialise NVML; (module, None) on success, (None, reason) otherwise."""
    try:
        module = load_nvml(nvml)
    except ImportError:
        return None, "nvidia-ml-py (pynvml) is not installed"
    try:
        module.nvmlInit()
    except Exception as error:  # NVMLError subclasses, OSError from a broken driver install
        return None, _nvml_error_reason(error)
    return module, None


def close_nvml(module: Any) -> None:
    try:
        module.nvmlShutdown()
    except Exception:  # shutdown failures change nothing for the caller
        log.debug("nvmlShutdown failed", exc_info=True)


def nvml_status(nvml: Any = None) -> tuple[bool, str]:
    """Whether NVML answers here, with a one-line description (GPU count) or why not."""
    module, reason = open_nvml(nvml)
    if module is None:
        return False, reason or "NVML unavailable"
    try:
        count = module.nvmlDeviceGetCount()
        if count == 0:
            return False, "NVML found no NVIDIA GPU"
        driver = nvml_call(module.nvmlSystemGetDriverVersion)
        return True, f"{count} NVIDIA GPU(s), driver {driver or 'unknown'}"
    except Exception as error:
        return False, f"NVML query failed: {type(error).__name__}: {error}"
    finally:
        close_nvml(module)


def nvml_call(function: Callable[..., Any], *args: Any) -> Any:
    """One NVML reading; None when unsupported or failing (telemetry never stops a run)."""
    try:
        return function(*args)
    except Exception:
        return None


def nvml_text(value: Any) -> Any:
    """Older pynvml versions return bytes for strings."""
    return value.decode() if isinstance(value, bytes) else value


def device_processes(module: Any, handle: Any) -> list[Any]:
    """Compute and graphics processes on one device, each pid once (a process can be both)."""
    by_pid: dict[int, Any] = {}
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        function = getattr(module, getter, None)
        if function is None:
            continue
        for process in nvml_call(function, handle) or []:
            by_pid.setdefault(int(process.pid), process)
    return list(by_pid.values())


def process_name(pid: int) -> str | None:
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return None


def gpu_processes(nvml: Any = None) -> list[dict[str, Any]]:
    """Processes holding GPU memory now: [{pid, used_bytes, device, name}], across all devices.

    `used_bytes` is None where the driver does not report per-process memory. Returns [] when
    NVML is unavailable; call `nvml_status()` to tell "no processes" from "cannot tell".
    Note that in a container NVML reports host PIDs, which may not match the container's PIDs.
    """
    module, _reason = open_nvml(nvml)
    if module is None:
        return []
    found: list[dict[str, Any]] = []
    try:
        for index in range(nvml_call(module.nvmlDeviceGetCount) or 0):
            handle = nvml_call(module.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                continue
            for process in device_processes(module, handle):
                used = getattr(process, "usedGpuMemory", None)
                found.append(
                    {
                        "pid": int(process.pid),
                        "used_bytes": int(used) if used is not None else None,
                        "device": index,
                        "name": process_name(int(process.pid)),
                    }
                )
    finally:
        close_nvml(module)
    return found


def _tree_processes(root_pids: Iterable[int]) -> dict[int, psutil.Process]:
    """The given pids and all their live descendants, by pid (an engine's workers are its
    children)."""
    tree: dict[int, psutil.Process] = {}
    for pid in root_pids:
        try:
            process = psutil.Process(pid)
            tree[pid] = process
            tree.update((child.pid, child) for child in process.children(recursive=True))
        except (psutil.Error, OSError):
            continue
    return tree


def process_tree(root_pids: Iterable[int]) -> set[int]:
    """The given pids and all their live descendants (an engine's workers are its children)."""
    return set(_tree_processes(root_pids))


def host_rss_bytes(processes: Iterable[psutil.Process]) -> int | None:
    """Resident memory of the given processes summed (pass a whole tree); None if none is alive."""
    total = 0
    seen_any = False
    for process in processes:
        try:
            total += process.memory_info().rss
            seen_any = True
        except (psutil.Error, OSError):
            continue
    return total if seen_any else None


# --------------------------------------------------------------------------- the sampler


def _sum_or_none(values: list[Any]) -> Any:
    """Sum across devices, or None unless every device answered (a partial sum would mislead)."""
    if not values or any(value is None for value in values):
        return None
    return sum(values)


class NvmlSampler(threading.Thread):
    """Samples GPU and host telemetry every `interval_s` and hands each `TelemetrySample` on.

    One sample is taken at start, one per interval (on a fixed schedule, no drift), and a last
    one at `stop()` so the energy window covers the whole run. Readings per tick:

    - `gpu_memory_used_bytes`: device memory used (all processes), summed over devices.
    - `process_gpu_memory_bytes`: memory NVML attributes to the pids' process trees, summed over
      devices; None when `usedGpuMemory` is not reported. 0 means none of them holds GPU memory
      (or, in a container, that NVML's host PIDs do not match ours).
    - `gpu_utilization_pct`: mean over devices. `power_w`: summed. `energy_mj`: the devices'
      total-energy counters summed (mJ since driver load). `sm_clock_mhz`: mean over devices.
    - `host_rss_bytes`: resident memory of the pids' process trees (children included).

    A field summed or averaged over several devices is None unless every device answered.
    `pids` is called each tick (the engine's pids can change); None = this process's tree.
    `device_indices` None = every device. After the thread starts, `gpu_available` and
    `reason` say whether GPU fields are measured and why not.
    """

    def __init__(
        self,
        interval_s: float,
        on_sample: Callable[[TelemetrySample], None],
        pids: Callable[[], list[int]] | None = None,
        device_indices: list[int] | None = None,
        nvml: Any = None,
    ) -> None:
        super().__init__(name="nvml-sampler", daemon=True)
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self.on_sample = on_sample
        self.pids = pids if pids is not None else (lambda: [os.getpid()])
        self.device_indices = device_indices
        self.gpu_available = False
        self.reason: str | None = None
        self.samples_taken = 0
        self._nvml_given = nvml
        self._module: Any = None
        self._handles: list[Any] = []
        self.indices: list[int] = []
        """NVML indices of the sampled GPUs (after open())."""
        self._opened = False
        self._stop_event = threading.Event()
        self._open_lock = threading.Lock()

    # -- NVML lifecycle

    def open(self) -> None:
        """Initialise NVML and resolve device handles (idempotent; `run()` calls it)."""
        with self._open_lock:
            if self._opened:
                return
            self._opened = True
            module, reason = open_nvml(self._nvml_given)
            if module is None:
                self.reason = reason
                return
            try:
                count = module.nvmlDeviceGetCount()
            except Exception as error:
                self.reason = f"NVML device count failed: {type(error).__name__}: {error}"
                close_nvml(module)
                return
            indices = self.device_indices if self.device_indices is not None else range(count)
            handles = []
            for index in indices:
                if not 0 <= index < count:
                    self.reason = f"GPU index {index} does not exist (this machine has {count})"
                    close_nvml(module)
                    return
                try:
                    handles.append(module.nvmlDeviceGetHandleByIndex(index))
                except Exception as error:
                    self.reason = f"GPU {index} cannot be opened: {type(error).__name__}: {error}"
                    close_nvml(module)
                    return
            if not handles:
                self.reason = "NVML found no NVIDIA GPU"
                close_nvml(module)
                return
            self._module, self._handles = module, handles
            self.indices = list(indices)
            self.gpu_available = True

    def close(self) -> None:
        with self._open_lock:
            if self._module is not None:
                close_nvml(self._module)
                self._module = None
                self._handles = []

    # -- one tick

    def sample_once(self) -> TelemetrySample:
        """Take one sample now (opens NVML on first use)."""
        self.open()
        t_ns = time.perf_counter_ns()
        try:
            processes = _tree_processes(self.pids())
        except Exception:  # a broken pids callback must not kill telemetry
            log.warning("pids callback failed", exc_info=True)
            processes = {}
        # One psutil.Process per pid per tick serves both the RSS sum and the NVML pid match.
        sample = TelemetrySample(t_ns=t_ns, host_rss_bytes=host_rss_bytes(processes.values()))
        tree = processes.keys()
        module = self._module
        if module is None:
            return sample
        readings: dict[str, list[Any]] = {
            "memory": [], "utilization": [], "power_mw": [], "energy_mj": [], "sm_clock": [],
            "process_memory": [],
        }  # fmt: skip
        for handle in self._handles:
            memory = nvml_call(module.nvmlDeviceGetMemoryInfo, handle)
            readings["memory"].append(int(memory.used) if memory is not None else None)
            rates = nvml_call(module.nvmlDeviceGetUtilizationRates, handle)
            readings["utilization"].append(float(rates.gpu) if rates is not None else None)
            readings["power_mw"].append(nvml_call(module.nvmlDeviceGetPowerUsage, handle))
            readings["energy_mj"].append(
                nvml_call(module.nvmlDeviceGetTotalEnergyConsumption, handle)
            )
            readings["sm_clock"].append(
                nvml_call(module.nvmlDeviceGetClockInfo, handle, module.NVML_CLOCK_SM)
            )
            readings["process_memory"].append(self._tree_gpu_memory(module, handle, tree))
        devices = len(self._handles)
        sample.gpus = [
            GpuReading(
                index=index,
                memory_used_bytes=readings["memory"][position],
                utilization_pct=readings["utilization"][position],
                power_w=(
                    readings["power_mw"][position] / 1000.0
                    if readings["power_mw"][position] is not None
                    else None
                ),
                energy_mj=readings["energy_mj"][position],
            )
            for position, index in enumerate(self.indices)
        ]
        utilization = _sum_or_none(readings["utilization"])
        power_mw = _sum_or_none(readings["power_mw"])
        energy_mj = _sum_or_none(readings["energy_mj"])
        sm_clock = _sum_or_none(readings["sm_clock"])
        sample.gpu_memory_used_bytes = _sum_or_none(readings["memory"])
        sample.process_gpu_memory_bytes = _sum_or_none(readings["process_memory"])
        sample.gpu_utilization_pct = utilization / devices if utilization is not None else None
        sample.power_w = power_mw / 1000.0 if power_mw is not None else None
        sample.energy_mj = int(energy_mj) if energy_mj is not None else None
        sample.sm_clock_mhz = round(sm_clock / devices) if sm_clock is not None else None
        return sample

    @staticmethod
    def _tree_gpu_memory(module: Any, handle: Any, tree: Container[int]) -> int | None:
        """GPU memory of the tree's processes on one device; None if the driver does not say."""
        function = module.nvmlDeviceGetComputeRunningProcesses
        processes = nvml_call(function, handle)
        if processes is None:
            return None
        total = 0
        for process in processes:
            if int(process.pid) not in tree:
                continue
            used = getattr(process, "usedGpuMemory", None)
            if used is None:  # reported without memory (e.g. MIG / some vGPU setups)
                return None
            total += int(used)
        return total

    # -- thread

    def run(self) -> None:
        self.open()
        if not self.gpu_available:
            log.info("GPU telemetry off: %s", self.reason)
        next_tick_ns = time.perf_counter_ns()
        interval_ns = int(self.interval_s * 1e9)
        try:
            while True:
                self._emit()
                next_tick_ns += interval_ns
                now_ns = time.perf_counter_ns()
                if next_tick_ns < now_ns:  # a slow tick: skip missed ticks instead of bursting
                    next_tick_ns = now_ns + interval_ns
                if self._stop_event.wait((next_tick_ns - now_ns) / 1e9):
                    self._emit()  # closing sample: the energy window ends at stop()
                    break
        finally:
            self.close()

    def _emit(self) -> None:
        try:
            sample = self.sample_once()
            self.samples_taken += 1
            self.on_sample(sample)
        except Exception:  # telemetry must never take a run down
            log.warning("telemetry sample failed", exc_info=True)

    def stop(self, timeout: float | None = 10.0) -> None:
        """Ask the thread to end and wait for it (it takes one final sample first)."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)


# --------------------------------------------------------------------------- summary


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def integrate_power_j(samples: list[TelemetrySample]) -> float | None:
    """Energy (J) as the trapezoid integral of power over time; None with fewer than 2 readings."""
    points = [(s.t_ns, s.power_w) for s in samples if s.power_w is not None]
    if len(points) < 2:
        return None
    energy_j = 0.0
    for (t0, p0), (t1, p1) in itertools.pairwise(points):
        energy_j += (p0 + p1) / 2.0 * (t1 - t0) / 1e9
    return energy_j


def counter_energy_j(samples: list[TelemetrySample]) -> float | None:
    """Energy (J) as last minus first NVML energy-counter reading (mJ); None if unusable."""
    readings = [s.energy_mj for s in samples if s.energy_mj is not None]
    if len(readings) < 2:
        return None
    delta_mj = readings[-1] - readings[0]
    if delta_mj < 0:  # counter reset (driver reload) mid-run: not trustworthy
        return None
    return delta_mj / 1000.0


def downsample(
    samples: list[TelemetrySample], limit: int = MAX_STORED_SAMPLES
) -> list[TelemetrySample]:
    """At most `limit` samples, evenly spaced, first, last and peak-GPU-memory samples kept."""
    if len(samples) <= limit:
        return list(samples)
    count = len(samples)
    keep = {round(i * (count - 1) / (limit - 2)) for i in range(limit - 1)}

    def memory(sample: TelemetrySample) -> int:
        value = sample.process_gpu_memory_bytes or sample.gpu_memory_used_bytes
        return value or 0

    keep.add(max(range(count), key=lambda i: memory(samples[i])))
    return [samples[i] for i in sorted(keep)][:limit]


def summarize_telemetry(
    samples: list[TelemetrySample],
    output_tokens: int,
    parameters: int | None,
    gpu_available: bool,
    reason: str | None,
    window_ns: tuple[int, int] | None = None,
) -> TelemetrySummary:
    """The run's telemetry figures (1 GB = 1e9 bytes throughout).

    `window_ns` (first measured request start, last measured request end): utilisation, power
    and energy are taken over the samples inside it, so model loading, compilation and warm-up
    never count towards energy per output token; peak memory and RSS stay over the whole run
    (what the engine held at any time, load included). Without a window, all samples count.

    - peak GPU memory GB: the peak of the memory the engine's processes hold
      (`process_gpu_memory_bytes`) when any sample has a positive one, else the peak of device
      memory used (includes other processes); `peak_gpu_memory_source` says which.
    - mean utilisation (%) and mean power (W): plain means of the samples that have them.
    - energy J: delta of the NVML total-energy counter (first to last sample); when that counter
      is unsupported, the trapezoid integral of power over time. `energy_source` says which.
    - energy per output token J = energy J / output tokens.
    - memory efficiency GB per billion parameters = peak GPU memory GB / (parameters / 1e9)
      (the article's reference: 1.2).
    - peak host RSS GB: peak resident memory of the engine's process tree.
    The sample series is kept, downsampled to at most MAX_STORED_SAMPLES.
    """
    process_peak = max((s.process_gpu_memory_bytes or 0 for s in samples), default=0)
    device_readings = [s.gpu_memory_used_bytes for s in samples if s.gpu_memory_used_bytes]
    peak_source: str | None = None
    peak_bytes: int | None = None
    if process_peak > 0:
        peak_bytes, peak_source = process_peak, "process"
    elif device_readings:
        peak_bytes, peak_source = max(device_readings), "device"
    peak_gpu_memory_gb = peak_bytes / BYTES_PER_GB if peak_bytes is not None else None

    measured = samples
    if window_ns is not None:
        measured = [s for s in samples if window_ns[0] <= s.t_ns <= window_ns[1]]
    energy_j = counter_energy_j(measured)
    energy_source: str | None = "counter" if energy_j is not None else None
    if energy_j is None:
        energy_j = integrate_power_j(measured)
        energy_source = "power_integral" if energy_j is not None else None

    rss = [s.host_rss_bytes for s in samples if s.host_rss_bytes is not None]
    per_gpu = per_gpu_telemetry(samples, measured)
    efficiency = None
    if peak_gpu_memory_gb is not None and parameters:
        efficiency = peak_gpu_memory_gb / (parameters / 1e9)
    return TelemetrySummary(
        gpu_available=gpu_available,
        reason=reason,
        peak_gpu_memory_gb=peak_gpu_memory_gb,
        peak_gpu_memory_source=peak_source,
        mean_gpu_utilization_pct=_mean(
            [s.gpu_utilization_pct for s in measured if s.gpu_utilization_pct is not None]
        ),
        mean_power_w=_mean([s.power_w for s in measured if s.power_w is not None]),
        energy_j=energy_j,
        energy_source=energy_source,
        energy_per_output_token_j=(
            energy_j / output_tokens if energy_j is not None and output_tokens > 0 else None
        ),
        memory_efficiency_gb_per_b_params=efficiency,
        peak_host_rss_gb=max(rss) / BYTES_PER_GB if rss else None,
        gpu_indices=[gpu.index for gpu in per_gpu],
        per_gpu=per_gpu,
        samples=downsample(samples),
    )


def per_gpu_telemetry(
    samples: list[TelemetrySample], measured: list[TelemetrySample]
) -> list[GpuTelemetry]:
    """Each sampled GPU on its own: mean utilisation and power and energy over the measured
    samples (energy: its counter delta, else its power integral), peak memory over all."""
    indices = sorted({gpu.index for sample in samples for gpu in sample.gpus})
    out = []
    for index in indices:

        def series(source: list[TelemetrySample], index: int = index) -> list[TelemetrySample]:
            # One GPU's readings as single-device samples, so the run-level formulas apply.
            return [
                TelemetrySample(t_ns=s.t_ns, power_w=g.power_w, energy_mj=g.energy_mj)
                for s in source
                for g in s.gpus
                if g.index == index
            ]

        readings = [g for s in samples for g in s.gpus if g.index == index]
        in_window = [g for s in measured for g in s.gpus if g.index == index]
        memory = [g.memory_used_bytes for g in readings if g.memory_used_bytes is not None]
        energy_j = counter_energy_j(series(measured))
        if energy_j is None:
            energy_j = integrate_power_j(series(measured))
        out.append(
            GpuTelemetry(
                index=index,
                mean_utilization_pct=_mean(
                    [g.utilization_pct for g in in_window if g.utilization_pct is not None]
                ),
                peak_memory_used_gb=max(memory) / BYTES_PER_GB if memory else None,
                mean_power_w=_mean([g.power_w for g in in_window if g.power_w is not None]),
                energy_j=energy_j,
            )
        )
    return out
