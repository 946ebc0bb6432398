"""`python -m bench ...`: run benchmarks, summarise records, fingerprint the environment.

A stable surface documented in the README. Every user error (bad file, unknown backend, bad
option) prints one line to stderr and exits with code 2; nothing is written in that case.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bench.cli_errors import OneLineErrorsGroup
from bench.core.config import LOAD_CLASSES  # the pattern registry the --pattern help lists
from bench.core.errors import RunAborted, UserError
from bench.core.files import check_user_path
from bench.core.metric_catalog import metric as catalogue_metric

if TYPE_CHECKING:  # bench.storage.store pulls in SQLAlchemy; only its types are needed here
    from bench.core.progress import RunProgress
    from bench.storage.store import RunWriter

app = typer.Typer(
    cls=OneLineErrorsGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Benchmark inference engines with exact, reproducible metrics.",
    pretty_exceptions_enable=False,
)

StoreOption = Annotated[
    str | None,
    typer.Option(
        "--store",
        help="Results store: a SQLite file, sqlite:///path or postgresql://user@host:port/db "
        "(password from the URL or PGPASSWORD/~/.pgpass; default: $ADVISOR_STORE, else a "
        "SQLite file in the user data folder).",
    ),
]


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


@app.command()
def summarize(
    records: Annotated[Path, typer.Argument(help="JSONL file, one RequestRecord per line.")],
    slo_ttft_ms: Annotated[float | None, typer.Option(help="TTFT SLO (ms) for goodput.")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="TPOT SLO (ms) for goodput.")] = None,
    slo_e2e_ms: Annotated[float | None, typer.Option(help="E2E SLO (ms) for goodput.")] = None,
) -> None:
    """Summarise request records (TTFT, TPOT, ITL, E2E, throughput, goodput) as JSON."""
    from bench.core.config import SLO
    from bench.core.metrics import read_records_jsonl
    from bench.core.metrics import summarize as summarize_records

    slo = _build(
        SLO,
        {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms, "e2e_ms": slo_e2e_ms},
        names={"ttft_ms": "--slo-ttft-ms", "tpot_ms": "--slo-tpot-ms", "e2e_ms": "--slo-e2e-ms"},
    )
    read = read_records_jsonl(records)
    if not read:  # nothing to summarise: an empty file is not a run of zero requests
        raise UserError(f"records file {records} holds no request records")
    summary = summarize_records(read, slo if slo.is_set() else None)
    data = summary.model_dump(mode="json")
    if not slo.is_set():
        data.pop("goodput_rps", None)
    _print_json(data)


@app.command()
def env(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Environment fingerprint and read-only preflight (what would make a run unrepeatable)."""
    from bench.run.environment import fingerprint, preflight

    fp = fingerprint()
    items = preflight(fp)
    if as_json:
        findings = [item.model_dump() for item in items]
        _print_json({"fingerprint": fp.model_dump(mode="json"), "preflight": findings})
        return
    from rich.console import Console

    console = Console()
    names = ", ".join(gpu.name or "?" for gpu in fp.gpus)
    console.print(f"[bold]GPUs[/bold]: {names or 'none'}")
    for item in items:
        console.print(f"[{item.severity}] {item.what}: {item.why}")
        if item.admin_command:
            console.print(f"    admin could run: {item.admin_command}")


