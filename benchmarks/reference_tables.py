"""The measurement docs (docs/measurements/h200.md, docs/fidelity.md) and the README's headline
table, computed from the measured files in data/reference/, never typed in.

    python benchmarks/reference_tables.py            # rewrite the docs from data/reference/
    python benchmarks/reference_tables.py --check    # exit 1 if a doc differs from the data

The prose around the tables lives in benchmarks/templates/*.md.j2; every figure in it is a
value computed here from the same files (tests/benchmarks/test_reference_tables.py checks the
committed docs equal this script's output).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import tarfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import jinja2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REFERENCE_DIR = ROOT / "data" / "reference"
TEMPLATES = Path(__file__).resolve().parent / "templates"
DOCS = {
    "measurements/h200.md": "h200.md.j2",
    "fidelity.md": "fidelity.md.j2",
    "capacity-model.md": "capacity-model.md.j2",
}
"""Generated doc (relative to docs/) -> its template in benchmarks/templates/."""
FAST_STEP_MS = 22.0
"""Eager decode steps on the H200 hosts ran ~18–22 ms or ~30–42 ms (campaign logs): below this a
paired batch ran in the fast regime."""


def fmt(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def catalogued(name: str):  # -> bench.core.metric_catalog.Metric
    """The catalogue's metric of a name (`e2e_ms_p99`): the tables' metric words and units."""
    sys.path.insert(0, str(ROOT))
    from bench.core.metric_catalog import metric

    return metric(name)


def unit_heading(name: str) -> str:
    """A compact column heading, the catalogue's label and unit: `E2E p99 ms`, `TPOT p50 ms`."""
    shown = catalogued(name)
    return f"{shown.label} {shown.unit}"


def short_uuid(uuid: str) -> str:
    """The first 8 hex digits of an NVML GPU UUID: enough to tell the GPU hosts apart."""
    return uuid.removeprefix("GPU-")[:8]


def fingerprint_of(stored: dict):  # -> bench.core.fingerprint.Fingerprint
    """The typed fingerprint of a stored run or check (one that took none reads as empty)."""
    if str(ROOT) not in sys.path:  # called once per run: add the checkout once
        sys.path.insert(0, str(ROOT))
    from bench.core.fingerprint import Fingerprint

    return Fingerprint.model_validate(stored.get("environment") or {})


def gpu_tag(run: dict) -> str:
    """Short id of the GPU a run used (its NVML UUID): runs of different GPU hosts differ."""
    gpus = fingerprint_of(run).gpus
    return short_uuid(gpus[0].uuid or "") if gpus else "-"


HELD_LOAD_PATTERNS = ("steady", "pulse")
"""Patterns whose phases are open-loop rates around a capacity, not closed-loop levels."""


def is_ladder(run: dict) -> bool:
    """An LLM serving ladder (not a fidelity check, an advisor quick-plan run, a soak or a
    pulse: their phases are rates, not concurrency levels)."""
    label = run["config"]["label"]
    return (
        run["config"]["workload"]["kind"] == "generate"
        and run["config"]["load"]["pattern"] not in (*HELD_LOAD_PATTERNS, "capacity")
        and "fidelity" not in label
        and not label.startswith(("advisor", "capacity check"))
    )


def capacity_table(runs: list[dict]) -> str:
    """Each SLO capacity search: what it found and how its constant-rate checks judged it
    (bench/orchestrate/capacity_check.py's own rule)."""
    from bench.core.schema import RunResult
    from bench.orchestrate.capacity_check import checks_of

    typed = [RunResult.model_validate(run) for run in runs]
    lines = [
        "| model | backend | GPU | SLO | probes | capacity req/s | first infeasible req/s "
        "| check at capacity | check at 1.15x |",
        "|---|---|---|---|---:|---:|---:|---|---|",
    ]
    for run, search in zip(runs, typed, strict=True):
        if run["config"]["load"]["pattern"] != "capacity" or search.pattern_report is None:
            continue
        report = search.pattern_report
        slo = search.config.slo
        bounds = ", ".join(
            f"{name.split('_')[0].upper()} {report.percentile} <= {fmt(value)} ms"
            for name, value in (("ttft_ms", slo.ttft_ms), ("tpot_ms", slo.tpot_ms))
            if value is not None
        )
        cells = []
        for check in checks_of(search, typed):
            verdict = "holds" if check.holds else "fails"
            cells.append(
                f"{fmt(check.rate_rps, 1)} req/s: {verdict}"
                + ("" if check.as_expected else " (search expected otherwise)")
            )
        cells += ["not run"] * (2 - len(cells))
        lines.append(
            f"| {run['config']['model']} | {run['config']['backend']}{precision_suffix(run)} "
            f"| {gpu_tag(run)} | {bounds}, {fmt(100 * report.attainment_target)}% of requests "
            f"| {len(report.probes)} | {fmt(report.max_rate_rps, 1)} "
            f"| {fmt(report.first_infeasible_rps, 1)} | {cells[0]} | {cells[1]} |"
        )
    return "\n".join(lines)


