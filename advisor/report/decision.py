"""Page 1 of the report: per stage the decision in one sentence, the facts that decided it with
their provenance, the runner-up, what would change the answer and the risks; plus the
configuration to deploy in words and the commands that reproduce the report.

Everything here reads the advisor's answer (`advisor.decide.recommend.StageRecommendation`) by
field; provenance words come from `advisor.evidence.rows.Provenance` (your runs / this project's
published runs / the article's figures), never re-derived from a GPU name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from advisor.decide.parts import split_sentence
from advisor.decide.recommend import (
    BASIS_WORDS,
    REFUSED,
    Recommendation,
    StageRecommendation,
    slo_text,
)
from advisor.evidence.rows import EvidenceRow
from advisor.report.forward_page import feasibility_risk, forward_sizing, sizing_words
from advisor.report.model import Fact, KeyValue, StageDecision
from advisor.report.numbers import figure, number, percent, scalar_text
from advisor.sizing.deployments import RecommendedDeployment
from advisor.workload.profile import StageProfile
from advisor.workload.quality import QUALITY_NOTE_PREFIX
from bench.core.config import (
    ForwardWorkload,
    GenerateWorkload,
    LoadPattern,
    PrecisionConfig,
    Workload,
)
from bench.core.metric_catalog import METRICS_BY_NAME
from bench.core.schema import RunResult

FRAMEWORK_LABELS = {
    "vllm": "vLLM",
    "tensorrt_llm": "TensorRT-LLM",
    "tensorrt": "TensorRT",
    "onnxruntime": "ONNX Runtime",
    "pytorch": "PyTorch (eager)",
    "torch_compile": "torch.compile",
    "openai": "an OpenAI-compatible server",
    "jax": "JAX",
    "fake": "the fake backend (a test double)",
}
TREE_WORDS = "the decision tree (data/decision_tree.yaml, the article's rules)"
ESTIMATE_WORDS = "the feasibility estimate (datasheet figures, nothing measured)"
MAX_FACTS = 3
MAX_CHANGES = 3


def framework_label(name: str | None) -> str:
    if not name or name == REFUSED:
        return "none"
    return FRAMEWORK_LABELS.get(name, name)


def metric_words(metric: str | None) -> tuple[str, str]:
    """(words, unit) of an advisor metric name (`e2e_ms_p99` -> ('E2E p99', 'ms')), from the
    metric catalogue; a name it does not declare is spelled out."""
    if not metric:
        return "objective", ""
    known = METRICS_BY_NAME.get(metric)
    if known is not None:
        return known.words, known.unit
    return metric.replace("_", " "), ""


# --------------------------------------------------------------------------- configuration


def _forward(configuration: RecommendedDeployment) -> bool:
    """Whether the deployment serves a forward model (encoder, vision): no KV cache to speak
    of. Known from its planned workload, or from a forward-only framework (TensorRT)."""
    workload = configuration.workload
    if workload is not None:
        return workload.kind == "forward"
    return configuration.framework == "tensorrt"


def _precision_words(precision: PrecisionConfig | None, forward: bool = False) -> str:
    if precision is None:
        return ""
    parts = [f"{precision.dtype} weights"]
    if precision.quantization:
        parts[0] = f"{precision.quantization} weights ({precision.dtype} compute)"
    kv = precision.kv_cache_dtype
    if not forward:  # a forward pass keeps no KV cache between requests
        parts.append("FP8 KV cache" if kv == "fp8" else "KV cache in the model dtype")
    if precision.allow_tf32:
        parts.append("TF32 matmuls allowed")
    return ", ".join(parts)


def _arg_text(value: Any) -> str:
    """An engine argument as it is typed (`0.85`, `1024`, `False`), not as a table figure."""
    if isinstance(value, bool | int | float) or value is None:
        return repr(value)
    return scalar_text(value)


def _engine_args_words(engine_args: Mapping[str, Any] | None, skip: tuple[str, ...] = ()) -> str:
    return ", ".join(
        f"{key}={_arg_text(value)}" for key, value in (engine_args or {}).items() if key not in skip
    )


def _workload_words(workload: Workload | None, load: LoadPattern | None) -> str:
    """The benchmark workload of a plan configuration in words (`batch 64, 128 tokens; 16
    requests in flight for 120 s`)."""
    parts: list[str] = []
    if isinstance(workload, ForwardWorkload):
        parts.append(f"batch {workload.batch_size}")
        if workload.sequence_length is not None and workload.sequence_length.mean:
            parts.append(f"{number(workload.sequence_length.mean)} tokens per sample")
        if workload.image_size:
            parts.append(f"{workload.image_size} px images")
    elif isinstance(workload, GenerateWorkload):
        prompt, output = workload.prompt_tokens.mean, workload.output_tokens.mean
        if prompt and output:
            parts.append(f"prompt {number(prompt)} / output {number(output)} tokens")
    if load is not None:
        parts.append(load.plan_words(number))
    duration = getattr(load, "duration_s", None)
    if duration:
        parts.append(f"for {number(duration)} s")
    return ", ".join(parts)


def deploy_rows(
    framework: str,
    configuration: RecommendedDeployment,
    gpu_type: str | None,
    forward: bool = False,
) -> tuple[list[KeyValue], list[str]]:
    """The configuration to deploy as labelled rows, and its trade-offs and estimate accuracy
    as notes: what an engineer types into the engine, not the advisor's raw keys."""
    rows: list[KeyValue] = [KeyValue(key="Framework", value=framework_label(framework))]
    parallelism = configuration.parallelism
    if parallelism is not None:
        layout = f"{parallelism.gpus_needed} × {gpu_type or 'GPU'}"
        layout += (
            f" (tensor parallel {parallelism.tensor_parallel_size}, "
            f"{parallelism.replicas} replica(s))"
        )
        rows.append(KeyValue(key="GPUs", value=layout))
    precision = _precision_words(configuration.precision, forward or _forward(configuration))
    if precision:
        rows.append(KeyValue(key="Precision", value=precision))
    args = _engine_args_words(configuration.typed_engine_args())
    rows.append(KeyValue(key="Engine arguments", value=args or "the engine's defaults (none set)"))
    shape = configuration.shape or _workload_words(configuration.workload, configuration.load)
    if shape:
        rows.append(KeyValue(key="Measured or planned at", value=str(shape)))
    figures = configuration.figures
    if figures is not None:
        parts = []
        if figures.predicted_tpot_ms is not None:
            tpot = METRICS_BY_NAME["tpot_ms_p50"]
            parts.append(f"{tpot.label} {figure(figures.predicted_tpot_ms, tpot.unit)}")
        if figures.predicted_output_throughput_tok_s is not None:
            unit = METRICS_BY_NAME["output_throughput_tok_s"].unit
            parts.append(f"{figure(figures.predicted_output_throughput_tok_s, unit)}")
        if figures.predicted_tok_s_per_user is not None:
            unit = METRICS_BY_NAME["tok_s_per_user"].unit
            parts.append(f"{figure(figures.predicted_tok_s_per_user, unit)} per user")
        if figures.at_concurrency is not None:
            parts.append(f"at {figures.at_concurrency} requests in flight")
        # The figures are the engine model's, also where the configuration has measured runs.
        what = (
            "the engine model's estimate; this configuration has measured runs"
            if figures.basis == "measured"
            else "estimated, not measured"
        )
        rows.append(KeyValue(key=f"Expected figures ({what})", value=", ".join(parts)))
    if configuration.source:
        rows.append(KeyValue(key="Settings come from", value=configuration.source))
    notes = list(configuration.trade_offs)
    if configuration.estimate_accuracy:
        notes.append(configuration.estimate_accuracy)
    return rows, notes


