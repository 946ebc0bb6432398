"""The Whisper decoder loop captured as a CUDA graph, measured on an H100
(data/reference/h100_whisper_loop/whisper_graph_*.json, benchmarks/whisper_loop.py
--cuda-graphs), fitted by advisor/sizing/speech_loop.py's graph_loop_fit and used to size the
loop of an engine that captures its decoder (torch.compile)."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.sizing.forward_model import floor_model
from advisor.sizing.forward_sizing import CARRIED_ERROR, size_forward_stage
from advisor.sizing.speech_loop import (
    compiled_deviation,
    graph_loop_fit,
    shipped_graph_measurements,
)
from advisor.workload.architectures import PUBLISHED_ENCODERS, architecture_for
from advisor.workload.gpus import get_gpu
from advisor.workload.profile import StageProfile

FILES = {Path(m.source).name: m for m in shipped_graph_measurements()}
MEASURED = {m.rows[0].model: m for name, m in FILES.items() if "compiled" not in name}
"""The first H100's run of each model (batches 1 to 64 or 128); the second H100's files
(`whisper_graph_compiled_*.json`) repeat some batches and add torch.compile's step."""


def _stage(gpu: str, model: str = "openai/whisper-small") -> StageProfile:
    return StageProfile(
        name="asr",
        kind="forward",
        model=model,
        modality="audio",
        request_rate_rps=60,
        slo={"e2e_ms": 2000},
        gpu={"type": gpu},
        precision={"dtype": "float16"},
    )


def _rows(model: str):
    """(batch, measured ms a step, the step's floor) of the shipped graph rows of `model`."""
    measured = MEASURED[model]
    gpu = get_gpu(measured.gpu)
    found = []
    for row in measured.rows:
        floor = floor_model(PUBLISHED_ENCODERS[model], gpu, row.dtype, decode_steps=row.steps)
        found.append((row.batch, row.graph_loop_ms / row.steps, floor.step_floor_ms(row.batch)))
    return found


def test_both_models_were_measured_with_and_without_graphs():
    assert set(MEASURED) == {"whisper-small", "whisper-large-v3"}
    assert len(FILES) == 4
    for measured in FILES.values():
        assert get_gpu(measured.gpu).name == "H100-SXM"
        assert "--cuda-graphs" in measured.command
        for row in measured.rows:
            # The graph removes the launches: every captured loop is faster than the eager one.
            assert row.graph_loop_ms is not None and row.graph_loop_ms < row.loop_ms / 1.8


@pytest.mark.parametrize("model", ["whisper-small", "whisper-large-v3"])
def test_every_graph_step_is_above_its_floor_and_grows_with_the_batch(model):
    """The floor is a lower bound; unlike the eager loop, the captured step is the device's own
    work, so it grows with the batch (the cross-attention's reads)."""
    rows = _rows(model)
    for batch, step_ms, floor_ms in rows:
        assert step_ms > floor_ms, (batch, step_ms, floor_ms)
    steps = [step_ms for _, step_ms, _ in sorted(rows)]
    assert steps == sorted(steps) and steps[-1] > 2.5 * steps[0]


@pytest.mark.parametrize("model", ["whisper-small", "whisper-large-v3"])
def test_the_fit_follows_its_own_rows(model):
    fit = graph_loop_fit(PUBLISHED_ENCODERS[model])
    assert fit is not None and fit.measured_model == model
    assert fit.worst_error < 0.05  # rows of both H100s
    # About 0.07 ms a decoder layer a step that no batch removes, and the rest near the floor.
    assert 0.05 < fit.fixed_ms_per_layer < 0.1
    assert 0.6 < fit.efficiency < 0.85


