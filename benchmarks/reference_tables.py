"""Markdown tables of measured reference files (for the README), computed, never typed in.

    python benchmarks/reference_tables.py data/reference/h200_2026-11-29_runs.json \
        data/reference/h200_2026-11-29_s2_runs.json data/reference/h200_2026-11-29_s3_runs.json \
        data/reference/h200_2026-11-30_s4_runs.json data/reference/h200_2026-11-30_s4b_runs.json \
        --campaigns data/reference/h200_2026-11-29 data/reference/h200_2026-11-29_s2 \
        data/reference/h200_2026-11-29_s3 data/reference/h200_2026-11-30_s4 \
        data/reference/h200_2026-11-30_s4b
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def fmt(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def short_uuid(uuid: str) -> str:
    """The first 8 hex digits of an NVML GPU UUID: enough to tell the lent machines apart."""
    return uuid.removeprefix("GPU-")[:8]


def gpu_tag(run: dict) -> str:
    """Short id of the GPU a run used (its NVML UUID): runs of different lent machines differ."""
    gpus = run["environment"].get("gpus") or []
    return short_uuid(gpus[0]["uuid"]) if gpus else "-"


def is_ladder(run: dict) -> bool:
    """An LLM serving ladder (not a fidelity check or an advisor quick-plan run)."""
    label = run["config"]["label"]
    return (
        run["config"]["workload"]["kind"] == "generate"
        and "fidelity" not in label
        and not label.startswith("advisor")
    )


def llm_table(runs: list[dict]) -> str:
    lines = [
        "| model | backend | GPU | concurrency | req/s | output tok/s | TTFT p50 / p99 ms "
        "| TPOT p50 ms | E2E p99 ms | errors |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    order = ("vllm", "openai", "torch_compile", "pytorch", "onnxruntime")
    ladders = sorted(
        (run for run in runs if is_ladder(run)),
        key=lambda r: (r["config"]["model"], order.index(r["config"]["backend"])),
    )
    for run in ladders:
        name = run["config"]["backend"]
        if name == "openai":
            name = "openai → vllm serve"
        for phase in run["phases"]:
            s = phase["summary"]
            ttft, tpot, e2e = s["ttft_ms"] or {}, s["tpot_ms"] or {}, s["e2e_ms"] or {}
            lines.append(
                f"| {run['config']['model']} | {name} | {gpu_tag(run)} | {phase['target']:.0f} "
                f"| {fmt(s['request_throughput_rps'], 2)} "
                f"| {fmt(s['output_throughput_tok_s'])} | {fmt(ttft.get('p50'))} / "
                f"{fmt(ttft.get('p99'))} | {fmt(tpot.get('p50'), 1)} | {fmt(e2e.get('p99'))} "
                f"| {s['failed']} |"
            )
    return "\n".join(lines)


def run_level_table(runs: list[dict]) -> str:
    lines = [
        "| run | GPU | load s | compile/build s | peak GPU GB (source) | GB per B params "
        "| mean GPU util % | mean power W | J per output token |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        if run["config"]["workload"]["kind"] != "generate":
            continue
        t, tm = run["telemetry"], run["timings"]
        lines.append(
            f"| {run['config']['label']} | {gpu_tag(run)} | {fmt(tm['load_s'], 1)} "
            f"| {fmt(tm['compile_s'] or tm['build_s'], 1)} "
            f"| {fmt(t['peak_gpu_memory_gb'], 1)} ({t.get('peak_gpu_memory_source') or '-'}) "
            f"| {fmt(t['memory_efficiency_gb_per_b_params'], 1)} "
            f"| {fmt(t['mean_gpu_utilization_pct'])} | {fmt(t['mean_power_w'])} "
            f"| {fmt(t['energy_per_output_token_j'], 3)} |"
        )
    return "\n".join(lines)


def forward_table(runs: list[dict]) -> str:
    rows = {}
    for run in runs:
        config = run["config"]
        if config["workload"]["kind"] != "forward":
            continue
        key = (config["model"], config["workload"]["batch_size"])
        rows.setdefault(key, {})[config["backend"]] = run
    lines = [
        "| model | batch | backend | GPU | samples/s | latency p50 / p99 ms | × eager PyTorch "
        "| J per sample | compile/build s |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|",
    ]
    for (model, batch), by_backend in sorted(rows.items()):
        eager = by_backend.get("pytorch")
        eager_rate = eager["summary"]["output_throughput_tok_s"] if eager else None
        for backend in ("pytorch", "torch_compile", "onnxruntime", "tensorrt"):
            run = by_backend.get(backend)
            if run is None:
                continue
            s, t, tm = run["summary"], run["telemetry"], run["timings"]
            rate = s["output_throughput_tok_s"]
            ratio = rate / eager_rate if eager_rate else None
            # † = eager PyTorch ran on another lent GPU: the ratio carries machine variance too.
            other_gpu = eager is not None and gpu_tag(eager) != gpu_tag(run)
            lines.append(
                f"| {model} | {batch} | {backend} | {gpu_tag(run)} | {fmt(rate)} "
                f"| {fmt(s['e2e_ms']['p50'], 2)} / {fmt(s['e2e_ms']['p99'], 2)} "
                f"| {fmt(ratio, 2)}{' †' if other_gpu else ''} "
                f"| {fmt(t['energy_per_output_token_j'], 3)} "
                f"| {fmt(tm['compile_s'] or tm['build_s'], 1)} |"
            )
    return "\n".join(lines)


def campaign_steps(campaign_dirs: list[Path]):
    """(campaign name, its GPU tag, step) for every step of every campaign file, in order.

    A paired batcher check run on its own (`batcher-fidelity-paired*.json`, written by
    benchmarks/batcher_fidelity.py --pairs) comes after its folder's campaigns, as a step of
    kind `fidelity_paired` named after its file."""
    for campaign_dir in campaign_dirs:
        for path in sorted(campaign_dir.glob("campaign-*.json")):
            campaign = json.loads(path.read_text())
            name = path.name.removeprefix("campaign-").removesuffix(".json")
            gpu = gpu_tag(campaign)
            for step in campaign["steps"]:
                yield name, gpu, step
        for path in sorted(campaign_dir.glob("batcher-fidelity-paired*.json")):
            check = json.loads(path.read_text())
            yield path.stem, gpu_tag(check), {"kind": "fidelity_paired", **check}


def prefix_cache_note(offline: dict) -> str:
    """What the offline reference's timed generate may have taken from the prefix cache.

    Until the reference emptied the cache before each timed call (`cached_prompt_tokens` came
    with that), its warm-up (the first 4 prompts) and single wave (the first max_num_seqs) had
    already run some of the timed prompts: their prefill was free, the backend's never is."""
    if "cached_prompt_tokens" in offline:
        return f"; reference prefix-cache hits: {offline['cached_prompt_tokens']} tokens"
    wave = offline.get("single_wave")
    seen = max(4, wave["requests"] if wave else 0)
    return f"; the reference's first {seen} prompts had already run (prefix-cache hits)"


