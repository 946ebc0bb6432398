"""Two 16-bit dtypes as one speed class, only where measurements say so.

A profile that leaves its dtype at the default (float16) must not lose a matching bfloat16
measurement to a label. float16 and bfloat16 move the same bytes and, on the GPUs of the
catalogue, run at the same tensor-core rate; whether an engine actually runs them at the same
speed is a measurement: a *pair* of runs of one engine on one GPU type, one model, one workload
and one layout, one run at each dtype, whose output throughput agrees at every shared load level
within `SAME_CLASS_TOLERANCE`. Where such a pair exists, a run at the other dtype may stand for
the stage's (evidence and capacity), and the answer says which pair allowed it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import Field

from advisor.sizing.capacity import run_gpu_type
from bench.core.schema import RunResult
from bench.core.strict import Strict

SIXTEEN_BIT = frozenset({"float16", "bfloat16"})
SAME_CLASS_TOLERANCE = 0.10
"""Largest relative difference in output throughput, at any shared level, for a pair to count
as one speed class: the host-to-host spread stated for the shipped H200 runs (~10%,
docs/measurements/h200.md)."""


class SpeedClassPair(Strict):
    """The measured pair that makes float16 and bfloat16 one speed class for an engine on a GPU."""

    engine: str
    gpu_type: str
    float16_run: str = Field(description="Run id at float16.")
    bfloat16_run: str = Field(description="Run id at bfloat16.")
    where: list[str] = Field(default_factory=list, description="Files the two runs come from.")
    levels: list[float] = Field(description="Load levels both runs measured.")
    largest_difference: float = Field(
        description="Largest |bf16 / fp16 - 1| of output throughput over those levels."
    )

    def sentence(self) -> str:
        files = f" ({', '.join(self.where)})" if self.where else ""
        return (
            f"float16 and bfloat16 are one speed class for {self.engine} on {self.gpu_type}: its "
            f"paired runs {self.float16_run} (float16) and {self.bfloat16_run} (bfloat16){files} "
            f"agree within {self.largest_difference:.1%} in output throughput at "
            f"{len(self.levels)} load level(s) (tolerance {SAME_CLASS_TOLERANCE:.0%})"
        )


def _pair_key(run: RunResult) -> tuple | None:
    """What two runs must share to be a dtype pair (everything but the dtype)."""
    config = run.config
    if config.precision.dtype not in SIXTEEN_BIT or config.load.capacity_search:
        return None
    return (
        config.backend,
        run_gpu_type(run),
        run.model.name if run.model is not None else config.model,
        config.workload.model_dump_json(),
        config.precision.quantization,
        config.precision.kv_cache_dtype,
        config.parallelism.tensor_parallel_size,
        config.parallelism.replicas,
    )


def _throughput_by_level(run: RunResult) -> dict[tuple[str, float], float]:
    return {
        (phase.strategy, phase.target): phase.summary.output_throughput_tok_s
        for phase in run.phases
        if phase.summary is not None and phase.summary.output_throughput_tok_s
    }


def speed_class_pairs(
    runs: Sequence[RunResult], files: Mapping[str, str] | None = None
) -> list[SpeedClassPair]:
    """Every float16/bfloat16 pair among `runs` that agrees within the tolerance (the closest
    pair first for each engine and GPU type). `files` maps a run id to its reference file."""
    by_key: dict[tuple, dict[str, list[RunResult]]] = {}
    for run in runs:
        key = _pair_key(run)
        if key is None or key[1] is None:
            continue
        by_key.setdefault(key, {}).setdefault(run.config.precision.dtype, []).append(run)
    pairs: list[SpeedClassPair] = []
    for key, dtypes in by_key.items():
        for half in dtypes.get("float16", []):
            for brain in dtypes.get("bfloat16", []):
                a, b = _throughput_by_level(half), _throughput_by_level(brain)
                shared = sorted(set(a) & set(b))
                if not shared:
                    continue
                largest = max(abs(b[level] / a[level] - 1) for level in shared)
                if largest > SAME_CLASS_TOLERANCE:
                    continue
                pairs.append(
                    SpeedClassPair(
                        engine=key[0],
                        gpu_type=key[1],
                        float16_run=half.run_id,
                        bfloat16_run=brain.run_id,
                        where=sorted(
                            {files[r] for r in (half.run_id, brain.run_id) if files and r in files}
                        ),
                        levels=[level for _, level in shared],
                        largest_difference=round(largest, 4),
                    )
                )
    # Per engine and GPU: the pair over the most levels first, then the closest.
    pairs.sort(
        key=lambda pair: (pair.engine, pair.gpu_type, -len(pair.levels), pair.largest_difference)
    )
    return pairs


def same_speed_class(
    pairs: Sequence[SpeedClassPair], engine: str, gpu_type: str | None, dtypes: set[str]
) -> SpeedClassPair | None:
    """The pair that lets a run at one 16-bit dtype stand for the other (None: no such pair,
    or the dtypes are not float16 and bfloat16)."""
    if dtypes != SIXTEEN_BIT or gpu_type is None:
        return None
    return next((p for p in pairs if p.engine == engine and p.gpu_type == gpu_type), None)


__all__ = [
    "SAME_CLASS_TOLERANCE",
    "SpeedClassPair",
    "same_speed_class",
    "speed_class_pairs",
]
