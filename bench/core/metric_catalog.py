"""The metric catalogue: every metric the project reports, declared once (AIPerf's metric classes
are the model) with its key, unit, better direction, statistics, labels and how to read it.

A `MetricSpec` is one measured quantity (`ttft_ms`: a distribution over requests;
`output_throughput_tok_s`: one figure per run). A `Metric` is one readable name of it, the spec
plus a statistic: `ttft_ms_p99`, `output_throughput_tok_s`. The names are the advisor's and the
interval code's (`bench/core/stats.py`, `bench compare`, evidence rows); the other spellings that
stored files use (a report's `ttft_p99_ms`, a step ladder's `p99_ttft_ms`) are derived here, never
renamed, so old files load unchanged. SLO limits are declared here as bounds on a spec: a latency
SLO is a maximum because its metric is lower-is-better, a throughput SLO a minimum.

Adding a metric is one `MetricSpec` in `SPECS`; a stored one gets its field on the summary model
as `name: type = SPEC.stored_field(...)` (description, unit and direction come from the spec, and
`stored_field_problems` fails a test on any mismatch). Evidence rows (`read_all`), metric words,
column headings and SLO directions pick it up; a table or the bootstrap
(`bench.core.stats.GROUP_METRICS`) that should show it names it in its own selection.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, Field
from pydantic_core import PydanticUndefined

from bench.core.percentiles import Percentiles

if TYPE_CHECKING:
    from bench.core.schema import MetricsSummary, RunResult

Better = Literal["higher", "lower"]
Statistic = Literal["mean", "p50", "p90", "p99"]
Source = Literal["summary", "telemetry", "derived"]
Family = Literal["rate", "ttft", "tpot", "itl", "e2e", "other"]
Kind = Literal["generate", "forward"]
BOTH_KINDS: tuple[Kind, ...] = ("generate", "forward")
GENERATE_ONLY: tuple[Kind, ...] = ("generate",)
FORWARD_ONLY: tuple[Kind, ...] = ("forward",)

DISTRIBUTION_STATISTICS: tuple[Statistic, ...] = ("mean", "p50", "p90", "p99")
"""What a `Percentiles` carries (bench.core.metrics.percentiles_ms)."""
QUANTILE_OF: dict[Statistic, float] = {"p50": 0.5, "p90": 0.9, "p99": 0.99}

Reader = Callable[["MetricsSummary | None", "RunResult | None"], "float | None"]


@dataclass(frozen=True)
class MetricSpec:
    """One measured quantity: where it lives, its unit, which way is better, its words.

    `key` is the stored field (on MetricsSummary for `summary`, on TelemetrySummary for
    `telemetry`); `statistics` is empty for a single figure and the Percentiles statistics for
    a distribution; `label` is the short name tables use (`TTFT`, `output throughput`),
    `words` the name prose uses when it differs (`request throughput` where intervals say
    `request rate`), `heading` a report column's heading when it is not the label with the
    unit (`Requests/s`); `family` groups what the interval code resamples together; `derived`
    specs read themselves with `reader`; `definition` states the formula (vLLM's definitions,
    bench/core/metrics.py). `kinds` are the workload kinds the metric means something for: a
    forward run (one request = one batch of samples, no tokens generated) has no TTFT, TPOT or
    output tokens, and reading a generate-only metric of one gives None, so no view, evidence
    row or ranking shows it. `stored_as` names the stored field a metric reads when it is
    another name of a stored figure (a forward run's samples/s is the figure the summary
    stores as output throughput: its chunks count samples); `forward_view` names the metric a
    forward run shows in place of a generate-only one (views holding figures under the
    generate name, such as `bench compare`, relabel them with `shown_as`).
    """

    key: str
    label: str
    unit: str
    better: Better
    definition: str
    statistics: tuple[Statistic, ...] = ()
    source: Source = "summary"
    family: Family = "other"
    words: str | None = None
    heading: str | None = None
    reader: Reader | None = field(default=None, compare=False)
    kinds: tuple[Kind, ...] = BOTH_KINDS
    stored_as: str | None = None
    forward_view: str | None = None

    @property
    def is_distribution(self) -> bool:
        return bool(self.statistics)

    @property
    def higher_is_better(self) -> bool:
        return self.better == "higher"

    def stored_field(self, default: Any = PydanticUndefined) -> Any:
        """The pydantic field that stores this metric on a summary model, named `key`:
        `ttft_ms: Percentiles | None = TTFT_MS.stored_field(None)`. Its description is the
        definition and its JSON schema names the metric, unit and direction, so the model
        restates only the name and the type (which readers and type checkers see);
        `stored_field_problems` checks both against the spec. No default = required."""
        return Field(
            default,
            description=self.definition,
            json_schema_extra={"metric": self.key, "unit": self.unit, "better": self.better},
        )


@dataclass(frozen=True)
class Metric:
    """One readable name: a spec and, for a distribution, one statistic (`ttft_ms_p99`)."""

    spec: MetricSpec
    statistic: Statistic | None = None

    @property
    def name(self) -> str:
        return f"{self.spec.key}_{self.statistic}" if self.statistic else self.spec.key

    @property
    def label(self) -> str:
        """Short label: `TTFT p99`, `output throughput` (intervals, comparisons)."""
        return f"{self.spec.label} {self.statistic}" if self.statistic else self.spec.label

    @property
    def title(self) -> str:
        """The label opening a heading or a tile: `Output throughput`, `TTFT p99`."""
        return self.label[:1].upper() + self.label[1:]

    @property
    def titled_column(self) -> str:
        """A heading with the unit that opens with a capital: `Peak GPU memory (GB)`."""
        return f"{self.title} ({self.unit})" if self.unit else self.title

    @property
    def words(self) -> str:
        """The name in prose (reports): `request throughput`, `E2E p99`."""
        base = self.spec.words or self.spec.label
        return f"{base} {self.statistic}" if self.statistic else base

    @property
    def column(self) -> str:
        """A table column heading with the unit: `TTFT p99 (ms)`, or the spec's `heading`."""
        if self.spec.heading and not self.statistic:
            return self.spec.heading
        return f"{self.label} ({self.unit})" if self.unit else self.label

    @property
    def unit(self) -> str:
        return self.spec.unit

    @property
    def better(self) -> Better:
        return self.spec.better

    @property
    def higher_is_better(self) -> bool:
        return self.spec.higher_is_better

    @property
    def family(self) -> Family:
        return self.spec.family

    @property
    def quantile(self) -> float | None:
        """0.5 / 0.9 / 0.99 for a percentile, None for a mean or a single figure."""
        return QUANTILE_OF.get(self.statistic) if self.statistic else None  # type: ignore[arg-type]

    @property
    def report_field(self) -> str:
        """The report's evidence-column spelling (advisor/report/model.py): `ttft_p99_ms`."""
        if not self.statistic:
            return self.spec.key
        family, unit = self.spec.key.rsplit("_", 1)
        return f"{family}_{self.statistic}_{unit}"

    @property
    def ladder_field(self) -> str:
        """The step ladder's stage spelling (bench/core/pattern_reports.py): `p99_ttft_ms`."""
        return f"{self.statistic}_{self.spec.key}" if self.statistic else self.spec.key

    def read(self, summary: MetricsSummary | None, run: RunResult | None = None) -> float | None:
        """This metric of a summary (a run's or a phase's) and, for telemetry and derived
        metrics, of its run; None where the run has no such figure."""
        spec = self.spec
        if run is not None and run.config.workload.kind not in spec.kinds:
            return None
        if spec.reader is not None:
            return spec.reader(summary, run)
        if spec.source == "telemetry":
            holder = run.telemetry if run is not None else None
        else:
            holder = summary
        stored = spec.stored_as or spec.key
        value = getattr(holder, stored, None) if holder is not None else None
        if self.statistic is not None and value is not None:
            value = getattr(value, self.statistic)
        return None if value is None else float(value)