@app.command()
def backends(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List every backend: installed or not, version, and why not."""
    from dataclasses import asdict

    from bench.engines.backends import all_availability

    rows = all_availability()
    if as_json:
        _print_json([asdict(a) for a in rows])
        return
    for a in rows:
        mark = "yes" if a.available else "no "
        typer.echo(f"{a.name:14} {mark} {a.version or '-':12} {a.reason}")


def _set_path(data: dict, dotted: str, value: Any) -> None:
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise UserError(f"--option {dotted}: {part} is not a section")
    node[parts[-1]] = value


def _build(model_cls: Any, data: dict, names: dict[str, str] | None = None) -> Any:
    from bench.core.strict import validate

    return validate(model_cls, {k: v for k, v in data.items() if v is not None}, names=names)


# `bench run` options that set a RunConfig field: errors name the option the user typed.
RUN_FLAG_NAMES = {
    "backend": "--backend",
    "model": "--model",
    "load.concurrency": "--concurrency",
    "load.rate_rps": "--rate",
    "load.duration_s": "--duration-s",
    "load.max_requests": "--max-requests",
    "load.warmup_requests": "--warmup-requests",
    "slo.ttft_ms": "--slo-ttft-ms",
    "slo.tpot_ms": "--slo-tpot-ms",
    "slo.e2e_ms": "--slo-e2e-ms",
    "slo.percentile": "--slo-percentile",
    "precision.dtype": "--dtype",
    "device": "--device",
    "prefix_caching": "--prefix-caching",
    "workload.prompt_tokens.mean": "--prompt-tokens",
    "workload.output_tokens.mean": "--output-tokens",
}


def build_run_config(
    config_file: Path | None,
    backend: str | None,
    model: str | None,
    pattern: str | None,
    flags: dict[str, Any],
    engine_args: list[str],
    options: list[str],
) -> Any:
    """RunConfig from an optional YAML/JSON file, then flags, then `--option a.b=v` overrides."""
    from bench.core.config import RunConfig
    from bench.core.keyvalue import parse_pairs

    data: dict[str, Any] = {}
    if config_file is not None:
        from bench.core.files import load_user_mapping

        data = load_user_mapping(config_file, "run config")
    if backend:
        data["backend"] = backend
    if model:
        data["model"] = model
    load = data.setdefault("load", {})
    if pattern:
        if pattern not in LOAD_CLASSES:
            raise UserError(f"unknown pattern {pattern!r}; known: {', '.join(LOAD_CLASSES)}")
        if load.get("pattern") != pattern:
            data["load"] = load = {"pattern": pattern}
    load.setdefault("pattern", "concurrency")
    for dotted, value in flags.items():
        if value is not None:
            _set_path(data, dotted, value)
    data.setdefault("engine_args", {}).update(parse_pairs(engine_args, "--engine-arg"))
    option_pairs = parse_pairs(options, "--option")
    for dotted, value in option_pairs.items():
        _set_path(data, dotted, value)
    if isinstance(data.get("workload"), dict):
        data["workload"].setdefault("kind", "generate")
    given = {"backend": backend, "model": model, **flags}
    # A flag overrides the file, so an error at its path is about what was typed; --option and
    # --engine-arg paths are already as written. Without a file, a missing backend or model can
    # only be given as its flag.
    names = {
        path: RUN_FLAG_NAMES[path]
        for path, value in given.items()
        if (value is not None or (config_file is None and path in ("backend", "model")))
        and path not in option_pairs
    }
    from bench.core.strict import validate

    source = f"run config {config_file}" if config_file is not None else None
    return validate(RunConfig, data, source=source, names=names)


@app.command()
def run(
    backend: Annotated[
        str | None, typer.Option(help="Backend name (see `bench backends`).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Preset name or checkpoint path.")] = None,
    pattern: Annotated[
        str | None, typer.Option(help="Load pattern: " + " | ".join(LOAD_CLASSES))
    ] = None,
    concurrency: Annotated[int | None, typer.Option(help="concurrency pattern: in flight.")] = None,
    rate: Annotated[float | None, typer.Option(help="rate pattern: requests/s.")] = None,
    duration_s: Annotated[float | None, typer.Option(help="Measured duration (s).")] = None,
    max_requests: Annotated[int | None, typer.Option(help="Stop after N requests.")] = None,
    prompt_tokens: Annotated[int | None, typer.Option(help="Mean prompt length.")] = None,
    output_tokens: Annotated[int | None, typer.Option(help="Mean output length.")] = None,
    warmup_requests: Annotated[int | None, typer.Option(help="Warm-up requests.")] = None,
    slo_ttft_ms: Annotated[float | None, typer.Option(help="TTFT SLO (ms).")] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="TPOT SLO (ms).")] = None,
    slo_e2e_ms: Annotated[float | None, typer.Option(help="E2E SLO (ms).")] = None,
    slo_percentile: Annotated[
        str | None,
        typer.Option(
            help="p50 | p90 | p99 (default p99): the percentile the SLO limits are judged at "
            "(step ladder knee, capacity search)."
        ),
    ] = None,
    dtype: Annotated[str | None, typer.Option(help="float16 | bfloat16 | float32")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cuda | cpu")] = None,
    prefix_caching: Annotated[
        str | None,
        typer.Option(
            help="on | off: the engine's automatic prefix caching (vllm, openai with "
            "launch=vllm, tensorrt_llm); not given = the engine's default.",
        ),
    ] = None,
    engine_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--engine-arg",
            help="Framework option key=value (value read as JSON, else YAML: yes/no are "
            "booleans); repeatable.",
        ),
    ] = None,
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option", help="Any RunConfig field by dotted path, e.g. load.stage_duration_s=10."
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="RunConfig YAML/JSON file.")] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Write result.json + records.jsonl here (checked before the run; a folder used "
            "before gets this run's files, replacing the previous run's, as GuideLLM's "
            "--output-path does)."
        ),
    ] = None,
    store: StoreOption = None,
    no_store: Annotated[
        bool, typer.Option("--no-store", help="Do not write to the results store.")
    ] = False,
    prometheus_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve live run metrics on 127.0.0.1:PORT/metrics while the run lasts.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the RunResult JSON.")] = False,
    repeats: Annotated[
        int,
        typer.Option(help="Run the config N times as one measurement group (intervals)."),
    ] = 1,
    cooldown_s: Annotated[
        float, typer.Option(help="With --repeats: pause before each repeat after the first (s).")
    ] = 0.0,
    convergence_metric: Annotated[
        str | None,
        typer.Option(
            help="With --repeats: stop early once this metric's 95% interval is narrow enough "
            "(e.g. output_throughput_tok_s, ttft_ms_p50)."
        ),
    ] = None,
    convergence_width: Annotated[
        float,
        typer.Option(help="Convergence: interval width / median at most (0.05 = 5%)."),
    ] = 0.05,
) -> None:
    """Run a real benchmark: one backend, one model, one load pattern; stores the run.

    With --repeats N the config runs N times (a cooldown between) as one measurement group:
    the group's summary gives the median and a 95% interval of each metric."""
    from bench.run.api import check_runnable, launch
    from bench.storage.store import ResultStore

    flags = {
        "load.concurrency": concurrency,
        "load.rate_rps": rate,
        "load.duration_s": duration_s,
        "load.max_requests": max_requests,
        "load.warmup_requests": warmup_requests,
        "slo.ttft_ms": slo_ttft_ms,
        "slo.tpot_ms": slo_tpot_ms,
        "slo.e2e_ms": slo_e2e_ms,
        "slo.percentile": slo_percentile,
        "precision.dtype": dtype,
        "device": device,
        "prefix_caching": prefix_caching,
        "workload.prompt_tokens.mean": prompt_tokens,
        "workload.output_tokens.mean": output_tokens,
    }
    run_config = build_run_config(
        config, backend, model, pattern, flags, engine_arg or [], option or []
    )
    policy = None
    if repeats != 1 or convergence_metric is not None:
        from bench.core.config import RepeatPolicy
        from bench.orchestrate.repeats import check_policy

        policy = _build(
            RepeatPolicy,
            {
                "count": repeats,
                "cooldown_s": cooldown_s,
                "convergence_metric": convergence_metric,
                "convergence_width": convergence_width,
                "min_repeats": min(3, repeats) if repeats >= 2 else None,
            },
        )
        check_policy(policy)
    check_runnable(run_config)
    if out is not None:  # a name the OS can take; bench.run.api.launch checks it can be written
        out = check_user_path(out, "--out")
    result_store = None if no_store else ResultStore(store)
    if policy is not None:
        _run_group(run_config, policy, result_store, out, as_json, prometheus_port)
        return
    progress = _ProgressPrinter(enabled=not as_json)
    try:
        result = launch(
            run_config,
            store=result_store,
            out_dir=out,
            on_progress=progress,
            prometheus_port=prometheus_port,
        )
    finally:
        progress.close()
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
    else:
        _print_result(result)
    if result.status.value != "COMPLETED":
        raise typer.Exit(1)


def _run_group(
    config: Any,
    policy: Any,
    store: RunWriter | None,
    out: Path | None,
    as_json: bool,
    port: int | None,
) -> None:
    """`bench run --repeats N`: the runs one after another, then the group's summary."""
    from bench.orchestrate.repeats import launch_group

    progress = _ProgressPrinter(enabled=not as_json)
    try:
        outcome = launch_group(
            config, policy, store=store, out_dir=out, on_progress=progress, prometheus_port=port
        )
    finally:
        progress.close()
    if as_json:
        typer.echo(outcome.model_dump_json(indent=2))
    else:
        for result in outcome.runs:
            _print_result(result)
        typer.echo(f"group {outcome.group_id}: {len(outcome.runs)} run(s), {outcome.stopped}")
        if outcome.summary is not None:
            _print_group_summary(outcome.summary)
    if not outcome.runs or any(r.status.value != "COMPLETED" for r in outcome.runs):
        raise typer.Exit(1)


def _print_group_summary(summary: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{summary.repeats} repeat(s): median and 95% interval ({summary.method})")
    for column in ("metric", "median", "95% interval", "CV", "repeats"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for estimate in summary.metrics:
        interval = estimate.interval
        table.add_row(
            f"{estimate.label} ({estimate.unit})" + ("" if estimate.reliable else " *"),
            f"{estimate.value:.2f}",
            "-" if interval is None else f"[{interval.low:.2f}, {interval.high:.2f}]",
            "-" if estimate.cv is None else f"{estimate.cv:.1%}",
            ", ".join(f"{value:.2f}" for value in estimate.run_values),
        )
    console = Console()
    console.print(table)
    for note in summary.notes:
        console.print(f"* {note}" if "values: fewer" in note else f"note: {note}", soft_wrap=True)


@app.command()
def compare(
    a: Annotated[
        str, typer.Argument(help="Run id, group id, run folder, or campaign folder/file.")
    ],
    b: Annotated[str, typer.Argument(help="The same kind of thing as A.")],
    threshold: Annotated[
        float,
        typer.Option(help="Practical threshold: a verdict needs the whole interval beyond it."),
    ] = 0.05,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap draws per side.")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Compare two runs, two measurement groups or two campaigns: per metric the ratio A/B with
    its 95% interval and whether it is significant; for campaigns, every flipped winner and
    moved ratio."""
    from bench.orchestrate.compare import check_options, render
    from bench.orchestrate.compare import compare as compare_sides

    check_options(threshold, bootstrap, seed)
    opened = None
    if not (Path(a).exists() and Path(b).exists()):
        from bench.storage.store import ResultStore

        # A comparison only reads: a missing store is an error, never created.
        opened = ResultStore(store, create=False)
    try:
        report = compare_sides(a, b, opened, threshold, bootstrap, seed)
    finally:
        if opened is not None:
            opened.close()
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    from rich.console import Console

    render(report, Console())


class _ProgressPrinter:
    """rich progress bar fed by the run's progress events."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.bar = None
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[info]}"),
                TimeElapsedColumn(),
                transient=True,
            )
            self.task = self.bar.add_task("starting", total=None, info="")
            self.bar.start()

    def __call__(self, p: RunProgress) -> None:
        if not self.bar:
            return
        desc = p.phase or p.stage
        total = p.phase_duration_s
        done = p.phase_elapsed_s
        info = f"{p.completed} ok, {p.failed or 0} failed" if p.counts_requests else ""
        self.bar.update(self.task, description=str(desc), total=total, completed=done, info=info)

    def close(self) -> None:
        if self.bar:
            self.bar.stop()


def _figure(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _print_forward_summary(result: Any) -> None:
    """A forward run's figures in its own units (bench.core.forward_view): samples/s, batches/s,
    the latency of a batch, GPU time per million samples; never tokens generated."""
    from bench.core.forward_view import forward_summary_lines

    for line in forward_summary_lines(result):
        typer.echo(f"  {line}")


def _print_result(result: Any) -> None:
    s = result.summary
    typer.echo(
        f"run {result.run_id}: {result.status.value}"
        f" ({result.validity.status.value if result.validity else '-'})"
    )
    if result.failure:
        typer.echo(f"  failure: {result.failure.cause}")
        if result.failure.advice:
            typer.echo(f"  advice: {result.failure.advice}")
    if result.validity and result.validity.reasons:
        typer.echo(f"  validity: {'; '.join(result.validity.reasons)}")
    for note in result.validity.notes if result.validity else []:
        typer.echo(f"  validity note: {note}")
    config = result.config
    typer.echo(f"  {config.parallelism.label()}, {config.precision.label()}")
    for caveat in result.caveats:
        typer.echo(f"  caveat: {caveat}")
    if config.load.capacity_search:  # the search's answer first; run-wide figures mix probes
        from bench.core.pattern_reports import CapacityReport
        from bench.run.load.capacity import capacity_probe_lines, capacity_summary_line

        typer.echo(f"  {capacity_summary_line(result.pattern_report)}")
        if isinstance(result.pattern_report, CapacityReport) and result.pattern_report.settle_rule:
            typer.echo(f"    probes settled: {result.pattern_report.settle_rule}")
        for line in capacity_probe_lines(result.pattern_report):
            typer.echo(f"    {line}")
    if s and config.workload.kind == "forward":
        _print_forward_summary(result)
    elif s:
        rate, output, per_user, per_gpu_metric, tpot = (
            catalogue_metric(name)
            for name in (
                "request_throughput_rps",
                "output_throughput_tok_s",
                "tok_s_per_user",
                "output_throughput_tok_s_per_gpu",
                "tpot_ms_p50",
            )
        )
        typer.echo(
            f"  requests {s.successful}/{s.requests}"
            + (f" ({s.cancelled} cancelled by the harness)" if s.cancelled else "")
            + f" in {s.duration_s:.1f} s: "
            f"{s.request_throughput_rps:.2f} {rate.unit}, "
            f"{s.output_throughput_tok_s:.1f} output {output.unit}"
        )
        per_gpu = s.output_throughput_tok_s_per_gpu
        if s.tok_s_per_user is not None or per_gpu is not None:
            typer.echo(
                f"  {per_user.label} {_figure(s.tok_s_per_user)} (1000 / {tpot.label}), "
                f"{per_gpu_metric.label} {_figure(per_gpu)}"
            )
        for replica in result.replicas:
            part = replica.summary
            figures = (
                f"{part.successful} requests, {part.output_throughput_tok_s:.1f} output tok/s"
                if part
                else "no requests"
            )
            where = (
                f" on GPU {replica.cuda_visible_devices}" if replica.cuda_visible_devices else ""
            )
            typer.echo(f"  replica {replica.replica}{where}: {replica.status.value}, {figures}")
        from bench.core.metrics import min_samples

        for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            p = getattr(s, name)
            if p:
                # A percentile from fewer values than the rule asks is starred, not passed off
                # as that percentile (the validity note above says why).
                cells = [
                    f"{value:9.2f}" if p.count is None or p.count >= min_samples(q) else
                    f"{value:8.2f}*"
                    for q, value in ((0.5, p.p50), (0.9, p.p90), (0.99, p.p99))
                ]  # fmt: skip
                typer.echo(
                    f"  {name:8} mean {p.mean:9.2f}  p50 {cells[0]}  p90 {cells[1]}  p99 {cells[2]}"
                )
    t = result.telemetry
    if t.peak_gpu_memory_gb is not None:
        typer.echo(f"  peak GPU memory {t.peak_gpu_memory_gb:.2f} GB")
        if t.energy_per_output_token_j is not None and config.workload.kind == "generate":
            typer.echo(f"  energy {t.energy_j:.0f} J over all GPUs: "
                       f"{t.energy_per_output_token_j:.4f} J per output token")  # fmt: skip
        for gpu in t.per_gpu:
            typer.echo(
                f"  GPU {gpu.index}: utilisation {_figure(gpu.mean_utilization_pct)} %, "
                f"peak memory {_figure(gpu.peak_memory_used_gb)} GB, "
                f"power {_figure(gpu.mean_power_w)} W, energy {_figure(gpu.energy_j)} J"
            )
    elif t.reason:
        typer.echo(f"  GPU telemetry: {t.reason}")


@app.command()
def campaign(
    plan: Annotated[Path, typer.Argument(help="Campaign plan (YAML): name, description, steps.")],
    out: Annotated[Path, typer.Option(help="Folder for campaign.json, step outcomes, runs.")],
    budget_s: Annotated[
        float | None,
        typer.Option(help="Start no step whose estimate would take the campaign past this (s)."),
    ] = None,
    executor: Annotated[
        str,
        typer.Option(
            help="Where steps run: local (this host, in plan order) or ray (a Ray cluster: "
            "independent steps at once, each on a node with the GPUs, GPU type and CPUs it asks "
            "for; outcomes gathered into one campaign result)."
        ),
    ] = "local",
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster to join with --executor ray (default: $RAY_ADDRESS; none = start "
            "a local Ray instance for this command and stop it at the end)."
        ),
    ] = None,
    store: Annotated[
        str | None, typer.Option(help="Results store for the runs (default: OUT/results.sqlite).")
    ] = None,
    rehearse_on_cpu: Annotated[
        bool,
        typer.Option(
            "--rehearse-on-cpu",
            help="Run the plan's steps on this CPU with a tiny model, short stages and low "
            "concurrency (TP=1, no FP8), to check a GPU plan end to end before a GPU runs it; "
            "its figures are CPU figures, not the plan's.",
        ),
    ] = False,
) -> None:
    """Run a campaign plan: benchmark runs, fidelity checks and advisor plans, resumable."""
    from bench.orchestrate.campaign import RichReporter, load_plan, run_campaign
    from bench.orchestrate.executor_registry import open_executor
    from bench.orchestrate.executors import parse_settings
    from bench.orchestrate.rehearsal import rehearsal_plan
    from bench.storage.store_url import redact_urls

    campaign_plan = load_plan(plan)
    plan_text = None
    if rehearse_on_cpu:
        import yaml

        campaign_plan = rehearsal_plan(campaign_plan)
        # Every field written (no defaults left out): the discriminating `kind` of each step
        # has a default, and the file must load back as exactly this plan.
        plan_text = yaml.safe_dump(campaign_plan.model_dump(mode="json"), sort_keys=False)
    if budget_s is not None and not (math.isfinite(budget_s) and budget_s > 0):
        raise UserError(f"--budget-s must be a number of seconds > 0, got {budget_s}")
    check_user_path(out, "--out")
    if executor == "ray":
        ray_address = ray_address or os.environ.get("RAY_ADDRESS") or None
    chosen = open_executor(parse_settings(executor, ray_address))
    # The command as given, rebuilt from the options (sys.argv is not this command when main()
    # is called with an argument list).
    command = ["python", "-m", "bench", "campaign", str(plan), "--out", str(out)]
    if budget_s is not None:
        command += ["--budget-s", f"{budget_s:g}"]
    if executor != "local":
        command += ["--executor", executor]
        command += ["--ray-address", ray_address] if ray_address else []
    if store:
        command += ["--store", store]
    if rehearse_on_cpu:
        command += ["--rehearse-on-cpu"]
    reporter = RichReporter()
    try:
        result = run_campaign(
            campaign_plan,
            out,
            chosen,
            budget_s=budget_s,
            plan_file=plan,
            store=store,
            reporter=reporter,
            # Written into campaign.json: a --store URL's password must not be.
            command=redact_urls(shlex.join(command)),
            plan_text=plan_text,
        )
    finally:
        reporter.close()
        chosen.close()
    ran = len(result.steps) - len(result.resumed)
    typer.echo(
        f"campaign {campaign_plan.name}: {ran} step(s) run, {len(result.resumed)} already done, "
        f"{len(result.failed)} failed, {len(result.skipped)} skipped in {result.wall_s:.0f} s; "
        f"{Path(out) / 'campaign.json'}"
    )
    if result.skipped:
        typer.echo(f"skipped (budget): {', '.join(s.name for s in result.skipped)}")
    for run in result.failed_runs:
        cause = run.failure.cause if run.failure else run.status.value
        typer.echo(f"run {run.run_id} ({run.config.label or run.config.backend}): {cause}")
    if result.failed or result.failed_runs:
        raise typer.Exit(1)


@app.command()
def fidelity(
    engine: Annotated[
        str,
        typer.Option(
            help="vllm | pytorch | vllm-bench-serve (this harness's openai client against vLLM's "
            "own `vllm bench serve` on one vllm serve; needs --out)"
        ),
    ],
    model: Annotated[str, typer.Option(help="Preset name or checkpoint path.")],
    option: Annotated[
        list[str] | None,
        typer.Option(
            "--option",
            help="Any field of the check, key=value (JSON values allowed), e.g. pairs=20, "
            'mode=launch, requests=1024, engine_args={"gpu_memory_utilization": 0.85}.',
        ),
    ] = None,
    dtype: Annotated[str | None, typer.Option(help="float16 | bfloat16 | float32")] = None,
    device: Annotated[str | None, typer.Option(help="auto | cuda | cpu")] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Write fidelity.json and the backend's run folders here (checked before the "
            "check runs; a folder used before gets this check's files, replacing the previous "
            "ones, as GuideLLM's --output-path does)."
        ),
    ] = None,
    store: StoreOption = None,
    no_store: Annotated[
        bool, typer.Option("--no-store", help="Do not write runs to the results store.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the FidelityResult JSON.")] = False,
) -> None:
    """Run one fidelity check: a backend vs the engine's own API on the same prompts."""
    from bench.core.keyvalue import parse_pairs
    from bench.orchestrate.client_fidelity import ClientFidelityCheck
    from bench.orchestrate.fidelity import CHECKS, run_check
    from bench.storage.store import ResultStore

    check_model = {**CHECKS, "vllm-bench-serve": ClientFidelityCheck}.get(engine)
    if check_model is None:
        known = ", ".join([*CHECKS, "vllm-bench-serve"])
        raise UserError(f"unknown engine {engine!r}; known: {known}")
    data = {"engine": engine, "model": model, "dtype": dtype, "device": device}
    option_pairs = parse_pairs(option or [], "--option")
    names = {name: f"--{name}" for name in ("model", "dtype", "device") if data.get(name)}
    names = {name: flag for name, flag in names.items() if name not in option_pairs}
    data.update(option_pairs)
    check = _build(check_model, data, names=names)
    if out is not None:
        out = check_user_path(out, "--out")
    if out is not None and out.exists() and not out.is_dir():
        raise UserError(f"--out {out} exists and is not a folder")
    if isinstance(check, ClientFidelityCheck):
        _client_fidelity(check, out, as_json)
        return
    result = run_check(check, None if no_store else ResultStore(store), out)  # checks --out first
    if out is not None:
        from bench.core.outputs import os_reason, write_atomic

        try:
            write_atomic(out / "fidelity.json", result.model_dump_json(indent=1))
        except OSError as error:
            raise RunAborted(
                f"cannot write {out / 'fidelity.json'} ({os_reason(error)}); the check's runs "
                "are in the results store"
            ) from None
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        return
    ratio = f"{result.ratio:.3f}" if result.ratio is not None else "n/a"
    reference = result.reference_output_throughput_tok_s
    ours = result.backend_output_throughput_tok_s
    unit = result.metric_of("backend_output_throughput_tok_s").unit
    typer.echo(
        f"{engine} fidelity on {model}: backend {ours or 0:,.0f} {unit}, engine's own API "
        f"{reference or 0:,.0f} {unit}, ratio {ratio} "
        f"({'pass' if result.passed else 'below'} at {check.required_ratio:g})"
    )
    for index, pair in enumerate(result.pairs):
        typer.echo(
            f"  pair {index + 1} ({'plain first' if pair.plain_first else 'backend first'}): "
            f"backend {pair.backend_output_throughput_tok_s:,.0f}, plain "
            f"{pair.plain_output_throughput_tok_s:,.0f} {unit}, ratio {pair.ratio:.3f}"
        )


