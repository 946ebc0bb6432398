"""The metric catalogue (bench/core/metric_catalog.py): every declared metric reads back from real
shipped results, every spelling it derives is a stored field, and its better directions are the
directions the SLO checks (evidence, step ladder, capacity judge) apply."""

from __future__ import annotations

import math
import typing
from pathlib import Path

import pytest

from advisor.evidence.rows import _slo_check, objective_metric
from advisor.report.model import REPORT_METRICS, RESOURCE_COLUMNS, SPEED_COLUMNS, EvidenceFigures
from advisor.sizing.measured import measured_reference_runs
from advisor.workload.profile import Objective, ProfileSLO, StageProfile
from bench.core.config import SLO, ValidityRules
from bench.core.metric_catalog import (
    LADDER_LATENCIES,
    METRICS,
    METRICS_BY_NAME,
    REQUEST_SLO_BOUNDS,
    SLO_BOUNDS,
    SPECS,
    SPECS_BY_KEY,
    CataloguedFields,
    Metric,
    higher_is_better,
    metric,
    read_all,
    stored_field_problems,
)
from bench.core.metrics import summarize
from bench.core.pattern_reports import LadderStage
from bench.core.schema import MetricsSummary, Percentiles, RunResult, TelemetrySummary
from bench.core.stats import GROUP_METRICS
from bench.orchestrate.compare import HEADLINE_METRICS, load_side
from bench.run.load.capacity import SLO_METRICS, judge_probe
from bench.run.load.patterns import slo_breaches

REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference"
CAMPAIGN = REFERENCE / "h200_llama2-7b_engines_bert_resnet" / "campaign-llama2-7b-ladders.json"


@pytest.fixture(scope="module")
def reference_runs() -> list[RunResult]:
    runs = [run for found in measured_reference_runs(REFERENCE).values() for run in found]
    assert len(runs) > 20
    return runs


def _stored(run: RunResult, item: Metric) -> float | None:
    """The metric's figure read from the run's JSON form (what the file stores), not the
    catalogue's reader: a field path per source, the derived formula written out."""
    data = run.model_dump(mode="json")
    spec = item.spec
    kind = data["config"]["workload"]["kind"]
    # A forward run has no token metrics, a generate run no per-sample ones.
    if kind not in spec.kinds:
        return None
    if spec.source == "derived":
        summary = data["summary"]
        # A forward run's stored output throughput counts samples (its chunks are samples).
        rate = summary["output_throughput_tok_s"]
        if spec.key == "input_token_throughput_tok_s":
            if data["config"]["workload"].get("sequence_length") is None:
                return None
            return rate * summary["input_tokens"] / summary["output_tokens"]
        return run.config.parallelism.gpus_needed * 1e6 / rate if rate > 0 else None
    holder = data["telemetry"] if spec.source == "telemetry" else data["summary"]
    value = holder.get(spec.stored_as or spec.key) if holder else None
    if item.statistic is not None and value is not None:
        value = value[item.statistic]
    return value


def test_every_declared_metric_reads_back_from_shipped_runs(reference_runs) -> None:
    seen: dict[str, int] = {}
    for run in reference_runs:
        for item in METRICS:
            value = item.read(run.summary, run)
            assert value == _stored(run, item), (item.name, run.run_id)
            if value is not None:
                assert isinstance(value, float) and math.isfinite(value)
                seen[item.name] = seen.get(item.name, 0) + 1
    # The capacity runs (h200_llama2-7b_capacity_chat_slo) are measured under an SLO, so they
    # store a goodput too; the prefix-cache hit rate comes from vLLM's counters in the CPU
    # prefix-reuse runs (cpu_tiny-llama_prefix_reuse): every declared metric reads back.
    assert set(METRICS_BY_NAME) - set(seen) == set()


