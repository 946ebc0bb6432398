"""`bench quality`'s body: one checkpoint, its evaluation files, every precision -> QualityResult.

The evaluation is tokenized once with the checkpoint's tokenizer (the same token ids go to every
precision and engine), scored precision by precision (one engine loaded at a time), then
summarised with intervals and paired deltas vs the first precision, the baseline
(bench/core/quality.py says how). A causal LM is scored by log-likelihoods (bench/engines/
scoring.py); a classifier (an encoder with a classification head) by its class logits per
example (bench/engines/encoder_scoring.py).
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
    MAX_ITEMS,
    LabelledItem,
    PrecisionQuality,
    QualityResult,
    WindowScore,
    accuracy_delta,
    accuracy_estimate,
    agreement_delta,
    check_precision,
    max_abs_difference,
    method_text,
    perplexity_delta,
    perplexity_estimate,
)
from bench.core.stats import BOOTSTRAP, SEED
from bench.engines.encoder_scoring import check_encoder_precisions, open_encoder_scorer
from bench.engines.models import load_config, model_context, resolve_model
from bench.engines.scoring import NotRun, TokenScore, check_engine, open_scorer, vllm_refusal
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


def _not_loaded(name: str, method: str, exc: Exception) -> PrecisionQuality:
    """A precision that failed to load: reported with the error's first line, never scored 0."""
    first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return PrecisionQuality(
        precision=name,
        method=method,
        status="not run",
        reason=f"failed to load: {type(exc).__name__}: {first_line}"[:400],
    )


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
    config = load_config(info.path)
    if info.kind != "generate":
        check_encoder_precisions(engine, names)
        return _evaluate_classifier(
            model,
            info.path,
            config,
            names,
            text=text,
            items=items,
            text_file=text_file,
            labelled_file=labelled_file,
            engine=engine,
            tokenizer_dir=tokenizer_dir,
            bootstrap=bootstrap,
            seed=seed,
            command=command,
            on_progress=on_progress,
        )
    if engine == "vllm":
        for name in names:
            refusal = vllm_refusal(name)
            if refusal:
                raise UserError(refusal)
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
            results.append(_not_loaded(name, engine, exc))
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


# --------------------------------------------------------------------------- classifiers


def _label_ids(config, items: Sequence[LabelledItem]) -> list[int]:
    """Each labelled item's class id: its answer is a label name of the model (config.id2label)
    or a class index."""
    id2label = {int(key): str(value) for key, value in (config.id2label or {}).items()}
    by_name = {name: index for index, name in id2label.items()}
    labels = []
    for number, item in enumerate(items, start=1):
        if item.choices is not None:
            raise UserError(
                f"labelled item {number}: choices are for causal LMs; a classifier's answer is "
                "one of its labels"
            )
        if item.answer in by_name:
            labels.append(by_name[item.answer])
        elif item.answer.strip().isdigit() and int(item.answer) in id2label:
            labels.append(int(item.answer))
        else:
            raise UserError(
                f"labelled item {number}: answer {item.answer!r} is not one of the model's "
                f"labels ({', '.join(id2label.values())}) nor a class index"
            )
    return labels


def _examples(tokenizer, text: str | None, items, max_len: int) -> list[list[int]]:
    """Token ids of every example: the text file's non-empty lines, then the labelled prompts,
    each with the tokenizer's BOS (the [CLS]-like first token) in front."""
    sources = [("text line", line) for line in (text or "").splitlines() if line.strip()]
    sources += [("labelled item", item.prompt) for item in items or []]
    if len(sources) > MAX_ITEMS:
        raise UserError(f"{len(sources)} examples; at most {MAX_ITEMS} are scored")
    examples = []
    counters = {"text line": 0, "labelled item": 0}
    for what, content in sources:
        counters[what] += 1
        ids = _bos(tokenizer) + _encode(tokenizer, content)
        if not ids:
            raise UserError(f"{what} {counters[what]} has no tokens")
        if len(ids) > max_len:
            raise UserError(
                f"{what} {counters[what]} has {len(ids)} tokens, more than the model's "
                f"{max_len} positions"
            )
        examples.append(ids)
    if not examples:
        raise UserError("the text file has no non-empty line: no example to score")
    return examples


