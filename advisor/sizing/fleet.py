"""One fleet answer: every viable configuration of a framework for a stage's peak, each with its
GPU count, interval, cost, quality note and the basis of its capacity, and the cheapest that
meets the SLO within the quality tolerance chosen.

A configuration is a unit (tensor-parallel degree, one replica), a precision (the profile's:
its dtype and any pre-quantised scheme such as AWQ; FP8 weights, with and without an FP8 KV
cache, on GPUs with FP8 tensor cores), the engine's prefix caching where it has one, and for
long prompts the chunked-prefill token budget (`max_num_batched_tokens`). Its capacity comes, in
order, from a matching measured capacity search (yours, else shipped) or the serving model's
prediction (calibrated on runs of the engine on this GPU type, else the uncalibrated defaults);
fleet = ceil(peak x (1 + headroom) / capacity) x GPUs per unit (advisor/sizing/capacity.py).

The choice: fewest GPUs, then lowest monthly cost, then a measured basis over a prediction, then
the profile's own precision (a precision unvetted for quality, or a prediction whose expected
error is over 100%, only after every other), then the smaller unit (replicas over tensor
parallelism). Where the first alternative's GPU count lies within the chosen configuration's
interval, the two are a tie within the prediction's error, and the answer says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field

from advisor.sizing.calibration_fit import CalibrationBasis, RecordFit, RecordSet
from advisor.sizing.capacity import Capacity, EstimatedCapacity, fleet_for_stage
from advisor.sizing.configurations import Deployment, deployment_formats, supports
from advisor.sizing.deployments import precision_words
from advisor.sizing.engine_model.prefix import caches_prefixes
from advisor.sizing.estimate import TP_DEGREES
from advisor.sizing.mechanics import LONG_CONTEXT_TOKENS
from advisor.sizing.serving_model import (
    CapacityPrediction,
    engine_family,
    predict_stage_capacity,
    weight_scheme,
)
from advisor.workload.architectures import architecture_for
from advisor.workload.gpus import GPUS
from advisor.workload.profile import StageProfile
from advisor.workload.quality import beyond_tolerance, quality_cell, stage_quality
from bench.core.config import ParallelismConfig, PrecisionConfig
from bench.core.strict import Strict

BasisSource = Literal["yours", "shipped", "calibrated", "uncalibrated"]
BASIS_RANK: dict[str, int] = {"yours": 0, "shipped": 1, "calibrated": 2, "uncalibrated": 3}
LONG_PROMPT_TOKENS = 4096
"""From this mean prompt on, the chunked-prefill budget is a configuration axis."""
TOKEN_BUDGETS = (2048, 8192)
"""max_num_batched_tokens tried for long prompts: vLLM's serving default and a larger chunk
(fewer steps per long prefill, longer decode stalls while it runs)."""
LAYOUTS_TRIED = 2
"""Tensor-parallel degrees tried per precision: the smallest that holds the model and the next
(a larger degree costs GPUs a replica of the smaller one would serve with)."""
PUBLISHED_FP8_RECOVERY = (
    "published: FP8 (dynamic W8A8) Llama-3.1-8B/70B-Instruct keep 99.7% of the bf16 score on "
    "OpenLLM v1 (Neural Magic model cards, huggingface.co/neuralmagic/"
    "Meta-Llama-3.1-8B-Instruct-FP8-dynamic); not measured on this model"
)


class CapacityBasis(Strict):
    """Where a configuration's capacity comes from, and how far it can be trusted."""

    source: BasisSource
    run_id: str | None = Field(None, description="The measured capacity search.")
    reference: str | None = Field(None, description="Its data/reference file (shipped).")
    settled: bool | None = Field(None, description="A search with settled probes.")
    calibration: str | None = Field(None, description="What the prediction was fitted on.")
    low_rps: float | None = None
    high_rps: float | None = None
    expected_error: float | None = Field(
        None, description="The prediction's median capacity error where it was validated."
    )
    error_words: str = Field("", description="What the expected error was measured on.")

    @property
    def measured(self) -> bool:
        return self.source in ("yours", "shipped")

    def words(self) -> str:
        """`your capacity search (run r1)`, `predicted (calibrated on 7 runs of vllm on H200),
        median error 12% on ...`."""
        if self.source == "yours":
            return f"your capacity search (run {self.run_id})"
        if self.source == "shipped":
            where = f"run {self.run_id}" + (f", {self.reference}" if self.reference else "")
            return f"this project's published capacity search ({where})"
        text = f"predicted ({self.calibration})" if self.calibration else "predicted"
        if self.error_words:
            text += f"; {self.error_words}"
        return text


