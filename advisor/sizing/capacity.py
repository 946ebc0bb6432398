"""Fleet size and cost under the SLO: a measured capacity -> GPUs for the peak, $/month, $/Mtok.

Reads the bench's typed `CapacityReport` (bench/run/load/capacity.py) and the profile's peak
traffic, headroom and GPU price (else the reference price of data/gpu_prices.yaml). For one
candidate configuration:

- replicas_needed = ceil(peak_rps x (1 + headroom) / max_rate_rps), where max_rate_rps is what
  one measured unit (the run's tensor_parallel_size x replicas GPUs) sustains within the SLO;
- gpus_needed = replicas_needed x gpus_per_replica (GPUs of that measured unit);
- monthly_cost = gpus_needed x price_per_gpu_hour x 730 h (an always-on fleet);
- cost_per_million_output_tokens = hourly fleet cost / output tokens served per hour at the
  peak (peak_rps x mean output tokens per request x 3600) x 1e6: the price of a token when the
  fleet runs at the load it was sized for, headroom included.

A capacity from an estimate (no measurement) goes through the same arithmetic with
source "estimate" and is kept apart from the measured ones (`FleetSizing`).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from advisor.workload.profile import StageProfile
from bench.core.errors import UserError
from bench.core.pattern_reports import CapacityReport
from bench.core.schema import RunResult
from bench.core.strict import Strict, describe_validation_error

HOURS_PER_MONTH = 730
"""Hours in the average month (8760 / 12), the unit cloud providers bill a month in."""
DEFAULT_PRICES_PATH = Path(__file__).resolve().parents[2] / "data" / "gpu_prices.yaml"


# --------------------------------------------------------------------------- price catalogue


class GpuPrice(Strict):
    """One reference on-demand price: what, how much, and where and when it was published."""

    gpu: str = Field(description="GPU type as advisor/workload/gpus.py names it.")
    usd_per_gpu_hour: float = Field(gt=0)
    provider: str
    product: str
    source_url: str = Field(description="The provider's pricing page.")
    page_date: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="When that page was read.")
    transcribed_from: str | None = Field(
        None, description="Where the transcription used here lives (the page was not fetched)."
    )
    note: str | None = None

    def label(self) -> str:
        """`$3.99/GPU-h, Lambda 8x NVIDIA H100 SXM ... (lambda.ai/instances, 2026-09-20)`."""
        return (
            f"${self.usd_per_gpu_hour:g}/GPU-h, {self.provider} {self.product} "
            f"({self.source_url}, read {self.page_date})"
        )


class PriceCatalogue(Strict):
    prices: list[GpuPrice]

    def for_gpu(self, gpu_type: str) -> GpuPrice | None:
        return next((price for price in self.prices if price.gpu == gpu_type), None)


@lru_cache(maxsize=4)
def load_price_catalogue(path: Path = DEFAULT_PRICES_PATH) -> PriceCatalogue:
    """The reference prices (a UserError names the file and the bad entry)."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read GPU price catalogue {path}: {exc}") from None
    try:
        return PriceCatalogue.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"{path}: {describe_validation_error(exc, PriceCatalogue)}") from None


# --------------------------------------------------------------------------- the answer


class Capacity(Strict):
    """Capacity, fleet and cost of one candidate configuration for the profile's peak."""

    source: Literal["measured", "estimate"]
    label: str | None = Field(
        None, description="The configuration: framework, precision, parallelism."
    )
    run_id: str | None = Field(None, description="The capacity run measured (None: estimate).")
    max_rate_rps: float = Field(gt=0, description="Requests/s one measured unit sustains.")
    binding_constraint: str | None = Field(
        None, description="The SLO constraint that failed first above max_rate_rps."
    )
    converged: bool = Field(description="The capacity search converged (estimates: True).")
    gpus_per_replica: int = Field(gt=0, description="GPUs of the measured unit.")
    replicas_needed: int = Field(ge=1)
    gpus_needed: int = Field(ge=1)
    peak_request_rate_rps: float = Field(gt=0)
    headroom_fraction: float = Field(ge=0)
    gpu_type: str | None = None
    price_per_gpu_hour: float | None = Field(None, gt=0)
    price_source: str | None = Field(
        None, description="'profile' or the reference price's provider, page and date."
    )
    monthly_cost: float | None = Field(None, description="USD per month (730 h), all GPUs.")
    mean_output_tokens: float | None = Field(
        None, description="Output tokens per request behind the cost per token."
    )
    cost_per_million_output_tokens: float | None = Field(
        None, description="USD per million output tokens with the fleet at the peak load."
    )
    low_rate_rps: float | None = Field(
        None, gt=0, description="A predicted capacity's interval, low end (None: measured)."
    )
    high_rate_rps: float | None = Field(None, gt=0, description="The interval's high end.")
    gpus_range: tuple[int, int] | None = Field(
        None, description="GPUs at the interval's high and low capacity (fewest, most)."
    )
    expected_error: float | None = Field(
        None, description="A prediction's median relative error in its validation table."
    )
    reference: str | None = Field(
        None, description="The data/reference file of a published capacity search."
    )
    dtype_note: str | None = Field(
        None,
        description="Why a search at the other 16-bit dtype stands for the stage's (the "
        "measured pair, advisor.sizing.speed_class).",
    )
    notes: list[str] = Field(default_factory=list)

    def count_words(self, gpu: str, times: str = "x", dash: str = "-") -> str:
        """`3 x H200`, or for a prediction `about 2 x H100-SXM (2-4)` (its interval's GPUs)."""
        count = f"{self.gpus_needed} {times} {gpu}"
        if self.source != "estimate":
            return count
        spread = self.gpus_range
        return f"about {count}" + (
            f" ({spread[0]}{dash}{spread[1]})" if spread and spread[0] != spread[1] else ""
        )


