"""The forward model against shipped measurements of one GPU: each batch ladder fitted (which
shape, its worst error on its own points), and each dynamic-batching capacity search beside the
rate the ladder-fitted model says the same batcher limits hold under the same SLO
(`forward_model.boundary_rate`). docs/forward-serving.md shows these rows;
tests/advisor/test_forward_h100.py recomputes them from data/reference."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from advisor.sizing.forward_model import boundary_rate, calibrate, floor_model, ladder_points
from advisor.workload.architectures import ARCHITECTURES
from advisor.workload.gpus import GpuSpec
from bench.core.schema import RunResult
from bench.core.strict import Strict


class LadderFit(Strict):
    """One engine's ladder of one model: the fitted shape and its worst error."""

    engine: str
    model: str
    batches: list[int]
    overlapped: bool
    overhead_ms: float
    efficiency: float
    worst_error: float = Field(ge=0)


class SearchCheck(Strict):
    """One capacity search through the batcher beside the model's rate for it."""

    run_id: str
    engine: str
    model: str
    result: str = Field(description="The search's outcome (found, not_converged, ...).")
    measured_rps: float | None = Field(description="Its highest passing rate; None if none.")
    first_infeasible_rps: float | None
    predicted_rps: float | None = Field(description="None where no ladder of the engine exists.")

    @property
    def error(self) -> float | None:
        """(predicted - measured) / measured, where both exist."""
        if not self.measured_rps or self.predicted_rps is None:
            return None
        return (self.predicted_rps - self.measured_rps) / self.measured_rps


def _shape(run: RunResult) -> tuple[int | None, int | None]:
    workload = run.config.workload
    sequence = workload.sequence_length.mean if workload.sequence_length is not None else None
    return sequence, workload.image_size


def _fit(runs: Sequence[RunResult], gpu: GpuSpec, engine: str, model: str):
    ladder = [r for r in runs if r.config.backend == engine and r.config.model == model]
    points = ladder_points(ladder)
    if not points:
        return None, points
    sequence, image = _shape(ladder[0])
    floor = floor_model(
        ARCHITECTURES[model], gpu, ladder[0].config.precision.dtype, sequence, image
    )
    return (calibrate(floor, points) if floor is not None else None), points


def ladder_fits(runs: Sequence[RunResult], gpu: GpuSpec) -> list[LadderFit]:
    """Every (engine, model) ladder in `runs`, fitted on `gpu`'s floor."""
    fits = []
    for engine, model in sorted({(r.config.backend, r.config.model) for r in runs}):
        fitted, points = _fit(runs, gpu, engine, model)
        if fitted is None or fitted.fit_error is None:
            continue
        fits.append(
            LadderFit(
                engine=engine,
                model=model,
                batches=[batch for batch, _, _ in points],
                overlapped=fitted.overlapped,
                overhead_ms=fitted.overhead_ms,
                efficiency=fitted.efficiency,
                worst_error=fitted.fit_error,
            )
        )
    return fits


def search_checks(runs: Sequence[RunResult], gpu: GpuSpec) -> list[SearchCheck]:
    """Every batcher capacity search in `runs` beside the ladder-fitted model's rate."""
    checks = []
    for run in runs:
        args = run.config.engine_args
        report = run.pattern_report
        limit = run.config.slo.e2e_ms
        if not run.config.load.capacity_search or report is None or limit is None:
            continue
        if "max_queue_delay_ms" not in args:
            continue
        fitted, _ = _fit(runs, gpu, run.config.backend, run.config.model)
        predicted = (
            boundary_rate(
                fitted, int(args["max_batch_size"]), float(args["max_queue_delay_ms"]), limit
            )
            if fitted is not None and fitted.fit_error is not None
            else None
        )
        checks.append(
            SearchCheck(
                run_id=run.run_id,
                engine=run.config.backend,
                model=run.config.model,
                result=str(report.result),
                measured_rps=report.max_rate_rps,
                first_infeasible_rps=report.first_infeasible_rps,
                predicted_rps=predicted,
            )
        )
    return sorted(checks, key=lambda check: (check.model, check.engine))


__all__ = ["LadderFit", "SearchCheck", "ladder_fits", "search_checks"]
