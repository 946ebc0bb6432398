"""The decision tree: loaded from data/decision_tree.yaml, validated at load, evaluated per stage.

Conditions are a small data language (see the YAML's header), evaluated without `eval`: a field
path into the stage profile (or `estimate.*`), one comparison, or all/any/not of conditions.
Evaluation returns the path taken (question, answer, why) and the leaf's ranked candidates.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from advisor.sizing.estimate import Estimate
from advisor.workload.profile import StageProfile
from bench.core.errors import UserError
from bench.core.strict import Strict, describe_validation_error

DEFAULT_TREE_PATH = Path(__file__).resolve().parents[2] / "data" / "decision_tree.yaml"
BENCHMARKABLE_FRAMEWORKS = (
    "pytorch",
    "torch_compile",
    "vllm",
    "tensorrt_llm",
    "tensorrt",
    "onnxruntime",
    "openai",
)
"""Backend registry names: the bench can run these."""
SERVED_THROUGH_OPENAI = {"sglang": {"launch": "sglang"}}
"""Frameworks with no adapter of their own that the bench measures through the `openai`
backend's launcher (`python -m sglang.launch_server`): the options that launch them."""
NOT_BENCHMARKED_FRAMEWORKS = ("jax",)
"""Named by the article (PyTorch/JAX) but not run by the bench; shown as `benchmarked: false`."""
KNOWN_FRAMEWORKS = (
    BENCHMARKABLE_FRAMEWORKS + tuple(SERVED_THROUGH_OPENAI) + NOT_BENCHMARKED_FRAMEWORKS
)


def run_backend(framework: str) -> tuple[str, dict[str, str]]:
    """(backend registry name, engine options that start the framework) of a candidate."""
    if framework in SERVED_THROUGH_OPENAI:
        return "openai", dict(SERVED_THROUGH_OPENAI[framework])
    return framework, {}


COMPARISONS = (
    "equals",
    "not_equals",
    "lt",
    "le",
    "gt",
    "ge",
    "in",
    "not_in",
    "contains_any",
    "is_set",
)