def configuration_phrase(
    framework: str,
    configuration: RecommendedDeployment,
    gpu_type: str | None,
    forward: bool = False,
) -> str:
    """`vLLM on 1 × H200, tensor parallel 1, float16 weights, KV cache in the model dtype,
    with gpu_memory_utilization=0.85, max_num_seqs=256`."""
    parts = [framework_label(framework)]
    gpus = configuration.gpus
    if gpu_type:
        parts[0] += f" on {gpus or 1} × {gpu_type}"
    else:
        parts[0] += f" on {gpus or 1} GPU(s) of a type not chosen yet"
    forward = forward or _forward(configuration)
    if configuration.parallelism is not None and not forward:
        parts.append(f"tensor parallel {configuration.parallelism.tensor_parallel_size}")
    precision = _precision_words(configuration.precision, forward)
    if configuration.weight_format == "int8":
        precision = "INT8 weights and activations"
    if precision:
        parts.append(precision)
    text = ", ".join(parts)
    # tensor_parallel_size is said above in words; the rest as the engine takes them.
    args = _engine_args_words(configuration.typed_engine_args(), skip=("tensor_parallel_size",))
    if args:
        text += f", with {args}"
    elif configuration.source.startswith("benchmark plan defaults"):
        text += ", engine settings still to be measured (benchmark plan defaults)"
    return text