class FleetSizing(Strict):
    """Every candidate's capacity for one profile stage; estimates apart from measurements."""

    peak_request_rate_rps: float
    headroom_fraction: float
    gpu_type: str | None = None
    measured: list[Capacity] = Field(default_factory=list)
    estimates: list[Capacity] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="Runs left out, and why.")


class EstimatedCapacity(Strict):
    """A capacity from a model, not a measurement (advisor/sizing/serving_model.py's prediction)."""

    label: str
    max_rate_rps: float = Field(gt=0)
    low_rate_rps: float | None = Field(None, gt=0, description="The prediction's interval.")
    high_rate_rps: float | None = Field(None, gt=0)
    expected_error: float | None = None
    gpus_per_replica: int = Field(1, ge=1)
    binding_constraint: str | None = None
    notes: list[str] = Field(default_factory=list)


def _positive(name: str, value: float | None) -> None:
    if value is not None and not (isinstance(value, int | float) and value > 0):
        raise UserError(f"{name} must be > 0, got {value}")
    if value is not None and not math.isfinite(value):
        raise UserError(f"{name} must be a finite number, got {value}")


def choose_price(
    gpu_type: str | None, price_per_gpu_hour: float | None, catalogue: PriceCatalogue | None = None
) -> tuple[float | None, str | None]:
    """(price, where it came from): the profile's price first, else the reference one."""
    _positive("the GPU price per hour", price_per_gpu_hour)
    if price_per_gpu_hour is not None:
        return float(price_per_gpu_hour), "profile"
    if gpu_type is None:
        return None, None
    reference = (catalogue or load_price_catalogue()).for_gpu(gpu_type)
    if reference is None:
        return None, None
    return reference.usd_per_gpu_hour, f"reference: {reference.label()}"


def size_fleet(
    max_rate_rps: float,
    *,
    source: Literal["measured", "estimate"],
    peak_request_rate_rps: float,
    gpus_per_replica: int,
    headroom_fraction: float = 0.2,
    binding_constraint: str | None = None,
    converged: bool = True,
    gpu_type: str | None = None,
    price_per_gpu_hour: float | None = None,
    mean_output_tokens: float | None = None,
    catalogue: PriceCatalogue | None = None,
) -> Capacity:
    """The module docstring's arithmetic for one capacity; bad inputs are one-line UserErrors.

    Without a price (none given, none in the catalogue for `gpu_type`) the GPU count is still
    given and the costs are None, with a note saying why.
    """
    _positive("max_rate_rps", max_rate_rps)
    _positive("the peak request rate", peak_request_rate_rps)
    _positive("mean output tokens", mean_output_tokens)
    if not isinstance(gpus_per_replica, int) or gpus_per_replica < 1:
        raise UserError(f"GPUs per replica must be a whole number >= 1, got {gpus_per_replica}")
    if not (isinstance(headroom_fraction, int | float) and 0 <= headroom_fraction <= 10):
        raise UserError(f"the headroom fraction must be in [0, 10], got {headroom_fraction}")
    price, price_source = choose_price(gpu_type, price_per_gpu_hour, catalogue)
    needed_rps = peak_request_rate_rps * (1 + headroom_fraction)
    # A hair of tolerance so 40 / 20 is 2 replicas, not 3 from a rounding error.
    replicas = max(1, math.ceil(needed_rps / max_rate_rps - 1e-9))
    gpus = replicas * gpus_per_replica
    notes: list[str] = []
    monthly = cost_per_million = None
    if price is None:
        notes.append(
            "no GPU price: none in the profile and no reference price for "
            + (gpu_type or "an unset GPU type")
        )
    else:
        monthly = gpus * price * HOURS_PER_MONTH
        if mean_output_tokens:
            tokens_per_hour = peak_request_rate_rps * mean_output_tokens * 3600
            cost_per_million = gpus * price / tokens_per_hour * 1e6
        else:
            notes.append("no output length: cost per token not computed")
    if not converged:
        notes.append("the capacity search did not converge: the GPU count is not settled")
    if source == "estimate":
        notes.append("estimate: no capacity measured for this configuration on this GPU type")
    return Capacity(
        source=source,
        max_rate_rps=max_rate_rps,
        binding_constraint=binding_constraint,
        converged=converged,
        gpus_per_replica=gpus_per_replica,
        replicas_needed=replicas,
        gpus_needed=gpus,
        peak_request_rate_rps=peak_request_rate_rps,
        headroom_fraction=headroom_fraction,
        gpu_type=gpu_type,
        price_per_gpu_hour=price,
        price_source=price_source,
        monthly_cost=monthly,
        mean_output_tokens=mean_output_tokens,
        cost_per_million_output_tokens=cost_per_million,
        notes=notes,
    )


