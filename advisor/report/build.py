"""Assemble a `Report` from a profile, the advisor's recommendation, stored runs and records.

`build_report` is pure (everything passed in, tests call it directly); `assemble_report` loads
what it needs (profile file, store, advisor, environment, reference table) for the CLI. The
advisor's result is read through `as_plain` so pydantic models, dataclasses and dicts all work.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from advisor import evidence
from advisor.evidence import SOURCE_RANK
from advisor.gpus import find_gpu
from advisor.report.charts import derive_charts, pattern_facts
from advisor.report.model import (
    Alternative,
    Caveat,
    DecisionStep,
    Diagnostic,
    EnvironmentSection,
    Estimate,
    EvidenceRow,
    FloorDistance,
    KeyValue,
    PreflightWarning,
    ReferenceTable,
    Report,
    ReportMeta,
    ReproduceEntry,
    RunEnvironment,
    RunRef,
    StageReport,
)
from bench.errors import UserError
from bench.schema import RequestRecord, RunResult

SEED_REFERENCE_FILE = "seed_a100_llama2_13b.json"
_TITLE_KEYS = ("title", "name", "report_title")
_FOR_WHOM_KEYS = ("for_whom", "audience", "team", "owner", "prepared_for")
_DESCRIPTION_KEYS = ("description", "purpose", "notes", "summary")


# --------------------------------------------------------------------------- plain data


def as_plain(value: Any) -> Any:
    """JSON-like plain data from pydantic models, dataclasses, enums, mappings and sequences."""
    if hasattr(value, "model_dump"):
        return as_plain(value.model_dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return as_plain(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(key): as_plain(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [as_plain(inner) for inner in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return getattr(value, "value", None) or str(value)


def _text(value: Any) -> str:
    """One readable line from a scalar, list or mapping (advisor fields vary in shape)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        for key in ("text", "message", "reason", "why", "level", "label"):
            if isinstance(value.get(key), str) and len(value) <= 2:
                return value[key]
        return "; ".join(f"{key}: {_text(inner)}" for key, inner in value.items())
    if isinstance(value, list | tuple):
        return "; ".join(_text(inner) for inner in value)
    return str(value)


def flatten(data: Any, prefix: str = "", skip_none: bool = True) -> list[KeyValue]:
    """Nested dicts/lists as `a.b[0].c = value` rows, for display tables."""
    rows: list[KeyValue] = []
    if isinstance(data, Mapping):
        for key, inner in data.items():
            rows += flatten(inner, f"{prefix}.{key}" if prefix else str(key), skip_none)
    elif isinstance(data, list) and data and any(isinstance(i, Mapping | list) for i in data):
        for index, inner in enumerate(data):
            rows += flatten(inner, f"{prefix}[{index}]", skip_none)
    elif data is None and skip_none:
        return rows
    elif data == [] or data == {}:
        rows.append(KeyValue(key=prefix or "value", value="none"))
    else:
        value = ", ".join(_text(item) for item in data) if isinstance(data, list) else _text(data)
        rows.append(KeyValue(key=prefix or "value", value=value))
    return rows


def _first(data: Mapping[str, Any], keys: Iterable[str]) -> Any:
    for key in keys:
        if data.get(key) not in (None, "", [], {}):
            return data[key]
    return None


# --------------------------------------------------------------------------- advisor output