class FleetOption(Strict):
    """One configuration's fleet for the stage's peak."""

    framework: str
    label: str = Field(description="Framework, precision, layout and engine settings, in words.")
    parallelism: ParallelismConfig = Field(description="One unit: TP degree, one replica.")
    precision: PrecisionConfig
    weights: str = Field(description="The weight and KV formats a step reads, in words.")
    engine_args: dict[str, int | float] = Field(
        default_factory=dict, description="Engine limits this configuration sets."
    )
    weight_format: Literal["int8", "fp8"] | None = Field(
        None,
        description="A forward stage's INT8 or FP8 W8A8 weights and activations (also its "
        "precision.quantization); None = the precision's own formats.",
    )
    prefix_caching: bool = False
    capacity: Capacity
    basis: CapacityBasis
    quality: str | None = Field(None, description="Measured or published quality at it.")
    departures: int = Field(0, description="How many of weights/KV differ from the profile's.")
    unvetted: bool = Field(
        False,
        description="A quantised precision whose accuracy on the model is neither measured nor "
        "published: offered as an alternative, never chosen over a vetted one.",
    )
    samples_per_request: int | None = Field(None, description="A forward stage's samples.")
    samples_per_s_per_gpu: float | None = Field(None, description="A forward stage's capacity.")
    p99_bound_ms: float | None = Field(None, description="A forward batcher's p99 bound.")

    @property
    def gpus(self) -> int:
        return self.capacity.gpus_needed

    @property
    def uninformative(self) -> bool:
        """A prediction whose expected error is over 100% (a calibration the model cannot fit:
        runs faster than the GPU's measured ceilings, or of another shape): it cannot tell one
        GPU count from twice it, so it is shown, never chosen."""
        error = self.basis.expected_error
        return not self.basis.measured and error is not None and error > 1.0

    def order(self) -> tuple:
        cost = self.capacity.monthly_cost if self.capacity.monthly_cost is not None else 0.0
        # At equal cost: a measurement over a prediction, the profile's own precision, then
        # replicas over tensor parallelism (smaller units: simpler, and a failure takes less).
        return (
            self.unvetted,
            self.uninformative,
            self.gpus,
            cost,
            BASIS_RANK[self.basis.source],
            self.departures,
            self.parallelism.tensor_parallel_size,
        )

    def key(self) -> tuple:
        """The configuration, whatever its basis."""
        return (
            self.framework,
            self.parallelism.tensor_parallel_size,
            self.precision.quantization,
            self.precision.kv_cache_dtype,
            self.weight_format,
        )

    def precision_words(self) -> str:
        """The precision as the alternatives group it: a forward stage's `int8`/`fp8`."""
        return self.weight_format or self.precision.label()

    def line(self, gpu: str) -> str:
        """One line: `vllm, bfloat16 + fp8 weights, TP=1: 2 x H200, $5,825/month (predicted)`."""
        cost = (
            f"${self.capacity.monthly_cost:,.0f}/month"
            if self.capacity.monthly_cost is not None
            else "cost not known"
        )
        return (
            f"{self.label}: {self.capacity.count_words(gpu)}, {cost} "
            f"({'measured' if self.basis.measured else 'predicted'})"
        )


class FleetAnswer(Strict):
    """The fleet for the stage's peak: the chosen configuration, the next ones, and a tie."""

    chosen: FleetOption | None = None
    alternatives: list[FleetOption] = Field(default_factory=list)
    tie: str | None = Field(None, description="Why the first two cannot be told apart.")
    excluded: list[str] = Field(default_factory=list, description="Configurations left out.")
    notes: list[str] = Field(default_factory=list)


def _departures(stage: StageProfile, precision: PrecisionConfig) -> int:
    wants_fp8 = (stage.precision.quantization or "").lower() == "fp8"
    return int((precision.quantization == "fp8") != wants_fp8) + int(
        (precision.kv_cache_dtype == "fp8") != (stage.precision.kv_cache_dtype == "fp8")
    )