def _client_fidelity(check: Any, out: Path | None, as_json: bool) -> None:
    """`bench fidelity --engine vllm-bench-serve`: both clients on one server (its files in
    --out: every run, vLLM's result files, the server log, client-fidelity.json)."""
    import shlex
    import sys

    from bench.orchestrate.client_fidelity import run_client_fidelity

    if out is None:
        raise UserError(
            "--engine vllm-bench-serve needs --out (its runs and vLLM's files go there)"
        )
    command = "python -m bench " + " ".join(shlex.quote(arg) for arg in sys.argv[1:])
    result = run_client_fidelity(check, out, command)
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        return
    for level in result.levels:
        cells = [
            f"{metric.metric} {metric.median_ratio:.3f} [{metric.min_ratio:.3f}-"
            f"{metric.max_ratio:.3f}] {metric.verdict}"
            for metric in level.metrics
        ]
        typer.echo(f"concurrency {level.level}: " + "; ".join(cells))
    typer.echo(
        f"ours / vllm bench serve, {check.repeats} repeats per level; {out}/client-fidelity.json"
    )


@app.command("capacity-check")
def capacity_check(
    results: Annotated[
        list[Path], typer.Argument(help="result.json files or folders holding them.")
    ],
    plan_out: Annotated[
        Path | None,
        typer.Option(help="Write the constant-rate check runs of every search as a campaign plan."),
    ] = None,
    name: Annotated[str, typer.Option(help="The written plan's name.")] = "capacity-checks",
) -> None:
    """Check capacity searches by plain constant-rate runs: write the plan (--plan-out), or
    judge the check runs found among RESULTS against their searches."""
    import yaml

    from bench.core.outputs import write_atomic
    from bench.orchestrate.capacity_check import check_plan, checks_of, read_results, searches_among

    loaded = read_results([check_user_path(p, "results") for p in results])
    searches = searches_among(loaded)
    if not searches:
        raise UserError("no finished rate capacity search among the results")
    if plan_out is not None:
        plan = check_plan(searches, name)
        text = yaml.safe_dump(plan.model_dump(mode="json"), sort_keys=False, width=100)
        write_atomic(plan_out, text)
        typer.echo(f"{len(plan.steps)} check runs of {len(searches)} searches -> {plan_out}")
        return
    for search in searches:
        checks = checks_of(search, loaded)
        report_line = (
            f"{search.run_id} {search.config.backend}: capacity {checks[0].capacity_rps:.3g} req/s"
            if checks
            else f"{search.run_id} {search.config.backend}: no check runs found"
        )
        typer.echo(report_line)
        for check in checks:
            verdict = "holds" if check.holds else "fails"
            mark = "as expected" if check.as_expected else f"NOT as expected ({check.expected})"
            why = f" ({'; '.join(check.reasons)})" if check.reasons else ""
            typer.echo(
                f"  x{check.factor:g} {check.rate_rps:.3g} req/s, {check.requests} requests: "
                f"{verdict}, {mark}{why}"
            )


