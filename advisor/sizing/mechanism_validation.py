"""The engine model's mechanics checked on a GPU, level by level: prefix caching, mixture-of-
experts and long context under load.

Each shipped GPU run whose workload exercises one of them (a shared prefix or conversations with
caching on or off, a MoE model, prompts of `LONG_CONTEXT_TOKENS` or more) is simulated at every
measured closed-loop level, as `serving_validation` simulates a level, under three bases:
- `uncalibrated`: the default efficiencies;
- `this GPU`: the GPU's own shipped `bench calibrate` record (none: the row has no such column);
- `left out`: the record's factors (or the defaults) with the mechanic removed from the engine
  model: no prefix cache (every prompt prefilled whole), a MoE model read as dense (every
  parameter in every step's FLOPs and bytes), or attention left out of the prefill (the GEMM-only
  floor). The distance between it and the measurement is what the mechanic is worth to the
  prediction.
Errors are (predicted - measured) / measured of the medians (TTFT p50, TPOT p50) and of the
tails (TTFT p99, TPOT p99).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import Field

from advisor.sizing.calibration_fit import fit_record, record_matches
from advisor.sizing.serving_calibration import RunShape, run_shape, steady_phases
from advisor.sizing.serving_model import Factors
from advisor.sizing.serving_validation import latency_figures, simulated_level
from advisor.workload.architectures import architecture_for
from bench.core.calibration import CalibrationRecord
from bench.core.config import GenerateWorkload
from bench.core.schema import RunResult
from bench.core.strict import Strict

Mechanism = Literal["prefix caching", "mixture-of-experts", "long context"]
Basis = Literal["uncalibrated", "this GPU", "left out"]
FIGURES = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99")
LONG_CONTEXT_TOKENS = 8_000
"""Prompts from here on are long context (attention a large share of the prefill)."""

LEFT_OUT_WORDS: dict[Mechanism, str] = {
    "prefix caching": "no prefix cache: every prompt prefilled whole",
    "mixture-of-experts": "read as a dense model of its total parameters",
    "long context": "attention FLOPs left out of the prefill",
}


class MechanismLevel(Strict):
    """One measured level beside each basis' simulation of it."""

    phase: str
    concurrency: int
    measured: dict[str, float] = Field(description="By FIGURES name (ms).")
    predicted: dict[str, dict[str, float]] = Field(description="Basis -> figure -> ms.")

    def error(self, basis: str, figure: str) -> float | None:
        value, measured = self.predicted.get(basis, {}).get(figure), self.measured.get(figure)
        if value is None or not measured:
            return None
        return (value - measured) / measured


class MechanismRun(Strict):
    """One shipped run of a mechanic, predicted level by level."""

    mechanism: Mechanism
    run_id: str
    reference: str | None
    gpu: str
    model: str
    traffic: str = Field(description="The run's workload in words.")
    caching: bool
    token_budget: int = Field(description="The engine's prefill chunk (max_num_batched_tokens).")
    record: str | None = Field(description="The `bench calibrate` record of 'this GPU', if any.")
    bases: list[str]
    levels: list[MechanismLevel]

    def median_abs_error(self, basis: str, figure: str) -> float | None:
        found = [abs(e) for e in (lvl.error(basis, figure) for lvl in self.levels) if e is not None]
        return statistics.median(found) if found else None


def mechanisms_of(run: RunResult) -> list[Mechanism]:
    """The mechanics a generate run exercises."""
    workload = run.config.workload
    if not isinstance(workload, GenerateWorkload):
        return []
    out: list[Mechanism] = []
    if workload.prefix is not None or workload.conversation is not None:
        out.append("prefix caching")
    architecture, _ = architecture_for(run.config.model)
    if architecture is not None and architecture.is_moe:
        out.append("mixture-of-experts")
    if workload.prompt_tokens.mean >= LONG_CONTEXT_TOKENS:
        out.append("long context")
    return out