def candidate_precisions(stage: StageProfile) -> list[PrecisionConfig]:
    """The profile's precision, then FP8 weights (and FP8 weights + KV) where the GPU has FP8
    tensor cores and the profile keeps 16-bit weights (a 4-bit or INT8 checkpoint is smaller
    than FP8 already)."""
    asked = stage.precision.run_precision()
    out = [asked]
    gpu = GPUS.get(stage.gpu.type or "")
    scheme = (stage.precision.quantization or "").lower()
    if gpu is not None and gpu.fp8 and scheme in ("", "fp8"):
        for kv in ("auto", "fp8"):
            option = asked.model_copy(update={"quantization": "fp8", "kv_cache_dtype": kv})
            if option not in out:
                out.append(option)
    return out


def _quality(stage: StageProfile, precision: PrecisionConfig) -> tuple[str | None, str | None]:
    """(quality note, why excluded): the stage's measured quality where given, else the
    published FP8 recovery for FP8."""
    measured = stage_quality(stage.quality_result)
    if measured is not None:
        reason = beyond_tolerance(measured, precision, stage.max_quality_loss_pct)
        return quality_cell(measured, precision), reason
    if precision.quantization == "fp8":
        return PUBLISHED_FP8_RECOVERY, None
    return None, None


def _layouts(stage: StageProfile, framework: str) -> list[int]:
    architecture, _ = architecture_for(stage.model)
    heads = (architecture.kv_heads or architecture.attention_heads) if architecture else None
    return [
        tp
        for tp in TP_DEGREES
        if not (heads and heads % tp)
        and supports(
            Deployment(framework=framework, parallelism=ParallelismConfig(tensor_parallel_size=tp))
        )
        is None
    ]


def mechanism_notes(stage: StageProfile) -> list[str]:
    """What the stage asks of the engine model beyond plain dense serving, each with what the
    shipped GPU runs say of it (advisor/sizing/mechanism_validation.py: the median error of the
    checks) or that no measurement has checked it yet: prefix reuse's GPU speed-up,
    mixture-of-experts routing, long context under load."""
    from advisor.sizing.mechanism_validation import shipped_evidence

    asked = []
    if stage.declares_shared_prefixes():
        asked.append(("prefix caching", "prefix reuse's GPU speed-up"))
    architecture, _ = architecture_for(stage.model)
    if architecture is not None and getattr(architecture, "is_moe", False):
        asked.append(("mixture-of-experts", "mixture-of-experts routing"))
    if stage.prompt_tokens.mean >= LONG_CONTEXT_TOKENS:
        asked.append(("long context", "long context under load"))
    if not asked:
        return []
    found = shipped_evidence()
    out = []
    for mechanism, words in asked:
        checked = found.get(mechanism)
        out.append(
            f"its {checked.words()}"
            if checked is not None
            else f"its {words} not yet checked against a measurement"
        )
    return out


