"""The forward model against shipped measurements of one GPU: each batch ladder fitted (which
shape, its worst error on its own points), and each dynamic-batching capacity search beside the
rate the ladder-fitted model says the same batcher limits hold under the same SLO
(`forward_model.boundary_rate`). docs/forward-serving.md shows these rows;
tests/advisor/test_forward_h100.py recomputes them from data/reference."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from advisor.sizing.forward_model import (
    BatchTimeModel,
    boundary_rate,
    calibrate,
    floor_model,
    ladder_points,
)
from advisor.workload.architectures import ARCHITECTURES
from advisor.workload.gpus import GpuSpec
from bench.core.schema import RunResult
from bench.core.strict import Strict


class LadderFit(Strict):
    """One engine's ladder of one model at one weight format: the fitted shape, its worst error."""

    engine: str
    model: str
    weight_format: str | None = Field(None, description="int8/fp8 W8A8; None = 16-bit.")
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
    weight_format: str | None = Field(None, description="int8/fp8 W8A8; None = 16-bit.")
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


def _floor(run: RunResult, gpu: GpuSpec, weight_format: str | None) -> BatchTimeModel | None:
    """The floor of `run`'s model and shape on `gpu` at `weight_format` (its dtype's if None)."""
    sequence, image = _shape(run)
    dtype = weight_format or run.config.precision.dtype
    return floor_model(ARCHITECTURES[run.config.model], gpu, dtype, sequence, image)


def _fit(
    runs: Sequence[RunResult],
    gpu: GpuSpec,
    engine: str,
    model: str,
    weight_format: str | None = None,
):
    ladder = [
        r
        for r in runs
        if r.config.backend == engine
        and r.config.model == model
        and r.config.precision.quantization == weight_format
    ]
    points = ladder_points(ladder)
    if not points:
        return None, points
    floor = _floor(ladder[0], gpu, weight_format)
    return (calibrate(floor, points) if floor is not None else None), points


def _ladder_keys(runs: Sequence[RunResult]) -> list[tuple[str, str, str | None]]:
    keys = {(r.config.backend, r.config.model, r.config.precision.quantization) for r in runs}
    return sorted(keys, key=lambda key: (key[0], key[1], key[2] or ""))


def ladder_fits(runs: Sequence[RunResult], gpu: GpuSpec) -> list[LadderFit]:
    """Every (engine, model, weight format) ladder in `runs`, fitted on `gpu`'s floor."""
    fits = []
    for engine, model, weight_format in _ladder_keys(runs):
        fitted, points = _fit(runs, gpu, engine, model, weight_format)
        if fitted is None or fitted.fit_error is None:
            continue
        fits.append(
            LadderFit(
                engine=engine,
                model=model,
                weight_format=weight_format,
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
        weight_format = run.config.precision.quantization
        fitted, _ = _fit(runs, gpu, run.config.backend, run.config.model, weight_format)
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
                weight_format=weight_format,
                result=str(report.result),
                measured_rps=report.max_rate_rps,
                first_infeasible_rps=report.first_infeasible_rps,
                predicted_rps=predicted,
            )
        )
    return sorted(checks, key=lambda check: (check.model, check.engine, check.weight_format or ""))


class FormatRung(Strict):
    """One batch size of an 8-bit ladder beside the 16-bit one measured with it."""

    batch: int
    ms_16bit: float = Field(gt=0, description="The 16-bit batch time measured (ms).")
    ms_8bit: float = Field(gt=0, description="The 8-bit batch time measured (ms).")
    transferred_ms: float = Field(
        gt=0,
        description="What the sizing says without the 8-bit ladder: the 16-bit ladder's "
        "overhead and efficiency on the 8-bit floor (forward_sizing's transfer).",
    )

    @property
    def speedup(self) -> float:
        """16-bit time over 8-bit time: above 1, the 8-bit format is faster."""
        return self.ms_16bit / self.ms_8bit

    @property
    def transfer_error(self) -> float:
        return (self.transferred_ms - self.ms_8bit) / self.ms_8bit


class FormatCheck(Strict):
    """An engine's INT8 or FP8 W8A8 ladder of one model against its 16-bit ladder on one GPU:
    what the format buys per batch size, and how far the unmeasured transfer is off."""

    engine: str
    model: str
    weight_format: str
    rungs: list[FormatRung]

    @property
    def worst_transfer_error(self) -> float:
        return max(abs(rung.transfer_error) for rung in self.rungs)


def format_checks(runs: Sequence[RunResult], gpu: GpuSpec) -> list[FormatCheck]:
    """Every 8-bit ladder in `runs` with a 16-bit ladder of the same engine and model."""
    checks = []
    for engine, model, weight_format in _ladder_keys(runs):
        if weight_format is None:
            continue
        base, base_points = _fit(runs, gpu, engine, model)
        _, points = _fit(runs, gpu, engine, model, weight_format)
        ladder = [r for r in runs if r.config.backend == engine and r.config.model == model]
        floor = _floor(ladder[0], gpu, weight_format) if ladder else None
        if base is None or base.fit_error is None or floor is None:
            continue
        transferred = base.carried_to(floor, "transfer")
        measured_16 = {batch: ms for batch, ms, _ in base_points}
        rungs = [
            FormatRung(
                batch=batch,
                ms_16bit=measured_16[batch],
                ms_8bit=ms,
                transferred_ms=transferred.batch_ms(batch),
            )
            for batch, ms, _ in points
            if batch in measured_16
        ]
        if rungs:
            checks.append(
                FormatCheck(engine=engine, model=model, weight_format=weight_format, rungs=rungs)
            )
    return checks


__all__ = [
    "FormatCheck",
    "FormatRung",
    "LadderFit",
    "SearchCheck",
    "format_checks",
    "ladder_fits",
    "search_checks",
]
