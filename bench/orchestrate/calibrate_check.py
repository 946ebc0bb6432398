"""`bench calibrate --check ID`: re-measure a few ladder levels of a stored calibration and say
in one line whether it still holds (exit 0) or not (exit 1).

Bench compares measurements with measurements: each re-measured level's TPOT p50 and TTFT p50
against the same level of the record (same mix, same concurrency), within a tolerance. The
record's plan is re-run with its first mix only, at most three of its ladder levels (lowest,
middle, highest) and no settled levels: a few minutes, one engine load.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from bench.core.calibration import CalibrationLevel, CalibrationPlan, CalibrationRecord
from bench.core.errors import UserError
from bench.core.strict import Strict
from bench.orchestrate.calibrate import Launch, ProgressCallback, run_calibration

DEFAULT_TOLERANCE = 0.2
"""A level holds when its re-measured medians are within 20% of the stored ones: wider than the
run-to-run spread of a quiet GPU, narrower than what a changed batch limit or release does."""
CHECK_LEVELS = 3


class LevelCheck(Strict):
    """One re-measured figure against the stored level."""

    level: float
    metric: Literal["tpot_ms_p50", "ttft_ms_p50"]
    stored: float
    measured: float
    ratio: float = Field(description="measured / stored")
    within: bool


class CalibrationCheck(Strict):
    """The verdict: does the stored calibration still hold on this machine?"""

    calibration_id: str
    holds: bool
    tolerance: float
    checks: list[LevelCheck] = Field(default_factory=list)
    run_ids: list[str] = Field(default_factory=list)
    verdict: str = Field(description="One line.")


def check_plan(
    record: CalibrationRecord, engine_args: dict[str, Any], budget_s: float
) -> CalibrationPlan:
    """The record's plan cut to its first mix, up to three ladder levels, no settled levels."""
    if record.plan is None:
        raise UserError(
            f"calibration {record.calibration_id} keeps no plan (derived from stored runs, or "
            "written before records kept one): nothing to re-measure; run `bench calibrate` to "
            "make one that can be checked"
        )
    plan = record.plan
    ladder = sorted(plan.ladder)
    picked = sorted({ladder[0], ladder[len(ladder) // 2], ladder[-1]})[:CHECK_LEVELS]
    return plan.model_copy(
        update={
            "mixes": plan.mixes[:1],
            "ladder": picked,
            "settled_probes": 0,
            "engine_args": {**plan.engine_args, **engine_args},
            "budget_s": min(plan.budget_s, budget_s),
        }
    )


def _p50(level: CalibrationLevel, metric: str) -> float | None:
    figures = level.tpot_ms if metric == "tpot_ms_p50" else level.ttft_ms
    return figures.p50 if figures is not None and figures.p50 > 0 else None


def compare(
    record: CalibrationRecord, measured: CalibrationRecord, tolerance: float
) -> CalibrationCheck:
    """Each re-measured ladder level against the stored level of the same mix and concurrency."""
    checks: list[LevelCheck] = []
    bound = math.log1p(tolerance)
    for new in measured.levels:
        stored = next(
            (
                old
                for old in record.levels
                if old.kind == "ladder"
                and old.level == new.level
                and old.prompt_tokens == new.prompt_tokens
                and old.output_tokens == new.output_tokens
            ),
            None,
        )
        if stored is None:
            continue
        for metric in ("tpot_ms_p50", "ttft_ms_p50"):
            before, after = _p50(stored, metric), _p50(new, metric)
            if before is None or after is None:
                continue
            ratio = after / before
            checks.append(
                LevelCheck(
                    level=new.level,
                    metric=metric,  # type: ignore[arg-type]
                    stored=before,
                    measured=after,
                    ratio=ratio,
                    within=abs(math.log(ratio)) <= bound,
                )
            )
    if not checks:
        raise UserError(
            f"calibration {record.calibration_id}: no re-measured level matched a stored one"
        )
    holds = all(c.within for c in checks)
    ratios = [c.ratio for c in checks]
    if holds:
        verdict = (
            f"calibration {record.calibration_id} holds: {len(checks)} figures of "
            f"{len({c.level for c in checks})} levels within {tolerance:.0%} of the stored ones "
            f"(x{min(ratios):.2f} to x{max(ratios):.2f})"
        )
    else:
        off = ", ".join(
            f"c{c.level:g} {c.metric.removesuffix('_ms_p50').upper()} p50 x{c.ratio:.2f}"
            for c in checks
            if not c.within
        )
        verdict = (
            f"calibration {record.calibration_id} no longer holds: {off} (tolerance "
            f"{tolerance:.0%}); run `bench calibrate` again"
        )
    return CalibrationCheck(
        calibration_id=record.calibration_id,
        holds=holds,
        tolerance=tolerance,
        checks=checks,
        run_ids=measured.run_ids,
        verdict=verdict,
    )


def run_check(
    record: CalibrationRecord,
    launch: Launch,
    store: Any = None,
    on_progress: ProgressCallback | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    engine_args: dict[str, Any] | None = None,
    budget_s: float = 300.0,
) -> CalibrationCheck:
    """Re-measure (`check_plan`) and compare."""
    plan = check_plan(record, engine_args or {}, budget_s)
    measured = run_calibration(plan, launch, store=store, on_progress=on_progress)
    return compare(record, measured, tolerance)


__all__ = [
    "DEFAULT_TOLERANCE",
    "CalibrationCheck",
    "LevelCheck",
    "check_plan",
    "compare",
    "run_check",
]