def _gpu_s_per_million_tokens(
    summary: MetricsSummary | None, run: RunResult | None
) -> float | None:
    """GPUs x 1e6 / output tok/s (generate runs; a forward run has its per-sample figure)."""
    if summary is None or run is None or summary.output_throughput_tok_s <= 0:
        return None
    return run.config.parallelism.gpus_needed * 1e6 / summary.output_throughput_tok_s


def _gpu_s_per_million_samples(
    summary: MetricsSummary | None, run: RunResult | None
) -> float | None:
    """GPUs x 1e6 / samples/s of a forward run: its cost per sample, whatever the batch size
    (dividing by requests, i.e. batches, ranked batch 64 dearer than batch 1)."""
    if summary is None or run is None or summary.output_throughput_tok_s <= 0:
        return None
    return run.config.parallelism.gpus_needed * 1e6 / summary.output_throughput_tok_s


def _input_token_throughput(summary: MetricsSummary | None, run: RunResult | None) -> float | None:
    """Input tokens of successful batches / measured window, for text encoders (a forward run
    with a sequence length); None for images, where a sample has no tokens."""
    if summary is None or run is None or summary.output_tokens <= 0:
        return None
    if getattr(run.config.workload, "sequence_length", None) is None:
        return None
    # The same window as the stored samples/s: samples/s x input tokens per sample.
    return summary.output_throughput_tok_s * summary.input_tokens / summary.output_tokens


