"""What a GPU's tensor cores sustain on the work an LLM engine's step does: dense GEMMs at
prefill-chunk and decode shapes, and attention of a prompt chunk over a long context, in TFLOP/s
and as a share of the datasheet peak. The engine model (advisor/sizing/engine_model/) takes its
compute ceiling from here: a calibration may not make a step's GEMMs faster than the GPU runs
them, and attention runs at its own measured share of the peak.

Timing: CUDA events around `repeats` back-to-back calls after `warmup` calls, the median of
`rounds` such groups; inputs random normal in the dtype; clocks as the driver left them (the
fingerprint records them). Run on the GPU:

    python benchmarks/gemm_attention_peak.py --out gemm_attention_peak.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time
from pathlib import Path

GEMM_SHAPES: tuple[tuple[str, int, int, int], ...] = (
    # (what, tokens M, in K, out N): Llama-3.1-8B's projections (hidden 4096, GQA 8 x 128,
    # FFN 14336) at a 2,048-token prefill chunk, a 512-token chunk and a 64-sequence decode step.
    ("square 8192", 8192, 8192, 8192),
    ("qkv, chunk 2048", 2048, 4096, 6144),
    ("o, chunk 2048", 2048, 4096, 4096),
    ("gate+up, chunk 2048", 2048, 4096, 28672),
    ("down, chunk 2048", 2048, 14336, 4096),
    ("gate+up, chunk 512", 512, 4096, 28672),
    ("down, chunk 512", 512, 14336, 4096),
    ("gate+up, decode 64", 64, 4096, 28672),
)
ATTENTION_SHAPES: tuple[tuple[str, int, int], ...] = (
    # (what, query tokens, context tokens): a 2,048-token chunk over the context before it and
    # itself (causal within the chunk), Llama-3.1-8B's 32 query heads, 8 KV heads, head dim 128.
    ("chunk 2048 at context 2048", 2048, 2048),
    ("chunk 2048 at context 16384", 2048, 16384),
    ("chunk 2048 at context 65536", 2048, 65536),
    ("chunk 2048 at context 110592", 2048, 110592),
)
QUERY_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128


def _time_ms(fn, warmup: int, repeats: int, rounds: int) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / repeats)
    return statistics.median(samples)


def gemm_rows(dtype_name: str, warmup: int, repeats: int, rounds: int) -> list[dict]:
    import torch

    dtype = getattr(torch, dtype_name)
    rows = []
    for what, m, k, n in GEMM_SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        ms = _time_ms(lambda a=a, b=b: torch.matmul(a, b), warmup, repeats, rounds)
        flops = 2.0 * m * k * n
        rows.append({"kind": "gemm", "dtype": dtype_name, "shape": what, "m": m, "k": k, "n": n,
                     "ms": ms, "tflops": flops / ms / 1e9})  # fmt: skip
    return rows


def attention_rows(dtype_name: str, warmup: int, repeats: int, rounds: int) -> list[dict]:
    """A chunk's queries over its context through torch's scaled_dot_product_attention (the
    flash kernel on Hopper) as a chunked-prefill engine runs it: the chunk over the earlier
    context with no mask, and over itself causally (two flash calls; the engines' one varlen
    call also merges the two softmaxes, a small extra). KV heads expanded to the query heads.
    FLOPs = 4 x heads x head dim x the query-key pairs attended (the earlier context whole,
    the chunk's own tokens causally)."""
    import torch
    import torch.nn.functional as F

    dtype = getattr(torch, dtype_name)
    rows = []
    for what, queries, context in ATTENTION_SHAPES:
        earlier = context - queries
        q = torch.randn(1, QUERY_HEADS, queries, HEAD_DIM, device="cuda", dtype=dtype)
        k = torch.randn(1, QUERY_HEADS, context, HEAD_DIM, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        own_k, own_v = k[:, :, earlier:], v[:, :, earlier:]
        past_k, past_v = k[:, :, :earlier], v[:, :, :earlier]

        def call(q=q, own_k=own_k, own_v=own_v, past_k=past_k, past_v=past_v, earlier=earlier):
            out = F.scaled_dot_product_attention(q, own_k, own_v, is_causal=True)
            if earlier:
                out = out + F.scaled_dot_product_attention(q, past_k, past_v)
            return out

        ms = _time_ms(call, warmup, repeats, rounds)
        pairs = queries * earlier + queries * (queries + 1) / 2
        flops = 4.0 * QUERY_HEADS * HEAD_DIM * pairs
        rows.append({"kind": "attention", "dtype": dtype_name, "shape": what,
                     "queries": queries, "context": context,
                     "ms": ms, "tflops": flops / ms / 1e9})  # fmt: skip
        del q, k, v, own_k, own_v, past_k, past_v
        torch.cuda.empty_cache()
    return rows


def fingerprint() -> dict:
    import torch

    def smi(query: str) -> str:
        try:
            return subprocess.run(
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return ""

    return {
        "gpu": torch.cuda.get_device_name(0),
        "nvidia_smi": smi(
            "name,uuid,driver_version,clocks.sm,clocks.max.sm,clocks.mem,"
            "power.limit,temperature.gpu,pstate"
        ),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "host": platform.node(),
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for dtype in ("bfloat16", "float16"):
        rows += gemm_rows(dtype, args.warmup, args.repeats, args.rounds)
        rows += attention_rows(dtype, args.warmup, max(args.repeats // 4, 3), args.rounds)
    result = {
        "command": "python benchmarks/gemm_attention_peak.py "
        f"--warmup {args.warmup} --repeats {args.repeats} --rounds {args.rounds}",
        "environment": fingerprint(),
        "rows": rows,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    for row in rows:
        print(f"{row['kind']:9} {row['dtype']:8} {row['shape']:32} {row['ms']:9.3f} ms "
              f"{row['tflops']:7.1f} TFLOP/s")  # fmt: skip


if __name__ == "__main__":
    main()
