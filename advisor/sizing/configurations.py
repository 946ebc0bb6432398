"""Configuration search: how to lay one model over the GPUs (tensor parallelism, replicas, FP8).

For a generate stage, every configuration the GPU budget allows is enumerated — tensor-parallel
degrees that divide the GPU count (and the model's KV heads), replicas = GPUs / TP, weights at the
profile's dtype or FP8, KV cache at the dtype or FP8 — and each is estimated per GPU:

- weights per GPU = parameters x weight bytes / TP; KV per GPU = KV bytes per token / TP x
  context x the sequences one replica holds; fit by the engine model's one memory rule
  (advisor/sizing/engine_model/replica.py: 90% of the GPU, 1.5 GiB runtime per GPU). With a
  peak rate, an engine that holds the weights and some of the sequences in flight fits, sized
  at what its KV pool holds: the fleet answer's replicas take the rest;
- one decode step of a replica at batch b (the floor, no overlap assumed between reading and
  computing): read (weights + b x mean in-flight context x KV per token) / TP at the memory
  bandwidth, plus compute 2 x parameters x (b decode tokens + the prefill tokens a closed loop
  admits per step, b x prompt / output) / TP at the dense tensor peak (FP8 weights on a GPU with
  FP8 tensor cores: twice the 16-bit peak; without: weight-only FP8, the 16-bit peak);
- TPOT = the engine shape's step time at b with the serving model's calibrated factors
  (overhead, memory, compute: the one calibration, `advisor.sizing.calibration`, which the fleet
  answer uses too); output tok/s = replicas x b x 1000 / TPOT; tok/s per GPU = that / GPUs;
  tok/s per user = 1000 / TPOT. The floor / TPOT ratio is shown as the efficiency it implies.

The assumed TP efficiencies below stand only until a measurement of that TP degree replaces them.
Configurations that need more GPUs than the profile has are listed only when nothing fits within
the budget at the profile's dtype, or when the fleet answer deploys one, flagged
`within_gpu_budget=False`. The fleet answer's configuration (`deployed`) leads the ranking.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from advisor.sizing.deployments import (
    ConfigurationEstimate,
    Deployment,
    MeasuredLevel,
    Prediction,
    deployment_label,
)
from advisor.sizing.engine_model.facts import ModelFacts, model_facts
from advisor.sizing.engine_model.formats import Formats, formats_for, gemm_peak_tflops
from advisor.sizing.engine_model.prefix import (
    PrefixReuse,
    TrafficShape,
    caches_prefixes,
    prefix_reuse,
)
from advisor.sizing.engine_model.replica import (
    GB,
    GIB,
    RUNTIME_OVERHEAD_GIB_PER_GPU,
    engine_memory_bytes,
    free_after_weights,
    replica_shape,
)
from advisor.sizing.engine_model.replica import kv_bytes_per_token as model_kv_bytes_per_token
from advisor.sizing.engine_model.step import FLOOR, TP_EFFICIENCY_ASSUMED, StepFactors
from advisor.sizing.engine_shape import registered_backend, stage_tensor_parallel
from advisor.sizing.estimate import TP_DEGREES
from advisor.workload.architectures import Architecture, architecture_for
from advisor.workload.gpus import GPUS, GpuSpec
from advisor.workload.profile import Objective, StageProfile
from advisor.workload.quality import beyond_tolerance, quality_cell, quality_note, stage_quality
from advisor.workload.stage_load import stage_load
from bench.core.config import (
    ParallelismConfig,
    PrecisionConfig,
    RunConfig,
)
from bench.core.errors import UserError
from bench.core.metric_catalog import metric as catalogue_metric
from bench.core.strict import Strict

FP8_BYTES = 1.0
_DENSE = ModelFacts(parameters=1, active_parameters=1)
"""A dense stand-in where a model's facts are unknown: every weight read each step."""
DEFAULT_MAX_BATCH = 256
"""vLLM's default max_num_seqs: sequences one engine decodes together when not set."""
PLAN_SIZE = 3
"""Configurations put into the bench plan besides the default one (the most promising few)."""
SMALL_MODEL_FLOOR_MS = 1.0
"""Below this 16-bit weight-read time a step is launch-bound (said in the notes, not modelled)."""
CONCURRENCY_LADDER = (1, 16, 64, 256)
"""Load levels the Pareto chart estimates each configuration at."""
FP8_ACCURACY_NOTE = (
    "FP8 is compared on speed and memory only: accuracy is yours to check — run your evaluation "
    "set (e.g. lm-evaluation-harness with your tasks) against the FP8 and the bf16 endpoint of "
    "the real checkpoint and compare the scores"
)

