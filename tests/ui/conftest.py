"""AppTest fixtures: every page runs against a fresh temporary results store ($ADVISOR_STORE)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
APP = str(REPO / "app.py")


@pytest.fixture(autouse=True)
def restore_main_module():
    """AppTest's script runner replaces sys.modules["__main__"] with the page script and does
    not put it back; multiprocessing's spawn then re-runs that script in every worker process
    of later tests. Restore the real __main__ after each test."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture
def store_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "store.sqlite"
    monkeypatch.setenv("ADVISOR_STORE", str(path))
    monkeypatch.chdir(REPO)  # st.navigation resolves ui/*.py page paths from the app's folder
    return path


@pytest.fixture
def app_test(store_path: Path):
    """A fresh AppTest of app.py (the router) with a long enough timeout for a cold import."""
    from streamlit.testing.v1 import AppTest

    def make(page: str | None = None) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=60)
        if page is not None:
            at.switch_page(page)
        return at

    return make


def stored_run(store_path: Path, backend: str = "pytorch", model: str = "tiny-llama"):
    """A finished run with a few records, written straight into the store (no engine ran: the
    figures are made up for the page to draw and are labelled `ui-test` in the run's label)."""
    from bench.core.config import RunConfig
    from bench.core.schema import (
        MetricsSummary,
        Percentiles,
        RequestRecord,
        RunResult,
        RunStatus,
        Validity,
        ValidityStatus,
    )
    from bench.storage.store import ResultStore

    store = ResultStore(store_path)
    result = RunResult(
        config=RunConfig(backend=backend, model=model, label="ui-test fixture, not a measurement"),
        status=RunStatus.COMPLETED,
        command="python -m bench run --backend pytorch --model tiny-llama",
    )
    store.create_run(result)
    records = [
        RequestRecord(
            id=f"r{i}",
            start_ns=i * 1_000_000,
            chunk_ns=[i * 1_000_000 + 5_000_000 + k * 1_000_000 for k in range(4)],
            end_ns=i * 1_000_000 + 8_000_000 + i * 100_000,
            input_tokens=8,
            output_tokens=4,
        )
        for i in range(20)
    ]
    store.add_records(result.run_id, records)
    latency = Percentiles(mean=9.0, p50=9.0, p90=10.0, p99=11.0)
    result.summary = MetricsSummary(
        requests=20,
        successful=20,
        failed=0,
        duration_s=1.0,
        request_throughput_rps=20.0,
        output_throughput_tok_s=80.0,
        error_rate=0.0,
        ttft_ms=latency,
        e2e_ms=latency,
    )
    result.validity = Validity(status=ValidityStatus.VALID)
    store.update_run(result)
    store.close()
    return result
