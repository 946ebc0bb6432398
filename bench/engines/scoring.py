"""Log-likelihood scoring through the engine that would serve the model, at one precision.

One primitive serves perplexity and accuracy: `Scorer.score(sequences)` returns, for every token
after the first of each token-id sequence, its log-probability given the tokens before it and
whether it is the engine's greedy (argmax) pick there. Engines:
- pytorch: teacher-forced logits of the transformers model (log-softmax in float32);
- vllm: in-process `LLM.generate` with `prompt_logprobs` (the token's logprob and rank);
- openai: an OpenAI-compatible server's `/v1/completions` with the prompt as token ids, `echo`
  and `logprobs=1` (vLLM's server returns the prompt tokens' logprobs and top-1 this way).
A precision an engine cannot run comes back from `open_scorer` as a `NotRun` with the reason.
Classifiers (encoders with a class head) are scored by bench/engines/encoder_scoring.py.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from bench.core.errors import UserError
from bench.engines.cpu_int8 import int8_dynamic

if TYPE_CHECKING:
    import torch

ENGINES = ("pytorch", "vllm", "openai", "onnxruntime")
SCORE_BATCH = 8
FP8_E4M3_MAX = 448.0
"""Largest finite float8_e4m3fn value: the per-tensor scale maps a weight's amax onto it."""


class TokenScore(NamedTuple):
    logprob: float
    greedy: bool


class Scorer(Protocol):
    method: str

    def score(self, sequences: Sequence[list[int]]) -> list[list[TokenScore]]: ...

    def close(self) -> None: ...


@dataclass
class NotRun:
    """A precision this engine does not run here, and why."""

    method: str
    reason: str


def check_engine(name: str) -> str:
    if name not in ENGINES:
        raise UserError(f"unknown engine {name!r}; use one of {', '.join(ENGINES)}")
    return name


# --------------------------------------------------------------------------- pytorch


