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