def test_one_models_fit_predicts_the_other_models_loop():
    """Held out: whisper-small's fit (12 decoder layers) predicts every measured step of
    large-v3 (32 layers), which it never saw, within 10% (measured: +1% to +5%)."""
    small = graph_loop_fit(PUBLISHED_ENCODERS["whisper-small"])
    layers = PUBLISHED_ENCODERS["whisper-large-v3"].decoder_layers
    for batch, step_ms, floor_ms in _rows("whisper-large-v3"):
        predicted = small.step_ms(layers, floor_ms)
        assert abs(predicted / step_ms - 1) < 0.10, (batch, predicted, step_ms)


def test_a_model_never_measured_takes_the_nearest_in_decoder_layers():
    fit = graph_loop_fit(PUBLISHED_ENCODERS["whisper-medium"])  # 24 decoder layers
    assert fit is not None and fit.measured_model == "whisper-large-v3"
    bert, _ = architecture_for("bert-base")
    assert bert is not None and graph_loop_fit(bert) is None  # no decoder, no loop


def test_torch_compile_sizes_the_loop_from_the_graph_fit():
    """On the H100 (the model and GPU measured) the stage is sized from the fit, with the
    measured rows' batch times; on an L4 the fit is carried with the carried error; eager
    PyTorch's loop, launch-bound, costs more at every batch on the H100."""
    own = size_forward_stage(_stage("H100-SXM"), "torch_compile", [])
    assert own is not None and own.basis == "measured ladder"
    # The error covers torch.compile's own step, which strays from the fit by up to 38%.
    assert own.error == pytest.approx(compiled_deviation()) and own.error > 0.25
    # ... and says so, not the ladder fit's rule (its largest error, at least 20%)
    assert own.error_why == "torch.compile's own step measured up to 38% from the captured-loop fit"
    assert own.batch_time.loop_efficiency is not None
    assert "whisper_graph_small.json" in own.basis_words
    assert "encoder's pass at its floor" in own.basis_words
    for batch, step_ms, _ in _rows("whisper-small"):
        loop_ms = own.batch_time.batch_ms(batch) - own.batch_time.encoder_floor_ms(batch)
        assert loop_ms == pytest.approx(100 * step_ms, rel=0.05)
    eager = size_forward_stage(_stage("H100-SXM"), "pytorch", [])
    for batch in (1, 8, 32, 64):
        assert eager.batch_time.batch_ms(batch) > 1.5 * own.batch_time.batch_ms(batch)
    carried = size_forward_stage(_stage("L4"), "torch_compile", [])
    assert carried.basis == "carried ladder" and carried.error == CARRIED_ERROR
    assert "carried to whisper-small on L4" in carried.basis_words
    assert carried.gpus_range is not None and carried.gpus_range[0] < carried.gpus_range[1]


def test_without_the_graph_rows_torch_compile_is_the_floor_again(tmp_path):
    """The fit reads only shipped rows: a folder without them leaves the floor (a bound)."""
    assert graph_loop_fit(PUBLISHED_ENCODERS["whisper-small"], reference_dir=str(tmp_path)) is None


def test_the_docs_figures_are_what_the_sizing_gives():
    """docs/forward-serving.md quotes samples/s a GPU for whisper-small on torch_compile and
    eager PyTorch, on an H100 and an L4: those are size_forward_stage's."""
    doc = " ".join(
        (Path(__file__).resolve().parents[2] / "docs" / "forward-serving.md").read_text().split()
    )

    def per_gpu(gpu: str, framework: str) -> str:
        sized = size_forward_stage(_stage(gpu), framework, [])
        return f"{sized.batching.samples_per_s_per_gpu:.0f}"

    h100 = f"H100 about {per_gpu('H100-SXM', 'torch_compile')} samples/s a GPU on `torch_compile`"
    assert f"{h100} against {per_gpu('H100-SXM', 'pytorch')} on eager PyTorch" in doc
    assert f"L4 {per_gpu('L4', 'torch_compile')} against {per_gpu('L4', 'pytorch')}" in doc
    fit = graph_loop_fit(PUBLISHED_ENCODERS["whisper-small"])
    assert f"{fit.fixed_ms_per_layer:.3f} ms a decoder layer a step" in doc
    assert f"{fit.efficiency:.0%} of the step floor's speed" in doc


