"""The forward (encoder, vision) serving model: the time of one batch against its size, from the
floor (FLOPs and bytes of a batch over the GPU's datasheet peak and bandwidth) calibrated by
measured batch ladders, and a dynamic batcher's queueing rule (max batch, max queue delay) that
gives samples/s per GPU under a p99 latency SLO, the batch limits to set, and the GPU count and
cost for a peak.

The batch time is `overhead + floor(b) / efficiency`: a fixed launch cost per batch (Python,
kernel launches, copies) and the roofline time stretched by the fraction of peak the engine
reaches. Both come from a least-squares fit of a measured ladder (runs at one batch in flight,
so a batch's time is 1 / batches per second); without one, the floor alone (overhead 0,
efficiency 1), which is a lower bound, never a prediction. Where the launch work overlaps the
device's (an eager framework on a GPU dispatches ahead of it), `max(overhead, floor(b) /
efficiency)` follows a ladder better; the fit keeps whichever of the two shapes has the smaller
worst error on the ladder's own points.

The dynamic batcher (Triton's, TEI's, bench/engines/backends/batcher.py): a batch closes when it
holds `max batch` requests or its first request has waited `max queue delay`; one batch runs at a
time per GPU. At arrival rate λ a batch holds b = min(max batch, max(1, λ x (delay + t(b))))
requests (it fills while the previous batch runs and for the delay). A request waits at most for
its batch to close (min(delay, b / λ)), for the batch ahead to finish (t(b)) and for its own
(t(b)): p99 <= min(delay, b / λ) + 2 t(b), a bound, not a percentile fit. The GPU is kept under
`MAX_UTILISATION` busy (λ t(b) / b) so queues stay short under Poisson bursts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from pydantic import Field

from advisor.sizing.engine_model.replica import free_after_weights
from advisor.workload.architectures import Architecture
from advisor.workload.gpus import GpuSpec
from bench.core.schema import RunResult
from bench.core.strict import Strict

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "fp8": 1}
MAX_UTILISATION = 0.8
"""The busy fraction a GPU is sized to (the rest absorbs Poisson bursts)."""
MAX_BATCH_CHOICES = (1, 2, 4, 8, 16, 32, 64, 128)
QUEUE_DELAY_CHOICES_MS = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0)


def forward_flops_per_sample(
    architecture: Architecture, sequence_length: int | None, image_size: int | None
) -> float | None:
    """FLOPs of one sample's forward pass (2 per multiply-add): a transformer encoder's
    L x (24 h^2 s + 4 s^2 h) over s tokens (a ViT's s = patches + 1; a speech encoder's s = its
    fixed frames, Whisper's 1,500 for every clip, its two stem convolutions, about 2% of the
    work, left out), a CNN's datasheet figure scaled by the image area; None where the
    architecture lacks the sizes."""
    if architecture.gflops_per_image_224 is not None:
        side = image_size or 224
        return architecture.gflops_per_image_224 * 1e9 * (side / 224) ** 2
    layers, hidden = architecture.layers, architecture.hidden_size
    if not layers or not hidden:
        return None
    if architecture.encoder_frames:
        tokens = architecture.encoder_frames
    elif architecture.patch_size:
        side = image_size or 224
        tokens = (side // architecture.patch_size) ** 2 + 1
    elif sequence_length:
        tokens = sequence_length
    else:
        return None
    return layers * (24 * hidden**2 * tokens + 4 * tokens**2 * hidden)


def gemm_peak(gpu: GpuSpec, dtype: str) -> float | None:
    """Dense tensor TFLOP/s of a batch's GEMMs at `dtype`: the datasheet 16-bit figure, twice
    it for INT8 (every catalogued GPU, T4 onwards, has INT8 tensor cores) and for FP8 on GPUs
    with FP8 tensor cores (advisor/sizing/engine_model/formats.py's rule); None for FP8
    elsewhere."""
    if dtype == "int8" or (dtype == "fp8" and gpu.fp8):
        base = gpu.peak_tflops("float16")
        return None if base is None else 2 * base
    if dtype == "fp8":
        return None
    return gpu.peak_tflops(dtype)


def floor_batch_ms(
    architecture: Architecture,
    gpu: GpuSpec,
    dtype: str,
    batch: int,
    sequence_length: int | None = None,
    image_size: int | None = None,
) -> float | None:
    """The roofline time of one batch (ms): max(FLOPs / peak, weight bytes / bandwidth); None
    where the FLOPs or the GPU's peak for the dtype are unknown."""
    flops = forward_flops_per_sample(architecture, sequence_length, image_size)
    peak = gemm_peak(gpu, dtype)
    if flops is None or peak is None:
        return None
    compute_s = batch * flops / (peak * 1e12)
    memory_s = (
        architecture.parameters * DTYPE_BYTES.get(dtype, 2) / (gpu.memory_bandwidth_tb_s * 1e12)
    )
    return max(compute_s, memory_s) * 1e3


class BatchTimeModel(Strict):
    """t(b) = overhead_ms + floor(b) / efficiency, with where the two figures came from."""

    floor_ms_per_batch_1: float = Field(gt=0, description="The floor of a batch of one (ms).")
    compute_ms_per_sample: float = Field(ge=0, description="Compute floor per extra sample (ms).")
    memory_floor_ms: float = Field(ge=0, description="Weight read per batch (ms).")
    overhead_ms: float = Field(0.0, ge=0)
    efficiency: float = Field(1.0, gt=0, le=1.5)
    basis: str = Field(description="'floor only (a lower bound)' or the runs it was fitted to.")
    fit_error: float | None = Field(
        None, description="Largest relative error of the fit on the runs it was fitted to."
    )
    largest_measured_batch: int | None = Field(
        None, description="The ladder's largest batch: the search does not extrapolate past it."
    )
    loop_steps: int = Field(
        0,
        ge=0,
        description="An encoder-decoder's decoder steps per sample (transcript tokens); 0 = "
        "an encoder alone.",
    )
    loop_weights_ms: float = Field(0.0, ge=0, description="One step's decoder weight read.")
    loop_read_ms_per_sample: float = Field(
        0.0, ge=0, description="One step's reads per sample: cross- and self-attention K/V."
    )
    loop_compute_ms_per_sample: float = Field(
        0.0, ge=0, description="One step's FLOPs per sample at the GEMM peak."
    )
    largest_batch_in_memory: int | None = Field(
        None,
        description="The most samples whose decoder K/V fit the GPU beside the weights (the "
        "batcher's limit); None = not bounded here.",
    )
    overlapped: bool = Field(
        False,
        description="The host's launch work overlaps the device's (asynchronous GPU launches): "
        "t(b) = max(overhead, floor(b) / efficiency) instead of their sum.",
    )
    loop_step_overhead_ms: float = Field(
        0.0,
        ge=0,
        description="The host's work a decoder step on an eager framework (its kernel "
        "launches), overlapping the device's step: each step takes the longer of the two "
        "(measured: advisor/sizing/speech_loop.py); 0 = a loop without per-step launch cost.",
    )
    loop_step_fixed_ms: float = Field(
        0.0,
        ge=0,
        description="A captured loop's time a step that no batch size shrinks: each kernel's "
        "own time on the GPU, which a CUDA graph does not remove (measured: "
        "advisor/sizing/speech_loop.py's graph_loop_fit); 0 = none counted.",
    )
    loop_efficiency: float | None = Field(
        None,
        gt=0,
        le=1.5,
        description="A captured loop's fraction of its step floor's speed, fitted to measured "
        "steps; None = the loop's steps at their floor (or at the encoder's efficiency where a "
        "ladder of the whole model calibrated both).",
    )

    def encoder_floor_ms(self, batch: int) -> float:
        return max(batch * self.compute_ms_per_sample, self.memory_floor_ms)

    def step_floor_ms(self, batch: int) -> float:
        """One decoder step's floor for `batch` samples (ms): the larger of its reads and FLOPs."""
        return max(
            self.loop_weights_ms + batch * self.loop_read_ms_per_sample,
            batch * self.loop_compute_ms_per_sample,
        )

    def floor_ms(self, batch: int) -> float:
        return self.encoder_floor_ms(batch) + self.loop_steps * self.step_floor_ms(batch)

    def batch_ms(self, batch: int) -> float:
        if self.loop_steps and self.loop_step_overhead_ms:
            # An eager loop: every step waits for the host's launches or the device, whichever
            # is longer; the encoder's pass as an encoder alone, at the efficiency measured for
            # it. The device's step stays at its floor: in every measured row the loop was
            # launch-bound (advisor/sizing/speech_loop.py), so no step efficiency was observed,
            # and the encoder's compute-bound fraction says nothing of a memory-bound step.
            encoder_ms = self.encoder_floor_ms(batch) / self.efficiency
            step_ms = max(self.loop_step_overhead_ms, self.step_floor_ms(batch))
            before = (
                max(self.overhead_ms, encoder_ms)
                if self.overlapped
                else self.overhead_ms + encoder_ms
            )
            return before + self.loop_steps * step_ms
        if self.loop_steps and self.loop_efficiency is not None:
            # A captured loop: its steps at the fit of measured graph replays, the encoder's
            # pass at the encoder's own efficiency.
            step_ms = self.loop_step_fixed_ms + self.step_floor_ms(batch) / self.loop_efficiency
            device_ms = self.encoder_floor_ms(batch) / self.efficiency + self.loop_steps * step_ms
        else:
            device_ms = self.floor_ms(batch) / self.efficiency
        if self.overlapped:
            return max(self.overhead_ms, device_ms)
        return self.overhead_ms + device_ms

    def carried_to(self, floor: BatchTimeModel, basis: str) -> BatchTimeModel:
        """`floor` (another GPU's, or another weight format's) with this model's calibration:
        its overhead, efficiency, shape, fit error and measured range."""
        return floor.model_copy(
            update={
                "overhead_ms": self.overhead_ms,
                "efficiency": self.efficiency,
                "overlapped": self.overlapped,
                "loop_step_overhead_ms": self.loop_step_overhead_ms,
                "loop_step_fixed_ms": self.loop_step_fixed_ms,
                "loop_efficiency": self.loop_efficiency,
                "fit_error": self.fit_error,
                "largest_measured_batch": self.largest_measured_batch,
                "basis": basis,
            }
        )


def floor_model(
    architecture: Architecture,
    gpu: GpuSpec,
    dtype: str,
    sequence_length: int | None = None,
    image_size: int | None = None,
    decode_steps: int = 0,
) -> BatchTimeModel | None:
    """The uncalibrated model: the floor alone (a lower bound on every batch time). With
    `decode_steps` an encoder-decoder's loop is in it (`decoder_loop`)."""
    flops = forward_flops_per_sample(architecture, sequence_length, image_size)
    peak = gemm_peak(gpu, dtype)
    if flops is None or peak is None:
        return None
    per_sample = flops / (peak * 1e12) * 1e3
    # An encoder-decoder's forward pass reads the encoder's weights only.
    weights = (architecture.encoder_parameters or architecture.parameters) * DTYPE_BYTES.get(
        dtype, 2
    )
    memory = weights / (gpu.memory_bandwidth_tb_s * 1e12) * 1e3
    model = BatchTimeModel(
        floor_ms_per_batch_1=max(per_sample, memory),
        compute_ms_per_sample=per_sample,
        memory_floor_ms=memory,
        basis="floor only (a lower bound, not a prediction)",
    )
    return decoder_loop(model, architecture, gpu, dtype, decode_steps, peak)


def decoder_loop(
    model: BatchTimeModel,
    architecture: Architecture,
    gpu: GpuSpec,
    dtype: str,
    steps: int,
    peak_tflops: float,
) -> BatchTimeModel:
    """An encoder-decoder's loop at the floor, `steps` tokens a sample: every step reads the
    decoder's weights once for the batch and, per sample, the cross-attention's keys and values
    over the encoder's frames in every decoder layer (Whisper-large: 32 x 2 x 1,500 x 1,280 x 2
    bytes = 246 MB, 0.4 ms a sample a step on an A10's 600 GB/s) and its own growing self-
    attention cache (half the transcript on average); its FLOPs are 2 x the decoder's weights
    per token plus the attention. Keys and values of every sample in a batch stay in memory
    for the whole loop: the batch is bounded by what fits beside the weights and the runtime
    (the serving rule of advisor/sizing/engine_model/replica.py). `model` (the encoder's
    floor) with the loop added; unchanged for an encoder alone."""
    layers, hidden, frames = (
        architecture.decoder_layers,
        architecture.hidden_size,
        architecture.encoder_frames,
    )
    encoder = architecture.encoder_parameters
    if not (steps and layers and hidden and frames and encoder):
        return model
    size = DTYPE_BYTES.get(dtype, 2)
    kv_size = 2 if dtype in ("int8", "fp8") else size  # 8-bit GEMMs keep a 16-bit K/V cache
    bandwidth = gpu.memory_bandwidth_tb_s * 1e12
    decoder = architecture.parameters - encoder
    cross = layers * 2 * frames * hidden * kv_size
    own = layers * 2 * (steps / 2) * hidden * kv_size
    step_flops = 2 * decoder + layers * 4 * hidden * (frames + steps / 2)
    kept = layers * 2 * (frames + steps) * hidden * kv_size
    free = free_after_weights(architecture.parameters * size, gpu.memory_gb)
    looped = model.model_copy(
        update={
            "loop_steps": steps,
            "loop_weights_ms": decoder * size / bandwidth * 1e3,
            "loop_read_ms_per_sample": (cross + own) / bandwidth * 1e3,
            "loop_compute_ms_per_sample": step_flops / (peak_tflops * 1e12) * 1e3,
            "largest_batch_in_memory": max(1, int(free // kept)),
        }
    )
    return looped.model_copy(update={"floor_ms_per_batch_1": looped.floor_ms(1)})


def ladder_points(runs: Iterable[RunResult]) -> list[tuple[int, float, str]]:
    """(batch, measured ms per batch, run id) of forward runs with one batch in flight (a closed
    loop at concurrency 1: a batch's time is 1000 / batches per second)."""
    points = []
    for run in runs:
        config, summary = run.config, run.summary
        if config.workload.kind != "forward" or summary is None:
            continue
        if config.load.pattern != "concurrency" or config.load.concurrency != 1:
            continue
        if summary.request_throughput_rps <= 0:
            continue
        points.append(
            (config.workload.batch_size, 1000.0 / summary.request_throughput_rps, run.run_id)
        )
    return sorted(points)


def calibrate(floor: BatchTimeModel, points: Sequence[tuple[int, float, str]]) -> BatchTimeModel:
    """Fit overhead and efficiency to a measured ladder by least squares on t = a + c floor(b)
    (c = 1 / efficiency); at least two batch sizes, else the floor model unchanged. The fit's
    largest relative error on its own points is kept with it."""
    sizes = {batch for batch, _, _ in points}
    if len(sizes) < 2:
        return floor
    xs = [floor.floor_ms(batch) for batch, _, _ in points]
    ys = [ms for _, ms, _ in points]
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread <= 0:
        return floor
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
    slope = max(slope, 1 / 1.5)  # an engine cannot beat the floor by more than its error
    overhead = max(mean_y - slope * mean_x, 0.0)
    fitted = floor.model_copy(
        update={
            "overhead_ms": overhead,
            "efficiency": min(1.0 / slope, 1.5),
            "largest_measured_batch": max(sizes),
            "basis": "fitted to the measured ladder "
            + ", ".join(f"batch {batch} ({run_id})" for batch, _, run_id in points),
        }
    )
    errors = [abs(fitted.batch_ms(batch) - ms) / ms for batch, ms, _ in points]
    fitted = fitted.model_copy(update={"fit_error": max(errors)})
    overlapped = _fit_overlapped(fitted, points)
    if overlapped is not None and overlapped.fit_error < fitted.fit_error:  # type: ignore[operator]
        return overlapped
    return fitted


def _fit_overlapped(
    serial: BatchTimeModel, points: Sequence[tuple[int, float, str]]
) -> BatchTimeModel | None:
    """The overlapped shape t = max(a, floor(b) / e) fitted to the ladder by the smallest worst
    relative error: a from the measured times (the launch-bound plateau is one of them), e on a
    grid of 0.5% steps. On a GPU an eager framework's Python dispatch runs ahead of the device,
    so a small batch costs the dispatch alone and a large one the device time alone (H100
    PyTorch bert-base: 5.8, 4.7, 4.5, 5.0, 16.0 ms at batch 1 to 256 in
    data/reference/h100_encoders_runs.json), which a sum of the two cannot follow."""
    # Searched on plain numbers (the model is built once, for the best pair): the grid is
    # 300 efficiencies per candidate overhead, and every sizing of a stage fits its ladder.
    floors = [(serial.floor_ms(batch), ms) for batch, ms, _ in points]
    best: tuple[float, float, float] | None = None  # (worst error, overhead, efficiency)
    for overhead in sorted({ms for _, ms, _ in points}):
        for step in range(1, 301):
            efficiency = step / 200
            error = max(abs(max(overhead, floor / efficiency) - ms) / ms for floor, ms in floors)
            if best is None or error < best[0]:
                best = (error, overhead, efficiency)
    if best is None:
        return None
    error, overhead, efficiency = best
    return serial.model_copy(
        update={
            "overhead_ms": overhead,
            "efficiency": efficiency,
            "overlapped": True,
            "fit_error": error,
            "basis": serial.basis + " (launch work overlapping the device's)",
        }
    )


class BatchingChoice(Strict):
    """The dynamic batcher's limits for one GPU and what they give at the stated load."""

    max_batch: int = Field(gt=0)
    max_queue_delay_ms: float = Field(ge=0)
    batch_at_load: float = Field(gt=0, description="Requests a batch holds at the arrival rate.")
    batch_ms: float = Field(gt=0, description="Time of that batch (ms).")
    p99_bound_ms: float = Field(gt=0, description="min(delay, b / rate) + 2 t(b): the bound.")
    samples_per_s_per_gpu: float = Field(
        gt=0, description="What one GPU sustains with these limits at MAX_UTILISATION busy."
    )


def batching_at(
    model: BatchTimeModel, rate_per_gpu: float, max_batch: int, max_delay_ms: float
) -> BatchingChoice:
    """The batcher's steady state at `rate_per_gpu` requests/s (one sample each) on one GPU:
    the batch it forms (a fixed point of b = min(B, max(1, rate x (delay + t(b))))), its time,
    the p99 bound and the GPU's capacity with these limits."""
    batch = 1.0
    for _ in range(50):  # converges in a few steps: t(b) grows slower than b
        formed = rate_per_gpu * (max_delay_ms + model.batch_ms(math.ceil(batch))) / 1e3
        batch = min(float(max_batch), max(1.0, formed))
    batch_ms = model.batch_ms(math.ceil(batch))
    close_ms = min(max_delay_ms, batch / rate_per_gpu * 1e3) if rate_per_gpu > 0 else 0.0
    full_ms = model.batch_ms(max_batch)
    return BatchingChoice(
        max_batch=max_batch,
        max_queue_delay_ms=max_delay_ms,
        batch_at_load=batch,
        batch_ms=batch_ms,
        p99_bound_ms=close_ms + 2 * batch_ms,
        samples_per_s_per_gpu=MAX_UTILISATION * max_batch / full_ms * 1e3,
    )


def boundary_rate(
    model: BatchTimeModel, max_batch: int, max_delay_ms: float, p99_slo_ms: float
) -> float:
    """The highest arrival rate (one-sample requests/s on one GPU) at which the batcher with
    these limits keeps its p99 bound within the SLO and the GPU below saturation: what an SLO
    capacity search of the same limits measures (the sizing itself stays at MAX_UTILISATION
    of the full-batch rate). 0 when not even a trickle meets the SLO. Scanned on a geometric
    grid of 2% steps up to the full-batch rate."""
    ceiling = max_batch / model.batch_ms(max_batch) * 1e3
    best, rate = 0.0, ceiling / 1e4
    while rate <= ceiling:
        state = batching_at(model, rate, max_batch, max_delay_ms)
        busy = rate * state.batch_ms / 1e3 / state.batch_at_load
        if state.p99_bound_ms <= p99_slo_ms and busy < 1.0:
            best = rate
        rate *= 1.02
    return best


def choose_batching(
    model: BatchTimeModel,
    p99_slo_ms: float,
    max_batches: Sequence[int] = MAX_BATCH_CHOICES,
    delays_ms: Sequence[float] = QUEUE_DELAY_CHOICES_MS,
) -> BatchingChoice | None:
    """The limits that give a GPU the most samples/s while a full batch still meets the p99
    SLO (its bound at the rate that fills it: delay + 2 t(B) <= SLO); ties go to the larger
    batch and the shorter delay. None when even a batch of one cannot meet it (the SLO is below
    the floor plus overhead: see `slo_below_floor`)."""
    best: BatchingChoice | None = None
    largest = model.largest_measured_batch
    for max_batch in max_batches:
        if largest is not None and max_batch > largest:
            continue  # beyond the measured ladder the fit is an extrapolation
        if model.largest_batch_in_memory is not None and max_batch > model.largest_batch_in_memory:
            continue  # a decoder's keys and values for every sample must fit the GPU
        for delay in delays_ms:
            full_rate = MAX_UTILISATION * max_batch / model.batch_ms(max_batch) * 1e3
            choice = batching_at(model, full_rate, max_batch, delay)
            if choice.p99_bound_ms > p99_slo_ms:
                continue
            if best is None or choice.samples_per_s_per_gpu > best.samples_per_s_per_gpu * 1.001:
                best = choice
            elif (
                choice.samples_per_s_per_gpu >= best.samples_per_s_per_gpu * 0.999
                and choice.max_batch > best.max_batch
            ):
                # A tie (the floor alone has no per-batch overhead to amortise) goes to the
                # larger batch: real engines pay a launch cost per batch that it spreads.
                best = choice
    return best


class ForwardFleet(Strict):
    """GPUs and cost for a forward stage's peak: ceil(peak x (1 + headroom) / per GPU)."""

    peak_samples_per_s: float = Field(gt=0)
    headroom_fraction: float = Field(ge=0)
    samples_per_s_per_gpu: float = Field(gt=0)
    gpus: int = Field(ge=1)
    usd_per_month: float | None = Field(None, description="GPUs x price x 730 h.")


HOURS_PER_MONTH = 730.0


def forward_fleet(
    peak_samples_per_s: float,
    choice: BatchingChoice,
    headroom_fraction: float = 0.2,
    usd_per_gpu_hour: float | None = None,
) -> ForwardFleet:
    gpus = max(
        1, math.ceil(peak_samples_per_s * (1 + headroom_fraction) / choice.samples_per_s_per_gpu)
    )
    return ForwardFleet(
        peak_samples_per_s=peak_samples_per_s,
        headroom_fraction=headroom_fraction,
        samples_per_s_per_gpu=choice.samples_per_s_per_gpu,
        gpus=gpus,
        usd_per_month=None
        if usd_per_gpu_hour is None
        else gpus * usd_per_gpu_hour * HOURS_PER_MONTH,
    )


class FloorVerdict(Strict):
    """Whether a p99 SLO can hold with `in_flight` batches queued on one GPU: the time they
    need at the floor (and at the calibrated model) against the SLO."""

    slo_ms: float
    batch: int = Field(1, ge=1, description="Samples in each batch judged.")
    in_flight: int = Field(1, ge=1, description="Batches queued on one GPU, the last waiting.")
    floor_ms: float = Field(description="in_flight x the floor time of one batch.")
    model_ms: float = Field(description="in_flight x the model's batch time.")
    ratio_to_floor: float = Field(description="SLO / floor time: below 1, impossible.")
    feasible: bool
    within_error: bool = Field(description="Feasible on paper but within the model's error.")
    remedies: list[str] = Field(default_factory=list)


def slo_below_floor(
    model: BatchTimeModel,
    slo_ms: float,
    batch: int,
    in_flight: int = 1,
    model_error: float = 0.25,
    int8_possible: bool = False,
) -> FloorVerdict:
    """The SLO against `in_flight` batches of `batch` served one after another (the last waits
    for all): infeasible when the floor alone exceeds it, doubtful when the model's time is
    within `model_error` of it; with what would make it feasible."""
    floor_ms = in_flight * model.floor_ms(batch)
    model_ms = in_flight * model.batch_ms(batch)
    feasible = model_ms <= slo_ms
    within = feasible and model_ms * (1 + model_error) > slo_ms
    remedies = []
    if not feasible or within:
        launches_ms = model.loop_steps * model.loop_step_overhead_ms
        if launches_ms:
            remedies.append(
                "a decoder loop without per-step launches (CUDA graphs: torch.compile "
                "mode='reduce-overhead', or a fused engine such as TensorRT-LLM's Whisper): "
                f"eager PyTorch spends {model.loop_step_overhead_ms:.1f} ms a step launching "
                f"kernels, {launches_ms / 1e3:.2f} s a batch"
            )
        if launches_ms > slo_ms:
            # The host's launches alone exceed the SLO: batching, 8-bit weights and a faster
            # GPU shorten the device's work, not these.
            remedies.append("shorter transcripts (fewer decoder steps a clip)")
        else:
            fitting = int(slo_ms // model.batch_ms(batch))
            if in_flight > 1 and fitting >= 1:
                remedies.append(
                    f"fewer batches in flight per GPU: {fitting} fit the SLO; spread the rest "
                    "over more GPUs"
                )
            if batch > 1:
                remedies.append("smaller batches (dynamic batching with a short max queue delay)")
            if int8_possible:
                remedies.append("INT8 (or FP8) weights and activations: about half the floor time")
            remedies.append("a GPU with more compute and bandwidth")
    return FloorVerdict(
        slo_ms=slo_ms,
        batch=batch,
        in_flight=in_flight,
        floor_ms=floor_ms,
        model_ms=model_ms,
        ratio_to_floor=slo_ms / floor_ms if floor_ms > 0 else math.inf,
        feasible=feasible,
        within_error=within,
        remedies=remedies,
    )