PREDICTED_TPOT, PREDICTED_OUTPUT = (
    catalogue_metric("tpot_ms_p50"),
    catalogue_metric("output_throughput_tok_s"),
)
"""The two figures the step model predicts; sentences name them `TPOT p50` and `output tok/s`
(the catalogue's label and unit)."""
TPOT_WORDS, OUTPUT_WORDS = PREDICTED_TPOT.label, f"output {PREDICTED_OUTPUT.unit}"


@dataclass(frozen=True)
class ShapeInputs:
    """What the per-step model needs from a stage or a measured run."""

    parameters: int
    architecture: Architecture | None
    gpu: GpuSpec
    bandwidth_tb_s: float
    prompt_tokens: float
    output_tokens: float
    scheme: str | None = None
    """The profile's pre-quantised weight scheme (awq, gptq, int8...), None: none."""
    stage: StageProfile | None = None
    """The stage whose traffic gives the prefix reuse (None: a measured run's plain prompts)."""


def deployment_formats(deployment: Deployment, scheme: str | None = None) -> Formats:
    """The weight and KV formats a deployment reads (engine_model/formats.py)."""
    precision = deployment.precision
    return formats_for(precision.dtype, precision.quantization, precision.kv_cache_dtype, scheme)


def weight_bytes_per_parameter(deployment: Deployment, scheme: str | None = None) -> float:
    return deployment_formats(deployment, scheme).weight_bytes


def kv_bytes_per_token(architecture: Architecture | None, deployment: Deployment) -> float | None:
    """2 (K, V) x layers x KV heads x head dim x KV bytes, for the whole model (all TP ranks)."""
    facts = model_facts(architecture)
    if facts is None:
        return None
    return model_kv_bytes_per_token(facts, deployment_formats(deployment))


def peak_tflops(gpu: GpuSpec, deployment: Deployment, scheme: str | None = None) -> float | None:
    """Dense tensor peak the configuration's GEMMs run at (engine_model/formats.py)."""
    return gemm_peak_tflops(gpu, deployment_formats(deployment, scheme))


def deployment_reuse(inputs: ShapeInputs, deployment: Deployment) -> PrefixReuse:
    """What prefix caching saves for this deployment on the stage's traffic."""
    if inputs.stage is None:
        return PrefixReuse.none()
    return prefix_reuse(TrafficShape.of_stage(inputs.stage), caches_prefixes(deployment.framework))


def step_floor_ms(
    inputs: ShapeInputs, deployment: Deployment, batch: int, factors: StepFactors | None = None
) -> tuple[float, float | None]:
    """(floor of one decode step of one replica at `batch` sequences, KV GB per sequence):
    the engine model's step at the physical floor (engine_model/step.py), in a closed loop
    (b sequences finish every output_tokens steps, so b x uncached prompt / output tokens are
    prefilled per step on average besides the b decoded tokens). With `factors`: the step
    time those calibration factors predict instead of the floor."""
    facts = model_facts(inputs.architecture, inputs.parameters)
    reuse = deployment_reuse(inputs, deployment)
    shape = (
        replica_shape(
            facts,
            deployment_formats(deployment, inputs.scheme),
            inputs.gpu,
            deployment.parallelism.tensor_parallel_size,
            bandwidth_tb_s=inputs.bandwidth_tb_s,
            reuse=reuse,
            prompt_tokens=inputs.prompt_tokens,
        )
        if facts is not None
        else None
    )
    if shape is None:  # no layer sizes or no tensor peak: the weight read alone
        weights = inputs.parameters * weight_bytes_per_parameter(deployment, inputs.scheme)
        tp = deployment.parallelism.tensor_parallel_size
        read = weights / tp / (inputs.bandwidth_tb_s * 1e12) * 1e3
        if factors is not None:
            read = factors.overhead_ms + factors.memory * read
        return read, None
    output = max(inputs.output_tokens, 1)
    uncached = max(inputs.prompt_tokens - shape.cached_prompt_tokens, 1.0)
    prefill = batch * uncached / output
    context = batch * (inputs.prompt_tokens + inputs.output_tokens / 2)
    if factors is not None:  # the serving model's step, as its simulation takes it
        step = shape.step_ms(factors, batch, prefill, context, batch)
    else:  # the floor is pure physics: the assumed TP efficiency is the factors' to apply
        step = shape.step_ms(FLOOR, batch, prefill, context, batch) * shape.tp_efficiency
    per_token = shape.kv_bytes_per_token * deployment.parallelism.tensor_parallel_size
    own = inputs.prompt_tokens + inputs.output_tokens - shape.pooled_prompt_tokens
    return step, per_token * own / GB