def _evaluate_classifier(
    model: str,
    model_dir: str,
    config,
    names: Sequence[str],
    *,
    text: str | None,
    items: Sequence[LabelledItem] | None,
    text_file: str | None,
    labelled_file: str | None,
    engine: str,
    tokenizer_dir: str | None,
    bootstrap: int,
    seed: int,
    command: str | None,
    on_progress: Callable[[str], None] | None,
) -> QualityResult:
    """Every precision's class logits on the same examples; top-1 agreement and max abs logit
    difference vs the baseline, and accuracy with labels."""
    import numpy as np

    if not getattr(config, "vocab_size", None):
        raise UserError(f"model {model} takes no token ids (an image model?): give a text model")
    labels = _label_ids(config, items) if items else []
    max_len = int(getattr(config, "max_position_embeddings", 0) or 512)
    tokenizer = _tokenizer(model_dir, tokenizer_dir, int(config.vocab_size))
    examples = _examples(tokenizer, text, items, max_len)
    pad_id = config.pad_token_id if config.pad_token_id is not None else 0

    logits: dict[str, np.ndarray] = {}
    results: list[PrecisionQuality] = []
    for name in names:
        started = time.perf_counter()
        if on_progress:
            on_progress(f"{name}: loading on {engine}")
        try:
            scorer = open_encoder_scorer(engine, model_dir, name, pad_id)
        except UserError:
            raise
        except Exception as exc:  # a precision that fails to load is reported, not scored 0
            results.append(_not_loaded(name, engine, exc))
            continue
        try:
            if on_progress:
                on_progress(f"{name}: scoring {len(examples)} examples")
            rows = scorer.logits(examples)
        finally:
            scorer.close()
        logits[name] = rows
        accuracy = None
        if labels:
            correct = (rows[-len(labels) :].argmax(axis=1) == np.array(labels)).tolist()
            accuracy = accuracy_estimate(correct, bootstrap, seed)
        results.append(
            PrecisionQuality(
                precision=name,
                method=scorer.method,
                status="measured",
                examples=len(examples),
                accuracy=accuracy,
                items=len(labels) or None,
                seconds=round(time.perf_counter() - started, 3),
            )
        )

    baseline = names[0]
    if baseline in logits:
        base = logits[baseline]
        base_top1 = base.argmax(axis=1)
        for index, result in enumerate(results):
            if result.precision == baseline or result.precision not in logits:
                continue
            mine = logits[result.precision]
            agreement, delta = agreement_delta(
                (mine.argmax(axis=1) == base_top1).tolist(), baseline, bootstrap, seed
            )
            deltas = [delta]
            if labels:
                deltas.append(
                    accuracy_delta(
                        (mine[-len(labels) :].argmax(axis=1) == np.array(labels)).tolist(),
                        (base[-len(labels) :].argmax(axis=1) == np.array(labels)).tolist(),
                        baseline,
                        bootstrap,
                        seed,
                    )
                )
            results[index] = result.model_copy(
                update={
                    "agreement": agreement,
                    "max_abs_logit_diff": max_abs_difference(mine, base),
                    "deltas": deltas,
                }
            )

    return QualityResult(
        model=model,
        model_path=model_dir,
        engine=engine,
        baseline=baseline,
        text_file=text_file,
        labelled_file=labelled_file,
        window=max(len(ids) for ids in examples),
        bootstrap=bootstrap,
        seed=seed,
        method=method_text(bootstrap, seed),
        precisions=results,
        command=command,
        environment=fingerprint(),
    )