def held_load_table(runs: list[dict]) -> str:
    """Soak (steady) and pulse runs: the load held, what the analysis found. The figures' words
    and units are the catalogue's metric of each stored field (`field_metrics` of the
    bench.core.pattern_reports models); the fields keep their stored names."""
    sys.path.insert(0, str(ROOT))
    from bench.core.pattern_reports import PulseAnalysis, SoakFits

    drift = SoakFits.metric_of("p99_e2e_ms")
    peak = PulseAnalysis.metric_of("peak_window_p99_e2e_ms")
    baseline = PulseAnalysis.metric_of("baseline_p99_e2e_ms")
    lines = [
        "| run | GPU | backend | phases (req/s x s) | requests | errors "
        f"| {unit_heading('e2e_ms_p99')} | finding |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    for run in runs:
        pattern = run["config"]["load"]["pattern"]
        if pattern not in HELD_LOAD_PATTERNS:
            continue
        report, summary = run["pattern_report"], run["summary"]
        analysis = report.get("analysis") or {}
        windows = report.get("phase_windows") or {}  # phase -> [start, end of issuing] ns
        phases = " → ".join(
            f"{fmt(phase['target'])} x "
            f"{fmt((windows[phase['name']][1] - windows[phase['name']][0]) / 1e9)}"
            for phase in run["phases"]
        )
        if pattern == "steady":
            fits = analysis.get("fits") or {}
            e2e = fits.get("p99_e2e_ms") or {}
            finding = (
                f"leak suspected: {'yes' if analysis.get('leak_suspected') else 'no'}; "
                f"{drift.statistic} drift: {'yes' if analysis.get('latency_drift') else 'no'} "
                f"(p {fmt(e2e.get('p_value'), 4)}, fitted "
                f"{fmt(100 * (e2e.get('projected_change_fraction') or 0))}% over the run, "
                f"{e2e.get('windows')} windows of {fmt(report['window_s'])} s)"
            )
        else:
            recovered = analysis.get("recovered")
            finding = (
                f"peak window {peak.statistic} {peak.spec.label} "
                f"{fmt(analysis.get('peak_window_p99_e2e_ms'))} {peak.unit}; "
                + (
                    f"recovered {fmt(analysis.get('recovery_s'), 1)} s after the burst"
                    if recovered
                    else "not recovered within the run"
                )
                + f" (baseline {baseline.statistic} "
                f"{fmt(analysis.get('baseline_p99_e2e_ms'))} {baseline.unit})"
            )
        name = run["config"]["backend"]
        if name == "openai":
            name = "openai → vllm serve"
        lines.append(
            f"| {run['config']['label']} | {gpu_tag(run)} | {name} | {phases} "
            f"| {summary['requests']:,} | {summary['failed']} "
            f"| {fmt((summary['e2e_ms'] or {}).get('p99'))} | {finding} |"
        )
    return "\n".join(lines)


def client_fidelity_table(reference_dir: Path) -> str:
    """This harness's openai client against `vllm bench serve` on one server
    (bench/orchestrate/client_fidelity.py): per level and metric, the median of the per-repeat
    ratios, their range and the verdict."""
    lines = [
        "| folder | GPU | concurrency | requests per run | repeats | output tok/s | TTFT p50 "
        "| TPOT p50 |",
        "|---|---|---:|---:|---:|---|---|---|",
    ]
    for path in sorted(reference_dir.glob("h200_*/client-fidelity.json")):
        data = json.loads(path.read_text())
        gpu = short_uuid(fingerprint_of(data).gpus[0].uuid or "")
        for level in data["levels"]:
            cells = {
                metric["metric"]: f"{fmt(metric['median_ratio'], 3)} "
                f"[{fmt(metric['min_ratio'], 3)}–{fmt(metric['max_ratio'], 3)}] {metric['verdict']}"
                for metric in level["metrics"]
            }
            repeats = len(level["metrics"][0]["ratios"]) if level["metrics"] else 0
            lines.append(
                f"| {path.parent.name} | {gpu} | {level['level']} | {level['requests']:,} "
                f"| {repeats} | {cells.get('output_throughput_tok_s', '-')} "
                f"| {cells.get('ttft_p50_ms', '-')} | {cells.get('tpot_p50_ms', '-')} |"
            )
    return "\n".join(lines)


def precision_label(run: dict) -> str:
    """The run's precision as `PrecisionConfig.label()` writes it: `float16`,
    `bfloat16 + fp8 weights + fp8 KV` (runs from before the KV-cache axis read as `auto`)."""
    sys.path.insert(0, str(ROOT))
    from bench.core.config import PrecisionConfig

    return PrecisionConfig.model_validate(run["config"]["precision"]).label()


def precision_suffix(run: dict) -> str:
    """' (bfloat16 + fp8 weights)' for a run not in plain float16, else '' (the float16 runs'
    rows keep their plain backend name; the doc says fp16 unless a row says otherwise)."""
    label = precision_label(run)
    return "" if label == "float16" else f" ({label})"


def llm_table(runs: list[dict]) -> str:
    ttft_p50, ttft_p99 = catalogued("ttft_ms_p50"), catalogued("ttft_ms_p99")
    lines = [
        "| model | backend | GPU | concurrency | req/s | output tok/s "
        f"| {ttft_p50.label} / {ttft_p99.statistic} {ttft_p99.unit} "
        f"| {unit_heading('tpot_ms_p50')} | {unit_heading('e2e_ms_p99')} | errors |",
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
        name += precision_suffix(run)
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
            # † = eager PyTorch ran on another GPU host: the ratio carries machine variance too.
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

    A paired batcher check run on its own (`batcher-fidelity-paired*.json`, written by the
    paired check that `python -m bench fidelity --engine pytorch` runs today) comes after its
    folder's campaigns, as a step of kind `fidelity_paired` named after its file."""
    for campaign_dir in campaign_dirs:
        for path in campaign_files(campaign_dir):
            campaign = json.loads(path.read_text())
            name = path.name.removeprefix("campaign-").removesuffix(".json")
            gpu = gpu_tag(campaign)
            for step in campaign["steps"]:
                yield name, gpu, legacy_step(step)
        for path in sorted(campaign_dir.glob("batcher-fidelity-paired*.json")):
            check = json.loads(path.read_text())
            yield path.stem, gpu_tag(check), {"kind": "fidelity_paired", **check}


def legacy_step(step: dict) -> dict:
    """A step of a `python -m bench campaign` file (a StepOutcome: the check under
    `fidelity`) in the flat shape of the former campaign script's files, which the tables
    below read; steps of those older files pass through unchanged."""
    outcome = step.get("fidelity")
    if step.get("kind") != "fidelity" or outcome is None:
        return step
    check = outcome["check"]
    flat = {
        "kind": "fidelity",
        "engine": check["engine"],
        "requests": check["requests"],
        "concurrency": check["max_num_seqs"],
        "client_concurrency": check["client_concurrency"],
        "event_loop": check["event_loop"],
        "engine_args": check["engine_args"],
        "backend_output_throughput_tok_s": outcome["backend_output_throughput_tok_s"],
        "ratio": outcome["ratio"],
    }
    if outcome.get("vllm_reference") is not None:
        flat["offline"] = outcome["vllm_reference"]
    return flat


def precision_note(engine_args: dict) -> str:
    """'; FP8 weights + FP8 KV cache' for a check run at a reduced precision, else ''."""
    parts = []
    if engine_args.get("quantization"):
        parts.append(f"{engine_args['quantization'].upper()} weights")
    if engine_args.get("kv_cache_dtype", "auto") != "auto":
        parts.append(f"{engine_args['kv_cache_dtype'].upper()} KV cache")
    return "; " + " + ".join(parts) + " on both sides" if parts else ""


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
    what += precision_note(step.get("engine_args") or {})
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
    """Plain `generate` and our batcher alternated on one model (bench/orchestrate/fidelity.py,
    paired mode): the ratio is the median pair's, the two throughputs each side's median."""
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
    unit = catalogued("output_throughput_tok_s").unit  # FidelityResult's two throughputs
    lines = [
        f"| campaign | GPU | check | reference (engine's own API) {unit} | our backend {unit} "
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
        f"| output tok/s | {unit_heading('ttft_ms_p50')} |",
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
    benchmarks/vllm_async_overhead.sh, `offline_*.json` from the `LLM.generate` reference now
    in bench/orchestrate/fidelity.py."""
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
        campaign = json.loads(host_campaign(campaign_dir, host).read_text())
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


# --------------------------------------------------------------------------- the shipped files


def timestamp(stored: str | float) -> datetime:
    """A stored time, timezone-aware: ISO text ('2026-11-29T20:11:37Z' or '...+00:00') or
    seconds since the epoch (the client fidelity check's runs)."""
    if isinstance(stored, int | float):
        return datetime.fromtimestamp(stored, tz=UTC)
    return datetime.fromisoformat(stored.replace("Z", "+00:00"))


def run_files(reference_dir: Path = REFERENCE_DIR) -> list[Path]:
    """Every measured RunResult file of the H200 campaigns (`h200_*_runs.json`), in the order
    they were measured (their first run's `created_at`): the names say what was measured, the
    order of the tables and of "the first such run" comes from when."""
    return sorted(
        reference_dir.glob("h200_*_runs.json"),
        key=lambda path: min(
            timestamp(run["created_at"]) for run in json.loads(path.read_text())["runs"]
        ),
    )


def campaign_files(folder: Path) -> list[Path]:
    """A folder's `campaign-*.json` files in the order they ran (their `started_at`)."""
    return sorted(
        folder.glob("campaign-*.json"),
        key=lambda path: timestamp(json.loads(path.read_text())["started_at"]),
    )


def measured_at(folder: Path) -> datetime:
    """When a campaign folder's measurements began: its first campaign file's `started_at`, or
    for a client fidelity check (`client-fidelity.json`) its first run's."""
    times = [
        timestamp(json.loads(path.read_text())["started_at"])
        for path in folder.glob("campaign-*.json")
    ]
    for path in folder.glob("client-fidelity.json"):
        times += [timestamp(run["started_at"]) for run in json.loads(path.read_text())["runs"]]
    if not times:
        raise ValueError(f"{rel(folder)} holds no campaign or client fidelity file")
    return min(times)


def campaign_dirs(reference_dir: Path = REFERENCE_DIR) -> list[Path]:
    """Every H200 campaign folder (campaign files, paired checks, vLLM's own figures), in the
    order they were measured."""
    return sorted((path for path in reference_dir.glob("h200_*") if path.is_dir()), key=measured_at)


def host_campaign(folder: Path, host: dict) -> Path:
    """The campaign file of `folder` whose vLLM fidelity run shared the host that a
    `vllm-reference/host.json` names: the one fingerprinted on that GPU. (host.json also records
    the campaign's file name as it was when measured; the files have since been renamed by what
    they measured, and stored files are never edited, so the GPU UUID is what joins them.)"""
    for path in campaign_files(folder):
        gpus = fingerprint_of(json.loads(path.read_text())).gpus
        if gpus and gpus[0].uuid == host["gpu_uuid"]:
            return path
    raise ValueError(f"no campaign file in {rel(folder)} ran on {host['gpu_uuid']}")


def load_runs(paths: Iterable[Path]) -> list[dict]:
    return [run for path in paths for run in json.loads(path.read_text())["runs"]]


def rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# --------------------------------------------------------------------------- figures in the prose


def ladder_run(
    runs: list[dict], model: str, backend: str, concurrency: int, precision: str = "float16"
) -> tuple[dict, dict]:
    """(run, phase) of the ladder stage at `concurrency` at this precision (a
    `PrecisionConfig.label()`); the first such run in file order; KeyError when not run."""
    for run in runs:
        config = run["config"]
        if (
            is_ladder(run)
            and config["model"] == model
            and config["backend"] == backend
            and precision_label(run) == precision
        ):
            for phase in run["phases"]:
                if round(phase["target"]) == concurrency:
                    return run, phase
    raise KeyError((model, backend, concurrency))


def ladder_phase(
    runs: list[dict], model: str, backend: str, concurrency: int, precision: str = "float16"
) -> tuple[dict, str]:
    """(phase summary, GPU tag) of the ladder stage at `concurrency`; KeyError when not run."""
    run, phase = ladder_run(runs, model, backend, concurrency, precision)
    return phase["summary"], gpu_tag(run)


def tok_s(runs: list[dict], model: str, backend: str, concurrency: int) -> float:
    return ladder_phase(runs, model, backend, concurrency)[0]["output_throughput_tok_s"]


def ratio(
    runs: list[dict],
    model: str,
    over: str,
    under: str,
    concurrency: int,
    digits: int = 1,
    precisions: tuple[str, str] = ("float16", "float16"),
) -> str:
    """`over`'s output tok/s ÷ `under`'s at one ladder level, '1.8×', with † when the two ran
    on different GPUs (the ratio then carries machine variance too). `precisions` are the two
    sides' `PrecisionConfig.label()`s (one backend at two precisions: over == under)."""
    a, gpu_a = ladder_phase(runs, model, over, concurrency, precisions[0])
    b, gpu_b = ladder_phase(runs, model, under, concurrency, precisions[1])
    value = a["output_throughput_tok_s"] / b["output_throughput_tok_s"]
    return f"{value:.{digits}f}×" + ("" if gpu_a == gpu_b else " †")


def precision_ratios(
    runs: list[dict], model: str, backend: str, over: str, under: str, levels: Iterable[int]
) -> str:
    """`backend`'s output tok/s at precision `over` ÷ at precision `under` per ladder level,
    '1.42× / 1.39×', with † where the two ran on different GPUs."""
    return " / ".join(
        ratio(runs, model, backend, backend, level, 2, (over, under)) for level in levels
    )


def ratios(
    runs: list[dict], model: str, over: str, under: str, levels: Iterable[int], digits: int = 1
) -> str:
    return " / ".join(ratio(runs, model, over, under, level, digits) for level in levels)


def decode_floor(model: str, gpu: str = "H200", dtype: str = "float16"):
    """advisor/sizing/estimate.py's Estimate for batch-1 decode of `model` on one `gpu`: its
    `decode_floor_ms_per_token` = weight bytes / datasheet memory bandwidth."""
    sys.path.insert(0, str(ROOT))
    from advisor.sizing.estimate import estimate_stage
    from advisor.workload.profile import StageProfile

    stage = StageProfile.model_validate(
        {"name": "floor", "model": model, "gpu": {"type": gpu}, "precision": {"dtype": dtype}}
    )
    estimate = estimate_stage(stage)
    if estimate.decode_floor_ms_per_token is None:
        raise ValueError(f"no decode floor for {model} on {gpu}")
    return estimate


def library_versions(runs: list[dict]) -> dict[str, str]:
    """Each library's version(s) across the runs' fingerprints, e.g. {'vllm': '0.25.0'}."""
    seen: dict[str, set[str]] = {}
    for run in runs:
        env = fingerprint_of(run)
        found = dict(env.libraries)
        found["torch"] = env.torch_build.version if env.torch_build else None
        found["driver"] = env.driver_version
        found["cpu_cores"] = str(env.cpu.logical_cores)
        for name, version in found.items():
            if version:
                seen.setdefault(name, set()).add(version)
    return {name: " / ".join(sorted(versions)) for name, versions in seen.items()}


def gpu_tags(runs: list[dict]) -> list[str]:
    """The short GPU tags of the runs, in the order they first appear."""
    return list(dict.fromkeys(gpu_tag(run) for run in runs))


def forward_ratio_range(runs: list[dict], backend: str, batches: Iterable[int]) -> str:
    """'low–high×' of `backend` over eager PyTorch on the forward kind at these batch sizes."""
    by_key: dict[tuple[str, int], dict[str, float]] = {}
    for run in runs:
        config = run["config"]
        if config["workload"]["kind"] == "forward":
            key = (config["model"], config["workload"]["batch_size"])
            by_key.setdefault(key, {})[config["backend"]] = run["summary"][
                "output_throughput_tok_s"
            ]
    values = [
        rates[backend] / rates["pytorch"]
        for (_, batch), rates in by_key.items()
        if batch in batches and backend in rates and "pytorch" in rates
    ]
    return f"{min(values):.2f}–{max(values):.2f}×"


def quick_plan(campaign_dirs: list[Path], name: str) -> dict:
    """The quick-plan step of campaign `name`: wall time and per-backend timings."""
    for campaign, gpu, step in campaign_steps(campaign_dirs):
        if campaign == name and step.get("kind") == "quick_plan":
            runs = {run["config"]["backend"]: run for run in step["runs"]}
            parts = sum(
                run["timings"]["load_s"] + run["timings"]["warmup_s"] + run["summary"]["duration_s"]
                for run in runs.values()
            )
            return {
                "wall_s": step["wall_s"],
                "gpu": gpu,
                "runs": runs,
                "other_s": step["wall_s"] - parts,
            }
    raise KeyError(name)


def fidelity_steps(campaign_dirs: list[Path]) -> list[tuple[str, str, dict]]:
    return [
        (name, gpu, step)
        for name, gpu, step in campaign_steps(campaign_dirs)
        if step.get("kind") in ("fidelity", "fidelity_paired")
    ]


def plain_generate_spread(campaign_dirs: list[Path], folders: set[str]) -> tuple[float, float]:
    """Lowest and highest plain `generate` tok/s over every timed run in these folders' files:
    the same call in one process, back to back, shows the host's variance."""
    values: list[float] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("runs_output_throughput_tok_s", "plain_runs_output_throughput_tok_s"):
                    values.extend(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for folder in campaign_dirs:
        if folder.name in folders:
            for path in sorted(folder.glob("*.json")):
                walk(json.loads(path.read_text()))
    return min(values), max(values)


def launch_step_p10_ms(archive: Path) -> float:
    """p10 of the pooled inter-token gaps of the measured requests of the PyTorch fidelity run
    through `launch` kept in a campaign's `runs-*.tgz` (the harness's fastest decode steps)."""
    gaps: list[float] = []
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.endswith("records.jsonl") and "/pytorch_fidelity" in member.name:
                for line in tar.extractfile(member):
                    record = json.loads(line)
                    if not record.get("warmup"):
                        chunks = record["chunk_ns"]
                        gaps += [(b - a) / 1e6 for a, b in itertools.pairwise(chunks)]
    if not gaps:
        raise ValueError(f"no PyTorch fidelity records in {archive}")
    return float(np.percentile(gaps, 10))


def vllm_graph_compile_s(archive: Path, run: str) -> float:
    """The `torch.compile` graph compile time vLLM logged for one run kept in `runs-*.tgz`."""
    pattern = re.compile(r"Compiling a graph for compile range \(.*?\) takes ([0-9.]+) s")
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            if member.name.startswith(f"runs/{run}/") and member.name.endswith(".log"):
                found = pattern.search(tar.extractfile(member).read().decode(errors="replace"))
                if found:
                    return float(found.group(1))
    raise ValueError(f"no graph compile time in the {run} log of {archive}")


def fidelity_facts(campaign_dirs: list[Path]) -> dict:
    """The figures docs/fidelity.md states in prose, from the campaign files."""
    steps = fidelity_steps(campaign_dirs)
    vllm = [(n, s) for n, _, s in steps if s["kind"] == "fidelity" and s["engine"] == "vllm"]
    clean = [(n, s) for n, s in vllm if s["offline"].get("cached_prompt_tokens") == 0]
    warm = [s["ratio"] for _, s in vllm if "cached_prompt_tokens" not in s["offline"]]
    launch = [
        (folder, s)
        for folder in campaign_dirs
        for n, _, s in fidelity_steps([folder])
        if s["kind"] == "fidelity" and s["engine"] == "pytorch"
    ]
    newest = max((folder for folder, _ in launch), key=measured_at)
    earlier = [
        r
        for folder, s in launch
        if folder != newest
        for r in [s["ratio"], *(round_["ratio"] for round_ in s.get("rounds") or [])]
    ]
    paired = [s for _, _, s in steps if s["kind"] == "fidelity_paired"]
    pairs = [pair for s in paired for pair in s["pairs"]]
    p10 = [pair["backend"]["step_ms_p10"] for pair in pairs]
    fast = [gap for gap in p10 if gap < FAST_STEP_MS]
    # vLLM's prefix cache: the same host's reference with hits vs with caching off.
    worth = []
    for folder in campaign_dirs:
        for path in sorted(folder.glob("vllm-reference/offline_*.json")):
            off = json.loads(path.read_text())
            host = json.loads((path.parent / "host.json").read_text())
            campaign = json.loads(host_campaign(folder, host).read_text())
            with_hits = next(
                s["offline"]["output_throughput_tok_s"]
                for s in campaign["steps"]
                if s.get("kind") == "fidelity" and s.get("engine") == "vllm"
            )
            worth.append(
                (short_uuid(host["gpu_uuid"]), with_hits / off["output_throughput_tok_s"] - 1)
            )
    return {
        "clean": [
            {
                "campaign": n,
                "event_loop": s.get("event_loop", "asyncio"),
                "ours": s["backend_output_throughput_tok_s"],
                "reference": s["offline"]["output_throughput_tok_s"],
                "ratio": s["ratio"],
            }
            for n, s in clean
        ],
        "warm_range": (min(warm), max(warm)),
        "launch_newest": [s["ratio"] for folder, s in launch if folder == newest],
        "launch_earlier_range": (min(earlier), max(earlier)),
        "paired": paired,
        "pair_range": (min(p["ratio"] for p in pairs), max(p["ratio"] for p in pairs)),
        "pairs": len(pairs),
        "p10_range": (min(p10), max(p10)),
        # Fast regime: under 22 ms per step, the top of the fast band seen in the step logs.
        "p10_fast": len(fast),
        "p10_fast_range": (min(fast), max(fast)),
        "prefix_cache_worth": worth,
        "launch_p10_ms": [
            (path.stem.removeprefix("runs-"), launch_step_p10_ms(path))
            for path in sorted(newest.glob("runs-*.tgz"))
        ],
    }


def headline_table(runs: list[dict], model: str = "llama-2-7b") -> str:
    """The README's one H200 table: output tok/s of each LLM backend at each ladder level."""
    order = ("vllm", "openai", "torch_compile", "pytorch", "onnxruntime")
    names = {"openai": "openai → vllm serve"}
    levels = sorted(
        {
            round(phase["target"])
            for run in runs
            if is_ladder(run) and run["config"]["model"] == model
            for phase in run["phases"]
        }
    )
    lines = [
        "| backend | " + " | ".join(f"c{level}" for level in levels) + " |",
        "|---|" + "---:|" * len(levels),
    ]
    for backend in order:
        cells = []
        for level in levels:
            try:
                cells.append(fmt(tok_s(runs, model, backend, level)))
            except KeyError:
                cells.append("-")
        if set(cells) != {"-"}:
            lines.append(f"| {names.get(backend, backend)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the serving model


def serving_validation(reference_dir: Path = REFERENCE_DIR):  # -> advisor Validation
    """The serving model's leave-one-out check over the shipped runs
    (advisor/sizing/serving_validation.py), the rows of docs/capacity-model.md."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from advisor.sizing.measured import measured_reference_runs
    from advisor.sizing.serving_validation import validate

    runs = measured_reference_runs(reference_dir)
    return validate((run, name) for name, file_runs in runs.items() for run in file_runs)


def pct(value, digits: int = 0) -> str:
    return "-" if value is None else f"{value:+.{digits}%}"


def serving_capacity_table(validation) -> str:
    """Each shipped capacity search: measured, predicted (leave-one-out), interval, errors."""
    lines = [
        "| run | precision | SLO | measured req/s (next probe, smoothed) | predicted req/s | "
        "interval | covers | error | uncalibrated req/s (error) | runs fitted |",
        "|---|---|---|---:|---:|---|---|---:|---:|---:|",
    ]
    for row in validation.capacities:
        measured = (
            f"{fmt(row.measured_rps, 1)} ({fmt(row.first_infeasible_rps, 1)}, "
            f"{fmt(row.smoothed_boundary_rps, 1)})"
        )
        lines.append(
            f"| {row.run_id} | {row.precision_class} | {row.slo} | {measured} | "
            f"{fmt(row.predicted_rps, 1)} | {fmt(row.low_rps, 1)}–{fmt(row.high_rps, 1)} | "
            f"{'yes' if row.covered else 'no'} | {pct(row.error, 1)} | "
            f"{fmt(row.uncalibrated_rps, 1)} ({pct(row.uncalibrated_error, 1)}) | "
            f"{row.calibration_runs} |"
        )
    return "\n".join(lines)


SERVING_FIGURES = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50")


def serving_level_table(validation) -> str:
    """Every steady level: measured / predicted (leave-one-out) for each latency figure."""
    heads = [unit_heading(f"{name.split('_')[0]}_ms_{name.split('_')[1]}") for name in
             SERVING_FIGURES]  # fmt: skip
    lines = [
        "| run | engine | precision | prompt/output | level | "
        + " | ".join(f"{head} measured / predicted" for head in heads)
        + " |",
        "|---|---|---|---|---|" + "---:|" * len(heads),
    ]
    for row in validation.levels:
        level = f"{'c' if row.over == 'concurrency' else ''}{fmt(row.level, 1)}" + (
            " req/s" if row.over == "rate" else ""
        )
        cells = []
        for name in SERVING_FIGURES:
            measured, predicted = row.measured.get(name), row.predicted.get(name)
            digits = 1 if name.startswith("tpot") else 0
            cells.append(
                f"{fmt(measured, digits)} / {fmt(predicted, digits)} ({pct(row.error(name))})"
            )
        lines.append(
            f"| {row.run_id} | {row.framework} | {row.precision_class} | {row.shape} | "
            f"{level} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def serving_summary_table(validation) -> str:
    """Median |error| of every figure, calibrated (leave-one-out) and uncalibrated."""
    lines = [
        "| figure | levels | median abs error, calibrated (leave-one-out) | uncalibrated |",
        "|---|---:|---:|---:|",
        f"| SLO capacity | {len(validation.capacities)} | "
        f"{fmt(100 * validation.capacity_median_error(), 1)}% | "
        f"{fmt(100 * validation.capacity_median_error(False), 1)}% |",
    ]
    for name in SERVING_FIGURES:
        label, level = name.split("_")
        shown = unit_heading(f"{label}_ms_{level}").rsplit(" ", 1)[0]
        count = sum(1 for row in validation.levels if row.error(name) is not None)
        lines.append(
            f"| {shown} | {count} | {fmt(100 * validation.median_error(name), 1)}% | "
            f"{fmt(100 * validation.median_error(name, False), 1)}% |"
        )
    return "\n".join(lines)


# ------------------------------------------------------- the serving model on an unseen GPU

UNSEEN_GPU_RUNS = (
    "h100_llama2-7b_capacity_heldout_runs.json",
    "h100_llama2-7b_capacity_heldout_long_runs.json",
)
"""The held-out capacity searches on the GPU no other shipped run is on, one per workload the
calibration did not contain (docs/capacity-model.md)."""
UNSEEN_GPU_SERVE = "h100_llama2-7b_calibration/vllm-bench-serve.tar.xz"
"""`vllm bench serve --save-result` files of the same GPU (members vbs/*.json), each set beside
the search of its prompt length."""
BASIS_NAMES = {
    "uncalibrated": "uncalibrated",
    "other GPU only": "calibrated on {other} only",
    "this GPU": "calibrated on {gpu} (`bench calibrate`)",
}


def unseen_gpu_checks(reference_dir: Path = REFERENCE_DIR) -> list:  # advisor UnseenGpuCheck
    """Each held-out search predicted uncalibrated, from the other GPU's runs and from the
    GPU's own calibration record (advisor/sizing/unseen_gpu.py); [] when none is shipped."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import tarfile

    from advisor.sizing.calibration_fit import shipped_records
    from advisor.sizing.measured import measured_reference_runs
    from advisor.sizing.mechanism_validation import matching_record
    from advisor.sizing.serving_model import run_shape
    from advisor.sizing.unseen_gpu import VllmBenchServeResult, check_unseen_gpu, serve_level

    runs = measured_reference_runs(reference_dir)
    shapes = [s for s in (run_shape(r) for rs in runs.values() for r in rs) if s is not None]
    serve = []
    archive = reference_dir / UNSEEN_GPU_SERVE
    if archive.is_file():
        with tarfile.open(archive) as tar:
            for member in sorted(tar.getmembers(), key=lambda m: m.name):
                if member.isfile() and member.name.endswith(".json"):
                    data = tar.extractfile(member).read()
                    source = f"data/reference/{UNSEEN_GPU_SERVE}:{member.name}"
                    result = VllmBenchServeResult.model_validate_json(data)
                    serve.append(serve_level(result, source))
    records = shipped_records(reference_dir)
    checks = []
    for name in UNSEEN_GPU_RUNS:
        for run in runs.get(name, []):
            target = run_shape(run, require_valid=False)
            record = matching_record(records, target) if target is not None else None
            if record is None:
                continue
            found = check_unseen_gpu(run, record, shapes, f"data/reference/{name}", serve)
            if found is not None:
                checks.append(found)
    return checks


def unseen_summary_table(checks) -> str:
    """Per basis over every held-out search: median and worst |error|, intervals that hold."""
    if not checks:
        return ""
    from advisor.sizing.unseen_gpu import summarize_unseen

    lines = [
        "| basis | searches | median abs error | worst abs error | intervals that hold |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in summarize_unseen(checks):
        lines.append(
            f"| {basis_name(checks[0], row.kind)} | {row.searches} | "
            f"{fmt(100 * row.median_abs_error, 1)}% | {fmt(100 * row.worst_abs_error, 1)}% | "
            f"{row.covered} of {row.searches} |"
        )
    return "\n".join(lines)


def basis_name(check, kind: str) -> str:
    return BASIS_NAMES[kind].format(other=check.other_gpu, gpu=check.gpu)


def unseen_capacity_table(check) -> str:
    """The held-out search's capacity under each basis, beside the measured rate."""
    if check is None:
        return "(no held-out search on a GPU the model was not fitted on is shipped)"
    lines = [
        "| basis | predicted req/s | interval | covers | error |",
        "|---|---:|---|---|---:|",
    ]
    for row in check.capacities:
        lines.append(
            f"| {basis_name(check, row.kind)} | {fmt(row.predicted_rps, 1)} | "
            f"{fmt(row.low_rps, 1)}–{fmt(row.high_rps, 1)} | {'yes' if row.covered else 'no'} | "
            f"{pct(row.error, 1)} |"
        )
    return "\n".join(lines)


def unseen_latency_table(check) -> str:
    """Median (worst) |error| of each latency figure over the search's feasible probes."""
    if check is None:
        return ""
    heads = [unit_heading(f"{n.split('_')[0]}_ms_{n.split('_')[1]}") for n in SERVING_FIGURES]
    lines = [
        "| basis | levels | " + " | ".join(heads) + " |",
        "|---|---:|" + "---:|" * len(heads),
    ]
    for basis in check.bases:
        found = {e.figure: e for e in check.errors if e.kind == basis.kind}
        count = max((e.levels for e in found.values()), default=0)
        cells = [
            f"{fmt(100 * found[n].median_abs_error)}% ({fmt(100 * found[n].worst_abs_error)}%)"
            if n in found
            else "-"
            for n in SERVING_FIGURES
        ]
        lines.append(f"| {basis_name(check, basis.kind)} | {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def unseen_serve_table(check) -> str:
    """Each `vllm bench serve` level: measured, then each basis' simulation of it."""
    if check is None or not check.serve_levels:
        return ""
    heads = [unit_heading(f"{n.split('_')[0]}_ms_{n.split('_')[1]}") for n in SERVING_FIGURES]
    lines = ["| | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(heads)]
    for item in check.serve_levels:
        level = item.level
        lines.append(
            f"| measured: {fmt(level.rate_rps, 2)} req/s, {level.requests:,} requests "
            f"(achieved {fmt(level.throughput_rps, 1)}, goodput {fmt(level.goodput_rps, 1)}) | "
            + " | ".join(
                fmt(level.measured[n], 1 if n.startswith("tpot") else 0) for n in SERVING_FIGURES
            )
            + " |"
        )
        for kind, figures in item.predicted.items():
            cells = []
            for n in SERVING_FIGURES:
                value, measured = figures.get(n), level.measured[n]
                digits = 1 if n.startswith("tpot") else 0
                cells.append(f"{fmt(value, digits)} ({pct((value - measured) / measured)})")
            lines.append(f"| {basis_name(check, kind)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


LONG_CONTEXT_RUNS = "h100_llama3.1-8b_long_context_prefill_runs.json"
"""The long-context prefill sweep: one request at a time, prompts 8,000-112,000 tokens."""
LONG_CONTEXT_RECORDS = "h100_llama3.1-8b_long_context/steps-lc.tgz"
"""Its raw campaign folder, whose records.jsonl gives each request's prompt length and TTFT."""


def long_context_check(reference_dir: Path = REFERENCE_DIR):  # advisor LongContextCheck | None
    """The sweep's requests predicted one by one (advisor/sizing/long_context.py)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import tarfile

    from advisor.sizing.calibration_fit import shipped_records
    from advisor.sizing.long_context import check_long_context, shape_at
    from advisor.sizing.measured import measured_reference_runs
    from advisor.sizing.mechanism_validation import matching_record
    from advisor.sizing.serving_model import run_shape
    from bench.core.schema import RequestRecord

    runs = measured_reference_runs(reference_dir)
    archive = reference_dir / LONG_CONTEXT_RECORDS
    if not runs.get(LONG_CONTEXT_RUNS) or not archive.is_file():
        return None
    (run,) = runs[LONG_CONTEXT_RUNS]
    with tarfile.open(archive) as tar:
        (member,) = [m for m in tar.getmembers() if m.name.endswith("records.jsonl")]
        lines = tar.extractfile(member).read().decode("utf-8").splitlines()
    requests = [RequestRecord.model_validate_json(line) for line in lines if line.strip()]
    if not requests:
        return None
    # the record of the sweep's engine, GPU and precision (its prompts spread too wide for
    # run_shape: one request's length stands for them)
    target = shape_at(run, requests[0].input_tokens)
    record = matching_record(shipped_records(reference_dir), target) if target else None
    if record is None:
        return None
    shapes = [s for s in (run_shape(r) for rs in runs.values() for r in rs) if s is not None]
    return check_long_context(run, requests, record, shapes, f"data/reference/{LONG_CONTEXT_RUNS}")


def long_context_table(check) -> str:
    """Each request: prompt tokens, measured TTFT, each basis' TTFT (error); then the errors."""
    if check is None:
        return "(no long-context prefill sweep is shipped)"
    names = {
        "uncalibrated": "uncalibrated",
        "other GPU only": "calibrated on H200 only",
        "this GPU": f"{check.gpu} record",
        "this GPU, no attention FLOPs": f"{check.gpu} record, no attention FLOPs",
    }
    lines = [
        "| prompt tokens | TTFT ms measured | "
        + " | ".join(names.get(b, b) for b in check.bases)
        + " |",
        "|---:|---:|" + "---:|" * len(check.bases),
    ]
    for row in check.rows:
        cells = []
        for basis in check.bases:
            value = row.predicted_ttft_ms.get(basis)
            cells.append(
                "-"
                if value is None
                else f"{fmt(value)} ({pct((value - row.measured_ttft_ms) / row.measured_ttft_ms)})"
            )
        lines.append(
            f"| {row.prompt_tokens:,} | {fmt(row.measured_ttft_ms)} | " + " | ".join(cells) + " |"
        )
    lines.append(
        "| median (worst) error | | "
        + " | ".join(
            next(
                (
                    f"{pct(e.median_error)} ({fmt(100 * e.worst_abs_error)}%)"
                    for e in check.errors
                    if e.basis == basis
                ),
                "-",
            )
            for basis in check.bases
        )
        + " |"
    )
    return "\n".join(lines)


def prefix_table(reference_dir: Path = REFERENCE_DIR) -> str:
    """Each shipped run with reused prompt tokens: the engine model's served-from-cache share
    beside vLLM's own counters (advisor/sizing/prefix_validation.py)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from advisor.sizing.measured import measured_reference_runs
    from advisor.sizing.prefix_validation import prefix_rows

    runs = measured_reference_runs(reference_dir)
    rows = prefix_rows((run, name) for name, file_runs in runs.items() for run in file_runs)
    if not rows:
        return "(no shipped run reuses prompt tokens)"
    lines = [
        "| run | measured on | engine | traffic | caching | prompt tokens | served from cache, "
        "predicted | measured (vLLM's counters) | error |",
        "|---|---|---|---|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.run_id} | {row.device} | {row.framework} | {row.reuse} | "
            f"{'on' if row.caching else 'off'} | {fmt(row.prompt_tokens)} | "
            f"{fmt(100 * row.predicted_share, 1)}% | {fmt(100 * row.measured_share, 1)}% | "
            f"{row.error_points:+.1f} points |"
        )
    return "\n".join(lines)


def mechanism_checks(reference_dir: Path = REFERENCE_DIR):  # list[advisor MechanismRun]
    """Every shipped GPU run of prefix caching, MoE or long context under load, predicted
    level by level (advisor/sizing/mechanism_validation.py)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from advisor.sizing.calibration_fit import shipped_records
    from advisor.sizing.measured import measured_reference_runs
    from advisor.sizing.mechanism_validation import check_mechanisms

    runs = measured_reference_runs(reference_dir)
    pairs = [(run, f"data/reference/{name}") for name, rs in runs.items() for run in rs]
    return check_mechanisms(pairs, shipped_records(reference_dir))


def mechanism_summary_table(checks) -> str:
    """Per run: the median |error| of TPOT p50 and TTFT p50 over its levels, per basis."""
    if not checks:
        return "(no shipped GPU run measures prefix caching, MoE or long context)"
    names = {"uncalibrated": "uncalibrated", "this GPU": "GPU's record"}
    bases = []
    for check in checks:
        bases += [b for b in check.bases if b not in bases]
    lines = [
        "| mechanic | traffic | caching | chunk | median abs error TPOT p50 / TTFT p50: "
        + " | ".join(names.get(b, b) for b in bases)
        + " |",
        "|---|---|---|---:|" + "---:|" * len(bases),
    ]

    def cell(check, basis) -> str:
        if basis not in check.bases:
            return "-"
        tpot = check.median_abs_error(basis, "tpot_p50")
        ttft = check.median_abs_error(basis, "ttft_p50")
        return " / ".join("-" if e is None else f"{100 * e:.0f}%" for e in (tpot, ttft))

    for check in checks:
        lines.append(
            f"| {check.mechanism} | {check.traffic} | {'on' if check.caching else 'off'} | "
            f"{check.token_budget:,} | " + " | ".join(cell(check, b) for b in bases) + " |"
        )
    return "\n".join(lines)


def mechanism_table(checks, mechanism: str) -> str:
    """One mechanic's runs: per closed-loop level, measured TTFT/TPOT p50 and p99 beside each
    basis' prediction (error)."""
    from advisor.sizing.mechanism_validation import FIGURES, LEFT_OUT_WORDS

    rows = [c for c in checks if c.mechanism == mechanism]
    if not rows:
        return f"(no shipped GPU run measures {mechanism})"
    names = {"uncalibrated": "uncalibrated", "this GPU": "GPU's record"}
    labels = {
        "ttft_p50": "TTFT p50",
        "ttft_p99": "TTFT p99",
        "tpot_p50": "TPOT p50",
        "tpot_p99": "TPOT p99",
    }
    out = []
    for check in rows:
        bases = check.bases
        out.append(
            f"**{check.traffic}**, {check.model}, caching {'on' if check.caching else 'off'}, "
            f"chunk {check.token_budget:,} tokens — run {check.run_id} (`{check.reference}`)"
            + (f"; GPU's record {check.record}" if check.record else "")
            + f"; left out = {LEFT_OUT_WORDS[check.mechanism]}"
        )
        out.append("")
        out.append(
            "| level | figure | measured ms | " + " | ".join(names.get(b, b) for b in bases) + " |"
        )
        out.append("|---|---|---:|" + "---:|" * len(bases))
        for level in check.levels:
            for figure in FIGURES:
                measured = level.measured.get(figure)
                if measured is None:
                    continue
                cells = []
                for basis in bases:
                    value = level.predicted.get(basis, {}).get(figure)
                    error = level.error(basis, figure)
                    cells.append("-" if value is None else f"{fmt(value)} ({pct(error)})")
                out.append(
                    f"| c{level.concurrency} | {labels[figure]} | {fmt(measured)} | "
                    + " | ".join(cells)
                    + " |"
                )
        for figure, label in (("tpot_p50", "TPOT p50"), ("ttft_p50", "TTFT p50")):
            errors = (check.median_abs_error(b, figure) for b in bases)
            out.append(
                f"| median abs error | {label} | | "
                + " | ".join("-" if e is None else f"{100 * e:.0f}%" for e in errors)
                + " |"
            )
        out.append("")
    return "\n".join(out).rstrip()


# --------------------------------------------------------------------------- the docs


def kv_pool_table(reference_dir: Path = REFERENCE_DIR) -> str:
    """The memory rule's KV pool beside the one vLLM reported, per shipped engine start."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from advisor.sizing.memory_validation import kv_pool_checks

    lines = [
        "| GPU | model | precision | gpu_memory_utilization | vLLM's pool (tokens) | "
        "the rule's (tokens) | error | run |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for check in kv_pool_checks(reference_dir):
        lines.append(
            f"| {check.gpu} | {check.model} | {check.precision} | {check.utilization:g} | "
            f"{check.reported_tokens:,} | {check.predicted_tokens:,} | {check.error:+.1%} | "
            f"{check.run_id} |"
        )
    return "\n".join(lines)


def render(reference_dir: Path = REFERENCE_DIR) -> dict[str, str]:
    """Each generated doc's text (path relative to docs/ -> Markdown)."""
    files, folders = run_files(reference_dir), campaign_dirs(reference_dir)
    runs = load_runs(files)
    serving = serving_validation(reference_dir)
    unseen = unseen_gpu_checks(reference_dir)
    long_context = long_context_check(reference_dir)
    mechanisms = mechanism_checks(reference_dir)
    context = {
        "runs": runs,
        "folders": folders,
        "files": [rel(path) for path in files],
        "folder_names": [rel(path) for path in folders],
        "versions": library_versions(runs),
        "gpu_tags": gpu_tags(runs),
        "tables": {
            "llm": llm_table(runs),
            "run_level": run_level_table(runs),
            "fidelity": fidelity_table(folders),
            "vllm_reference": vllm_reference_table(folders),
            "quick_plan": quick_plan_table(folders),
            "forward": forward_table(runs),
            "held_load": held_load_table(runs),
            "capacity": capacity_table(runs),
            "client_fidelity": client_fidelity_table(reference_dir),
            "serving_capacity": serving_capacity_table(serving),
            "serving_levels": serving_level_table(serving),
            "serving_summary": serving_summary_table(serving),
            "unseen_summary": unseen_summary_table(unseen),
            "prefix": prefix_table(reference_dir),
            "long_context": long_context_table(long_context),
            "mechanism_summary": mechanism_summary_table(mechanisms),
            "kv_pool": kv_pool_table(reference_dir),
            "mechanism_prefix": mechanism_table(mechanisms, "prefix caching"),
            "mechanism_moe": mechanism_table(mechanisms, "mixture-of-experts"),
            "mechanism_long": mechanism_table(mechanisms, "long context"),
        },
        "serving": serving,
        "unseen": unseen,
        "long_context": long_context,
        "mechanisms": mechanisms,
        "unseen_capacity": unseen_capacity_table,
        "unseen_latency": unseen_latency_table,
        "unseen_serve": unseen_serve_table,
        "basis_name": lambda kind: basis_name(unseen[0], kind),
        "fmt": fmt,
        "pct": pct,
        "tok_s": lambda *a: tok_s(runs, *a),
        "phase": lambda *a: ladder_phase(runs, *a)[0],
        "ladder_run": lambda *a: ladder_run(runs, *a)[0],
        "ratios": lambda *a: ratios(runs, *a),
        "ratio": lambda *a: ratio(runs, *a),
        "precision_ratios": lambda *a: precision_ratios(runs, *a),
        "precision_run": lambda *a: ladder_run(runs, *a)[0],
        "precision_phase": lambda *a: ladder_phase(runs, *a)[0],
        "decode_floor": decode_floor,
        "forward_ratio_range": lambda *a: forward_ratio_range(runs, *a),
        "quick_plan": lambda name: quick_plan(folders, name),
        "vllm_graph_compile_s": lambda folder, archive, run: vllm_graph_compile_s(
            reference_dir / folder / archive, run
        ),
        "fidelity_steps": fidelity_steps(folders),
        "plain_generate_spread": lambda *names: plain_generate_spread(folders, set(names)),
        "fidelity": fidelity_facts(folders),
        "vllm_reference": {
            path.parent.parent.name: json.loads(path.read_text())
            for path in sorted(reference_dir.glob("h200_*/vllm-reference/offline_*.json"))
        },
    }
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,  # a misspelt figure fails, never renders empty
        keep_trailing_newline=True,
        autoescape=False,  # Markdown, not HTML
    )
    return {
        doc: environment.get_template(template).render(context) for doc, template in DOCS.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-dir", type=Path, default=REFERENCE_DIR)
    parser.add_argument("--docs-dir", type=Path, default=ROOT / "docs")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if a doc is out of date"
    )
    args = parser.parse_args()
    stale = []
    for doc, text in render(args.reference_dir).items():
        path = args.docs_dir / doc
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(doc)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(f"wrote {rel(path)}")
    if stale:
        print(f"out of date (run python benchmarks/reference_tables.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