def _latency(
    key: str, label: str, definition: str, kinds: tuple[Kind, ...] = BOTH_KINDS
) -> MetricSpec:
    return MetricSpec(
        key,
        label,
        "ms",
        "lower",
        definition,
        statistics=DISTRIBUTION_STATISTICS,
        family=key.removesuffix("_ms"),  # type: ignore[arg-type]
        kinds=kinds,
    )


# One constant per metric: the summary models declare their fields with `stored_field` of
# these (bench/core/schema.py), so a field's words, unit and direction are written here only.
REQUEST_THROUGHPUT_RPS = MetricSpec(
    "request_throughput_rps",
    "request rate",
    "req/s",
    "higher",
    "Successful requests / measured window.",
    family="rate",
    words="request throughput",
    heading="Requests/s",
)
OUTPUT_THROUGHPUT_TOK_S = MetricSpec(
    "output_throughput_tok_s",
    "output throughput",
    "tok/s",
    "higher",
    "Output tokens of successful requests / measured window.",
    family="rate",
    heading="Output tok/s",
    kinds=GENERATE_ONLY,
    forward_view="sample_throughput_per_s",
)
SAMPLE_THROUGHPUT_PER_S = MetricSpec(
    "sample_throughput_per_s",
    "sample throughput",
    "samples/s",
    "higher",
    "Samples of successful batches / measured window (forward runs: one request is one batch "
    "of batch_size samples; the summary stores this figure as its output throughput, whose "
    "chunks count samples).",
    family="rate",
    heading="Samples/s",
    kinds=FORWARD_ONLY,
    stored_as="output_throughput_tok_s",
)
INPUT_TOKEN_THROUGHPUT_TOK_S = MetricSpec(
    "input_token_throughput_tok_s",
    "input token throughput",
    "tok/s",
    "higher",
    "Input tokens of successful batches / measured window (text encoders: samples/s x "
    "sequence length; none for images).",
    source="derived",
    family="rate",
    heading="Input tok/s",
    kinds=FORWARD_ONLY,
    reader=_input_token_throughput,
)
ERROR_RATE = MetricSpec(
    "error_rate",
    "error rate",
    "",
    "lower",
    "Failed requests / (measured requests - cancelled ones).",
    heading="Errors",
)
GOODPUT_RPS = MetricSpec(
    "goodput_rps",
    "goodput",
    "req/s",
    "higher",
    "Successful requests meeting every SLO set / measured window (only with an SLO).",
    family="rate",
)
PREFIX_CACHE_HIT_RATE = MetricSpec(
    "prefix_cache_hit_rate",
    "prefix-cache hit rate",
    "",
    "higher",
    "Prefix-cache hit tokens / query tokens over the measured window (vLLM's "
    "prefix_cache_hits and prefix_cache_queries counters, or the in-process engine's own); "
    "none when the engine does not report them.",
    heading="Prefix-cache hits",
    kinds=GENERATE_ONLY,
)
TTFT_MS = _latency(
    "ttft_ms", "TTFT", "Time to first token: first chunk - request start.", GENERATE_ONLY
)
TPOT_MS = _latency(
    "tpot_ms",
    "TPOT",
    "Time per output token: (E2E - TTFT) / (output tokens - 1); <= 1 token left out.",
    GENERATE_ONLY,
)
ITL_MS = _latency(
    "itl_ms", "ITL", "Inter-token latency: every gap between chunks, pooled.", GENERATE_ONLY
)
E2E_MS = _latency(
    "e2e_ms",
    "E2E",
    "End-to-end latency: end - request start (a forward request is one batch: the latency of "
    "the batch, which each of its samples waits).",
)
TOK_S_PER_USER = MetricSpec(
    "tok_s_per_user",
    "tok/s per user",
    "tok/s",
    "higher",
    "1000 / TPOT p50 (ms): the decode speed one user sees after the first token (the y axis "
    "of a throughput/interactivity Pareto).",
    kinds=GENERATE_ONLY,
)
TOK_S_PER_USER_MEAN = MetricSpec(
    "tok_s_per_user_mean",
    "tok/s per user (mean)",
    "tok/s",
    "higher",
    "Mean over requests of 1000 / TPOT (ms).",
    kinds=GENERATE_ONLY,
)
OUTPUT_THROUGHPUT_TOK_S_PER_GPU = MetricSpec(
    "output_throughput_tok_s_per_gpu",
    "output tok/s per GPU",
    "tok/s",
    "higher",
    "Output throughput / GPUs used (tensor_parallel_size x replicas): the x axis of the "
    "Pareto chart.",
    kinds=GENERATE_ONLY,
)
GPU_S_PER_MILLION_TOKENS = MetricSpec(
    "gpu_s_per_million_tokens",
    "GPU time per million tokens",
    "GPU-s",
    "lower",
    "GPUs x 1e6 / output tok/s (generate runs).",
    source="derived",
    reader=_gpu_s_per_million_tokens,
    kinds=GENERATE_ONLY,
    forward_view="gpu_s_per_million_samples",
)
GPU_S_PER_MILLION_SAMPLES = MetricSpec(
    "gpu_s_per_million_samples",
    "GPU time per million samples",
    "GPU-s",
    "lower",
    "GPUs x 1e6 / samples/s (forward runs): the cost per sample, which falls as batches grow.",
    source="derived",
    reader=_gpu_s_per_million_samples,
    kinds=FORWARD_ONLY,
)
PEAK_GPU_MEMORY_GB = MetricSpec(
    "peak_gpu_memory_gb",
    "peak GPU memory",
    "GB",
    "lower",
    "Peak GPU memory of the run (NVML, the engine's processes or the device).",
    source="telemetry",
    heading="GPU memory (GB)",
)
ENERGY_PER_OUTPUT_TOKEN_J = MetricSpec(
    "energy_per_output_token_j",
    "energy per output token",
    "J",
    "lower",
    "GPU energy over the window (NVML) / output tokens.",
    source="telemetry",
    kinds=GENERATE_ONLY,
)
MEAN_GPU_UTILIZATION_PCT = MetricSpec(
    "mean_gpu_utilization_pct",
    "mean GPU utilisation",
    "%",
    "higher",
    "Mean NVML GPU utilisation over the run.",
    source="telemetry",
)