def test_the_prefix_cache_hit_rate_is_declared_and_read_from_the_summary(reference_runs) -> None:
    """The hit rate the runner stores on MetricsSummary (bench/run/api.py) reads back through
    the catalogue; the value is set here on a run that measured none."""
    spec = SPECS_BY_KEY["prefix_cache_hit_rate"]
    assert spec.higher_is_better and not spec.is_distribution and spec.source == "summary"
    run = next(
        r
        for r in reference_runs
        if r.config.workload.kind == "generate" and r.summary.prefix_cache_hit_rate is None
    )
    assert metric("prefix_cache_hit_rate").read(run.summary, run) is None
    measured = run.summary.model_copy(update={"prefix_cache_hit_rate": 0.25})
    assert metric("prefix_cache_hit_rate").read(measured, run) == 0.25
    assert read_all(measured, run)["prefix_cache_hit_rate"] == 0.25


def test_goodput_reads_back_from_a_summary_of_shipped_records() -> None:
    side = load_side(str(CAMPAIGN))
    loaded = next(item for item in side.runs if item.records)
    stored = loaded.result.summary
    assert stored is not None and stored.e2e_ms is not None
    limit = stored.e2e_ms.p50
    summary = summarize(loaded.records, SLO(e2e_ms=limit), gpus=stored.gpus)
    goodput = metric("goodput_rps").read(summary, loaded.result)
    assert goodput is not None
    # Half of the requests (those at or under the median E2E) meet an SLO at the median.
    assert 0.4 * summary.request_throughput_rps < goodput < 0.6 * summary.request_throughput_rps
    assert metric("e2e_ms_p50").read(summary) == pytest.approx(limit, rel=1e-9)


def test_read_all_names_every_present_metric_in_declaration_order(reference_runs) -> None:
    run = next(
        r
        for r in reference_runs
        if r.config.workload.kind == "generate" and r.summary and r.summary.ttft_ms is not None
    )
    values = read_all(run.summary, run)
    order = [item.name for item in METRICS if item.name in values]
    assert list(values) == order
    assert values["ttft_ms_p99"] == run.summary.ttft_ms.p99
    assert read_all(None, None) == {}


def test_names_are_unique_and_the_stored_spellings_are_fields() -> None:
    assert len(METRICS_BY_NAME) == len(METRICS)
    assert len({spec.key for spec in SPECS}) == len(SPECS)
    statistics = set(Percentiles.model_fields) - {"count"}
    for spec in SPECS:
        fields = (
            TelemetrySummary.model_fields
            if spec.source == "telemetry"
            else MetricsSummary.model_fields
        )
        if spec.source != "derived":
            assert (spec.stored_as or spec.key) in fields, spec.key
        if spec.is_distribution:
            assert set(spec.statistics) == statistics
            assert typing.get_args(MetricsSummary.model_fields[spec.key].annotation)[0] is (
                Percentiles
            )
        assert spec.definition
    for item in REPORT_METRICS:
        assert item.report_field in EvidenceFigures.model_fields, item.report_field
    for item in LADDER_LATENCIES:
        assert item.ladder_field in LadderStage.model_fields, item.ladder_field
    assert metric("ttft_ms_p99").report_field == "ttft_p99_ms"
    assert metric("ttft_ms_p99").ladder_field == "p99_ttft_ms"


def test_summary_fields_are_declared_from_the_catalogue() -> None:
    """MetricsSummary and TelemetrySummary hold a field for every stored spec, declared with the
    spec's `stored_field` (its definition as the description, its key as the name, its shape as
    the type); a turn's latencies too."""
    from bench.core.schema import TurnMetrics

    assert stored_field_problems(MetricsSummary, "summary") == []
    assert stored_field_problems(TelemetrySummary, "telemetry") == []
    assert stored_field_problems(TurnMetrics, "summary", every_spec=False) == []
    field = MetricsSummary.model_fields["ttft_ms"]
    assert field.description == SPECS_BY_KEY["ttft_ms"].definition
    assert field.json_schema_extra == {"metric": "ttft_ms", "unit": "ms", "better": "lower"}
    assert MetricsSummary.model_fields["request_throughput_rps"].is_required()
    assert not MetricsSummary.model_fields["goodput_rps"].is_required()


