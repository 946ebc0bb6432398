"""benchmarks/whisper_loop.py builds the Whisper models the advisor sizes: the same parameter
counts (whole and encoder), decoder layers and width as advisor/workload/architectures.py's
published table (meta device, no weights)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def whisper_loop():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # it imports gemm_attention_peak beside it
    try:
        import whisper_loop

        yield whisper_loop
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


@pytest.mark.parametrize("name", ["whisper-small", "whisper-large-v3"])
def test_the_benchmark_builds_the_models_the_advisor_sizes(whisper_loop, name):
    from advisor.workload.architectures import PUBLISHED_ENCODERS

    model, config = whisper_loop.build(name, "meta", "float16")
    architecture = PUBLISHED_ENCODERS[name]
    assert sum(p.numel() for p in model.parameters()) == architecture.parameters
    assert sum(p.numel() for p in model.model.encoder.parameters()) == (
        architecture.encoder_parameters
    )
    assert config.decoder_layers == architecture.decoder_layers
    assert config.d_model == architecture.hidden_size


def tiny_whisper(encoder_layers: int, decoder_layers: int):
    """A small random Whisper (64 wide, 4 heads, 16 mel bins, 100 frames) in float32."""
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(
        d_model=64, encoder_layers=encoder_layers, decoder_layers=decoder_layers,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
        decoder_ffn_dim=128, num_mel_bins=16, vocab_size=300, max_source_positions=50,
        max_target_positions=32, pad_token_id=1, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=3, attn_implementation="sdpa",
    )  # fmt: skip
    return WhisperForConditionalGeneration(config).eval(), config


def test_the_graph_decoder_step_is_transformers_decoder_step(whisper_loop):
    """The `--cuda-graphs` loop times the same arithmetic as transformers' Whisper decoder:
    on the CPU (no capture), a small random model's greedy steps give the same logits and
    tokens as WhisperForConditionalGeneration with its own caches, step after step."""
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    model, config = tiny_whisper(encoder_layers=2, decoder_layers=3)
    features = torch.randn(3, config.num_mel_bins, 2 * config.max_source_positions)
    start = config.decoder_start_token_id
    steps = 6
    with torch.inference_mode():
        encoded = model.model.encoder(features).last_hidden_state
        loop = whisper_loop.GraphDecoder(model, encoded, start, max_steps=steps)
        ours = [loop.step()[:, -1].clone() for _ in range(steps)]
        theirs, token, past = [], torch.full((3, 1), start), None
        for _ in range(steps):
            out = model(
                encoder_outputs=BaseModelOutput(last_hidden_state=encoded),
                decoder_input_ids=token, past_key_values=past, use_cache=True,
            )  # fmt: skip
            theirs.append(out.logits[:, -1])
            token, past = out.logits[:, -1].argmax(-1, keepdim=True), out.past_key_values
        loop.reset()
        again = loop.step()[:, -1]
    for step, (mine, reference) in enumerate(zip(ours, theirs, strict=True)):
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-4, msg=f"step {step}")
    # A reset starts the loop over: its first step is the first step again.
    torch.testing.assert_close(again, ours[0])


def test_the_compiled_step_is_the_same_step(whisper_loop):
    """`--compile` times torch.compile's version of the same step: on the CPU (inductor's C++
    backend) it gives the eager step's logits, step after step, and starts over on reset."""
    import torch

    model, _ = tiny_whisper(encoder_layers=1, decoder_layers=2)
    with torch.inference_mode():
        encoded = model.model.encoder(torch.randn(2, 16, 100)).last_hidden_state
        eager = whisper_loop.GraphDecoder(model, encoded, 3, max_steps=4)
        expected = [eager.step().clone() for _ in range(4)]
        loop = whisper_loop.GraphDecoder(model, encoded, 3, max_steps=4)
        step = torch.compile(loop.step, fullgraph=True, dynamic=False)
        got = [step().clone() for _ in range(4)]
        loop.reset()
        first = step()
    for mine, reference in zip(got, expected, strict=True):
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(first, expected[0], rtol=1e-4, atol=1e-4)