# --------------------------------------------------------------------------- facts


def _row_shape(row: EvidenceRow) -> str:
    parts = [part for part in (row.model, row.shape) if part]
    return ", ".join(parts)


def _repeats(row: EvidenceRow) -> str:
    return "1 run" if row.repeats <= 1 else f"{row.repeats} repeats"


def _measured_fact(row: EvidenceRow, prefix: str = "") -> Fact:
    label, unit = metric_words(row.objective_metric)
    value = figure(row.objective_value, unit)
    where = f" on {row.gpu}" if row.gpu else " on a CPU"
    text = f"{prefix}{framework_label(row.framework)}: {value} {label}{where} ({_row_shape(row)})"
    if row.status == "INVALID" or row.valid is False:
        # An INVALID run is cited only as such: its figure failed the run's own validity rule.
        text = f"{prefix}INVALID run: {text[len(prefix) :]}"
    kind = row.provenance.kind if row.provenance is not None else "yours"
    # The fact's label already names the kind; the detail says where (file, host, date).
    where = row.provenance.where if row.provenance is not None else ""
    detail = f"{where}; {_repeats(row)}" if where else _repeats(row)
    return Fact(text=text, source=kind, source_words=detail)


def settling_row(chosen: Recommendation) -> EvidenceRow | None:
    """The recommended framework's measurement that settled the answer (its runs are among
    `settled_by_runs`), else its first matching eligible row."""
    settled = set(chosen.settled_by_runs)
    for row in chosen.evidence:
        if row.framework == chosen.framework and settled & set(row.run_ids):
            return row
    for row in chosen.evidence:
        if row.match is not None and row.match.matches and row.eligible:
            return row
    return None


def _verdict_fact(chosen: Recommendation, source: str, words: str) -> Fact | None:
    for verdict in chosen.verdicts:
        if verdict.ratio is None:
            continue
        label, _unit = metric_words(verdict.metric)
        interval = (
            f"95% interval {verdict.interval.low:.2f}–{verdict.interval.high:.2f}×"
            if verdict.interval is not None
            else "no interval (no per-request records)"
        )
        repeats = (
            "single run, the interval is within-run only"
            if verdict.single_run
            else f"{verdict.leader_repeats} vs {verdict.alternative_repeats} repeats"
        )
        outcome = {
            "faster": "better beyond",
            "slower": "worse beyond",
            "indistinguishable": "a tie at",
            "unknown": "undecided at",
        }[verdict.verdict]
        text = (
            f"{verdict.ratio:.2f}× {framework_label(verdict.alternative)} on {label} "
            f"({interval}; {repeats}): {outcome} the {verdict.threshold:.0%} threshold"
        )
        return Fact(text=text, source=source, source_words=words)  # type: ignore[arg-type]
    return None


def _tree_fact(stage: StageRecommendation) -> Fact:
    decision = stage.decision
    chosen = stage.recommendation.framework
    rationale = next(
        (c.rationale for c in decision.candidates if c.framework == chosen), decision.title
    )
    return Fact(
        text=f"The tree's leaf “{decision.title}”: {rationale}",
        source="tree",
        source_words=TREE_WORDS,
    )


