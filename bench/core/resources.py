"""What a job or a campaign step asks its host for: GPUs, their type and CPUs (a Ray node: exactly
this). It lives in bench/core because the job row's placement (bench/core/job_progress.py) records
it, and the store, which stands on core alone, reads that row; bench/orchestrate/executors.py
works it out from a job's configs.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from bench.core.strict import Strict

ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"
"""Ray names a node's detected GPU model `accelerator_type:<name>` (e.g. `accelerator_type:H200`);
a node whose GPUs Ray does not detect advertises the same name as a custom resource
(`ray start --resources '{"accelerator_type:L40S": 1}'`), so one spelling serves both."""
ACCELERATOR_REQUEST = 0.001
"""A job asks for a sliver of the node's type marker (Ray's own convention for
`accelerator_type=`): it selects the node without using up the marker."""


NORMAL_PRIORITY_RUNTIME_ENV: dict[str, Any] = {"env_vars": {"RAY_worker_niceness": "0"}}
"""The runtime env of every task and actor the ray executor starts. Ray starts its worker
processes at nice 15 unless `RAY_worker_niceness` says otherwise (Ray's own job supervisor sets it
to 0 the same way), and the engine and load generator a task spawns inherit it: on a node with any
other CPU load the measurement then gets a sliver of the CPU. Beside `stress-ng --cpu 2` on a
2-core machine the tiny-cpu campaign through Ray took 424 s at nice 15 and 60 s at nice 0."""


class Resources(Strict):
    """What a job or a campaign step asks its host for (a Ray node: exactly this)."""

    gpus: int = Field(ge=0, description="GPUs: tensor parallel size x replicas; 0 on CPU.")
    gpu_type: str | None = Field(None, description="GPU model (Ray accelerator type).")
    cpus: float = Field(1.0, gt=0, description="CPUs.")

    def ray_resources(self) -> dict[str, float]:
        """Custom resources for `.options(resources=...)`: the GPU-type marker, if any."""
        if not self.gpu_type:
            return {}
        return {ACCELERATOR_RESOURCE_PREFIX + self.gpu_type: ACCELERATOR_REQUEST}

    def ray_options(self) -> dict[str, Any]:
        """`.options()` of the job's Ray task: never retried (a benchmark must not run twice), at
        normal CPU priority (NORMAL_PRIORITY_RUNTIME_ENV)."""
        return {
            "num_cpus": self.cpus,
            "num_gpus": self.gpus,
            "resources": self.ray_resources(),
            "max_retries": 0,
            "retry_exceptions": False,
            "runtime_env": NORMAL_PRIORITY_RUNTIME_ENV,
        }

    def describe(self) -> str:
        """`2 × H200, 1 CPU`, `1 × GPU, 1 CPU`, `1 CPU` — what the job waits for."""
        parts = []
        if self.gpus:
            parts.append(f"{self.gpus} × {self.gpu_type or 'GPU'}")
        elif self.gpu_type:
            parts.append(self.gpu_type)
        parts.append(f"{self.cpus:g} CPU")
        return ", ".join(parts)

    def fits(self, node_resources: dict[str, float]) -> bool:
        """Whether a node with these total resources could ever run the job."""
        wanted = {"CPU": self.cpus, "GPU": float(self.gpus), **self.ray_resources()}
        return all(
            node_resources.get(name, 0.0) >= amount for name, amount in wanted.items() if amount
        )


__all__ = ["ACCELERATOR_REQUEST", "ACCELERATOR_RESOURCE_PREFIX", "Resources"]
