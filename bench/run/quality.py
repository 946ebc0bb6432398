"""`bench quality`'s body: one checkpoint, its evaluation files, every precision -> QualityResult.

The evaluation is tokenized once with the checkpoint's tokenizer (the same token ids go to every
precision and engine), scored precision by precision (one engine loaded at a time), then
summarised with intervals and paired deltas vs the first precision, the baseline
(bench/core/quality.py says how).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.core.context_window import Term, check_fits
from bench.core.errors import UserError
from bench.core.files import shown_path
from bench.core.limits import LIMITS_DOC
from bench.core.quality import (
    LabelledItem,
    PrecisionQuality,
    QualityResult,
    WindowScore,
    accuracy_delta,
    accuracy_estimate,
    check_precision,
    method_text,
    perplexity_delta,
    perplexity_estimate,
)
from bench.core.stats import BOOTSTRAP, SEED
from bench.engines.models import load_config, model_context, resolve_model
from bench.engines.scoring import NotRun, TokenScore, check_engine, open_scorer
from bench.run.environment import fingerprint

DEFAULT_WINDOW = 256
MAX_WINDOWS = 4096


@dataclass
class _ItemTokens:
    context: list[int]
    continuations: list[list[int]]  # the answer alone, or every choice
    answer_index: int


@dataclass
class _Scores:
    windows: list[WindowScore] | None
    correct: list[bool] | None


def _tokenizer(model_dir: str, tokenizer_dir: str | None, vocab_size: int):
    from transformers import AutoTokenizer

    source = tokenizer_dir or model_dir
    if (
        not (Path(source) / "tokenizer.json").exists()
        and not (Path(source) / "tokenizer_config.json").exists()
    ):
        raise UserError(f"tokenizer {shown_path(source)}: no tokenizer files there")
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise UserError(f"tokenizer {shown_path(source)}: {exc}") from None
    if len(tokenizer) > vocab_size:
        raise UserError(
            f"tokenizer {shown_path(source)} has {len(tokenizer)} entries but the model embeds "
            f"{vocab_size}: it is not this model's tokenizer"
        )
    return tokenizer


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def _bos(tokenizer) -> list[int]:
    return [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []


def text_windows(tokenizer, text: str, window: int) -> list[list[int]]:
    """Non-overlapping windows of `window` tokens, each with the BOS token in front."""
    ids = _encode(tokenizer, text)
    if len(ids) < 2:
        raise UserError("text file has fewer than 2 tokens: nothing to score")
    windows = [_bos(tokenizer) + ids[i : i + window] for i in range(0, len(ids), window)]
    if len(windows) > MAX_WINDOWS:
        raise UserError(f"text file has {len(windows)} windows; at most {MAX_WINDOWS} are scored")
    return [w for w in windows if len(w) >= 2]


def check_window_fits(model: str, window: int) -> None:
    """UserError before anything is loaded when a perplexity window (with its BOS token) is
    longer than the model's context: the scorers are opened with max_model_len = the position
    table, so every engine is held to it (the name below is none of the rope-scaled ones)."""
    terms = [Term(field="--window", tokens=window), Term(field="its BOS token", tokens=1)]
    check_fits("", terms, model_context(model), "scorer", "lower --window")


def item_tokens(tokenizer, items: Sequence[LabelledItem], max_len: int) -> list[_ItemTokens]:
    out: list[_ItemTokens] = []
    for number, item in enumerate(items, start=1):
        context = _bos(tokenizer) + _encode(tokenizer, item.prompt)
        options = item.choices or [item.answer]
        continuations = [_encode(tokenizer, option) for option in options]
        if any(not c for c in continuations):
            raise UserError(f"labelled item {number}: an answer or choice has no tokens")
        longest = max(len(c) for c in continuations)
        if len(context) + longest > max_len:
            raise UserError(
                f"labelled item {number}: prompt + longest answer = {len(context):,} + "
                f"{longest:,} = {len(context) + longest:,} tokens, over the model's context "
                f"of {max_len:,} tokens (max_position_embeddings); shorten it ({LIMITS_DOC})"
            )
        out.append(_ItemTokens(context, continuations, options.index(item.answer)))
    return out


def _item_correct(item: _ItemTokens, rows: list[list[TokenScore]], multiple_choice: bool) -> bool:
    start = len(item.context) - 1  # score of sequence token k is rows[k - 1]
    tails = [row[start:] for row in rows]
    if not multiple_choice:
        return all(token.greedy for token in tails[0])
    totals = [sum(token.logprob for token in tail) for tail in tails]
    return max(range(len(totals)), key=totals.__getitem__) == item.answer_index


def _score_all(scorer, windows, items, multiple_choice_flags) -> _Scores:
    window_scores = None
    if windows:
        rows = scorer.score(windows)
        window_scores = [
            WindowScore(nll=-sum(t.logprob for t in row), tokens=len(row)) for row in rows
        ]
    correct = None
    if items:
        sequences = [item.context + c for item in items for c in item.continuations]
        rows = scorer.score(sequences)
        correct = []
        cursor = 0
        for item, multiple_choice in zip(items, multiple_choice_flags, strict=True):
            count = len(item.continuations)
            correct.append(_item_correct(item, rows[cursor : cursor + count], multiple_choice))
            cursor += count
    return _Scores(window_scores, correct)


def evaluate(
    model: str,
    precisions: Sequence[str],
    *,
    text: str | None = None,
    items: Sequence[LabelledItem] | None = None,
    text_file: str | None = None,
    labelled_file: str | None = None,
    engine: str = "pytorch",
    tokenizer_dir: str | None = None,
    window: int = DEFAULT_WINDOW,
    endpoints: dict[str, str] | None = None,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
    command: str | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> QualityResult:
    """Score every precision (the first is the baseline) and compare each with the baseline."""
    check_engine(engine)
    names = [check_precision(name) for name in precisions]
    if not names:
        raise UserError("give at least one --precision (the first is the baseline)")
    if len(set(names)) != len(names):
        raise UserError("a precision is given twice")
    if text is None and not items:
        raise UserError("give --text FILE or --labelled FILE.jsonl (or both)")
    if window < 2:
        raise UserError("--window must be at least 2 tokens")
    info = resolve_model(model)
    if info.kind != "generate":
        raise UserError(f"model {model} is not a causal language model: no log-likelihoods")
    config = load_config(info.path)
    max_len = int(getattr(config, "max_position_embeddings", 0) or 2048)
    tokenizer = _tokenizer(info.path, tokenizer_dir, int(config.vocab_size))
    check_window_fits(model, window)
    window = min(window, max_len - 1)  # a model without a stated window: 2048 assumed
    windows = text_windows(tokenizer, text, window) if text is not None else None
    tokens = item_tokens(tokenizer, items, max_len) if items else None
    flags = [item.choices is not None for item in items] if items else []

    scored: dict[str, _Scores] = {}
    results: list[PrecisionQuality] = []
    for name in names:
        started = time.perf_counter()
        if on_progress:
            on_progress(f"{name}: loading on {engine}")
        try:
            scorer = open_scorer(
                engine, info.path, name, max_model_len=max_len, endpoints=endpoints
            )
        except UserError:
            raise
        except Exception as exc:  # a precision that fails to load is reported, not scored 0
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            results.append(
                PrecisionQuality(
                    precision=name,
                    method=engine,
                    status="not run",
                    reason=f"failed to load: {type(exc).__name__}: {first_line}"[:400],
                )
            )
            continue
        if isinstance(scorer, NotRun):
            results.append(
                PrecisionQuality(
                    precision=name, method=scorer.method, status="not run", reason=scorer.reason
                )
            )
            continue
        try:
            if on_progress:
                on_progress(f"{name}: scoring")
            scores = _score_all(scorer, windows, tokens, flags)
        finally:
            scorer.close()
        scored[name] = scores
        results.append(
            PrecisionQuality(
                precision=name,
                method=scorer.method,
                status="measured",
                perplexity=perplexity_estimate(scores.windows, bootstrap, seed)
                if scores.windows
                else None,
                tokens_scored=sum(w.tokens for w in scores.windows) if scores.windows else None,
                accuracy=accuracy_estimate(scores.correct, bootstrap, seed)
                if scores.correct is not None
                else None,
                items=len(scores.correct) if scores.correct is not None else None,
                seconds=round(time.perf_counter() - started, 3),
            )
        )

    baseline = names[0]
    if baseline in scored:
        base = scored[baseline]
        for index, result in enumerate(results):
            if result.precision == baseline or result.precision not in scored:
                continue
            mine = scored[result.precision]
            deltas = []
            if base.windows and mine.windows:
                deltas.append(
                    perplexity_delta(mine.windows, base.windows, baseline, bootstrap, seed)
                )
            if base.correct is not None and mine.correct is not None:
                deltas.append(accuracy_delta(mine.correct, base.correct, baseline, bootstrap, seed))
            results[index] = result.model_copy(update={"deltas": deltas})

    return QualityResult(
        model=model,
        model_path=info.path,
        engine=engine,
        baseline=baseline,
        text_file=text_file,
        labelled_file=labelled_file,
        window=window,
        bootstrap=bootstrap,
        seed=seed,
        method=method_text(bootstrap, seed),
        precisions=results,
        command=command,
        environment=fingerprint(),
    )
