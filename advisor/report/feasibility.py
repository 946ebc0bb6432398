"""The report's feasibility estimate (fit, floors, what would make it fit) and each generate run's
distance to the batch-1 decode floor (weight bytes / memory bandwidth)."""

from __future__ import annotations

from advisor.decide.recommend import Report as AdvisorReport
from advisor.report.display import flatten, readable
from advisor.report.model import Estimate, FloorDistance
from advisor.sizing.estimate import Estimate as AdvisorEstimate
from advisor.workload.gpus import find_gpu
from bench.core.metric_catalog import metric as catalogue_metric
from bench.core.schema import RunResult

ESTIMATE_NOTE_FIELDS = ("notes", "suggestions")


def estimate_section(estimate: AdvisorEstimate) -> Estimate:
    """The advisor's feasibility estimate (fit, floors, what would make it fit)."""
    shown = estimate.model_dump(mode="json", exclude=set(ESTIMATE_NOTE_FIELDS))
    return Estimate(
        available=True,
        fits=estimate.fits,
        decode_floor_ms=estimate.decode_floor_ms_per_token,
        prefill_floor_ms=estimate.prefill_floor_ms,
        items=readable(flatten(shown)),
        notes=[*estimate.notes, *estimate.suggestions],
    )


def primary_estimate(answer: AdvisorReport) -> Estimate:
    """The first stage with a model (the one a decode floor is about), else the first stage."""
    stages = answer.stages
    if not stages:
        return Estimate(available=False, absent_reason="the advisor made no feasibility estimate")
    with_model = [stage for stage in stages if stage.estimate.model is not None]
    return estimate_section((with_model or stages)[0].estimate)


def _datasheet_bandwidth_tb_s(run: RunResult) -> tuple[float | None, str]:
    gpu_name = run.environment.primary_gpu_name if run.environment else None
    if run.config.device == "cpu" or not gpu_name:
        return None, "ran on the CPU: no GPU memory-bandwidth floor applies"
    spec = find_gpu(gpu_name)
    if spec is None:
        return None, f"memory bandwidth of {gpu_name!r} unknown (not in the GPU catalogue)"
    return spec.memory_bandwidth_tb_s, f"{spec.name} datasheet bandwidth"


def floor_distance(
    run: RunResult, estimate: Estimate, profile_models: set[str] | frozenset[str] = frozenset()
) -> FloorDistance:
    """Measured TPOT p50 vs the batch-1 decode floor (weight bytes / memory bandwidth), for a
    generate run (a forward run generates no tokens: the report leaves it out of this table)."""
    measured = catalogue_metric("tpot_ms_p50").read(run.summary)
    floor_ms: float | None = None
    note = ""
    bandwidth, why = _datasheet_bandwidth_tb_s(run)
    on_gpu = bandwidth is not None or "unknown" in why
    if bandwidth and run.model and run.model.weight_bytes:
        floor_ms = run.model.weight_bytes / (bandwidth * 1e12) * 1e3
        note = f"floor = {run.model.weight_bytes / 1e9:.3g} GB weights / {why}"
    elif on_gpu and estimate.decode_floor_ms and run.config.model in profile_models:
        # Only a GPU run of the profile's model compares with the estimate's GPU floor.
        floor_ms = estimate.decode_floor_ms
        note = f"floor from the feasibility estimate (the profile's model and GPU); {why}"
    else:
        note = why
    if measured is None:
        note = (note + "; " if note else "") + "no TPOT measured (one-token outputs or no success)"
    ratio = measured / floor_ms if measured and floor_ms else None
    return FloorDistance(
        framework=run.config.backend,
        run_id=run.run_id,
        measured_tpot_p50_ms=measured,
        decode_floor_ms=floor_ms,
        ratio_to_floor=ratio,
        percent_of_floor=100.0 / ratio if ratio else None,
        note=note,
    )
