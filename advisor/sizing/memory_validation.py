"""The engine model's memory rule against the KV pool vLLM itself reported: every shipped GPU run
whose raw engine log (data/reference/*/steps-*.tgz) says "GPU KV cache size: N tokens" is paired
with the pool the rule gives the same model, GPU, precision and `gpu_memory_utilization`
(advisor/sizing/engine_model/replica.py: utilization x the datasheet memory in GiB, less the
runtime and the weights, over the KV bytes a token holds). docs/capacity-model.md shows the
rows ("The KV pool"); tests/advisor/test_memory_validation.py recomputes them.
"""

from __future__ import annotations

import json
import re
import tarfile
from functools import lru_cache
from pathlib import Path

from pydantic import Field

from advisor.sizing.engine_model.replica import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    free_after_weights,
)
from advisor.sizing.serving_calibration import _engine_args, run_shape
from advisor.workload.gpus import GPUS
from bench.core.strict import Strict

KV_POOL_LINE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
"""vLLM's startup line with the pool it allocated (vllm/v1/core/kv_cache_utils.py)."""


class KvPoolCheck(Strict):
    """One run: the KV pool vLLM reported beside the memory rule's."""

    run_id: str
    reference: str = Field(description="The shipped runs file the run is in.")
    model: str
    gpu: str
    precision: str
    utilization: float
    reported_tokens: int = Field(gt=0, description="vLLM's 'GPU KV cache size'.")
    predicted_tokens: int = Field(description="The memory rule's pool for the same run.")

    @property
    def error(self) -> float:
        """(predicted - reported) / reported."""
        return (self.predicted_tokens - self.reported_tokens) / self.reported_tokens


def reported_kv_pools(reference_dir: Path) -> dict[str, int]:
    """run id -> the KV pool (tokens) its engine log reports, over every raw step archive."""
    found: dict[str, int] = {}
    for archive in sorted(reference_dir.glob("*/steps*.tgz")):
        with tarfile.open(archive) as tar:
            members = {member.name: member for member in tar.getmembers() if member.isfile()}
            for name, member in members.items():
                if not name.endswith("result.json"):
                    continue
                folder = name.rsplit("/", 1)[0]
                logs = [n for n in members if n.startswith(folder + "/") and "engine" in n]
                pool = _pool_of(tar, [members[n] for n in logs])
                if pool is None:
                    continue
                result = tar.extractfile(member)
                if result is not None:
                    found[json.load(result)["run_id"]] = pool
    return found


def _pool_of(tar: tarfile.TarFile, logs: list[tarfile.TarInfo]) -> int | None:
    for log in logs:
        handle = tar.extractfile(log)
        text = handle.read().decode("utf-8", "replace") if handle is not None else ""
        match = KV_POOL_LINE.search(text)
        if match:
            return int(match.group(1).replace(",", ""))
    return None


def kv_pool_checks(reference_dir: Path) -> list[KvPoolCheck]:
    """Every shipped run with a reported pool that the engine model covers (one row per model,
    GPU, precision, utilization and reported pool: repeats of one engine start are one row)."""
    return list(_checks_of(str(Path(reference_dir).resolve())))


@lru_cache(maxsize=4)
def _checks_of(folder: str) -> tuple[KvPoolCheck, ...]:
    from advisor.sizing.measured import measured_reference_runs

    pools = reported_kv_pools(Path(folder))
    rows: dict[tuple, KvPoolCheck] = {}
    for reference, runs in measured_reference_runs(folder).items():
        for run in runs:
            reported = pools.get(run.run_id)
            item = run_shape(run, require_valid=False) if reported else None
            if item is None or reported is None:
                continue
            gpu = GPUS[item.gpu]
            args = _engine_args(run)
            utilization = float(args.get("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION))
            shape = item.shape
            free = free_after_weights(shape.weight_bytes, gpu.memory_gb, utilization)
            check = KvPoolCheck(
                run_id=run.run_id,
                reference=f"data/reference/{reference}",
                model=run.config.model,
                gpu=item.gpu,
                precision=run.config.precision.label(),
                utilization=utilization,
                reported_tokens=reported,
                predicted_tokens=int(free // shape.kv_bytes_per_token),
            )
            key = (check.model, check.gpu, check.precision, utilization, reported)
            rows.setdefault(key, check)
    return tuple(sorted(rows.values(), key=lambda c: (c.gpu, c.model, c.precision, c.run_id)))


__all__ = ["KV_POOL_LINE", "KvPoolCheck", "kv_pool_checks", "reported_kv_pools"]
