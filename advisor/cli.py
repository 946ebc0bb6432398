"""`python -m advisor ...`: recommend a framework for a workload profile, print its benchmark plan.

`app` is the typer application; other modules add commands to it (e.g. `report`). Importing this
module stays cheap (no torch, no scikit-learn) so `--help` is fast. A user error (missing or bad
profile, unknown field, bad flag) prints one line on stderr and exits with code 2.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bench.cli_errors import OneLineErrorsGroup
from bench.core.errors import UserError

if TYPE_CHECKING:
    from advisor.decide.recommend import Report
    from advisor.workload.profile import WorkloadProfile

app = typer.Typer(
    cls=OneLineErrorsGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Framework-selection advisor: workload profile -> decision tree -> evidence -> answer.",
    pretty_exceptions_enable=False,
)


def user_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a UserError into one line on stderr and exit code 2 (no traceback)."""

    @wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except UserError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None

    return wrapper


# --------------------------------------------------------------------------- shared options

ProfileOption = Annotated[
    Path | None, typer.Option("--profile", "-p", help="Workload profile (YAML or JSON).")
]
StageOption = Annotated[
    str | None, typer.Option("--stage", help="Stage the flags change (multi-stage profiles).")
]
YesNo = str | None


def _flag(help_text: str) -> Any:
    return typer.Option(help=help_text, show_default=False)


def build_profile(
    profile: Path | None, stage: str | None, flags: dict[str, Any]
) -> WorkloadProfile:
    """A profile from --profile, overridden by flags; flags alone build a single-stage profile."""
    from advisor.workload.profile_input import load_profile, profile_from_flags

    base = load_profile(profile) if profile is not None else None
    given = {key: value for key, value in flags.items() if value is not None}
    if base is None and not given:
        raise UserError(
            "give a workload: --profile FILE and/or flags such as --kind, --model, --gpu"
        )
    if not given and stage is None:
        assert base is not None
        return base
    return profile_from_flags(base, stage=stage, **flags)


def open_store(store: str | None) -> Any:
    """The results store given, or the default one if it exists (a SQLite file is never created
    by the advisor; a database server is opened as named)."""
    from bench.storage.store import ResultStore, parse_store_url

    location = parse_store_url(store)
    if location.path is not None and not location.path.exists():
        if store is not None:
            raise UserError(f"no store at {location.display}")
        return None
    return ResultStore(location, create=False)


# --------------------------------------------------------------------------- commands


# The traffic flags of `recommend` and `bench-plan` (advisor/workload/traffic.py maps them onto the
# stage).
SharedPrefixTokens = Annotated[
    int | None, _flag("Shared system prompt / context length (tokens, inside the prompt).")
]
SharedPrefixCount = Annotated[int | None, _flag("How many distinct shared contexts.")]
ConversationTurns = Annotated[int | None, _flag("Turns per conversation (multi-turn).")]
UserMessageTokens = Annotated[int | None, _flag("Length of each later user message (tokens).")]
TraceFile = Annotated[
    str | None, _flag("Request trace to replay (Mooncake .jsonl or Azure-layout .csv).")
]
PromptFileFlag = Annotated[str | None, _flag("Your prompts (JSONL or CSV).")]
# The quality flags of `recommend` and `report` (advisor/workload/quality.py applies the rule).
QualityResultFlag = Annotated[
    str | None,
    _flag(
        "quality.json written by `python -m bench quality` on your evaluation file: a precision "
        "losing more than --max-quality-loss-pct on it is not recommended."
    ),
]
MaxQualityLossFlag = Annotated[
    float | None,
    _flag(
        "Tolerated quality loss vs the baseline precision, percent (perplexity's relative "
        "increase or accuracy points); default 1."
    ),
]