def _estimate_fact(stage: StageRecommendation) -> Fact | None:
    estimate = stage.estimate
    if estimate.required_gb is None:
        return None
    need = figure(estimate.required_gb, "GB")
    if estimate.fits is None:
        text = f"Needs about {need} of GPU memory; no GPU type in the profile, so no fit judged"
    else:
        parts = []
        if estimate.weights_gb is not None:
            parts.append(f"{figure(estimate.weights_gb, 'GB')} weights")
        if estimate.kv_cache_gb:
            parts.append(f"{figure(estimate.kv_cache_gb, 'GB')} KV cache")
        detail = f" ({' + '.join(parts)})" if parts else ""
        count = estimate.gpu_count or 1
        have = figure(estimate.available_gb, "GB")
        gpus = (
            f"{count} × {estimate.gpu or 'GPU'} ({have}, the 90% of its memory a serving "
            "engine takes)"
        )
        if estimate.fits and estimate.kv_limited:
            # All the peak's sequences in one engine would not fit; the fleet's replicas hold
            # them, each engine as many as its KV cache takes.
            text = (
                f"The weights and the KV cache of {estimate.max_concurrency_that_fits} of the "
                f"{estimate.concurrency} sequences in flight fit {gpus}; all "
                f"{estimate.concurrency} in one engine would need {need}{detail}, so the fleet's "
                "replicas hold the rest"
            )
        else:
            verb = "fits" if estimate.fits else "does not fit"
            text = f"Needs {need}{detail} with the runtime: {verb} {gpus}"
        if estimate.decode_floor_ms_per_token:
            text += (
                f"; decode floor {figure(estimate.decode_floor_ms_per_token, 'ms')} per token "
                "at batch 1"
            )
    return Fact(text=text, source="estimate", source_words=ESTIMATE_WORDS)


def _nearest_fact(chosen: Recommendation) -> Fact | None:
    # A run of another modality or model family says nothing about this stage (the evidence
    # table still lists it, with why it is context only): it is not a reason on page 1.
    row = next(
        (
            r
            for r in chosen.nearest
            if r.objective_value is not None and (r.match is None or r.match.model_kind)
        ),
        None,
    )
    if row is None:
        return None
    fact = _measured_fact(row, prefix="Nearest measurement, context only: ")
    distance = row.match.summary if row.match is not None else "workload not stated"
    if not row.closeness.same_gpu:
        distance = f"another GPU than yours; {distance}"
    return fact.model_copy(update={"text": f"{fact.text} — {distance}"})


def decision_facts(stage: StageRecommendation) -> list[Fact]:
    """The two or three facts that decided the stage, strongest first."""
    chosen = stage.recommendation
    facts: list[Fact | None] = []
    if chosen.follows == "measurements":
        row = settling_row(chosen)
        if row is not None:
            facts.append(_measured_fact(row))
            kind = row.provenance.kind if row.provenance is not None else "yours"
            where = row.provenance.where if row.provenance is not None else ""
            facts.append(_verdict_fact(chosen, kind, where))
        facts.append(_tree_fact(stage))
        facts.append(_estimate_fact(stage))
    else:
        facts.append(_tree_fact(stage))
        facts.append(_estimate_fact(stage))
        facts.append(_nearest_fact(chosen))
    return [fact for fact in facts if fact is not None][:MAX_FACTS]


# --------------------------------------------------------------------------- the rest


def _runner_up(stage: StageRecommendation, availability: Mapping[str, str]) -> str | None:
    chosen = stage.recommendation
    if not chosen.alternatives:
        return None
    alternative = chosen.alternatives[0]
    name = framework_label(alternative.framework)
    measured = next(
        (
            row
            for row in stage.evidence
            if row.framework == alternative.framework
            and row.closeness.same_gpu
            and row.eligible
            and row.match is not None
            and row.match.matches
            and row.objective_value is not None
        ),
        None,
    )
    if measured is not None:
        label, unit = metric_words(measured.objective_metric)
        where = measured.provenance.words if measured.provenance is not None else "your runs"
        text = (
            f"{name}: {figure(measured.objective_value, unit)} {label} on {measured.gpu or 'a CPU'}"
            f" ({where})"
        )
    else:
        text = f"{name}: the tree's rank {alternative.rank}, no measurement matching this workload"
    state = availability.get(alternative.framework)
    if state and state != "available":
        text += "; it cannot run in this installation"
    return text


