"""A learned second opinion: a scikit-learn decision tree fitted on stored evidence.

Each workload group (same model, GPU, kind, shape, load level and precision) where at least two
frameworks have VALID runs is one example; its label is the framework with the best mean
throughput (output tokens/s for generate, requests/s for forward). The fitted tree is shown as text
with its cross-validated accuracy next to the majority-class baseline. It is a second opinion
only: the recommendation never follows it over measurements, and with too little evidence it says
so instead of fitting.

It is shown only when it beats guessing: its cross-validated accuracy (correct out-of-fold
predictions k of n groups) has a 95% Wilson score interval, and the tree is shown only when that
interval's lower bound is above the majority baseline (`shown`). Otherwise the whole opinion is
one line, "not enough stored evidence for a learned opinion (accuracy X vs baseline Y)", and
callers show that line and nothing else. Wilson rather than the normal approximation because n is
small (tens of groups) and accuracies sit near 1, where the normal interval leaves [0, 1].
"""

from __future__ import annotations

import statistics
from collections import Counter
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field

from advisor.sizing.estimate import DTYPE_BYTES
from advisor.sizing.measured import run_gpu_name
from advisor.workload.architectures import ARCHITECTURES
from advisor.workload.gpus import GPUS
from advisor.workload.profile import StageProfile
from bench.core.config import GenerateWorkload
from bench.core.schema import RunResult, RunStatus, ValidityStatus

FEATURES = (
    "generate_kind",
    "parameters_b",
    "prompt_tokens_mean",
    "output_tokens_mean",
    "batch_size",
    "concurrency",
    "request_rate_rps",
    "gpu_memory_gb",
    "dtype_bytes",
)
MIN_GROUPS = 6
"""Fewer labelled workload groups than this is too little to fit and cross-validate honestly."""
MAX_DEPTH = 3
Z_95 = 1.959963984540054
NOT_ENOUGH = "not enough stored evidence for a learned opinion"


def wilson_interval(correct: int, total: int, z: float = Z_95) -> tuple[float, float]:
    """95% Wilson score interval of a proportion correct / total."""
    if total <= 0:
        return 0.0, 1.0
    p = correct / total
    denominator = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denominator
    half = z * ((p * (1 - p) / total + z * z / (4 * total * total)) ** 0.5) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


class LearnedOpinion(BaseModel):
    """The fitted tree as text, its cross-validated accuracy, and its guess for one stage."""

    fitted: bool
    message: str
    runs: int = Field(0, description="VALID runs behind the examples.")
    groups: int = Field(0, description="Workload groups with >= 2 frameworks compared.")
    class_counts: dict[str, int] = Field(default_factory=dict)
    cv_scheme: str | None = None
    cv_accuracy: float | None = None
    baseline_accuracy: float | None = Field(
        None, description="Accuracy of always guessing the most common winner."
    )
    cv_accuracy_low: float | None = Field(
        None, description="Lower end of the accuracy's 95% Wilson interval."
    )
    cv_accuracy_high: float | None = Field(
        None, description="Upper end of the accuracy's 95% Wilson interval."
    )
    shown: bool = Field(
        False,
        description="True only when the accuracy interval's lower end beats the baseline: "
        "otherwise callers show `message` alone.",
    )
    tree_text: str | None = None
    features: list[str] = Field(default_factory=lambda: list(FEATURES))
    prediction: str | None = Field(None, description="The tree's winner for the stage asked.")
    agrees_with: str | None = None


def _throughput(run: RunResult) -> float | None:
    if run.summary is None:
        return None
    if run.config.workload.kind == "generate":
        return run.summary.output_throughput_tok_s
    return run.summary.request_throughput_rps


def _parameters_b(run: RunResult) -> float:
    if run.model is not None and run.model.parameters:
        return run.model.parameters / 1e9
    architecture = ARCHITECTURES.get(run.config.model)
    return architecture.parameters / 1e9 if architecture else 0.0


def run_features(run: RunResult) -> dict[str, float]:
    config = run.config
    workload = config.workload
    gpu = run_gpu_name(run)
    kind, level = config.load.fixed_level() or (None, 0.0)
    generate = isinstance(workload, GenerateWorkload)
    return {
        "generate_kind": 1.0 if generate else 0.0,
        "parameters_b": _parameters_b(run),
        "prompt_tokens_mean": float(workload.prompt_tokens.mean) if generate else 0.0,
        "output_tokens_mean": float(workload.output_tokens.mean) if generate else 0.0,
        "batch_size": 0.0 if generate else float(workload.batch_size),
        "concurrency": level if kind == "concurrency" else 0.0,
        "request_rate_rps": level if kind == "rate" else 0.0,
        "gpu_memory_gb": float(GPUS[gpu].memory_gb) if gpu in GPUS else 0.0,
        "dtype_bytes": _weight_bytes(config.precision.dtype, config.precision.quantization),
    }


def _weight_bytes(dtype: str, quantization: str | None) -> float:
    """Bytes a weight takes: 8-bit formats (FP8, INT8 W8A8) are their own precision, never a
    rung of the 16-bit group (a run of each would average two precisions into one winner)."""
    scheme = (quantization or "").lower()
    return 1.0 if "fp8" in scheme or "int8" in scheme else DTYPE_BYTES[dtype]