@app.command()
@user_errors
def recommend(
    profile: ProfileOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    store: Annotated[
        str | None,
        typer.Option(
            help="Results store (SQLite file, sqlite:/// or postgresql:// URL); default: "
            "$ADVISOR_STORE "
            "or the user data folder, when it exists."
        ),
    ] = None,
    reference_dir: Annotated[
        Path | None, typer.Option(help="Folder of reference evidence (default data/reference).")
    ] = None,
    tree: Annotated[
        Path | None, typer.Option(help="Decision tree YAML (default data/decision_tree.yaml).")
    ] = None,
    stage: StageOption = None,
    dynamic_control_flow: Annotated[YesNo, _flag("yes/no: data-dependent control flow.")] = None,
    fixed_input_shapes: Annotated[YesNo, _flag("yes/no: every request has one shape.")] = None,
    long_sequence_generation: Annotated[YesNo, _flag("yes/no: long generated outputs.")] = None,
    multi_backend: Annotated[YesNo, _flag("yes/no: must run on several runtimes.")] = None,
    determinism_required: Annotated[YesNo, _flag("yes/no: identical outputs run to run.")] = None,
    kind: Annotated[str | None, _flag("generate or forward.")] = None,
    model: Annotated[str | None, _flag("Model preset name or checkpoint path.")] = None,
    parameters_b: Annotated[float | None, _flag("Parameters in billions (override).")] = None,
    prompt_tokens: Annotated[int | None, _flag("Mean prompt length (tokens).")] = None,
    output_tokens: Annotated[int | None, _flag("Mean output length (tokens).")] = None,
    batch_size: Annotated[int | None, _flag("Samples per request (forward kind).")] = None,
    concurrency: Annotated[int | None, _flag("Requests in flight at peak.")] = None,
    request_rate_rps: Annotated[float | None, _flag("Arrival rate (requests/s).")] = None,
    ttft_ms: Annotated[float | None, _flag("TTFT SLO (ms).")] = None,
    tpot_ms: Annotated[float | None, _flag("TPOT SLO (ms).")] = None,
    e2e_ms: Annotated[float | None, _flag("End-to-end latency SLO (ms).")] = None,
    objective: Annotated[
        str | None,
        _flag(
            "maximize_throughput, maximize_goodput, minimize_latency or minimize_cost_per_token."
        ),
    ] = None,
    gpu: Annotated[str | None, _flag("GPU type (e.g. H200, A100-80GB-SXM, L4).")] = None,
    gpu_count: Annotated[int | None, _flag("GPUs for the stage.")] = None,
    gpu_memory_gb: Annotated[
        float | None, _flag("Memory per GPU as its datasheet states it (GB, read as GiB).")
    ] = None,
    dtype: Annotated[str | None, _flag("float16, bfloat16 or float32.")] = None,
    quantization: Annotated[str | None, _flag("Weight quantisation: awq, gptq, int4, fp8.")] = None,
    build_time_tolerance: Annotated[str | None, _flag("none, minutes or hours.")] = None,
    shared_prefix_tokens: SharedPrefixTokens = None,
    shared_prefix_count: SharedPrefixCount = None,
    conversation_turns: ConversationTurns = None,
    user_message_tokens: UserMessageTokens = None,
    trace_file: TraceFile = None,
    prompt_file: PromptFileFlag = None,
    quality_result: QualityResultFlag = None,
    max_quality_loss_pct: MaxQualityLossFlag = None,
) -> None:
    """Walk the decision tree, estimate the fit and floor, weigh the evidence, recommend."""
    flags = {k: v for k, v in locals().items() if k in _FLAG_NAMES}
    if reference_dir is not None:
        from bench.core.files import check_user_path

        # Given but absent used to mean "no reference evidence" in silence: a typo lost evidence.
        if not check_user_path(reference_dir, "--reference-dir").is_dir():
            raise UserError(f"--reference-dir {reference_dir} is not a folder")
    workload = build_profile(profile, stage, flags)
    from advisor.decide.recommend import recommend as run_recommend
    from advisor.plan.tree import load_tree

    report = run_recommend(
        workload,
        store=open_store(store),
        reference_dir=reference_dir,
        tree=load_tree(tree) if tree is not None else None,
    )
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        typer.echo(format_text(report))


