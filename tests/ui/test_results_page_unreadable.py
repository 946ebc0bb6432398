"""AppTest: one row the store cannot read (corrupt JSON, a newer release's) never takes the
Results page down; the readable runs are still listed (bench/storage/store.py skips and names
it)."""

from __future__ import annotations

import json

from sqlalchemy import text

from tests.ui.conftest import stored_run

PAGE = "ui/results_page.py"


def test_an_unreadable_row_does_not_break_the_results_page(app_test, store_path):
    from bench.storage.store import open_store

    run = stored_run(store_path)
    with open_store(store_path) as store:
        newer = {**json.loads(store.get_run(run.run_id).model_dump_json()), "schema_version": 99}
        with store._engine.begin() as conn:  # rows written behind the store's back
            for run_id, body in (("corrupt-row", '{"run_id": '), ("newer-row", json.dumps(newer))):
                conn.execute(
                    text(
                        "INSERT INTO runs (run_id, status, backend, model, pattern, created_at, "
                        "heartbeat_at, updated_at, result_json) SELECT :run_id, status, backend,"
                        " model, pattern, created_at, heartbeat_at, updated_at, :body FROM runs "
                        "WHERE run_id = :good"
                    ),
                    {"run_id": run_id, "body": body, "good": run.run_id},
                )
    at = app_test(PAGE).run()
    assert not at.exception
    listed = list(at.dataframe[0].value["run_id"])
    assert run.run_id in listed
    assert "corrupt-row" not in listed and "newer-row" not in listed
