"""Forward-kind comparison (not a unit test): one CV/encoder model at several batch sizes through
pytorch, torch_compile, onnxruntime (and tensorrt where installed), via `bench.run.api.launch`.

Each (backend, batch) is one isolated bench run: closed loop at concurrency 1, warm-up excluded,
compile/build time reported apart. Prints samples/s, p50/p99 latency and the ratio to eager
PyTorch (the article claims 2-4x for graph-optimised engines on CV models; this measures it).

  .venv/bin/python benchmarks/forward_compare.py --model resnet-50 --batches 1,8,64 \
      --dtype float16 --device cuda --duration-s 20 --json data/reference/forward-resnet50.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core.config import (
    ConcurrencyLoad,
    ForwardWorkload,
    LengthDistribution,
    Precision,
    RunConfig,
    ValidityRules,
)
from bench.core.errors import UserError
from bench.engines.backends import get_backend
from bench.run.api import launch

DEFAULT_BACKENDS = ("pytorch", "torch_compile", "onnxruntime", "tensorrt")
BASELINE = "pytorch"


def engine_args_for(backend: str, args: argparse.Namespace) -> dict[str, Any]:
    """Each framework at its experts' usual settings for fixed-shape inference."""
    if backend == "torch_compile":
        return {"mode": args.compile_mode}
    if backend == "onnxruntime":
        provider = "cuda" if args.device == "cuda" else "cpu"
        return {"provider": provider, "graph_optimization_level": "all", "enable_io_binding": True}
    return {}


def run_one(backend: str, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    workload = ForwardWorkload(
        batch_size=batch,
        sequence_length=LengthDistribution(mean=args.sequence_length) if args.text else None,
        image_size=args.image_size,
    )
    config = RunConfig(
        backend=backend,
        model=args.model,
        engine_args=engine_args_for(backend, args),
        workload=workload,
        load=ConcurrencyLoad(
            concurrency=1,
            duration_s=args.duration_s,
            warmup_requests=args.warmup_requests,
            request_timeout_s=600,
        ),
        validity=ValidityRules(min_duration_s=min(5.0, args.duration_s), min_requests=10),
        precision=Precision(dtype=args.dtype, allow_tf32=args.allow_tf32),
        device=args.device,
        watchdog_s=1800,
        label=f"forward_compare {args.model} b{batch}",
    )
    started = time.perf_counter()
    result = launch(config, out_dir=Path(args.out_dir) / f"{backend}-b{batch}")
    row: dict[str, Any] = {
        "backend": backend,
        "batch": batch,
        "status": str(result.status),
        "wall_s": round(time.perf_counter() - started, 1),
        "run_id": result.run_id,
        "command": result.command,
        "timings": result.timings.model_dump(),
        "engine": result.engine.model_dump(mode="json"),
        "validity": result.validity.model_dump() if result.validity else None,
    }
    if result.failure is not None:
        row["failure"] = result.failure.cause
    summary = result.summary
    if summary is not None and summary.e2e_ms is not None:
        row["samples_per_s"] = summary.request_throughput_rps * batch
        row["p50_ms"] = summary.e2e_ms.p50
        row["p99_ms"] = summary.e2e_ms.p99
        row["requests"] = summary.successful
    row["peak_gpu_memory_gb"] = result.telemetry.peak_gpu_memory_gb
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    baseline = {r["batch"]: r for r in rows if r["backend"] == BASELINE and "samples_per_s" in r}
    header = (
        f"{'backend':<14}{'batch':>6}{'samples/s':>12}{'p50 ms':>10}{'p99 ms':>10}"
        f"{'x eager':>9}{'build/compile s':>17}  status"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        timings = row.get("timings") or {}
        setup = timings.get("build_s") or timings.get("compile_s")
        setup_text = f"{setup:.1f}" if setup is not None else "-"
        if "samples_per_s" not in row:
            print(
                f"{row['backend']:<14}{row['batch']:>6}{'-':>12}{'-':>10}{'-':>10}{'-':>9}"
                f"{setup_text:>17}  {row['status']}: {row.get('failure', '')}"
            )
            continue
        base = baseline.get(row["batch"])
        ratio = f"{row['samples_per_s'] / base['samples_per_s']:.2f}" if base else "-"
        print(
            f"{row['backend']:<14}{row['batch']:>6}{row['samples_per_s']:>12.1f}"
            f"{row['p50_ms']:>10.2f}{row['p99_ms']:>10.2f}{ratio:>9}{setup_text:>17}"
            f"  {row['status']}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet-50", help="forward preset or checkpoint path")
    parser.add_argument("--batches", default="1,8,64")
    parser.add_argument("--backends", default=",".join(DEFAULT_BACKENDS))
    parser.add_argument("--dtype", default="float16", choices=["float32", "float16", "bfloat16"])
    parser.add_argument("--allow-tf32", action="store_true", help="same for every backend")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu", "auto"])
    parser.add_argument("--sequence-length", type=int, default=128, help="text models")
    parser.add_argument("--image-size", type=int, default=None, help="CV models (default 224)")
    parser.add_argument("--duration-s", type=float, default=20.0)
    parser.add_argument("--warmup-requests", type=int, default=10)
    parser.add_argument("--compile-mode", default="max-autotune")
    parser.add_argument("--out-dir", default="forward-compare-runs")
    parser.add_argument("--json", default=None, help="write all rows (with commands) here")
    args = parser.parse_args()

    from bench.engines.models import load_config, resolve_model

    info = resolve_model(args.model, dtype=args.dtype)
    if info.kind != "forward":
        raise SystemExit(f"{args.model} is a {info.kind} model; pick a forward preset")
    args.text = hasattr(load_config(info.path), "vocab_size")
    batches = [int(b) for b in args.batches.split(",") if b]
    rows: list[dict[str, Any]] = []
    for backend in [b for b in args.backends.split(",") if b]:
        availability = get_backend(backend).availability()
        if not availability.available:
            print(f"skip {backend}: {availability.reason}", flush=True)
            continue
        for batch in batches:
            print(f"running {backend} batch {batch} ...", flush=True)
            try:
                rows.append(run_one(backend, batch, args))
            except UserError as exc:
                rows.append(
                    {
                        "backend": backend,
                        "batch": batch,
                        "status": "USER_ERROR",
                        "failure": str(exc),
                    }
                )
    print()
    print(
        f"model {args.model}, dtype {args.dtype}, TF32 {'on' if args.allow_tf32 else 'off'}, "
        f"device {args.device}, concurrency 1, {args.duration_s:.0f} s per run"
    )
    print_table(rows)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