@app.command("bench-plan")
@user_errors
def bench_plan_command(
    profile: ProfileOption = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Short runs: a first answer in minutes.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    stage: StageOption = None,
    kind: Annotated[str | None, _flag("generate or forward.")] = None,
    model: Annotated[str | None, _flag("Model preset name or checkpoint path.")] = None,
    gpu: Annotated[str | None, _flag("GPU type.")] = None,
    concurrency: Annotated[int | None, _flag("Requests in flight at peak.")] = None,
    prompt_tokens: Annotated[int | None, _flag("Mean prompt length (tokens).")] = None,
    output_tokens: Annotated[int | None, _flag("Mean output length (tokens).")] = None,
    dynamic_control_flow: Annotated[YesNo, _flag("yes/no.")] = None,
    fixed_input_shapes: Annotated[YesNo, _flag("yes/no.")] = None,
    long_sequence_generation: Annotated[YesNo, _flag("yes/no.")] = None,
    multi_backend: Annotated[YesNo, _flag("yes/no.")] = None,
    shared_prefix_tokens: SharedPrefixTokens = None,
    shared_prefix_count: SharedPrefixCount = None,
    conversation_turns: ConversationTurns = None,
    user_message_tokens: UserMessageTokens = None,
    trace_file: TraceFile = None,
    prompt_file: PromptFileFlag = None,
) -> None:
    """Print one run configuration per candidate (and its `python -m bench run` command)."""
    flags = {k: v for k, v in locals().items() if k in _FLAG_NAMES}
    workload = build_profile(profile, stage, flags)
    from advisor.plan.run_configs import unplannable
    from advisor.plan.stage_plan import plan_for_stage
    from advisor.plan.tree import load_tree
    from bench.engines.models import check_model_name
    from bench.run.api import reproduce_command

    for each in workload.stages:  # as `bench run` would, before planning anything
        if each.model is not None:
            unplannable(each)
            check_model_name(each.model)
    tree = load_tree()
    # A quick plan stays one run per candidate (minutes); a full plan adds the configurations.
    plans = [
        plan_for_stage(s, quick=quick, tree=tree, configurations=not quick) for s in workload.stages
    ]
    _check_as_bench_run_would(plans)
    if as_json:
        data = [
            {
                "stage": plan.stage,
                "candidates": [c.framework for c in plan.decision.candidates],
                "configs": [c.model_dump(mode="json") for c in plan.configs],
                "commands": [reproduce_command(c) for c in plan.configs],
                "estimates": [e.model_dump(mode="json") for e in plan.estimates],
                "repeats": plan.repeats,
                "capacity_configs": [c.model_dump(mode="json") for c in plan.capacity_configs],
                "capacity_commands": [reproduce_command(c) for c in plan.capacity_configs],
                "capacity_note": plan.capacity_note,
            }
            for plan in plans
        ]
        typer.echo(json.dumps({"quick": quick, "stages": data}, indent=2))
        return
    for plan in plans:
        for line in plan_text(plan, reproduce_command):
            typer.echo(line)


def _check_as_bench_run_would(plans: list[Any]) -> None:
    """Every printed configuration that reads a trace or prompt file through `bench run`'s own
    pre-run check (the files read, each row against the model's context window): a plan never
    prints such a command that `bench run` refuses (a prompt file's `output_tokens: 4096` on a
    4,096-token model was planned, then refused by the run)."""
    from bench.run.api import check_traffic_files

    for plan in plans:
        for config in [*plan.configs, *plan.capacity_configs]:
            if not _reads_a_file(config):  # a plan without files answers even when the model's
                continue  # config cannot be read (the tree needs no model size)
            try:
                check_traffic_files(config)
            except UserError as exc:
                raise UserError(f"stage {plan.stage}, {config.backend} run: {exc}") from None


def _reads_a_file(config: Any) -> bool:
    """The run replays a trace or sends a prompt file (what the pre-run check reads)."""
    return getattr(config.load, "trace", None) is not None or (
        getattr(config.workload, "prompt_file", None) is not None
    )


def plan_text(plan: Any, command_of: Any) -> list[str]:
    """`bench-plan`'s text for one stage: every step the answer asks for (the comparison runs
    with their repeats, then the capacity searches that size the fleet), each with its time and
    disk estimate and its command, and the plan's total."""
    candidates = ", ".join(c.framework for c in plan.decision.candidates)
    comparison_s = sum(e.total_s for e in plan.estimates)
    search_s = sum(e.total_s for e in plan.capacity_estimates)
    disk = sum(e.disk_bytes for e in [*plan.estimates, *plan.capacity_estimates])
    lines = [
        f"# stage {plan.stage}: candidates {candidates}",
        f"# the whole plan: about {(comparison_s + search_s) / 60:.1f} min, "
        f"{disk / 1e9:.1f} GB new disk ({len(plan.configs)} comparison run(s) x "
        f"{plan.repeats} repeat(s), {len(plan.capacity_configs)} capacity search(es))",
    ]
    if plan.note:
        lines.append(f"# note: {plan.note}")
    if plan.not_benchmarked:
        lines.append(f"# not benchmarked by this tool: {', '.join(plan.not_benchmarked)}")
    for number, (config, estimate) in enumerate(
        zip(plan.configs, plan.estimates, strict=True), start=1
    ):
        lines.append(
            f"# comparison {number}: {config.backend}, about {estimate.duration_s / 60:.1f} min "
            f"a run x {estimate.repeats} = {estimate.total_s / 60:.1f} min, "
            f"{estimate.disk_bytes / 1e9:.1f} GB new disk"
        )
        lines.append(
            command_of(config) + (f" --repeats {plan.repeats}" if plan.repeats > 1 else "")
        )
    if plan.capacity_note:
        lines.append(f"# capacity: {plan.capacity_note}")
    for number, (config, estimate) in enumerate(
        zip(plan.capacity_configs, plan.capacity_estimates, strict=True), start=1
    ):
        lines.append(
            f"# capacity search {number}: {config.backend} (sizes the fleet), about "
            f"{estimate.duration_s / 60:.1f} min, {estimate.disk_bytes / 1e9:.1f} GB new disk"
        )
        lines.append(command_of(config))
    return lines