@app.command()
def calibrate(
    backend: Annotated[
        str | None, typer.Option(help="Backend name (see `bench backends`).")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Preset name or checkpoint path.")] = None,
    check: Annotated[
        str | None,
        typer.Option(
            help="Re-measure a few ladder levels of this stored calibration (id) and say whether "
            "it still holds (exit 0) or not (exit 1); --engine-arg overrides its options."
        ),
    ] = None,
    tolerance: Annotated[
        float, typer.Option(min=0.01, max=10, help="--check: allowed |ratio - 1| per figure.")
    ] = 0.2,
    device: Annotated[str, typer.Option(help="auto | cuda | cpu")] = "auto",
    dtype: Annotated[str | None, typer.Option(help="float16 | bfloat16 | float32")] = None,
    engine_arg: Annotated[
        list[str] | None,
        typer.Option("--engine-arg", help="Framework option key=value; repeatable."),
    ] = None,
    mix: Annotated[
        list[str] | None,
        typer.Option(
            help="Ladder mix PROMPTxOUTPUT tokens (repeatable; default 512x128, "
            "128x512, 2048x128); the first also gets the settled levels."
        ),
    ] = None,
    ladder: Annotated[str, typer.Option(help="Ladder concurrencies.")] = "1,8,32,128",
    stage_duration_s: Annotated[float, typer.Option(help="Seconds per ladder stage.")] = 10.0,
    settled_probes: Annotated[
        int, typer.Option(help="Settled rate levels at most (0 = ladder only).")
    ] = 5,
    slo_ttft_ms: Annotated[
        float | None, typer.Option(help="TTFT SLO (ms) whose knee the settled levels find.")
    ] = None,
    slo_tpot_ms: Annotated[float | None, typer.Option(help="TPOT SLO (ms).")] = None,
    slo_e2e_ms: Annotated[float | None, typer.Option(help="E2E SLO (ms).")] = None,
    settle_s: Annotated[
        float | None,
        typer.Option(
            help="Seconds of arrivals before a settled level is judged (default: twice the "
            "end-to-end time the SLO allows, at least 2 s)."
        ),
    ] = None,
    level_duration_s: Annotated[float, typer.Option(help="Judged seconds per level.")] = 15.0,
    budget_s: Annotated[
        float, typer.Option(help="Time budget in seconds (at most 600); runs past it are skipped.")
    ] = 600.0,
    out: Annotated[Path | None, typer.Option(help="Also write the record as JSON here.")] = None,
    store: StoreOption = None,
    no_store: Annotated[
        bool, typer.Option("--no-store", help="Do not write runs or the record to the store.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the record JSON.")] = False,
) -> None:
    """Measure the engine model's calibration on this machine: a concurrency ladder over a few
    prompt/output mixes, then settled rate levels near the knee (docs/calibration.md)."""
    if check is not None:
        _calibrate_check(check, store, engine_arg or [], tolerance, budget_s, as_json)
        return
    if backend is None or model is None:
        raise UserError("bench calibrate needs --backend and --model (or --check ID)")
    from bench.core.keyvalue import parse_pairs
    from bench.orchestrate.calibrate import (
        CalibrationPlan,
        ladder_config,
        parse_mix,
        parse_numbers,
        run_calibration,
    )
    from bench.run.api import check_runnable, launch
    from bench.storage.store import ResultStore

    data: dict[str, Any] = {
        "backend": backend,
        "model": model,
        "device": device,
        "engine_args": parse_pairs(engine_arg or [], "--engine-arg"),
        "ladder": parse_numbers(ladder, "--ladder", int),
        "stage_duration_s": stage_duration_s,
        "settled_probes": settled_probes,
        "settle_s": settle_s,
        "level_duration_s": level_duration_s,
        "budget_s": budget_s,
    }
    if mix:
        data["mixes"] = [parse_mix(m) for m in mix]
    if dtype is not None:
        data["precision"] = {"dtype": dtype}
    slo = {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms, "e2e_ms": slo_e2e_ms}
    if any(value is not None for value in slo.values()):
        data["slo"] = {key: value for key, value in slo.items() if value is not None}
    plan = _build(
        CalibrationPlan,
        data,
        names={
            "budget_s": "--budget-s",
            "device": "--device",
            "precision.dtype": "--dtype",
            "settled_probes": "--settled-probes",
            "slo.ttft_ms": "--slo-ttft-ms",
            "slo.tpot_ms": "--slo-tpot-ms",
            "slo.e2e_ms": "--slo-e2e-ms",
        },
    )
    check_runnable(ladder_config(plan, plan.mixes[0]))  # backend, model, options: before any run
    if out is not None:
        out = check_user_path(out, "--out")
    result_store = None if no_store else ResultStore(store)

    record = run_calibration(
        plan, launch, store=result_store, on_progress=_Throttled(_calibrate_progress)
    )
    if result_store is not None:
        from bench.storage.calibrations import put_calibration

        put_calibration(result_store, record)
    if out is not None:
        out.write_text(record.model_dump_json(indent=2), encoding="utf-8")
    if as_json:
        typer.echo(record.model_dump_json(indent=2))
        return
    settled_count = len(record.settled_levels)
    typer.echo(
        f"calibration {record.calibration_id}: {record.engine} on {record.device_type}, "
        f"{record.precision_class}; {len(record.levels)} levels ({settled_count} settled) from "
        f"{len(record.run_ids)} runs in {record.elapsed_s:.0f} s"
    )
    for note in record.notes:
        typer.echo(f"  note: {note}")


def _calibrate_progress(progress: Any) -> None:
    run = progress.run
    if run is None or (run.stage not in ("loading", "done") and run.phase is None):
        return
    typer.echo(
        f"[{progress.step}/{progress.steps_total}] {progress.what}: {run.phase or run.stage}; "
        f"{progress.elapsed_s:.0f} s of ~{progress.estimated_total_s:.0f} s",
        err=True,
    )


def _calibrate_check(
    calibration_id: str,
    store: str | None,
    engine_args: list[str],
    tolerance: float,
    budget_s: float,
    as_json: bool,
) -> None:
    """`bench calibrate --check ID`: one verdict line; exit 1 when the calibration no longer
    holds."""
    from bench.core.keyvalue import parse_pairs
    from bench.orchestrate.calibrate import ladder_config
    from bench.orchestrate.calibrate_check import check_plan, run_check
    from bench.run.api import check_runnable, launch
    from bench.storage.calibrations import get_calibration
    from bench.storage.store import ResultStore

    result_store = ResultStore(store, create=False)
    record = get_calibration(result_store, calibration_id)
    overrides = parse_pairs(engine_args, "--engine-arg")
    plan = check_plan(record, overrides, budget_s)
    check_runnable(ladder_config(plan, plan.mixes[0]))
    verdict = run_check(
        record,
        launch,
        store=result_store,
        on_progress=_Throttled(_calibrate_progress),
        tolerance=tolerance,
        engine_args=overrides,
        budget_s=budget_s,
    )
    typer.echo(verdict.model_dump_json(indent=2) if as_json else verdict.verdict)
    if not verdict.holds:
        raise typer.Exit(1)


class _Throttled:
    """Calls `show` when the step or the phase changes, else at most every 10 s."""

    def __init__(self, show: Any, every_s: float = 10.0) -> None:
        self.show, self.every_s = show, every_s
        self.last_key: tuple | None = None
        self.last_at = 0.0

    def __call__(self, progress: Any) -> None:
        import time

        run = progress.run
        key = (progress.step, run.phase if run else None, run.stage if run else None)
        now = time.monotonic()
        if key != self.last_key or now - self.last_at >= self.every_s:
            self.last_key, self.last_at = key, now
            self.show(progress)


@app.command()
def runs(
    store: StoreOption = None,
    backend: Annotated[str | None, typer.Option(help="Filter by backend.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1_000_000, help="At most this many.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List stored runs: id, status, validity (VALID / INVALID), backend, model, pattern."""
    from bench.storage.store import ResultStore

    rows = ResultStore(store, create=False).list_runs(backend=backend, limit=limit)
    if as_json:
        _print_json([r.model_dump(mode="json", exclude={"telemetry": {"samples"}}) for r in rows])
        return
    from bench.core.forward_view import headline_throughput
    from bench.core.prediction import drift_words

    for r in rows:
        thr = headline_throughput(r)
        # A COMPLETED run may still be INVALID (too short, too few requests): say which.
        validity = r.validity.status.value if r.validity else "-"
        drift = drift_words(r.drift())  # outside the interval the advisor predicted for it
        typer.echo(
            f"{r.run_id}  {r.status.value:9} {validity:7} {r.config.backend:13} "
            f"{r.config.model:14} {r.config.load.pattern:11} {thr}"
            + (f"  {drift}" if drift else "")
        )


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="Run id (see `bench runs`).")],
    store: StoreOption = None,
) -> None:
    """Print one stored run as JSON."""
    from bench.storage.store import ResultStore

    typer.echo(ResultStore(store, create=False).get_run(run_id).model_dump_json(indent=2))


store_app = typer.Typer(
    no_args_is_help=True, help="Inspect a results store; copy runs between stores."
)
app.add_typer(store_app, name="store")


@store_app.command("info")
def store_info(
    store: StoreOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Which store this is (password masked), its schema version (upgraded on open), counts."""
    from bench.storage.store import ResultStore

    with ResultStore(store, create=False) as opened:
        info = opened.info()
    if as_json:
        _print_json(info.model_dump())
        return
    typer.echo(
        f"{info.backend} store {info.location}: schema {info.schema_version}, "
        f"{info.runs} runs, {info.jobs} jobs"
    )


@store_app.command("copy")
def store_copy(
    source: Annotated[str, typer.Argument(help="Store to read: path, sqlite:/// or postgresql://")],
    destination: Annotated[
        str, typer.Argument(help="Store to write (created or upgraded if needed).")
    ],
) -> None:
    """Copy finished runs with their records and telemetry; copying again duplicates nothing."""
    from bench.storage.store import ResultStore
    from bench.storage.store_copy import copy_runs

    with ResultStore(source, create=False) as reader, ResultStore(destination) as writer:
        report = copy_runs(reader, writer)
        unreadable = f", {len(report.skipped)} unreadable skipped" if report.skipped else ""
        typer.echo(
            f"{report.copied} runs copied, {report.updated} replaced, {report.unchanged} already "
            f"there, {report.unfinished} unfinished left out{unreadable}; {report.records} "
            f"records ({reader.display} -> {writer.display})"
        )
        for row in report.skipped:
            typer.echo(f"skipped {row.run_id} ({row.status}): {row.reason}", err=True)
    if report.skipped:  # not everything was copied: a script must not treat the source as moved
        raise typer.Exit(1)


@app.command()
def quality(
    model: Annotated[str, typer.Option(help="Preset name or local checkpoint path.")],
    precision: Annotated[
        list[str],
        typer.Option(
            "--precision",
            help="fp32 | bf16 | fp16 | fp8 | fp8-kv | int8; repeatable, the first is the "
            "baseline every other is compared with.",
        ),
    ],
    out: Annotated[Path, typer.Option(help="Folder for quality.json (the QualityResult).")],
    text: Annotated[
        Path | None,
        typer.Option(
            "--text",
            help="UTF-8 text file: perplexity (causal LMs), or one example per line "
            "(classifiers: top-1 agreement and max abs logit difference vs the baseline).",
        ),
    ] = None,
    labelled: Annotated[
        Path | None,
        typer.Option(
            "--labelled",
            help="JSONL, one {prompt, answer[, choices]} per line: accuracy (exact match, or the "
            "log-likelihood pick among choices; for a classifier the answer is a label).",
        ),
    ] = None,
    engine: Annotated[
        str,
        typer.Option(
            help="pytorch | vllm | openai | onnxruntime: the engine that scores (classifiers: "
            "pytorch or onnxruntime)."
        ),
    ] = "pytorch",
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            "--endpoint",
            help="openai engine: PRECISION=URL of the server running that precision "
            "(e.g. bf16=http://127.0.0.1:8000/v1); repeatable.",
        ),
    ] = None,
    tokenizer: Annotated[
        Path | None, typer.Option(help="Tokenizer folder (default: the checkpoint's).")
    ] = None,
    window: Annotated[int, typer.Option(help="Tokens per perplexity window.")] = 256,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap draws.")] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the QualityResult JSON.")] = False,
) -> None:
    """Quality per precision: perplexity and accuracy (classifiers: top-1 agreement and max abs
    logit difference) with 95% bootstrap intervals, and each precision's delta vs the first
    (indistinguishable when the interval covers 0). A precision that cannot run is written as
    "not run" with the reason; exit code 1 when none ran."""
    from bench.core.limits import check_bootstrap_and_seed
    from bench.core.outputs import prepare_out_dir, write_atomic
    from bench.core.quality import check_precision, dumps, read_labelled_file, read_text_file
    from bench.engines.scoring import check_engine
    from bench.run.quality import evaluate

    check_engine(engine)
    check_bootstrap_and_seed(bootstrap, seed)  # the rule bench compare reads
    for name in precision:
        check_precision(name)
    endpoints: dict[str, str] = {}
    for item in endpoint or []:
        name, sep, url = item.partition("=")
        if not sep or not url:
            raise UserError(f"--endpoint {item!r}: expected PRECISION=URL")
        endpoints[check_precision(name)] = url
    if endpoints and engine != "openai":
        raise UserError("--endpoint is for --engine openai")
    if engine == "openai" and not endpoints:  # refused before any file is read or model loaded
        # (with some endpoints given, a precision without one is written as "not run")
        raise UserError(
            "--engine openai scores through running servers: give --endpoint PRECISION=URL for "
            + ", ".join(precision)
        )
    if text is None and labelled is None:
        raise UserError("give --text FILE or --labelled FILE.jsonl (or both)")
    text_value = read_text_file(str(text)) if text is not None else None
    items = read_labelled_file(str(labelled)) if labelled is not None else None
    out_dir = prepare_out_dir(check_user_path(out, "--out"))
    result = evaluate(
        model,
        precision,
        text=text_value,
        items=items,
        text_file=str(text) if text is not None else None,
        labelled_file=str(labelled) if labelled is not None else None,
        engine=engine,
        tokenizer_dir=str(tokenizer) if tokenizer is not None else None,
        window=window,
        endpoints=endpoints,
        bootstrap=bootstrap,
        seed=seed,
        command=shlex.join(["python", "-m", "bench", *sys.argv[1:]]),
        on_progress=None if as_json else (lambda line: typer.echo(line, err=True)),
    )
    write_atomic(out_dir / "quality.json", dumps(result))
    if as_json:
        typer.echo(dumps(result), nl=False)
        if not any(row.status == "measured" for row in result.precisions):
            raise typer.Exit(1)
        return
    typer.echo(f"{result.model} on {result.engine}, baseline {result.baseline} ({result.method})")
    for row in result.precisions:
        typer.echo(f"  {row.precision:7} {row.summary()}")
    typer.echo(f"wrote {out_dir / 'quality.json'}")
    if not any(row.status == "measured" for row in result.precisions):
        raise typer.Exit(1)  # the file says why each one was not run


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; every user error is one line on stderr and exit
    code 2, a run stopped by a signal or a failing store one line and its own code
    (bench.cli_errors)."""
    return app(args=argv, standalone_mode=False)
