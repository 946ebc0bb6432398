"""GPU campaign: the reference runs of the issues, run on a lent GPU through the bench's own entry.

Usage (on the GPU host, from the repo root):
    python benchmarks/gpu_campaign.py --plan llm7b --out $OUT/llm7b --budget-s 540

Each plan is a list of steps; every step is a `bench.api.launch` run (or a fidelity check against
the engine's own offline API). Steps that would overrun the time budget are skipped and listed as
such. Output: `campaign.json` (environment fingerprint, every run's config, exact command, summary,
telemetry, validity; fidelity ratios; skipped steps) — the file committed to data/reference/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.config import (
    ConcurrencyLoad,
    ForwardWorkload,
    GenerateWorkload,
    LengthDistribution,
    Precision,
    RunConfig,
    StepLoad,
    ValidityRules,
)

LEVELS = [1, 16, 64, 256]
DEVICE = os.environ.get("CAMPAIGN_DEVICE", "cuda")  # "cpu" for a dry run here


def generate_workload(prompt: int = 128, output: int = 128) -> GenerateWorkload:
    return GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=prompt), output_tokens=LengthDistribution(mean=output)
    )


def ladder(levels: list[int], stage_s: float, warmup: int = 4) -> StepLoad:
    return StepLoad(
        levels=levels,
        stage_duration_s=stage_s,
        stop_at_knee=False,
        warmup_requests=warmup,
        request_timeout_s=300,
        max_duration_s=900,
    )


def llm_run(
    backend: str, model: str, levels: list[int], stage_s: float, **engine_args
) -> RunConfig:
    return RunConfig(
        backend=backend,
        model=model,
        engine_args=engine_args,
        workload=generate_workload(),
        load=ladder(levels, stage_s),
        precision=Precision(dtype="float16"),
        device=DEVICE,
        validity=ValidityRules(min_duration_s=5, min_requests=5),
        watchdog_s=600,
        label=f"{backend} {model} 128/128",
    )


def forward_run(backend: str, model: str, batch: int, seconds: float, **kw) -> RunConfig:
    workload = (
        ForwardWorkload(batch_size=batch, sequence_length=LengthDistribution(mean=128))
        if "bert" in model
        else ForwardWorkload(batch_size=batch, image_size=224)
    )
    return RunConfig(
        backend=backend,
        model=model,
        engine_args=kw,
        workload=workload,
        load=ConcurrencyLoad(concurrency=1, duration_s=seconds, warmup_requests=5),
        precision=Precision(dtype="float16"),
        device=DEVICE,
        validity=ValidityRules(min_duration_s=3, min_requests=10),
        label=f"{backend} {model} batch {batch}",
    )


# --------------------------------------------------------------------------- steps


def step_launch(config: RunConfig, store, out: Path) -> dict[str, Any]:
    from bench.api import launch

    result = launch(config, store=store, out_dir=out / "runs" / config.label.replace(" ", "_"))
    return {"kind": "run", "result": _compact(result)}


def _compact(result) -> dict[str, Any]:
    data = result.model_dump(mode="json")
    data["telemetry"].pop("samples", None)  # the per-tick series stays in the run folder
    data.pop("environment", None)  # one fingerprint per campaign, at the top
    return data


def step_vllm_fidelity(
    model: str,
    concurrency: int,
    requests: int,
    store,
    out: Path,
    client_concurrency: int | None = None,
    event_loop: str = "asyncio",
    **engine_args,
) -> dict[str, Any]:
    """bench.fidelity's vLLM check (the backend vs LLM.generate on the same prompts)."""
    from bench.fidelity import VllmFidelityCheck, run_check

    check = VllmFidelityCheck(
        model=model,
        device=DEVICE,
        requests=requests,
        max_num_seqs=concurrency,
        client_concurrency=client_concurrency,
        event_loop=event_loop,
        engine_args=engine_args,
    )
    return {"kind": "fidelity", **run_check(check, store, out).model_dump(mode="json")}


