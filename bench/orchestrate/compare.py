"""`bench compare A B`: two runs, two measurement groups or two campaigns, metric by metric.

A side is named by a store run id, a store group id (`grp-...`), a run folder (`result.json` +
`records.jsonl`) or its `result.json`, a folder of run folders (`bench run --repeats N --out DIR`
writes DIR/repeat-k/: one group), or a campaign: a folder written by `bench campaign`
(`campaign.json`, run folders under `steps/`), or a shipped campaign file of data/reference
(`campaign-NAME.json`, its run folders in `runs-NAME.tgz` or `steps-NAME.tgz` beside it; a
folder holding exactly one such file names it too). Archives are read in memory, never
unpacked.

Two measurements give one `GroupComparison` per level (the phases both have, e.g. the ladder
stages c1/c16/...; the whole run otherwise). Two campaigns give, per configuration and level
found in both, the change B/A with its interval (drift), and per workload and level the winner
in each (leader vs runner-up, bench/core/stats.py verdict) with every flip or moved ratio listed:
the check before upgrading an engine or a driver. A single run is compared with its within-run
interval only, and the output says so.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError

from bench import SCHEMA_VERSION
from bench.core.errors import UserError
from bench.core.files import InputTooComplex, parse_json
from bench.core.limits import check_bootstrap_and_seed
from bench.core.metric_catalog import Kind, shown_as
from bench.core.schema import RequestRecord, RunResult
from bench.core.stats import (
    BOOTSTRAP,
    PRACTICAL_THRESHOLD,
    SEED,
    GroupComparison,
    GroupDraws,
    Interval,
    MetricComparison,
    RunSample,
    compare_draws,
    group_draws,
    run_sample,
)
from bench.core.strict import Strict

if TYPE_CHECKING:  # bench.storage.store pulls in SQLAlchemy; only its types are needed here
    from bench.storage.store import Store

HEADLINE_METRICS = ("output_throughput_tok_s", "ttft_ms_p50", "tpot_ms_p50", "e2e_ms_p99")
"""The metrics the campaign tables show (JSON has every metric)."""
IDENTITY_IGNORED = ("label", "telemetry_interval_s", "watchdog_s", "gpu_type")
"""Config fields that do not change what is measured (left out of a run's identity)."""
CONTENDER_FIELDS = ("backend", "engine_args", "event_loop")
"""What differs between the contenders of one workload (the rest is the workload's identity)."""


# --------------------------------------------------------------------------- loaded sides


@dataclass
class LoadedRun:
    result: RunResult
    records: list[RequestRecord] | None


@dataclass
class Side:
    """One side of a comparison as loaded: a measurement (runs of one config) or a campaign."""

    spec: str
    kind: Literal["run", "group", "campaign"]
    name: str
    runs: list[LoadedRun]
    plan: str | None = None


def _records_from_lines(lines: Iterable[bytes | str], source: str) -> list[RequestRecord]:
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = RequestRecord.model_validate_json(line)
        except ValidationError:
            raise UserError(f"{source}:{number}: not a request record") from None
        if not record.warmup:
            records.append(record)
    return records


def _read_result(text: bytes | str, source: str) -> RunResult:
    """A result file as a RunResult; one newer than this tool is refused by its schema version
    (its fields may mean other things), not compared as if current."""
    try:
        data = parse_json(text, source)  # bounded: 100,000 `[` is one line, not a RecursionError
    except InputTooComplex:
        raise
    except UserError:
        raise UserError(f"{source}: not a RunResult this version can read (not JSON)") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise UserError(
            f"{source}: schema_version {version} is newer than this tool's "
            f"({SCHEMA_VERSION}); compare it with the version that wrote it"
        )
    try:
        return RunResult.model_validate(data)
    except ValidationError:
        raise UserError(f"{source}: not a RunResult this version can read") from None


def _run_folder(folder: Path) -> LoadedRun:
    result = _read_result((folder / "result.json").read_bytes(), str(folder / "result.json"))
    records_path = folder / "records.jsonl"
    records = None
    if records_path.is_file():
        with records_path.open("rb") as handle:
            records = _records_from_lines(handle, str(records_path))
    return LoadedRun(result, records)


def _runs_in_archive(archive: Path) -> list[LoadedRun]:
    """Every run folder (result.json + records.jsonl) inside a .tgz, read in memory."""
    results: dict[str, bytes] = {}
    records: dict[str, bytes] = {}
    try:
        with tarfile.open(archive) as tar:
            for member in tar:
                if not member.isfile():
                    continue
                folder, _, name = member.name.rpartition("/")
                if name in ("result.json", "records.jsonl"):
                    handle = tar.extractfile(member)
                    if handle is not None:
                        (results if name == "result.json" else records)[folder] = handle.read()
    except (OSError, tarfile.TarError) as exc:
        raise UserError(f"cannot read archive {archive}: {exc}") from None
    loaded = []
    for folder in sorted(results):
        source = f"{archive}:{folder}"
        result = _read_result(results[folder], f"{source}/result.json")
        lines = io.BytesIO(records[folder]) if folder in records else None
        loaded.append(
            LoadedRun(
                result,
                _records_from_lines(lines, f"{source}/records.jsonl") if lines else None,
            )
        )
    return loaded


def _plan_identity(data: dict, path: Path, name: str) -> str | None:
    """What makes two campaigns "the same plan": the plan's steps (the name aside) when the
    campaign file holds them, else the bytes of the plan file kept beside a shipped campaign
    (`plan-NAME.yaml`, or the folder's one `plan.yaml`)."""
    import hashlib

    plan = data.get("plan")
    if isinstance(plan, dict) and "steps" in plan:
        text = json.dumps(plan["steps"], sort_keys=True).encode()
    else:
        for candidate in (path.parent / f"plan-{name}.yaml", path.parent / "plan.yaml"):
            if candidate.is_file():
                text = candidate.read_bytes()
                break
        else:
            return None
    return hashlib.sha256(text).hexdigest()[:12]


def _campaign_file(path: Path) -> Side:
    """A campaign JSON with its runs: folders under its own folder (`campaign.json`) or the
    archive beside a shipped `campaign-NAME.json`; runs only inside the JSON as a last resort."""
    try:
        data = parse_json(path.read_bytes(), f"campaign {path}")
    except OSError as exc:
        raise UserError(f"cannot read campaign {path}: {exc}") from None
    if not isinstance(data, dict) or "steps" not in data:
        raise UserError(f"{path} is not a campaign file (no steps)")
    name = path.stem.removeprefix("campaign-") if path.stem != "campaign" else path.parent.name
    plan = _plan_identity(data, path, name)
    runs: list[LoadedRun] = []
    if path.name == "campaign.json":
        runs = [_run_folder(p.parent) for p in sorted(path.parent.rglob("result.json"))]
    else:
        for prefix in ("runs", "steps"):
            archive = path.parent / f"{prefix}-{name}.tgz"
            if archive.is_file():
                runs = _runs_in_archive(archive)
                break
    if not runs:
        for step in data["steps"]:
            for run in step.get("runs") or []:
                runs.append(LoadedRun(_read_result(json.dumps(run), str(path)), None))
    if not runs:
        raise UserError(f"campaign {path} holds no runs (and no run archive beside it)")
    return Side(spec=str(path), kind="campaign", name=name, runs=runs, plan=plan)


def reference_records(folder: str | Path) -> dict[str, list[RequestRecord]]:
    """Measured records by run id of every run kept in the campaign archives (`runs-*.tgz`,
    `steps-*.tgz`) under a reference folder (data/reference): what `*_runs.json` files leave
    out. Reads every archive (tens of MB of JSON for the shipped ones: cache the result)."""
    found: dict[str, list[RequestRecord]] = {}
    for archive in sorted(Path(folder).rglob("*.tgz")):
        if not archive.name.startswith(("runs-", "steps-")):
            continue
        for run in _runs_in_archive(archive):
            if run.records is not None:
                found[run.result.run_id] = run.records
    return found


def _one_of_each(spec: str, runs: list[LoadedRun], where: list[str]) -> None:
    """A group's repeats are distinct runs: the same run twice (a copied folder) would count as
    two repeats and narrow every interval without a word, so it is refused naming both places."""
    seen: dict[str, str] = {}
    for run, place in zip(runs, where, strict=True):
        first = seen.setdefault(run.result.run_id, place)
        if first != place:
            raise UserError(
                f"{spec}: run {run.result.run_id} is listed twice ({first} and {place}); a "
                "group's repeats must be distinct runs: remove the copy"
            )


def load_side(spec: str, store: Store | None = None) -> Side:
    """Resolve one argument of `bench compare` (see the module docstring); UserError if none."""
    path = Path(spec)
    if path.is_dir():
        if (path / "result.json").is_file():
            return Side(spec=spec, kind="run", name=path.name, runs=[_run_folder(path)])
        if (path / "campaign.json").is_file():
            return _campaign_file(path / "campaign.json")
        shipped = sorted(path.glob("campaign-*.json"))
        if len(shipped) == 1:
            return _campaign_file(shipped[0])
        if shipped:
            names = ", ".join(str(p) for p in shipped)
            raise UserError(f"{spec} holds several campaigns; name one of: {names}")
        repeats = sorted(path.glob("*/result.json"))
        if repeats:  # `bench run --repeats N --out DIR`: DIR/repeat-k/, one group
            runs = [_run_folder(p.parent) for p in repeats]
            _one_of_each(spec, runs, [str(p.parent) for p in repeats])
            return Side(spec=spec, kind="group", name=path.name, runs=runs)
        raise UserError(
            f"{spec} is neither a run folder, a folder of run folders nor a campaign folder"
        )
    if path.is_file():
        if path.name == "result.json":
            return Side(
                spec=spec, kind="run", name=path.parent.name, runs=[_run_folder(path.parent)]
            )
        return _campaign_file(path)
    if store is None:
        raise UserError(f"{spec}: no such file or folder (and no results store to look it up in)")
    if store.has_run(spec):
        result = store.get_run(spec)
        return Side(
            spec=spec,
            kind="run",
            name=spec,
            runs=[LoadedRun(result, list(store.iter_records(spec)))],
        )
    members = store.group_runs(spec)
    if members:
        loaded = [LoadedRun(run, list(store.iter_records(run.run_id))) for run in members]
        return Side(spec=spec, kind="group", name=spec, runs=loaded)
    raise UserError(f"{spec}: not a file or folder, nor a run id or group id in {store.display}")


# --------------------------------------------------------------------------- identities, levels


def _identity(result: RunResult, drop: Iterable[str] = ()) -> str:
    data = result.config.model_dump(mode="json", exclude={*IDENTITY_IGNORED, *drop})
    return json.dumps(data, sort_keys=True)


def run_identity(result: RunResult) -> str:
    """What a run measured: its config without the fields that change nothing measured."""
    return _identity(result)


def workload_identity(result: RunResult) -> str:
    """The workload a run's contenders share: its identity without backend and engine options."""
    return _identity(result, CONTENDER_FIELDS)


def contender_name(result: RunResult) -> str:
    config = result.config
    name = config.backend
    if config.event_loop != "asyncio":
        name += f" ({config.event_loop})"
    return name


def workload_text(result: RunResult) -> str:
    """Short text of a workload: model, shape, precision, parallelism."""
    config = result.config
    workload = config.workload
    if workload.kind == "generate":
        shape = f"{workload.prompt_tokens.mean}/{workload.output_tokens.mean} tokens"
    else:
        shape = f"batch {workload.batch_size}"
    return (
        f"{config.model} {shape}, {config.precision.label()}, {config.parallelism.label()}, "
        f"{config.load.pattern}"
    )


def levels_of(result: RunResult) -> list[tuple[str | None, str]]:
    """(phase name or None for the whole run, level label) of each measured level of a run."""
    if len(result.phases) > 1:
        return [(phase.name, _level_label(phase.strategy, phase.target)) for phase in result.phases]
    load = result.config.load
    if load.fixed_level() is not None:
        return [(None, load.level_label())]
    if len(result.phases) == 1:
        phase = result.phases[0]
        return [(None, _level_label(phase.strategy, phase.target))]
    return [(None, load.pattern)]


def _level_label(strategy: str, target: float) -> str:
    return f"c{target:g}" if strategy == "concurrency" else f"{target:g} req/s"


def _samples(runs: list[LoadedRun], phase: str | None) -> list[RunSample]:
    return [run_sample(run.result, run.records, phase) for run in runs]


def within_spread(metric: str, a: GroupDraws, b: GroupDraws) -> bool:
    """Whether both sides are repeats (2 runs or more) whose run values of `metric` overlap:
    then some repeat of A is as good as some repeat of B, and the difference is within the
    run-to-run spread (a single run has no spread to judge by: its interval says so)."""
    if len(a.samples) < 2 or len(b.samples) < 2:
        return False
    values_a = [float(s.point[metric]) for s in a.samples if metric in s.point]
    values_b = [float(s.point[metric]) for s in b.samples if metric in s.point]
    if not values_a or not values_b:
        return False
    return max(min(values_a), min(values_b)) <= min(max(values_a), max(values_b))


def judged(
    a: GroupDraws,
    b: GroupDraws,
    a_name: str,
    b_name: str,
    threshold: float,
    metrics: list[str] | None = None,
) -> GroupComparison:
    """`compare_draws`, with no winner named where the data cannot name one: a percentile from
    fewer values than bench/core/stats.py's minimum sample rule (`reliable: false`: the figure
    is near each side's maximum, not the percentile) and a difference within the repeats'
    spread (`within_spread`) read "indistinguishable", whatever their bootstrap interval says.
    Two runs of one configuration named "A faster" on such percentiles before."""
    comparison = compare_draws(a, b, a_name, b_name, threshold, metrics)
    rows = [
        row.model_copy(update={"verdict": "indistinguishable", "significant": False})
        if row.significant and (not row.reliable or within_spread(row.metric, a, b))
        else row
        for row in comparison.metrics
    ]
    return comparison.model_copy(update={"metrics": rows})


def _completed(runs: list[LoadedRun]) -> list[LoadedRun]:
    return [run for run in runs if run.result.status.value == "COMPLETED" and run.result.summary]


# --------------------------------------------------------------------------- reports


class SideInfo(Strict):
    spec: str
    kind: Literal["run", "group", "campaign"]
    name: str
    runs: int
    single_run: bool = Field(description="Every measurement of this side is one run.")
    plan: str | None = Field(None, description="Plan fingerprint (sha256 of its steps or file).")


class LevelComparison(Strict):
    level: str
    comparison: GroupComparison
    within_spread: list[str] = Field(
        default_factory=list,
        description="Metrics whose repeats overlap between the sides: no winner named.",
    )


class MeasurementReport(Strict):
    """Two runs or groups, per level they share."""

    a: SideInfo
    b: SideInfo
    levels: list[LevelComparison]
    notes: list[str] = Field(default_factory=list)


class DriftRow(Strict):
    """One configuration at one level in both campaigns: B vs A."""

    workload: str
    contender: str
    level: str
    comparison: GroupComparison


class PairRatio(Strict):
    """A framework ratio (leader of A / another) at one workload level in both campaigns."""

    pair: str
    metric: str
    ratio_a: float | None
    interval_a: Interval | None
    ratio_b: float | None
    interval_b: Interval | None
    moved: bool = Field(description="B's ratio lies outside A's interval, or A's outside B's.")


class DecisionRow(Strict):
    """Who wins one workload level in each campaign, on the primary metric."""

    workload: str
    level: str
    metric: str
    winner_a: str
    winner_b: str
    flipped: bool
    ratios: list[PairRatio] = Field(default_factory=list)


class CampaignReport(Strict):
    a: SideInfo
    b: SideInfo
    same_plan: bool
    drift: list[DriftRow]
    decisions: list[DecisionRow]
    changes: list[str] = Field(description="Every flipped winner and moved ratio, one line each.")
    only_in_a: list[str] = Field(default_factory=list)
    only_in_b: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class CompareReport(Strict):
    """What `bench compare` prints (as a table) or writes (--json)."""

    kind: Literal["measurements", "campaigns"]
    threshold: float
    bootstrap: int
    seed: int
    measurements: MeasurementReport | None = None
    campaigns: CampaignReport | None = None


def _side_info(side: Side, single: bool) -> SideInfo:
    return SideInfo(
        spec=side.spec,
        kind=side.kind,
        name=side.name,
        runs=len(side.runs),
        single_run=single,
        plan=side.plan,
    )


def _single_run_note(name: str) -> str:
    return (
        f"{name}: single run: intervals come from the within-run bootstrap only (requests, time "
        "blocks) and leave out run-to-run spread, so they are narrower than repeats would show"
    )


def compare_measurements(
    a: Side,
    b: Side,
    threshold: float = PRACTICAL_THRESHOLD,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
) -> MeasurementReport:
    """Two runs or groups: per shared phase when both have several, else whole runs."""
    runs_a, runs_b = _completed(a.runs), _completed(b.runs)
    for side, runs in ((a, runs_a), (b, runs_b)):
        if not runs:
            raise UserError(f"{side.spec}: no completed run to compare")
    levels_a = levels_of(runs_a[0].result)
    levels_b = dict((label, phase) for phase, label in levels_of(runs_b[0].result))
    pairs = [(phase, levels_b[label], label) for phase, label in levels_a if label in levels_b]
    notes = []
    if not pairs:
        pairs = [(None, None, "whole run")]
        if len(levels_a) > 1 or len(levels_b) > 1:
            notes.append("the two sides share no level: their whole runs are compared")
    if run_identity(runs_a[0].result) != run_identity(runs_b[0].result):
        notes.append("the two sides ran different configurations (compared all the same)")
    rows = []
    for index, (phase_a, phase_b, label) in enumerate(pairs):
        draws_a = group_draws(_samples(runs_a, phase_a), bootstrap, seed + 2 * index)
        draws_b = group_draws(_samples(runs_b, phase_b), bootstrap, seed + 2 * index + 1)
        comparison = judged(draws_a, draws_b, a.name, b.name, threshold)
        comparison = in_run_units(comparison, runs_a[0].result.config.workload.kind)
        rows.append(
            LevelComparison(
                level=label,
                comparison=comparison,
                within_spread=[
                    row.metric
                    for row in comparison.metrics
                    if within_spread(row.metric, draws_a, draws_b)
                ],
            )
        )
    for name, runs in ((a.name, runs_a), (b.name, runs_b)):
        if len(runs) == 1:
            notes.append(_single_run_note(name))
    return MeasurementReport(
        a=_side_info(a, len(runs_a) == 1),
        b=_side_info(b, len(runs_b) == 1),
        levels=rows,
        notes=notes,
    )


def in_run_units(comparison: GroupComparison, kind: Kind) -> GroupComparison:
    """The comparison in the units of the runs' kind: the bootstrap resamples figures under
    their generate names, so a forward run's output throughput is shown as the samples/s it
    counts and its TTFT, TPOT and ITL rows are dropped (bench.core.metric_catalog.shown_as)."""
    rows = []
    for row in comparison.metrics:
        shown = shown_as(row.metric, kind)
        if shown is None:
            continue
        rows.append(row.model_copy(update={"metric": shown.name, "label": shown.label,
                                           "unit": shown.unit}))  # fmt: skip
    return comparison.model_copy(update={"metrics": rows})


@dataclass
class _Unit:
    """One configuration at one level of a campaign: its runs' samples and draws."""

    workload: str
    workload_key: str
    contender: str
    level: str
    draws: GroupDraws
    primary: str
    kind: Kind = "generate"


def _campaign_units(side: Side, bootstrap: int, seed: int) -> dict[tuple[str, str], _Unit]:
    """(run identity, level) -> unit; runs of one identity in a campaign are its repeats."""
    by_identity: dict[str, list[LoadedRun]] = {}
    for run in _completed(side.runs):
        by_identity.setdefault(run_identity(run.result), []).append(run)
    units: dict[tuple[str, str], _Unit] = {}
    for identity, runs in sorted(by_identity.items()):
        first = runs[0].result
        primary = (
            "output_throughput_tok_s"
            if first.config.workload.kind == "generate"
            else "request_throughput_rps"
        )
        for phase, label in levels_of(first):
            if phase is not None and any(
                phase not in {p.name for p in run.result.phases} for run in runs
            ):
                continue
            unit_seed = seed + len(units) * 7919  # distinct, reproducible streams per unit
            units[(identity, label)] = _Unit(
                workload=workload_text(first),
                workload_key=workload_identity(first),
                contender=contender_name(first),
                level=label,
                draws=group_draws(_samples(runs, phase), bootstrap, unit_seed),
                primary=primary,
                kind=first.config.workload.kind,
            )
    return units


def _leader(units: list[_Unit], threshold: float) -> tuple[str, _Unit, list[GroupComparison]]:
    """The contender with the best primary figure, and its comparisons with the others; the
    winner reads 'tie' when the runner-up is indistinguishable from it."""
    primary = units[0].primary

    def value(unit: _Unit) -> float:
        return float(
            sorted(s.point.get(primary, float("-inf")) for s in unit.draws.samples)[
                len(unit.draws.samples) // 2
            ]
        )

    ordered = sorted(units, key=value, reverse=True)
    lead = ordered[0]
    comparisons = [
        judged(lead.draws, other.draws, lead.contender, other.contender, threshold, [primary])
        for other in ordered[1:]
    ]
    winner = lead.contender
    if comparisons:
        first = comparisons[0].metric(primary)
        if first is not None and not first.significant:
            winner = f"tie: {lead.contender} ≈ {ordered[1].contender}"
    return winner, lead, comparisons


def _moved(
    a: Interval | None, ratio_a: float | None, b: Interval | None, ratio_b: float | None
) -> bool:
    if ratio_a is None or ratio_b is None:
        return False
    outside_a = a is not None and not (a.low <= ratio_b <= a.high)
    outside_b = b is not None and not (b.low <= ratio_a <= b.high)
    return outside_a or outside_b


def compare_campaigns(
    a: Side,
    b: Side,
    threshold: float = PRACTICAL_THRESHOLD,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
) -> CampaignReport:
    """Drift of every configuration and level in both, and the winners per workload level."""
    units_a = _campaign_units(a, bootstrap, seed)
    units_b = _campaign_units(b, bootstrap, seed + 1)
    shared = [key for key in units_a if key in units_b]
    drift = []
    drift_changes = []
    for key in shared:
        unit_a, unit_b = units_a[key], units_b[key]
        comparison = in_run_units(
            judged(unit_b.draws, unit_a.draws, b.name, a.name, threshold), unit_a.kind
        )
        drift.append(
            DriftRow(
                workload=unit_a.workload,
                contender=unit_a.contender,
                level=unit_a.level,
                comparison=comparison,
            )
        )
        headline = comparison.metric(unit_a.primary)
        if headline is not None and headline.significant:
            drift_changes.append(
                f"{unit_a.workload} at {unit_a.level}: {unit_a.contender} {headline.label} "
                f"{headline.verdict} in {b.name} than in {a.name} "
                f"(x{_ratio_text(headline.ratio)} {_interval_text(headline.interval)})"
            )
    decisions: list[DecisionRow] = []
    changes: list[str] = []
    contexts: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key in shared:
        unit = units_a[key]
        contexts.setdefault((unit.workload_key, unit.level), []).append(key)
    for keys in contexts.values():
        if len(keys) < 2:
            continue
        names = [units_a[k].contender for k in keys]
        if len(set(names)) < len(names):  # same backend twice: tell them apart by options
            for k in keys:
                options = json.dumps(json.loads(k[0]).get("engine_args", {}), sort_keys=True)
                for units in (units_a, units_b):
                    units[k].contender = f"{units[k].contender} {options}"
        group_a = [units_a[k] for k in keys]
        group_b = [units_b[k] for k in keys]
        winner_a, lead_a, comparisons_a = _leader(group_a, threshold)
        winner_b, _lead_b, _ = _leader(group_b, threshold)
        primary = lead_a.primary
        # The same pairs (A's leader vs each other) measured in B, for the moved-ratio check.
        by_contender_b = {unit.contender: unit for unit in group_b}
        lead_in_b = by_contender_b[lead_a.contender]
        ratios = []
        for comparison in comparisons_a:
            other = comparison.b
            in_b = judged(
                lead_in_b.draws, by_contender_b[other].draws, lead_a.contender, other,
                threshold, [primary],
            )  # fmt: skip
            row_a, row_b = comparison.metric(primary), in_b.metric(primary)
            if row_a is None or row_b is None:
                continue
            moved = _moved(row_a.interval, row_a.ratio, row_b.interval, row_b.ratio)
            ratios.append(
                PairRatio(
                    pair=f"{lead_a.contender} / {other}",
                    metric=primary,
                    ratio_a=row_a.ratio,
                    interval_a=row_a.interval,
                    ratio_b=row_b.ratio,
                    interval_b=row_b.interval,
                    moved=moved,
                )
            )
        flipped = winner_a != winner_b
        row = DecisionRow(
            workload=lead_a.workload,
            level=lead_a.level,
            metric=primary,
            winner_a=winner_a,
            winner_b=winner_b,
            flipped=flipped,
            ratios=ratios,
        )
        decisions.append(row)
        where = f"{row.workload} at {row.level}"
        if flipped:
            changes.append(f"{where}: winner {winner_a} in {a.name}, {winner_b} in {b.name}")
        for pair in ratios:
            if pair.moved:
                changes.append(
                    f"{where}: {pair.pair} {pair.metric} moved from {_ratio_text(pair.ratio_a)} "
                    f"{_interval_text(pair.interval_a)} to {_ratio_text(pair.ratio_b)} "
                    f"{_interval_text(pair.interval_b)}"
                )
    changes += drift_changes
    notes = []
    single_a = all(len(u.draws.samples) == 1 for u in units_a.values())
    single_b = all(len(u.draws.samples) == 1 for u in units_b.values())
    for name, single, units in ((a.name, single_a, units_a), (b.name, single_b, units_b)):
        if single:
            notes.append(_single_run_note(name))
            continue
        singles = sum(len(u.draws.samples) == 1 for u in units.values())
        if singles:
            notes.append(
                f"{name}: {singles} of {len(units)} configuration levels are a single run: "
                "their intervals come from the within-run bootstrap only; the others are "
                "repeats (same configuration run more than once), with two-level intervals"
            )
    same_plan = a.plan is not None and a.plan == b.plan
    if not same_plan:
        notes.append(
            "not the same plan (or a plan not kept with a campaign): only the configurations "
            "both ran are compared"
        )
    return CampaignReport(
        a=_side_info(a, single_a),
        b=_side_info(b, single_b),
        same_plan=same_plan,
        drift=drift,
        decisions=decisions,
        changes=changes,
        only_in_a=sorted(_unit_text(units_a[k]) for k in units_a if k not in units_b),
        only_in_b=sorted(_unit_text(units_b[k]) for k in units_b if k not in units_a),
        notes=notes,
    )


def _unit_text(unit: _Unit) -> str:
    return f"{unit.contender}: {unit.workload} at {unit.level}"


def check_options(threshold: float, bootstrap: int, seed: int) -> None:
    """The comparison's options within their bounds (bench/core/limits.py); checked before any
    store is opened or file read."""
    if not 0 <= threshold < 1:
        raise UserError(f"--threshold {threshold}: must be in [0, 1) (0.05 = 5%)")
    check_bootstrap_and_seed(bootstrap, seed)


def compare(
    a_spec: str,
    b_spec: str,
    store: Store | None = None,
    threshold: float = PRACTICAL_THRESHOLD,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
) -> CompareReport:
    """Load both sides and compare them as measurements or as campaigns."""
    check_options(threshold, bootstrap, seed)
    a, b = load_side(a_spec, store), load_side(b_spec, store)
    if (a.kind == "campaign") != (b.kind == "campaign"):
        raise UserError("compare a campaign with a campaign, or a run/group with a run/group")
    report = CompareReport(
        kind="campaigns" if a.kind == "campaign" else "measurements",
        threshold=threshold,
        bootstrap=bootstrap,
        seed=seed,
    )
    if a.kind == "campaign":
        report.campaigns = compare_campaigns(a, b, threshold, bootstrap, seed)
    else:
        report.measurements = compare_measurements(a, b, threshold, bootstrap, seed)
    return report


# --------------------------------------------------------------------------- rendering


def _ratio_text(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3f}"


def _interval_text(interval: Interval | None) -> str:
    return "[no interval]" if interval is None else f"[{interval.low:.3f}, {interval.high:.3f}]"


def _figure(value: float) -> str:
    return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"


def render(report: CompareReport, console: Any) -> None:
    """Print a report as rich tables."""
    from rich.table import Table

    console.print(
        f"verdicts at a {report.threshold:.0%} practical threshold; 95% bootstrap intervals "
        f"({report.bootstrap} draws, seed {report.seed})"
    )
    if report.measurements is not None:
        measurement = report.measurements
        for side in (measurement.a, measurement.b):
            what = "single run" if side.single_run else f"{side.runs} repeats"
            console.print(f"{side.name}: {side.kind}, {what} ({side.spec})")
        console.print(f"A = {measurement.a.name}, B = {measurement.b.name}")
        starred = False
        for level in measurement.levels:
            comparison = level.comparison
            table = Table(title=f"A / B at {level.level}")
            for column in ("metric", "A", "B", "A / B", "95% interval", "verdict for A"):
                table.add_column(column, justify="left" if column == "metric" else "right")
            for row in comparison.metrics:
                starred |= not row.reliable
                table.add_row(
                    f"{row.label} ({row.unit})" + ("" if row.reliable else " *"),
                    _figure(row.a),
                    _figure(row.b),
                    _ratio_text(row.ratio),
                    _interval_text(row.interval),
                    verdict_text(row, "A", row.metric in level.within_spread),
                )
            console.print(table)
        if starred:
            console.print(
                "* a percentile from fewer values than 10 / (1 - q) on a side (p90: 100, p99: "
                "1000): close to that side's maximum, not the percentile, so no verdict is drawn "
                "from it (not enough data)"
            )
        for note in measurement.notes:
            console.print(f"note: {note}")
        return
    campaigns = report.campaigns
    assert campaigns is not None
    console.print(
        f"campaign {campaigns.a.name} ({campaigns.a.spec}) vs {campaigns.b.name} "
        f"({campaigns.b.spec}){', same plan' if campaigns.same_plan else ''}"
    )
    table = Table(title=f"drift: {campaigns.b.name} / {campaigns.a.name}, same configuration")
    # A metric has a column where some row has it (a forward row has samples/s, not TTFT).
    headline = [
        name
        for name in (*HEADLINE_METRICS, "sample_throughput_per_s")
        if any(row.comparison.metric(name) is not None for row in campaigns.drift)
    ]
    for column in ("workload", "contender", "level", *headline):
        table.add_column(column)
    for row in campaigns.drift:
        cells = []
        for name in headline:
            metric = row.comparison.metric(name)
            cells.append(
                "-"
                if metric is None
                else f"{_ratio_text(metric.ratio)} {_interval_text(metric.interval)}"
                + (f" {metric.verdict}" if metric.significant else "")
            )
        table.add_row(row.workload, row.contender, row.level, *cells)
    if campaigns.drift:
        console.print(table)
    else:
        console.print("no configuration level is in both campaigns")
    if campaigns.decisions:
        table = Table(title="winners per workload level")
        for column in ("workload", "level", campaigns.a.name, campaigns.b.name, "ratios"):
            table.add_column(column)
        for row in campaigns.decisions:
            ratios = "; ".join(
                f"{pair.pair} {_ratio_text(pair.ratio_a)} -> {_ratio_text(pair.ratio_b)}"
                + (" MOVED" if pair.moved else "")
                for pair in row.ratios
            )
            mark = " FLIPPED" if row.flipped else ""
            table.add_row(row.workload, row.level, row.winner_a, row.winner_b + mark, ratios)
        console.print(table)
    if campaigns.changes:
        console.print("[bold]changes[/bold]:")
        for change in campaigns.changes:
            console.print(f"  {change}", soft_wrap=True)
    else:
        console.print("no winner flipped and no ratio moved beyond its interval")
    for label, items in (
        (f"only in {campaigns.a.name}", campaigns.only_in_a),
        (f"only in {campaigns.b.name}", campaigns.only_in_b),
    ):
        if items:
            console.print(f"{label}: {len(items)} configuration level(s)")
    for note in campaigns.notes:
        console.print(f"note: {note}", soft_wrap=True)


def verdict_text(row: MetricComparison, a_name: str, spread: bool = False) -> str:
    """The verdict column: a winner only where the interval, the sample count and the repeats'
    spread all allow one (see `judged`)."""
    if row.verdict == "unknown":
        return "no interval"
    if not row.reliable:
        return "not enough data"
    if spread:
        return "indistinguishable (within the repeats' spread)"
    if not row.significant:
        return "indistinguishable"
    return f"{a_name} {row.verdict}"


__all__ = [
    "CampaignReport",
    "CompareReport",
    "MeasurementReport",
    "compare",
    "compare_campaigns",
    "compare_measurements",
    "load_side",
    "reference_records",
    "render",
]