_FLAG_NAMES = (
    "dynamic_control_flow",
    "fixed_input_shapes",
    "long_sequence_generation",
    "multi_backend",
    "determinism_required",
    "kind",
    "model",
    "parameters_b",
    "prompt_tokens",
    "output_tokens",
    "batch_size",
    "concurrency",
    "request_rate_rps",
    "ttft_ms",
    "tpot_ms",
    "e2e_ms",
    "objective",
    "gpu",
    "gpu_count",
    "gpu_memory_gb",
    "dtype",
    "quantization",
    "build_time_tolerance",
    "shared_prefix_tokens",
    "shared_prefix_count",
    "conversation_turns",
    "user_message_tokens",
    "trace_file",
    "prompt_file",
    "quality_result",
    "max_quality_loss_pct",
)


# --------------------------------------------------------------------------- text output


def _number(value: float | None, unit: str = "", digits: int = 3) -> str:
    return "unknown" if value is None else f"{value:.{digits}g}{unit}"


def _diagnostic_lines(diagnostics: list) -> list[str]:
    """Identical advice once per rule with the run count; each distinct finding once, with the
    ids of the runs it was seen on (a campaign's runs otherwise repeat one paragraph per run)."""
    from advisor.decide.diagnose import Diagnostic, group_identical

    lines = []
    typed = [Diagnostic.model_validate(d, from_attributes=True) for d in diagnostics]
    for group in group_identical(typed):
        count = len(group.run_ids)
        lines.append(
            f"Diagnostic [{group.severity}] {group.rule}, {count} run{'s' * (count != 1)}: "
            f"{group.advice}"
        )
        for finding in group.findings:
            lines.append(f"  - {finding.finding} ({', '.join(finding.run_ids)})")
    return lines


