"""Whether an LLM stage's TTFT and TPOT limits can hold at all on its GPUs, before anything runs.

Each limit is set against the physical floor of one request on an empty engine (advisor/sizing/
estimate.py): TTFT against the prefill of the prompt's uncached tokens at the GPUs' dense tensor
peak, attention included; TPOT against one decode step reading the weights at the datasheet
bandwidth. Every engine at every load is at or above these floors, so a limit below its floor
cannot hold anywhere; the verdict says by how much and what would bring the floor under the limit
(FP8 weights, tensor parallelism, a faster GPU, shorter uncached prompts), each checked by the
same estimate.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from advisor.sizing.estimate import TP_DEGREES, Estimate, estimate_stage
from advisor.workload.gpus import GPUS
from advisor.workload.profile import GpuProfile, StageProfile
from bench.core.strict import Strict


class FloorCheck(Strict):
    """One limit against its floor."""

    metric: Literal["TTFT", "TPOT"]
    slo_ms: float = Field(gt=0)
    floor_ms: float = Field(gt=0)

    @property
    def times_the_limit(self) -> float:
        return self.floor_ms / self.slo_ms


class LlmFloorVerdict(Strict):
    """The limits a stage's GPUs cannot meet at their floor, and what would."""

    gpu: str
    gpus: int
    prompt_tokens: float
    failing: list[FloorCheck] = Field(min_length=1)
    remedies: list[str] = Field(default_factory=list)

    def words(self) -> str:
        """One page-1 sentence: which limit, its floor, how far, and what would meet it."""
        parts = []
        for check in self.failing:
            what = (
                f"the prefill of {self.prompt_tokens:,.0f} prompt tokens"
                if check.metric == "TTFT"
                else "one decode step's read of the weights"
            )
            parts.append(
                f"{check.metric} <= {check.slo_ms:,.0f} ms is below the floor: {what} takes at "
                f"least {_ms(check.floor_ms)} ms on {self.gpus} × {self.gpu} "
                f"({check.times_the_limit:.1f}x the limit)"
            )
        text = "; ".join(parts) + ": no engine meets it at any load"
        return text + ". Would bring the floor under the limit: " + "; ".join(self.remedies)

    def risk(self) -> str:
        """The caveat and page 1's first risk."""
        return "The SLO cannot hold: " + self.words()


def _ms(value: float) -> str:
    """6,466 or 53.5: three significant figures, thousands separated."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _failing(stage: StageProfile, estimate: Estimate) -> list[FloorCheck]:
    out = []
    ttft, tpot = stage.slo.ttft_ms, stage.slo.tpot_ms
    if ttft is not None and estimate.prefill_floor_ms and estimate.prefill_floor_ms > ttft:
        out.append(FloorCheck(metric="TTFT", slo_ms=ttft, floor_ms=estimate.prefill_floor_ms))
    decode = estimate.decode_floor_ms_per_token
    if tpot is not None and decode and decode > tpot:
        out.append(FloorCheck(metric="TPOT", slo_ms=tpot, floor_ms=decode))
    return out


def _meets(stage: StageProfile, metric: str, **update) -> bool:
    """The stage with `update` applied (gpu, precision) has `metric`'s limit above its floor."""
    variant = stage.model_copy(update=update)
    estimate = estimate_stage(variant)
    if estimate.prefill_floor_ms is None and estimate.decode_floor_ms_per_token is None:
        return False
    return all(check.metric != metric for check in _failing(variant, estimate))


def _remedies_for(stage: StageProfile, check: FloorCheck) -> list[str]:
    """Each single change that brings `check`'s floor under its limit."""
    out: list[str] = []
    gpu = GPUS[stage.gpu.type or ""]
    fp8 = stage.precision.model_copy(update={"quantization": "fp8"})
    if gpu.fp8 and not stage.precision.quantization and _meets(stage, check.metric, precision=fp8):
        out.append(f"FP8 weights on the {gpu.name}")
    for tp in (d for d in TP_DEGREES if d > stage.gpu.count):
        if _meets(stage, check.metric, gpu=stage.gpu.model_copy(update={"count": tp})):
            out.append(f"tensor parallelism over {tp} × {gpu.name}")
            break
    faster = [
        other.name
        for other in GPUS.values()
        if other.name != gpu.name
        and _meets(stage, check.metric, gpu=GpuProfile(type=other.name, count=stage.gpu.count))
    ]
    if faster:
        out.append(f"a faster GPU ({', '.join(faster)})")
    if check.metric == "TTFT":
        # The floor grows at least linearly with the uncached tokens: a bound, not a fit.
        shorter = stage.prompt_tokens.mean / check.times_the_limit
        out.append(
            f"uncached prompts of at most about {shorter:,.0f} tokens (shorter prompts, or a "
            "shared prefix the engine caches: shared_prefix)"
        )
    return out


def _remedies(stage: StageProfile, failing: list[FloorCheck]) -> list[str]:
    out = []
    for check in failing:
        found = _remedies_for(stage, check)
        if found:
            out.append(f"for {check.metric}: " + ", or ".join(found))
        else:
            out.append(
                f"for {check.metric}: nothing catalogued (no GPU, up to 8-way tensor "
                "parallelism or FP8) brings its floor under the limit: relax it"
            )
    return out


def llm_floor_verdict(stage: StageProfile) -> LlmFloorVerdict | None:
    """The stage's limits below their floors on its GPUs (or the fewest that hold the model),
    with remedies; None where every limit is above its floor or the floors cannot be computed
    (not a generate stage, no GPU type, a model of unknown size or one no layout holds)."""
    if stage.kind != "generate" or stage.gpu.type not in GPUS:
        return None
    estimate = estimate_stage(stage)
    if estimate.fits is False:
        # Judged on the fewest GPUs that hold the model, as it would be served; none at its
        # precision up to 8-way: the memory fit says so, the floors have nothing to stand on.
        needed = estimate.tensor_parallel_needed
        if needed is None:
            return None
        stage = stage.model_copy(update={"gpu": stage.gpu.model_copy(update={"count": needed})})
        estimate = estimate_stage(stage)
    failing = _failing(stage, estimate)
    if not failing:
        return None
    return LlmFloorVerdict(
        gpu=stage.gpu.type,
        gpus=stage.gpu.count,
        prompt_tokens=stage.prompt_tokens.mean,
        failing=failing,
        remedies=_remedies(stage, failing),
    )


__all__ = ["FloorCheck", "LlmFloorVerdict", "llm_floor_verdict"]
