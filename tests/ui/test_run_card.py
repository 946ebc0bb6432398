"""The Benchmark page's run card (ui/run_card.py): VALID / INVALID with reasons, pass / fail per
SLO limit, a progress line that never reads "48 s of 15 s", a timer while the model loads, and a
live throughput that follows the run's own figure instead of pulsing with each batch."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from bench.core.config import SLO, ConcurrencyLoad
from bench.core.progress import ProgressPoint, RunProgress
from bench.core.schema import RunResult, ValidityStatus
from ui.run_card import progress_line, slo_checks, throughput_points, validity_mark

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference"
PAGE = "ui/benchmark_page.py"


def _shipped_concurrency_run() -> RunResult:
    """A stored H200 generate run (data/reference), as the store gives it back."""
    for path in sorted(REFERENCE.glob("*_runs.json")):
        for raw in json.loads(path.read_text())["runs"]:
            run = RunResult.model_validate(raw)
            if (
                run.config.workload.kind == "generate"
                and run.config.load.pattern == "concurrency"
                and run.summary
                and run.validity
            ):
                return run
    raise AssertionError("no shipped concurrency run")


def test_slo_checks_pass_and_fail_by_the_catalogue_rule() -> None:
    run = _shipped_concurrency_run()
    ttft_p99 = run.summary.ttft_ms.p99
    e2e_p99 = run.summary.e2e_ms.p99
    slo = SLO(ttft_ms=ttft_p99 * 0.5, e2e_ms=e2e_p99 * 2, percentile="p99")
    judged = run.model_copy(update={"config": run.config.model_copy(update={"slo": slo})})
    ttft, e2e = slo_checks(judged)
    assert (ttft.label, ttft.passed, ttft.value) == ("TTFT p99", False, ttft_p99)
    assert ttft.text.endswith(": FAIL") and f"> {ttft_p99 * 0.5:g} ms" in ttft.text
    assert (e2e.passed, e2e.value) == (True, e2e_p99) and e2e.text.endswith(": PASS")
    assert (
        slo_checks(run.model_copy(update={"config": run.config.model_copy(update={"slo": SLO()})}))
        == []
    )


def test_validity_mark_says_valid_or_invalid_with_reasons() -> None:
    run = _shipped_concurrency_run()
    mark = validity_mark(run)
    assert mark.valid is (run.validity.status.value == "VALID")
    invalid = run.model_copy(
        update={
            "validity": run.validity.model_copy(
                update={
                    "status": ValidityStatus.INVALID,
                    "reasons": ["16 successful requests is below the minimum 20"],
                }
            )
        }
    )
    assert validity_mark(invalid).text == "INVALID: 16 successful requests is below the minimum 20"


def _running(**fields) -> RunProgress:
    base = dict(stage="running", phase="concurrency", phase_index=0, phases_total=1,
                completed=12, failed=0, in_flight=4, elapsed_s=50.0, phase_elapsed_s=48.0,
                phase_duration_s=15.0)  # fmt: skip
    return RunProgress(**{**base, **fields})


def test_progress_past_the_window_says_why_the_run_goes_on() -> None:
    floor = ConcurrencyLoad(concurrency=4, duration_s=15, min_requests=24)
    line = progress_line(_running(), floor, None)
    assert "48 s of 15 s" not in line.text
    assert "the 15 s window is over; on until 24 requests are sent (48 s elapsed)" in line.text
    assert line.fraction == pytest.approx(12 / 24)
    drain = progress_line(_running(completed=30), floor, None)
    assert "finishing the requests in flight" in drain.text and drain.fraction < 1
    inside = progress_line(_running(phase_elapsed_s=6.0), floor, None)
    assert "6 s of the 15 s window" in inside.text and inside.fraction == pytest.approx(0.4)


def test_loading_shows_a_timer_and_warm_up_its_time() -> None:
    loading = progress_line(RunProgress(stage="loading"), None, 93.4)
    assert loading.text.startswith("Loading the model: 93 s elapsed") and loading.fraction == 0
    assert progress_line(None, None, 4.0).text == "Starting the engine worker… 4 s"
    warm = progress_line(RunProgress(stage="running", phase="warmup", elapsed_s=7.2), None, 1.0)
    assert warm.text.startswith("Warming up: 7 s")


def test_live_throughput_follows_the_runs_figure_not_each_batch() -> None:
    """Four requests of 16 tokens completing together every 2 s (32 tok/s), progress every
    0.5 s, as a CPU batch does: a rate over a few ticks pulsed between 0 and 128 tok/s; the
    average since the phase began ends at the run's figure and the 10 s window stays near it."""
    points = []
    for tick in range(1, 121):  # 60 s, warm-up first
        now = tick * 0.5
        done = int(now // 2) * 4
        points.append(ProgressPoint(elapsed_s=5 + now, phase_elapsed_s=now, completed=done,
                                    output_tokens=done * 16, in_flight=4,
                                    phase="concurrency"))  # fmt: skip
    history = [ProgressPoint(elapsed_s=2.0, phase="warmup", output_tokens=999), *points]
    series = throughput_points(history)
    assert len(series) == len(points)  # warm-up left out
    last = series[-1]
    assert last.since_start == pytest.approx(points[-1].output_tokens / 60.0)
    windowed = [p.last_window for p in series if p.last_window is not None]
    assert windowed and min(windowed) >= 32 * 0.75 and max(windowed) <= 32 * 1.25
    late = [p.since_start for p in series if p.elapsed_s >= 25]
    assert min(late) >= 32 * 0.85 and max(late) <= 32 * 1.15


def test_the_finished_card_says_valid_and_pass_fail_per_slo(app_test, store_path, tmp_path):
    """A real launch (fake backend: a labelled test double of the engine) stored with an SLO it
    half meets: the card marks the run VALID and each limit PASS or FAIL."""
    from bench.core.config import GenerateWorkload, LengthDistribution, RunConfig
    from bench.orchestrate.jobs import JobProgress
    from bench.run.api import launch
    from bench.storage.store import ResultStore

    store = ResultStore(store_path)
    config = RunConfig(
        backend="fake",
        model="tiny-llama",
        engine_args={"ttft_s": 0.02, "itl_s": 0.002},
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=8), output_tokens=LengthDistribution(mean=8)
        ),
        load=ConcurrencyLoad(concurrency=2, duration_s=1.0, warmup_requests=1),
        validity={"min_duration_s": 0.5, "min_requests": 2},
        slo={"ttft_ms": 1.0, "e2e_ms": 60_000},
        device="cpu",
    )
    result = launch(config, store=store, out_dir=tmp_path / "run")
    assert result.validity.status.value == "VALID"
    job_id = store.create_job([config], label="card")
    store.claim_next_job(pid=12345, runner="host:12345")
    progress = JobProgress([config], lambda state: store.update_job(job_id, progress=state))
    progress.start_run(0)
    progress.finish_run(0, result.status, result.run_id, None)
    store.update_job(job_id, status="COMPLETED", run_ids=[result.run_id])

    at = app_test(PAGE).run()
    assert not at.exception
    assert any(s.value.startswith("VALID: the run met") for s in at.success)
    marks = " ".join(m.value for m in at.markdown)
    assert "SLO at p99: 1 of 2 limits failed" in marks
    assert "TTFT p99" in marks and "> 1 ms: FAIL" in marks and "≤ 60000 ms: PASS" in marks


