"""Workload generation: determinism, distribution moments, token ranges, presets."""

from __future__ import annotations

import numpy as np
import pytest

from bench.core.config import ForwardWorkload, GenerateWorkload, LengthDistribution
from bench.core.errors import UserError
from bench.engines.backends.base import ForwardRequest, GenerateRequest
from bench.run.workload import (
    LONG_SEQUENCE_PRESETS,
    TOKEN_ID_OFFSET,
    RequestFactory,
    sample_lengths,
)

N = 200_000


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def test_fixed_and_zero_spread():
    assert set(sample_lengths(LengthDistribution(mean=7), 100, rng()).tolist()) == {7}
    dist = LengthDistribution(kind="lognormal", mean=9, spread=0)
    assert set(sample_lengths(dist, 100, rng()).tolist()) == {9}


@pytest.mark.parametrize("kind", ["uniform", "normal", "lognormal"])
def test_distributions_keep_mean_and_spread(kind):
    dist = LengthDistribution(kind=kind, mean=512, spread=100)
    values = sample_lengths(dist, N, rng(1))
    assert values.dtype == np.int64
    assert values.mean() == pytest.approx(512, rel=0.01)
    if kind == "uniform":
        assert values.min() == 412 and values.max() == 612
        assert values.std() == pytest.approx(np.sqrt(((201**2) - 1) / 12), rel=0.01)
    else:
        assert values.std() == pytest.approx(100, rel=0.02)


def test_lognormal_keeps_moments_when_skewed():
    # The "chat" shape: std = mean / 2; a naive lognormal(mean, std) would miss both moments.
    values = sample_lengths(LengthDistribution(kind="lognormal", mean=256, spread=128), N, rng(2))
    assert values.mean() == pytest.approx(256, rel=0.01)
    assert values.std() == pytest.approx(128, rel=0.03)
    assert values.min() >= 1


def test_clipping():
    dist = LengthDistribution(kind="normal", mean=100, spread=50, min=80, max=120)
    values = sample_lengths(dist, 10_000, rng())
    assert values.min() == 80 and values.max() == 120


def test_same_seed_same_requests():
    workload = GenerateWorkload(
        prompt_tokens=LengthDistribution(kind="uniform", mean=50, spread=20),
        output_tokens=LengthDistribution(kind="lognormal", mean=30, spread=10),
        seed=5,
    )
    first = [next(RequestFactory(workload, 1000)) for _ in range(1)]
    a = RequestFactory(workload, 1000)
    b = RequestFactory(workload, 1000)
    run_a = [next(a) for _ in range(300)]
    run_b = [next(b) for _ in range(300)]
    assert run_a == run_b
    assert first[0] == run_a[0]
    other = RequestFactory(workload, 1000, seed=6)
    assert [next(other) for _ in range(300)] != run_a
    assert [r.id for r in run_a[:3]] == ["r000001", "r000002", "r000003"]


def test_prompt_tokens_avoid_special_ids():
    factory = RequestFactory(GenerateWorkload(prompt_tokens=LengthDistribution(mean=2000)), 32000)
    request = next(factory)
    assert isinstance(request, GenerateRequest)
    tokens = np.asarray(request.prompt_token_ids)
    assert len(tokens) == 2000 and request.output_tokens == 128
    assert tokens.min() >= TOKEN_ID_OFFSET and tokens.max() < 32000
    tiny = next(RequestFactory(GenerateWorkload(prompt_tokens=LengthDistribution(mean=500)), 64))
    assert min(tiny.prompt_token_ids) >= 32 and max(tiny.prompt_token_ids) < 64


def test_generate_needs_vocab_size():
    with pytest.raises(UserError, match="vocabulary size"):
        RequestFactory(GenerateWorkload(), None)


def test_forward_requests():
    workload = ForwardWorkload(
        batch_size=8, sequence_length=LengthDistribution(kind="uniform", mean=64, spread=32)
    )
    requests = [next(RequestFactory(workload, None)) for _ in range(1)]
    factory = RequestFactory(workload, None)
    many = [next(factory) for _ in range(200)]
    assert many[0] == requests[0]
    assert all(isinstance(r, ForwardRequest) and r.batch_size == 8 for r in many)
    lengths = {r.sequence_length for r in many}
    assert min(lengths) >= 32 and max(lengths) <= 96 and len(lengths) > 10
    image = next(RequestFactory(ForwardWorkload(batch_size=4, image_size=224), None))
    assert image.image_size == 224 and image.sequence_length is None


def test_presets():
    assert LONG_SEQUENCE_PRESETS["long-4k"].prompt_tokens.mean == 4096
    assert LONG_SEQUENCE_PRESETS["long-8k"].prompt_tokens.mean == 8192
    assert LONG_SEQUENCE_PRESETS["long-8k"].output_tokens.mean == 256
    chat = LONG_SEQUENCE_PRESETS["chat"]
    assert chat.prompt_tokens.kind == "lognormal" and chat.prompt_tokens.mean == 512
    request = next(RequestFactory(LONG_SEQUENCE_PRESETS["long-4k"], 32000))
    assert len(request.prompt_token_ids) == 4096 and request.output_tokens == 256
