"""The report's caveats about its data: frameworks without a successful run, invalid or test-double
runs, random weights, and what a machine without a GPU cannot measure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from advisor.decide.recommend import REFUSED
from advisor.report.model import Caveat, StageReport
from advisor.report.numbers import scalar_text
from bench.core.fingerprint import Fingerprint
from bench.core.prediction import drift_words
from bench.core.schema import RunResult


def not_measured_caveats(
    stages: Sequence[StageReport], runs: Sequence[RunResult], availability: Mapping[str, str]
) -> list[Caveat]:
    """A caveat per recommended or candidate framework without a successful run in the report;
    `availability` is the advisor's map: 'available' or why the framework cannot run here."""
    measured = {run.config.backend for run in runs if run.summary and run.summary.successful}
    wanted: list[str] = []
    for stage in stages:
        for name in [stage.framework, *stage.candidates]:
            if name == REFUSED:
                continue  # a refused stage names no framework to measure
            if name and name not in wanted:
                wanted.append(name)
    caveats = []
    for name in wanted:
        if name in measured:
            continue
        state = availability.get(name)
        if state is None:
            why = "no backend of that name in this installation (not benchmarked here)"
        elif state != "available":
            why = f"not installed or not runnable here: {state}"
        else:
            why = "installed here but no stored run of it was included"
        caveats.append(Caveat(kind="not-measured", framework=name, text=why))
    return caveats


def data_caveats(runs: Sequence[RunResult], environment: Fingerprint | None) -> list[Caveat]:
    caveats = []
    for run in runs:
        if run.validity and run.validity.reasons:
            caveats.append(
                Caveat(
                    kind="data",
                    framework=run.config.backend,
                    text=f"run {run.run_id} is {run.validity.status.value}: "
                    + "; ".join(run.validity.reasons),
                )
            )
    for run in runs:
        drift = drift_words(run.drift())
        if drift is not None and run.config.prediction is not None:
            record = run.config.prediction.calibration_id or "the default factors"
            caveats.append(
                Caveat(
                    kind="data",
                    framework=run.config.backend,
                    text=f"run {run.run_id} measured outside the interval predicted for it "
                    f"({drift}; calibration {record}): its engine ran otherwise than the "
                    "calibrated one (engine limits, release, GPU clocks); `python -m bench "
                    "calibrate --check` says whether the calibration still holds",
                )
            )
    for run in runs:
        if run.config.backend == "fake":
            caveats.append(
                Caveat(
                    kind="data",
                    framework="fake",
                    text=f"run {run.run_id} used the 'fake' backend, a test double that does no "
                    "inference: its figures test the harness and say nothing about a framework.",
                )
            )
    random_weight_runs = [run.run_id for run in runs if run.model and run.model.random_weights]
    if random_weight_runs:
        caveats.append(
            Caveat(
                kind="data",
                text="random-weight checkpoints (speed and memory are representative, outputs "
                f"are not) in run(s): {', '.join(random_weight_runs)}",
            )
        )
    if environment and not environment.gpu_available:
        caveats.append(
            Caveat(
                kind="environment",
                text="GPU memory, power and energy are absent: "
                + scalar_text(environment.gpu_reason or "no GPU on the measuring machine"),
            )
        )
    return caveats