def _basis(
    prediction: CapacityPrediction,
    record: RecordFit | CalibrationBasis | None = None,
    stage: StageProfile | None = None,
) -> CapacityBasis:
    """Which calibration sized the prediction: a `bench calibrate` record (named by its id),
    the serving model's fit on stored runs, or none (saying so, with the command); each with
    what the shipped GPU runs checked of the mechanics the stage asks for (`mechanism_notes`)."""
    notes = mechanism_notes(stage) if stage is not None else []
    if isinstance(record, RecordFit):
        basis = record.basis
        return CapacityBasis(
            source="calibrated",
            calibration=f"{basis.source}: record {basis.calibration_id}, {basis.engine} on "
            f"{basis.device_type}, {basis.levels} levels ({basis.settled_levels} settled)"
            + (f"; {prediction.prompt_extrapolated}" if prediction.prompt_extrapolated else ""),
            low_rps=prediction.low_rps or None,
            high_rps=prediction.high_rps or None,
            error_words="; ".join(
                [
                    "the interval is the record's leave-one-level-out step error; its capacity "
                    "error on a search the record did not contain is in docs/capacity-model.md "
                    f'("On a GPU the model was never fitted on", record {basis.calibration_id})'
                    if basis.source == "shipped"
                    else "the interval is the record's leave-one-level-out step error; its "
                    "capacity error is measured by `python -m bench calibrate --check`",
                    *notes,
                ]
            ),
        )
    if prediction.calibrated:
        calibration = (
            f"calibrated on {len(prediction.calibration_runs)} run(s) of "
            f"{prediction.framework} on {prediction.gpu}"
        )
        if prediction.calibration_other_precisions:
            calibration += f" at other precisions ({prediction.precision_class} not measured there)"
        if prediction.prompt_extrapolated:
            calibration += f"; {prediction.prompt_extrapolated}"
        error_words = (
            f"median capacity error {prediction.expected_error:.0%} in the serving model's "
            "validation (docs/capacity-model.md)"
            if prediction.expected_error is not None
            else ""
        )
        expected = prediction.expected_error
    else:
        calibration = f"uncalibrated: no run of {prediction.framework} on {prediction.gpu}"
        command = (
            record.command
            if isinstance(record, CalibrationBasis) and record.command
            else "python -m bench calibrate"
        )
        error_words = (
            f"no calibration of {prediction.framework} on {prediction.gpu}: its error there is "
            "not measured (how far the defaults miss on a GPU they were never fitted on: "
            'docs/capacity-model.md, "On a GPU the model was never fitted on"); '
            f"run `{command}` on one to calibrate it"
        )
        expected = None
    if notes:
        error_words += ("; " if error_words else "") + "; ".join(notes)
    return CapacityBasis(
        source="calibrated" if prediction.calibrated else "uncalibrated",
        calibration=calibration,
        low_rps=prediction.low_rps or None,
        high_rps=prediction.high_rps or None,
        expected_error=expected,
        error_words=error_words,
    )


SHORTLIST = 3
"""Configurations predicted in full (every request stream) after a one-stream screen."""


def _record(
    stage: StageProfile, deployment: Deployment, records: RecordSet | None
) -> RecordFit | CalibrationBasis | None:
    """The `bench calibrate` record's fit for the stage's GPU and the deployment, or the basis
    saying there is none; None when no records were given."""
    return records.for_stage(stage, deployment) if records is not None else None


def _prediction_key(stage: StageProfile, deployment: Deployment, args: dict, runs) -> tuple:
    return (
        stage.model_dump_json(),
        deployment.model_dump_json(),
        tuple(sorted(args.items())),
        tuple(sorted((run.run_id, run.status.value) for run in runs)),
    )


_PREDICTIONS: dict[tuple, CapacityPrediction | None] = {}
PREDICTION_CACHE_SIZE = 256


def _predict(
    stage: StageProfile,
    deployment: Deployment,
    runs: Sequence,
    args: dict,
    seeds: int | None,
    record: RecordFit | CalibrationBasis | None = None,
) -> CapacityPrediction | None:
    """`predict_stage_capacity` (with a `bench calibrate` record's factors when one matches),
    remembered: the app and the report ask again for one stage."""
    fit = record if isinstance(record, RecordFit) else None
    record_id = fit.basis.calibration_id if fit is not None else None
    key = (*_prediction_key(stage, deployment, args, runs), seeds, record_id)
    if key not in _PREDICTIONS:
        if len(_PREDICTIONS) >= PREDICTION_CACHE_SIZE:
            _PREDICTIONS.pop(next(iter(_PREDICTIONS)))
        extra = {} if seeds is None else {"seeds": seeds, "interval": False}
        _PREDICTIONS[key] = predict_stage_capacity(
            stage,
            deployment,
            runs,
            engine_args=args,
            calibration=fit.calibration if fit is not None else None,
            **extra,
        )
    return _PREDICTIONS[key]


def anchor_ratio(
    stage: StageProfile, framework: str, measured: FleetOption, runs: Sequence
) -> float | None:
    """measured capacity / the serving model's prediction of the same configuration for this
    stage: how far the model is off on this very workload, engine and GPU type (None where it
    cannot predict the configuration)."""
    deployment = Deployment(
        framework=framework, parallelism=measured.parallelism, precision=measured.precision
    )
    prediction = _predict(stage, deployment, runs, dict(measured.engine_args), seeds=None)
    if prediction is None or prediction.max_rate_rps <= 0:
        return None
    return measured.capacity.max_rate_rps / prediction.max_rate_rps