def step_pytorch_fidelity(
    model: str,
    batch: int,
    store,
    out: Path,
    telemetry_interval_s: float = 0.5,
    rounds: int = 1,
) -> dict[str, Any]:
    """bench.fidelity's PyTorch check in launch mode (each side in its own process)."""
    from bench.fidelity import PytorchFidelityCheck, run_check

    check = PytorchFidelityCheck(
        model=model,
        device=DEVICE,
        batch=batch,
        mode="launch",
        rounds=rounds,
        telemetry_interval_s=telemetry_interval_s,
    )
    return {"kind": "fidelity", **run_check(check, store, out).model_dump(mode="json")}


def step_pytorch_paired_fidelity(model: str, batch: int, pairs: int) -> dict[str, Any]:
    """bench.fidelity's PyTorch check in paired mode (one process, ABBA)."""
    from bench.fidelity import PytorchFidelityCheck, run_check

    check = PytorchFidelityCheck(model=model, device=DEVICE, batch=batch, pairs=pairs)
    return {"kind": "fidelity_paired", **run_check(check).model_dump(mode="json")}


def step_openai_vllm_serve(
    model: str, levels: list[int], stage_s: float, store, out: Path, **engine_args
) -> dict[str, Any]:
    from bench.api import launch
    from bench.launchers import ServerLauncher, free_port, vllm_serve_command
    from bench.models import resolve_model

    info = resolve_model(model, dtype="float16")
    port = free_port()
    command = vllm_serve_command(info.path, port, engine_args, dtype="float16")
    log = out / "vllm_serve.log"
    started = time.monotonic()
    base_url = f"http://127.0.0.1:{port}"
    with ServerLauncher(command, base_url, log, startup_timeout_s=600) as server:
        ready_s = time.monotonic() - started
        config = RunConfig(
            backend="openai",
            model=model,
            engine_args={
                "base_url": server.base_url,
                "prompt_format": "tokens",
                "scrape_metrics": True,
            },
            workload=generate_workload(),
            load=ladder(levels, stage_s),
            precision=Precision(dtype="float16"),
            device=DEVICE,
            validity=ValidityRules(min_duration_s=5, min_requests=5),
            label=f"openai vllm-serve {model}",
        )
        result = launch(config, store=store, out_dir=out / "runs" / "openai_vllm_serve")
    return {
        "kind": "run",
        "server_command": command,
        "server_ready_s": ready_s,
        "result": _compact(result),
    }


def quick_plan_configs(model: str) -> list[RunConfig]:
    """The advisor's quick plan for a long-generation profile of `model` on an H200, limited to
    the backends installed here, as the app's Quick plan button makes it."""
    from advisor.plan import plan_for_stage
    from advisor.profile import profile_from_dict
    from bench.backends import get_backend

    profile = profile_from_dict(
        {"model": model, "gpu": {"type": "H200"}, "long_sequence_generation": True}
    )
    return [
        config.model_copy(update={"device": DEVICE})
        for config in plan_for_stage(profile.primary, quick=True).configs
        if get_backend(config.backend).availability().available
    ]


def step_quick_plan(model: str, store, out: Path) -> dict[str, Any]:
    """Time the advisor's quick plan end to end (model loads included)."""
    from bench.api import launch

    configs = quick_plan_configs(model)
    started = time.monotonic()
    runs = []
    for config in configs:
        result = launch(config, store=store, out_dir=out / "runs" / f"quick_{config.backend}")
        runs.append(_compact(result))
    return {
        "kind": "quick_plan",
        "wall_s": time.monotonic() - started,
        "backends": [c.backend for c in configs],
        "runs": runs,
    }


# --------------------------------------------------------------------------- plans


