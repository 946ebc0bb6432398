"""The engine model's mechanics checked on a GPU, level by level: prefix caching, mixture-of-
experts and long context under load.

Each shipped GPU run that exercises one of them (advisor/sizing/mechanics.py: a shared prefix or
conversations, caching on or off; a MoE model; long prompts) is simulated at every measured
closed-loop level, as `serving_validation` simulates a level, under these bases:
- `uncalibrated`: the default efficiencies;
- `this GPU`: the GPU's own shipped `bench calibrate` record (none: the row has no such column);
- `left out`: the record's factors (or the defaults) with the mechanic removed from the engine
  model: no prefix cache (every prompt prefilled whole), a MoE model read as dense (every
  parameter in every step's FLOPs and bytes), or attention left out of the prefill (the GEMM-only
  floor). The distance between it and the measurement is what the mechanic is worth to the
  prediction;
- `per-sequence reads` (a cached prefix common to the batch): its KV read once per sequence.
These runs are not in any calibration fit (serving_calibration.calibrate leaves them out), so
every prediction here is out of sample. Errors are (predicted - measured) / measured of the
medians (TTFT p50, TPOT p50) and of the tails (TTFT p99, TPOT p99).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path

from pydantic import Field

from advisor.sizing.calibration_fit import fit_record, record_matches
from advisor.sizing.mechanics import Mechanism, mechanisms_of
from advisor.sizing.serving_calibration import RunShape, run_shape, steady_phases
from advisor.sizing.serving_model import Factors
from advisor.sizing.serving_validation import latency_figures, simulated_level
from advisor.workload.architectures import architecture_for
from bench.core.calibration import CalibrationRecord
from bench.core.config import GenerateWorkload
from bench.core.schema import RunResult
from bench.core.strict import Strict

PER_SEQUENCE = "per-sequence reads"
"""A cached common prefix's KV read once per sequence instead of once per step (the record's
factors): what the engine model said before it knew vLLM's cascade attention."""
FIGURES = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99")

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
        count = workload.prefix.count
        return (
            f"{'one shared prefix' if count == 1 else f'{count} shared prefixes'} of "
            f"{workload.prefix.tokens.mean:,.0f} + {prompt:,.0f} own tokens, {output:,.0f} out"
        )
    if workload.conversation is not None:
        return (
            f"{workload.conversation.turns.mean:g}-turn conversations, first prompt "
            f"{prompt:,.0f}, {workload.conversation.user_tokens.mean:,.0f} per new message, "
            f"{output:,.0f} out"
        )
    return f"{prompt:,.0f}/{output:,.0f} tokens"


def matching_record(
    records: Sequence[CalibrationRecord], item: RunShape
) -> CalibrationRecord | None:
    """The newest `bench calibrate` record of the run's engine, GPU and precision class (the
    rule every prediction uses: calibration_fit.record_matches)."""
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
    record = matching_record(records, item)
    fit = fit_record(record, "shipped") if record is not None else None
    factors: dict[str, Factors] = {"uncalibrated": Factors()}
    if fit is not None:
        factors["this GPU"] = fit.calibration.factors
    left_out_factors = factors.get("this GPU", factors["uncalibrated"])
    cascade = (
        dataclasses.replace(item, shape=dataclasses.replace(item.shape, common_prefix_tokens=0.0))
        if mechanism == "prefix caching" and item.shape.common_prefix_tokens > 0
        else None
    )
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
        if cascade is not None:
            predicted[PER_SEQUENCE] = latency_figures(
                simulated_level(cascade, left_out_factors, phase, over, level)
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
        bases=[*factors, *([PER_SEQUENCE] if cascade is not None else []), "left out"],
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


class MechanismEvidence(Strict):
    """What the shipped GPU runs say about one mechanic's prediction: the basis a sizing would
    use (the GPU's record where one exists), its median |error| over every level of every run."""

    mechanism: Mechanism
    gpu: str
    runs: int
    basis: str
    tpot_p50_error: float | None = Field(description="Median |error| over the levels.")
    ttft_p50_error: float | None
    tpot_p50_worst: float | None = Field(description="Largest |error| over the levels.")
    ttft_p50_worst: float | None

    def words(self) -> str:
        errors = "; ".join(
            f"{name} p50 off by {100 * median:.0f}% at the median level, {100 * worst:.0f}% at "
            "worst"
            for name, median, worst in (
                ("TPOT", self.tpot_p50_error, self.tpot_p50_worst),
                ("TTFT", self.ttft_p50_error, self.ttft_p50_worst),
            )
            if median is not None and worst is not None
        )
        return (
            f"{self.mechanism} checked on {self.gpu} ({self.runs} run(s), {self.basis}: "
            f'{errors}; docs/capacity-model.md, "The mechanics on a GPU")'
        )


def evidence(checks: Sequence[MechanismRun]) -> dict[str, MechanismEvidence]:
    """Per mechanic, over its runs (a prefix-caching check counts only runs with caching on):
    the median |error| of the GPU's record where every run has one, else the defaults'."""
    out: dict[str, MechanismEvidence] = {}
    for mechanism in ("prefix caching", "mixture-of-experts", "long context"):
        runs = [
            c
            for c in checks
            if c.mechanism == mechanism and (mechanism != "prefix caching" or c.caching)
        ]
        if not runs:
            continue
        basis = "this GPU" if all(c.record for c in runs) else "uncalibrated"
        figures = {}
        for figure in ("tpot_p50", "ttft_p50"):
            found = [
                abs(e)
                for c in runs
                for lvl in c.levels
                if (e := lvl.error(basis, figure)) is not None
            ]
            figures[figure] = statistics.median(found) if found else None
            figures[f"{figure}_worst"] = max(found) if found else None
        out[mechanism] = MechanismEvidence(
            mechanism=mechanism,
            gpu=", ".join(sorted({c.gpu for c in runs})),
            runs=len(runs),
            basis="its bench calibrate record" if basis == "this GPU" else "default efficiencies",
            tpot_p50_error=figures["tpot_p50"],
            ttft_p50_error=figures["ttft_p50"],
            tpot_p50_worst=figures["tpot_p50_worst"],
            ttft_p50_worst=figures["ttft_p50_worst"],
        )
    return out


def shipped_evidence(reference_dir: Path | None = None) -> dict[str, MechanismEvidence]:
    """`evidence` of the runs shipped in data/reference (or `reference_dir`), computed once per
    folder."""
    from advisor.sizing import measured

    folder = reference_dir if reference_dir is not None else measured.DEFAULT_REFERENCE_DIR
    return _evidence_of(str(Path(folder).resolve()))


@lru_cache(maxsize=4)
def _evidence_of(folder: str) -> dict[str, MechanismEvidence]:
    from advisor.sizing.calibration_fit import shipped_records
    from advisor.sizing.measured import measured_reference_runs

    runs = measured_reference_runs(folder)
    pairs = [(run, f"data/reference/{name}") for name, found in runs.items() for run in found]
    return evidence(check_mechanisms(pairs, shipped_records(Path(folder))))


__all__ = [
    "FIGURES",
    "LEFT_OUT_WORDS",
    "PER_SEQUENCE",
    "MechanismEvidence",
    "MechanismLevel",
    "MechanismRun",
    "check_mechanisms",
    "check_run",
    "evidence",
    "left_out_shape",
    "matching_record",
    "shipped_evidence",
]
