"""TEST DOUBLE of the `pynvml` functions bench uses: fake GPUs with settable readings, no hardware.

Nothing here measures anything. It lets the telemetry and environment code be tested on machines
without a GPU, and it records every call so tests can prove the code never changes GPU settings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    """Fake of pynvml.NVMLError."""


class NVMLError_NotSupported(NVMLError):
    """Fake of pynvml.NVMLError_NotSupported."""


class NVMLError_LibraryNotFound(NVMLError):
    """Fake of pynvml.NVMLError_LibraryNotFound."""


class NVMLError_DriverNotLoaded(NVMLError):
    """Fake of pynvml.NVMLError_DriverNotLoaded."""


SETTING_CALL = re.compile(r"^nvml(Device|System|Unit|Vgpu\w*|GpuInstance)?(Set|Reset|Clear)")
"""Names of NVML calls that change state (nvmlDeviceSetPersistenceMode, ...ResetGpuLockedClocks)."""


@dataclass
class FakeProcess:
    """Fake of pynvml's process info struct (`pid`, `usedGpuMemory`; None = not reported)."""

    pid: int
    usedGpuMemory: int | None


@dataclass
class FakeGpu:
    """One fake GPU. `unsupported` lists NVML function names that raise NotSupported for it."""

    name: str = "NVIDIA A100 80GB PCIe"
    uuid: str = "GPU-00000000-fake-0000-0000-000000000000"
    memory_total_bytes: int = 80 * 1024**3
    memory_used_bytes: int = 1 * 1024**3
    utilization_pct: int = 50
    power_mw: int = 250_000
    energy_mj: int = 1_000_000
    energy_step_mj: int = 0  # added to the counter after each read (a running GPU)
    sm_clock_mhz: int = 1410
    mem_clock_mhz: int = 1512
    max_sm_clock_mhz: int = 1410
    max_mem_clock_mhz: int = 1512
    app_sm_clock_mhz: int = 1065
    app_mem_clock_mhz: int = 1512
    default_app_sm_clock_mhz: int = 1065
    default_app_mem_clock_mhz: int = 1512
    supported_clocks_mhz: dict[int, list[int]] = field(
        default_factory=lambda: {1512: [1410, 1395, 1065, 210]}
    )
    persistence_mode: int = 1
    power_limit_mw: int = 300_000
    power_default_limit_mw: int = 300_000
    ecc_mode: tuple[int, int] = (1, 1)
    mig_mode: tuple[int, int] = (0, 0)
    compute_mode: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)