FidelityCells = tuple[str, float, float, float, str]
"""A fidelity row's check text, reference tok/s, our tok/s, ratio and target."""


def vllm_check(step: dict) -> FidelityCells:
    """Our `vllm` backend against `LLM.generate` (plans before s4: closed loop or one wave)."""
    offline = step["offline"]
    client = step.get("client_concurrency", step.get("concurrency"))
    if client is not None and client >= step["requests"]:  # handed over at once
        what = (
            f"vllm: all {step['requests']} requests at once (engine max_num_seqs "
            f"{step['concurrency']}) vs `LLM.generate` of the same prompts"
        )
    elif client is not None:  # closed loop over several waves vs one offline generate
        what = (
            f"vllm: closed loop c{client} over {step['requests']} requests "
            f"vs `LLM.generate` of the same {offline['requests']} prompts "
            f"(max_num_seqs {step['concurrency']})"
        )
        wave = offline.get("single_wave")
        if wave:
            what += (
                f"; offline single wave of {wave['requests']}: "
                f"{fmt(wave['output_throughput_tok_s'])} tok/s"
            )
    else:
        what = f"vllm: {step['requests']} requests at once vs `LLM.generate` of them"
    if step.get("event_loop", "asyncio") != "asyncio":
        what += f"; worker event loop {step['event_loop']}"
    what += prefix_cache_note(offline)
    ours = step["backend_output_throughput_tok_s"]
    return what, offline["output_throughput_tok_s"], ours, step["ratio"], "≥ 0.95"


def pytorch_launch_check(step: dict) -> FidelityCells:
    """Our batcher through `launch` against a plain `generate` in a separate process."""
    plain = step["plain"]
    runs = " / ".join(fmt(v) for v in plain["runs_output_throughput_tok_s"])
    nvml = step.get("telemetry_interval_s")
    what = (
        f"pytorch: plain `generate` batch {step['batch']} (median of {runs}) "
        f"vs batcher through `launch`"
        + (f", NVML sampled every {nvml:g} s" if nvml is not None else "")
    )
    if len(step.get("rounds") or []) > 1:
        low, high = step["ratio_spread"]
        what += f"; median round of {len(step['rounds'])} interleaved (ratios {low:.3f}–{high:.3f})"
    ours = step["backend_output_throughput_tok_s"]
    return what, plain["output_throughput_tok_s"], ours, step["ratio"], "≥ 0.90"


def pytorch_paired_check(step: dict) -> FidelityCells:
    """Plain `generate` and our batcher alternated on one model (batcher_fidelity.py --pairs):
    the ratio is the median pair's, the two throughputs each side's median."""
    low, high = step["ratio_quartiles"]
    what = (
        f"pytorch: plain `generate` batch {step['batch']} and one batcher batch through the "
        f"harness, alternated on one loaded model ({len(step['pairs'])} pairs, ABBA; medians "
        f"of each side); median pair ratio, quartiles {low:.3f}–{high:.3f}, best of each "
        f"{step['ratio_best_of_each']:.3f}"
    )
    return (
        what,
        step["plain_median_tok_s"],
        step["backend_median_tok_s"],
        step["ratio_median"],
        "≥ 0.90",
    )