def _stages_of(recommendation: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    stages = recommendation.get("stages")
    if isinstance(stages, list) and stages:
        return [stage for stage in stages if isinstance(stage, Mapping)]
    return [recommendation] if recommendation else []


def _framework_name(value: Any) -> str:
    if isinstance(value, Mapping):
        return _text(_first(value, ("framework", "backend", "name")) or value)
    return _text(value)


def _steps(path: Any) -> list[DecisionStep]:
    steps = []
    for node in path or []:
        if isinstance(node, Mapping):
            steps.append(
                DecisionStep(
                    question=_text(_first(node, ("question", "id", "node")) or "?"),
                    answer=_text(node.get("answer")),
                    why=_text(_first(node, ("why", "reason", "rationale"))),
                )
            )
        else:
            steps.append(DecisionStep(question=_text(node), answer=""))
    return steps


def _alternatives(values: Any) -> list[Alternative]:
    alternatives = []
    for value in values or []:
        if isinstance(value, Mapping):
            reason = _first(
                value, ("why_not_first", "why", "reason", "why_not", "rationale", "note")
            )
            alternatives.append(Alternative(framework=_framework_name(value), reason=_text(reason)))
        else:
            alternatives.append(Alternative(framework=_text(value)))
    return alternatives


def _strings(values: Any) -> list[str]:
    if values is None:
        return []
    if isinstance(values, str):
        return [values]
    if isinstance(values, Mapping):
        return [f"{key}: {_text(inner)}" for key, inner in values.items()]
    return [_text(value) for value in values if value not in (None, "")]


def _confidence(value: Any) -> tuple[str | None, str | None]:
    """(level, why) from the advisor's confidence ({level, why}, or plain text)."""
    if isinstance(value, Mapping):
        level = value.get("level")
        return (_text(level) or None), (_text(value.get("why")) or None)
    return (_text(value) or None), None


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


def _second_opinion(learned: Any) -> str | None:
    if not isinstance(learned, Mapping):
        return None
    parts = [_text(learned.get("message")).rstrip(". ")]
    if learned.get("prediction"):
        parts.append(f"its pick: {learned['prediction']}")
    if isinstance(learned.get("cv_accuracy"), int | float):
        parts.append(f"cross-validated accuracy {learned['cv_accuracy']:.0%}")
    if learned.get("runs"):
        parts.append(f"{learned['runs']} runs behind it")
    return "; ".join(part for part in parts if part) or None


def stage_report(stage: Mapping[str, Any], index: int) -> StageReport:
    chosen = stage.get("recommendation")
    chosen = chosen if isinstance(chosen, Mapping) else stage
    decision = stage.get("decision") if isinstance(stage.get("decision"), Mapping) else {}
    path = _first(stage, ("path",)) or decision.get("path") or chosen.get("path")
    candidates = _first(stage, ("candidates",)) or decision.get("candidates") or []
    configuration = chosen.get("configuration")
    framework = _framework_name(chosen.get("framework")) or None
    level, confidence_why = _confidence(chosen.get("confidence"))
    alternatives = _alternatives(_first(chosen, ("alternatives", "runner_ups")))
    follows = chosen.get("follows")
    rationale = _strings(_first(chosen, ("rationale", "why", "reasons")))
    if follows == "measurements":
        rationale.append(
            "Decided by measurements on the profile's GPU type (they win over the tree)."
        )
    elif follows == "tree":
        rationale.append("Decided by the decision tree: no comparable measurement outranked it.")
    rationale += [
        _text(candidate.get("rationale"))
        for candidate in candidates
        if isinstance(candidate, Mapping) and _framework_name(candidate) == framework
    ]
    rationale += _strings(chosen.get("contradictions"))
    if confidence_why:
        rationale.append(f"Confidence {level}: {confidence_why}")
    would_change = _strings(
        _first(chosen, ("what_would_change", "would_change", "change_if", "flip_conditions"))
    )
    for alternative in chosen.get("alternatives") or []:
        if isinstance(alternative, Mapping):
            would_change += [
                f"{_framework_name(alternative)}: {_text(condition)}"
                for condition in alternative.get("what_would_change") or []
            ]
    caveats = _strings(chosen.get("caveats")) + _strings(decision.get("caveats"))
    if chosen is not stage:
        caveats += _strings(stage.get("caveats"))
    return StageReport(
        name=_text(_first(stage, ("name", "stage", "title")) or f"stage {index + 1}"),
        kind=_text(_first(stage, ("kind", "workload_kind"))) or None,
        framework=framework,
        configuration=configuration if isinstance(configuration, Mapping) else {},
        confidence=level,
        rationale=_unique(rationale),
        path=_steps(path),
        candidates=[_framework_name(candidate) for candidate in candidates],
        alternatives=alternatives,
        what_would_change=_unique(would_change),
        caveats=_unique(caveats),
        second_opinion=_second_opinion(stage.get("learned")),
    )


def _estimate(stages: Sequence[Mapping[str, Any]]) -> Estimate:
    for stage in stages:
        raw = stage.get("estimate")
        if isinstance(raw, Mapping) and raw:
            fits = raw.get("fits")
            if isinstance(raw.get("feasibility"), Mapping):
                fits = raw["feasibility"].get("fits", fits)
            return Estimate(
                available=True,
                fits=fits if isinstance(fits, bool) else None,
                decode_floor_ms=_number(
                    _deep_get(raw, "decode_floor_ms_per_token") or _deep_get(raw, "decode_floor_ms")
                ),
                prefill_floor_ms=_number(_deep_get(raw, "prefill_floor_ms")),
                items=flatten({k: v for k, v in raw.items() if k not in ("notes", "suggestions")}),
                notes=_strings(raw.get("notes")) + _strings(raw.get("suggestions")),
            )
    return Estimate(available=False, absent_reason="the advisor made no feasibility estimate")


def _deep_get(data: Any, key: str) -> Any:
    if isinstance(data, Mapping):
        if key in data:
            return data[key]
        for inner in data.values():
            found = _deep_get(inner, key)
            if found is not None:
                return found
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


# --------------------------------------------------------------------------- evidence


def _source_of(value: Any) -> str | None:
    text = _text(value).lower().replace("_", "-").replace(" ", "-")
    for source in ("measured-here", "measured-elsewhere", "published"):
        if source in text:
            return source
    return None


def advisor_sources(recommendation: Mapping[str, Any]) -> dict[str, str]:
    """run_id -> measured-here / measured-elsewhere as the advisor's evidence marks them."""
    marks: dict[str, str] = {}
    for row in advisor_evidence(recommendation):
        source = _source_of(_first(row, ("source", "marking", "provenance", "kind")))
        for run_id in _row_run_ids(row):
            if source:
                marks[run_id] = source
    return marks


def _row_run_ids(row: Mapping[str, Any]) -> list[str]:
    ids = row.get("run_ids") if isinstance(row.get("run_ids"), list) else [row.get("run_id")]
    return [run_id for run_id in ids if isinstance(run_id, str) and run_id]


def advisor_evidence(recommendation: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    rows: list[Mapping[str, Any]] = []
    for stage in _stages_of(recommendation):
        chosen = stage.get("recommendation")
        for holder in (stage, chosen if isinstance(chosen, Mapping) else {}):
            for row in holder.get("evidence") or []:
                if isinstance(row, Mapping) and row not in rows:
                    rows.append(row)
    return rows


def _percentile(summary: Any, metric: str, which: str) -> float | None:
    values = getattr(summary, metric, None)
    return getattr(values, which, None) if values is not None else None


def _run_context(run: RunResult) -> str:
    from bench.environment import primary_gpu_name

    device = primary_gpu_name(run.environment) if run.environment else None
    if run.config.device == "cpu" or not device:
        device = (run.environment.get("cpu") or {}).get("model") or "CPU"
    load = run.config.load
    shape = {
        "concurrency": lambda: f"concurrency {getattr(load, 'concurrency', '?')}",
        "rate": lambda: f"{getattr(load, 'rate_rps', '?')} req/s",
        "step": lambda: f"step ladder ({len(run.phases)} stages)",
        "steady": lambda: f"steady {getattr(load, 'fraction', '?')}x capacity",
        "pulse": lambda: f"pulse {getattr(load, 'burst_factor', '?')}x capacity",
    }[load.pattern]()
    return f"{run.config.model} on {device}, {run.config.precision.dtype}, {shape}"


def run_source(
    run: RunResult,
    marks: Mapping[str, str],
    here: Mapping[str, Any] | None,
    profile_gpus: Iterable[str] = (),
) -> str:
    """The advisor's mark when it cited the run; otherwise its rule: measured-here when the run's
    GPU is the profile's GPU type, measured-elsewhere for another GPU or a CPU. Without a GPU type
    in the profile, a run whose fingerprint digest and host match this machine is measured-here."""
    if run.run_id in marks and marks[run.run_id] != "published":
        return marks[run.run_id]
    from advisor.evidence import run_gpu_name, same_gpu_type
    from bench.environment import fingerprint_digest

    wanted = [gpu for gpu in profile_gpus if gpu]
    if wanted:
        run_gpu = run_gpu_name(run)
        same = any(same_gpu_type(run_gpu, gpu) for gpu in wanted)
        return "measured-here" if same else "measured-elsewhere"
    if not here or not run.environment:
        return "measured-elsewhere"
    same = fingerprint_digest(run.environment) == fingerprint_digest(dict(here))
    same_host = run.environment.get("hostname") == here.get("hostname")
    return "measured-here" if same and same_host else "measured-elsewhere"


def evidence_row(run: RunResult, source: str) -> EvidenceRow:
    summary = run.summary
    telemetry = run.telemetry
    return EvidenceRow(
        framework=run.config.backend,
        source=source,  # type: ignore[arg-type]
        run_id=run.run_id,
        context=_run_context(run),
        request_throughput_rps=summary.request_throughput_rps if summary else None,
        output_throughput_tok_s=summary.output_throughput_tok_s if summary else None,
        ttft_p50_ms=_percentile(summary, "ttft_ms", "p50"),
        ttft_p99_ms=_percentile(summary, "ttft_ms", "p99"),
        tpot_p50_ms=_percentile(summary, "tpot_ms", "p50"),
        e2e_p99_ms=_percentile(summary, "e2e_ms", "p99"),
        error_rate=summary.error_rate if summary else None,
        peak_gpu_memory_gb=telemetry.peak_gpu_memory_gb,
        gb_per_billion_params=telemetry.memory_efficiency_gb_per_b_params,
        energy_per_output_token_j=telemetry.energy_per_output_token_j,
        validity=run.validity.status.value if run.validity else run.status.value,
        validity_reasons=list(run.validity.reasons) if run.validity else [],
    )


_PUBLISHED_KEYS = {
    "request_throughput_rps": ("request_throughput_rps", "throughput_rps", "throughput_req_s"),
    "output_throughput_tok_s": ("output_throughput_tok_s",),
    "ttft_p50_ms": ("ttft_p50_ms", "ttft_ms_p50", "ttft_ms"),
    "ttft_p99_ms": ("ttft_p99_ms", "ttft_ms_p99"),
    "tpot_p50_ms": ("tpot_p50_ms", "tpot_ms_p50", "tpot_ms"),
    "e2e_p99_ms": ("e2e_p99_ms", "e2e_ms_p99", "p99_latency_ms", "p99_ms"),
    "error_rate": ("error_rate",),
    "peak_gpu_memory_gb": ("peak_gpu_memory_gb", "gpu_memory_gb"),
    "gb_per_billion_params": ("gb_per_billion_params", "memory_efficiency_gb_per_b_params"),
    "energy_per_output_token_j": ("energy_per_output_token_j",),
}


def published_rows(
    recommendation: Mapping[str, Any], seed_frameworks_file: str
) -> list[EvidenceRow]:
    """Published figures the advisor used, except the article's table (shown apart as reference)."""
    rows = []
    for row in advisor_evidence(recommendation):
        if _source_of(_first(row, ("source", "marking", "provenance", "kind"))) != "published":
            continue
        origin = _text(_first(row, ("reference", "origin", "file", "citation", "source_name")))
        if seed_frameworks_file in origin or "seed" in origin.lower():
            continue
        metrics = row.get("metrics") if isinstance(row.get("metrics"), Mapping) else row
        values = {field: _number(_first(metrics, keys)) for field, keys in _PUBLISHED_KEYS.items()}
        rows.append(
            EvidenceRow(
                framework=_framework_name(row),
                source="published",
                context=_text(_first(row, ("context", "conditions", "hardware", "gpu"))) or origin,
                validity="published",
                **values,
            )
        )
    return rows


# --------------------------------------------------------------------------- floors


def _datasheet_bandwidth_tb_s(run: RunResult) -> tuple[float | None, str]:
    from bench.environment import primary_gpu_name

    gpu_name = primary_gpu_name(run.environment) if run.environment else None
    if run.config.device == "cpu" or not gpu_name:
        return None, "ran on the CPU: no GPU memory-bandwidth floor applies"
    spec = find_gpu(gpu_name)
    if spec is None:
        return None, f"memory bandwidth of {gpu_name!r} unknown (not in the GPU catalogue)"
    return spec.memory_bandwidth_tb_s, f"{spec.name} datasheet bandwidth"


def floor_distance(
    run: RunResult, estimate: Estimate, profile_models: set[str] | frozenset[str] = frozenset()
) -> FloorDistance:
    """Measured TPOT p50 vs the batch-1 decode floor (weight bytes / memory bandwidth)."""
    measured = _percentile(run.summary, "tpot_ms", "p50")
    floor_ms: float | None = None
    note = ""
    bandwidth, why = _datasheet_bandwidth_tb_s(run)
    on_gpu = bandwidth is not None or "unknown" in why
    if bandwidth and run.model and run.model.weight_bytes:
        floor_ms = run.model.weight_bytes / (bandwidth * 1e12) * 1e3
        note = f"floor = {run.model.weight_bytes / 1e9:.3g} GB weights / {why}"
    elif on_gpu and estimate.decode_floor_ms and run.config.model in profile_models:
        # Only a GPU run of the profile's model compares with the estimate's GPU floor.
        floor_ms = estimate.decode_floor_ms
        note = f"floor from the feasibility estimate (the profile's model and GPU); {why}"
    else:
        note = why
    if measured is None:
        note = (note + "; " if note else "") + "no TPOT measured (one-token outputs or no success)"
    ratio = measured / floor_ms if measured and floor_ms else None
    return FloorDistance(
        framework=run.config.backend,
        run_id=run.run_id,
        measured_tpot_p50_ms=measured,
        decode_floor_ms=floor_ms,
        ratio_to_floor=ratio,
        percent_of_floor=100.0 / ratio if ratio else None,
        note=note,
    )


# --------------------------------------------------------------------------- diagnostics


def _diagnostics(
    recommendation: Mapping[str, Any], runs: Sequence[RunResult], extra: Iterable[Any]
) -> list[Diagnostic]:
    backend_of = {run.run_id: run.config.backend for run in runs}
    raw: list[tuple[str | None, Any]] = []
    sources = [recommendation.get("diagnostics")] + [
        stage.get("diagnostics") for stage in _stages_of(recommendation)
    ]
    for source in [*sources, list(extra)]:
        if isinstance(source, Mapping):  # run_id -> findings
            for run_id, findings in source.items():
                raw += [(run_id, finding) for finding in (findings or [])]
        elif isinstance(source, list):
            raw += [(None, finding) for finding in source]
    out: list[Diagnostic] = []
    for run_id, finding in raw:
        finding = as_plain(finding)
        if not isinstance(finding, Mapping):
            out.append(Diagnostic(run_id=run_id, title=_text(finding)))
            continue
        run_id = finding.get("run_id") or run_id
        item = Diagnostic(
            run_id=run_id,
            framework=finding.get("framework") or backend_of.get(run_id or ""),
            title=_text(_first(finding, ("title", "rule", "name", "check", "what")) or "finding"),
            severity=_text(finding.get("severity") or "warning"),
            finding=_text(_first(finding, ("finding", "detail", "message", "evidence", "why"))),
            advice=_text(_first(finding, ("advice", "remedy", "fix"))),
            command=_text(_first(finding, ("command", "profile_command", "profiling_command")))
            or None,
        )
        if item not in out:
            out.append(item)
    for run in runs:
        if run.failure is not None:
            out.append(
                Diagnostic(
                    run_id=run.run_id,
                    framework=run.config.backend,
                    title="run failed",
                    severity="error",
                    finding=run.failure.cause,
                    advice=run.failure.advice or "",
                )
            )
    return out


# --------------------------------------------------------------------------- environment


def _environment_items(fp: Mapping[str, Any]) -> list[KeyValue]:
    shown = {key: value for key, value in fp.items() if key not in ("libraries",)}
    libraries = {name: v for name, v in (fp.get("libraries") or {}).items() if v is not None}
    return flatten(shown) + flatten({"libraries": libraries})


def _run_environment(run: RunResult) -> RunEnvironment:
    from bench.environment import fingerprint_digest, primary_gpu_name

    env = run.environment or {}
    libraries = env.get("libraries") or {}
    items = {
        "host": env.get("hostname"),
        "gpu": primary_gpu_name(env) or "none",
        "driver": env.get("driver_version"),
        "cpu": (env.get("cpu") or {}).get("model"),
        "torch": libraries.get("torch"),
        run.config.backend: run.engine.get("version"),
        "comparability digest": fingerprint_digest(env) if env else None,
    }
    return RunEnvironment(run_id=run.run_id, framework=run.config.backend, items=flatten(items))


def _preflight(items: Iterable[Any]) -> list[PreflightWarning]:
    out = []
    for item in items:
        data = as_plain(item)
        out.append(
            PreflightWarning(
                severity=_text(data.get("severity")),
                what=_text(data.get("what")),
                why=_text(data.get("why")),
                admin_command=data.get("admin_command"),
            )
        )
    return out


# --------------------------------------------------------------------------- reference


COLUMN_LABELS = {
    "framework": "Framework",
    "precision": "Precision",
    "request_throughput_rps": "Requests/s",
    "throughput_rps": "Requests/s",
    "output_throughput_tok_s": "Output tok/s",
    "e2e_ms_p99": "E2E p99 (ms)",
    "p99_latency_ms": "P99 latency (ms)",
    "peak_gpu_memory_gb": "GPU memory (GB)",
    "ttft_ms_statistic_not_stated": "TTFT (ms, statistic not stated)",
    "ttft_ms": "TTFT (ms)",
}


def column_label(key: str) -> str:
    return COLUMN_LABELS.get(key) or key.replace("_", " ")


def load_reference(path: Path) -> ReferenceTable:
    """The article's published table from data/reference (`kind: published` layout; a plain
    `columns` + `rows` table works too)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read reference table {str(path)!r}: {exc}") from None
    if not isinstance(data, Mapping):
        raise UserError(f"reference table {str(path)!r} is not a JSON object")
    rows_raw = data.get("rows") or []
    keys: list[str] = list(data.get("columns") or [])
    for row in rows_raw:
        if isinstance(row, Mapping):
            for key, value in row.items():
                plain = isinstance(value, str | int | float) or value is None
                if plain and key not in keys:
                    keys.append(key)
    rows: list[list[Any]] = []
    for row in rows_raw:
        if isinstance(row, Mapping):
            rows.append([row.get(key) for key in keys])
        elif isinstance(row, list):
            rows.append(list(row) + [None] * (len(keys) - len(row)))
    source = data.get("source")
    source_title = _text(source.get("title")) if isinstance(source, Mapping) else _text(source)
    conditions = _first(data, ("conditions", "hardware", "environment")) or {}
    if isinstance(conditions, Mapping):
        conditions = ", ".join(
            f"{key.replace('_', ' ')}: {_text(value)}"
            for key, value in conditions.items()
            if not key.endswith("_as_published") or key == "gpu_as_published"
        )
    model = data.get("model_as_published") or data.get("model")
    if model:
        conditions = f"model: {_text(model)}" + (f"; {conditions}" if conditions else "")
    caveats = _strings(data.get("caveats"))
    configurations = data.get("configurations")
    if isinstance(configurations, Mapping):
        caveats += [f"{name} configuration: {_text(v)}" for name, v in configurations.items()]
    return ReferenceTable(
        title=_text(data.get("title")) or "Article: Llama2-13B on NVIDIA A100 80GB PCIe",
        source=source_title
        or '"A panoramic analysis of AI inference framework performance testing" (published)',
        conditions=_text(conditions),
        note=_text(data.get("note"))
        or "Published figures, not measured by this project, and not comparable row by row.",
        caveats=caveats,
        keys=keys,
        columns=[column_label(key) for key in keys],
        rows=rows,
    )


# --------------------------------------------------------------------------- caveats


def _not_measured(
    stages: Sequence[StageReport], runs: Sequence[RunResult], availability: Mapping[str, Any]
) -> list[Caveat]:
    measured = {run.config.backend for run in runs if run.summary and run.summary.successful}
    wanted: list[str] = []
    for stage in stages:
        for name in [
            stage.framework,
            *stage.candidates,
            *(a.framework for a in stage.alternatives),
        ]:
            if name and name not in wanted:
                wanted.append(name)
    caveats = []
    for name in wanted:
        if name in measured:
            continue
        info = as_plain(availability.get(name)) if name in availability else None
        if isinstance(info, str):  # the advisor's map: "available" or the reason it is not
            info = {"available": info == "available", "reason": info}
        if info is None:
            why = "no backend of that name in this installation (not benchmarked here)"
        elif not info.get("available"):
            why = f"not installed or not runnable here: {info.get('reason') or 'no reason given'}"
        else:
            why = "installed here but no stored run of it was included"
        caveats.append(Caveat(kind="not-measured", framework=name, text=why))
    return caveats


# --------------------------------------------------------------------------- the report


def _profile_meta(profile_data: Mapping[str, Any]) -> dict[str, str | None]:
    def pick(keys: Iterable[str]) -> str | None:
        value = _first(profile_data, keys)
        return _text(value) if value is not None else None

    return {
        "title": pick(_TITLE_KEYS),
        "for_whom": pick(_FOR_WHOM_KEYS),
        "description": pick(_DESCRIPTION_KEYS),
    }


def build_report(
    profile: Any,
    recommendation: Any,
    runs: Sequence[RunResult],
    records: Mapping[str, list[RequestRecord]],
    *,
    environment: Mapping[str, Any] | None = None,
    preflight: Iterable[Any] = (),
    availability: Mapping[str, Any] | None = None,
    reference: ReferenceTable | None = None,
    reference_absent_reason: str | None = None,
    profile_file: str | None = None,
    now: datetime | None = None,
    extra_diagnostics: Iterable[Any] = (),
) -> Report:
    """The report's data, from already-loaded inputs (no I/O apart from optional catalogues)."""
    profile_data = as_plain(profile) or {}
    rec = as_plain(recommendation) or {}
    meta_fields = _profile_meta(profile_data)
    title = meta_fields["title"] or "Inference framework recommendation"
    stage_dicts = _stages_of(rec)
    stages = [stage_report(stage, index) for index, stage in enumerate(stage_dicts)]
    marks = advisor_sources(rec)
    estimate = _estimate(stage_dicts)
    profile_models = {
        _text(stage.get("model"))
        for stage in [profile_data, *(profile_data.get("stages") or [])]
        if isinstance(stage, Mapping) and isinstance(stage.get("model"), str)
    }

    profile_gpus = [
        _text((stage.get("gpu") or {}).get("type"))
        for stage in [profile_data, *(profile_data.get("stages") or [])]
        if isinstance(stage, Mapping) and isinstance(stage.get("gpu"), Mapping)
    ]
    sources = {run.run_id: run_source(run, marks, environment, profile_gpus) for run in runs}
    evidence = [evidence_row(run, sources[run.run_id]) for run in runs]
    evidence += published_rows(rec, SEED_REFERENCE_FILE)
    evidence.sort(key=lambda row: (SOURCE_RANK[row.source], row.framework))

    advisor_availability: dict[str, Any] = {}
    for stage in stage_dicts:
        chosen = stage.get("recommendation")
        if isinstance(chosen, Mapping) and isinstance(chosen.get("availability"), Mapping):
            advisor_availability.update(chosen["availability"])
    caveats = _not_measured(stages, runs, {**advisor_availability, **(availability or {})})
    for stage in stages:
        caveats += [
            Caveat(kind="recommendation", framework=stage.framework, text=f"{stage.name}: {text}")
            for text in stage.caveats
        ]
    for text in _strings(rec.get("caveats")) if stage_dicts != [rec] else []:
        caveats.append(Caveat(kind="recommendation", text=text))
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
    if environment and not environment.get("gpu_available"):
        caveats.append(
            Caveat(
                kind="environment",
                text="GPU memory, power and energy are absent: "
                + _text(environment.get("gpu_reason") or "no GPU on the measuring machine"),
            )
        )

    headline = "; ".join(
        f"{stage.name}: {stage.framework or 'no recommendation'}"
        + (f" (confidence {stage.confidence})" if stage.confidence else "")
        for stage in stages
    )
    return Report(
        meta=ReportMeta(
            title=title,
            generated_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
            for_whom=meta_fields["for_whom"],
            description=meta_fields["description"],
            profile_file=profile_file,
        ),
        profile=flatten(profile_data),
        profile_data=profile_data if isinstance(profile_data, dict) else {},
        headline=headline or "The advisor returned no recommendation.",
        stages=stages,
        evidence=evidence,
        reference=reference,
        reference_absent_reason=None if reference else reference_absent_reason,
        charts=derive_charts(runs, records),
        estimate=estimate,
        floor_distances=[floor_distance(run, estimate, profile_models) for run in runs],
        diagnostics=_diagnostics(rec, runs, extra_diagnostics),
        environment=EnvironmentSection(
            fingerprint=_environment_items(environment) if environment else [],
            fingerprint_absent_reason=None if environment else "no fingerprint was taken",
            preflight=_preflight(preflight),
            runs=[_run_environment(run) for run in runs],
        ),
        reproduce=[
            ReproduceEntry(
                run_id=run.run_id,
                framework=run.config.backend,
                status=run.status.value,
                created_at=run.created_at,
                command=run.command or "(no command stored with this run)",
            )
            for run in runs
        ],
        caveats=caveats,
        runs=[
            RunRef(
                run_id=run.run_id,
                framework=run.config.backend,
                model=run.config.model,
                pattern=run.config.load.pattern,
                status=run.status.value,
                validity=run.validity.status.value if run.validity else None,
                source=sources[run.run_id],  # type: ignore[arg-type]
                records=sum(1 for r in records.get(run.run_id, []) if not r.warmup),
            )
            for run in runs
        ],
    )


# --------------------------------------------------------------------------- loading (CLI)


def relevant_run_ids(recommendation: Any) -> list[str]:
    """Run ids the advisor's evidence cites (the default runs of a report)."""
    ids: list[str] = []
    for row in advisor_evidence(as_plain(recommendation) or {}):
        for run_id in _row_run_ids(row):
            if run_id not in ids:
                ids.append(run_id)
    return ids


def assemble_report(
    profile_path: str | Path,
    run_ids: Sequence[str] = (),
    store_location: str | None = None,
    reference_dir: Path | None = None,
) -> Report:
    """Load the profile, ask the advisor, read runs and records, and build the Report.

    Runs: those named (each must exist in the store or the reference folder), else every run
    the advisor's evidence cites for the profile.
    """
    from advisor.profile import load_profile
    from advisor.recommend import availability_map, recommend
    from bench.backends import all_availability
    from bench.environment import fingerprint, preflight
    from bench.store import ResultStore

    profile_path = Path(profile_path)
    profile = load_profile(profile_path)
    store = ResultStore(store_location)
    reference_dir = reference_dir or evidence.DEFAULT_REFERENCE_DIR
    reference_files = evidence.read_reference_folder(reference_dir)
    backends = all_availability()
    recommendation = recommend(
        profile, store=store, reference=reference_files, availability=availability_map(backends)
    )
    # Measured RunResults stored as files in data/reference (cited by the advisor too).
    reference_runs = {
        run.run_id: run for file_runs in reference_files.runs.values() for run in file_runs
    }
    chosen = list(dict.fromkeys(run_ids)) or relevant_run_ids(recommendation)
    runs: list[RunResult] = []
    records: dict[str, list[RequestRecord]] = {}
    for run_id in chosen:
        if run_id in reference_runs:  # a file in data/reference: no per-request records
            runs.append(reference_runs[run_id])
            records[run_id] = []
            continue
        runs.append(store.get_run(run_id))  # UserError names a run that is nowhere
        records[run_id] = list(store.iter_records(run_id))
    environment = fingerprint()
    seed_path = reference_dir / SEED_REFERENCE_FILE
    reference, absent = None, None
    if seed_path.is_file():
        reference = load_reference(seed_path)
    else:
        absent = f"{SEED_REFERENCE_FILE} is not in {reference_dir}"
    return build_report(
        profile,
        recommendation,
        runs,
        records,
        environment=environment,
        preflight=preflight(environment),
        availability={item.name: item for item in backends},
        reference=reference,
        reference_absent_reason=absent,
        profile_file=profile_path.name,
    )


__all__ = [
    "as_plain",
    "assemble_report",
    "build_report",
    "flatten",
    "load_reference",
    "pattern_facts",
    "relevant_run_ids",
]