class FakeNvml:
    """TEST DOUBLE of the pynvml module: pass it as `nvml=` to bench.run.telemetry/environment.

    `calls` lists every NVML function called, in order; any NVML function this fake does not
    define (e.g. a nvmlDeviceSet* call) is still recorded, then raises NotSupported.
    """

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVML_CLOCK_GRAPHICS = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_COMPUTEMODE_DEFAULT = 0
    NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1
    NVML_COMPUTEMODE_PROHIBITED = 2
    NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        driver_version: str = "550.54.15",
        cuda_driver_version: int = 12040,
        init_error: Exception | None = None,
    ) -> None:
        self.gpus = gpus if gpus is not None else [FakeGpu()]
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.init_error = init_error
        self.calls: list[str] = []
        self.initialised = 0

    # -- bookkeeping

    def _record(self, name: str, gpu: FakeGpu | None = None) -> None:
        self.calls.append(name)
        if gpu is not None and name in gpu.unsupported:
            raise NVMLError_NotSupported(f"{name} not supported (fake)")

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def undefined(*_args: Any) -> Any:
            self.calls.append(name)
            raise NVMLError_NotSupported(f"{name} is not part of the fake")

        return undefined

    def setting_calls(self) -> list[str]:
        """The recorded calls that would change GPU state (should always be empty)."""
        return [name for name in self.calls if SETTING_CALL.match(name)]

    # -- system

    def nvmlInit(self) -> None:
        self._record("nvmlInit")
        if self.init_error is not None:
            raise self.init_error
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._record("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._record("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._record("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._record("nvmlSystemGetNVMLVersion")
        return "12.550.54.15"

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._record("nvmlSystemGetProcessName")
        return f"fake-process-{pid}"

    def nvmlDeviceGetCount(self) -> int:
        self._record("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._record("nvmlDeviceGetHandleByIndex")
        return self.gpus[index]

    # -- device readings (the handle is the FakeGpu itself)

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        self._record("nvmlDeviceGetName", gpu)
        return gpu.name

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        self._record("nvmlDeviceGetUUID", gpu)
        return gpu.uuid

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        self._record("nvmlDeviceGetMemoryInfo", gpu)
        free = gpu.memory_total_bytes - gpu.memory_used_bytes
        return SimpleNamespace(total=gpu.memory_total_bytes, used=gpu.memory_used_bytes, free=free)

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        self._record("nvmlDeviceGetUtilizationRates", gpu)
        return SimpleNamespace(gpu=gpu.utilization_pct, memory=0)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        self._record("nvmlDeviceGetPowerUsage", gpu)
        return gpu.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        self._record("nvmlDeviceGetTotalEnergyConsumption", gpu)
        value = gpu.energy_mj
        gpu.energy_mj += gpu.energy_step_mj
        return value

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        self._record("nvmlDeviceGetClockInfo", gpu)
        return gpu.mem_clock_mhz if clock == self.NVML_CLOCK_MEM else gpu.sm_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        self._record("nvmlDeviceGetMaxClockInfo", gpu)
        return gpu.max_mem_clock_mhz if clock == self.NVML_CLOCK_MEM else gpu.max_sm_clock_mhz

    def nvmlDeviceGetApplicationsClock(self, gpu: FakeGpu, clock: int) -> int:
        self._record("nvmlDeviceGetApplicationsClock", gpu)
        return gpu.app_mem_clock_mhz if clock == self.NVML_CLOCK_MEM else gpu.app_sm_clock_mhz

    def nvmlDeviceGetDefaultApplicationsClock(self, gpu: FakeGpu, clock: int) -> int:
        self._record("nvmlDeviceGetDefaultApplicationsClock", gpu)
        if clock == self.NVML_CLOCK_MEM:
            return gpu.default_app_mem_clock_mhz
        return gpu.default_app_sm_clock_mhz

    def nvmlDeviceGetSupportedMemoryClocks(self, gpu: FakeGpu) -> list[int]:
        self._record("nvmlDeviceGetSupportedMemoryClocks", gpu)
        return sorted(gpu.supported_clocks_mhz, reverse=True)

    def nvmlDeviceGetSupportedGraphicsClocks(self, gpu: FakeGpu, mem_clock_mhz: int) -> list[int]:
        self._record("nvmlDeviceGetSupportedGraphicsClocks", gpu)
        return list(gpu.supported_clocks_mhz.get(mem_clock_mhz, []))

    def nvmlDeviceGetPersistenceMode(self, gpu: FakeGpu) -> int:
        self._record("nvmlDeviceGetPersistenceMode", gpu)
        return gpu.persistence_mode

    def nvmlDeviceGetPowerManagementLimit(self, gpu: FakeGpu) -> int:
        self._record("nvmlDeviceGetPowerManagementLimit", gpu)
        return gpu.power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, gpu: FakeGpu) -> int:
        self._record("nvmlDeviceGetPowerManagementDefaultLimit", gpu)
        return gpu.power_default_limit_mw

    def nvmlDeviceGetEccMode(self, gpu: FakeGpu) -> tuple[int, int]:
        self._record("nvmlDeviceGetEccMode", gpu)
        return gpu.ecc_mode

    def nvmlDeviceGetMigMode(self, gpu: FakeGpu) -> tuple[int, int]:
        self._record("nvmlDeviceGetMigMode", gpu)
        return gpu.mig_mode

    def nvmlDeviceGetComputeMode(self, gpu: FakeGpu) -> int:
        self._record("nvmlDeviceGetComputeMode", gpu)
        return gpu.compute_mode

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[FakeProcess]:
        self._record("nvmlDeviceGetComputeRunningProcesses", gpu)
        return list(gpu.processes)

    def nvmlDeviceGetGraphicsRunningProcesses(self, gpu: FakeGpu) -> list[FakeProcess]:
        self._record("nvmlDeviceGetGraphicsRunningProcesses", gpu)
        return []
