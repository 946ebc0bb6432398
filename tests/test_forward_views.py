"""A REAL forward run (the CPU `pytorch` engine on tiny-vit and tiny-bert, through
`bench.run.api.launch`) walked through every view that shows a run: the `bench run` summary,
`bench runs`, `bench compare`, the Results table and side-by-side, the finished-run card and the
report. Each shows it in samples/s and batch latency, never in TTFT, TPOT, output tokens or a
decode floor (issue 48)."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.core.config import ConcurrencyLoad, ForwardWorkload, LengthDistribution, RunConfig
from bench.core.schema import RunResult
from bench.engines.backends import backend_names, get_backend
from bench.run.api import launch
from bench.storage.store import ResultStore

pytestmark = pytest.mark.slow

PROFILE = Path(__file__).resolve().parents[1] / "examples" / "profiles" / "fixed_shape_vision.yaml"
TOKEN_WORDS = re.compile(r"TTFT|TPOT|ITL\b|tok/s per user|output tok|per output token|KV cache")
"""What a forward run must never be shown in (words of generated tokens)."""


def _forward_run(store: ResultStore, model: str, **shape) -> RunResult:
    config = RunConfig(
        backend="pytorch",
        model=model,
        device="cpu",
        precision={"dtype": "float32"},
        workload=ForwardWorkload(batch_size=4, **shape),
        load=ConcurrencyLoad(concurrency=2, duration_s=2.0, warmup_requests=2),
        validity={"min_duration_s": 1, "min_requests": 5},
    )
    return launch(config, store=store)


@pytest.fixture(scope="module")
def forward_runs(tmp_path_factory) -> dict[str, object]:
    if "pytorch" not in backend_names() or not get_backend("pytorch").availability().available:
        pytest.skip("the pytorch backend is not installed here")
    root = tmp_path_factory.mktemp("forward-views")
    url = f"sqlite:///{root / 'results.sqlite'}"
    store = ResultStore(url)
    vit = _forward_run(store, "tiny-vit", image_size=32)
    bert = _forward_run(store, "tiny-bert", sequence_length=LengthDistribution(mean=32))
    store.close()
    for run in (vit, bert):
        assert run.summary is not None and run.summary.successful > 0, run.failure
    return {"vit": vit, "bert": bert, "url": url, "root": root}


def test_the_catalogue_reads_a_forward_run_in_samples(forward_runs) -> None:
    from bench.core.metric_catalog import metric, read_all

    vit, bert = forward_runs["vit"], forward_runs["bert"]
    values = read_all(vit.summary, vit)
    assert not any(TOKEN_WORDS.search(metric(name).label) for name in values)
    assert "output_throughput_tok_s" not in values and "ttft_ms_p99" not in values
    # 4 samples a batch: samples/s is 4 x batches/s.
    assert values["sample_throughput_per_s"] == pytest.approx(
        4 * values["request_throughput_rps"], rel=0.02
    )
    assert "input_token_throughput_tok_s" not in values  # images have no tokens
    tokens = metric("input_token_throughput_tok_s").read(bert.summary, bert)
    samples = metric("sample_throughput_per_s").read(bert.summary, bert)
    assert tokens == pytest.approx(32 * samples, rel=0.02)
    assert not any("per output token" in note or "TTFT" in note for note in vit.validity.notes)


def test_bench_run_runs_and_compare_show_samples_not_tokens(forward_runs, capsys) -> None:
    from rich.console import Console

    from bench.cli import _print_result, app
    from bench.orchestrate.compare import compare, render

    vit, bert = forward_runs["vit"], forward_runs["bert"]
    for run in (vit, bert):
        _print_result(run)
        printed = capsys.readouterr().out
        assert "samples/s" in printed and "batch latency (ms)" in printed, printed
        assert not TOKEN_WORDS.search(printed), printed

    listed = CliRunner().invoke(app, ["runs", "--store", forward_runs["url"]])
    assert listed.exit_code == 0, listed.output
    lines = [line for line in listed.output.splitlines() if line.strip()]
    assert len(lines) == 2 and all(line.endswith("samples/s") for line in lines), listed.output

    store = ResultStore(forward_runs["url"], create=False)
    try:
        report = compare(vit.run_id, vit.run_id, store, bootstrap=200)
    finally:
        store.close()
    names = [row.metric for level in report.measurements.levels for row in level.comparison.metrics]
    assert "sample_throughput_per_s" in names and "e2e_ms_p99" in names
    assert not any(name.startswith(("ttft", "tpot", "itl", "output_")) for name in names)
    out = io.StringIO()
    render(report, Console(file=out, width=200))
    assert "samples/s" in out.getvalue() and not TOKEN_WORDS.search(out.getvalue())


def test_results_page_and_result_card_show_samples_not_tokens(forward_runs) -> None:
    from ui.benchmark_page import finished_tiles
    from ui.components import RUN_COLUMN_OF, runs_display, runs_frame
    from ui.results_page import side_by_side

    vit, bert = forward_runs["vit"], forward_runs["bert"]
    shown = runs_display(runs_frame([vit, bert]))
    samples = RUN_COLUMN_OF["sample_throughput_per_s"]
    for name in ("output_throughput_tok_s", "ttft_ms_p99", "tpot_ms_p99"):
        assert set(shown[RUN_COLUMN_OF[name]]) == {"—"}, name
    assert all(cell.endswith("samples/s") for cell in shown[samples])

    table = side_by_side([vit, bert])
    for column in table.values():
        for heading, cell in column.items():
            if heading not in ("model", "command"):
                assert not TOKEN_WORDS.search(heading), heading
                assert not TOKEN_WORDS.search(str(cell)), (heading, cell)
    assert any("samples/s" in cell for cell in table[next(iter(table))].values())

    for run in (vit, bert):
        tiles = finished_tiles(run)
        assert tiles[0][0] == "Sample throughput" and tiles[0][1].endswith("samples/s")
        assert not any(TOKEN_WORDS.search(title + figure) for title, figure in tiles), tiles


def test_the_report_on_a_forward_run_has_no_decode_floor_or_kv_cache(forward_runs) -> None:
    import typer

    from advisor.report.cli import register

    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)
    out = forward_runs["root"] / "report"
    vit = forward_runs["vit"]
    args = ["report", "--profile", str(PROFILE), "--run", vit.run_id]
    args += ["--store", forward_runs["url"], "--format", "md", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = (out / f"{PROFILE.stem}.md").read_text()
    floor = text.split("### Distance from the physical floor", 1)[1].split("\n## ", 1)[0]
    assert vit.run_id not in floor and "% of floor speed" not in floor
    assert "KV cache" not in text