def test_a_loading_run_shows_its_timer_on_the_page(app_test, store_path):
    from bench.core.config import RunConfig
    from bench.orchestrate.jobs import JobProgress
    from bench.storage.store import ResultStore

    store = ResultStore(store_path)
    config = RunConfig(backend="fake", model="tiny-llama")
    job_id = store.create_job([config], label="loading")
    store.claim_next_job(pid=12345, runner="host:12345")
    progress = JobProgress([config], lambda state: store.update_job(job_id, progress=state))
    progress.start_run(0)
    progress.on_progress(0, RunProgress(stage="loading"))
    progress.state.runs[0].stage_since = time.time() - 95  # the load began 95 s ago
    progress.flush(force=True)
    store.job_heartbeat(job_id)
    at = app_test(PAGE).run()
    assert not at.exception
    texts = [p.text or "" for p in at.get("progress")]
    assert any(t.startswith("Loading the model: 9") and "s elapsed" in t for t in texts), texts


def test_the_jobs_own_error_stays_a_red_box_unless_the_run_panels_say_it() -> None:
    """`job_notice` quiets only the job runner's summary of failures its run panels show."""
    from bench.core.schema import RunStatus
    from bench.orchestrate.job_run import failed_runs_line, queued_runs
    from tests.bench.test_jobs import fake_config
    from ui.run_card import job_notice

    runs = queued_runs([fake_config(), fake_config()])
    runs[1].status, runs[1].error = RunStatus.FAILED, "worker exited with code -9"
    summary = f"{failed_runs_line(1, 2)}: fake: worker exited with code -9"
    quiet = job_notice(RunStatus.FAILED, summary, runs, 2)
    assert quiet is not None and (quiet.level, quiet.text) == (
        "caption",
        "1 of 2 runs failed: its panel below says why.",
    )
    # A failure the panels do not hold (a runner interrupted, a run left RUNNING by a runner
    # that died) and a count they do not match are the job's own news.
    for error in ("job runner interrupted by signal 15", f"{failed_runs_line(2, 2)}: a; b"):
        assert job_notice(RunStatus.FAILED, error, runs, 2).level == "error"
    runs[1].error = None
    assert job_notice(RunStatus.FAILED, summary, runs, 2).level == "error"
    assert job_notice(RunStatus.STOPPED, "stopped on request", runs, 2).level == "warning"
    assert job_notice(RunStatus.COMPLETED, None, runs, 2) is None