SPECS: tuple[MetricSpec, ...] = (
    REQUEST_THROUGHPUT_RPS,
    OUTPUT_THROUGHPUT_TOK_S,
    SAMPLE_THROUGHPUT_PER_S,
    INPUT_TOKEN_THROUGHPUT_TOK_S,
    ERROR_RATE,
    GOODPUT_RPS,
    PREFIX_CACHE_HIT_RATE,
    TTFT_MS,
    TPOT_MS,
    ITL_MS,
    E2E_MS,
    TOK_S_PER_USER,
    TOK_S_PER_USER_MEAN,
    OUTPUT_THROUGHPUT_TOK_S_PER_GPU,
    GPU_S_PER_MILLION_TOKENS,
    GPU_S_PER_MILLION_SAMPLES,
    PEAK_GPU_MEMORY_GB,
    ENERGY_PER_OUTPUT_TOKEN_J,
    MEAN_GPU_UTILIZATION_PCT,
)
"""Every metric, in the order evidence rows and `read_all` list them."""
SPECS_BY_KEY: dict[str, MetricSpec] = {spec.key: spec for spec in SPECS}

METRICS: tuple[Metric, ...] = tuple(
    metric
    for spec in SPECS
    for metric in (
        [Metric(spec, statistic) for statistic in spec.statistics]
        if spec.statistics
        else [Metric(spec)]
    )
)
"""Every readable name, in declaration order (the order evidence rows list them)."""
METRICS_BY_NAME: dict[str, Metric] = {metric.name: metric for metric in METRICS}
LATENCY_SPECS: tuple[MetricSpec, ...] = tuple(
    s for s in SPECS if s.is_distribution and s.stored_as is None
)
"""The per-request distributions (TTFT, TPOT, ITL, E2E)."""
LADDER_LATENCIES: tuple[Metric, ...] = tuple(
    Metric(SPECS_BY_KEY[key], "p99") for key in ("ttft_ms", "tpot_ms", "e2e_ms")
)
"""The p99 latencies a step ladder's stage keeps (bench.core.pattern_reports.LadderStage fields
`p99_ttft_ms`, ... = their `ladder_field`)."""