class Condition(Strict):
    """`{field, <one comparison>}` or exactly one of `all`, `any`, `not`."""

    field: str | None = None
    equals: Any = None
    not_equals: Any = None
    lt: float | None = None
    le: float | None = None
    gt: float | None = None
    ge: float | None = None
    in_: list[Any] | None = Field(None, alias="in")
    not_in: list[Any] | None = None
    contains_any: list[Any] | None = None
    """A list field (constraints) holds at least one of these."""
    is_set: bool | None = None
    all_: list[Condition] | None = Field(None, alias="all")
    any_: list[Condition] | None = Field(None, alias="any")
    not_: Condition | None = Field(None, alias="not")

    @model_validator(mode="after")
    def _one_form(self) -> Condition:
        given = self.model_fields_set
        comparisons = [c for c in COMPARISONS if _attr(c) in given]
        combinators = [c for c in ("all_", "any_", "not_") if c in given]
        if self.field is not None:
            if len(comparisons) != 1 or combinators:
                raise ValueError(
                    f"condition on {self.field!r} needs exactly one of {', '.join(COMPARISONS)}"
                )
        elif len(combinators) != 1 or comparisons:
            raise ValueError("a condition is {field, <comparison>} or exactly one of all/any/not")
        return self

    def fields(self) -> list[str]:
        if self.field is not None:
            return [self.field]
        children = self.all_ or self.any_ or ([self.not_] if self.not_ else [])
        return [name for child in children for name in child.fields()]

    def evaluate(self, context: dict[str, Any]) -> bool:
        if self.all_ is not None:
            return all(child.evaluate(context) for child in self.all_)
        if self.any_ is not None:
            return any(child.evaluate(context) for child in self.any_)
        if self.not_ is not None:
            return not self.not_.evaluate(context)
        value = resolve(context, self.field or "")
        op = next(c for c in COMPARISONS if _attr(c) in self.model_fields_set)
        expected = getattr(self, _attr(op))
        if op == "is_set":
            has_value = value is not None and value != [] and value != ""
            return has_value == bool(expected)
        if value is None:
            return False  # unknown never satisfies a comparison
        if op == "equals":
            return value == expected
        if op == "not_equals":
            return value != expected
        if op == "in":
            return value in expected
        if op == "not_in":
            return value not in expected
        if op == "contains_any":
            return isinstance(value, list | tuple | set) and any(v in expected for v in value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        return {
            "lt": value < expected,
            "le": value <= expected,
            "gt": value > expected,
            "ge": value >= expected,
        }[op]


def _attr(op: str) -> str:
    return {"in": "in_", "all": "all_", "any": "any_", "not": "not_"}.get(op, op)


def resolve(context: dict[str, Any], path: str) -> Any:
    """The value at a dotted path; None when any part is missing."""
    value: Any = context
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


class Question(Strict):
    ask: str
    test: Condition
    yes: str
    no: str
    why_yes: str = ""
    why_no: str = ""
    promote_on_yes: list[str] = Field(
        default_factory=list,
        description="Frameworks moved ahead of the leaf's others (in the leaf's order) when "
        "the answer is yes; a question may send yes and no to the same node.",
    )


class LeafCandidate(Strict):
    framework: str
    rationale: str
    caveats: list[str] = Field(default_factory=list)


class ConditionalCaveat(Strict):
    when: Condition
    text: str


class Leaf(Strict):
    """A leaf names ranked candidates, or (`refuses: true`) says nothing can serve the stage as
    asked: such a leaf has no candidates, and its reason comes from the estimate."""

    title: str
    refuses: bool = False
    candidates: list[LeafCandidate] = Field(default_factory=list)
    caveats: list[str] = Field(default_factory=list)
    caveats_when: list[ConditionalCaveat] = Field(default_factory=list)

    @model_validator(mode="after")
    def _candidates_unless_refusing(self) -> Leaf:
        if self.refuses and self.candidates:
            raise ValueError("a refusing leaf names no candidates")
        if not self.refuses and not self.candidates:
            raise ValueError("a leaf needs at least one candidate (or refuses: true)")
        return self


class DecisionTree(Strict):
    version: int = 1
    root: str
    questions: dict[str, Question]
    leaves: dict[str, Leaf]
    source: str = ""


class PathStep(BaseModel):
    """One question on the path: the answer taken and why (the facts tested and the reason)."""

    node: str
    question: str
    answer: str
    why: str


class Candidate(BaseModel):
    framework: str
    rank: int
    rationale: str
    caveats: list[str] = Field(default_factory=list)
    benchmarked: bool = True


class Decision(BaseModel):
    """Where the tree led for one stage: the path and the leaf's ranked candidates."""

    leaf: str
    title: str
    path: list[PathStep]
    candidates: list[Candidate]
    caveats: list[str] = Field(default_factory=list)
    refused: str | None = Field(
        None, description="Why no framework can serve the stage as asked (a refusing leaf)."
    )

    @property
    def first(self) -> Candidate:
        return self.candidates[0]


# --------------------------------------------------------------------------- loading


def known_fields() -> set[str]:
    """Every dotted path a condition may test: stage-profile fields and estimate.<field>."""
    paths: set[str] = set()

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in model.model_fields.items():
            paths.add(prefix + name)
            annotation = info.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, prefix + name + ".")

    walk(StageProfile, "")
    from advisor.workload.architectures import ContextWindow
    from advisor.workload.profile import GpuProfile, ProfileSLO

    walk(GpuProfile, "gpu.")
    walk(ProfileSLO, "slo.")
    walk(Estimate, "estimate.")
    walk(ContextWindow, "estimate.context.")
    return paths


def load_tree(path: str | Path | None = None) -> DecisionTree:
    """Load and validate the tree; any defect is a UserError naming the node.

    A file read before and unchanged since (same inode, size and modification time) is not
    parsed again: every recommendation loads the tree, and on the web app each form edit makes
    one, where the YAML parse was ~24 ms of the ~0.2 s of server CPU the edit costs. The caller
    gets its own copy (a deep copy costs ~0.5 ms), so nothing it does reaches the cache."""
    file = Path(path) if path is not None else DEFAULT_TREE_PATH
    try:
        stat = file.stat()
    except OSError:  # missing or unreadable: the uncached read says why, as before
        return _parse_tree(file)
    # The path as given (the tree's `source` and its messages name it so) and the file it
    # names now: a relative path read from another folder is another file, another key.
    key = (str(file), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)
    return _parsed_tree(*key).model_copy(deep=True)


