"""What eager PyTorch's encoder-decoder loop costs, read from the shipped Whisper measurement
(data/reference/h100_whisper_loop/, made by benchmarks/whisper_loop.py): transformers' Whisper on
an H100, a greedy loop of 100 tokens at batches 1 to 64. The loop was launch-bound at every batch:
each step costs the host's kernel launches, about the same per decoder layer whatever the batch,
far above the floor the advisor sizes speech stages with (which assumes a loop without per-step
launch cost: CUDA graphs or a fused engine). The speech stages' notes say so with this figure.

The same loop was also measured as a serving engine runs it (`whisper_graph_*.json`, made with
`--cuda-graphs`): the decoder step captured once as a CUDA graph and replayed. A step then costs
a fixed time (each kernel's own time on the GPU, about 0.09 ms a decoder layer) plus the step's
floor stretched by an efficiency; `graph_loop_fit` fits both to those rows and sizes the loop of
an engine that captures its decoder (`GRAPH_LOOP_FRAMEWORKS`).
"""

from __future__ import annotations

import json
import math
import statistics
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, Field

from advisor.sizing.forward_model import BatchTimeModel, calibrate, floor_model
from advisor.sizing.measured import REPO_ROOT
from advisor.workload.architectures import PUBLISHED_ENCODERS, Architecture
from advisor.workload.gpus import GpuSpec, find_gpu

FOLDER = "h100_whisper_loop"
FILE = "whisper_loop_reverse.json"
"""The falling-order run (5 rounds): its rows are the steadier (data/reference/README.md)."""


class LoopRow(BaseModel):
    """One measured batch (benchmarks/whisper_loop.py's row)."""

    model: str
    dtype: str
    batch: int = Field(gt=0)
    steps: int = Field(gt=0)
    encoder_ms: float = Field(gt=0)
    batch_ms: float = Field(gt=0)
    loop_ms: float = Field(gt=0)
    graph_loop_ms: float | None = Field(
        None, gt=0, description="With --cuda-graphs: cross-attention K/V once + the replays."
    )
    compiled_graph_loop_ms: float | None = Field(
        None, gt=0, description="With --compile: the same with the step compiled first."
    )


class LoopMeasurement(BaseModel):
    """The rows of one run of benchmarks/whisper_loop.py and the GPU they ran on."""

    command: str
    gpu: str
    rows: list[LoopRow]
    source: str = Field(description="The file, relative to the repository.")

    def step_ms_per_layer(self, captured: bool = False, batch: int | None = None) -> list[float]:
        """Each row's loop time a step a decoder layer (ms): the eager loop's, or with
        `captured` the graph-captured loop's (rows that have one); only `batch`'s where given."""
        found = []
        for row in self.rows:
            architecture = PUBLISHED_ENCODERS.get(row.model)
            loop_ms = row.graph_loop_ms if captured else row.loop_ms
            if batch is not None and row.batch != batch:
                continue
            if architecture is not None and architecture.decoder_layers and loop_ms is not None:
                found.append(loop_ms / row.steps / architecture.decoder_layers)
        return found

    def median_step_ms_per_layer(self) -> float:
        return statistics.median(self.step_ms_per_layer())


def read_loop_measurement(path: Path) -> LoopMeasurement:
    data = json.loads(path.read_text(encoding="utf-8"))
    return LoopMeasurement(
        command=data["command"],
        gpu=data["environment"]["gpu"],
        rows=[LoopRow.model_validate(row) for row in data["rows"]],
        source=f"data/reference/{FOLDER}/{path.name}",
    )


SHIPPED_FOLDER = REPO_ROOT / "data" / "reference"
"""The repository's own data/reference: the measurement ships with the code that reads it, as a
published table does (not the reference folder a caller passes for runs to compare)."""


@lru_cache(maxsize=2)
def shipped_loop_measurement(reference_dir: str | None = None) -> LoopMeasurement | None:
    """The shipped measurement, or None where the folder lacks it."""
    folder = Path(reference_dir) if reference_dir is not None else SHIPPED_FOLDER
    path = folder / FOLDER / FILE
    return read_loop_measurement(path) if path.is_file() else None


GRAPH_FILES = "whisper_graph_*.json"
"""The runs made with `--cuda-graphs` (one file per model and run: two H100s; the second run's
files also hold torch.compile's compiled step, `--compile`)."""


@lru_cache(maxsize=2)
def shipped_graph_measurements(reference_dir: str | None = None) -> tuple[LoopMeasurement, ...]:
    """The shipped runs with graph-captured loops; empty where the folder lacks them."""
    folder = (Path(reference_dir) if reference_dir is not None else SHIPPED_FOLDER) / FOLDER
    return tuple(read_loop_measurement(path) for path in sorted(folder.glob(GRAPH_FILES)))