def plans(name: str, m7: str = "llama-2-7b", m13: str = "llama-2-13b"):
    vllm_args = {"gpu_memory_utilization": 0.85, "max_num_seqs": 256, "max_model_len": 1024}
    if name == "llm7b":
        yield (
            "vllm ladder",
            lambda s, o: step_launch(llm_run("vllm", m7, LEVELS, 15, **vllm_args), s, o),
        )
        yield (
            "vllm fidelity",
            lambda s, o: step_vllm_fidelity(m7, 256, 1024, s, o, **vllm_args),
        )
        yield (
            "pytorch ladder",
            lambda s, o: step_launch(
                llm_run("pytorch", m7, LEVELS, 20, max_batch_size=256, batch_wait_ms=10), s, o
            ),
        )
        yield "pytorch fidelity", lambda s, o: step_pytorch_fidelity(m7, 64, s, o)
        yield (
            "torch_compile ladder",
            lambda s, o: step_launch(
                llm_run("torch_compile", m7, [1, 16, 64], 20, max_batch_size=64), s, o
            ),
        )
    elif name == "serve7b":
        yield (
            "openai vllm serve",
            lambda s, o: step_openai_vllm_serve(m7, LEVELS, 15, s, o, **vllm_args),
        )
        yield "quick plan", lambda s, o: step_quick_plan(m7, s, o)
    elif name == "llm13b":
        yield (
            "vllm 13b ladder",
            lambda s, o: step_launch(llm_run("vllm", m13, LEVELS, 15, **vllm_args), s, o),
        )
        yield (
            "pytorch 13b ladder",
            lambda s, o: step_launch(
                llm_run("pytorch", m13, LEVELS, 20, max_batch_size=256, batch_wait_ms=10), s, o
            ),
        )
        yield (
            "torch_compile 13b",
            lambda s, o: step_launch(
                llm_run("torch_compile", m13, [1, 16, 64], 20, max_batch_size=64), s, o
            ),
        )
    elif name == "forward":
        for model in ("bert-base", "resnet-50"):
            for batch in (1, 8, 64):
                yield f"pytorch {model} {batch}", _fwd("pytorch", model, batch)
                yield (
                    f"torch_compile {model} {batch}",
                    _fwd("torch_compile", model, batch, mode="max-autotune-no-cudagraphs"),
                )
                yield (
                    f"onnxruntime {model} {batch}",
                    _fwd("onnxruntime", model, batch, provider="cuda"),
                )
    elif name == "round2":
        yield "pytorch fidelity", lambda s, o: step_pytorch_fidelity(m7, 64, s, o)
        yield (
            "openai vllm serve",
            lambda s, o: step_openai_vllm_serve(m7, LEVELS, 8, s, o, **vllm_args),
        )
        for model in ("bert-base", "resnet-50"):
            for batch in (1, 8, 64):
                yield f"pytorch {model} {batch}", _fwd("pytorch", model, batch)
                yield (
                    f"onnxruntime {model} {batch}",
                    _fwd("onnxruntime", model, batch, provider="cuda"),
                )
        for model in ("bert-base", "resnet-50"):
            for batch in (1, 8, 64):
                yield (
                    f"torch_compile {model} {batch}",
                    _fwd("torch_compile", model, batch, mode="reduce-overhead"),
                )
        yield (
            "torch_compile ladder",
            lambda s, o: step_launch(
                llm_run("torch_compile", m7, [1, 16], 15, max_batch_size=16), s, o
            ),
        )
    elif name == "round3":
        yield "onnxruntime resnet-50 64", _fwd("onnxruntime", "resnet-50", 64, provider="cuda")
        for model in ("resnet-50", "bert-base"):
            yield (
                f"torch_compile {model} 8",
                _fwd("torch_compile", model, 8, mode="reduce-overhead"),
            )
    elif name == "s3a":  # second session: fidelity re-checks, torch_compile 7B, quick plan
        yield (
            "vllm fidelity",
            lambda s, o: step_vllm_fidelity(m7, 256, 1024, s, o, **vllm_args),
        )
        yield "pytorch fidelity", lambda s, o: step_pytorch_fidelity(m7, 64, s, o)
        yield "quick plan", lambda s, o: step_quick_plan(m7, s, o)
        yield "torch_compile ladder", _compiled_ladder(m7, stage_s=10)
    elif name == "s3b":  # second session: llama-2-13b, torch_compile forward at batch 1 and 64
        yield (
            "vllm 13b ladder",
            lambda s, o: step_launch(llm_run("vllm", m13, LEVELS, 10, **vllm_args), s, o),
        )
        yield (
            "pytorch 13b ladder",
            lambda s, o: step_launch(
                llm_run("pytorch", m13, LEVELS, 20, max_batch_size=256, batch_wait_ms=10), s, o
            ),
        )
        for model in ("bert-base", "resnet-50"):
            for batch in (1, 64):
                yield (
                    f"torch_compile {model} {batch}",
                    _fwd("torch_compile", model, batch, mode="reduce-overhead"),
                )
        yield "torch_compile 13b", _compiled_ladder(m13, stage_s=15)
    elif name == "s4":  # session 3: like-for-like vLLM fidelity, PyTorch fidelity, quick plan
        yield "vllm fidelity all at once", _vllm_fidelity_all_at_once(m7, vllm_args)
        yield (
            "pytorch fidelity, 3 interleaved rounds",
            lambda s, o: step_pytorch_fidelity(m7, 64, s, o, rounds=3),
        )
        yield (
            "pytorch fidelity, slow NVML sampling",
            lambda s, o: step_pytorch_fidelity(m7, 64, s, o, telemetry_interval_s=5.0),
        )
        yield "quick plan", lambda s, o: step_quick_plan(m7, s, o)
        yield "onnxruntime genai 7b", _genai_ladder(m7)
    elif name == "s5":  # session 3, second machine: vLLM fidelity beside vllm_async_overhead.sh
        yield "vllm fidelity all at once", _vllm_fidelity_all_at_once(m7, vllm_args)
    elif name == "s6":  # session 4: PyTorch paired; vLLM with the corrected reference, both loops
        yield (
            "pytorch fidelity, paired in one process",
            lambda s, o: step_pytorch_paired_fidelity(m7, 64, pairs=10),
        )
        for loop in ("asyncio", "uvloop"):
            yield (
                f"vllm fidelity all at once, {loop}",
                _vllm_fidelity_all_at_once(m7, vllm_args, event_loop=loop),
            )
        yield (
            "pytorch fidelity through the worker, 1 round",
            lambda s, o: step_pytorch_fidelity(m7, 64, s, o),
        )
    elif name == "s7":  # session 4: torch_compile at concurrency 256 (sessions 1-2 ran 1/16/64)
        yield "torch_compile c256 7b", _compiled_ladder(m7, 15, levels=[256])
        yield "torch_compile c256 13b", _compiled_ladder(m13, 15, levels=[256])
    elif name == "ort7b":
        yield "onnxruntime genai 7b", _genai_ladder(m7)
    else:
        raise SystemExit(f"unknown plan {name}")


