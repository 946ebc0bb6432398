"""What a Whisper batch costs on a GPU, encoder and decoder loop apart, against the floor the
advisor sizes speech stages with (advisor/sizing/forward_model.py, `floor_model` with its
`decoder_loop`): eager PyTorch (transformers' WhisperForConditionalGeneration, SDPA attention,
random weights in float16 built from the published config's sizes), a batch of 30 s clips of
random log-mel features, the encoder once, then a greedy loop of `--steps` tokens with the
decoder's self- and cross-attention caches, as a plain PyTorch server runs it.

With `--cuda-graphs` each batch is also timed the way a serving engine runs the loop without a
kernel launch per op (vLLM, TensorRT-LLM and torch.compile's reduce-overhead mode all capture the
decoder step as a CUDA graph): the cross-attention keys and values computed once from the encoder's
output, then one decoder step over preallocated self-attention caches captured once as a CUDA graph
and replayed `--steps` times (`GraphDecoder`; the same arithmetic as transformers' decoder step,
tested against it on the CPU in tests/benchmarks/test_whisper_loop.py). That measures the device's
own step time, which the eager loop hides behind its launches. With `--compile` the same step is
also compiled by torch.compile (inductor: elementwise work fused into the matrix products' and
norms' kernels, as torch.compile's reduce-overhead mode does before it captures its graphs) and
then captured: the loop as torch.compile serves it.

Timing: wall time between CUDA synchronisations, the median of `--rounds` after one warm-up, per
batch size. Run on the GPU:

    python benchmarks/whisper_loop.py --out whisper_loop.json [--cuda-graphs]
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


def median_ms(fn, device: str, rounds: int) -> float:
    """Median wall ms of `fn` between synchronisations over `rounds`, after one warm-up call."""
    fn()
    _sync(device)
    samples = []
    for _ in range(rounds):
        began = time.perf_counter()
        fn()
        _sync(device)
        samples.append((time.perf_counter() - began) * 1e3)
    return statistics.median(samples)


class GraphDecoder:
    """Whisper's greedy decoder step over preallocated caches, for one batch of encoded clips.

    The self-attention keys and values live in buffers of `max_steps` positions written in place
    at the step's position (a device tensor, so a captured graph reads the current one); the
    cross-attention keys and values are computed once from the encoder's output; the next token
    is the argmax, written in place. `step()` therefore has no Python-side state that changes
    between steps and can be captured once as a CUDA graph and replayed.
    """

    def __init__(self, model, encoded, start_token: int, max_steps: int):
        import torch

        decoder = model.model.decoder
        self.model, self.decoder, self.max_steps = model, decoder, max_steps
        batch, dtype, device = encoded.shape[0], encoded.dtype, encoded.device
        first = decoder.layers[0].self_attn
        self.heads, self.head_dim = first.num_heads, first.head_dim
        shape = (len(decoder.layers), batch, self.heads, max_steps, self.head_dim)
        self.keys = torch.zeros(shape, dtype=dtype, device=device)
        self.values = torch.zeros(shape, dtype=dtype, device=device)
        self.positions = torch.arange(max_steps, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.start_token = start_token
        self.token = torch.full((batch, 1), start_token, dtype=torch.long, device=device)
        self.cross = self.cross_attention_states(encoded)

    def _heads(self, states):
        batch, length, _ = states.shape
        return states.view(batch, length, self.heads, self.head_dim).transpose(1, 2)

    def cross_attention_states(self, encoded):
        """Each layer's cross-attention keys and values, laid out per head: computed once a
        batch, as engines do."""
        return [
            (self._heads(layer.encoder_attn.k_proj(encoded)).contiguous(),
             self._heads(layer.encoder_attn.v_proj(encoded)).contiguous())
            for layer in self.decoder.layers
        ]  # fmt: skip

    def reset(self) -> None:
        self.position.zero_()
        self.token.fill_(self.start_token)

    def step(self):
        """One token for every clip of the batch; returns the step's logits."""
        import torch.nn.functional as F

        decoder = self.decoder
        hidden = decoder.embed_tokens(self.token) * decoder.embed_scale
        hidden = hidden + decoder.embed_positions.weight[self.position].unsqueeze(0)
        # Positions after the current one hold zeros (or an earlier round's values): masked out.
        visible = (self.positions <= self.position).view(1, 1, 1, -1)
        for index, layer in enumerate(decoder.layers):
            attention = layer.self_attn
            residual = hidden
            states = layer.self_attn_layer_norm(hidden)
            query = self._heads(attention.q_proj(states))
            self.keys[index].index_copy_(2, self.position, self._heads(attention.k_proj(states)))
            self.values[index].index_copy_(2, self.position, self._heads(attention.v_proj(states)))
            mixed = F.scaled_dot_product_attention(
                query, self.keys[index], self.values[index], attn_mask=visible
            )
            hidden = residual + attention.out_proj(self._merge(mixed))
            cross = layer.encoder_attn
            residual = hidden
            query = self._heads(cross.q_proj(layer.encoder_attn_layer_norm(hidden)))
            keys, values = self.cross[index]
            mixed = F.scaled_dot_product_attention(query, keys, values)
            hidden = residual + cross.out_proj(self._merge(mixed))
            residual = hidden
            states = layer.activation_fn(layer.fc1(layer.final_layer_norm(hidden)))
            hidden = residual + layer.fc2(states)
        logits = self.model.proj_out(decoder.layer_norm(hidden))
        self.token.copy_(logits[:, -1].argmax(-1, keepdim=True))
        self.position.add_(1)
        return logits

    def _merge(self, mixed):
        batch, _, length, _ = mixed.shape
        return mixed.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim)