def metric(name: str) -> Metric:
    """The metric of a name; KeyError lists the known names."""
    try:
        return METRICS_BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRICS_BY_NAME)}") from None


def shown_as(name: str, kind: Kind) -> Metric | None:
    """The metric a run of `kind` shows for the figure held under `name`: itself where it means
    something for that kind, its `forward_view` for a forward run (`output_throughput_tok_s` ->
    `sample_throughput_per_s`), None where the kind has no such figure (TTFT of a forward run).
    For views that hold figures under the generate names (resampled groups, comparisons)."""
    held = metric(name)
    if kind in held.spec.kinds:
        return held
    if kind == "forward" and held.spec.forward_view is not None:
        return Metric(SPECS_BY_KEY[held.spec.forward_view], held.statistic)
    return None


RUN_VIEW_METRICS: dict[Kind, tuple[str, ...]] = {
    "generate": (
        "output_throughput_tok_s",
        "request_throughput_rps",
        "ttft_ms_p99",
        "tpot_ms_p99",
        "e2e_ms_p99",
        "error_rate",
        "peak_gpu_memory_gb",
    ),
    "forward": (
        "sample_throughput_per_s",
        "input_token_throughput_tok_s",
        "request_throughput_rps",
        "e2e_ms_p50",
        "e2e_ms_p90",
        "e2e_ms_p99",
        "gpu_s_per_million_samples",
        "error_rate",
        "peak_gpu_memory_gb",
    ),
}
"""The headline figures a run of each kind is shown with (the CLI's run summary, `bench runs`):
a forward run in samples/s, input tokens/s (text encoders), batches/s and the latency of a
batch, never in TTFT, TPOT or output tokens."""


def higher_is_better(name: str) -> bool:
    """Whether more of the named metric is better (False for unknown names: lower ranks first)."""
    known = METRICS_BY_NAME.get(name)
    return known is not None and known.higher_is_better


def read_all(summary: MetricsSummary | None, run: RunResult | None = None) -> dict[str, float]:
    """Every metric the summary (and its run) has, by name, in declaration order."""
    out: dict[str, float] = {}
    for item in METRICS:
        value = item.read(summary, run)
        if value is not None:
            out[item.name] = value
    return out


class CataloguedFields:
    """A stored model whose figure fields hold catalogued metrics under their stored names.

    `field_metrics` maps a stored field to the metric it holds (`baseline_p99_e2e_ms` ->
    `e2e_ms_p99`): stored files keep their field names, and whoever labels a field reads the
    label and unit from `metric_of(field)` instead of spelling them again. A ClassVar, so it is
    neither a model field nor part of the JSON schema."""

    field_metrics: ClassVar[dict[str, str]] = {}

    @classmethod
    def metric_of(cls, field_name: str) -> Metric:
        """The catalogued metric a stored field holds; KeyError names the field and the model."""
        name = cls.field_metrics.get(field_name)
        if name is None:
            raise KeyError(
                f"{cls.__name__}.{field_name} holds no catalogued metric; "
                f"catalogued fields: {', '.join(cls.field_metrics) or 'none'}"
            )
        return metric(name)