SHIPPED_GRAPH_WORDS = f"data/reference/{FOLDER}/{GRAPH_FILES}"
COMPILED_FILES = f"data/reference/{FOLDER}/whisper_graph_compiled_*.json"
"""The files with torch.compile's compiled step beside the captured one."""

GRAPH_LOOP_FRAMEWORKS = ("torch_compile",)
"""Frameworks that run the decoder loop as captured CUDA graphs (torch.compile's reduce-overhead
mode, which the bench's `torch_compile` engine serves): sized with `graph_loop_fit`."""

EAGER_LOOP_FRAMEWORKS = ("pytorch",)
"""Frameworks whose decoder loop launches every kernel from Python, as measured: sized with the
measured step."""


def eager_step_ms(decoder_layers: int, reference_dir: str | None = None) -> float | None:
    """A decoder step's launch work on eager PyTorch: the measured median per decoder layer
    times the layers; None without the measurement or a decoder."""
    measured = shipped_loop_measurement(reference_dir)
    if measured is None or not decoder_layers:
        return None
    return measured.median_step_ms_per_layer() * decoder_layers


class EncoderFit(NamedTuple):
    """Eager PyTorch's encoder pass fitted to measured rows, and what it was measured on."""

    model: BatchTimeModel
    measured_model: str
    measured_gpu: GpuSpec

    def measured_on(self, model: str, gpu: GpuSpec) -> bool:
        """Whether the fit is of this model on this GPU type (else it is carried to them)."""
        return self.measured_model == model and self.measured_gpu == gpu


def eager_encoder_fit(
    architecture: Architecture, reference_dir: str | None = None
) -> EncoderFit | None:
    """Eager PyTorch's encoder pass (the forward before the loop) fitted to every measured
    batch (1 to 64: the overhead is the launch-bound batch of one, the efficiency the large
    batches' fraction of the floor): overhead and efficiency over the floor on the measured GPU
    (`forward_model.calibrate`, the ladder fit), with the Whisper model and GPU they were
    measured on. The rows of this architecture's
    own model where it was measured, else of the measured model nearest in encoder parameters
    (whisper-small and whisper-large-v3 reached 22-24% and 31% of the encoder's floor at batch
    8 to 64: a larger encoder keeps the GPU busier). None without the measurement, a catalogue
    GPU or an encoder-decoder."""
    measured = shipped_loop_measurement(reference_dir)
    gpu = find_gpu(measured.gpu) if measured is not None else None
    if measured is None or gpu is None or not architecture.encoder_parameters:
        return None
    models = {row.model for row in measured.rows if row.model in PUBLISHED_ENCODERS}
    if not models:
        return None

    def distance(name: str) -> float:
        other = PUBLISHED_ENCODERS[name].encoder_parameters or 1
        return abs(math.log(other / architecture.encoder_parameters))  # type: ignore[operator]

    chosen = architecture.name if architecture.name in models else min(models, key=distance)
    rows = [row for row in measured.rows if row.model == chosen]
    floor = floor_model(PUBLISHED_ENCODERS[chosen], gpu, rows[0].dtype) if rows else None
    if floor is None:
        return None
    points = [(row.batch, row.encoder_ms, f"{measured.source} batch {row.batch}") for row in rows]
    fitted = calibrate(floor, points)
    if fitted is floor:
        return None
    batches = sorted(row.batch for row in rows)
    error = fitted.fit_error or 0.0
    words = (
        f"eager PyTorch's {chosen} encoder on an {measured.gpu} at batches {batches[0]} to "
        f"{batches[-1]} ({measured.source}), within {error:.0%} of its rows"
    )
    return EncoderFit(fitted.model_copy(update={"basis": words}), chosen, gpu)


class GraphLoopFit(NamedTuple):
    """A graph-captured decoder step fitted to measured rows: step = fixed + floor / efficiency."""

    fixed_ms_per_layer: float
    efficiency: float
    worst_error: float
    measured_model: str
    measured_gpu: GpuSpec
    batches: tuple[int, ...]
    source: str

    def measured_on(self, model: str, gpu: GpuSpec) -> bool:
        return self.measured_model == model and self.measured_gpu == gpu

    def step_ms(self, decoder_layers: int, step_floor_ms: float) -> float:
        """One captured step of a decoder of `decoder_layers` whose step floor is given (ms)."""
        return self.fixed_ms_per_layer * decoder_layers + step_floor_ms / self.efficiency

    def applied_to(self, model: BatchTimeModel, decoder_layers: int) -> BatchTimeModel:
        """`model` (a floor with its loop) with its steps at this fit."""
        return model.model_copy(
            update={
                "loop_step_fixed_ms": self.fixed_ms_per_layer * decoder_layers,
                "loop_efficiency": self.efficiency,
            }
        )