def _round_fp8(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` rounded to float8_e4m3fn with one per-tensor scale (amax / 448) and back."""
    import torch

    scale = tensor.abs().amax().float().clamp(min=1e-12) / FP8_E4M3_MAX
    return ((tensor.float() / scale).to(torch.float8_e4m3fn).float() * scale).to(tensor.dtype)


def _simulate_fp8(model: torch.nn.Module) -> int:
    """vLLM's dynamic FP8 (W8A8) numerics on any device: every Linear except the LM head gets
    its weight rounded to FP8 (per-tensor scale) in place, and its input rounded the same way
    at each call (a dynamic per-tensor activation scale); the matmul itself runs at the model's
    dtype. Returns how many Linear layers were changed."""
    import torch

    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    changed = 0
    for module in model.modules():
        if not isinstance(module, torch.nn.Linear) or module is head:
            continue
        module.weight.data = _round_fp8(module.weight.data)
        module.register_forward_pre_hook(lambda _module, args: (_round_fp8(args[0]), *args[1:]))
        changed += 1
    return changed


PYTORCH_METHODS = {
    "fp32": "PyTorch eager, float32 weights and activations",
    "bf16": "PyTorch eager, bfloat16 weights and activations",
    "fp16": "PyTorch eager, float16 weights and activations",
    "fp8": "PyTorch eager, simulated FP8 W8A8 (vLLM's dynamic FP8 numerics): each Linear except "
    "the LM head has its weight and, at every call, its input rounded to float8_e4m3fn with a "
    "per-tensor scale (amax/448) and back to bfloat16; the matmuls run in bfloat16, so this "
    "measures FP8's rounding error, not FP8 kernels",
    "int8": "PyTorch eager, torch dynamic INT8 quantization (torch.ao quantize_dynamic): Linear "
    "weights except the LM head int8 per tensor, activations quantized per batch at run time, "
    "float32 elsewhere",
}


class PyTorchScorer:
    """Teacher-forced log-likelihoods from the transformers model at one precision."""

    def __init__(self, model_dir: str, precision: str) -> None:
        import torch

        from bench.engines.backends.pytorch import load_hf_model

        self.method = PYTORCH_METHODS[precision]
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "int8": torch.float32}.get(
            precision, torch.bfloat16
        )
        self.device = "cuda" if torch.cuda.is_available() and precision != "int8" else "cpu"
        self.model = load_hf_model(model_dir, dtype, self.device, attn_implementation="eager")
        if precision == "fp8" and not _simulate_fp8(self.model):
            raise UserError(f"model {model_dir}: no Linear layers to round to FP8")
        if precision == "int8":
            self.model = int8_dynamic(self.model)

    def score(self, sequences: Sequence[list[int]]) -> list[list[TokenScore]]:
        import torch

        scores: list[list[TokenScore]] = []
        for start in range(0, len(sequences), SCORE_BATCH):
            batch = sequences[start : start + SCORE_BATCH]
            width = max(len(ids) for ids in batch)
            input_ids = torch.zeros((len(batch), width), dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, ids in enumerate(batch):  # right padding: positions stay 0..n-1
                input_ids[row, : len(ids)] = torch.tensor(ids)
                mask[row, : len(ids)] = 1
            with torch.inference_mode():
                logits = self.model(
                    input_ids=input_ids.to(self.device), attention_mask=mask.to(self.device)
                ).logits
                logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1).cpu()
            targets = input_ids[:, 1:]
            picked = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            greedy = logprobs.argmax(dim=-1) == targets
            for row, ids in enumerate(batch):
                n = len(ids) - 1
                scores.append(
                    [
                        TokenScore(float(lp), bool(g))
                        for lp, g in zip(
                            picked[row, :n].tolist(), greedy[row, :n].tolist(), strict=True
                        )
                    ]
                )
        return scores

    def close(self) -> None:
        del self.model
        gc.collect()


# --------------------------------------------------------------------------- vllm


VLLM_PRECISIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "fp32": ("vLLM, float32", {"dtype": "float32"}),
    "bf16": ("vLLM, bfloat16", {"dtype": "bfloat16"}),
    "fp16": ("vLLM, float16", {"dtype": "float16"}),
    "fp8": (
        "vLLM, dynamic FP8 weights (quantization=fp8, per-tensor scales, no calibration), "
        "bfloat16 activations elsewhere",
        {"dtype": "bfloat16", "quantization": "fp8"},
    ),
    "fp8-kv": (
        "vLLM, dynamic FP8 weights and FP8 KV cache (kv_cache_dtype=fp8)",
        {"dtype": "bfloat16", "quantization": "fp8", "kv_cache_dtype": "fp8"},
    ),
}


def vllm_refusal(precision: str) -> str | None:
    """Why vLLM cannot score `precision` of a plain checkpoint, or None when it can."""
    if precision != "int8":
        return None
    return (
        "int8 on vllm: vLLM does not cast a plain checkpoint to INT8; it serves INT8 only from "
        "a pre-quantized checkpoint (e.g. W8A8 compressed-tensors). Use --engine pytorch for "
        "dynamic INT8 of this checkpoint"
    )


class VllmScorer:
    """vLLM in-process: `prompt_logprobs=1` gives each prompt token's logprob and rank."""

    def __init__(self, model_dir: str, precision: str, max_model_len: int) -> None:
        from vllm import LLM

        self.method, options = VLLM_PRECISIONS[precision]
        self.llm = LLM(
            model=model_dir,
            enforce_eager=True,
            max_model_len=max_model_len,
            seed=0,
            **options,
        )

    def score(self, sequences: Sequence[list[int]]) -> list[list[TokenScore]]:
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
        prompts = [{"prompt_token_ids": list(ids)} for ids in sequences]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        scores: list[list[TokenScore]] = []
        for ids, output in zip(sequences, outputs, strict=True):
            entries = output.prompt_logprobs[1:]  # the first token has no context
            scores.append(
                [
                    TokenScore(float(entry[token].logprob), entry[token].rank == 1)
                    for token, entry in zip(ids[1:], entries, strict=True)
                ]
            )
        return scores

    def close(self) -> None:
        del self.llm
        gc.collect()


# --------------------------------------------------------------------------- openai


class OpenAIScorer:
    """An OpenAI-compatible server: `/v1/completions` with token-id prompts, `echo: true` and
    `logprobs: 1`; a token is greedy when its logprob is the top-1 logprob at its position."""

    def __init__(self, base_url: str, precision: str, timeout_s: float = 600.0) -> None:
        import httpx

        self.method = f"OpenAI-compatible server at {base_url}, serving the {precision} precision"
        self.base_url = base_url.rstrip("/")
        self.client = httpx.Client(timeout=timeout_s)
        models = self._post_or_get("GET", "/models")
        try:
            self.model = models["data"][0]["id"]
        except (KeyError, IndexError, TypeError):
            raise UserError(f"{self.base_url}/models lists no model") from None

    def _post_or_get(self, verb: str, path: str, body: dict[str, Any] | None = None) -> Any:
        import httpx

        try:
            response = self.client.request(verb, self.base_url + path, json=body)
            response.raise_for_status()
            return response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise UserError(f"{self.base_url}{path}: {exc}") from None

    def score(self, sequences: Sequence[list[int]]) -> list[list[TokenScore]]:
        scores: list[list[TokenScore]] = []
        for start in range(0, len(sequences), SCORE_BATCH):
            batch = [list(ids) for ids in sequences[start : start + SCORE_BATCH]]
            body = {
                "model": self.model,
                "prompt": batch,
                "max_tokens": 1,
                "temperature": 0.0,
                "echo": True,
                "logprobs": 1,
            }
            reply = self._post_or_get("POST", "/completions", body)
            choices = sorted(reply.get("choices") or [], key=lambda choice: choice["index"])
            if len(choices) != len(batch):
                raise UserError(
                    f"{self.base_url}/completions answered {len(choices)} of {len(batch)} prompts"
                )
            for ids, choice in zip(batch, choices, strict=True):
                logprobs = choice.get("logprobs") or {}
                token_logprobs = logprobs.get("token_logprobs") or []
                top = logprobs.get("top_logprobs") or []
                if len(token_logprobs) < len(ids):
                    raise UserError(
                        f"{self.base_url}/completions did not echo the prompt's logprobs "
                        "(the server needs echo with logprobs, as vLLM's does)"
                    )
                row = []
                for position in range(1, len(ids)):
                    logprob = float(token_logprobs[position])
                    best = max((top[position] or {logprob: logprob}).values(), default=logprob)
                    row.append(TokenScore(logprob, logprob >= float(best) - 1e-6))
                scores.append(row)
        return scores

    def close(self) -> None:
        self.client.close()


# --------------------------------------------------------------------------- choice


def open_scorer(
    engine: str,
    model_dir: str | Path,
    precision: str,
    *,
    max_model_len: int,
    endpoints: dict[str, str] | None = None,
) -> Scorer | NotRun:
    """The scorer for `precision` on `engine`, or NotRun saying why it cannot run here."""
    model_dir = str(model_dir)
    if engine == "pytorch":
        if precision not in PYTORCH_METHODS:
            return NotRun(
                "PyTorch eager",
                f"{precision} is a vLLM engine feature (FP8 KV cache); PyTorch eager has none",
            )
        return PyTorchScorer(model_dir, precision)
    if engine == "vllm":
        if precision not in VLLM_PRECISIONS:  # int8: refused up front (vllm_refusal)
            return NotRun("vLLM", vllm_refusal(precision) or f"vLLM does not run {precision}")
        from bench.engines.backends.vllm import VllmBackend

        availability = VllmBackend.availability()
        if not availability.available:
            return NotRun(VLLM_PRECISIONS[precision][0], f"vLLM unavailable: {availability.reason}")
        return VllmScorer(model_dir, precision, max_model_len)
    if engine == "openai":
        url = (endpoints or {}).get(precision)
        if url is None:
            return NotRun("OpenAI-compatible server", f"no --endpoint {precision}=URL given for it")
        return OpenAIScorer(url, precision)
    return NotRun(
        "ONNX Runtime",
        "ONNX Runtime scores classifiers here (bench/engines/encoder_scoring.py); a causal LM's "
        "log-likelihoods through it are not built",
    )