@functools.lru_cache(maxsize=8)
def _parsed_tree(path: str, device: int, inode: int, size: int, mtime_ns: int) -> DecisionTree:
    """The tree file's parse, by what identifies its content on disk (a defect is not kept:
    lru_cache stores no exception, so a fixed file is read again)."""
    del device, inode, size, mtime_ns  # the cache key only
    return _parse_tree(Path(path))


def _parse_tree(file: Path) -> DecisionTree:
    from bench.core.files import load_user_mapping

    data = _yes_no_keys(load_user_mapping(file, "decision tree"))
    try:
        tree = DecisionTree.model_validate({**data, "source": str(file)})
    except ValidationError as exc:
        message = describe_validation_error(exc, DecisionTree)
        raise UserError(f"decision tree {file}: {message}") from None
    validate_tree(tree)
    return tree


def _yes_no_keys(data: Any) -> Any:
    """YAML 1.1 reads unquoted `yes:`/`no:` keys as booleans; turn them back into names."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if key is True:
                key = "yes"
            elif key is False:
                key = "no"
            out[key] = _yes_no_keys(value)
        return out
    if isinstance(data, list):
        return [_yes_no_keys(item) for item in data]
    return data


def validate_tree(tree: DecisionTree) -> None:
    """Every branch reaches a leaf, no cycles, nothing unreachable, known frameworks and fields."""
    prefix = f"decision tree {tree.source or '(in memory)'}"
    overlap = set(tree.questions) & set(tree.leaves)
    if overlap:
        raise UserError(f"{prefix}: {sorted(overlap)[0]!r} is both a question and a leaf")
    if tree.root not in tree.questions and tree.root not in tree.leaves:
        raise UserError(f"{prefix}: root {tree.root!r} is neither a question nor a leaf")
    fields = known_fields()
    for node_id, question in tree.questions.items():
        for branch in ("yes", "no"):
            target = getattr(question, branch)
            if target not in tree.questions and target not in tree.leaves:
                raise UserError(
                    f"{prefix}: node {node_id!r}: branch {branch!r} goes to {target!r}, "
                    "which is neither a question nor a leaf"
                )
        for field in question.test.fields():
            if field not in fields:
                raise UserError(f"{prefix}: node {node_id!r}: unknown field {field!r} in its test")
        for framework in question.promote_on_yes:
            if framework not in KNOWN_FRAMEWORKS:
                raise UserError(
                    f"{prefix}: node {node_id!r}: unknown framework {framework!r} in "
                    f"promote_on_yes; known: {', '.join(KNOWN_FRAMEWORKS)}"
                )
    for leaf_id, leaf in tree.leaves.items():
        for candidate in leaf.candidates:
            if candidate.framework not in KNOWN_FRAMEWORKS:
                raise UserError(
                    f"{prefix}: leaf {leaf_id!r}: unknown framework {candidate.framework!r}; "
                    f"known: {', '.join(KNOWN_FRAMEWORKS)}"
                )
        for caveat in leaf.caveats_when:
            for field in caveat.when.fields():
                if field not in fields:
                    raise UserError(f"{prefix}: leaf {leaf_id!r}: unknown field {field!r}")
    # Depth-first walk from the root: a node met again on the current path is a cycle.
    reached: set[str] = set()

    def visit(node_id: str, on_path: tuple[str, ...]) -> None:
        if node_id in on_path:
            cycle = " -> ".join((*on_path[on_path.index(node_id) :], node_id))
            raise UserError(f"{prefix}: node {node_id!r} is on a cycle ({cycle})")
        reached.add(node_id)
        question = tree.questions.get(node_id)
        if question is not None:
            for target in (question.yes, question.no):
                visit(target, (*on_path, node_id))

    visit(tree.root, ())
    unreachable = sorted((set(tree.questions) | set(tree.leaves)) - reached)
    if unreachable:
        raise UserError(f"{prefix}: node {unreachable[0]!r} is unreachable from the root")


# --------------------------------------------------------------------------- evaluation


def context_for(stage: StageProfile, estimate: Estimate | None) -> dict[str, Any]:
    context = stage.model_dump(mode="json")
    context["estimate"] = estimate.model_dump(mode="json") if estimate is not None else {}
    return context


def evaluate(
    tree: DecisionTree,
    stage: StageProfile,
    estimate: Estimate | None = None,
    flips: frozenset[str] = frozenset(),
) -> Decision:
    """Walk the tree for one stage. `flips` = question ids whose answer is inverted (used to
    find what would change the answer)."""
    context = context_for(stage, estimate)
    path: list[PathStep] = []
    promoted: list[str] = []
    node_id = tree.root
    while node_id in tree.questions:
        question = tree.questions[node_id]
        answer = question.test.evaluate(context)
        if node_id in flips:
            answer = not answer
        reason = question.why_yes if answer else question.why_no
        facts = _facts(question.test, context)
        why = f"{reason} ({facts})" if facts else reason
        path.append(
            PathStep(node=node_id, question=question.ask, answer="yes" if answer else "no", why=why)
        )
        node_id = question.yes if answer else question.no
        if answer:
            promoted += [f for f in question.promote_on_yes if f not in promoted]
    leaf = tree.leaves[node_id]
    ranked = [c for c in leaf.candidates if c.framework in promoted] + [
        c for c in leaf.candidates if c.framework not in promoted
    ]
    candidates = [
        Candidate(
            framework=c.framework,
            rank=rank,
            rationale=c.rationale,
            caveats=list(c.caveats),
            benchmarked=run_backend(c.framework)[0] in BENCHMARKABLE_FRAMEWORKS,
        )
        for rank, c in enumerate(ranked, start=1)
    ]
    caveats = list(leaf.caveats)
    caveats += [c.text for c in leaf.caveats_when if c.when.evaluate(context)]
    if stage.build_time_tolerance is None and any(
        c.framework in ("tensorrt", "tensorrt_llm") for c in candidates[:1]
    ):
        caveats.append(
            "Build-time tolerance is not stated; TensorRT engine builds can take hours "
            "(set build_time_tolerance: none/minutes/hours)."
        )
    if estimate is not None and estimate.fits is False:
        caveats += [f"Estimate: {s}" for s in estimate.suggestions]
    refused = None
    if leaf.refuses:
        refused = (estimate.refused if estimate is not None else None) or leaf.title
    return Decision(
        leaf=node_id,
        title=leaf.title,
        path=path,
        candidates=candidates,
        caveats=caveats,
        refused=refused,
    )


def _facts(condition: Condition, context: dict[str, Any]) -> str:
    """The tested values, e.g. `dynamic_control_flow = true, slo.ttft_ms = 250`."""
    seen: list[str] = []
    for field in condition.fields():
        if field in (f.split(" = ")[0] for f in seen):
            continue
        seen.append(f"{field} = {_show(resolve(context, field))}")
    return ", ".join(seen)


def _show(value: Any) -> str:
    if value is None:
        return "unknown"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        return "[" + ", ".join(str(v) for v in value) + "]" if value else "none"
    if isinstance(value, dict):  # a section (shared_prefix): its set values
        return "{" + ", ".join(f"{k} {_show(v)}" for k, v in value.items() if v is not None) + "}"
    return re.sub(r"\s+", " ", str(value))


def what_would_change(
    tree: DecisionTree, stage: StageProfile, estimate: Estimate | None, decision: Decision
) -> dict[str, list[str]]:
    """For each framework other than the first: the single answers that would put it first."""
    changes: dict[str, list[str]] = {}
    if decision.refused:
        return changes  # nothing is first; flipping a fact cannot make the stage feasible
    for step in decision.path:
        flipped = evaluate(tree, stage, estimate, flips=frozenset({step.node}))
        if flipped.refused:
            continue
        top = flipped.candidates[0].framework
        if top != decision.candidates[0].framework:
            other = "no" if step.answer == "yes" else "yes"
            changes.setdefault(top, []).append(f"if the answer to '{step.question}' were {other}")
    return changes


__all__ = [
    "BENCHMARKABLE_FRAMEWORKS",
    "KNOWN_FRAMEWORKS",
    "NOT_BENCHMARKED_FRAMEWORKS",
    "Candidate",
    "Condition",
    "Decision",
    "DecisionTree",
    "PathStep",
    "evaluate",
    "load_tree",
    "validate_tree",
    "what_would_change",
]
