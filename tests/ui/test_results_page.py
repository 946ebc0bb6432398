"""AppTest of the Results page: a stored run appears; selecting it shows comparison views."""

from __future__ import annotations

from tests.ui.conftest import stored_run

PAGE = "ui/results_page.py"


def test_empty_store_explains_what_to_do(app_test):
    at = app_test(PAGE).run()
    assert not at.exception
    assert any("no runs yet" in i.value for i in at.info)
    assert any("Published figures, not measured here" in w.value for w in at.warning)
    # the H200 runs shipped in data/reference are shown apart, labelled as not the user's
    assert any("Measured by this project, not in your store" in i.value for i in at.info)
    # one runs table per shipped file (the store is empty): together they hold the H200 engines
    frames = [frame.value for frame in at.dataframe if "run_id" in frame.value.columns]
    shipped = {backend for frame in frames for backend in frame["backend"]}
    assert {"vllm", "pytorch", "onnxruntime"} <= shipped


def test_stored_run_is_listed_and_reference_kept_apart(app_test, store_path):
    run = stored_run(store_path)
    at = app_test(PAGE).run()
    assert not at.exception
    table = at.dataframe[0].value
    assert run.run_id in list(table["run_id"])
    assert any("Throughput against latency" in s.value for s in at.subheader)
    # The published A100 rows are in their own table, not in the measurements table.
    assert "vllm" not in set(table["backend"])


def _views_script() -> None:
    """Draws the comparison views of the runs in the store, as the page does for a selection."""
    from ui import state
    from ui.results_page import compare, diagnostics, latency_distributions, step_curves

    runs = state.get_store().list_runs()
    compare(runs)
    step_curves(runs)
    latency_distributions(runs)
    diagnostics(runs)


def test_selected_runs_get_compared(store_path):
    from streamlit.testing.v1 import AppTest

    first = stored_run(store_path, backend="pytorch")
    second = stored_run(store_path, backend="vllm")
    at = AppTest.from_function(_views_script, default_timeout=60).run()
    assert not at.exception
    side_by_side = at.dataframe[0].value
    assert any(first.run_id[-8:] in column for column in side_by_side.columns)
    assert any(second.run_id[-8:] in column for column in side_by_side.columns)
    assert any("step pattern" in i.value for i in at.info)  # no step run: says what to do
    assert len(at.expander) == 2  # diagnostics, one per run


def test_results_page_names_a_postgres_store_without_its_password(app_test, monkeypatch, postgres):
    url = postgres.create_database()
    monkeypatch.setenv("ADVISOR_STORE", url)
    run = stored_run(url)
    at = app_test(PAGE).run()
    assert not at.exception
    assert run.run_id in list(at.dataframe[0].value["run_id"])
    captions = [caption.value for caption in at.caption]
    assert any(
        "postgresql results store `postgresql://advisor:***@127.0.0.1:" in c for c in captions
    )
    shown = [str(element.value) for element in (*at.caption, *at.markdown, *at.info)]
    assert not any(postgres.password in text for text in shown)


def test_unreachable_store_is_one_line_not_a_traceback(app_test, monkeypatch):
    import socket

    with socket.socket() as probe:  # a port nothing listens on once the block ends
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("ADVISOR_STORE", f"postgresql://advisor:pw-never-shown@127.0.0.1:{port}/x")
    at = app_test(PAGE).run()
    assert not at.exception
    [error] = at.error
    assert "cannot open" in error.value and "\n" not in error.value
    assert "pw-never-shown" not in error.value and "advisor:***@127.0.0.1" in error.value


def test_latency_distribution_is_aggregated_whatever_the_run_size(store_path):
    """A run of 20,000 requests: the chart ships bins (41 points per run), never the requests."""
    from streamlit.testing.v1 import AppTest

    from bench.core.schema import RequestRecord
    from bench.storage.store import ResultStore
    from ui.results_page import LATENCY_BINS

    run = stored_run(store_path)
    store = ResultStore(store_path)
    store.add_records(
        run.run_id,
        [  # TEST DATA: generated times, not a measurement
            RequestRecord(
                id=f"extra-{i}",
                start_ns=i * 1_000_000,
                chunk_ns=[i * 1_000_000 + 5_000_000 + (i % 97) * 10_000],
                end_ns=i * 1_000_000 + 20_000_000 + (i % 89) * 100_000,
                input_tokens=8,
                output_tokens=8,
            )
            for i in range(20_000)
        ],
    )
    store.close()
    at = AppTest.from_function(_views_script, default_timeout=60).run()
    assert not at.exception
    import pyarrow as pa

    charts = [
        element.proto
        for element in at.main
        if getattr(element, "proto", None) is not None
        and element.proto.DESCRIPTOR.name == "VegaLiteChart"
        and "% of requests" in element.proto.spec
    ]
    assert charts, "no latency distribution chart"
    rows = sum(
        pa.ipc.open_stream(dataset.data.data).read_all().num_rows for dataset in charts[0].datasets
    )
    assert rows == LATENCY_BINS + 1  # one run: the bin edges, never its 20,000 requests
    table = next(df.value for df in at.dataframe if "p99" in df.value.columns)
    assert int(table["requests"].iloc[0]) > 20_000
