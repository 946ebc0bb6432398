"""Quality beside speed: the evaluation inputs, the typed QualityResult, and its intervals.

What is measured, per precision of one checkpoint (docs/quality.md):
- perplexity on a text file: the file is tokenized once, cut into non-overlapping windows of
  `window` tokens, each scored teacher-forced with a BOS in front; perplexity =
  exp(sum of token negative log-likelihoods / tokens scored), over every window;
- accuracy on a labelled JSONL (`prompt`, `answer`, optional `choices`): with `choices`, the item
  is right when the answer is the choice of highest summed log-likelihood after the prompt (the
  log-likelihood pick of lm-evaluation-harness's multiple-choice tasks); without, when every
  answer token is the model's greedy (argmax) next token after the prompt and the answer tokens
  before it (lm-evaluation-harness's `is_greedy`, i.e. greedy decoding reproduces the answer);
- for a classifier (an encoder with a classification head), per example of the text file (one a
  line) or the labelled file: the top-1 class agreement with the baseline precision and the
  maximum absolute difference of the class logits from the baseline's; with labels, accuracy.

Intervals are percentile bootstraps over the evaluation units (windows, items), seeded. The delta
of a precision vs the baseline is paired: each draw resamples the same units for both, so the
spread of the data set itself cancels. The delta is "indistinguishable" when its interval covers
0, else "worse" or "better" for that precision. Agreement is itself a comparison with the baseline:
its delta is agreement - 1 (0 when every example keeps its class), with the agreement's interval.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import Field, ValidationError

from bench.core.errors import UserError
from bench.core.files import parse_json, read_user_bytes, shown_path
from bench.core.fingerprint import Fingerprint
from bench.core.stats import BOOTSTRAP, CONFIDENCE, SEED, Interval
from bench.core.strict import Strict, StrictInput, describe_validation_error

QUALITY_SCHEMA_VERSION = 1
MAX_ITEMS = 100_000
DeltaVerdict = Literal["worse", "better", "indistinguishable", "unknown"]

QualityPrecisionName = Literal["fp32", "bf16", "fp16", "fp8", "fp8-kv", "int8"]
QUALITY_PRECISIONS: tuple[str, ...] = ("fp32", "bf16", "fp16", "fp8", "fp8-kv", "int8")
"""The precision names `bench quality` takes. What each one is on a given engine (real FP8
kernels, simulated FP8 weights, dynamic INT8) is written into its result's `method`."""


def check_precision(name: str) -> QualityPrecisionName:
    """The name itself, or UserError listing the known ones."""
    if name not in QUALITY_PRECISIONS:
        raise UserError(f"unknown precision {name!r}; use one of {', '.join(QUALITY_PRECISIONS)}")
    return name  # type: ignore[return-value]


# --------------------------------------------------------------------------- inputs


class LabelledItem(StrictInput):
    """One line of a labelled JSONL evaluation file."""

    prompt: str = Field(min_length=1, description="Text the model continues.")
    answer: str = Field(min_length=1, description="Expected continuation (exact match).")
    choices: list[str] | None = Field(
        None,
        min_length=2,
        description="Multiple choice: candidate continuations; the answer must be one of them.",
    )


def _text_of(raw: bytes, what: str, path: str) -> str:
    where = f"{what} {shown_path(path)}"
    if not raw.strip():
        raise UserError(f"{where} is empty")
    if b"\x00" in raw:
        raise UserError(f"{where} is binary (it has NUL bytes); give a UTF-8 text file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{where}: not UTF-8 text (byte {exc.start}); give a text file") from None


def read_text_file(path: str) -> str:
    """The evaluation text; UserError when empty, binary or not UTF-8."""
    return _text_of(read_user_bytes(path, "text file"), "text file", path)