def _would_change(chosen: Recommendation) -> list[str]:
    """The runner-up's conditions first (measurement conditions lead), then the others'."""
    out: list[str] = []
    for alternative in chosen.alternatives:
        conditions = sorted(
            alternative.what_would_change, key=lambda text: not text.startswith("a VALID")
        )
        for condition in conditions:
            text = f"{framework_label(alternative.framework)} would win {condition}"
            if condition.startswith("if "):
                text = f"{framework_label(alternative.framework)} would lead {condition}"
            elif condition.startswith("a VALID"):
                text = f"{framework_label(alternative.framework)} would lead given {condition}"
            if text not in out:
                out.append(text)
        if len(out) >= MAX_CHANGES:
            break
    return out[:MAX_CHANGES]


def decision_risks(
    stage: StageRecommendation, availability: Mapping[str, str], measured: set[str]
) -> list[str]:
    """What a reviewer should know before betting on the answer: figures that are estimates,
    candidate engines never run, FP8 accuracy unchecked or quality measured (the deltas), single
    runs, published-only evidence."""
    chosen = stage.recommendation
    risks: list[str] = []
    figures = chosen.configuration.figures
    if chosen.settled_by == "tree":
        risks.append(
            "No measurement matches this workload: the answer rests on the decision tree, and "
            "every figure for it is an estimate until the benchmark plan has run"
        )
    elif figures is not None and figures.basis != "measured":
        risks.append("The recommended configuration's figures are estimates, not measurements")
    if chosen.settled_by == "published":
        risks.append(
            "Settled by this project's published runs, not on your machines: re-run the plan on "
            "yours before committing"
        )
    unrun = [
        framework_label(name)
        for name in [c.framework for c in stage.decision.candidates]
        if name not in measured
        and availability.get(name) not in (None, "available")
        and name != REFUSED
    ]
    if unrun:
        risks.append(
            f"Never run for this report: {', '.join(unrun)} (not installed or not runnable here); "
            "its place in the ranking comes from the tree alone"
        )
    if "single run" in chosen.confidence.why:
        risks.append("Single runs: intervals are within-run only and leave out run-to-run spread")
    for caveat in chosen.caveats:
        if caveat.startswith(QUALITY_NOTE_PREFIX):  # measured: page 1 names the deltas
            risks.append(caveat)
        if caveat.startswith("FP8"):
            how = caveat.split(" — ", 1)[-1] if " — " in caveat else caveat
            risks.append(
                "FP8 accuracy is unchecked (FP8 options are compared on speed and memory "
                f"only): {how}"
            )
    return risks


def _sizing(stage_profile: StageProfile | None, chosen: Recommendation) -> str:
    capacity = chosen.capacity
    if capacity is not None and stage_profile is not None:
        cost = (
            f"about ${capacity.monthly_cost:,.0f} a month"
            if capacity.monthly_cost is not None
            else "cost not known (no price)"
        )
        count = capacity.count_words(stage_profile.gpu.type or "GPU", times="×", dash="–")
        per_token = (
            f", ${capacity.cost_per_million_output_tokens:,.2f} per 1M output tokens"
            if capacity.cost_per_million_output_tokens is not None
            else ""
        )
        text = (
            f"{count} for {number(capacity.peak_request_rate_rps)} req/s "
            f"(+{percent(capacity.headroom_fraction)} headroom) at {slo_text(stage_profile)}, "
            f"{cost}{per_token}"
        )
        if not capacity.converged:
            text += "; the capacity search did not converge, so the count is not settled"
        if chosen.capacity_basis:
            text += f". Basis: {chosen.capacity_basis}"
        fleet = chosen.fleet
        if fleet is not None and fleet.alternatives:
            gpu = stage_profile.gpu.type or "GPU"
            text += ". Next: " + "; ".join(o.line(gpu) for o in fleet.alternatives)
        if fleet is not None and fleet.tie:
            text += f". A tie: {fleet.tie}"
        return text
    head = chosen.headline
    return head.split("; ", 1)[1] if "; " in head else "GPU count not computed"