def predict(
    inputs: ShapeInputs,
    deployment: Deployment,
    concurrency: int,
    factors: StepFactors,
    max_batch: int = DEFAULT_MAX_BATCH,
) -> Prediction:
    """TPOT and throughput at `concurrency` closed-loop clients spread over the replicas: the
    step time with the calibration's factors."""
    batch = max(1, min(math.ceil(concurrency / deployment.parallelism.replicas), max_batch))
    floor, _ = step_floor_ms(inputs, deployment, batch)
    tpot, _ = step_floor_ms(inputs, deployment, batch, factors)
    throughput = deployment.parallelism.replicas * batch * 1e3 / tpot
    return Prediction(
        concurrency=concurrency,
        batch_per_replica=batch,
        step_floor_ms=floor,
        efficiency=floor / tpot,
        tpot_ms=tpot,
        output_throughput_tok_s=throughput,
        output_throughput_tok_s_per_gpu=throughput / deployment.gpus,
        tok_s_per_user=1e3 / tpot,
    )


def stage_inputs(stage: StageProfile) -> ShapeInputs | None:
    """The per-step model's inputs for a generate stage; None when size or GPU is unknown."""
    if stage.kind != "generate" or stage.gpu.type is None:
        return None
    architecture, _ = architecture_for(stage.model)
    if stage.parameters_b is not None:
        parameters = round(stage.parameters_b * 1e9)
    elif architecture is not None:
        parameters = architecture.parameters
    else:
        return None
    gpu = GPUS[stage.gpu.type]
    return ShapeInputs(
        parameters=parameters,
        architecture=architecture,
        gpu=gpu,
        bandwidth_tb_s=stage.gpu.memory_bandwidth_tb_s or gpu.memory_bandwidth_tb_s,
        prompt_tokens=TrafficShape.of_stage(stage).served_prompt().mean,
        output_tokens=stage.output_tokens.mean,
        scheme=stage.precision.checkpoint_scheme(),
        stage=stage,
    )


def supports(deployment: Deployment) -> str | None:
    """None when the framework's adapter can run the configuration, else its one-line reason."""
    backend = registered_backend(deployment.framework)
    if backend is None:
        if deployment.gpus == 1 and not deployment.precision.uses_fp8:
            return None
        return f"no {deployment.framework} adapter here to say whether it runs this"
    try:
        backend.framework_args({}, deployment.parallelism, deployment.precision)
    except UserError as exc:
        return str(exc)
    return None


def expert_parallelism(framework: str, stage: StageProfile) -> ParallelismConfig:
    """The parallelism of a framework's planned run: one engine over the fewest GPUs that hold
    the model (`stage_tensor_parallel`) when the framework splits an engine over GPUs, else one
    GPU (replicas and other layouts are the configuration search's to weigh)."""
    tp = stage_tensor_parallel(stage)
    parallelism = ParallelismConfig(tensor_parallel_size=tp)
    if tp == 1 or supports(Deployment(framework=framework, parallelism=parallelism)) is not None:
        return ParallelismConfig()
    return parallelism