def format_text(report: Report) -> str:
    """The recommendation as plain text for a terminal."""
    lines = [f"{report.title}" + (f"  (for {report.owner})" if report.owner else "")]
    for stage in report.stages:
        rec = stage.recommendation
        est = stage.estimate
        lines += ["", f"== stage {stage.stage} ({stage.kind}) =="]
        marker = "" if rec.benchmarked else " (not benchmarked)"
        lines.append(
            f"Recommendation: {rec.framework}{marker}  [follows {rec.follows}; "
            f"confidence {rec.confidence.level}: {rec.confidence.why}]"
        )
        if rec.headline:
            lines.append(f"GPUs and cost: {rec.headline}")
        lines.append("Decision path:")
        for step in stage.decision.path:
            lines.append(f"  - {step.question} -> {step.answer}: {step.why}")
        lines.append(
            "Candidates: "
            + ", ".join(f"{c.rank}. {c.framework}" for c in stage.decision.candidates)
        )
        kv_text = (
            f"KV cache {_number(est.kv_cache_gb, ' GB')} ({est.context_tokens} tok x "
            f"{est.concurrency})"
            if stage.kind == "generate"
            else "no KV cache (forward kind)"
        )
        lines.append(
            f"Estimate: {est.model or 'model ?'} {est.parameters_label} params, "
            f"{est.precision}: weights {_number(est.weights_gb, ' GB')}, {kv_text}, "
            f"needs {_number(est.required_gb, ' GB')} of {_number(est.available_gb, ' GB')} -> "
            f"{est.fit_verdict}"
        )
        if est.decode_floor_ms_per_token is not None:
            lines.append(
                f"Physical floor: decode {est.decode_floor_ms_per_token:.2f} ms/token at batch 1 "
                f"({est.memory_bandwidth_tb_s} TB/s, {est.bandwidth_source}); prefill "
                f"{_number(est.prefill_floor_ms, ' ms')}"
            )
        if est.forward_floor_ms is not None:
            lines.append(f"Physical floor: {est.forward_floor_ms:.3f} ms per batch")
        for item in est.suggestions:
            lines.append(f"  suggestion: {item}")
        if stage.evidence:
            lines.append("Evidence (ranked):")
            for row in stage.evidence[:12]:
                lines.append(
                    f"  [{row.label}] {row.framework} on {row.gpu or 'cpu'}, {row.model}, "
                    f"{row.shape}: {row.status}, {row.objective_metric} "
                    f"{_number(row.objective_value)} x{row.repeats}"
                    + ("" if row.meets_slo is not False else " (misses SLO)")
                )
        else:
            lines.append("Evidence: none stored for this kind of workload yet.")
        lines += _configuration_lines(stage, report)
        for text in rec.contradictions:
            lines.append(f"Contradiction: {text}")
        for text in rec.unmeasured:
            lines.append(f"Not measured here: {text}")
        for caveat in rec.caveats:
            lines.append(f"Caveat: {caveat}")
        for alt in rec.alternatives:
            lines.append(f"Alternative {alt.framework}: {alt.why_not_first}")
        lines += _diagnostic_lines(stage.diagnostics)
        if stage.learned is not None:
            learned = stage.learned
            if learned.shown:
                lines.append(
                    f"Learned second opinion: {learned.prediction} ({learned.agrees_with}); CV "
                    f"accuracy {learned.cv_accuracy:.2f} [95% {learned.cv_accuracy_low:.2f}-"
                    f"{learned.cv_accuracy_high:.2f}] ({learned.cv_scheme}), baseline "
                    f"{learned.baseline_accuracy:.2f}, {learned.groups} groups / "
                    f"{learned.runs} runs"
                )
            else:
                lines.append(f"Learned second opinion: {learned.message}")
    return "\n".join(lines)


def _configuration_lines(stage: Any, report: Report) -> list[str]:
    """The configuration search: the recommended layout, the alternatives and the estimate's
    accuracy (every figure says whether it is measured or an estimate)."""
    search = stage.configurations
    if search is None or search.best() is None:
        return []
    best = search.best()
    lines = [
        f"Configuration: {best.label} on {best.deployment.gpus} GPU(s) "
        f"[{search.recommended_basis}] (of {len(search.estimates)} that fit; GPU budget "
        f"{search.gpu_budget})"
    ]
    for estimate in search.estimates[:6]:
        prediction = estimate.prediction
        measured = [m for m in estimate.measured if m.concurrency == search.concurrency]
        figures = (
            f"measured TPOT p50 {measured[0].measured_tpot_ms:.2f} ms, "
            f"{measured[0].measured_output_tok_s:,.0f} tok/s (predicted "
            f"{measured[0].predicted_tpot_ms or 0:.2f} ms, {measured[0].tpot_error or 0:+.0%})"
            if measured
            else f"estimate TPOT {prediction.tpot_ms:.2f} ms, "
            f"{prediction.output_throughput_tok_s:,.0f} tok/s"
            if prediction
            else "no estimate"
        )
        budget = "" if estimate.within_gpu_budget else " [beyond the GPU budget]"
        lines.append(
            f"  {estimate.label}{budget}: {estimate.weights_gb_per_gpu:.1f} GB weights + "
            f"{estimate.kv_cache_gb_per_gpu or 0:.1f} GB KV per GPU; {figures} at concurrency "
            f"{search.concurrency}; floor / step {estimate.efficiency or 0:.2f} "
            f"({estimate.efficiency_source})"
        )
    for text in search.trade_offs[:4]:
        lines.append(f"  trade-off: {text}")
    for text in search.notes:
        lines.append(f"  note: {text}")
    if report.calibration is not None and report.calibration.verdict:
        lines.append(f"Estimate accuracy: {report.calibration.verdict}")
    return lines


def _register_optional_commands() -> None:
    """Commands owned by other modules add themselves here (`report`: advisor/report/cli.py)."""
    try:
        from advisor.report.cli import register
    except ModuleNotFoundError as exc:  # only a missing report module, never a broken import
        if exc.name not in ("advisor.report", "advisor.report.cli"):
            raise
        return
    register(app)


_register_optional_commands()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; every user error is one line on stderr and exit
    code 2 (bench.cli_errors)."""
    return app(args=argv, standalone_mode=False)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