def _vllm_fidelity_all_at_once(model: str, vllm_args: dict[str, Any], event_loop: str = "asyncio"):
    """All 1,024 requests handed to the backend at once (engine max_num_seqs 256) vs
    `LLM.generate` of the same prompts: only the harness differs."""
    return lambda s, o: step_vllm_fidelity(
        model, 256, 1024, s, o, client_concurrency=1024, event_loop=event_loop, **vllm_args
    )


def _compiled_ladder(model: str, stage_s: float, levels: list[int] | None = None):
    """`torch_compile` at concurrency 1/16/64 (or `levels`), one compiled static-cache bucket
    per level."""
    levels = levels or [1, 16, 64]
    config = llm_run(
        "torch_compile", model, levels, stage_s, max_batch_size=max(levels), batch_buckets=levels
    )
    return lambda s, o: step_launch(config, s, o)


def _genai_ladder(model: str):
    """onnxruntime-genai (model builder fp16, CUDA) at concurrency 1 and 16."""
    config = llm_run("onnxruntime", model, [1, 16], 20, provider="cuda", precision="fp16")
    return lambda s, o: step_launch(config, s, o)


def _fwd(backend: str, model: str, batch: int, **kw):
    return lambda s, o: step_launch(forward_run(backend, model, batch, 5, **kw), s, o)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plan", action="append", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=540)
    parser.add_argument("--llm-model", default="llama-2-7b", help="tiny-llama for a dry run")
    parser.add_argument("--llm13-model", default="llama-2-13b", help="tiny-llama for a dry run")
    parser.add_argument(
        "--step-estimate-s",
        type=float,
        default=45,
        help="Skip a step when less than this is left of the budget.",
    )
    args = parser.parse_args()

    from bench.environment import fingerprint, preflight
    from bench.store import ResultStore

    args.out.mkdir(parents=True, exist_ok=True)
    store = ResultStore(args.out / "results.sqlite")
    started = time.monotonic()
    fp = fingerprint()
    campaign: dict[str, Any] = {
        "command": " ".join(["python", *sys.argv]),
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "environment": fp,
        "preflight": [p.model_dump() for p in preflight(fp)],
        "env_vars": {k: v for k, v in os.environ.items() if k.startswith(("VLLM", "CUDA"))},
        "steps": [],
    }
    for plan in args.plan:
        for name, fn in plans(plan, args.llm_model, args.llm13_model):
            elapsed = time.monotonic() - started
            entry: dict[str, Any] = {"plan": plan, "step": name}
            if args.budget_s - elapsed < args.step_estimate_s:
                entry["skipped"] = f"time budget: {elapsed:.0f} of {args.budget_s:.0f} s used"
            else:
                t0 = time.monotonic()
                try:
                    entry.update(fn(store, args.out))
                except Exception as exc:
                    entry["error"] = f"{type(exc).__name__}: {exc}"
                    entry["traceback"] = traceback.format_exc()[-3000:]
                entry["step_wall_s"] = round(time.monotonic() - t0, 1)
            campaign["steps"].append(entry)
            _print_entry(entry)
            (args.out / "campaign.json").write_text(json.dumps(campaign, indent=1, default=str))
    campaign["wall_s"] = round(time.monotonic() - started, 1)
    (args.out / "campaign.json").write_text(json.dumps(campaign, indent=1, default=str))