def left_out_shape(run: RunResult, mechanism: Mechanism) -> RunShape | None:
    """The run's engine shape with `mechanism` removed from the engine model."""
    if mechanism == "prefix caching":
        config = run.config.model_copy(update={"prefix_caching": False})
        return run_shape(run.model_copy(update={"config": config}))
    if mechanism == "mixture-of-experts":
        architecture, _ = architecture_for(run.config.model)
        if architecture is None:
            return None
        dense = dataclasses.replace(
            architecture,
            experts=None,
            experts_per_token=None,
            expert_intermediate_size=None,
            shared_expert_intermediate_size=None,
            moe_layers=None,
        )
        return run_shape(run, architecture=dense)
    item = run_shape(run)
    if item is None:
        return None
    return dataclasses.replace(
        item, shape=dataclasses.replace(item.shape, prefill_keys_per_token=0.0)
    )


def traffic_words(run: RunResult) -> str:
    workload = run.config.workload
    assert isinstance(workload, GenerateWorkload)
    prompt, output = workload.prompt_tokens.mean, workload.output_tokens.mean
    if workload.prefix is not None:
        return (
            f"{workload.prefix.count} shared prefix(es) of {workload.prefix.tokens.mean:,.0f} "
            f"+ {prompt:,.0f} own tokens, {output:,.0f} out"
        )
    if workload.conversation is not None:
        return (
            f"{workload.conversation.turns.mean:g}-turn conversations, first prompt "
            f"{prompt:,.0f}, {workload.conversation.user_tokens.mean:,.0f} per new message, "
            f"{output:,.0f} out"
        )
    return f"{prompt:,.0f}/{output:,.0f} tokens"


def _record_for(item: RunShape, records: Sequence[CalibrationRecord]) -> CalibrationRecord | None:
    matching = [
        r for r in records if record_matches(r, item.family, item.gpu, item.precision_class)
    ]
    return max(matching, key=lambda r: r.created_at, default=None)


def check_run(
    run: RunResult,
    mechanism: Mechanism,
    records: Sequence[CalibrationRecord],
    reference: str | None = None,
) -> MechanismRun | None:
    """`run`'s closed-loop levels under each basis; None when the model does not cover it or
    it has no such level, or on a CPU (the mechanics' GPU speed is the question here)."""
    item = run_shape(run)
    plain = left_out_shape(run, mechanism)
    if item is None or plain is None or item.gpu == "cpu":
        return None
    record = _record_for(item, records)
    fit = fit_record(record, "shipped") if record is not None else None
    factors: dict[str, Factors] = {"uncalibrated": Factors()}
    if fit is not None:
        factors["this GPU"] = fit.calibration.factors
    left_out_factors = factors.get("this GPU", factors["uncalibrated"])
    levels = []
    for phase, over, level in steady_phases(run):
        if over != "concurrency":
            continue
        predicted = {
            basis: latency_figures(simulated_level(item, f, phase, over, level))
            for basis, f in factors.items()
        }
        predicted["left out"] = latency_figures(
            simulated_level(plain, left_out_factors, phase, over, level)
        )
        levels.append(
            MechanismLevel(
                phase=phase.name,
                concurrency=int(level),
                measured={k: v for k, v in latency_figures(phase.summary).items() if k in FIGURES},
                predicted={
                    b: {k: v for k, v in p.items() if k in FIGURES} for b, p in predicted.items()
                },
            )
        )
    if not levels:
        return None
    caching = run.config.prefix_caching
    return MechanismRun(
        mechanism=mechanism,
        run_id=run.run_id,
        reference=reference,
        gpu=item.gpu,
        model=run.config.model,
        traffic=traffic_words(run),
        caching=item.shape.cached_prompt_tokens > 0 if caching is None else caching,
        token_budget=item.shape.token_budget,
        record=record.calibration_id if fit is not None and record is not None else None,
        bases=[*factors, "left out"],
        levels=levels,
    )


def check_mechanisms(
    runs: Iterable[tuple[RunResult, str | None]], records: Sequence[CalibrationRecord]
) -> list[MechanismRun]:
    """Every (run, reference file) whose workload exercises a mechanic, checked per mechanic."""
    out = []
    for run, reference in runs:
        for mechanism in mechanisms_of(run):
            checked = check_run(run, mechanism, records, reference)
            if checked is not None:
                out.append(checked)
    return out


__all__ = [
    "FIGURES",
    "LEFT_OUT_WORDS",
    "LONG_CONTEXT_TOKENS",
    "MechanismLevel",
    "MechanismRun",
    "check_mechanisms",
    "check_run",
    "left_out_shape",
    "mechanisms_of",
]