def anchored(
    option: FleetOption, stage: StageProfile, ratio: float, measured: FleetOption
) -> FleetOption:
    """A predicted configuration scaled by the anchor ratio (its capacity and interval), said
    in its basis: the model's error on the measured configuration of this workload carried to
    the configurations nobody measured."""
    capacity = option.capacity
    scaled_rate = capacity.max_rate_rps * ratio
    low = capacity.low_rate_rps * ratio if capacity.low_rate_rps else None
    high = capacity.high_rate_rps * ratio if capacity.high_rate_rps else None
    words = (
        f"scaled x{ratio:.2f}: the model's prediction of the measured {measured.label} "
        f"({measured.basis.words()}) against its search of this workload"
    )
    sized = fleet_for_stage(
        stage,
        [],
        [
            EstimatedCapacity(
                label=option.label,
                max_rate_rps=scaled_rate,
                low_rate_rps=low,
                high_rate_rps=high,
                expected_error=capacity.expected_error,
                gpus_per_replica=capacity.gpus_per_replica,
                binding_constraint=capacity.binding_constraint,
                notes=[*capacity.notes, words],
            )
        ],
    ).estimates[0]
    basis = option.basis.model_copy(
        update={
            "low_rps": low,
            "high_rps": high,
            "error_words": "; ".join(w for w in (words, option.basis.error_words) if w),
        }
    )
    return option.model_copy(update={"capacity": sized, "basis": basis})


def predicted_options(
    stage: StageProfile,
    framework: str,
    runs: Sequence,
    skip: set[tuple] | None = None,
    records: RecordSet | None = None,
) -> tuple[list[FleetOption], list[str]]:
    """The serving model's fleet for every viable configuration of a continuous-batching
    framework not in `skip` (configurations measured already); (options, why others are out).
    Every configuration is screened on one request stream; the best few (fewest GPUs) are
    predicted on every stream, with the interval."""
    peak = stage.peak_request_rate_rps or stage.request_rate_rps
    if stage.kind != "generate" or stage.gpu.type is None or peak is None:
        return [], []
    skip = skip or set()
    excluded: list[str] = []
    long_prompt = stage.prompt_tokens.mean >= LONG_PROMPT_TOKENS
    budgets = TOKEN_BUDGETS if long_prompt else (None,)
    caching = caches_prefixes(engine_family(framework))
    screened: list[tuple[float, Deployment, dict[str, int], str | None]] = []
    for precision in candidate_precisions(stage):
        quality, reason = _quality(stage, precision)
        if reason is not None:
            excluded.append(f"{framework}, {precision.label()}: {reason}")
            continue
        tried = 0
        for tp in _layouts(stage, framework):
            if tried >= LAYOUTS_TRIED:
                break
            deployment = Deployment(
                framework=framework,
                parallelism=ParallelismConfig(tensor_parallel_size=tp),
                precision=precision,
            )
            best: tuple[CapacityPrediction, dict[str, int]] | None = None
            record = _record(stage, deployment, records)
            for budget in budgets:
                args = {"max_num_batched_tokens": budget} if budget else {}
                prediction = _predict(stage, deployment, runs, args, seeds=1, record=record)
                if prediction is None:
                    break
                if best is None or prediction.max_rate_rps > best[0].max_rate_rps:
                    best = (prediction, args)
            if best is None:
                break  # the engine model does not cover this framework or model
            prediction, args = best
            if prediction.max_rate_rps <= 0:
                excluded.append(
                    f"{framework}, {precision.label()}, TP={tp}: "
                    + ("; ".join(prediction.notes[:1]) or str(prediction.binding_constraint))
                )
                continue  # too little KV at this degree: try the next
            tried += 1
            if (framework, tp, precision.quantization, precision.kv_cache_dtype, None) in skip:
                continue
            per_gpu = prediction.max_rate_rps / tp
            screened.append((per_gpu, deployment, args, quality))
    screened.sort(key=lambda item: -item[0])
    shortlist = screened[:SHORTLIST]
    # The profile's own precision is always predicted in full, at each layout screened (one
    # stream is noisy: 25.8 vs 26.1 req/s per GPU put TP=2 before TP=1 on the code-completion
    # example, whose full prediction then needs 1 GPU at TP=1 and 2 at TP=2).
    asked = [item for item in screened if _departures(stage, item[1].precision) == 0]
    shortlist += [item for item in asked if item not in shortlist]
    options = [
        option
        for _, deployment, args, quality in shortlist
        if (
            option := _full_option(
                stage, deployment, args, quality, runs, caching, _record(stage, deployment, records)
            )
        )
        is not None
    ]
    return options, excluded