def test_a_summary_field_that_drifts_from_the_catalogue_is_named() -> None:
    """A TEST DOUBLE summary model with each kind of drift: a metric restated by hand, a field
    named apart from its spec, a spec's field of the wrong shape, a missing spec."""
    from pydantic import BaseModel

    from bench.core.metric_catalog import E2E_MS, TPOT_MS

    class Drifted(BaseModel):
        ttft_ms: Percentiles | None = None
        e2e: Percentiles | None = E2E_MS.stored_field(None)
        tpot_ms: float | None = TPOT_MS.stored_field(None)

    problems = stored_field_problems(Drifted, "summary")
    assert problems[:3] == [
        "Drifted.ttft_ms restates a catalogued metric: use stored_field",
        "Drifted.e2e is declared from the metric 'e2e_ms'",
        "Drifted.tpot_ms is float | None, its spec needs <class "
        "'bench.core.percentiles.Percentiles'>",
    ]
    assert "Drifted has no field for the catalogued metric 'itl_ms'" in problems
    assert stored_field_problems(Drifted, "telemetry", every_spec=False) == [
        "Drifted.e2e is declared from the metric 'e2e_ms'",
        "Drifted.tpot_ms is a summary metric, not telemetry",
        "Drifted.tpot_ms is float | None, its spec needs <class "
        "'bench.core.percentiles.Percentiles'>",
    ]


def _catalogued_models() -> list[type]:
    from bench.core import pattern_reports
    from bench.orchestrate import fidelity

    found = []
    for module in (pattern_reports, fidelity):
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, CataloguedFields)
                and value.field_metrics
            ):
                found.append(value)
    return found


def test_stored_figure_fields_name_the_catalogued_metric_they_hold() -> None:
    """Every `field_metrics` entry is a field of its model holding the metric its name says:
    the stored spelling (`baseline_p99_e2e_ms`, `backend_ttft_ms_p50`) contains the metric's
    ladder (`p99_e2e_ms`) or catalogue (`ttft_ms_p50`) spelling, so a label read through
    `metric_of` is the figure's own."""
    from bench.core.pattern_reports import PulseAnalysis, SoakFits, SoakWindow
    from bench.orchestrate.fidelity import FidelityPair, FidelityResult

    models = _catalogued_models()
    assert {PulseAnalysis, SoakFits, SoakWindow, LadderStage, FidelityPair, FidelityResult} <= set(
        models
    )
    for model in models:
        for field_name in model.field_metrics:
            held = model.metric_of(field_name)
            assert field_name in model.model_fields, (model.__name__, field_name)
            assert held.ladder_field in field_name or held.name in field_name, (field_name, held)
    assert PulseAnalysis.metric_of("peak_window_p99_e2e_ms").label == "E2E p99"
    with pytest.raises(KeyError, match=r"PulseAnalysis.peak_e2e_ms holds no catalogued metric"):
        PulseAnalysis.metric_of("peak_e2e_ms")


def test_tables_and_intervals_use_the_catalogue() -> None:
    assert SPEED_COLUMNS == (
        "Requests/s",
        "Output tok/s",
        "TTFT p50 (ms)",
        "TTFT p99 (ms)",
        "TPOT p50 (ms)",
        "E2E p99 (ms)",
        "Errors",
    )
    # The Resources table's headings, as the report wrote them by hand before.
    assert RESOURCE_COLUMNS == (
        "Peak GPU memory (GB)",
        "GB per billion parameters",
        "Energy per output token (J)",
    )
    assert [metric(name).title for name in ("output_throughput_tok_s", "ttft_ms_p99")] == [
        "Output throughput",
        "TTFT p99",
    ]
    for item in GROUP_METRICS:
        assert METRICS_BY_NAME[item.name] == item
    assert {item.family for item in GROUP_METRICS} == {"rate", "ttft", "tpot", "itl", "e2e"}
    assert all(name in METRICS_BY_NAME for name in HEADLINE_METRICS)
    with pytest.raises(KeyError, match="unknown metric 'ttft_p99_ms'; known: request_"):
        metric("ttft_p99_ms")