def capacity_from_report(
    report: CapacityReport,
    *,
    peak_request_rate_rps: float,
    gpus_per_replica: int,
    headroom_fraction: float = 0.2,
    gpu_type: str | None = None,
    price_per_gpu_hour: float | None = None,
    mean_output_tokens: float | None = None,
    catalogue: PriceCatalogue | None = None,
) -> Capacity:
    """A measured capacity: the search's max_rate_rps and binding constraint, sized.

    Output tokens per request default to what the boundary probe produced (its output token
    throughput / request throughput). A report without a feasible rate is a UserError.
    """
    if report.max_rate_rps is None:
        raise UserError(
            f"the capacity search found no feasible rate ({report.result}): "
            + ("; ".join(report.binding_reasons) or "no rate meets the SLO")
        )
    if mean_output_tokens is None and report.output_throughput_tok_s_at_max:
        boundary = next((p for p in report.probes if p.phase == report.boundary_phase), None)
        if boundary is not None and boundary.achieved_rps > 0:
            mean_output_tokens = boundary.output_throughput_tok_s / boundary.achieved_rps
    capacity = size_fleet(
        report.max_rate_rps,
        source="measured",
        peak_request_rate_rps=peak_request_rate_rps,
        gpus_per_replica=gpus_per_replica,
        headroom_fraction=headroom_fraction,
        binding_constraint=report.binding_constraint,
        converged=report.converged and report.result == "found",
        gpu_type=gpu_type,
        price_per_gpu_hour=price_per_gpu_hour,
        mean_output_tokens=mean_output_tokens,
        catalogue=catalogue,
    )
    if report.result == "ceiling_reached":
        capacity.notes.append(
            "the SLO held up to the search ceiling: max_rate_rps is a lower bound"
        )
    return capacity


def capacity_from_run(
    run: RunResult,
    *,
    peak_request_rate_rps: float,
    headroom_fraction: float = 0.2,
    gpu_type: str | None = None,
    price_per_gpu_hour: float | None = None,
    catalogue: PriceCatalogue | None = None,
) -> Capacity:
    """`capacity_from_report` of a stored capacity run; its GPUs per unit are the run's
    tensor_parallel_size x replicas (what the search measured together)."""
    if not run.config.load.capacity_search:
        raise UserError(
            f"run {run.run_id} is a {run.config.load.pattern} run, not a capacity search"
        )
    report = run.pattern_report
    if not isinstance(report, CapacityReport):
        raise UserError(f"run {run.run_id}: its capacity search did not finish (no report)")
    return capacity_from_report(
        report,
        peak_request_rate_rps=peak_request_rate_rps,
        gpus_per_replica=run.config.parallelism.gpus_needed,
        headroom_fraction=headroom_fraction,
        gpu_type=gpu_type or run.config.gpu_type,
        price_per_gpu_hour=price_per_gpu_hour,
        catalogue=catalogue,
    )


def run_label(run: RunResult) -> str:
    """`vllm, bfloat16 + fp8 weights, TP=1`: what a capacity row is about."""
    config = run.config
    return f"{config.backend}, {config.precision.label()}, {config.parallelism.label()}"


