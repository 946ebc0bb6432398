"""Shared bench fixtures: tiny random-weight checkpoints written once per machine (model cache)."""

from __future__ import annotations

import pytest

from bench.core.schema import ModelInfo
from bench.engines.models import resolve_model


@pytest.fixture(scope="session")
def tiny_llama() -> ModelInfo:
    """tiny-llama at float32 (CPU friendly), written to the model cache on first use (~5 s)."""
    return resolve_model("tiny-llama", dtype="float32")


@pytest.fixture(scope="session")
def tiny_bert() -> ModelInfo:
    return resolve_model("tiny-bert", dtype="float32")


@pytest.fixture(scope="session")
def tiny_resnet() -> ModelInfo:
    return resolve_model("tiny-resnet", dtype="float32")


@pytest.fixture(scope="session")
def tiny_vit() -> ModelInfo:
    return resolve_model("tiny-vit", dtype="float32")