def test_objectives_rank_in_the_declared_direction() -> None:
    expected = {
        Objective.MINIMIZE_LATENCY: False,
        Objective.MINIMIZE_COST_PER_TOKEN: False,
        Objective.MAXIMIZE_GOODPUT: True,
    }
    for objective in Objective:
        for published in (False, True):
            stage = StageProfile(name="s", objective=objective)
            name = objective_metric(stage, published)
            assert name in METRICS_BY_NAME
            assert higher_is_better(name) is expected.get(objective, True), (objective, name)
    assert not higher_is_better("not_a_metric")


# --------------------------------------------------------------------------- SLO directions


def test_every_slo_limit_is_a_declared_bound_in_the_metrics_direction() -> None:
    limits = {name for name in ProfileSLO.model_fields if name not in ("percentile",)}
    assert {bound.field for bound in SLO_BOUNDS} == limits
    assert {bound.field for bound in REQUEST_SLO_BOUNDS} == set(SLO.model_fields) - {"percentile"}
    assert tuple(bound.field for bound in REQUEST_SLO_BOUNDS) == SLO_METRICS
    for bound in SLO_BOUNDS:
        # A minimum is named so in the profile; a maximum limits a lower-is-better metric.
        assert bound.is_minimum is bound.field.startswith("min_")
        assert bound.spec.higher_is_better is bound.is_minimum
        assert bound.broken(2.0, 1.0) is not bound.is_minimum
        assert bound.broken(1.0, 2.0) is bound.is_minimum


def _latency_run(reference_runs: list[RunResult]) -> RunResult:
    return next(
        run
        for run in reference_runs
        if run.summary is not None
        and run.summary.successful
        and run.config.workload.kind == "generate"  # the bounds' token metrics
        and all(getattr(run.summary, b.spec.key) is not None for b in REQUEST_SLO_BOUNDS)
    )


@pytest.mark.parametrize("bound", SLO_BOUNDS, ids=lambda bound: bound.field)
def test_evidence_slo_check_follows_the_bound(reference_runs, bound) -> None:
    run = _latency_run(reference_runs)
    metrics = read_all(run.summary, run)
    value = metrics[bound.metric_at("p90").name]
    stricter = value * (1.25 if bound.is_minimum else 0.8)
    looser = value * (0.8 if bound.is_minimum else 1.25)
    stage = StageProfile(name="s", slo=ProfileSLO(percentile="p90", **{bound.field: stricter}))
    meets, failures = _slo_check(stage, metrics, published=False)
    assert meets is False and failures[0].startswith(bound.metric_at("p90").name)
    stage = StageProfile(name="s", slo=ProfileSLO(percentile="p90", **{bound.field: looser}))
    assert _slo_check(stage, metrics, published=False) == (True, [])


@pytest.mark.parametrize("bound", REQUEST_SLO_BOUNDS, ids=lambda bound: bound.field)
def test_ladder_and_capacity_judge_follow_the_bound(reference_runs, bound) -> None:
    run = _latency_run(reference_runs)
    summary = run.summary
    rules = ValidityRules(max_error_rate=1.0)
    p99 = bound.metric_at("p99").read(summary)
    assert not bound.is_minimum and p99 is not None
    below = SLO(**{bound.field: p99 * 0.8})
    above = SLO(**{bound.field: p99 * 1.25})
    assert slo_breaches(summary, below, rules) == [
        f"p99 {bound.spec.family} {p99:.1f} ms > SLO {p99 * 0.8:g} ms"
    ]
    assert slo_breaches(summary, above, rules) == []
    feasible, _, binding = judge_probe(summary, below, "p99", 0.0)
    assert (feasible, binding) == (False, bound.field)
    assert judge_probe(summary, above, "p99", 0.0)[0] is (summary.failed == 0)


