"""Evidence: ranked evidence rows for a stage from the store and the references (read by
advisor/sizing/measured.py; each engine's expert settings are in advisor/sizing/engine_shape.py,
the plan in advisor/plan/stage_plan.py).

Sources, strongest first: `measured-here` (a stored run whose fingerprinted GPU is the profile's
GPU type), `measured-elsewhere` (another GPU, or a CPU), `published` (figures from an article,
workload unknown). Ranking: rows that are VALID and meet the SLOs first, then by source (published
never outranks a measurement on the user's GPU), then closeness (same model, same shape), then
the user's objective. Repeats of one configuration are grouped into one row with their variance.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, computed_field

from advisor.evidence.modality import ForwardTraits, forward_traits, trait_differences
from advisor.sizing.capacity import run_gpu_type
from advisor.sizing.engine_shape import SHAPE_TOLERANCE, stage_tensor_parallel
from advisor.sizing.measured import (
    ReferenceFiles,
    cited_file,
    read_reference_folder,
    run_gpu_name,
    same_gpu_type,
    stored_runs,
)
from advisor.sizing.speed_class import SpeedClassPair, same_speed_class, speed_class_pairs
from advisor.workload.profile import Objective, StageProfile
from advisor.workload.stage_load import stage_load
from bench.core.config import (
    GenerateWorkload,
    ParallelismConfig,
    PrecisionConfig,
    RunConfig,
)
from bench.core.metric_catalog import REQUEST_SLO_BOUNDS, SLO_BOUNDS, higher_is_better, read_all
from bench.core.schema import MetricsSummary, PhaseResult, RunResult, RunStatus, ValidityStatus
from bench.engines.backends import options_with_caching
from bench.engines.models import canonical_model
from bench.run.api import run_caveats

if TYPE_CHECKING:  # the store module pulls in SQLAlchemy; the advisor only needs its type here
    from bench.storage.store import Store

Source = Literal["measured-here", "measured-elsewhere", "published"]
SOURCE_RANK: dict[str, int] = {"measured-here": 0, "measured-elsewhere": 1, "published": 2}


# --------------------------------------------------------------------------- evidence rows


class Closeness(BaseModel):
    same_gpu: bool
    same_model: bool
    same_shape: bool | None = Field(None, description="None when the shape is not known.")
    same_configuration: bool = Field(
        True,
        description="Measured at the stage's configuration: one engine on the fewest GPUs that "
        "hold the model, at the profile's weight and KV formats (a TP=2 run is no evidence for "
        "TP=1, FP8 none for bf16). Runs stored before these fields count as TP=1, 1 replica, "
        "no quantisation.",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def score(self) -> int:
        return 2 * self.same_model + (1 if self.same_shape else 0)


ProvenanceKind = Literal["yours", "published", "article"]
PROVENANCE_WORDS: dict[str, str] = {
    "yours": "your runs (this store)",
    "published": "this project's published runs (data/reference)",
    "article": "the article's figures",
}


class Provenance(BaseModel):
    """Who measured an evidence row, in plain words: `yours` (a run in this store), `published`
    (a fingerprinted run this project ships in data/reference, with host, date and command) or
    `article` (the seed article's figures; workload not stated)."""

    kind: ProvenanceKind
    file: str | None = Field(None, description="The reference file (published, article).")
    host: str | None = Field(None, description="Hostname the published run was measured on.")
    date: str | None = Field(None, description="Day the run was measured (YYYY-MM-DD).")
    command: str | None = Field(None, description="The command that reproduces the run.")

    @property
    def where(self) -> str:
        """File, host and date of a published run (empty otherwise): the detail beside a
        label that already says which kind it is."""
        if self.kind != "published":
            return ""
        parts = (Path(self.file).name if self.file else None, self.host, self.date)
        return ", ".join(part for part in parts if part)

    @property
    def words(self) -> str:
        text = PROVENANCE_WORDS[self.kind]
        if self.where:
            text = f"this project's published run ({self.where})"
        return text


MATCH_BAND = SHAPE_TOLERANCE
"""A measurement matches a stage when its mean prompt and output lengths (encoders: sequence
length), and its load level, are each within ±25% of the stage's (docs/configurations.md,
"When a measurement settles an answer")."""


class WorkloadMatch(BaseModel):
    """Whether a measurement's workload is the stage's (docs/configurations.md, "When a
    measurement settles an answer"): same kind,
    prompt/output lengths within MATCH_BAND, same traffic shape (closed loop at the stage's
    concurrency or open loop at its rate, within the band; any steady level when the stage states
    none), same precision (dtype, weight quantisation, KV dtype). Only a match may reorder the
    tree's candidates; the others are context, shown with their distance."""

    matches: bool
    lengths: bool
    traffic: bool
    precision: bool
    model_kind: bool = Field(
        True,
        description="Forward stages: the run's model is of the stage's modality (text, image, "
        "audio) and family (BERT, ViT, ResNet, Whisper...) where both are known "
        "(advisor/evidence/modality.py).",
    )
    distance: float = Field(
        description="The largest ratio between the run's and the stage's lengths or load level "
        "(1.0 = identical; 47 = one of them 47 times longer or shorter)."
    )
    differences: list[str] = Field(default_factory=list, description="What differs, in words.")
    farthest: str | None = Field(
        None,
        description="What the distance measures: the length or load level that differs most "
        "(`prompt length`, `concurrency`); None when the distance is 1 or in older reports.",
    )

    @property
    def summary(self) -> str:
        if self.matches:
            return "matches this workload"
        # Lengths and level can be equal while the loop or precision differs: no "1x away".
        prefix = f"{self.distance_text}: " if self.distance > 1.0005 else "differs: "
        return prefix + "; ".join(self.differences)

    @property
    def distance_text(self) -> str:
        """`matches`, or the distance saying in what: `prompt length off by 11.7x` (the stage's
        length 11.7 times the run's, or the run's 11.7 times the stage's)."""
        if self.matches:
            return "matches"
        if self.distance <= 1.0005:
            return "workload differs: " + "; ".join(self.differences)
        what = self.farthest or "workload"
        return f"{what} off by {self.distance:,.3g}x"


class EvidenceRow(BaseModel):
    """One configuration's evidence (repeats grouped): where it comes from, how close, numbers."""

    framework: str
    source: Source
    gpu: str | None
    model: str | None
    shape: str
    precision: str = ""
    run_precision: PrecisionConfig | None = Field(
        None, description="The measured run's precision (dtype, weight quantisation, KV dtype)."
    )
    parallelism: ParallelismConfig | None = Field(
        None, description="The measured run's GPUs: tensor_parallel_size, replicas, gpu_ids."
    )
    closeness: Closeness
    repeats: int = 1
    run_ids: list[str] = Field(default_factory=list)
    status: str = Field(description="VALID, INVALID, FAILED or published.")
    valid: bool | None = None
    meets_slo: bool | None = None
    slo_failures: list[str] = Field(default_factory=list)
    metrics: dict[str, float] = Field(default_factory=dict)
    objective_metric: str | None = None
    objective_value: float | None = None
    objective_cv: float | None = Field(
        None, description="Coefficient of variation of the objective over repeats (stdev/mean)."
    )
    failure: str | None = None
    reference: str | None = Field(None, description="Reference file / article the row came from.")
    caveats: list[str] = Field(default_factory=list)
    engine_args: dict[str, Any] = Field(default_factory=dict)
    provenance: Provenance | None = Field(
        None, description="Who measured it (yours / published / article); None in old reports."
    )
    match: WorkloadMatch | None = Field(
        None, description="Whether its workload is the stage's; None = workload not stated."
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def eligible(self) -> bool:
        """Counts for ranking: VALID (or published) and no SLO broken."""
        return self.valid is not False and self.meets_slo is not False and self.status != "FAILED"

    @property
    def higher_is_better(self) -> bool:
        return higher_is_better(self.objective_metric)

    @property
    def label(self) -> str:
        """Who measured it and where, in plain words, for tables and the CLI: `your run, CPU`,
        `published run, H200`, `the article, A100-80GB-PCIE`; with the workload match. Never
        `measured-here` for runs someone else made."""
        kind = self.provenance.kind if self.provenance is not None else None
        who = {"yours": "your run", "published": "published run", "article": "the article"}.get(
            kind or "", "stored run"
        )
        text = f"{who}, {self.gpu or 'CPU'}"
        if self.match is not None:
            text += f", {self.match.distance_text}"
        return text


def objective_metric(stage: StageProfile, published: bool = False) -> str:
    """The metric the stage's objective ranks on (published tables only have request rates)."""
    objective = stage.objective
    if objective == Objective.MINIMIZE_LATENCY:
        return "e2e_ms_p99" if published else f"e2e_ms_{stage.slo.percentile}"
    if objective == Objective.MINIMIZE_COST_PER_TOKEN:
        # A forward stage's cost is per sample (per batch would rank big batches dearer).
        return (
            "gpu_s_per_million_samples" if stage.kind == "forward" else "gpu_s_per_million_tokens"
        )
    if objective == Objective.MAXIMIZE_GOODPUT and not published:
        return "goodput_rps"
    if published or stage.kind == "forward":
        return "request_throughput_rps"
    return "output_throughput_tok_s"


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= SHAPE_TOLERANCE * max(abs(b), 1e-9)


def phase_at_concurrency(run: RunResult, concurrency: int | None) -> PhaseResult | None:
    """The run's closed-loop phase at exactly `concurrency` requests in flight, if it has one."""
    if concurrency is None:
        return None
    for phase in run.phases:
        if phase.strategy == "concurrency" and int(phase.target) == concurrency:
            return phase
    return None


def _phase_at_stage_concurrency(run: RunResult, stage: StageProfile) -> PhaseResult | None:
    """The run's closed-loop phase at exactly the stage's concurrency, if it has one."""
    return phase_at_concurrency(run, stage.concurrency)


def _summary_for(run: RunResult, stage: StageProfile) -> tuple[MetricsSummary | None, str | None]:
    """The run summary, or a ladder phase at the stage's concurrency when there is one."""
    phase = _phase_at_stage_concurrency(run, stage)
    if phase is not None:
        return phase.summary, f"phase {phase.name}"
    return run.summary, None


def _shape(run: RunResult, stage: StageProfile) -> tuple[str, bool | None]:
    config = run.config
    workload = config.workload
    if isinstance(workload, GenerateWorkload):
        level = config.load.fixed_level()
        text = f"prompt {workload.prompt_tokens.mean} / output {workload.output_tokens.mean} tok"
        same = _close(workload.prompt_tokens.mean, stage.prompt_tokens.mean) and _close(
            workload.output_tokens.mean, stage.output_tokens.mean
        )
        if level is not None:
            text += f", {level[0]} {level[1]:g}"
            wanted = stage.concurrency if level[0] == "concurrency" else stage.request_rate_rps
            if wanted is not None:
                same = same and _close(level[1], wanted)
        else:
            text += f", {config.load.pattern} pattern"
            if stage.concurrency is not None:
                # A ladder is the stage's shape only through its phase at that concurrency; its
                # whole-run figures mix every level it ran.
                if _phase_at_stage_concurrency(run, stage) is not None:
                    text += f" (phase at concurrency {stage.concurrency})"
                else:
                    text += f" without a phase at concurrency {stage.concurrency}"
                    same = False
        return text, same
    text = f"batch {workload.batch_size}"
    same = workload.batch_size == stage.batch_size
    if workload.sequence_length is not None:
        text += f" x {workload.sequence_length.mean} tok"
        if stage.sequence_length is not None:
            same = same and workload.sequence_length.mean == stage.sequence_length.mean
    if workload.image_size is not None:
        text += f" x {workload.image_size} px"
        same = same and workload.image_size == (stage.image_size or workload.image_size)
    return text, same


def _ratio(run_value: float, stage_value: float) -> float:
    """max(a/b, b/a): how many times longer or shorter, symmetric."""
    low, high = sorted((max(run_value, 1e-9), max(stage_value, 1e-9)))
    return high / low


def _stage_traits(stage: StageProfile) -> ForwardTraits:
    """The stage's modality and family: its `modality` where given, else its model's name or
    its input shape."""
    traits = forward_traits(
        stage.model,
        sequence_length=stage.sequence_length is not None,
        image_size=stage.image_size is not None,
    )
    if stage.modality and stage.modality != traits.modality:
        # The user's word for what the model takes in outranks a guess from its name.
        return ForwardTraits(modality=stage.modality)
    return traits


def workload_match(run: RunResult, stage: StageProfile) -> WorkloadMatch:
    """The match rule (WorkloadMatch) for one run against one stage."""
    config = run.config
    workload = config.workload
    differences: list[str] = []
    ratios: list[tuple[float, str | None]] = [(1.0, None)]  # (ratio, what it measures)
    lengths = True
    model_kind = True

    def compare(what: str, run_value: float, stage_value: float) -> None:
        nonlocal lengths
        ratios.append((_ratio(run_value, stage_value), f"{what} length"))
        if not _close(run_value, stage_value):
            lengths = False
            differences.append(f"{what} {run_value:,g} vs the stage's {stage_value:,g} tok")

    if isinstance(workload, GenerateWorkload):
        compare("prompt", workload.prompt_tokens.mean, stage.prompt_tokens.mean)
        compare("output", workload.output_tokens.mean, stage.output_tokens.mean)
    else:
        # A run of another modality or model family is never a match, whatever its shape.
        different = trait_differences(
            forward_traits(
                config.model,
                run.model.architecture if run.model else None,
                sequence_length=workload.sequence_length is not None,
                image_size=workload.image_size is not None,
            ),
            _stage_traits(stage),
        )
        model_kind = not different
        differences.extend(different)
        if workload.batch_size != stage.batch_size:
            lengths = False
            ratios.append((_ratio(workload.batch_size, stage.batch_size), "batch size"))
            differences.append(f"batch {workload.batch_size} vs the stage's {stage.batch_size}")
        if workload.sequence_length is not None and stage.sequence_length is not None:
            compare("sequence", workload.sequence_length.mean, stage.sequence_length.mean)
        if (
            workload.image_size is not None
            and stage.image_size is not None
            and workload.image_size != stage.image_size
        ):
            lengths = False
            ratios.append((_ratio(workload.image_size, stage.image_size), "image size"))
            differences.append(f"{workload.image_size} px vs the stage's {stage.image_size}")
    traffic = True
    if config.load.capacity_search:
        # Its summary mixes every probed level: a capacity, not a figure at one load.
        traffic = False
        differences.append("a capacity search over many levels, not one steady load")
    elif stage.kind == "generate":
        level = config.load.fixed_level()
        if level is None and _phase_at_stage_concurrency(run, stage) is not None:
            level = ("concurrency", float(stage.concurrency or 0))
        wanted: list[tuple[str, float]] = []
        if stage.concurrency is not None:
            wanted.append(("concurrency", float(stage.concurrency)))
        if stage.request_rate_rps is not None:
            wanted.append(("rate", float(stage.request_rate_rps)))
        if not wanted and stage.peak_request_rate_rps is not None:
            # Only a peak is given: the stage's one load (advisor/workload/stage_load.py) is that
            # rate open loop, or its in-flight count per engine closed loop.
            wanted.append(("rate", float(stage.peak_request_rate_rps)))
            wanted.append(("concurrency", float(stage_load(stage).per_engine)))
        if wanted:
            if level is None:
                traffic = False
                differences.append(
                    f"a {config.load.pattern} pattern without a phase at the stage's load"
                )
            else:
                same_kind = [value for kind, value in wanted if kind == level[0]]
                if not same_kind:
                    traffic = False
                    where = (
                        f"closed loop at {level[1]:g} requests in flight"
                        if level[0] == "concurrency"
                        else f"open loop at {level[1]:g} req/s"
                    )
                    differences.append(f"{where}, the stage states the other loop")
                else:
                    ratios.append((_ratio(level[1], same_kind[0]), level[0]))
                    if not _close(level[1], same_kind[0]):
                        traffic = False
                        differences.append(
                            f"{level[0]} {level[1]:g} vs the stage's {same_kind[0]:g}"
                        )
    wanted_precision = stage.precision.run_precision()
    precision = (
        config.precision.dtype == wanted_precision.dtype
        and config.precision.quantization == wanted_precision.quantization
        and config.precision.kv_cache_dtype == wanted_precision.kv_cache_dtype
    )
    if not precision:
        differences.append(
            f"precision {config.precision.label()} vs the stage's {wanted_precision.label()}"
        )
    return WorkloadMatch(
        matches=lengths and traffic and precision and model_kind and workload.kind == stage.kind,
        lengths=lengths,
        model_kind=model_kind,
        traffic=traffic,
        precision=precision,
        distance=round(max(ratios, key=lambda item: item[0])[0], 3),
        differences=differences,
        farthest=max(ratios, key=lambda item: item[0])[1],
    )


def _provenance(run: RunResult, reference: str | None) -> Provenance:
    if reference is None:
        return Provenance(kind="yours")
    return Provenance(
        kind="published",
        file=reference,
        host=run.environment.hostname if run.environment else None,
        date=run.created_at[:10] if run.created_at else None,
        command=run.command or None,
    )


def _metrics(summary: MetricsSummary | None, run: RunResult) -> dict[str, float]:
    """Every catalogued metric of the summary (a run's or a phase's) and its run, by name."""
    return read_all(summary, run)


def _slo_check(
    stage: StageProfile, metrics: dict[str, float], published: bool
) -> tuple[bool | None, list[str]]:
    """Whether the row meets every SLO the profile sets; None when none could be checked."""
    slo = stage.slo
    percentile = "p99" if published else slo.percentile
    failures: list[str] = []
    checked = False
    for bound in SLO_BOUNDS:
        limit = getattr(slo, bound.field)
        metric = bound.metric_at(percentile).name
        if limit is None or metric not in metrics:
            continue
        checked = True
        value = metrics[metric]
        if bound.broken(value, limit):
            relation = "<" if bound.is_minimum else ">"
            failures.append(f"{metric} {value:.4g} {relation} {bound.field} {limit:g}")
    if not checked:
        return None, []
    return not failures, failures


def _status(run: RunResult) -> tuple[str, bool | None]:
    if run.status == RunStatus.FAILED:
        return "FAILED", False
    if run.validity is not None:
        valid = run.validity.status == ValidityStatus.VALID
        return run.validity.status.value, valid and run.status == RunStatus.COMPLETED
    return run.status.value, False if run.status != RunStatus.COMPLETED else None


def rows_from_runs(
    stage: StageProfile, runs: Iterable[RunResult], reference: str | None = None
) -> list[EvidenceRow]:
    """Evidence rows from RunResults of the stage's kind, repeats of one configuration grouped."""
    groups: dict[tuple, list[tuple[RunResult, dict[str, float], bool | None, str | None]]] = {}
    for run in runs:
        if run.config.workload.kind != stage.kind:
            continue
        if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
            continue
        summary, phase_note = _summary_for(run, stage)
        metrics = _metrics(summary, run)
        shape, same_shape = _shape(run, stage)
        status, valid = _status(run)
        gpu = run_gpu_name(run)
        model = run.model.name if run.model is not None else run.config.model
        precision = run.config.precision.label()
        key = (
            run.config.framework,
            gpu,
            model,
            shape,
            precision,
            status,
            json.dumps(run.config.engine_args, sort_keys=True, default=str),
            # A TP=2 run and a TP=1 run are different configurations, never one group.
            run.config.parallelism.model_dump_json(),
        )
        groups.setdefault(key, []).append((run, metrics, same_shape, phase_note))
    rows: list[EvidenceRow] = []
    metric_name = objective_metric(stage)
    for (framework, gpu, model, shape, precision, status, *_), members in groups.items():
        first_run = members[0][0]
        all_metrics = [m for _, m, _, _ in members]
        merged = _mean_metrics(all_metrics)
        values = [m[metric_name] for m in all_metrics if metric_name in m]
        cv = None
        if len(values) >= 2 and statistics.mean(values) > 0:
            cv = statistics.stdev(values) / statistics.mean(values)
        closeness = _closeness(stage, gpu, {model, first_run.config.model}, members[0][2])
        closeness.same_configuration = _same_configuration(first_run.config, stage)
        meets, failures = _slo_check(stage, merged, published=False)
        _, valid = _status(first_run)
        caveats = [note for *_, note in members if note][:1]
        if first_run.model is not None and first_run.model.random_weights:
            caveats.append("random-weight checkpoint (speed does not depend on weight values)")
        # The run's own caveats (FP8: speed only); runs stored before results carried them
        # get the same ones, from the same rule.
        random_weights = first_run.model is None or first_run.model.random_weights
        for caveat in first_run.caveats or run_caveats(first_run.config, random_weights):
            if caveat not in caveats:
                caveats.append(caveat)
        rows.append(
            EvidenceRow(
                framework=framework,
                source="measured-here" if closeness.same_gpu else "measured-elsewhere",
                gpu=gpu,
                model=model,
                shape=shape,
                precision=precision,
                closeness=closeness,
                repeats=len(members),
                run_ids=[run.run_id for run, *_ in members],
                status=status,
                valid=valid,
                meets_slo=meets,
                slo_failures=failures,
                metrics=merged,
                objective_metric=metric_name,
                objective_value=merged.get(metric_name),
                objective_cv=cv,
                failure=first_run.failure.cause if first_run.failure is not None else None,
                reference=reference,
                caveats=caveats,
                engine_args=options_with_caching(first_run.config),
                run_precision=first_run.config.precision,
                parallelism=first_run.config.parallelism,
                provenance=_provenance(first_run, reference),
                match=workload_match(first_run, stage),
            )
        )
    return rows


def _same_configuration(config: RunConfig, stage: StageProfile) -> bool:
    """Whether a run's parallelism and precision are the stage's (see Closeness)."""
    wanted_tp = stage_tensor_parallel(stage)
    wants_fp8 = (stage.precision.quantization or "").lower() == "fp8"
    return (
        config.parallelism.tensor_parallel_size == wanted_tp
        and config.parallelism.replicas == 1
        and (config.precision.quantization == "fp8") == wants_fp8
        and config.precision.kv_cache_dtype == stage.precision.kv_cache_dtype
    )


def _closeness(
    stage: StageProfile, gpu: str | None, model_names: set[str | None], same_shape: bool | None
) -> Closeness:
    """How close evidence is to the stage: the one rule for measured and published rows."""
    return Closeness(
        same_gpu=same_gpu_type(gpu, stage.gpu.type),
        same_model=stage.model is not None
        and canonical_model(stage.model) in {canonical_model(n) for n in model_names if n},
        same_shape=same_shape,
    )


def _mean_metrics(all_metrics: list[dict[str, float]]) -> dict[str, float]:
    keys = {key for metrics in all_metrics for key in metrics}
    return {key: statistics.mean(m[key] for m in all_metrics if key in m) for key in sorted(keys)}


# --------------------------------------------------------------------------- capacity runs

PERCENTILE_ORDER = {"p50": 0, "p90": 1, "p99": 2}


def capacity_mismatch(
    run: RunResult, stage: StageProfile, pairs: Sequence[SpeedClassPair] = ()
) -> list[str]:
    """Why a capacity search is not about this stage ([] = it is): same model and kind, lengths
    within MATCH_BAND, same precision (the match rule without its traffic part: the search
    varies the traffic), and an SLO at least as strict as the stage's on every metric the stage
    limits, judged at the stage's percentile or a higher one. float16 and bfloat16 count as the
    same precision where one of `pairs` (advisor.sizing.speed_class) measured them as one speed
    class for the run's engine on its GPU type."""
    config = run.config
    if not config.load.capacity_search:
        return ["not a capacity search"]
    reasons: list[str] = []
    model = run.model.name if run.model is not None else config.model
    # A Hugging Face id is its preset's model (same config.json): bench.core.model_ids.
    if stage.model is None or canonical_model(stage.model) not in {
        canonical_model(model),
        canonical_model(config.model),
    }:
        reasons.append(f"another model ({model})")
    match = workload_match(run, stage)
    if config.workload.kind != stage.kind:
        reasons.append(f"a {config.workload.kind} workload, the stage is {stage.kind}")
    precision = match.precision or dtype_stand_in(run, stage, pairs) is not None
    if not match.lengths or not precision:
        reasons += [
            d
            for d in match.differences
            if not d.startswith(("closed", "open", "a "))
            and not (precision and d.startswith("precision "))
        ]
    slo = config.slo
    for bound in REQUEST_SLO_BOUNDS:
        name = bound.field
        wanted = getattr(stage.slo, name)
        limit = getattr(slo, name) if slo is not None else None
        if wanted is not None and (limit is None or limit > wanted * (1 + 1e-9)):
            reasons.append(
                f"searched with {name} <= {limit:g}" if limit is not None else f"no {name} limit"
            )
            reasons[-1] += f", the stage asks {name} <= {wanted:g}"
    searched = slo.percentile  # a search stored before slo.percentile: its load.percentile
    if PERCENTILE_ORDER[searched] < PERCENTILE_ORDER[stage.slo.percentile]:
        reasons.append(f"judged at {searched}, the stage's SLO is at {stage.slo.percentile}")
    return reasons


def dtype_stand_in(
    run: RunResult, stage: StageProfile, pairs: Sequence[SpeedClassPair]
) -> SpeedClassPair | None:
    """The measured pair that lets `run`, at the other 16-bit dtype than the stage's and
    otherwise at its precision, stand for the stage's dtype (None: no such pair)."""
    have, wanted = run.config.precision, stage.precision.run_precision()
    if have.quantization != wanted.quantization or have.kv_cache_dtype != wanted.kv_cache_dtype:
        return None
    return same_speed_class(
        pairs, run.config.backend, run_gpu_type(run), {have.dtype, wanted.dtype}
    )


def capacity_runs_for(
    stage: StageProfile,
    runs: Iterable[RunResult],
    files: Mapping[str, str] | None = None,
    pairs: Sequence[SpeedClassPair] | None = None,
) -> tuple[list[RunResult], list[str]]:
    """The capacity searches that are about this stage, and a note per search left out or
    kept at the other 16-bit dtype (with the measured pair that allows it). `pairs`: the
    runs' speed-class pairs when the caller already has them (else found here)."""
    runs = list(runs)
    if pairs is None:
        pairs = speed_class_pairs(runs, files)
    kept: list[RunResult] = []
    notes: list[str] = []
    for run in runs:
        if not run.config.load.capacity_search:
            continue
        if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
            continue
        if run.config.workload.kind != stage.kind:
            continue  # an encoder's search never sizes a generation (nor the reverse): no note
        if run.validity is not None and run.validity.status == ValidityStatus.INVALID:
            # an INVALID search (not converged, too few requests a probe) never sizes a fleet:
            # its max_rate_rps is a bound at best (a calibration's settled levels are such runs)
            reasons = run.validity.reasons or ["no reason recorded"]
            notes.append(
                f"capacity run {run.run_id} ({run.config.backend}): INVALID, left out "
                f"({reasons[0]})"
            )
            continue
        reasons = capacity_mismatch(run, stage, pairs)
        if reasons:
            notes.append(f"capacity run {run.run_id} ({run.config.backend}): " + "; ".join(reasons))
            continue
        kept.append(run)
        stand_in = (
            dtype_stand_in(run, stage, pairs)
            if run.config.precision.dtype != stage.precision.run_precision().dtype
            else None
        )
        if stand_in is not None:
            notes.append(
                f"capacity run {run.run_id} ({run.config.backend}) ran at "
                f"{run.config.precision.dtype}, the stage asks {stage.precision.dtype}: kept, "
                f"since {stand_in.sentence()}"
            )
    return kept, notes


# --------------------------------------------------------------------------- reference files


def published_rows(stage: StageProfile, data: dict[str, Any], reference: str) -> list[EvidenceRow]:
    """Rows of a published table (`kind: published`); its caveats travel with every row."""
    environment = data.get("environment", {})
    gpu = environment.get("gpu")
    model = data.get("model")
    kind = data.get("workload_kind", "generate")
    if kind != stage.kind:
        return []
    source = data.get("source", {})
    reference_text = f"{reference}: {source.get('title', '')}".strip()
    metric_name = objective_metric(stage, published=True)
    rows = []
    for entry in data.get("rows", []):
        metrics = {
            key: float(value)
            for key, value in entry.items()
            if key != "framework" and isinstance(value, int | float)
        }
        meets, failures = _slo_check(stage, metrics, published=True)
        caveats = list(data.get("caveats", []))
        caveats += entry.get("caveats", []) if isinstance(entry.get("caveats"), list) else []
        rows.append(
            EvidenceRow(
                framework=entry["framework"],
                source="published",
                gpu=gpu,
                model=model,
                shape=data.get("shape", "not stated"),
                precision=entry.get("precision", data.get("precision", "not stated")),
                closeness=_closeness(stage, gpu, {model}, same_shape=None),
                repeats=1,
                status="published",
                valid=None,
                meets_slo=meets,
                slo_failures=failures,
                metrics=metrics,
                objective_metric=metric_name,
                objective_value=metrics.get(metric_name),
                reference=reference_text,
                caveats=caveats,
                provenance=Provenance(kind="article", file=reference),
            )
        )
    return rows


def reference_published_rows(reference: ReferenceFiles, stage: StageProfile) -> list[EvidenceRow]:
    """The rows of every published table in the already-read reference folder."""
    return [
        row
        for name, data in reference.published.items()
        for row in published_rows(stage, data, name)
    ]


def reference_runs_and_rows(
    stage: StageProfile, reference_dir: str | Path | None
) -> tuple[dict[str, list[RunResult]], list[EvidenceRow], list[str]]:
    """Measured RunResults (by file name) and published rows in the reference folder, plus notes."""
    reference = read_reference_folder(reference_dir)
    return reference.runs, reference_published_rows(reference, stage), reference.notes


def stage_evidence(
    stage: StageProfile, runs: Iterable[RunResult], reference: ReferenceFiles
) -> list[EvidenceRow]:
    """Ranked evidence for a stage from RunResults and the already-read reference folder."""
    rows = rows_from_runs(stage, runs)
    for file_name, file_runs in reference.runs.items():
        rows += rows_from_runs(stage, file_runs, reference=cited_file(reference.folder, file_name))
    return rank_rows(rows + reference_published_rows(reference, stage))


def gather_evidence(
    stage: StageProfile, store: Store | None = None, reference_dir: str | Path | None = None
) -> list[EvidenceRow]:
    """Ranked evidence for a stage from the store and the reference folder."""
    return stage_evidence(stage, stored_runs(store), read_reference_folder(reference_dir))


def rank_rows(rows: list[EvidenceRow]) -> list[EvidenceRow]:
    """Eligible first, then source (here > elsewhere > published), closeness, objective."""

    def key(row: EvidenceRow) -> tuple:
        value = row.objective_value
        objective_key = math.inf
        if value is not None:
            objective_key = -value if row.higher_is_better else value
        return (
            0 if row.eligible else 1,
            SOURCE_RANK[row.source],
            -row.closeness.score,
            objective_key,
        )

    return sorted(rows, key=key)


__all__ = [
    "MATCH_BAND",
    "Closeness",
    "EvidenceRow",
    "Provenance",
    "WorkloadMatch",
    "capacity_mismatch",
    "capacity_runs_for",
    "gather_evidence",
    "objective_metric",
    "rank_rows",
    "reference_published_rows",
    "reference_runs_and_rows",
    "rows_from_runs",
    "stage_evidence",
    "workload_match",
]
