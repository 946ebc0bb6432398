"""The versioned report data model: everything a report shows, as data, before any formatting.

`build.py` fills a `Report`; each formatter (markdown, html, pdf, json) only renders it. The JSON
format is `Report.model_dump_json()` and reads back with `Report.model_validate_json()`.
Bump `REPORT_SCHEMA_VERSION` on any change that is not a new optional field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from advisor.sizing.deployments import RecommendedDeployment
from bench.core.metric_catalog import Metric
from bench.core.metric_catalog import metric as catalogue_metric
from bench.core.strict import Strict

REPORT_SCHEMA_VERSION = 2
"""2: a stage's `configuration` is the typed `RecommendedDeployment` (parallelism and precision
as their own fields, never inside engine_args) instead of a free-form dict."""
MAX_CHART_POINTS = 4000
"""Points one chart may hold over all its series. Per-request and per-sample data are aggregated
before a Chart exists (advisor/report/aggregate.py), so a chart's Vega-Lite spec, the SVG and the
report files stay small whatever the run size (altair refuses inline data above 5,000 rows)."""

EvidenceSource = Literal["measured-here", "measured-elsewhere", "published"]
EVIDENCE_SOURCES: tuple[str, ...] = ("measured-here", "measured-elsewhere", "published")
"""Whether a row's GPU is the profile's GPU type (`published`: a figure of a published table);
who measured it is `Provenance`, a separate question."""

Provenance = Literal["yours", "published", "article"]
"""Who measured a figure (advisor.evidence.rows's vocabulary): your runs (this store), this
project's published runs (data/reference, with host and date), the article's figures."""
PROVENANCE_LABELS: dict[str, str] = {
    "yours": "your run",
    "published": "published run",
    "article": "the article",
}
FactSource = Literal["yours", "published", "article", "tree", "estimate", "profile"]
"""Where a fact of the decision comes from: the three provenances of a measurement, the
decision tree, the feasibility estimate (a model's figure, nothing measured), or the profile."""
FACT_SOURCE_LABELS: dict[str, str] = {
    "yours": "your runs",
    "published": "this project's published runs",
    "article": "the article's figures",
    "tree": "the decision tree",
    "estimate": "estimate, not measured",
    "profile": "your profile",
}

SECTIONS: tuple[tuple[str, str], ...] = (
    ("decision", "The decision"),
    ("workload", "The workload"),
    ("recommendation", "Recommendation in detail"),
    ("evidence", "Evidence"),
    ("charts", "Charts"),
    ("capacity", "Capacity and cost"),
    ("feasibility", "Feasibility and physical floor"),
    ("reference", "The article's figures (A100, reference only)"),
    ("caveats", "Caveats"),
    ("runs", "Appendix A: every run and its command"),
    ("environment", "Appendix B: environment"),
    ("decision-path", "Appendix C: decision path"),
    ("diagnostics", "Appendix D: diagnostics"),
    ("probes", "Appendix E: capacity search probes"),
    ("calibration", "Appendix F: estimate accuracy"),
)
"""(anchor id, heading) of every section, in order; every format prints each heading once."""


class ReportPart(Strict):
    """Base for report models: unknown fields are errors (a corrupt report file is caught)."""


class KeyValue(ReportPart):
    key: str
    value: str


class ReportMeta(ReportPart):
    title: str
    generated_at: str = Field(description="ISO 8601 UTC time the report was built.")
    for_whom: str | None = Field(None, description="Team or reader, from the profile.")
    description: str | None = Field(None, description="Free-text purpose, from the profile.")
    profile_file: str | None = Field(None, description="Profile file name the report came from.")
    generator: str = "python -m advisor report"


class DecisionStep(ReportPart):
    question: str
    answer: str
    why: str = ""


class Alternative(ReportPart):
    framework: str
    reason: str = ""


class Fact(ReportPart):
    """One fact that decided an answer, with where it comes from."""

    text: str
    source: FactSource
    source_words: str = Field(
        "", description="The provenance in plain words (file, host, date of a published run)."
    )

    @property
    def label(self) -> str:
        return FACT_SOURCE_LABELS[self.source]


class StageDecision(ReportPart):
    """Page 1 of the report for one stage: the answer in one sentence, why, the runner-up and
    what would change the answer, the risks."""

    stage: str
    framework: str
    framework_label: str = Field(description="The framework as people write it (vLLM).")
    refused: bool = False
    sentence: str = Field(description="The recommended stack and configuration, one sentence.")
    basis: str = Field(description="What settled the answer (your runs, published runs, tree).")
    settled_by: Literal["yours", "published", "tree", "refused"] = "tree"
    confidence: str
    confidence_why: str = ""
    facts: list[Fact] = Field(default_factory=list, description="The two or three deciding facts.")
    runner_up: str | None = Field(None, description="The runner-up and where it stands.")
    would_change: list[str] = Field(
        default_factory=list, description="What would change the answer (at most three)."
    )
    risks: list[str] = Field(default_factory=list)
    sizing: str = Field("", description="GPUs and cost, or why they are not known.")


class WorkloadAnswer(ReportPart):
    """One question of the profile form and the answer given, in words."""

    question: str
    answer: str


class StageWorkload(ReportPart):
    stage: str
    answers: list[WorkloadAnswer] = Field(default_factory=list)


class StageReport(ReportPart):
    """One stage's recommendation (a workload may chain stages, e.g. encoder then LLM)."""

    name: str
    kind: str | None = None
    framework: str | None = Field(None, description="Recommended backend registry name.")
    configuration: RecommendedDeployment | None = Field(
        None, description="What to deploy, as data (the `deploy` rows say it in words)."
    )
    confidence: str | None = None
    rationale: list[str] = Field(default_factory=list)
    path: list[DecisionStep] = Field(default_factory=list)
    candidates: list[str] = Field(default_factory=list)
    alternatives: list[Alternative] = Field(default_factory=list)
    what_would_change: list[str] = Field(default_factory=list)
    caveats: list[str] = Field(default_factory=list)
    configurations: ReferenceTable | None = Field(
        None, description="The configuration search (TP x replicas x precision), best first."
    )
    second_opinion: str | None = Field(
        None, description="The learned tree's view (never overrides measurements)."
    )
    headline: str = Field("", description="The stage's answer in one sentence (GPUs and $).")
    verdicts: ReferenceTable | None = Field(
        None,
        description="The recommended framework against each measured alternative: ratio, 95% "
        "interval, verdict beyond the practical threshold, repeats or 'single run'.",
    )
    ranking_note: str | None = None
    deploy: list[KeyValue] = Field(
        default_factory=list,
        description="The configuration to deploy in words (engine arguments, parallelism, "
        "precision, expected figures); `configuration` holds the same as data.",
    )
    deploy_notes: list[str] = Field(
        default_factory=list, description="Trade-offs and the estimate's accuracy, as sentences."
    )


REPORT_METRICS: tuple[Metric, ...] = tuple(
    catalogue_metric(name)
    for name in (
        "request_throughput_rps",
        "output_throughput_tok_s",
        "ttft_ms_p50",
        "ttft_ms_p99",
        "tpot_ms_p50",
        "e2e_ms_p99",
        "error_rate",
        "peak_gpu_memory_gb",
        "energy_per_output_token_j",
    )
)
"""The catalogue's metrics an evidence row carries, in the Speed table's column order; each
fills the EvidenceFigures field named by its `report_field` (`ttft_p99_ms`)."""
FORWARD_REPORT_METRICS: tuple[Metric, ...] = tuple(
    catalogue_metric(name)
    for name in (
        "sample_throughput_per_s",
        "request_throughput_rps",
        "e2e_ms_p50",
        "e2e_ms_p99",
        "gpu_s_per_million_samples",
        "error_rate",
    )
)
"""What a forward row carries and the forward Speed table shows, in column order: samples/s,
batches/s, batch latency p50/p99, GPU time per million samples, errors."""
FORWARD_SPEED_COLUMNS: tuple[str, ...] = (
    FORWARD_REPORT_METRICS[0].column,
    "Batches/s",  # a forward request is one batch
    *(f"Batch latency {m.statistic} ({m.unit})" for m in FORWARD_REPORT_METRICS[2:4]),
    FORWARD_REPORT_METRICS[4].titled_column,
    FORWARD_REPORT_METRICS[5].column,
)
"""Headings of the forward Speed table (Samples/s ... Errors)."""
SPEED_COLUMNS: tuple[str, ...] = tuple(metric.column for metric in REPORT_METRICS[:7])
"""Headings of the Speed table's metric columns (Requests/s ... Errors)."""
RESOURCE_COLUMNS: tuple[str, ...] = (
    REPORT_METRICS[7].titled_column,
    "GB per billion parameters",  # the evidence row's own ratio (peak memory / model size)
    REPORT_METRICS[8].titled_column,
)
"""Headings of the Resources table's figure columns (Peak GPU memory (GB) ... Energy per output
token (J)), in the order of the row's `peak_gpu_memory_gb`, `gb_per_billion_params`,
`energy_per_output_token_j`."""


class EvidenceFigures(ReportPart):
    """One framework's figures as the report's evidence table shows them: a stored run's (its
    level at the stage's load) or a published row's. A rendering, not a second evidence model:
    the evidence itself (grouping, matching, ranking) is `advisor.evidence.rows.EvidenceRow`,
    which the report cites by run id and turns into these lines. `source` says whether they were
    measured here, elsewhere or published (published figures never outrank a measurement and are
    shown as such)."""

    framework: str
    source: EvidenceSource
    stage: str | None = None
    run_id: str | None = None
    context: str = Field("", description="Model, device and load the figures come from.")
    level: str | None = Field(
        None,
        description="A ladder's level (concurrency, as text) the figures come from: the stage's "
        "load; None: the whole run.",
    )
    kind: Literal["generate", "forward"] = Field(
        "generate",
        description="The workload kind the figures measure: a forward row (one request = one "
        "batch) is shown in samples/s and batch latency, never in tokens.",
    )
    request_throughput_rps: float | None = None
    output_throughput_tok_s: float | None = None
    sample_throughput_per_s: float | None = None
    e2e_p50_ms: float | None = None
    gpu_s_per_million_samples: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p99_ms: float | None = None
    tpot_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    error_rate: float | None = None
    peak_gpu_memory_gb: float | None = None
    gb_per_billion_params: float | None = None
    energy_per_output_token_j: float | None = None
    validity: str | None = None
    validity_reasons: list[str] = Field(default_factory=list)
    output_throughput_low: float | None = Field(
        None, description="95% bootstrap interval of output tok/s (within the run: single run)."
    )
    output_throughput_high: float | None = None
    interval_note: str | None = Field(
        None, description="'single run' (within-run interval only) or the repeat group."
    )
    provenance: Provenance | None = Field(
        None, description="Who measured it: your run, this project's published run, the article."
    )
    provenance_words: str = Field("", description="The provenance with file, host and date.")
    gpu: str | None = Field(None, description="The GPU the figures come from (None: a CPU).")

    @property
    def failed(self) -> bool:
        return (self.validity or "").upper() == "FAILED"

    @property
    def provenance_label(self) -> str:
        return PROVENANCE_LABELS.get(self.provenance or "", "stored run")


class ReferenceTable(ReportPart):
    """A published table shown as a labelled reference, never mixed with measurements."""

    title: str
    source: str
    conditions: str = ""
    note: str = ""
    caveats: list[str] = Field(default_factory=list)
    keys: list[str] = Field(default_factory=list, description="Field names behind `columns`.")
    columns: list[str] = Field(description="Column headings as shown.")
    rows: list[list[str | float | int | None]]


class Series(ReportPart):
    name: str
    x: list[float]
    y: list[float]
    y_low: list[float] | None = Field(
        None, description="Lower ends of 95% intervals (error bars), one per point."
    )
    y_high: list[float] | None = None


class CapacitySection(ReportPart):
    """One stage's "Capacity and cost": the measured table, estimates apart, the GPUs-vs-peak
    chart (in `Report.charts`, id `chart_id`), the prices' sources, or why there is none."""

    stage: str
    gpu_type: str | None = None
    peak_request_rate_rps: float | None = None
    headroom_fraction: float = 0.2
    slo: str = ""
    table: ReferenceTable | None = None
    estimates: ReferenceTable | None = None
    chart_id: str | None = None
    absent_reason: str | None = Field(
        None, description="Why no measured capacity is shown (no search on this GPU type...)."
    )
    price_sources: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    probes: list[ReferenceTable] = Field(
        default_factory=list, description="Every probe of each search (the appendix)."
    )


class Marker(ReportPart):
    """A point or vertical line worth calling out (the knee, a burst start, recovery)."""

    label: str
    x: float
    y: float | None = None
    series: str | None = None


class Chart(ReportPart):
    """A chart as data; `available=False` charts keep their title and say why they are absent."""

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,60}$")
    title: str
    kind: Literal["line", "step", "bar"] = "line"
    x_label: str = ""
    x_integer: bool = Field(False, description="Whole-number x axis (concurrency levels).")
    y_label: str = ""
    description: str = ""
    series: list[Series] = Field(default_factory=list)
    markers: list[Marker] = Field(default_factory=list)
    available: bool = True
    absent_reason: str | None = None

    @model_validator(mode="after")
    def _bounded(self) -> Chart:
        points = sum(len(series.x) for series in self.series)
        if points > MAX_CHART_POINTS:
            raise ValueError(
                f"chart {self.id!r} holds {points} points (at most {MAX_CHART_POINTS}): "
                "aggregate before charting"
            )
        return self


class Estimate(ReportPart):
    """The feasibility estimate made before anything ran (fit, floors, what would make it fit)."""

    available: bool = False
    absent_reason: str | None = None
    fits: bool | None = None
    decode_floor_ms: float | None = None
    prefill_floor_ms: float | None = None
    items: list[KeyValue] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class FloorDistance(ReportPart):
    """Measured TPOT p50 against the batch-1 decode floor (weight bytes / memory bandwidth)."""

    framework: str
    run_id: str
    measured_tpot_p50_ms: float | None = None
    decode_floor_ms: float | None = None
    ratio_to_floor: float | None = Field(None, description="measured / floor (1.0 = at floor).")
    percent_of_floor: float | None = Field(
        None, description="floor / measured x 100: how close to the physical limit (100 = at it)."
    )
    note: str = ""


class Diagnostic(ReportPart):
    run_id: str | None = None
    framework: str | None = None
    title: str
    severity: str = "warning"
    finding: str = ""
    advice: str = ""
    command: str | None = None


class PreflightWarning(ReportPart):
    severity: str
    what: str
    why: str = ""
    admin_command: str | None = None


class RunEnvironment(ReportPart):
    run_id: str
    framework: str
    items: list[KeyValue] = Field(default_factory=list)


class EnvironmentSection(ReportPart):
    fingerprint: list[KeyValue] = Field(
        default_factory=list, description="The machine the report was built on."
    )
    fingerprint_absent_reason: str | None = None
    preflight: list[PreflightWarning] = Field(default_factory=list)
    runs: list[RunEnvironment] = Field(default_factory=list)


class ReproduceEntry(ReportPart):
    run_id: str
    framework: str
    status: str
    created_at: str
    command: str


class Caveat(ReportPart):
    kind: Literal["not-measured", "data", "recommendation", "environment"] = "data"
    framework: str | None = None
    text: str


class RunRef(ReportPart):
    """A run the report uses, with where its figures count (here or elsewhere)."""

    run_id: str
    framework: str
    model: str
    pattern: str
    status: str
    validity: str | None = None
    source: EvidenceSource
    records: int = Field(0, ge=0, description="Measured request records read for the charts.")
    provenance: Provenance | None = None
    provenance_words: str = ""
    gpu: str | None = Field(None, description="The GPU the run used (None: a CPU).")
    role: str = Field(
        "", description="Why it is in the report: settled the answer, nearest context, capacity."
    )
    created_at: str = ""
    command: str = ""

    @property
    def provenance_label(self) -> str:
        return PROVENANCE_LABELS.get(self.provenance or "", "stored run")


class Report(ReportPart):
    """The whole report; JSON format = this model dumped, with `schema_version` first."""

    schema_version: int = REPORT_SCHEMA_VERSION
    meta: ReportMeta
    profile: list[KeyValue] = Field(default_factory=list, description="Flattened for display.")
    profile_data: dict[str, Any] = Field(default_factory=dict, description="The profile as given.")
    headline: str = Field("", description="One-sentence answer, per stage.")
    decisions: list[StageDecision] = Field(
        default_factory=list, description="Page 1: the decision per stage."
    )
    workload: list[StageWorkload] = Field(
        default_factory=list, description="The profile as the form's questions and answers."
    )
    reproduce_commands: list[KeyValue] = Field(
        default_factory=list, description="What each command reproduces -> the command."
    )
    stages: list[StageReport] = Field(default_factory=list)
    evidence: list[EvidenceFigures] = Field(default_factory=list)
    reference: ReferenceTable | None = None
    reference_absent_reason: str | None = None
    charts: list[Chart] = Field(default_factory=list)
    estimate: Estimate = Field(default_factory=Estimate)
    calibration: ReferenceTable | None = Field(
        None,
        description="The configuration estimate's leave-one-out check: every stored level "
        "predicted beside its measurement; `note` = MAPE and the 10%-per-partition verdict.",
    )
    floor_distances: list[FloorDistance] = Field(default_factory=list)
    capacity: list[CapacitySection] = Field(
        default_factory=list, description="Capacity and cost per stage (or why not)."
    )
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    reproduce: list[ReproduceEntry] = Field(default_factory=list)
    caveats: list[Caveat] = Field(default_factory=list)
    runs: list[RunRef] = Field(default_factory=list)

    def available_charts(self) -> list[Chart]:
        return [chart for chart in self.charts if chart.available]

    def absent_charts(self) -> list[Chart]:
        return [chart for chart in self.charts if not chart.available]

    def diagnostic_groups(self) -> list[DiagnosticGroup]:
        """Diagnostics with one rule and advice together (first-seen order): each finding
        once, the advice and command once per group."""
        groups: dict[tuple[str, str, str], DiagnosticGroup] = {}
        for item in self.diagnostics:
            key = (item.title, item.severity, item.advice)
            group = groups.get(key)
            if group is None:
                group = groups[key] = DiagnosticGroup(
                    title=item.title, severity=item.severity, advice=item.advice
                )
            group.findings.append(item)
        return list(groups.values())


class DiagnosticGroup(ReportPart):
    """Diagnostics of one rule with the same advice (built for display, not stored); each
    finding keeps its own command (it names its run)."""

    title: str
    severity: str
    advice: str = ""
    findings: list[Diagnostic] = Field(default_factory=list)