def test_the_eager_loop_note_says_what_a_captured_loop_measured():
    """The eager stage's note names the remedy with its measured figure (0.085-0.096 ms a
    decoder layer a step at batch 1, against eager's 0.48)."""
    eager = size_forward_stage(_stage("L4"), "pytorch", [])
    (note,) = [n for n in eager.notes if n.startswith("on eager PyTorch the loop is launch-bound")]
    assert "captured as a CUDA graph, the same loop took 0.085-0.096 ms a decoder layer" in note


def test_the_captured_loop_repeats_on_another_h100_and_the_eager_loop_does_not():
    """Every batch timed on both H100s: the captured loop within 3% (the device's work), the
    eager loop up to 2x apart (the host's launches: another host's CPU)."""
    for model, again in (("whisper-small", "whisper_graph_compiled_small.json"),
                         ("whisper-large-v3", "whisper_graph_compiled_large.json")):  # fmt: skip
        first = {row.batch: row for row in MEASURED[model].rows}
        rows = FILES[again].rows
        assert rows
        for row in rows:
            assert abs(row.graph_loop_ms / first[row.batch].graph_loop_ms - 1) < 0.03
        assert max(row.loop_ms / first[row.batch].loop_ms for row in rows) > 1.5


def test_torch_compiles_own_step_is_faster_at_batch_one_and_slower_at_64():
    """The step compiled by torch.compile, then captured: 15% faster than eager's kernels
    captured at batch 1, 62% slower at 64. Neither side bounds the other, so the sizing takes
    the fit with an error that covers the worst (compiled_deviation)."""
    rows = {row.batch: row for row in FILES["whisper_graph_compiled_small.json"].rows}
    assert rows[1].compiled_graph_loop_ms < 0.9 * rows[1].graph_loop_ms
    assert rows[64].compiled_graph_loop_ms > 1.5 * rows[64].graph_loop_ms
    assert 0.3 < compiled_deviation() < 0.45


def test_the_eager_note_says_the_launches_follow_the_host():
    """The eager rows of the other two H100 hosts (0.52-1.23 ms a layer a step against the
    sizing's 0.48) are stated beside the figure the sizing uses."""
    eager = size_forward_stage(_stage("L4"), "pytorch", [])
    (note,) = [n for n in eager.notes if n.startswith("on eager PyTorch the loop is launch-bound")]
    assert "on other H100 hosts the same eager loop took 0.52-1.23 ms a decoder layer" in note


def test_the_fleet_answer_gives_the_reason_for_the_error():
    """The torch_compile option's basis words give the compiled step's spread as the reason
    for its 38%, not the ladder fit's rule."""
    from advisor.sizing.forward_fleet import forward_options

    stage = _stage("H100-SXM").model_copy(update={"peak_request_rate_rps": 20})
    options, _ = forward_options(stage, "torch_compile", [])
    words = options[0].basis.error_words or ""
    assert "assumed error 38% (torch.compile's own step measured up to 38%" in words
    assert "at least 20%" not in words


def test_the_step_fit_recovers_a_known_step_and_never_a_negative_fixed_time():
    """_fit_steps on exact points returns their fixed time and efficiency; points that would
    need a negative fixed time get none, and the floor stretched to fit them."""
    from advisor.sizing.speech_loop import _fit_steps

    floors = [0.1, 0.5, 2.0, 6.0]
    fixed, efficiency = _fit_steps([(f, 0.2 + f / 0.8) for f in floors])
    assert fixed == pytest.approx(0.2) and efficiency == pytest.approx(0.8)
    fixed, efficiency = _fit_steps([(f, 2 * f - 0.05) for f in floors])
    assert fixed == 0.0 and 0.5 < efficiency < 0.6  # the relative fit of a slope near 2