def candidate_deployments(
    framework: str, stage: StageProfile, architecture: Architecture | None, gpu_budget: int
) -> list[Deployment]:
    """Every TP degree dividing `gpu_budget` (and the KV heads), replicas = budget / TP, weights
    at the dtype or FP8, KV at the dtype or FP8 (FP8 KV only with FP8 weights or alone)."""
    heads = (architecture.kv_heads or architecture.attention_heads) if architecture else None
    dtype = stage.precision.dtype
    out: list[Deployment] = []
    for tp in TP_DEGREES:
        if gpu_budget % tp or (heads and heads % tp):
            continue
        parallelism = ParallelismConfig(tensor_parallel_size=tp, replicas=gpu_budget // tp)
        for quantization, kv in ((None, "auto"), ("fp8", "auto"), ("fp8", "fp8"), (None, "fp8")):
            precision = PrecisionConfig(dtype=dtype, quantization=quantization, kv_cache_dtype=kv)
            out.append(
                Deployment(framework=framework, parallelism=parallelism, precision=precision)
            )
    return out


def estimate_deployment(
    stage: StageProfile,
    inputs: ShapeInputs,
    deployment: Deployment,
    factors: StepFactors,
    efficiency_source: str,
    within_budget: bool = True,
) -> ConfigurationEstimate:
    """Memory per GPU, fit, floors and predictions of one configuration for the stage."""
    tp = deployment.parallelism.tensor_parallel_size
    replicas = deployment.parallelism.replicas
    memory = stage.gpu.memory_gb or inputs.gpu.memory_gb
    weights_gpu = inputs.parameters * weight_bytes_per_parameter(deployment, inputs.scheme) / tp
    load = stage_load(stage)
    concurrency = load.per_engine
    per_replica = math.ceil(concurrency / replicas)
    _, kv_per_sequence = step_floor_ms(inputs, deployment, 1)
    reuse = deployment_reuse(inputs, deployment)
    per_token = kv_bytes_per_token(inputs.architecture, deployment)
    shared_gb = reuse.shared_kv_tokens * per_token / GB if per_token else 0.0
    max_per_replica = None
    if kv_per_sequence:
        free = free_after_weights(weights_gpu, memory) - shared_gb * GB / tp
        max_per_replica = max(0, int(free // (kv_per_sequence * GB / tp)))
    notes: list[str] = []
    # Where the in-flight count is the fleet's (a peak rate, no concurrency of the profile's:
    # StageLoad.replicas_take_the_rest) the fleet answer adds replicas, so an engine
    # that holds the weights and some of the sequences in flight is a configuration (as vLLM
    # runs it: its KV pool bounds the batch, the scheduler queues the rest), sized at what it
    # holds; without one, the profile's sequences must all fit the GPUs it names.
    held = per_replica
    if load.replicas_take_the_rest and max_per_replica and max_per_replica < per_replica:
        held = max_per_replica
        notes.append(
            f"one engine holds {held} of the {per_replica} sequences in flight in its KV cache: "
            "the fleet answer's replicas take the rest"
        )
    kv_gpu = (kv_per_sequence * held + shared_gb) * GB / tp if kv_per_sequence else None
    required = weights_gpu + (kv_gpu or 0.0) + RUNTIME_OVERHEAD_GIB_PER_GPU * GIB
    if reuse.words:
        notes.append(reuse.words)
    if kv_gpu is None:
        notes.append("KV cache not estimated: layer/head sizes unknown for this model")
    if deployment.precision.uses_fp8:
        notes.append(FP8_ACCURACY_NOTE)
        if not inputs.gpu.fp8:
            notes.append(f"{inputs.gpu.name} has no FP8 tensor cores: weight-only FP8 kernels")
    # The plan raises vLLM's max_num_seqs to the concurrency; the KV cache is the real bound.
    max_batch = max(DEFAULT_MAX_BATCH, concurrency)
    if max_per_replica:
        max_batch = min(max_batch, max_per_replica)
    prediction = predict(inputs, deployment, concurrency, factors, max_batch)
    ladder = [
        predict(inputs, deployment, level, factors, max_batch)
        for level in sorted({*CONCURRENCY_LADDER, concurrency})
    ]
    return ConfigurationEstimate(
        deployment=deployment,
        label=deployment_label(deployment, inputs.scheme),
        within_gpu_budget=within_budget,
        weights_gb_per_gpu=weights_gpu / GB,
        kv_cache_gb_per_gpu=kv_gpu / GB if kv_gpu is not None else None,
        required_gb_per_gpu=required / GB,
        memory_per_gpu_gb=memory,
        fits=required <= engine_memory_bytes(memory),
        max_concurrency_per_replica=max_per_replica,
        decode_floor_ms_per_token=weights_gpu
        * (model_facts(inputs.architecture, inputs.parameters) or _DENSE).weight_fraction_read(1)
        / (inputs.bandwidth_tb_s * 1e12)
        * 1e3,
        efficiency=prediction.efficiency,
        efficiency_source=efficiency_source,
        prediction=prediction,
        ladder=ladder,
        notes=notes,
    )


__all__ = [
    "CONCURRENCY_LADDER",
    "FP8_ACCURACY_NOTE",
    "PLAN_SIZE",
    "TP_EFFICIENCY_ASSUMED",
    "ConfigurationEstimate",
    "Deployment",
    "Prediction",
    "ShapeInputs",
    "candidate_deployments",
    "estimate_deployment",
    "plan_runs",
    "predict",
    "same_configuration",
    "search_configurations",
    "stage_inputs",
    "step_floor_ms",
    "supports",
]


class ConfigurationSearch(Strict):
    """The configurations of one framework for a stage, ranked, with the recommended one first."""

    framework: str
    gpu_budget: int
    concurrency: int
    objective: str
    estimates: list[ConfigurationEstimate] = Field(
        default_factory=list, description="Configurations that fit and run, best first."
    )
    excluded: list[str] = Field(
        default_factory=list, description="Enumerated configurations left out, and why."
    )
    recommended: str | None = Field(None, description="Label of the recommended configuration.")
    recommended_basis: Literal["measured", "estimate"] | None = None
    plan: list[str] = Field(
        default_factory=list, description="Labels of the configurations the bench plan runs."
    )
    single_gpu: ConfigurationEstimate | None = Field(
        None,
        description="With several GPUs: one engine on one GPU at the profile's precision, the "
        "reference the multi-GPU configurations are compared with.",
    )
    trade_offs: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    quality_note: str | None = Field(
        None, description="The measured quality deltas, when the stage gives a quality_result."
    )

    def best(self) -> ConfigurationEstimate | None:
        return self.estimates[0] if self.estimates else None


StepLookup = Callable[[Deployment], tuple[StepFactors, str]]
"""A deployment's calibration factors and where they come from (advisor.sizing.calibration)."""
MeasuredLookup = Callable[[Deployment], list[MeasuredLevel]]


def _wants_fp8(stage: StageProfile) -> bool:
    return (stage.precision.quantization or "").lower() == "fp8"


def _departures(stage: StageProfile, deployment: Deployment) -> int:
    """How many of weights and KV cache differ from the profile's precision (0 = as asked)."""
    wants_fp8 = _wants_fp8(stage)
    wants_fp8_kv = stage.precision.kv_cache_dtype == "fp8"
    return int((deployment.precision.quantization == "fp8") != wants_fp8) + int(
        (deployment.precision.kv_cache_dtype == "fp8") != wants_fp8_kv
    )


def _preferred(stage: StageProfile, deployment: Deployment) -> bool:
    """The profile's own precision (FP8 only where the profile asks for it)."""
    return _departures(stage, deployment) == 0


def _speed(estimate: ConfigurationEstimate, stage: StageProfile) -> float:
    """Higher is better on the stage's objective (measured figures win over the estimate)."""
    figures = _figures(estimate, stage_load(stage).per_engine)
    if figures is None:
        return -math.inf
    tpot, throughput, _ = figures
    if stage.objective == Objective.MINIMIZE_LATENCY:
        return -tpot
    if stage.objective == Objective.MINIMIZE_COST_PER_TOKEN:
        return throughput / estimate.deployment.gpus
    return throughput


def _meets_tpot(estimate: ConfigurationEstimate, stage: StageProfile) -> bool:
    limit = stage.slo.tpot_ms
    return limit is None or estimate.prediction is None or estimate.prediction.tpot_ms <= limit


def same_configuration(a: Deployment, b: Deployment) -> bool:
    """One engine configuration, however many replicas: framework, TP degree, dtype, weights,
    KV."""
    return (
        a.framework == b.framework
        and a.precision.dtype == b.precision.dtype
        and a.parallelism.tensor_parallel_size == b.parallelism.tensor_parallel_size
        and a.precision.quantization == b.precision.quantization
        and (a.precision.kv_cache_dtype == "fp8") == (b.precision.kv_cache_dtype == "fp8")
    )


def search_configurations(
    stage: StageProfile,
    framework: str,
    factors: StepLookup,
    measured: MeasuredLookup | None = None,
    deployed: Deployment | None = None,
) -> ConfigurationSearch | None:
    """Enumerate, estimate and rank the configurations of `framework` for a generate stage on
    its GPU budget; None when the stage is not a generate stage with a known GPU and size.

    `deployed` is the fleet answer's configuration (advisor/sizing/fleet.py), the one a
    recommendation deploys: it leads the ranking and is the search's recommended one, so the
    table of layouts never names another (estimated here if the budget's layouts leave it out)."""
    inputs = stage_inputs(stage)
    if inputs is None:
        return None
    architecture = inputs.architecture
    budget = stage.gpu.count
    load = stage_load(stage)
    concurrency = load.per_engine
    search = ConfigurationSearch(
        framework=framework,
        gpu_budget=budget,
        concurrency=concurrency,
        objective=stage.objective.value,
    )
    if load.source != "concurrency":
        search.notes.append(f"configurations compared at {load.rule}")
    weight_read_ms = inputs.parameters * 2 / (inputs.bandwidth_tb_s * 1e12) * 1e3
    if weight_read_ms < SMALL_MODEL_FLOOR_MS:
        search.notes.append(
            f"the batch-1 weight read takes {weight_read_ms:.3f} ms: below about "
            f"{SMALL_MODEL_FLOOR_MS:g} ms a decode step is bound by kernel launches and the "
            "scheduler, which the step model does not include, so its figures for a model this "
            "small overstate the speed"
        )
    fitting: list[ConfigurationEstimate] = []
    quality = stage_quality(stage.quality_result)
    if quality is not None:
        search.quality_note = quality_note(quality, stage.quality_result or "")

    def consider(deployment: Deployment, within_budget: bool) -> None:
        reason = supports(deployment)
        if reason is None and quality is not None:
            reason = beyond_tolerance(quality, deployment.precision, stage.max_quality_loss_pct)
        if reason is not None:
            search.excluded.append(f"{deployment.label()}: {reason}")
            return
        value, source = factors(deployment)
        estimate = estimate_deployment(stage, inputs, deployment, value, source, within_budget)
        if not estimate.fits:
            search.excluded.append(
                f"{estimate.label}: needs {estimate.required_gb_per_gpu:.1f} GB per GPU of "
                f"the {engine_memory_bytes(estimate.memory_per_gpu_gb) / GB:.1f} GB a serving "
                f"engine takes of {estimate.memory_per_gpu_gb:g} GiB"
            )
            return
        if measured is not None:
            estimate.measured = measured(deployment)
        if quality is not None:
            estimate.quality = quality_cell(quality, deployment.precision)
        fitting.append(estimate)

    for deployment in candidate_deployments(framework, stage, architecture, budget):
        consider(deployment, True)
    if not any(_preferred(stage, e.deployment) for e in fitting):
        # Nothing holds the model at the profile's precision on its GPUs: show the smallest
        # tensor-parallel engine that would, so the answer says how many GPUs it takes.
        for tp in (d for d in TP_DEGREES if d > budget):
            extra = [
                d
                for d in candidate_deployments(framework, stage, architecture, tp)
                if d.parallelism.replicas == 1 and _preferred(stage, d)
            ]
            before = len(fitting)
            for deployment in extra:
                consider(deployment, False)
            if len(fitting) > before:
                search.notes.append(
                    f"nothing holds the model at {stage.precision.dtype} on {budget} GPU(s); "
                    f"TP={tp} needs {tp} GPUs (more than the profile's {budget})"
                )
                break
    if deployed is not None and not any(
        same_configuration(e.deployment, deployed) for e in fitting
    ):
        tp = deployed.parallelism.tensor_parallel_size
        replicas = budget // tp if budget % tp == 0 else 1
        consider(
            deployed.model_copy(
                update={
                    "parallelism": ParallelismConfig(tensor_parallel_size=tp, replicas=replicas)
                }
            ),
            tp <= budget,
        )
    fitting.sort(
        key=lambda e: (
            deployed is None or not same_configuration(e.deployment, deployed),
            not e.within_gpu_budget,
            not _meets_tpot(e, stage),
            _departures(stage, e.deployment),
            -_speed(e, stage),
            e.deployment.gpus,
        )
    )
    search.estimates = fitting
    if budget > 1:
        single = Deployment(
            framework=framework,
            precision=PrecisionConfig(
                dtype=stage.precision.dtype,
                quantization="fp8" if _wants_fp8(stage) else None,
                kv_cache_dtype=stage.precision.kv_cache_dtype,
            ),
        )
        if supports(single) is None:
            value, source = factors(single)
            estimate = estimate_deployment(stage, inputs, single, value, source, True)
            if estimate.fits:
                if measured is not None:
                    estimate.measured = measured(single)
                search.single_gpu = estimate
    if fitting:
        best = fitting[0]
        search.recommended = best.label
        search.recommended_basis = "measured" if best.measured else "estimate"
        search.plan = [e.label for e in fitting[: PLAN_SIZE + 1]]
        search.trade_offs = trade_offs(fitting, stage, search.single_gpu)
        if search.quality_note is not None:
            search.notes.append(search.quality_note)
        elif any(e.deployment.precision.uses_fp8 for e in fitting):
            search.notes.append(FP8_ACCURACY_NOTE)
        if not best.measured:
            search.notes.append(
                "the recommended configuration is not measured: its figures are estimates "
                "(run the plan to measure it)"
            )
    return search


def _figures(estimate: ConfigurationEstimate, concurrency: int) -> tuple[float, float, bool] | None:
    """(TPOT ms, output tok/s, measured?) at `concurrency`: a measurement when stored."""
    for level in estimate.measured:
        if level.concurrency == concurrency:
            return level.measured_tpot_ms, level.measured_output_tok_s, True
    for prediction in [estimate.prediction, *estimate.ladder]:
        if prediction is not None and prediction.concurrency == concurrency:
            return prediction.tpot_ms, prediction.output_throughput_tok_s, False
    return None


def _compare(
    other: ConfigurationEstimate, reference: ConfigurationEstimate, concurrency: int
) -> str | None:
    """`other vs reference: TPOT p50 +x%, output tok/s +y% at concurrency c on n vs m GPU(s)`."""
    base = _figures(reference, concurrency)
    figures = _figures(other, concurrency)
    if base is None or figures is None:
        return None
    basis = "measured" if figures[2] and base[2] else "estimate"
    budget = "" if other.within_gpu_budget else f", needs {other.deployment.gpus} GPUs"
    return (
        f"{other.label} vs {reference.label}: {TPOT_WORDS} {figures[0] / base[0] - 1:+.0%}, "
        f"{OUTPUT_WORDS} {figures[1] / base[1] - 1:+.0%} at concurrency {concurrency} on "
        f"{other.deployment.gpus} vs {reference.deployment.gpus} GPU(s) ({basis}{budget})"
    )


def trade_offs(
    estimates: list[ConfigurationEstimate],
    stage: StageProfile,
    single_gpu: ConfigurationEstimate | None = None,
) -> list[str]:
    """The trade-offs in numbers at the stage's concurrency, measured where both sides are
    measured, else marked as an estimate: what the GPUs buy over one GPU (TP against replicas),
    then each alternative against the recommended configuration."""
    concurrency = stage_load(stage).per_engine
    lines: list[str] = []
    if single_gpu is not None:
        layouts = [
            e
            for e in estimates
            if e.deployment.precision == single_gpu.deployment.precision and e.deployment.gpus > 1
        ]
        for estimate in layouts:
            line = _compare(estimate, single_gpu, concurrency)
            if line:
                lines.append(line)
    best = estimates[0] if estimates else None
    for other in estimates[1:]:
        line = _compare(other, best, concurrency) if best else None
        if line and line not in lines:
            lines.append(line)
    return lines


def plan_runs(base: RunConfig, search: ConfigurationSearch) -> list[RunConfig]:
    """The search's plan as RunConfigs: the framework's planned run at each planned
    configuration's parallelism and precision (the base run itself is not repeated)."""
    runs: list[RunConfig] = []
    for estimate in search.estimates:
        if estimate.label not in search.plan:
            continue
        deployment = estimate.deployment
        if deployment.parallelism == base.parallelism and deployment.precision == base.precision:
            continue
        data = base.model_dump(mode="json")
        data.update(
            parallelism=deployment.parallelism.model_dump(mode="json"),
            precision=deployment.precision.model_dump(mode="json"),
            label=f"{base.label or 'plan'}; configuration {estimate.label}"[:200],
        )
        runs.append(RunConfig.model_validate(data))
    return runs
