"""Seeded, reproducible request generation: length distributions, token-ID prompts, batches.

The same workload and seed always give the same request sequence, whatever reads it, because
prompt lengths, output lengths and token IDs each come from their own seeded RNG stream.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from bench.core.config import ForwardWorkload, GenerateWorkload, LengthDistribution, PrefixPool
from bench.core.errors import UserError
from bench.engines.backends.base import ForwardRequest, GenerateRequest

TOKEN_ID_OFFSET = 100
"""Prompt token IDs start here (or at vocab_size // 2 for tiny vocabularies) so that special
tokens (BOS/EOS/PAD/UNK, usually the lowest IDs) never appear in a prompt."""
TOKEN_BLOCK = 1 << 14
"""Prompt token IDs are drawn this many at a time and sliced into prompts."""
LENGTH_BLOCK = 1024
"""Lengths are drawn this many at a time (vectorised); the sequence does not depend on it."""


def sample_lengths(dist: LengthDistribution, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` token counts (int64) from `dist`, clipped to [min, max].

    - fixed: always `mean`.
    - uniform: integers uniformly in [mean - spread, mean + spread] (rounded ends).
    - normal: `mean` + `spread` * N(0, 1), rounded.
    - lognormal: exp(N(mu, sigma)) with sigma^2 = ln(1 + (spread/mean)^2) and
      mu = ln(mean) - sigma^2 / 2, so the distribution keeps the requested mean and standard
      deviation (before rounding and clipping).
    A spread of 0 means fixed for every kind. Clipping to [min, max] happens last and can move
    the moments when the bounds cut into the distribution.
    """
    if n < 0:
        raise ValueError("n must be >= 0")
    mean, spread = dist.mean, dist.spread
    if dist.kind == "fixed" or spread == 0:
        values = np.full(n, mean, dtype=np.float64)
    elif dist.kind == "uniform":
        low = round(mean - spread)
        high = round(mean + spread)
        values = rng.integers(low, high + 1, size=n).astype(np.float64)
    elif dist.kind == "normal":
        values = rng.normal(mean, spread, size=n)
    elif dist.kind == "lognormal":
        sigma_squared = math.log1p((spread / mean) ** 2)
        mu = math.log(mean) - sigma_squared / 2
        values = rng.lognormal(mu, math.sqrt(sigma_squared), size=n)
    else:  # pragma: no cover - the config's Literal forbids it
        raise ValueError(f"unknown distribution kind {dist.kind!r}")
    upper = dist.max if dist.max is not None else np.inf
    return np.clip(np.rint(values), dist.min, upper).astype(np.int64)


class _LengthStream:
    """Endless lengths from one distribution and one RNG, drawn in vectorised blocks."""

    def __init__(self, dist: LengthDistribution, rng: np.random.Generator) -> None:
        self._dist = dist
        self._rng = rng
        self._block: list[int] = []
        self._index = 0

    def next(self) -> int:
        if self._index >= len(self._block):
            self._block = sample_lengths(self._dist, LENGTH_BLOCK, self._rng).tolist()
            self._index = 0
        value = self._block[self._index]
        self._index += 1
        return value


def make_prefix_pool(
    pool: PrefixPool, token_low: int, token_high: int, seed: np.random.SeedSequence
) -> list[list[int]]:
    """`pool.count` distinct prefixes of token IDs in [token_low, token_high), lengths drawn
    from `pool.tokens`; the same seed gives the same pool."""
    rng = np.random.default_rng(seed)
    lengths = sample_lengths(pool.tokens, pool.count, rng)
    return [
        rng.integers(token_low, token_high, size=int(n), dtype=np.int64).tolist() for n in lengths
    ]


class _PickStream:
    """Which prefix each request uses: uniform, or by the pool's weights; vectorised blocks."""

    def __init__(self, pool: PrefixPool, rng: np.random.Generator) -> None:
        self._count = pool.count
        self._p = None
        if pool.pick == "weighted" and pool.weights is not None:
            weights = np.asarray(pool.weights, dtype=np.float64)
            self._p = weights / weights.sum()
        self._rng = rng
        self._block: list[int] = []
        self._index = 0

    def next(self) -> int:
        if self._index >= len(self._block):
            self._block = self._rng.choice(self._count, size=LENGTH_BLOCK, p=self._p).tolist()
            self._index = 0
        value = self._block[self._index]
        self._index += 1
        return value


class RequestFactory:
    """Endless iterator of requests for a workload: `GenerateRequest` or `ForwardRequest`.

    Ids are "r000001", "r000002", ... Generate prompts are random token IDs in
    [TOKEN_ID_OFFSET, vocab_size); throughput and latency do not depend on which IDs they are.
    `seed` defaults to the workload's own seed; the same seed gives the same sequence.
    """

    def __init__(
        self,
        workload: GenerateWorkload | ForwardWorkload,
        vocab_size: int | None,
        seed: int | None = None,
    ) -> None:
        self.workload = workload
        self.seed = workload.seed if seed is None else seed
        # spawn(n) children are fixed by their index, so adding the prefix streams (3, 4) keeps
        # the prompt/output/token sequences of workloads without a prefix pool unchanged.
        prompt_seq, output_seq, token_seq, prefix_seq, pick_seq = np.random.SeedSequence(
            self.seed
        ).spawn(5)
        self._count = 0
        if isinstance(workload, GenerateWorkload):
            if vocab_size is None:
                raise UserError(
                    "a generate workload needs the model's vocabulary size (tokenizer missing?)"
                )
            if vocab_size < 2:
                raise UserError(f"vocabulary size {vocab_size} is too small for token prompts")
            self.token_low = min(TOKEN_ID_OFFSET, vocab_size // 2)
            self.token_high = vocab_size  # exclusive
            self._prompt_lengths = _LengthStream(
                workload.prompt_tokens, np.random.default_rng(prompt_seq)
            )
            self._output_lengths = _LengthStream(
                workload.output_tokens, np.random.default_rng(output_seq)
            )
            self._token_rng = np.random.default_rng(token_seq)
            self._token_pool = np.empty(0, dtype=np.int64)
            self._token_index = 0
            self.prefixes: list[list[int]] = []
            if workload.prefix is not None:
                self.prefixes = make_prefix_pool(
                    workload.prefix, self.token_low, self.token_high, prefix_seq
                )
                self._picks = _PickStream(workload.prefix, np.random.default_rng(pick_seq))
        else:
            self._sequence_lengths = (
                _LengthStream(workload.sequence_length, np.random.default_rng(prompt_seq))
                if workload.sequence_length is not None
                else None
            )

    def _take_tokens(self, count: int) -> list[int]:
        """The next `count` IDs of the token stream, drawn in vectorised blocks.

        The block stays a numpy array and only each prompt's slice becomes a list: converting a
        whole 64k-token block at once took ~3 ms, a hiccup every ~500 prompts that showed up as
        open-loop scheduling lag (p99 1.2 ms at 5,000 req/s, in bursts every 0.1 s).
        """
        if self._token_index + count > len(self._token_pool):
            size = max(TOKEN_BLOCK, count)
            self._token_pool = self._token_rng.integers(
                self.token_low, self.token_high, size=size, dtype=np.int64
            )
            self._token_index = 0
        start = self._token_index
        self._token_index = start + count
        return self._token_pool[start : start + count].tolist()

    def __iter__(self) -> RequestFactory:
        return self

    def __next__(self) -> GenerateRequest | ForwardRequest:
        self._count += 1
        request_id = f"r{self._count:06d}"
        workload = self.workload
        if isinstance(workload, GenerateWorkload):
            prompt = self._take_tokens(self._prompt_lengths.next())
            if self.prefixes:
                prefix_id = self._picks.next()
                prefix = self.prefixes[prefix_id]
                return GenerateRequest(
                    id=request_id,
                    prompt_token_ids=prefix + prompt,
                    output_tokens=self._output_lengths.next(),
                    prefix_id=prefix_id,
                    prefix_tokens=len(prefix),
                )
            return GenerateRequest(
                id=request_id, prompt_token_ids=prompt, output_tokens=self._output_lengths.next()
            )
        return ForwardRequest(
            id=request_id,
            batch_size=workload.batch_size,
            sequence_length=(
                self._sequence_lengths.next() if self._sequence_lengths is not None else None
            ),
            image_size=workload.image_size,
        )


class PromptFileRequests:
    """Endless iterator over the user's own prompts, in file order, cycling.

    Each prompt is tokenised with the model's tokenizer (`tokenizer.encode`; chat messages
    through its chat template when it has one, else their contents joined) to count its input
    tokens; the request keeps the text / messages so text and chat clients send them as given.
    Output lengths come from the file's column, else from the workload's distribution.
    """

    def __init__(self, workload: GenerateWorkload, rows: list[Any], tokenizer: Any) -> None:
        _, output_seq, *_ = np.random.SeedSequence(workload.seed).spawn(5)
        self._output_lengths = _LengthStream(
            workload.output_tokens, np.random.default_rng(output_seq)
        )
        self._prompts: list[tuple[list[int], str, tuple[dict[str, str], ...], int | None]] = []
        for row in rows:
            if row.messages is not None:
                text = "\n".join(message["content"] for message in row.messages)
                ids = _chat_ids(tokenizer, row.messages) or tokenizer.encode(text)
                messages = row.messages
            else:
                text = row.text
                ids = tokenizer.encode(text)
                messages = ({"role": "user", "content": text},)
            self._prompts.append((list(ids), text, messages, row.output_tokens))
        self._count = 0

    def __iter__(self) -> PromptFileRequests:
        return self

    def __next__(self) -> GenerateRequest:
        ids, text, messages, output = self._prompts[self._count % len(self._prompts)]
        self._count += 1
        return GenerateRequest(
            id=f"r{self._count:06d}",
            prompt_token_ids=ids,
            output_tokens=output if output is not None else self._output_lengths.next(),
            prompt_text=text,
            messages=messages,
        )


def _chat_ids(tokenizer: Any, messages: tuple[dict[str, str], ...]) -> list[int] | None:
    """Token IDs of chat messages through the tokenizer's chat template (None without one)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    try:
        return list(
            tokenizer.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=True)
        )
    except Exception:  # a template that cannot render these messages: count the contents
        return None


def request_input_tokens(request: GenerateRequest | ForwardRequest) -> int:
    """Input size of a request in tokens (forward kind: batch x sequence, 0 for images)."""
    if isinstance(request, GenerateRequest):
        return len(request.prompt_token_ids)
    return request.batch_size * (request.sequence_length or 0)


LONG_SEQUENCE_PRESETS: dict[str, GenerateWorkload] = {
    "long-4k": GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=4096), output_tokens=LengthDistribution(mean=256)
    ),
    "long-8k": GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=8192), output_tokens=LengthDistribution(mean=256)
    ),
    "long-16k": GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=16384), output_tokens=LengthDistribution(mean=256)
    ),
    "long-output": GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=256), output_tokens=LengthDistribution(mean=2048)
    ),
    "chat": GenerateWorkload(
        prompt_tokens=LengthDistribution(kind="lognormal", mean=512, spread=256, max=4096),
        output_tokens=LengthDistribution(kind="lognormal", mean=256, spread=128, max=2048),
    ),
}
"""Named generate workloads; "long-*" are the article's long-sequence generation cases."""


def iter_requests(
    factory: RequestFactory, count: int
) -> Iterator[GenerateRequest | ForwardRequest]:
    """The next `count` requests of a factory."""
    for _ in range(count):
        yield next(factory)