def read_labelled_file(path: str) -> list[LabelledItem]:
    """The labelled items of a JSONL file; UserError (naming the line) for any bad line."""
    text = _text_of(read_user_bytes(path, "labelled file"), "labelled file", path)
    items: list[LabelledItem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"labelled file {shown_path(path)} line {number}"
        data = parse_json(line, where)
        if not isinstance(data, dict):
            raise UserError(f"{where}: expected an object with prompt and answer")
        if "answer" not in data:
            raise UserError(f"{where}: no answer (each line needs prompt and answer)")
        try:
            item = LabelledItem.model_validate(data)
        except ValidationError as exc:
            raise UserError(f"{where}: {describe_validation_error(exc)}") from None
        if item.choices is not None and item.answer not in item.choices:
            raise UserError(f"{where}: answer {item.answer!r} is not one of its choices")
        items.append(item)
        if len(items) > MAX_ITEMS:
            raise UserError(f"labelled file {shown_path(path)} has more than {MAX_ITEMS} items")
    if not items:
        raise UserError(f"labelled file {shown_path(path)} has no items")
    return items


# --------------------------------------------------------------------------- result


class Estimate(Strict):
    """A figure on the evaluation set with its 95% percentile-bootstrap interval."""

    value: float
    interval: Interval | None = Field(None, description="None with a single unit (no spread).")
    units: int = Field(description="Windows (perplexity) or items (accuracy) resampled.")


class QualityDelta(Strict):
    """A precision minus the baseline on one metric, paired over the same units."""

    metric: Literal["perplexity", "accuracy", "agreement"]
    baseline: str
    value: float = Field(description="This precision's figure minus the baseline's.")
    relative: float | None = Field(
        None, description="value / baseline figure (perplexity: the relative increase)."
    )
    interval: Interval | None = None
    verdict: DeltaVerdict = Field(
        description="indistinguishable when the interval covers 0; worse/better otherwise "
        "(higher perplexity, lower accuracy is worse)."
    )

    def loss_pct(self) -> float:
        """Quality lost, in percent: perplexity's relative increase, accuracy points lost, or the
        share of examples whose top-1 class changed (agreement: an upper bound on the accuracy
        points a changed class can cost)."""
        if self.metric == "perplexity":
            return 100.0 * (self.relative or 0.0)
        return -100.0 * self.value


class PrecisionQuality(Strict):
    """One precision's quality, or why it was not run (never a score of 0)."""

    precision: QualityPrecisionName
    method: str = Field(description="What this precision is on this engine, in words.")
    status: Literal["measured", "not run"]
    reason: str | None = Field(None, description="Why not run (status 'not run').")
    perplexity: Estimate | None = None
    tokens_scored: int | None = None
    accuracy: Estimate | None = None
    items: int | None = None
    agreement: Estimate | None = Field(
        None,
        description="Classifiers: share of examples whose top-1 class equals the baseline's "
        "(None for the baseline itself).",
    )
    max_abs_logit_diff: float | None = Field(
        None,
        description="Classifiers: the largest |logit - baseline logit| over every example and "
        "class (None for the baseline itself).",
    )
    examples: int | None = Field(None, description="Classifiers: examples scored.")
    deltas: list[QualityDelta] = Field(default_factory=list)
    seconds: float | None = Field(None, description="Load and scoring wall time.")

    def delta(self, metric: str) -> QualityDelta | None:
        return next((d for d in self.deltas if d.metric == metric), None)

    def loss_pct(self) -> float | None:
        """The largest measured loss over the metrics (percent), None without a delta."""
        losses = [d.loss_pct() for d in self.deltas]
        return max(losses) if losses else None

    def summary(self) -> str:
        """One short cell: `ppl 12.3 (+0.15, +1.2%, indistinguishable)`, `acc 80.0% (-2.0 pts,
        worse)`, `top-1 agree 99.0% (worse), max |dlogit| 0.012`, or `not run: reason`."""
        if self.status != "measured":
            return f"not run: {self.reason}"
        parts: list[str] = []
        if self.perplexity is not None:
            text = f"ppl {self.perplexity.value:.4g}"
            delta = self.delta("perplexity")
            if delta is not None:
                text += (
                    f" ({delta.value:+.3g}, {100 * (delta.relative or 0):+.2f}%, {delta.verdict})"
                )
            parts.append(text)
        if self.accuracy is not None:
            text = f"acc {100 * self.accuracy.value:.1f}%"
            delta = self.delta("accuracy")
            if delta is not None:
                text += f" ({100 * delta.value:+.1f} pts, {delta.verdict})"
            parts.append(text)
        if self.agreement is not None:
            text = f"top-1 agree {100 * self.agreement.value:.1f}%"
            delta = self.delta("agreement")
            if delta is not None:
                text += f" ({delta.verdict})"
            if self.max_abs_logit_diff is not None:
                text += f", max |dlogit| {self.max_abs_logit_diff:.3g}"
            parts.append(text)
        elif self.examples is not None and not parts:
            parts.append(f"{self.examples} examples")
        return "; ".join(parts)


class QualityResult(Strict):
    """`bench quality`'s output: one checkpoint, one engine, every precision asked for."""

    schema_version: int = QUALITY_SCHEMA_VERSION
    model: str
    model_path: str
    engine: str
    baseline: QualityPrecisionName
    text_file: str | None = None
    labelled_file: str | None = None
    window: int = Field(
        description="Causal LMs: tokens per perplexity window; classifiers: the most tokens of "
        "any example."
    )
    bootstrap: int
    seed: int
    confidence: float = CONFIDENCE
    method: str = Field(description="How the intervals and verdicts were computed, in words.")
    precisions: list[PrecisionQuality]
    command: str | None = None
    environment: Fingerprint | None = Field(
        None, description="Where it was measured (host, GPUs, library versions)."
    )

    def precision(self, name: str) -> PrecisionQuality | None:
        return next((p for p in self.precisions if p.precision == name), None)


def load_quality_result(path: str) -> QualityResult:
    """A QualityResult JSON file; UserError for anything else."""
    raw = read_user_bytes(path, "quality result")
    data = parse_json(raw, f"quality result {shown_path(path)}")
    try:
        return QualityResult.model_validate(data)
    except ValidationError as exc:
        raise UserError(
            f"quality result {shown_path(path)}: {describe_validation_error(exc)}"
        ) from None


# --------------------------------------------------------------------------- scoring maths


class WindowScore(Strict):
    """A perplexity unit: the summed negative log-likelihood of its scored tokens."""

    nll: float
    tokens: int


def perplexity(windows: Sequence[WindowScore]) -> float:
    total = sum(w.tokens for w in windows)
    return math.exp(sum(w.nll for w in windows) / total)


def _quantiles(draws: np.ndarray) -> Interval | None:
    finite = draws[np.isfinite(draws)]
    if not finite.size:
        return None
    alpha = (1.0 - CONFIDENCE) / 2
    low, high = np.quantile(finite, [alpha, 1.0 - alpha])
    return Interval(low=float(low), high=float(high))


DRAW_BLOCK = 100
"""Bootstrap draws made at once: memory stays DRAW_BLOCK x units indices, whatever --bootstrap."""


def _draws(units: int, bootstrap: int, seed: int, statistic) -> np.ndarray:
    """`statistic(indices)` over `bootstrap` resamples of `units` (each row one resample), made
    DRAW_BLOCK rows at a time from one seeded generator. Paired deltas pass one statistic that
    evaluates both sides on the same rows."""
    rng = np.random.default_rng(seed)
    blocks = []
    for start in range(0, bootstrap, DRAW_BLOCK):
        rows = min(DRAW_BLOCK, bootstrap - start)
        blocks.append(statistic(rng.integers(0, units, size=(rows, units))))
    return np.concatenate(blocks)


def _ppl_draws(windows: Sequence[WindowScore], indices: np.ndarray) -> np.ndarray:
    nll = np.array([w.nll for w in windows])[indices].sum(axis=1)
    tokens = np.array([w.tokens for w in windows])[indices].sum(axis=1)
    return np.exp(nll / tokens)


def perplexity_estimate(
    windows: Sequence[WindowScore], bootstrap: int = BOOTSTRAP, seed: int = SEED
) -> Estimate:
    """Perplexity with an interval from resampling windows (a ratio estimator: the total NLL
    over the total tokens of each draw)."""
    value = perplexity(windows)
    if len(windows) < 2:
        return Estimate(value=value, units=len(windows))
    draws = _draws(len(windows), bootstrap, seed, lambda rows: _ppl_draws(windows, rows))
    return Estimate(value=value, interval=_quantiles(draws), units=len(windows))


def accuracy_estimate(correct: Sequence[bool], bootstrap: int = BOOTSTRAP, seed: int = SEED):
    """Fraction right, with an interval from resampling items."""
    values = np.array(correct, dtype=float)
    if len(values) < 2:
        return Estimate(value=float(values.mean()), units=len(values))
    draws = _draws(len(values), bootstrap, seed, lambda rows: values[rows].mean(axis=1))
    return Estimate(value=float(values.mean()), interval=_quantiles(draws), units=len(values))


def _verdict(interval: Interval | None, higher_is_worse: bool) -> DeltaVerdict:
    if interval is None:
        return "unknown"
    if interval.low <= 0.0 <= interval.high:
        return "indistinguishable"
    above = interval.low > 0.0
    return "worse" if above == higher_is_worse else "better"


def perplexity_delta(
    candidate: Sequence[WindowScore],
    baseline: Sequence[WindowScore],
    baseline_name: str,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
) -> QualityDelta:
    """candidate - baseline perplexity, paired over the same windows."""
    if len(candidate) != len(baseline):
        raise ValueError("paired deltas need the same windows on both sides")
    base = perplexity(baseline)
    value = perplexity(candidate) - base
    interval = None
    if len(candidate) >= 2:
        interval = _quantiles(
            _draws(
                len(candidate),
                bootstrap,
                seed,
                lambda rows: _ppl_draws(candidate, rows) - _ppl_draws(baseline, rows),
            )
        )
    return QualityDelta(
        metric="perplexity",
        baseline=baseline_name,
        value=value,
        relative=value / base,
        interval=interval,
        verdict=_verdict(interval, higher_is_worse=True),
    )


def accuracy_delta(
    candidate: Sequence[bool],
    baseline: Sequence[bool],
    baseline_name: str,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
) -> QualityDelta:
    """candidate - baseline accuracy, paired over the same items."""
    if len(candidate) != len(baseline):
        raise ValueError("paired deltas need the same items on both sides")
    a, b = np.array(candidate, dtype=float), np.array(baseline, dtype=float)
    value = float(a.mean() - b.mean())
    interval = None
    if len(a) >= 2:
        interval = _quantiles(
            _draws(
                len(a), bootstrap, seed, lambda rows: a[rows].mean(axis=1) - b[rows].mean(axis=1)
            )
        )
    base = float(b.mean())
    return QualityDelta(
        metric="accuracy",
        baseline=baseline_name,
        value=value,
        relative=value / base if base else None,
        interval=interval,
        verdict=_verdict(interval, higher_is_worse=False),
    )


def agreement_delta(
    agree: Sequence[bool], baseline_name: str, bootstrap: int = BOOTSTRAP, seed: int = SEED
) -> tuple[Estimate, QualityDelta]:
    """Top-1 agreement with the baseline (the share of examples whose class is the baseline's)
    and its delta, agreement - 1, with the same interval shifted: "indistinguishable" while the
    interval reaches full agreement, "worse" when it stays below."""
    estimate = accuracy_estimate(agree, bootstrap, seed)
    interval = estimate.interval
    shifted = (
        Interval(low=interval.low - 1.0, high=interval.high - 1.0) if interval is not None else None
    )
    delta = QualityDelta(
        metric="agreement",
        baseline=baseline_name,
        value=estimate.value - 1.0,
        relative=estimate.value - 1.0,
        interval=shifted,
        verdict=_verdict(shifted, higher_is_worse=False),
    )
    return estimate, delta


def max_abs_difference(logits: np.ndarray, baseline: np.ndarray) -> float:
    """The largest |logit - baseline logit| over every example and class."""
    if logits.shape != baseline.shape:
        raise ValueError("logits of both precisions must have the same shape")
    return float(np.max(np.abs(logits.astype(np.float64) - baseline.astype(np.float64))))


def method_text(bootstrap: int, seed: int) -> str:
    return (
        f"{CONFIDENCE:.0%} percentile bootstrap ({bootstrap} draws, seed {seed}) over windows "
        "(perplexity), items (accuracy) and examples (top-1 agreement); deltas vs the baseline "
        "paired (the same units "
        "resampled for both precisions in each draw); indistinguishable when the delta's "
        "interval covers 0"
    )


def dumps(result: QualityResult) -> str:
    return json.dumps(result.model_dump(mode="json"), indent=2) + "\n"
