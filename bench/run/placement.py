"""Which GPUs each engine replica of a run gets, checked against the GPUs visible here.

A run's `parallelism` asks for `tensor_parallel_size x replicas` GPUs. `place()` resolves that
against this machine before anything starts: the visible GPUs are CUDA_VISIBLE_DEVICES's entries
when it is set (Ray and schedulers set it), else every GPU NVML reports. Replica r gets the
`tensor_parallel_size` consecutive GPUs after those of replicas 0..r-1 (of `gpu_ids` when given)
and runs with CUDA_VISIBLE_DEVICES set to exactly those, so a framework's "GPU 0" is its own.
A run that does not add up is a UserError: one line, exit code 2 in the CLIs.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field

from bench.core.config import RunConfig
from bench.core.errors import UserError
from bench.core.strict import Strict


class Placement(Strict):
    """Where a run's replicas run: device kind, each replica's GPUs, the GPUs to sample."""

    device: Literal["cuda", "cpu"]
    replica_devices: list[list[str]] = Field(
        description="Per replica, its CUDA_VISIBLE_DEVICES entries (empty lists on CPU)."
    )
    nvml_indices: list[int] | None = Field(
        None,
        description="NVML indices of the run's GPUs, for telemetry; None = not resolvable "
        "(MIG or unknown entries) or not ours to pin: telemetry then samples every GPU.",
    )
    pinned: bool = Field(
        True,
        description="False for a client of a server started elsewhere: its GPUs are the "
        "server's, unknown here, so nothing is pinned and every GPU is sampled.",
    )

    @property
    def replicas(self) -> int:
        return len(self.replica_devices)

    @property
    def gpus(self) -> int | None:
        """GPUs the run uses (None on CPU or unknown): the denominator of tok/s per GPU."""
        if self.device != "cuda" or not self.pinned:
            return None
        return sum(len(devices) for devices in self.replica_devices)

    def env(self, replica: int) -> dict[str, str]:
        """Environment a replica's worker starts with: its GPUs only (nothing on CPU)."""
        if self.device != "cuda" or not self.pinned:
            return {}
        env = {"CUDA_VISIBLE_DEVICES": ",".join(self.replica_devices[replica])}
        # NVML numbers GPUs in PCI order; CUDA's default is fastest-first. PCI order in the
        # worker makes "GPU 1" mean the same to both (unless the user chose an order).
        env.setdefault("CUDA_DEVICE_ORDER", os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID"))
        return env


def visible_devices(nvml: Any = None) -> tuple[list[str], list[int | None]]:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES entries (or NVML indices as text)
    and, for each, its NVML index (None when it cannot be matched, e.g. a MIG instance)."""
    from bench.run.telemetry import close_nvml, nvml_call, nvml_text, open_nvml

    module, _reason = open_nvml(nvml)
    uuids: list[str] = []
    count = 0
    if module is not None:
        try:
            count = nvml_call(module.nvmlDeviceGetCount) or 0
            for index in range(count):
                handle = nvml_call(module.nvmlDeviceGetHandleByIndex, index)
                uuid = nvml_call(module.nvmlDeviceGetUUID, handle) if handle is not None else None
                uuids.append(str(nvml_text(uuid) or ""))
        finally:
            close_nvml(module)
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return [str(index) for index in range(count)], list(range(count))
    entries: list[str] = []
    for entry in (part.strip() for part in listed.split(",")):
        if not entry or entry.startswith("-"):  # CUDA stops at the first invalid entry
            break
        entries.append(entry)
    indices: list[int | None] = []
    for entry in entries:
        if entry.isdigit():
            indices.append(int(entry) if int(entry) < max(count, 1) else None)
        else:
            match = [i for i, uuid in enumerate(uuids) if uuid and uuid.startswith(entry)]
            indices.append(match[0] if len(match) == 1 else None)
    return entries, indices


def place(config: RunConfig, backend_cls: Any = None, nvml: Any = None) -> Placement:
    """The run's placement, or a UserError saying why its parallelism does not fit here.

    CPU runs (device cpu, or auto with no GPU visible): replicas are worker processes; tensor
    parallelism is refused. GPU runs: `gpu_ids` (or the first `gpus_needed` visible GPUs) are
    split into consecutive groups of `tensor_parallel_size`, one group per replica.
    `backend_cls.engine_args_for` is asked first, so a backend that cannot split a model says
    so in its own words.
    """
    parallelism = config.parallelism
    if backend_cls is not None:
        backend_cls.engine_args_for(
            config.engine_args, parallelism, config.precision, config.prefix_caching
        )
        if not backend_cls.uses_local_gpus(config.engine_args):
            return Placement(
                device="cpu" if config.device == "cpu" else "cuda",
                replica_devices=[[] for _ in range(parallelism.replicas)],
                pinned=False,
            )
    tp = parallelism.tensor_parallel_size
    needed = parallelism.gpus_needed
    entries, indices = ([], []) if config.device == "cpu" else visible_devices(nvml)
    if config.device == "cpu" or (config.device == "auto" and not entries):
        if tp > 1:
            why = "device is cpu" if config.device == "cpu" else "no GPU is visible here"
            raise UserError(
                f"tensor_parallel_size {tp} splits one engine over {tp} GPUs, but {why}: CPU "
                f"engines run one process each (use parallelism.replicas for several)"
            )
        if parallelism.gpu_ids is not None:
            raise UserError("parallelism.gpu_ids names GPUs, but this run is on the CPU")
        return Placement(device="cpu", replica_devices=[[] for _ in range(parallelism.replicas)])
    if parallelism.gpu_ids is not None:
        out_of_range = [i for i in parallelism.gpu_ids if i >= len(entries)]
        if out_of_range:
            raise UserError(
                f"parallelism.gpu_ids {parallelism.gpu_ids}: GPU {out_of_range[0]} is not "
                f"visible here ({_visible_text(entries)})"
            )
        chosen = list(parallelism.gpu_ids)
    else:
        if needed > len(entries):
            raise UserError(
                f"tensor_parallel_size {tp} x replicas {parallelism.replicas} needs {needed} "
                f"GPUs, but {_visible_text(entries)}"
            )
        chosen = list(range(needed))
    groups = [chosen[start : start + tp] for start in range(0, needed, tp)]
    resolved = [indices[i] for i in chosen]
    return Placement(
        device="cuda",
        replica_devices=[[entries[i] for i in group] for group in groups],
        nvml_indices=None if any(i is None for i in resolved) else resolved,  # type: ignore[misc]
    )


def _visible_text(entries: list[str]) -> str:
    if not entries:
        return "no GPU is visible here"
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    where = f" (CUDA_VISIBLE_DEVICES={listed})" if listed is not None else ""
    return f"{len(entries)} GPU(s) are visible here{where}"