def time_graph_loop(
    model, config, batch: int, steps: int, rounds: int, compiled: bool = False
) -> dict:
    """Median ms of the loop as a serving engine runs it: the cross-attention keys and values
    once, then `steps` replays of the decoder step captured as one CUDA graph (the step
    compiled by torch.compile first where `compiled`; its fields then start `compiled_`)."""
    import torch

    torch.cuda.empty_cache()  # the last call's graph and caches are gone once it returned
    dtype = next(model.parameters()).dtype
    features = torch.randn(batch, config.num_mel_bins, FRAMES, device="cuda", dtype=dtype)
    start = config.decoder_start_token_id or 0
    with torch.inference_mode():
        encoded = model.model.encoder(features).last_hidden_state
        loop = GraphDecoder(model, encoded, start, steps)
        step = torch.compile(loop.step, fullgraph=True, dynamic=False) if compiled else loop.step
        began = time.perf_counter()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture stream, as capture requires
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        prepare_s = time.perf_counter() - began
        loop.reset()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()

        def cross():
            # Computed and dropped: the graph reads the buffers it was captured with.
            loop.cross_attention_states(encoded)

        def replays():
            loop.reset()
            for _ in range(steps):
                graph.replay()

        timings = {what: median_ms(fn, "cuda", rounds) for what, fn in
                   (("cross", cross), ("steps", replays))}  # fmt: skip
    prefix = "compiled_graph" if compiled else "graph"
    return {
        f"{prefix}_prepare_s": prepare_s,
        f"{prefix}_cross_ms": timings["cross"],
        f"{prefix}_steps_ms": timings["steps"],
        f"{prefix}_step_ms": timings["steps"] / steps,
        f"{prefix}_loop_ms": timings["cross"] + timings["steps"],
    }


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

    with torch.inference_mode():
        timings = {what: median_ms(fn, device, rounds) for what, fn in
                   (("encoder", encoder), ("encoder and loop", whole))}  # fmt: skip
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
    parser.add_argument(
        "--cuda-graphs", action="store_true",
        help="also time the loop as one CUDA graph of the decoder step replayed per token",
    )  # fmt: skip
    parser.add_argument(
        "--compile", action="store_true",
        help="also time that graph with the step compiled by torch.compile first",
    )  # fmt: skip
    args = parser.parse_args()
    import torch
    import transformers

    torch._dynamo.config.cache_size_limit = 64  # one compiled step per batch size and model
    command = (
        "python benchmarks/whisper_loop.py "
        f"--models {' '.join(args.models)} --batches {' '.join(map(str, args.batches))} "
        f"--steps {args.steps} --rounds {args.rounds} --dtype {args.dtype}"
        + (" --cuda-graphs" if args.cuda_graphs else "")
        + (" --compile" if args.compile else "")
    )
    environment = {
        **(fingerprint() if args.device == "cuda" else {"device": args.device}),
        "transformers": transformers.__version__,
    }
    rows = []
    for name in args.models:
        model, config = build(name, args.device, args.dtype)
        for batch in args.batches:
            timed = time_batch(model, config, batch, args.steps, args.device, args.rounds)
            row = {"model": name, "dtype": args.dtype, **timed}
            if args.cuda_graphs:
                row |= time_graph_loop(model, config, batch, args.steps, args.rounds)
            if args.compile:
                row |= time_graph_loop(model, config, batch, args.steps, args.rounds, True)
            rows.append(row)
            graphed = "".join(
                f"  {what} {row[f'{key}_loop_ms']:8.1f} ms ({row[f'{key}_step_ms']:.3f} a step)"
                for what, key in (("graph", "graph"), ("compiled", "compiled_graph"))
                if f"{key}_loop_ms" in row
            )
            print(f"{name:18} batch {batch:4} encoder {row['encoder_ms']:9.1f} ms  "
                  f"loop {row['loop_ms']:9.1f} ms{graphed}", flush=True)  # fmt: skip
            # Written after every row: a run cut short keeps the rows it finished.
            result = {"command": command, "environment": environment, "rows": rows}
            args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        del model


if __name__ == "__main__":
    main()
