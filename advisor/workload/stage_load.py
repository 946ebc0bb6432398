"""One load for a stage: the requests in flight at its peak, by one rule everything reads.

A stage states its peak as closed-loop clients (`concurrency`) or as an arrival rate
(`peak_request_rate_rps`, else `request_rate_rps`). The memory fit, the configuration search,
the capacity sizing, the benchmark plans and the report all need the number of requests in
flight at that peak; they take it from `stage_load`, so one profile never gets three figures.

The rule (Little's law, L = lambda x W):
- `concurrency` given: that many requests are in flight (closed loop).
- a rate given: in flight = ceil(rate x E2E), where E2E is the latency the SLO allows at its
  percentile: the E2E limit when the SLO sets one, else TTFT limit + (mean output tokens - 1) x
  TPOT limit when it sets both. This is the most a fleet that meets the SLO holds at once at
  that percentile (a served request that takes longer has missed the SLO), so memory sized for
  it is enough; a measured E2E at the capacity is lower.
- a rate without an SLO that bounds E2E, or no load at all: DEFAULT_IN_FLIGHT requests in
  flight, said so (the level a quick benchmark measures when nothing else is known).

A rate's in-flight count is the whole fleet's. One engine runs at most ENGINE_SEQUENCE_LIMIT
sequences at once (vLLM's default max_num_seqs, which the plans keep): the rest are on other
replicas or wait in its queue holding no KV cache. So the figure one engine is sized and measured
at (`per_engine`: the memory fit, the configuration search, the quick plan) is the in-flight
count capped there; a concurrency the profile gives is the user's own statement of what one
deployment holds and is used as it is.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from advisor.workload.profile import StageProfile
from bench.core.strict import Strict

LoadSource = Literal["concurrency", "little's law", "not given"]
DEFAULT_IN_FLIGHT = 8
ENGINE_SEQUENCE_LIMIT = 256
"""Sequences one engine runs at once by default (vLLM max_num_seqs; TensorRT-LLM's
max_batch_size default is the same): a rate's Little's-law count beyond it is other replicas'."""
"""Requests in flight assumed when the profile's load does not fix them (said in the rule)."""


class StageLoad(Strict):
    """The stage's peak load and the in-flight count derived from it (`stage_load`)."""

    in_flight: int = Field(ge=1, description="Requests in flight at the peak (the whole fleet).")
    per_engine: int = Field(
        ge=1, description="Requests one engine holds at once: what it is sized and measured at."
    )
    source: LoadSource
    rate_rps: float | None = Field(None, description="The peak arrival rate, when one is given.")
    e2e_ms: float | None = Field(
        None, description="The E2E latency Little's law used (the SLO's bound at its percentile)."
    )
    rule: str = Field(description="How in_flight was derived, in one sentence.")

    @property
    def replicas_take_the_rest(self) -> bool:
        """The in-flight count is the whole fleet's (derived from the peak rate): an engine that
        holds the weights and some of those sequences serves, and the fleet answer's replicas
        take the rest. A profile's own concurrency is what one engine must hold."""
        return self.source == "little's law"


def slo_e2e_bound_ms(stage: StageProfile) -> tuple[float | None, str]:
    """(E2E the SLO allows at its percentile, how it follows from the SLO), None if unbounded:
    the run's own rule (`SLO.e2e_bound_ms`, which the capacity search settles its probes by),
    at the stage's mean output length."""
    output = stage.output_tokens.mean if stage.kind == "generate" else None
    return stage.slo.e2e_bound_ms(output)


def stage_load(stage: StageProfile) -> StageLoad:
    """The stage's in-flight requests at its peak by the module docstring's rule."""
    rate = stage.peak_request_rate_rps or stage.request_rate_rps
    if stage.concurrency is not None:
        return StageLoad(
            in_flight=stage.concurrency,
            per_engine=stage.concurrency,
            source="concurrency",
            rate_rps=rate,
            rule=f"{stage.concurrency} requests in flight: the profile's concurrency",
        )
    if rate is not None:
        bound, how = slo_e2e_bound_ms(stage)
        if bound is not None:
            in_flight = max(1, math.ceil(rate * bound / 1e3 - 1e-9))
            per_engine = min(in_flight, ENGINE_SEQUENCE_LIMIT)
            capped = (
                f"; one engine holds at most {per_engine} (its sequence limit: the rest are "
                "other replicas' or queued)"
                if per_engine < in_flight
                else ""
            )
            return StageLoad(
                in_flight=in_flight,
                per_engine=per_engine,
                source="little's law",
                rate_rps=rate,
                e2e_ms=bound,
                rule=f"{in_flight} requests in flight at {rate:g} req/s (Little's law: rate x "
                f"the E2E the SLO allows, {how}){capped}",
            )
        return StageLoad(
            in_flight=DEFAULT_IN_FLIGHT,
            per_engine=DEFAULT_IN_FLIGHT,
            source="not given",
            rate_rps=rate,
            rule=f"{DEFAULT_IN_FLIGHT} requests in flight assumed: {rate:g} req/s is given but no "
            "SLO bounds the E2E latency (set slo.e2e_ms, or ttft_ms and tpot_ms)",
        )
    return StageLoad(
        in_flight=DEFAULT_IN_FLIGHT,
        per_engine=DEFAULT_IN_FLIGHT,
        source="not given",
        rule=f"{DEFAULT_IN_FLIGHT} requests in flight assumed: the profile gives no concurrency "
        "and no request rate",
    )


__all__ = [
    "DEFAULT_IN_FLIGHT",
    "ENGINE_SEQUENCE_LIMIT",
    "StageLoad",
    "slo_e2e_bound_ms",
    "stage_load",
]