def test_a_missing_figure_meets_or_fails_as_its_bound_declares() -> None:
    """Goodput of shipped records, one of them turned into a one-token answer and one into a
    request whose chunks never came: vLLM's rule, declared on the bounds."""
    side = load_side(str(CAMPAIGN))
    records = next(item.records for item in side.runs if item.records)[:20]
    assert all(record.error is None and len(record.chunk_ns) > 1 for record in records)
    one_token = records[0].model_copy(
        update={"chunk_ns": records[0].chunk_ns[:1], "chunk_tokens": [], "output_tokens": 1}
    )
    no_chunk = records[1].model_copy(update={"chunk_ns": [], "chunk_tokens": []})
    changed = [one_token, no_chunk, *records[2:]]
    bounds = {bound.field: bound for bound in REQUEST_SLO_BOUNDS}
    assert not bounds["ttft_ms"].missing_meets and bounds["tpot_ms"].missing_meets
    generous = 1e6  # every defined figure is within it
    for field, expected_misses in (("ttft_ms", 1), ("tpot_ms", 0), ("e2e_ms", 0)):
        summary = summarize(changed, SLO(**{field: generous}))
        assert summary.goodput_rps == pytest.approx(
            (len(changed) - expected_misses) / summary.duration_s
        ), field


def test_slo_form_labels_name_the_direction_and_unit() -> None:
    assert [bound.form_label("p90") for bound in SLO_BOUNDS] == [
        "TTFT p90 at most (ms)",
        "TPOT p90 at most (ms)",
        "End-to-end p90 at most (ms)",
        "Request throughput at least (req/s)",
        "Output throughput at least (tok/s)",
    ]


def test_bench_run_summary_lines_name_the_metrics_as_the_catalogue(reference_runs, capsys) -> None:
    """`bench run`'s printed summary of a shipped run: units and labels from the catalogue, in
    the words the command always printed."""
    from bench.cli import _print_result

    run = next(
        r
        for r in reference_runs
        if r.config.workload.kind == "generate" and r.summary and r.summary.tok_s_per_user
    )
    _print_result(run)
    out = capsys.readouterr().out
    s = run.summary
    assert (
        f"{s.request_throughput_rps:.2f} req/s, {s.output_throughput_tok_s:.1f} output tok/s"
    ) in out
    assert (
        f"  tok/s per user {s.tok_s_per_user:.1f} (1000 / TPOT p50), output tok/s per GPU " in out
    )


def test_forward_cost_is_per_sample_and_falls_with_the_batch(reference_runs) -> None:
    """Issue 48: GPU time per million was divided by requests (batches) for forward runs, which
    ranked batch 64 dearer than batch 1. On the shipped H200 BERT/ResNet runs (PyTorch, batch 1
    and 64) the per-sample cost falls with the batch, and no forward run has a per-token one."""
    forward = [run for run in reference_runs if run.config.workload.kind == "forward"]
    assert forward
    cost, tokens = metric("gpu_s_per_million_samples"), metric("gpu_s_per_million_tokens")
    by_batch: dict[tuple[str, str, int], float] = {}
    for run in forward:
        assert tokens.read(run.summary, run) is None
        assert metric("ttft_ms_p99").read(run.summary, run) is None
        samples = metric("sample_throughput_per_s").read(run.summary, run)
        per_batch = run.summary.request_throughput_rps * run.config.workload.batch_size
        assert samples == pytest.approx(per_batch, rel=0.01)
        key = (run.config.backend, run.config.model, run.config.workload.batch_size)
        by_batch[key] = cost.read(run.summary, run)
    for model in ("bert-base", "resnet-50"):
        assert by_batch[("pytorch", model, 64)] * 10 < by_batch[("pytorch", model, 1)]


def test_shown_as_gives_a_forward_run_its_own_units() -> None:
    from bench.core.metric_catalog import shown_as

    assert shown_as("output_throughput_tok_s", "forward").name == "sample_throughput_per_s"
    assert shown_as("gpu_s_per_million_tokens", "forward").name == "gpu_s_per_million_samples"
    assert shown_as("ttft_ms_p99", "forward") is None
    assert shown_as("e2e_ms_p99", "forward").name == "e2e_ms_p99"
    assert shown_as("ttft_ms_p99", "generate").name == "ttft_ms_p99"
    assert shown_as("sample_throughput_per_s", "generate") is None