def _print_entry(entry: dict[str, Any]) -> None:
    line = f"[{entry.get('step_wall_s', 0):6.1f}s] {entry['step']}: "
    if "skipped" in entry:
        print(line + "SKIPPED " + entry["skipped"], flush=True)
        return
    if "error" in entry:
        print(line + "ERROR " + entry["error"], flush=True)
        return
    if entry.get("kind") == "fidelity_paired":
        print(
            line + f"{len(entry['pairs'])} pairs, medians plain "
            f"{entry['reference_output_throughput_tok_s']:.0f} / ours "
            f"{entry['backend_output_throughput_tok_s']:.0f} tok/s "
            f"| fidelity ratio (median pair) {entry['ratio']}",
            flush=True,
        )
        return
    result = entry.get("result") or {}
    summary = result.get("summary") or {}
    line += f"{result.get('status')} {summary.get('output_throughput_tok_s', 0):.0f} tok/s"
    for phase in result.get("phases", []):
        s = phase["summary"]
        ttft = (s.get("ttft_ms") or {}).get("p50", float("nan"))
        line += (
            f" | {phase['name']}: {s['request_throughput_rps']:.2f} rps "
            f"{s['output_throughput_tok_s']:.0f} tok/s ttft50 {ttft:.0f}ms"
        )
    if "ratio" in entry:
        line += f" | fidelity ratio {entry['ratio']}"
    if result.get("failure"):
        line += f" | FAILURE {result['failure']['cause']}"
    print(line, flush=True)


if __name__ == "__main__":
    main()
