"""RunResult.engine as a typed model: every stored run still loads, and nothing it held is lost."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bench.core.engine_facts import EngineFacts, LaunchedServer, PrometheusSample, RunEngine
from bench.core.schema import RunResult
from bench.storage.store import ResultStore

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_RUN_FILES = sorted((ROOT / "data" / "reference").glob("*_runs.json"))
V1_STORE = Path(__file__).parent / "data" / "store_v1.sqlite"

SERVER_FIELDS = {
    "server": "name",
    "server_version": "version",
    "server_command": "command",
    "server_log": "log",
    "server_startup_s": "startup_s",
    "server_args": "args",
}


def stored_runs(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["runs"]


def read_back(engine: RunEngine, key: str) -> Any:
    """The value a flat key of an older result has in the typed model (field, server, extra)."""
    if key in SERVER_FIELDS:
        assert engine.server is not None, key
        return getattr(engine.server, SERVER_FIELDS[key])
    if key in type(engine).model_fields and key != "extra":
        value = getattr(engine, key)
        if isinstance(value, list):
            return [v.model_dump() if hasattr(v, "model_dump") else v for v in value]
        return value.model_dump() if hasattr(value, "model_dump") else value
    assert key in engine.extra, f"{key} is neither a field nor kept in extra"
    return engine.extra[key]


def test_there_are_shipped_runs_to_check() -> None:
    assert len(REFERENCE_RUN_FILES) >= 8


@pytest.mark.parametrize("path", REFERENCE_RUN_FILES, ids=lambda p: p.name)
def test_every_shipped_run_loads_and_keeps_every_engine_fact(path: Path) -> None:
    runs = stored_runs(path)
    assert runs
    for raw in runs:
        run = RunResult.model_validate(raw)
        stored = raw.get("engine", {})
        if isinstance(stored.get("extra"), dict):  # stored typed: read back as it was written
            assert run.engine.model_dump(mode="json") == stored, raw["run_id"]
            continue
        for key, value in stored.items():  # stored flat, before the typed model
            assert read_back(run.engine, key) == value, (raw["run_id"], key)


def test_the_typed_fields_are_lifted_out_of_a_flat_report() -> None:
    """A vLLM run of the shipped files: version and CUDA graphs are fields, its own options are
    under its own names in extra, the worker's exit and wall time are the run's fields."""
    runs = [
        run
        for path in REFERENCE_RUN_FILES
        for run in (RunResult.model_validate(raw) for raw in stored_runs(path))
        if run.engine.framework == "vllm"
    ]
    assert runs
    engine = runs[0].engine
    assert engine.version and engine.cuda_graphs is not None
    assert "max_num_seqs" in engine.extra and "version" not in engine.extra
    assert engine.wall_s is not None and "wall_s" not in engine.extra


def test_a_launched_server_becomes_its_model() -> None:
    launched = [
        run
        for path in REFERENCE_RUN_FILES
        for raw in stored_runs(path)
        if "server_command" in raw.get("engine", {})
        for run in [RunResult.model_validate(raw)]
    ]
    assert launched, "the shipped files hold a run of a launched server"
    server = launched[0].engine.server
    assert isinstance(server, LaunchedServer) and server.name and server.command
    assert not any(key.startswith("server") for key in launched[0].engine.extra)


def test_stored_prometheus_samples_keep_every_value() -> None:
    """The shipped runs of a served vLLM keep every scraped value: the soak/pulse run stored
    its scrapes as flat dicts, later runs as the sample model."""
    scraped = [
        raw
        for path in REFERENCE_RUN_FILES
        for raw in stored_runs(path)
        if raw.get("server_metrics")
    ]
    assert scraped
    for raw in scraped:
        run = RunResult.model_validate(raw)
        assert len(run.server_metrics) == len(raw["server_metrics"])
        for sample, flat in zip(run.server_metrics, raw["server_metrics"], strict=True):
            assert sample.t_ns == flat["t_ns"]
            if isinstance(flat.get("values"), dict):  # stored since as the sample model itself
                assert sample.values == flat["values"]
            else:  # the older flat scrape: every key but the time is a value
                assert sample.values == {k: v for k, v in flat.items() if k != "t_ns"}


def test_a_flat_trtllm_scrape_keeps_its_json_stats() -> None:
    sample = PrometheusSample.model_validate({"t_ns": 5, "t_received_ns": 7, "json": [{"a": 1}]})
    assert sample.json_stats == [{"a": 1}] and sample.values == {} and sample.t_received_ns == 7


def test_a_backends_own_facts_are_kept_as_json_holds_them() -> None:
    """Backends report tuples, paths and models (ONNX Runtime GenAI's precision); a stored run
    held their JSON form before the typed model, and extra holds the same."""
    from bench.core.config import Precision

    facts = EngineFacts.model_validate(
        {"buckets": (1, 4), "model_dir": Path("/m"), "precision": Precision(), "dtype": "float16"}
    )
    assert facts.extra["buckets"] == [1, 4] and facts.extra["model_dir"] == "/m"
    assert facts.extra["precision"] == Precision().model_dump(mode="json")
    assert facts.dtype == "float16" and "dtype" not in facts.extra


def test_engine_facts_refuse_a_wrong_type() -> None:
    with pytest.raises(ValueError, match="cuda_graphs"):
        EngineFacts.model_validate({"cuda_graphs": "sometimes"})


def test_the_new_shape_round_trips_through_json() -> None:
    for path in REFERENCE_RUN_FILES:
        for raw in stored_runs(path):
            run = RunResult.model_validate(raw)
            again = RunResult.model_validate_json(run.model_dump_json())
            assert again.engine == run.engine
            assert again.server_metrics == run.server_metrics


def test_shipped_runs_round_trip_through_the_sqlite_store(tmp_path: Path) -> None:
    runs = [RunResult.model_validate(raw) for p in REFERENCE_RUN_FILES for raw in stored_runs(p)]
    with ResultStore(f"sqlite:///{tmp_path}/engine.sqlite") as store:
        for run in runs:
            store.put_run(run, [])
        for run in runs:
            stored = store.get_run(run.run_id)
            assert stored.engine == run.engine and stored.server_metrics == run.server_metrics


def test_the_previous_release_store_fixture_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "v1.sqlite"
    shutil.copy(V1_STORE, path)
    with sqlite3.connect(path) as raw:
        stored = [json.loads(row[0])["engine"] for row in raw.execute(
            "SELECT result_json FROM runs ORDER BY run_id")]  # fmt: skip
    with ResultStore(path) as store:
        runs = sorted(store.list_runs(), key=lambda run: run.run_id)
    assert len(runs) == len(stored) == 2
    for run, engine in zip(runs, stored, strict=True):
        for key, value in engine.items():
            assert read_back(run.engine, key) == value
