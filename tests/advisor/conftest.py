"""Advisor tests see a reference folder holding only the seed's published table.

The shipped data/reference also holds measured H200 runs; tests that reason about "no
measurement yet" must not depend on what a campaign added there, so the default folder is
pointed at a copy of the seed file. Tests of the shipped measurements pass the real folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from advisor.sizing import measured

SHIPPED_REFERENCE_DIR = measured.DEFAULT_REFERENCE_DIR


def reference_tables():
    """benchmarks/reference_tables.py (a script, not a package module), loaded by path: the
    generator of the measurement docs, whose checks the docs tests read."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "reference_tables.py"
    spec = importlib.util.spec_from_file_location("reference_tables", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SEED_FILE = "seed_a100_llama2_13b.json"


@pytest.fixture(autouse=True)
def seed_only_reference(tmp_path_factory: pytest.TempPathFactory, monkeypatch) -> Path:
    folder = tmp_path_factory.mktemp("reference")
    shutil.copy(SHIPPED_REFERENCE_DIR / SEED_FILE, folder / SEED_FILE)
    monkeypatch.setattr(measured, "DEFAULT_REFERENCE_DIR", folder)
    return folder


def shipped_h200_record():
    """A `bench calibrate` record derived from the shipped vLLM 16-bit llama-2-7b runs on the
    H200 (bench.core.calibration.record_from_runs): the record the calibration tests fit."""
    from advisor.sizing.measured import run_gpu_name
    from advisor.sizing.mechanics import mechanisms_of
    from advisor.sizing.serving_model import run_shape
    from bench.core.calibration import record_from_runs

    runs = [
        run
        for file_runs in measured.measured_reference_runs(SHIPPED_REFERENCE_DIR).values()
        for run in file_runs
        if run_shape(run) is not None
        and run_gpu_name(run) == "H200"
        and not mechanisms_of(run)
        and run.config.backend == "vllm"
        and run.config.model == "llama-2-7b"
        and run.config.precision.quantization is None
        and run.config.precision.kv_cache_dtype == "auto"
    ]
    return record_from_runs(runs)