def fidelity_table(campaign_dirs: list[Path]) -> str:
    lines = [
        "| campaign | GPU | check | reference (engine's own API) tok/s | our backend tok/s "
        "| ratio | target |",
        "|---|---|---|---:|---:|---:|---|",
    ]
    for name, gpu, step in campaign_steps(campaign_dirs):
        if step.get("kind") == "fidelity_paired":
            cells = pytorch_paired_check(step)
        elif step.get("kind") == "fidelity":
            check = vllm_check if step["engine"] == "vllm" else pytorch_launch_check
            cells = check(step)
        else:
            continue
        what, ref, ours, ratio, target = cells
        lines.append(
            f"| {name} | {gpu} | {what} | {fmt(ref)} | {fmt(ours)} | {fmt(ratio, 3)} | {target} |"
        )
    return "\n".join(lines)


def quick_plan_table(campaign_dirs: list[Path]) -> str:
    """The advisor's quick plan, end to end: wall time and where it went per backend."""
    lines = [
        "| campaign | GPU | end to end s | backend | load s | warm-up s | measured s "
        "| output tok/s | TTFT p50 ms |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for name, gpu, step in campaign_steps(campaign_dirs):
        if step.get("kind") != "quick_plan":
            continue
        for run in step["runs"]:
            s, tm = run["summary"], run["timings"]
            lines.append(
                f"| {name} | {gpu} | {fmt(step['wall_s'])} | {run['config']['backend']} "
                f"| {fmt(tm['load_s'], 1)} | {fmt(tm['warmup_s'], 1)} "
                f"| {fmt(s['duration_s'], 1)} | {fmt(s['output_throughput_tok_s'])} "
                f"| {fmt((s['ttft_ms'] or {}).get('p50'))} |"
            )
    return "\n".join(lines)


def vllm_reference_table(campaign_dirs: list[Path]) -> str:
    """vLLM's own throughput figures measured beside a fidelity campaign, on the same host.

    `vllm-reference/host.json` in a campaign folder names the GPU and the campaign whose vLLM
    fidelity run shared the host; `bench_throughput_*.json` come from
    benchmarks/vllm_async_overhead.sh, `offline_*.json` from `python -m bench.backends.vllm`."""
    lines = [
        "| GPU | reference | requests | output tok/s | our backend tok/s "
        "| our backend ÷ reference |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for campaign_dir in campaign_dirs:
        folder = campaign_dir / "vllm-reference"
        if not (folder / "host.json").exists():
            continue
        host = json.loads((folder / "host.json").read_text())
        campaign = json.loads((campaign_dir / host["campaign"]).read_text())
        ours = next(
            step["backend_output_throughput_tok_s"]
            for step in campaign["steps"]
            if step.get("kind") == "fidelity" and step.get("engine") == "vllm"
        )
        gpu = short_uuid(host["gpu_uuid"])
        for path in sorted(folder.glob("bench_throughput_*.json")):
            result = json.loads(path.read_text())
            command = (folder / f"{path.stem}.cmd").read_text().split()
            output_len = int(command[command.index("--random-output-len") + 1])
            rate = result["num_requests"] * output_len / result["elapsed_time"]
            mode = (
                "`--async-engine` (AsyncLLM, streamed)"
                if "--async-engine" in command
                else "`LLM.generate`"
            )
            lines.append(
                f"| {gpu} | `vllm bench throughput`, {mode} | {result['num_requests']} "
                f"| {fmt(rate)} | {fmt(ours)} | {fmt(ours / rate, 3)} |"
            )
        for path in sorted(folder.glob("offline_*.json")):
            result = json.loads(path.read_text())
            caching = result["engine_args"].get("enable_prefix_caching", True)
            lines.append(
                f"| {gpu} | our `LLM.generate` reference"
                f"{'' if caching else ', prefix caching off'} | {result['requests']} "
                f"| {fmt(result['output_throughput_tok_s'])} | {fmt(ours)} "
                f"| {fmt(ours / result['output_throughput_tok_s'], 3)} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("reference", type=Path, nargs="+")
    parser.add_argument("--campaigns", type=Path, nargs="+", required=True)
    args = parser.parse_args()
    runs = [run for path in args.reference for run in json.loads(path.read_text())["runs"]]
    print("#### LLM serving, fp16, 128 prompt / 128 output tokens\n")
    print(llm_table(runs))
    print("\n#### Run-level figures (telemetry over the measured window)\n")
    print(run_level_table(runs))
    print("\n#### Fidelity of the adapters against the engines' own APIs\n")
    print(fidelity_table(args.campaigns))
    print("\n#### vLLM's own figures beside a vLLM fidelity run (128/128, 1,024 requests)\n")
    print(vllm_reference_table(args.campaigns))
    print("\n#### Advisor quick plan, llama-2-7b, 512 prompt / 256 output tokens, concurrency 8\n")
    print(quick_plan_table(args.campaigns))
    print("\n#### Fixed-shape forward (bert-base seq 128, resnet-50 224 px), fp16\n")
    print(forward_table(runs))


if __name__ == "__main__":
    main()