def _basis_sentence(chosen: Recommendation) -> str:
    """What settled the framework, and, where no comparison of candidates did but a capacity
    search sized the fleet, that measurement too (never "no measurement" beside one)."""
    text = chosen.basis[0].upper() + chosen.basis[1:]
    capacity = chosen.capacity
    if chosen.settled_by == "tree" and capacity is not None and capacity.source == "measured":
        text = (
            "The decision tree's first choice: no side-by-side measurement of the candidates "
            "matches this workload yet; the fleet below is sized from a measured capacity "
            "search of it"
        )
    return text + "."


def stage_decision(
    stage: StageRecommendation,
    stage_profile: StageProfile | None,
    availability: Mapping[str, str],
    measured: set[str],
    runs: Sequence[RunResult] = (),
) -> StageDecision:
    """Page 1 for one stage of the advisor's answer; `runs` (stored and shipped) are the batch
    ladders a forward stage's sizing is calibrated on."""
    chosen = stage.recommendation
    gpu_type = stage_profile.gpu.type if stage_profile is not None else None
    if chosen.follows == "refused":
        reason = stage.decision.refused or (chosen.caveats[0] if chosen.caveats else "")
        return StageDecision(
            stage=stage.stage,
            framework=chosen.framework,
            framework_label="no stack (refused)",
            refused=True,
            sentence=f"No stack is recommended for {stage.stage}: the workload was refused "
            "before any run.",
            basis=BASIS_WORDS["refused"],
            settled_by="refused",
            confidence=chosen.confidence.level,
            confidence_why=chosen.confidence.why,
            facts=[
                Fact(
                    text=reason or chosen.confidence.why,
                    source="estimate",
                    source_words="the model's configuration and each engine's limits",
                )
            ],
            would_change=[line for line in chosen.caveats[1:]][:MAX_CHANGES],
            risks=[],
            sizing="not sized: the workload does not fit the model",
        )
    phrase = configuration_phrase(
        chosen.framework, chosen.configuration, gpu_type, forward=stage.kind == "forward"
    )
    sentence = f"Serve {stage.stage} with {phrase}."
    split = split_sentence(stage.parts, framework_label)
    if split:
        # The fleet above is the stage's route taken whole; the split serves it part by part.
        sentence += f" {split}."
    risks = decision_risks(stage, availability, measured)
    sizing = _sizing(stage_profile, chosen)
    forward = forward_sizing(stage_profile, chosen.framework, runs)
    if forward is not None and stage_profile is not None:
        # A forward stage is sized by its batcher, not by an LLM capacity search.
        if chosen.capacity is None:
            sizing = sizing_words(forward)
        infeasible = feasibility_risk(forward)
        if infeasible:
            risks.insert(0, infeasible)
    if chosen.slo_floor is not None:  # an LLM's TTFT or TPOT limit below its floor
        risks.insert(0, chosen.slo_floor.risk())
        sentence += " As set, its SLO cannot hold on any engine: see the risks below."
    return StageDecision(
        stage=stage.stage,
        framework=chosen.framework,
        framework_label=framework_label(chosen.framework),
        sentence=sentence,
        basis=_basis_sentence(chosen),
        settled_by=chosen.settled_by,
        confidence=chosen.confidence.level,
        confidence_why=chosen.confidence.why,
        facts=decision_facts(stage),
        runner_up=_runner_up(stage, availability),
        would_change=_would_change(chosen),
        risks=risks,
        sizing=sizing,
    )


def reproduce_commands(
    profile_file: str | None, all_refused: bool = False, unplannable: str | None = None
) -> list[KeyValue]:
    """The commands that re-create the evidence and this report (no measuring command when
    every stage was refused: there is no candidate to measure). `unplannable`: why the bench
    cannot run a stage's model as named (a published speech model): said with the command."""
    profile = profile_file or "PROFILE.yaml"
    key = "Measure the candidates on your GPU (prints one bench command per candidate)"
    if unplannable:
        key = f"Measure the candidates on your GPU, once {unplannable}"
    commands = (
        []
        if all_refused
        else [KeyValue(key=key, value=f"python -m advisor bench-plan --profile {profile}")]
    )
    commands += [
        KeyValue(
            key="Rebuild this report",
            value=f"python -m advisor report --profile {profile} --format all --out report/",
        ),
    ]
    return commands
