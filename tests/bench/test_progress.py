"""RunProgress: the stored job row's reader reads what the job runner writes and older rows."""

from __future__ import annotations

from bench.core.progress import ProgressPoint, RunProgress
from bench.core.schema import TelemetrySample


def test_a_dumped_progress_reads_back_the_same():
    progress = RunProgress(
        stage="running",
        run_id="r1",
        phase="concurrency",
        phase_index=0,
        completed=3,
        telemetry=TelemetrySample(t_ns=5, host_rss_bytes=10**8),
        repeat=2,
        repeats_planned=3,
    )
    assert RunProgress.from_stored(progress.model_dump(mode="json")) == progress


def test_rows_written_before_the_model_still_read():
    # As the old job runner stored them: free-form keys, "of" for a repeat's total, telemetry
    # `{}` before the first sample, a key from no version of the model.
    old = {
        "stage": "running",
        "phase": "warmup",
        "phase_index": None,
        "completed": 1,
        "run_id": "r1",
        "telemetry": {},
        "repeat": 1,
        "of": 3,
        "something_else": True,
    }
    progress = RunProgress.from_stored(old)
    assert progress is not None
    assert (progress.phase, progress.completed, progress.run_id) == ("warmup", 1, "r1")
    assert progress.repeats_planned == 3 and progress.telemetry is None
    assert progress.failed is None  # missing keys stay unknown, not 0
    stored_telemetry = {"t_ns": 7, "power_w": 80.5, "gpus": []}
    assert RunProgress.from_stored({"stage": "loaded", "telemetry": stored_telemetry}).telemetry
    # A value of the wrong type keeps the stage rather than failing the page.
    assert RunProgress.from_stored({"stage": "running", "completed": "many"}) == RunProgress(
        stage="running"
    )


def test_no_progress_yet_reads_as_none():
    assert RunProgress.from_stored({}) is None
    assert RunProgress.from_stored(None) is None
    assert RunProgress.from_stored({"stage": "finished-by-a-future-version"}) is None


def test_a_history_point_takes_the_counts_and_the_telemetry():
    progress = RunProgress(
        stage="running",
        elapsed_s=2.5,
        completed=4,
        in_flight=2,
        telemetry=TelemetrySample(t_ns=1, gpu_memory_used_bytes=3 * 10**9, power_w=200.0),
    )
    point = ProgressPoint.of(progress)
    assert (point.elapsed_s, point.completed, point.in_flight) == (2.5, 4, 2)
    assert (point.gpu_memory_used_bytes, point.power_w, point.host_rss_bytes) == (
        3 * 10**9,
        200.0,
        None,
    )
