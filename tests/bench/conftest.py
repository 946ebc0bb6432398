"""Shared bench fixtures: tiny random-weight checkpoints written once per machine (model cache)."""

from __future__ import annotations

import pytest

from bench.models import resolve_model
from bench.schema import ModelInfo


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


# --------------------------------------------------------------------------- store backends


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server: the one scripts/test.sh started ($ADVISOR_TEST_PG_URL and
    $ADVISOR_TEST_PG_ROOT), else a throwaway one started here, else the test is skipped."""
    import os

    from tests.pg_server import ROOT_ENV, URL_ENV, ThrowawayPostgres, find_bindir

    if os.environ.get(URL_ENV) and os.environ.get(ROOT_ENV):
        yield ThrowawayPostgres.attach(os.environ[ROOT_ENV])
        return
    if find_bindir() is None:
        pytest.skip(
            "PostgreSQL tests skipped: no initdb on PATH or under /usr/lib/postgresql/*/bin "
            "(apt-get install postgresql, or set ADVISOR_TEST_PG_URL and ADVISOR_TEST_PG_ROOT)"
        )
    server = ThrowawayPostgres.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    """A fresh, empty store location on each backend: a SQLite file or a new PG database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/results.sqlite"
    return request.getfixturevalue("postgres").create_database()
