"""The engine model's prefix-caching share against vLLM's own counters, on the shipped CPU runs
(data/reference/cpu_tiny-llama_prefix_reuse_runs.json: vLLM's CPU build, 128-token blocks)."""

from __future__ import annotations

import pytest

from advisor.sizing.engine_model.prefix import BLOCK_TOKENS, TrafficShape, prefix_reuse
from advisor.sizing.measured import measured_reference_runs
from advisor.sizing.prefix_validation import prefix_row, prefix_rows
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

FILE = "cpu_tiny-llama_prefix_reuse_runs.json"


@pytest.fixture(scope="module")
def runs():
    return measured_reference_runs(SHIPPED_REFERENCE_DIR)[FILE]


def test_each_reuse_kind_is_predicted_within_two_points_of_the_engines_counters(runs):
    rows = prefix_rows((run, FILE) for run in runs)
    by_kind = {row.reuse.split(" ")[0]: row for row in rows}
    assert set(by_kind) == {"prefix", "4-turn"}  # the caching-off run has no counters
    for row in rows:
        assert row.device.startswith("CPU") and row.framework == "vllm" and row.caching
        assert row.block_tokens == 128  # what the CPU build reported, not the GPU's 16
        assert row.queries and row.queries > 10_000
        assert abs(row.error_points) < 2.0, row


def test_the_engines_block_size_decides_the_conversation_share(runs):
    """With 16-token blocks the same conversations would find far more than was measured: the
    block size the engine reported is what makes the prediction right."""
    (run,) = [r for r in runs if r.config.workload.conversation is not None]
    row = prefix_row(run, FILE)
    traffic = TrafficShape.of_workload(run.config.workload)
    at_16 = prefix_reuse(traffic, True, BLOCK_TOKENS).cached_tokens / row.prompt_tokens
    assert at_16 - row.measured_share > 0.3
    assert abs(row.predicted_share - row.measured_share) < 0.02


def test_a_run_without_reuse_or_counters_has_no_row(runs):
    (off,) = [r for r in runs if r.config.prefix_caching is False]
    assert off.summary.prefix_cache_hit_rate is None and prefix_row(off) is None
    others = [
        run
        for file_runs in measured_reference_runs(SHIPPED_REFERENCE_DIR).values()
        for run in file_runs
        if run.config.workload.kind == "generate"
        and run.config.workload.prefix is None
        and run.config.workload.conversation is None
    ]
    assert others and all(prefix_row(run) is None for run in others)