def _fit_steps(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(fixed ms, efficiency) of t = fixed + floor / efficiency by least squares on relative
    errors (each step weighed by its own time: a batch of one counts as much as one of 128)."""
    floors, times = np.array(points).T
    # (fixed + k floor - t) / t for every point: rows [1/t, floor/t] against ones.
    (fixed, slope), *_ = np.linalg.lstsq(
        np.column_stack([1 / times, floors / times]), np.ones_like(times), rcond=None
    )
    if fixed < 0:  # no fixed time: the floor alone, stretched
        fixed, slope = 0.0, float(np.sum(floors / times) / np.sum((floors / times) ** 2))
    slope = max(slope, 1 / 1.5)  # no engine beats the floor by more than its error
    return float(fixed), float(min(1 / slope, 1.5))


def graph_loop_fit(
    architecture: Architecture, reference_dir: str | None = None
) -> GraphLoopFit | None:
    """The graph-captured loop of `architecture`'s decoder (eager's kernels captured, every
    shipped file's rows: two H100s), fitted: the rows of its own model where measured, else of
    the measured model nearest in decoder layers. Each row's step is its whole loop
    (cross-attention keys and values once, then the replays) over its steps; its floor is
    `decoder_loop`'s step on the measured GPU type. None without rows, a catalogue GPU or a
    decoder."""
    if not architecture.decoder_layers:
        return None
    found = [
        (measured, row)
        for measured in shipped_graph_measurements(reference_dir)
        for row in measured.rows
        if row.graph_loop_ms is not None and row.model in PUBLISHED_ENCODERS
    ]
    if not found:
        return None
    models = {row.model for _, row in found}

    def distance(name: str) -> float:
        layers = PUBLISHED_ENCODERS[name].decoder_layers or 1
        return abs(math.log(layers / architecture.decoder_layers))  # type: ignore[operator]

    chosen = architecture.name if architecture.name in models else min(models, key=distance)
    rows = [(m, row) for m, row in found if row.model == chosen]
    measured = rows[0][0]
    gpu = find_gpu(measured.gpu)
    layers = PUBLISHED_ENCODERS[chosen].decoder_layers
    if gpu is None or not layers:
        return None
    points = []
    for _, row in rows:
        floor = floor_model(PUBLISHED_ENCODERS[chosen], gpu, row.dtype, decode_steps=row.steps)
        if floor is None:
            return None
        points.append((floor.step_floor_ms(row.batch), row.graph_loop_ms / row.steps))
    if len({f for f, _ in points}) < 2:
        return None
    fixed, efficiency = _fit_steps(points)
    fit = GraphLoopFit(
        fixed / layers,
        efficiency,
        0.0,
        chosen,
        gpu,
        tuple(sorted({row.batch for _, row in rows})),
        ", ".join(sorted({m.source for m, _ in rows})),
    )
    worst = max(abs(fit.step_ms(layers, f) - t) / t for f, t in points)
    return fit._replace(worst_error=worst)


@lru_cache(maxsize=2)
def compiled_deviation(reference_dir: str | None = None) -> float | None:
    """How far torch.compile's own step (the same step compiled, then captured: the rows made
    with `--compile`) lies from the graph fit of its model, at worst, relative to the compiled
    step; None without compiled rows. Measured: 9-15% faster at batch 1, the same at 8, 62%
    slower at 64 (inductor's kernels for this step), so the fit is no bound either way."""
    worst = None
    for measured in shipped_graph_measurements(reference_dir):
        for row in measured.rows:
            architecture = PUBLISHED_ENCODERS.get(row.model)
            gpu = find_gpu(measured.gpu)
            if row.compiled_graph_loop_ms is None or architecture is None or gpu is None:
                continue
            fit = graph_loop_fit(architecture, reference_dir)
            floor = floor_model(architecture, gpu, row.dtype, decode_steps=row.steps)
            if fit is None or floor is None:
                continue
            predicted = fit.step_ms(
                architecture.decoder_layers or 0, floor.step_floor_ms(row.batch)
            )
            compiled = row.compiled_graph_loop_ms / row.steps
            deviation = abs(predicted - compiled) / compiled
            worst = deviation if worst is None else max(worst, deviation)
    return worst


def graph_loop_note(fit: GraphLoopFit, model: str, gpu: GpuSpec, steps: int) -> str:
    """Where a captured loop's step times come from."""
    what = "captured as a CUDA graph (eager PyTorch's kernels)"
    carried = (
        "" if fit.measured_on(model, gpu) else f", carried to {model} on {gpu.name} (its floor)"
    )
    compiled = compiled_deviation()
    if compiled is not None:
        carried += (
            f"; torch.compile's own step, compiled then captured, measured up to "
            f"{compiled:.0%} from this fit (faster at batch 1, slower at 64: {COMPILED_FILES})"
        )
    return (
        f"the loop's {steps} steps a clip timed as a decoder step {what}: "
        f"{fit.fixed_ms_per_layer:.3f} ms a decoder layer a step (each kernel's own time on the "
        f"GPU) plus the step's floor at {fit.efficiency:.0%} of its speed, fitted to "
        f"{fit.measured_model}'s loop on an {fit.measured_gpu.name} at batches "
        f"{fit.batches[0]} to {fit.batches[-1]} ({fit.source}; within {fit.worst_error:.0%} of "
        f"its rows){carried}"
    )


def eager_encoder_note(fit: EncoderFit, model: str, gpu: GpuSpec, error: float) -> str:
    """Where the encoder's batch times come from when `eager_encoder_fit` sized them."""
    measured = shipped_loop_measurement()
    assert measured is not None  # callers ask after eager_encoder_fit found it
    carried = (
        ""
        if fit.measured_on(model, gpu)
        else f", carried to {model} on {gpu.name} (its floor with their overhead and efficiency)"
    )
    return (
        f"no measured batch ladder of eager PyTorch on {gpu.name} for {model}: the encoder's "
        f"pass is sized from {fit.measured_model}'s on an {measured.gpu} ({measured.source})"
        f"{carried}; the loop's steps from its launches (below); error assumed {error:.0%}"
    )


def eager_loop_note(
    decoder_layers: int, steps: int, applied: bool, reference_dir: str | None = None
) -> str:
    """What the measured launch-bound step says about this loop on eager PyTorch, and whether
    the sizing above counts it (it does for eager PyTorch without a ladder of the model)."""
    measured = shipped_loop_measurement(reference_dir)
    assert measured is not None  # callers ask after eager_step_ms found it
    per_layer = measured.median_step_ms_per_layer()
    batches = sorted({row.batch for row in measured.rows})
    least = per_layer * decoder_layers * steps
    counted = (
        "each step is sized at the longer of that and the device's floor"
        if applied
        else "the floor assumes a loop without per-step launch cost (CUDA graphs, a compiled "
        "decoder or a fused engine)"
    )
    text = (
        f"on eager PyTorch the loop is launch-bound: {per_layer:.2f} ms a decoder layer a step "
        f"at every batch from {batches[0]} to {batches[-1]} on an {measured.gpu} "
        f"({measured.source}), so {steps} steps of {decoder_layers} layers take at least about "
        f"{least / 1e3:.2f} s a batch (the host's work: a slower GPU can take longer); {counted}"
    )
    graphs = shipped_graph_measurements(reference_dir)
    elsewhere = [ms for graph in graphs for ms in graph.step_ms_per_layer()]
    if elsewhere:
        # The launches are the host's work: the same GPU type on other hosts took longer.
        text += (
            f"; on other H100 hosts the same eager loop took "
            f"{min(elsewhere):.2f}-{max(elsewhere):.2f} ms a decoder layer a step "
            f"({SHIPPED_GRAPH_WORDS}): the host's CPU sets it, so measure on yours"
        )
    graphed = [ms for graph in graphs for ms in graph.step_ms_per_layer(captured=True, batch=1)]
    if graphed:
        # What the remedy the feasibility check names (a loop without per-step launches) was
        # measured to save, on the same GPU type.
        text += (
            f"; captured as a CUDA graph, the same loop took {min(graphed):.3f}-"
            f"{max(graphed):.3f} ms a decoder layer a step at batch 1 on an {graphs[0].gpu} "
            f"({SHIPPED_GRAPH_WORDS}), what torch_compile's sizing uses"
        )
    return text


__all__ = [
    "EAGER_LOOP_FRAMEWORKS",
    "GRAPH_LOOP_FRAMEWORKS",
    "EncoderFit",
    "GraphLoopFit",
    "LoopMeasurement",
    "LoopRow",
    "compiled_deviation",
    "eager_encoder_fit",
    "eager_encoder_note",
    "eager_loop_note",
    "eager_step_ms",
    "graph_loop_fit",
    "graph_loop_note",
    "read_loop_measurement",
    "shipped_graph_measurements",
    "shipped_loop_measurement",
]