def run_gpu_type(run: RunResult) -> str | None:
    """The catalogue GPU type a run ran on: its config's gpu_type, else its fingerprint."""
    from advisor.workload.gpus import find_gpu

    name = run.config.gpu_type or (run.environment.primary_gpu_name if run.environment else None)
    spec = find_gpu(name) if name else None
    return spec.name if spec is not None else None


def fleet_for_stage(
    stage: StageProfile,
    runs: list[RunResult],
    estimates: list[EstimatedCapacity] | None = None,
    catalogue: PriceCatalogue | None = None,
) -> FleetSizing:
    """GPUs and cost of each candidate for a profile stage's peak (the lead's entry point).

    `runs` are stored capacity runs (others are ignored); one on another GPU type than the
    stage's `gpu.type`, or whose search found no feasible rate, is left out with a note.
    Peak = stage.peak_request_rate_rps, else stage.request_rate_rps; neither is a UserError.
    """
    peak = stage.peak_request_rate_rps or stage.request_rate_rps
    if peak is None:
        raise UserError(
            "the profile gives no peak traffic: set peak_request_rate_rps (requests/s) to size "
            "the fleet"
        )
    gpu_type = stage.gpu.type
    sizing = FleetSizing(
        peak_request_rate_rps=peak, headroom_fraction=stage.headroom_fraction, gpu_type=gpu_type
    )
    for run in runs:
        if not run.config.load.capacity_search:
            continue
        ran_on = run_gpu_type(run)
        if gpu_type is not None and ran_on != gpu_type:
            sizing.notes.append(
                f"run {run.run_id} ({run_label(run)}) measured on {ran_on or 'no known GPU'}, "
                f"not {gpu_type}: left out"
            )
            continue
        report = run.pattern_report
        if not isinstance(report, CapacityReport):
            sizing.notes.append(f"run {run.run_id} ({run_label(run)}): the search did not finish")
            continue
        if report.max_rate_rps is None:
            sizing.notes.append(
                f"run {run.run_id} ({run_label(run)}): no rate meets the SLO ({report.result})"
            )
            continue
        capacity = capacity_from_run(
            run,
            peak_request_rate_rps=peak,
            headroom_fraction=stage.headroom_fraction,
            gpu_type=gpu_type or ran_on,
            price_per_gpu_hour=stage.gpu.price_per_hour,
            catalogue=catalogue,
        )
        sizing.measured.append(
            capacity.model_copy(update={"label": run_label(run), "run_id": run.run_id})
        )
    for estimate in estimates or []:
        capacity = _size_estimate(stage, estimate, peak, gpu_type, catalogue)
        sizing.estimates.append(capacity)
    return sizing


def _size_estimate(
    stage: StageProfile,
    estimate: EstimatedCapacity,
    peak: float,
    gpu_type: str | None,
    catalogue: PriceCatalogue | None,
) -> Capacity:
    """A predicted capacity sized like a measured one, plus the GPUs at its interval's ends."""

    def sized(rate: float) -> Capacity:
        return size_fleet(
            rate,
            source="estimate",
            peak_request_rate_rps=peak,
            gpus_per_replica=estimate.gpus_per_replica,
            headroom_fraction=stage.headroom_fraction,
            binding_constraint=estimate.binding_constraint,
            gpu_type=gpu_type,
            price_per_gpu_hour=stage.gpu.price_per_hour,
            mean_output_tokens=float(stage.output_tokens.mean)
            if stage.kind == "generate"
            else None,
            catalogue=catalogue,
        )

    capacity = sized(estimate.max_rate_rps)
    gpus_range = None
    if estimate.low_rate_rps is not None and estimate.high_rate_rps is not None:
        gpus_range = (
            sized(estimate.high_rate_rps).gpus_needed,
            sized(estimate.low_rate_rps).gpus_needed,
        )
    return capacity.model_copy(
        update={
            "label": estimate.label,
            "low_rate_rps": estimate.low_rate_rps,
            "high_rate_rps": estimate.high_rate_rps,
            "gpus_range": gpus_range,
            "expected_error": estimate.expected_error,
            "notes": [*capacity.notes, *estimate.notes],
        }
    )


__all__ = [
    "HOURS_PER_MONTH",
    "Capacity",
    "EstimatedCapacity",
    "FleetSizing",
    "GpuPrice",
    "PriceCatalogue",
    "capacity_from_report",
    "capacity_from_run",
    "choose_price",
    "fleet_for_stage",
    "load_price_catalogue",
    "size_fleet",
]
