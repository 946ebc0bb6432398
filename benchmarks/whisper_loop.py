"""What a Whisper batch costs on a GPU, encoder and decoder loop apart, against the floor the
advisor sizes speech stages with (advisor/sizing/forward_model.py, `floor_model` with its
`decoder_loop`): eager PyTorch (transformers' WhisperForConditionalGeneration, SDPA attention,
random weights in float16 built from the published config's sizes), a batch of 30 s clips of
random log-mel features, the encoder once, then a greedy loop of `--steps` tokens with the
decoder's self- and cross-attention caches, as a plain PyTorch server runs it.

Timing: wall time between CUDA synchronisations, the median of `--rounds` after one warm-up, per
batch size. Run on the GPU:

    python benchmarks/whisper_loop.py --out whisper_loop.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from gemm_attention_peak import fingerprint

CONFIGS = {
    # openai/whisper-* config.json sizes (the advisor's PUBLISHED_ENCODERS reads the same).
    "whisper-small": {"d_model": 768, "encoder_layers": 12, "decoder_layers": 12,
                      "encoder_attention_heads": 12, "decoder_attention_heads": 12,
                      "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072, "num_mel_bins": 80,
                      "vocab_size": 51865},
    "whisper-large-v3": {"d_model": 1280, "encoder_layers": 32, "decoder_layers": 32,
                         "encoder_attention_heads": 20, "decoder_attention_heads": 20,
                         "encoder_ffn_dim": 5120, "decoder_ffn_dim": 5120, "num_mel_bins": 128,
                         "vocab_size": 51866},
}  # fmt: skip
FRAMES = 3000
"""Log-mel frames of a 30 s clip (1,500 after the encoder's stride-2 stem)."""


def build(name: str, device: str, dtype_name: str):
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(
        **CONFIGS[name], max_source_positions=1500, max_target_positions=448,
        attn_implementation="sdpa",
    )  # fmt: skip
    with torch.device(device):
        model = WhisperForConditionalGeneration(config)
    return model.to(getattr(torch, dtype_name)).eval(), config


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def time_batch(model, config, batch: int, steps: int, device: str, rounds: int) -> dict:
    """Median ms of the encoder alone and of encoder + loop, for one batch of clips."""
    import torch
    from transformers.modeling_outputs import BaseModelOutput

    dtype = next(model.parameters()).dtype
    features = torch.randn(batch, config.num_mel_bins, FRAMES, device=device, dtype=dtype)
    start = torch.full((batch, 1), config.decoder_start_token_id or 0, device=device)

    def encoder():
        return model.model.encoder(features).last_hidden_state

    def whole():
        encoded = BaseModelOutput(last_hidden_state=encoder())
        out = model(encoder_outputs=encoded, decoder_input_ids=start, use_cache=True)
        for _ in range(steps - 1):
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            out = model(
                encoder_outputs=encoded,
                decoder_input_ids=token,
                past_key_values=out.past_key_values,
                use_cache=True,
            )
        return out

    timings = {}
    with torch.inference_mode():
        for what, fn in (("encoder", encoder), ("encoder and loop", whole)):
            fn()
            _sync(device)
            samples = []
            for _ in range(rounds):
                began = time.perf_counter()
                fn()
                _sync(device)
                samples.append((time.perf_counter() - began) * 1e3)
            timings[what] = statistics.median(samples)
    if device == "cuda":
        torch.cuda.empty_cache()
    return {
        "batch": batch,
        "steps": steps,
        "encoder_ms": timings["encoder"],
        "batch_ms": timings["encoder and loop"],
        "loop_ms": timings["encoder and loop"] - timings["encoder"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", nargs="+", default=list(CONFIGS))
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="float16")
    args = parser.parse_args()
    import transformers

    rows = []
    for name in args.models:
        model, config = build(name, args.device, args.dtype)
        for batch in args.batches:
            timed = time_batch(model, config, batch, args.steps, args.device, args.rounds)
            row = {"model": name, "dtype": args.dtype, **timed}
            rows.append(row)
            print(f"{name:18} batch {batch:4} encoder {row['encoder_ms']:9.1f} ms  "
                  f"loop {row['loop_ms']:9.1f} ms  ({args.steps} steps)", flush=True)  # fmt: skip
        del model
    result = {
        "command": "python benchmarks/whisper_loop.py "
        f"--models {' '.join(args.models)} --batches {' '.join(map(str, args.batches))} "
        f"--steps {args.steps} --rounds {args.rounds} --dtype {args.dtype}",
        "environment": {
            **(fingerprint() if args.device == "cuda" else {"device": args.device}),
            "transformers": transformers.__version__,
        },
        "rows": rows,
    }
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
