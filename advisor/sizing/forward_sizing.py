"""One forward stage (encoder, vision, speech encoder) sized for one framework: the dynamic
batcher's limits, samples/s per GPU under the stage's p99 SLO, the GPU count and cost for its
peak, and whether the SLO can hold at all at the stated load (advisor/sizing/forward_model.py
does the arithmetic; this module reads the stage, the GPU and the matching batch ladders)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal, NamedTuple

from pydantic import Field

from advisor.sizing.capacity import load_price_catalogue
from advisor.sizing.forward_model import (
    BatchingChoice,
    BatchTimeModel,
    FloorVerdict,
    ForwardFleet,
    calibrate,
    choose_batching,
    floor_model,
    forward_fleet,
    ladder_points,
    slo_below_floor,
)
from advisor.sizing.speech_loop import (
    EAGER_LOOP_FRAMEWORKS,
    GRAPH_LOOP_FRAMEWORKS,
    compiled_deviation,
    eager_encoder_fit,
    eager_encoder_note,
    eager_loop_note,
    eager_step_ms,
    graph_loop_fit,
    graph_loop_note,
)
from advisor.workload.architectures import architecture_for
from advisor.workload.gpus import find_gpu
from advisor.workload.profile import StageProfile
from bench.core.schema import RunResult
from bench.core.strict import Strict

UNCALIBRATED_ERROR = 0.5
"""The error assumed for a model with no ladder to fit (its batch time is the floor alone)."""
CARRIED_ERROR = 0.55
"""The error assumed where a ladder of the same engine, model and shape on another GPU stands in
(its overhead, efficiency and shape carried to this GPU's floor): carried between the H100 and
the H200 either way (PyTorch and ONNX Runtime bert-base, data/reference/h100_encoders_runs.json
and h200_llama2-7b_engines_bert_resnet_runs.json), such a carry missed measured batch times by
up to 53% (tests/advisor/test_forward_h100.py recomputes it)."""
CARRIED_ERROR_WHY = (
    "a ladder carried between the H100 and the H200 missed measured batch times by up to 53%"
)
"""Why CARRIED_ERROR, in the words the report and the fleet answer give."""
MEASURED_ENCODER_ERROR = 0.25
"""The least error assumed where a speech encoder's pass is sized from eager PyTorch's own
measured rows on the same GPU and model (the fit is within 4% of them; the loop beside it and
the batcher's queueing are modelled, not measured together)."""
TRANSFERRED_ERROR = 0.3
"""The least error assumed where a 16-bit ladder's overhead and efficiency stand for an INT8 or
FP8 run that was not measured (quantised kernels reach another fraction of their peak)."""
TRANSFER_CAVEAT = (
    "on eager PyTorch, whose W8A8 quantizes activations in separate kernels, the measured INT8 "
    "and FP8 batches were 3.6-7.0x slower than float16 where this transfer says up to 2x faster: "
    "data/reference/h100_encoders_8bit_runs.json, docs/forward-serving.md"
)
"""What the one measurement of an 8-bit transfer found, said wherever the transfer is used."""
WeightFormat = Literal["int8", "fp8"]


class ForwardSizing(Strict):
    """A forward stage on one framework and GPU type: batching, capacity, fleet, feasibility."""

    stage: str
    framework: str
    gpu_type: str
    basis: Literal["measured ladder", "carried ladder", "floor only"]
    basis_words: str = Field(description="Which runs the batch-time model was fitted to, or none.")
    batch_time: BatchTimeModel
    weight_format: WeightFormat | None = Field(
        None, description="INT8 or FP8 weights and activations; None = the profile's dtype."
    )
    error: float = Field(ge=0, description="The relative error the GPU count is given with.")
    error_why: str | None = Field(
        None,
        description="Why `error`, where not the ladder fit's own rule (its largest error, at "
        "least 20%) or the carried ladder's (CARRIED_ERROR_WHY).",
    )
    samples_per_request: int = Field(gt=0)
    batching: BatchingChoice | None = Field(
        None, description="The batcher's limits; None when no batch size meets the SLO."
    )
    fleet: ForwardFleet | None = Field(None, description="None without a peak rate.")
    gpus_range: tuple[int, int] | None = Field(
        None, description="GPU count if capacity per GPU is off by the model's error either way."
    )
    feasibility: FloorVerdict | None = None
    notes: list[str] = Field(default_factory=list)
    scope: str | None = Field(
        None,
        description="What the figures leave out of the served model, said beside every GPU "
        "count from them (an encoder-decoder's decoder loop); None = the whole forward pass.",
    )

    @property
    def calibrated(self) -> bool:
        """Batch times from a measured ladder (this GPU's or another's), not the floor alone."""
        return self.basis != "floor only"


def _same_shape(
    run: RunResult, stage: StageProfile, weight_format: WeightFormat | None = None
) -> bool:
    """The run is a forward run at the stage's dtype, shape and weight format (an INT8 or FP8
    W8A8 run is never a rung of the 16-bit ladder, nor the other way round)."""
    workload = run.config.workload
    if workload.kind != "forward" or run.config.precision.dtype != stage.precision.dtype:
        return False
    if run.config.precision.quantization != weight_format:
        return False
    if stage.sequence_length is not None:
        length = workload.sequence_length
        return length is not None and length.mean == stage.sequence_length.mean
    return workload.image_size == stage.image_size


def size_forward_stage(
    stage: StageProfile,
    framework: str,
    runs: Iterable[RunResult] = (),
    weight_format: WeightFormat | None = None,
) -> ForwardSizing | None:
    """The stage sized for `framework` on its GPU type; None where it cannot be (not a forward
    stage, no GPU type, a model or GPU whose sizes the catalogues lack, a dtype without a
    tensor-core peak). `runs` are stored and shipped runs: those of this framework, model, GPU
    type, dtype and shape at one batch in flight calibrate the batch-time model. With
    `weight_format` the floor is INT8's or FP8's (twice the 16-bit GEMM peak, a byte a weight;
    None for FP8 on a GPU without FP8 tensor cores) and a 16-bit ladder's overhead and
    efficiency stand for the unmeasured quantised run, with a larger error."""
    if stage.kind != "forward" or not stage.gpu.type or not stage.model:
        return None
    architecture, _ = architecture_for(stage.model)
    gpu = find_gpu(stage.gpu.type)
    if architecture is None or gpu is None:
        return None
    sequence = stage.sequence_length.mean if stage.sequence_length is not None else None
    steps, steps_source = transcript_tokens(stage) if architecture.decoder_layers else (0, "")
    floor = floor_model(architecture, gpu, stage.precision.dtype, sequence, stage.image_size, steps)
    if floor is None:
        return None
    runs = list(runs)
    found = _from_ladders(runs, framework, stage, gpu.name, floor, None)
    model, basis, error, carried_from = found or (floor, "floor only", UNCALIBRATED_ERROR, None)
    calibrated = found is not None
    if weight_format is not None:
        quantised = floor_model(architecture, gpu, weight_format, sequence, stage.image_size, steps)
        if quantised is None:
            return None
        own = _from_ladders(runs, framework, stage, gpu.name, quantised, weight_format)
        if own is not None:  # this format's own ladder, on this GPU or carried from another
            model, basis, error, carried_from = own
            calibrated = True
        elif calibrated:
            fmt = weight_format.upper()
            error = max(error, TRANSFERRED_ERROR)
            model = model.carried_to(
                quantised,
                f"the {fmt} floor with the overhead and efficiency of the "
                f"{stage.precision.dtype} ladder ({model.basis}); {fmt} itself not measured "
                f"on {framework} ({TRANSFER_CAVEAT})",
            )
        else:
            model = quantised
    eager_encoder = None
    error_why = None
    if (architecture.encoder_parameters and steps and framework in EAGER_LOOP_FRAMEWORKS
            and not calibrated and not stage.parts):  # fmt: skip
        # No ladder of this model on eager PyTorch: its encoder's pass at the overhead and
        # efficiency measured with its loop (advisor/sizing/speech_loop.py). Not for a split
        # stage: there the encoder is exported to the engine its part is routed to.
        eager_encoder = eager_encoder_fit(architecture)
        if eager_encoder is not None:
            fitted = eager_encoder.model
            model = fitted.carried_to(
                model, f"the floor on {gpu.name} with the overhead and efficiency of {fitted.basis}"
            )
            own = eager_encoder.measured_on(architecture.name, gpu)
            error = max(fitted.fit_error or 0.0, MEASURED_ENCODER_ERROR) if own else CARRIED_ERROR
            basis = "measured ladder" if own else "carried ladder"
            if own:
                error_why = (
                    f"the encoder fit's largest error on its rows, at least "
                    f"{MEASURED_ENCODER_ERROR:.0%}: the loop beside it is modelled"
                )
    graph_loop = None
    if steps and framework in GRAPH_LOOP_FRAMEWORKS and not calibrated:
        # No ladder of this model on the engine: its loop's steps at the fit of measured graph
        # replays (advisor/sizing/speech_loop.py), the encoder's pass at its floor.
        graph_loop = graph_loop_fit(architecture)
        if graph_loop is not None:
            words = graph_loop_note(graph_loop, architecture.name, gpu, steps)
            model = graph_loop.applied_to(model, architecture.decoder_layers or 0).model_copy(
                update={"basis": f"{words}; the encoder's pass at its floor on {gpu.name}"}
            )
            own = graph_loop.measured_on(architecture.name, gpu)
            # torch.compile's own compiled step strays from the fit (both ways, by batch): the
            # error covers the worst of it.
            compiled = compiled_deviation() or 0.0
            error = max(
                graph_loop.worst_error, MEASURED_ENCODER_ERROR if own else CARRIED_ERROR, compiled
            )
            basis = "measured ladder" if own else "carried ladder"
            if error == compiled:
                error_why = (
                    f"torch.compile's own step measured up to {compiled:.0%} from the "
                    "captured-loop fit"
                )
    notes = []
    if graph_loop is not None:
        notes.append(
            f"no measured batch ladder of {framework} on {gpu.name} for {architecture.name}: "
            f"{model.basis} (a lower bound: {framework}'s encoder is not measured here); error "
            f"assumed {error:.0%}"
        )
    elif carried_from is not None:
        notes.append(
            f"no measured batch ladder of {framework} on {gpu.name} at this shape: the one on "
            f"{carried_from} is carried over (its overhead and efficiency on this GPU's floor), "
            f"error assumed {error:.0%}; a ladder on {gpu.name} settles it"
        )
    elif eager_encoder is not None:
        notes.append(eager_encoder_note(eager_encoder, architecture.name, gpu, error))
    elif stage.parts and framework in EAGER_LOOP_FRAMEWORKS and not calibrated:
        notes.append(
            f"a split stage: its encoder is exported to the engine its part is routed to, which "
            f"is not measured here, so the encoder's pass is its floor on {gpu.name} (a lower "
            "bound; eager PyTorch's own encoder ran at 23-31% of it: "
            "data/reference/h100_whisper_loop/); the loop stays on eager PyTorch"
        )
    elif not calibrated:
        notes.append(
            f"no measured batch ladder of {framework} on {gpu.name} at this shape: batch times "
            "are the floor alone, a lower bound; the GPU count is a lower bound too"
        )
    scope = None
    if architecture.encoder_parameters and steps:
        timed = "as measured graph replays" if graph_loop is not None else "at the floor"
        scope = (
            f"the encoder's pass over its {architecture.encoder_frames:,} frames and the "
            f"decoder's loop of {steps} steps a clip ({steps_source}), each reading the "
            f"decoder's weights and every clip's cross-attention keys and values, {timed}; "
            f"at most {floor.largest_batch_in_memory} clips' keys and values fit one "
            f"{gpu.name} beside the weights"
        )
        notes.append(scope)
        layers = architecture.decoder_layers or 0
        step_ms = eager_step_ms(layers)
        if framework in EAGER_LOOP_FRAMEWORKS and not calibrated and step_ms is not None:
            # No ladder of this model: the loop's steps cost at least eager PyTorch's measured
            # launches (a ladder of the model itself would include them in its fit), and the
            # encoder's pass runs at the overhead and efficiency measured with that loop.
            model = model.model_copy(update={"loop_step_overhead_ms": step_ms})
            eager = eager_loop_note(layers, steps, applied=True)
            notes.append(eager)
            scope = f"{scope}; {eager}"
        elif step_ms is not None and graph_loop is None:
            notes.append(eager_loop_note(layers, steps, applied=False))
    slo = stage.slo.e2e_ms
    if slo is None:
        notes.append("no end-to-end SLO: the batcher is sized for throughput alone")
    batching = choose_batching(model, slo if slo is not None else math.inf)
    peak = stage.peak_request_rate_rps or stage.request_rate_rps
    fleet = gpus_range = None
    if batching is not None and peak is not None:
        samples = peak * stage.batch_size
        price = load_price_catalogue().for_gpu(gpu.name)
        hourly = stage.gpu.price_per_hour or (price.usd_per_gpu_hour if price else None)
        fleet = forward_fleet(samples, batching, stage.headroom_fraction, hourly)
        need = samples * (1 + stage.headroom_fraction)
        per_gpu = batching.samples_per_s_per_gpu
        gpus_range = (
            max(1, math.ceil(need / (per_gpu * (1 + error)))),
            max(1, math.ceil(need / (per_gpu * (1 - min(error, 0.9))))),
        )
    feasibility = None
    if slo is not None:
        requests = stage.concurrency or 1
        batch, in_flight = stage.batch_size, requests
        if fleet is not None and batching is not None:
            # The fleet spreads the requests in flight over its GPUs and each GPU's batcher
            # joins its share into batches of up to max_batch samples, run one after another.
            share = math.ceil(requests / fleet.gpus)
            per_batch = max(1, batching.max_batch // stage.batch_size)
            batch = min(share, per_batch) * stage.batch_size
            in_flight = math.ceil(share / per_batch)
        feasibility = slo_below_floor(
            model,
            slo,
            batch=batch,
            in_flight=in_flight,
            model_error=error,
            # Every catalogued GPU (T4 onwards) has INT8 tensor cores.
            int8_possible=weight_format is None,
        )
    return ForwardSizing(
        stage=stage.name,
        framework=framework,
        gpu_type=gpu.name,
        basis=basis,
        basis_words=model.basis,
        batch_time=model,
        weight_format=weight_format,
        error=error,
        error_why=error_why,
        samples_per_request=stage.batch_size,
        batching=batching,
        fleet=fleet,
        gpus_range=gpus_range,
        feasibility=feasibility,
        notes=notes,
        scope=scope,
    )


WHISPER_TRANSCRIPT_TOKENS = 100
"""Transcript tokens of a 30 s clip where the profile does not say (`output_tokens`): speech at
about 150 words a minute is 75 words, about 1.3 BPE tokens a word, plus Whisper's 3-4 task
tokens. An assumption, said beside every figure it sizes; a profile's output_tokens replaces it."""


def transcript_tokens(stage: StageProfile) -> tuple[int, str]:
    """(Decoder steps a clip, where the figure comes from): the profile's output_tokens where it
    sets them, else WHISPER_TRANSCRIPT_TOKENS."""
    if "output_tokens" in stage.model_fields_set:
        return max(1, round(stage.output_tokens.mean)), "the profile's output_tokens"
    return WHISPER_TRANSCRIPT_TOKENS, (
        "assumed: about 150 spoken words a minute; set output_tokens to your transcripts' length"
    )


class _Calibrated(NamedTuple):
    model: BatchTimeModel
    basis: Literal["measured ladder", "carried ladder"]
    error: float
    carried_from: str | None


def _from_ladders(
    runs: Sequence[RunResult],
    framework: str,
    stage: StageProfile,
    gpu_name: str,
    floor: BatchTimeModel,
    weight_format: WeightFormat | None,
) -> _Calibrated | None:
    """`floor` calibrated by `framework`'s ladder at this weight format on this GPU, else by one
    on another GPU carried over (its overhead and efficiency); None without either."""
    measured = calibrate(floor, _ladder(runs, framework, stage, gpu_name, weight_format))
    if measured.fit_error is not None:
        return _Calibrated(measured, "measured ladder", max(measured.fit_error, 0.2), None)
    carried = carried_ladder(runs, framework, stage, gpu_name, weight_format)
    if carried is None:
        return None
    other_gpu, other = carried
    fmt = f" {weight_format.upper()}" if weight_format else ""
    model = other.carried_to(
        floor,
        f"the {framework}{fmt} ladder on {other_gpu} carried to the {gpu_name}{fmt} floor "
        f"({other.basis})",
    )
    return _Calibrated(
        model, "carried ladder", max(other.fit_error or 0.0, CARRIED_ERROR), other_gpu
    )


def _ladder(
    runs: Sequence[RunResult],
    framework: str,
    stage: StageProfile,
    gpu_name: str,
    weight_format: WeightFormat | None,
) -> list[tuple[int, float, str]]:
    """The batch ladder of `framework` at the stage's model, dtype, shape and weight format on
    `gpu_name` (its one-batch-in-flight runs as points)."""
    return ladder_points(
        run
        for run in runs
        if run.config.backend == framework
        and run.config.model == stage.model
        and _run_gpu(run) == gpu_name
        and _same_shape(run, stage, weight_format)
    )


def carried_ladder(
    runs: Iterable[RunResult],
    framework: str,
    stage: StageProfile,
    gpu_name: str,
    weight_format: WeightFormat | None = None,
) -> tuple[str, BatchTimeModel] | None:
    """(GPU, its fitted model) of the best ladder of `framework` at the stage's model, dtype,
    shape and weight format on another catalogued GPU (the most batch sizes, then the GPU's
    name), fitted on that GPU's own floor; None where there is none."""
    architecture, _ = architecture_for(stage.model)
    if architecture is None:
        return None
    sequence = stage.sequence_length.mean if stage.sequence_length is not None else None
    by_gpu: dict[str, list[RunResult]] = {}
    for run in runs:
        other = _run_gpu(run)
        if (
            other is not None
            and other != gpu_name
            and run.config.backend == framework
            and run.config.model == stage.model
            and _same_shape(run, stage, weight_format)
        ):
            by_gpu.setdefault(other, []).append(run)
    best: tuple[int, str, BatchTimeModel, list[tuple[int, float, str]]] | None = None
    for other, other_runs in sorted(by_gpu.items()):
        spec = find_gpu(other)
        points = ladder_points(other_runs)
        dtype = weight_format or stage.precision.dtype
        floor = (
            floor_model(architecture, spec, dtype, sequence, stage.image_size)
            if spec is not None
            else None
        )
        if floor is None or len({batch for batch, _, _ in points}) < 2:
            continue
        if best is None or len(points) > best[0]:
            best = (len(points), other, floor, points)
    if best is None:
        return None
    _, other, floor, points = best
    return other, calibrate(floor, points)  # only the chosen ladder is fitted


def _run_gpu(run: RunResult) -> str | None:
    name = run.environment.primary_gpu_name if run.environment else None
    spec = find_gpu(name) if name else None
    return spec.name if spec else None


def floor_feasibility(stage: StageProfile) -> FloorVerdict | None:
    """Before anything runs: the stage's p99 SLO against the batches one GPU holds at the floor
    of its GPU type (no engine chosen, no overhead: infeasible here is infeasible on every
    engine; within UNCALIBRATED_ERROR of the SLO is flagged as doubtful): the profile's
    concurrency on one GPU, or with a peak rate its share on each GPU of the fleet the floor
    sizes, batched. None where the stage is not forward or lacks an SLO, a GPU type or a model
    the catalogue sizes."""
    if stage.kind != "forward" or stage.slo.e2e_ms is None or not stage.gpu.type:
        return None
    sized = size_forward_stage(stage, "any engine")  # no runs: the floor alone
    return sized.feasibility if sized is not None else None
