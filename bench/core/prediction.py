"""What the advisor predicted for a run it planned, carried by the run's config and stored with
it, and the drift check: a measured figure outside the predicted interval.

Bench never computes a prediction (the engine model lives in the advisor, which bench does not
import); it stores the one the advisor attached (`RunConfig.prediction`) and compares it with
what the run measured, so `bench runs`, the Results page and a report can flag drift.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bench.core.strict import Strict


class PredictedFigure(Strict):
    """One predicted figure with its interval (ms)."""

    value: float = Field(gt=0)
    low: float = Field(gt=0)
    high: float = Field(gt=0)


class RunPrediction(Strict):
    """The advisor's prediction of a run's median TTFT and TPOT, and the calibration behind it."""

    calibration_id: str | None = Field(description="The calibration record; none = defaults.")
    source: Literal["yours", "shipped", "none"]
    device_type: str
    ttft_ms_p50: PredictedFigure | None = None
    tpot_ms_p50: PredictedFigure | None = None


class DriftCheck(Strict):
    """One predicted figure against what the run measured."""

    metric: Literal["ttft_ms_p50", "tpot_ms_p50"]
    predicted: PredictedFigure
    measured: float
    ratio: float = Field(description="measured / predicted")
    outside: bool = Field(description="The measured value lies outside the interval: drift.")


def drift_checks(prediction: RunPrediction | None, ttft_p50: float | None, tpot_p50: float | None):
    """The checks of a prediction against a run's measured medians (none without a prediction
    or a measured figure)."""
    checks: list[DriftCheck] = []
    if prediction is None:
        return checks
    for metric, figure, measured in (
        ("ttft_ms_p50", prediction.ttft_ms_p50, ttft_p50),
        ("tpot_ms_p50", prediction.tpot_ms_p50, tpot_p50),
    ):
        if figure is None or measured is None:
            continue
        checks.append(
            DriftCheck(
                metric=metric,  # type: ignore[arg-type]
                predicted=figure,
                measured=measured,
                ratio=measured / figure.value,
                outside=not figure.low <= measured <= figure.high,
            )
        )
    return checks


def drift_words(checks: list[DriftCheck]) -> str | None:
    """`drift: TPOT p50 x0.55 (interval x0.93-1.08)` for the checks outside; None if none."""
    outside = [c for c in checks if c.outside]
    if not outside:
        return None
    parts = [
        f"{c.metric.removesuffix('_ms_p50').upper()} p50 x{c.ratio:.2f} (interval "
        f"x{c.predicted.low / c.predicted.value:.2f}-{c.predicted.high / c.predicted.value:.2f})"
        for c in outside
    ]
    return "drift: " + ", ".join(parts)


__all__ = ["DriftCheck", "PredictedFigure", "RunPrediction", "drift_checks", "drift_words"]