def stored_field_problems(
    model: type[BaseModel], source: Source, *, every_spec: bool = True
) -> list[str]:
    """How `model`'s metric fields differ from the catalogue; empty when they agree.

    A field declared with `MetricSpec.stored_field` must be named as its spec's key, belong to
    `source`, and have the spec's shape (`Percentiles | None` for a distribution, `float` or
    `float | None` for one figure). With `every_spec`, each spec of `source` must be such a
    field (MetricsSummary holds every `summary` spec, TelemetrySummary every `telemetry` one);
    a field holding a spec's key but not declared from it is a copy that could drift."""
    problems: list[str] = []
    where = model.__name__
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        key = extra.get("metric")
        spec = SPECS_BY_KEY.get(str(key)) if key is not None else None
        if key is None:
            if name in SPECS_BY_KEY and SPECS_BY_KEY[name].source == source:
                problems.append(f"{where}.{name} restates a catalogued metric: use stored_field")
            continue
        if spec is None or key != name:
            problems.append(f"{where}.{name} is declared from the metric {key!r}")
            continue
        if spec.source != source:
            problems.append(f"{where}.{name} is a {spec.source} metric, not {source}")
        if info.description != spec.definition:
            problems.append(f"{where}.{name}'s description is not the catalogue's definition")
        shape = {arg for arg in get_args(info.annotation) if arg is not types.NoneType} or {
            info.annotation
        }
        expected = Percentiles if spec.is_distribution else float
        if shape != {expected}:
            problems.append(f"{where}.{name} is {info.annotation}, its spec needs {expected}")
    if every_spec:
        for spec in SPECS:
            stored = spec.stored_as is None
            if stored and spec.source == source and spec.key not in model.model_fields:
                problems.append(f"{where} has no field for the catalogued metric {spec.key!r}")
    return problems


# --------------------------------------------------------------------------- SLO bounds


@dataclass(frozen=True)
class SloBound:
    """One SLO limit: the SLO field that holds it and the metric it limits.

    A bound on a lower-is-better metric is a maximum (`ttft_ms` at most), on a higher-is-better
    one a minimum (`min_request_throughput_rps` at least). A distribution's bound is judged at
    the SLO's percentile (`percentile` of the profile or the capacity search)."""

    field: str
    spec: MetricSpec
    words: str
    """The limit's name in forms and the report's workload table (`End-to-end`)."""
    missing_meets: bool = True
    """Whether a request (or a probe) without this figure meets the limit: as in vLLM's
    goodput, no TPOT (<= 1 output token) meets a TPOT SLO, no TTFT (no chunk) fails one."""

    @property
    def is_minimum(self) -> bool:
        return self.spec.higher_is_better

    def metric_at(self, percentile: Statistic) -> Metric:
        """The metric the bound is judged on (`ttft_ms_p99` for a TTFT SLO at p99)."""
        return Metric(self.spec, percentile if self.spec.is_distribution else None)

    def broken(self, value: float, limit: float) -> bool:
        return value < limit if self.is_minimum else value > limit

    def form_label(self, percentile: Statistic) -> str:
        """`TTFT p99 at most (ms)`, `Output throughput at least (tok/s)`: a form field's label."""
        if self.is_minimum:
            return f"{self.words} at least ({self.spec.unit})"
        return f"{self.words} {percentile} at most ({self.spec.unit})"


REQUEST_SLO_BOUNDS: tuple[SloBound, ...] = (
    SloBound("ttft_ms", SPECS_BY_KEY["ttft_ms"], "TTFT", missing_meets=False),
    SloBound("tpot_ms", SPECS_BY_KEY["tpot_ms"], "TPOT"),
    SloBound("e2e_ms", SPECS_BY_KEY["e2e_ms"], "End-to-end"),
)
"""Per-request limits (bench.core.config.SLO): a request meets the SLO when every one set holds."""
THROUGHPUT_SLO_BOUNDS: tuple[SloBound, ...] = (
    SloBound(
        "min_request_throughput_rps", SPECS_BY_KEY["request_throughput_rps"], "Request throughput"
    ),
    SloBound(
        "min_output_throughput_tok_s", SPECS_BY_KEY["output_throughput_tok_s"], "Output throughput"
    ),
)
"""Run-wide minimums (advisor.workload.profile.ProfileSLO)."""
SLO_BOUNDS: tuple[SloBound, ...] = REQUEST_SLO_BOUNDS + THROUGHPUT_SLO_BOUNDS
SLO_BOUNDS_BY_FIELD: dict[str, SloBound] = {bound.field: bound for bound in SLO_BOUNDS}
