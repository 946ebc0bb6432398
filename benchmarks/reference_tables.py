"""Markdown tables of a measured reference file (for the README), computed, never typed in.

    python benchmarks/reference_tables.py data/reference/h200_2026-11-29_runs.json \
        --campaigns data/reference/h200_2026-11-29
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def fmt(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def llm_table(runs: list[dict]) -> str:
    lines = [
        "| backend | concurrency | req/s | output tok/s | TTFT p50 / p99 ms | TPOT p50 ms "
        "| E2E p99 ms | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        if run["config"]["workload"]["kind"] != "generate" or "fidelity" in run["config"]["label"]:
            continue
        name = run["config"]["backend"]
        if name == "openai":
            name = "openai → vllm serve"
        for phase in run["phases"]:
            s = phase["summary"]
            ttft, tpot, e2e = s["ttft_ms"] or {}, s["tpot_ms"] or {}, s["e2e_ms"] or {}
            lines.append(
                f"| {name} | {phase['target']:.0f} | {fmt(s['request_throughput_rps'], 2)} "
                f"| {fmt(s['output_throughput_tok_s'])} | {fmt(ttft.get('p50'))} / "
                f"{fmt(ttft.get('p99'))} | {fmt(tpot.get('p50'), 1)} | {fmt(e2e.get('p99'))} "
                f"| {s['failed']} |"
            )
    return "\n".join(lines)


def run_level_table(runs: list[dict]) -> str:
    lines = [
        "| run | load s | compile/build s | peak GPU GB (source) | GB per B params "
        "| mean GPU util % | mean power W | J per output token |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        if run["config"]["workload"]["kind"] != "generate":
            continue
        t, tm = run["telemetry"], run["timings"]
        lines.append(
            f"| {run['config']['label']} | {fmt(tm['load_s'], 1)} "
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
        "| model | batch | backend | samples/s | latency p50 / p99 ms | × eager PyTorch "
        "| J per sample | compile/build s |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
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
            lines.append(
                f"| {model} | {batch} | {backend} | {fmt(rate)} | {fmt(s['e2e_ms']['p50'], 2)} / "
                f"{fmt(s['e2e_ms']['p99'], 2)} | {fmt(ratio, 2)} "
                f"| {fmt(t['energy_per_output_token_j'], 3)} "
                f"| {fmt(tm['compile_s'] or tm['build_s'], 1)} |"
            )
    return "\n".join(lines)


def fidelity_table(campaign_dir: Path) -> str:
    lines = [
        "| check | reference (engine's own API) tok/s | our backend tok/s | ratio | target |",
        "|---|---:|---:|---:|---|",
    ]
    for path in sorted(campaign_dir.glob("campaign-*.json")):
        for step in json.loads(path.read_text())["steps"]:
            if step.get("kind") != "fidelity":
                continue
            if step["engine"] == "vllm":
                ref = step["offline"]["output_throughput_tok_s"]
                what = f"vllm: `LLM.generate` vs backend, {step['requests']} requests"
                target = "≥ 0.95"
            else:
                ref = step["plain"]["output_throughput_tok_s"]
                what = f"pytorch: plain `generate` batch {step['batch']} vs batcher"
                target = "≥ 0.90"
            ours = step["backend_output_throughput_tok_s"]
            lines.append(
                f"| {what} | {fmt(ref)} | {fmt(ours)} | {fmt(step['ratio'], 3)} | {target} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("reference", type=Path)
    parser.add_argument("--campaigns", type=Path, required=True)
    args = parser.parse_args()
    runs = json.loads(args.reference.read_text())["runs"]
    print("#### LLM serving, llama-2-7b fp16, 128 prompt / 128 output tokens\n")
    print(llm_table(runs))
    print("\n#### Run-level figures (telemetry over the measured window)\n")
    print(run_level_table(runs))
    print("\n#### Fidelity of the adapters against the engines' own APIs\n")
    print(fidelity_table(args.campaigns))
    print("\n#### Fixed-shape forward (bert-base seq 128, resnet-50 224 px), fp16\n")
    print(forward_table(runs))


if __name__ == "__main__":
    main()
