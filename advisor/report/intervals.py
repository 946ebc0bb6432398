"""Within-run 95% intervals of output throughput for the report's evidence rows and charts, from the
request records kept as they stream past (up to INTERVAL_MAX_RECORDS a run)."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from advisor.report.model import EvidenceFigures
from bench.core.schema import RequestRecord, RunResult, RunStatus

INTERVAL_MAX_RECORDS = 100_000
"""Runs with more records get no interval in the report (the records are not kept in memory)."""
INTERVAL_BOOTSTRAP = 200
"""Draws per interval in the report (the verdicts use bench.core.stats' 1000)."""


class KeptRecords:
    """An iterable over records that keeps them (up to INTERVAL_MAX_RECORDS) as it is read."""

    def __init__(self, items: Iterable[RequestRecord]) -> None:
        self.items = items
        self.kept: list[RequestRecord] | None = []

    def __iter__(self):
        for record in self.items:
            if self.kept is not None:
                self.kept.append(record)
                if len(self.kept) > INTERVAL_MAX_RECORDS:
                    self.kept = None
            yield record


def run_intervals(
    run: RunResult, kept: KeptRecords | None
) -> dict[str | None, tuple[float, float]]:
    """Output tok/s 95% intervals of the run (key None) and of each closed-loop phase (key:
    its target level as text), within-run bootstrap; {} without records."""
    from bench.core.stats import run_sample, summarize_group

    records = kept.kept if kept is not None else None
    if not records or run.summary is None:
        return {}
    out: dict[str | None, tuple[float, float]] = {}
    phases: list[str | None] = [None] + [
        phase.name
        for phase in run.phases
        if phase.strategy == "concurrency" and phase.summary.successful > 0
    ]
    targets = {phase.name: f"{float(phase.target):g}" for phase in run.phases}
    # A ladder's whole-run figure mixes its levels: its intervals are per level only.
    for phase in phases[1:] if len(phases) > 2 else phases[:1]:
        try:
            summary = summarize_group(
                [run_sample(run, records, phase, rates_only=True)],
                bootstrap=INTERVAL_BOOTSTRAP,
                metrics=["output_throughput_tok_s"],
            )
        except ValueError:
            continue
        metric = summary.metric("output_throughput_tok_s")
        if metric is not None and metric.interval is not None:
            key = None if phase is None else targets[phase]
            out[key] = (metric.interval.low, metric.interval.high)
    return out


Intervals = dict[str | None, tuple[float, float]]
FINISHED = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.STOPPED)


class IntervalCache:
    """Intervals already computed, by run content, for a process that builds many reports from
    the same runs (the app: every session's report cites the shipped runs, ~0.2 s of bootstrap
    each). Only finished runs are kept: their records are all written before the run is marked
    finished and never change after. The key is the run's id, the digest of its stored JSON and
    its record count, so a run deleted and stored again with other figures is computed afresh.
    Bounded (least recently used out first) and safe to share between threads; sessions that
    ask for the same run at once wait for one computation instead of each making its own."""

    def __init__(self, max_entries: int = 256) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str, int], Intervals] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[tuple[str, str, int], threading.Lock] = {}
        self._digests: OrderedDict[int, tuple[RunResult, str]] = OrderedDict()
        """Digest by run object: reports cite the same loaded runs (the shipped ones are read
        once per process), and dumping a run's JSON to hash it cost more than a cache hit saves
        (a third of a busy app server's report time). The run is held so its id is not reused."""

    def _digest(self, run: RunResult) -> str:
        with self._lock:
            found = self._digests.get(id(run))
            if found is not None and found[0] is run:
                self._digests.move_to_end(id(run))
                return found[1]
        digest = hashlib.sha256(run.model_dump_json().encode()).hexdigest()
        with self._lock:
            self._digests[id(run)] = (run, digest)
            while len(self._digests) > 4 * self.max_entries:
                self._digests.popitem(last=False)
        return digest

    def intervals(self, run: RunResult, kept: KeptRecords | None) -> Intervals:
        """`run_intervals(run, kept)`, from the cache when this run was computed before."""
        records = kept.kept if kept is not None else None
        if run.status not in FINISHED or records is None:
            return run_intervals(run, kept)
        key = (run.run_id, self._digest(run), len(records))
        with self._lock:
            computing = self._computing.setdefault(key, threading.Lock())
        with computing:  # one computation per run at a time; the others find its result
            with self._lock:
                found = self._entries.get(key)
                if found is not None:
                    self._entries.move_to_end(key)
                    return dict(found)
            computed = run_intervals(run, kept)
            with self._lock:
                self._entries[key] = dict(computed)
                while len(self._entries) > self.max_entries:
                    self._entries.popitem(last=False)
                self._computing.pop(key, None)
        return computed


def phase_intervals(
    intervals: Mapping[str, dict[str | None, tuple[float, float]]],
) -> dict[str, dict[str, tuple[float, float]]]:
    return {
        run_id: {key: value for key, value in found.items() if key is not None}
        for run_id, found in intervals.items()
    }


def with_interval(
    row: EvidenceFigures, run: RunResult, found: Mapping[str | None, tuple[float, float]]
) -> EvidenceFigures:
    group = run.group
    if group is not None and group.planned > 1:
        note = f"repeat {group.index + 1} of {group.planned} (group {group.group_id})"
    else:
        note = "single run"
    if row.level is not None:
        note += f", level c{row.level}"
    whole = found.get(row.level)
    return row.model_copy(
        update={
            "output_throughput_low": None if whole is None else round(whole[0], 2),
            "output_throughput_high": None if whole is None else round(whole[1], 2),
            "interval_note": note,
        }
    )