def stage_features(stage: StageProfile, parameters_b: float | None) -> dict[str, float]:
    generate = stage.kind == "generate"
    return {
        "generate_kind": 1.0 if generate else 0.0,
        "parameters_b": parameters_b or 0.0,
        "prompt_tokens_mean": float(stage.prompt_tokens.mean) if generate else 0.0,
        "output_tokens_mean": float(stage.output_tokens.mean) if generate else 0.0,
        "batch_size": 0.0 if generate else float(stage.batch_size),
        "concurrency": float(stage.concurrency or 0),
        "request_rate_rps": float(stage.request_rate_rps or 0),
        "gpu_memory_gb": float(stage.gpu.memory_gb or 0),
        "dtype_bytes": _weight_bytes(stage.precision.dtype, stage.precision.quantization),
    }


def labelled_groups(runs: list[RunResult]) -> tuple[list[dict[str, float]], list[str], int]:
    """(features, winning framework) per workload group with >= 2 frameworks; runs used."""
    groups: dict[tuple, dict[str, list[float]]] = {}
    features_of: dict[tuple, dict[str, float]] = {}
    for run in runs:
        valid = run.validity is not None and run.validity.status == ValidityStatus.VALID
        throughput = _throughput(run)
        if run.status != RunStatus.COMPLETED or not valid or throughput is None:
            continue
        features = run_features(run)
        key = (run.config.model, run_gpu_name(run), *features.values())
        groups.setdefault(key, {}).setdefault(run.config.framework, []).append(throughput)
        features_of[key] = features
    x: list[dict[str, float]] = []
    y: list[str] = []
    used = 0
    for key, by_framework in groups.items():
        if len(by_framework) < 2:
            continue
        winner = max(by_framework, key=lambda name: statistics.mean(by_framework[name]))
        x.append(features_of[key])
        y.append(winner)
        used += sum(len(values) for values in by_framework.values())
    return x, y, used


def learned_opinion(
    runs: list[RunResult],
    stage: StageProfile | None = None,
    parameters_b: float | None = None,
    recommended: str | None = None,
) -> LearnedOpinion:
    """Fit the tree on the runs' workload groups; predict for `stage` when given."""
    x, y, used = labelled_groups(runs)
    rows = tuple(tuple(row[name] for name in FEATURES) for row in x)
    fitted, classifier = _fit(rows, tuple(y), used)
    opinion = fitted.model_copy(deep=True)
    if classifier is not None and stage is not None:
        import numpy as np

        features = stage_features(stage, parameters_b)
        row = np.array([[features[name] for name in FEATURES]])
        opinion.prediction = str(classifier.predict(row)[0])
        if recommended is not None:
            opinion.agrees_with = (
                "agrees" if opinion.prediction == recommended else "disagrees"
            ) + f" with the recommendation ({recommended})"
    return opinion


@lru_cache(maxsize=8)
def _fit(rows: tuple[tuple[float, ...], ...], y: tuple[str, ...], used: int) -> tuple:
    """The fitted opinion (no prediction yet) and its tree when it is shown, by the labelled
    groups themselves: the same evidence gives the same fit, so every workload asked about
    (the app asks once per form edit) reuses it; its cross-validation was most of an answer's
    time. Callers copy the opinion before adding their prediction."""
    counts = dict(Counter(y))
    if len(y) < MIN_GROUPS or len(counts) < 2:
        why = (
            f"{len(y)} workload group(s) with two or more frameworks compared"
            f" ({used} VALID runs) and {len(counts)} distinct winner(s)"
        )
        return LearnedOpinion(
            fitted=False,
            message=f"{NOT_ENOUGH} ({why}; a fit needs at least {MIN_GROUPS} groups and 2 "
            "different winners).",
            runs=used,
            groups=len(y),
            class_counts=counts,
        ), None
    import numpy as np
    from sklearn.model_selection import LeaveOneOut, StratifiedKFold, cross_val_predict
    from sklearn.tree import DecisionTreeClassifier, export_text

    matrix = np.array(rows)
    labels = np.array(y)
    smallest = min(counts.values())
    if smallest >= 2:
        folds = min(5, smallest)
        splitter: Any = StratifiedKFold(n_splits=folds, shuffle=True, random_state=0)
        scheme = f"stratified {folds}-fold (k = min(5, smallest class size {smallest}))"
    else:
        splitter = LeaveOneOut()
        scheme = f"leave-one-out (smallest class has {smallest} example)"
    classifier = DecisionTreeClassifier(max_depth=MAX_DEPTH, random_state=0)
    predicted = cross_val_predict(classifier, matrix, labels, cv=splitter)
    correct = int((predicted == labels).sum())
    accuracy = correct / len(y)
    low, high = wilson_interval(correct, len(y))
    baseline = max(counts.values()) / len(y)
    classifier.fit(matrix, labels)
    opinion = LearnedOpinion(
        fitted=True,
        message=f"Decision tree (max depth {MAX_DEPTH}) fitted on {len(y)} workload groups "
        f"from {used} VALID runs; a second opinion, never used over measurements.",
        runs=used,
        groups=len(y),
        class_counts=counts,
        cv_scheme=scheme,
        cv_accuracy=accuracy,
        baseline_accuracy=baseline,
        cv_accuracy_low=low,
        cv_accuracy_high=high,
        shown=low > baseline,
        tree_text=export_text(classifier, feature_names=list(FEATURES)),
    )
    if not opinion.shown:
        # No better than guessing the most common winner, within its own interval: one line.
        opinion.message = f"{NOT_ENOUGH} (accuracy {accuracy:.2f} vs baseline {baseline:.2f})"
        opinion.tree_text = None
        return opinion, None
    return opinion, classifier


__all__ = [
    "FEATURES",
    "NOT_ENOUGH",
    "LearnedOpinion",
    "labelled_groups",
    "learned_opinion",
    "run_features",
    "wilson_interval",
]