def _full_option(
    stage: StageProfile,
    deployment: Deployment,
    args: dict[str, int],
    quality: str | None,
    runs: Sequence,
    caching: bool,
    record: RecordFit | CalibrationBasis | None = None,
) -> FleetOption | None:
    """One configuration predicted on every request stream and sized for the peak."""
    prediction = _predict(stage, deployment, runs, args, seeds=None, record=record)
    if prediction is None or prediction.max_rate_rps <= 0:
        return None
    tp = deployment.parallelism.tensor_parallel_size
    precision = deployment.precision
    scheme = weight_scheme(stage, deployment)  # the profile's pre-quantised checkpoint
    label = f"{deployment.framework}, {precision_words(deployment, scheme)}, TP={tp}"
    if args:
        label += f", max_num_batched_tokens={args['max_num_batched_tokens']}"
    basis = _basis(prediction, record, stage)
    sized = fleet_for_stage(
        stage,
        [],
        [
            EstimatedCapacity(
                label=label,
                max_rate_rps=prediction.max_rate_rps,
                low_rate_rps=prediction.low_rps or None,
                high_rate_rps=prediction.high_rps or None,
                expected_error=basis.expected_error,
                gpus_per_replica=tp,
                binding_constraint=prediction.binding_constraint,
                notes=list(prediction.notes),
            )
        ],
    ).estimates[0]
    return FleetOption(
        framework=deployment.framework,
        label=label,
        parallelism=deployment.parallelism,
        precision=precision,
        weights=deployment_formats(deployment, weight_scheme(stage, deployment)).label(),
        engine_args=args,
        prefix_caching=caching and stage.declares_shared_prefixes(),
        capacity=sized,
        basis=basis,
        quality=quality,
        departures=_departures(stage, precision),
    )


def choose(options: Sequence[FleetOption], gpu: str) -> FleetAnswer:
    """The cheapest option (module docstring), and as alternatives the best of each other weight
    and KV format, the profile's own among them; a tie where the first alternative's GPU count
    lies within the chosen one's interval (or the reverse)."""
    ranked = sorted(options, key=FleetOption.order)
    if not ranked:
        return FleetAnswer()
    chosen = ranked[0]
    # One line per other format a step reads (a second layout or basis of the chosen format
    # tells the reader little); the profile's own precision is always one of the two shown.
    seen = {chosen.weights}
    alternatives: list[FleetOption] = []
    for option in ranked[1:]:
        if option.weights not in seen:
            seen.add(option.weights)
            alternatives.append(option)
    asked = next((o for o in alternatives if o.departures == 0), None)
    if asked is not None and asked not in alternatives[:2]:
        alternatives = [alternatives[0], asked]
    tie = None
    # An unvetted precision is behind for its accuracy, not its count: no tie to measure.
    if alternatives and alternatives[0].unvetted == chosen.unvetted:
        runner = alternatives[0]
        chosen_high = chosen.capacity.gpus_range[1] if chosen.capacity.gpus_range else chosen.gpus
        runner_low = runner.capacity.gpus_range[0] if runner.capacity.gpus_range else runner.gpus
        if runner.gpus <= chosen_high or runner_low <= chosen.gpus:
            tie = (
                f"{chosen.label} ({chosen.capacity.count_words(gpu)}) and {runner.label} "
                f"({runner.capacity.count_words(gpu)}) cannot be told apart by these figures "
                "(a prediction's interval or an unsettled search's upper bound reaches the "
                "other's count): measure both before committing"
            )
    return FleetAnswer(chosen=chosen, alternatives=alternatives[:2], tie=tie)


__all__ = [
    "CapacityBasis",
    "FleetAnswer",
    "FleetOption",
    "anchor_ratio",
    "anchored",
    "candidate_precisions",
    "choose",
    "predicted_options",
]
