"""The one strict pydantic base model of bench and advisor, and the one validation-error formatter.

Every config, plan, profile and result model derives from `Strict`: an unknown field is an error,
not a silently ignored option (a typo in a plan or a corrupt result file is caught, not read).
`describe_validation_error` turns pydantic's error into the single line every CLI prints before
exit code 2; `validate` does both for a mapping read from a file. It lives in bench because
advisor may import bench and bench never imports advisor.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from bench.core.errors import UserError
from bench.core.limits import out_of_range

ModelT = TypeVar("ModelT", bound=BaseModel)


class Strict(BaseModel):
    """Base for every bench and advisor model: unknown fields are errors.

    `populate_by_name` lets a field with an alias (the decision tree's `in`, `not`) be given by
    its Python name too.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class StrictInput(Strict):
    """Base for models a user fills in (run configs, profiles, plans, checks): every float must
    be finite. `inf` and `nan` pass `gt=0` and `le=...` checks' absence and crash later (an
    endless run, `int(nan)` in an estimate); results keep the plain `Strict` base so a computed
    non-finite figure is still stored."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


def describe_validation_error(
    exc: ValidationError,
    model: type[BaseModel] | None = None,
    *,
    drop_loc_prefix: Sequence[Any] = (),
    allowed_fields: Callable[[list[Any]], list[str] | None] | None = None,
    names: Mapping[str, str] | None = None,
) -> str:
    """Every pydantic error, on one line: `field.path: what is wrong`, or `N problems: (1) ...
    (2) ...` when there are several.

    Paths are as the user wrote them: a discriminated union's tag (the `concurrency` in pydantic's
    `load.concurrency.concurrency`) is left out, and `names` maps a path to what the user typed
    instead (a CLI flag: `{"load.rate_rps": "--rate"}` gives `--rate (load.rate_rps)`). Unknown
    fields under one parent are one problem listing the allowed fields, found by walking `model`
    along the location (or by `allowed_fields(parent_loc)` when the caller knows better, e.g. a
    profile's top level). `drop_loc_prefix` hides a location prefix the user never wrote (a
    single-stage profile is validated as `stages[0]`).
    """
    prefix = list(drop_loc_prefix)
    problems: list[str] = []
    # Unknown fields by the parent the user wrote: (pydantic's parent location, field paths).
    unknown: dict[tuple[Any, ...], tuple[list[Any], list[str]]] = {}
    for error in exc.errors():
        raw = list(error["loc"])
        loc = _user_loc(model, raw)
        shown = loc[len(prefix) :] if prefix and loc[: len(prefix)] == prefix else loc
        if error["type"] == "extra_forbidden":
            parent = tuple(shown[:-1])
            if parent not in unknown:
                unknown[parent] = (raw[:-1], [])
                problems.append(f"\0unknown:{len(unknown) - 1}")
            unknown[parent][1].append(_named(format_loc(shown), names))
            continue
        path = _named(format_loc(shown), names) or (
            model.__name__ if model is not None else exc.title
        )
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "missing":
            message = "required field is missing"
        # A bound of bench/core/limits.py: its unit and the docs, not "Input should be ...".
        bounds = error.get("ctx") or {}
        bound = bounds.get("le", bounds.get("ge"))
        message = out_of_range(shown, error["type"], bound, error.get("input")) or message
        problem = f"{path}: {message}"
        if problem not in problems:
            problems.append(problem)
    groups = list(unknown.values())
    for index, problem in enumerate(problems):
        if problem.startswith("\0unknown:"):
            raw_parent, fields = groups[int(problem.removeprefix("\0unknown:"))]
            problems[index] = _unknown_fields(raw_parent, fields, model, allowed_fields)
    if len(problems) == 1:
        return problems[0]
    numbered = " ".join(f"({number}) {text}" for number, text in enumerate(problems, start=1))
    return f"{len(problems)} problems: {numbered}"


def _named(path: str, names: Mapping[str, str] | None) -> str:
    if names and path in names:
        flag = names[path]
        # `--concurrency (concurrency)` says nothing twice; `--rate (load.rate_rps)` does not.
        return flag if flag.lstrip("-").replace("-", "_") == path else f"{flag} ({path})"
    return path


def _unknown_fields(
    raw_parent: list[Any],
    fields: list[str],
    model: type[BaseModel] | None,
    allowed_fields: Callable[[list[Any]], list[str] | None] | None,
) -> str:
    """`a.b: unknown field; allowed: ...` (one) or `a.b, a.c: unknown fields; allowed: ...`."""
    allowed = allowed_fields(raw_parent) if allowed_fields is not None else None
    if allowed is None and model is not None:
        allowed = fields_at(model, raw_parent)
    noun = "unknown field" if len(fields) == 1 else "unknown fields"
    text = f"{', '.join(fields)}: {noun}"
    if not allowed:
        return text
    text += f"; allowed: {', '.join(allowed)}"
    # The closest allowed name to each unknown one (a typo is the usual cause).
    close = {
        match
        for field in fields
        for match in difflib.get_close_matches(
            field.rsplit(".", 1)[-1].split(" ", 1)[0], allowed, n=2, cutoff=0.6
        )
    }
    return f"{text}; did you mean {', '.join(sorted(close))}?" if close else text


def _user_loc(model: type[BaseModel] | None, loc: list[Any]) -> list[Any]:
    """`loc` without the discriminated-union tags pydantic inserts (the user never writes them:
    `load: {pattern: concurrency, concurrency: 0}` fails at `load.concurrency.concurrency`)."""
    if model is None:
        return loc
    kept: list[Any] = []
    current: Any = model
    for part in loc:
        if isinstance(part, int):  # a list index: the user wrote it (`steps[0]`)
            kept.append(part)
            continue
        if isinstance(current, list):  # a union: `part` is the tag naming one of its models
            chosen = next((m for m in current if _has_tag(m, part)), None)
            if chosen is not None:
                current = chosen
                continue
            current = None
        kept.append(part)
        if current is None:
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            current = None
            continue
        field = current.model_fields.get(str(part))
        if field is None:
            current = None
            continue
        models = _models_in(field.annotation)
        current = models[0] if len(models) == 1 else (models or None)
    return kept


def validate(
    model: type[ModelT],
    data: Any,
    source: str | None = None,
    names: Mapping[str, str] | None = None,
) -> ModelT:
    """`model.model_validate(data)`, a ValidationError turned into a one-line UserError
    (`names`: see describe_validation_error)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc, model, names=names)
        raise UserError(f"{source}: {message}" if source else message) from None


def format_loc(loc: Sequence[Any]) -> str:
    """`["stages", 1, "gpu", "type"]` -> `stages[1].gpu.type`."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def fields_at(model: type[BaseModel], loc: Sequence[Any]) -> list[str]:
    """Field names of the model reached by walking `loc` from `model` ([] when none is).

    A discriminated union's tag (e.g. `run` in `steps[0].run.config`) is not a field; it is
    skipped by trying each model of the union.
    """
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if isinstance(current, list):  # a union: `part` is the tag naming one of its models
            current = next((m for m in current if _has_tag(m, part)), None)
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        field = current.model_fields.get(str(part))
        if field is None:
            return []
        current = _models_in(field.annotation)
        if len(current) == 1:
            current = current[0]
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _has_tag(model: type[BaseModel], tag: Any) -> bool:
    """True when one of `model`'s fields is a Literal that admits `tag` (a discriminator)."""
    return any(
        typing.get_origin(field.annotation) is typing.Literal
        and tag in typing.get_args(field.annotation)
        for field in model.model_fields.values()
    )


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The BaseModel classes inside `X | None`, `list[X]` or `Annotated[A | B, ...]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list):
        found: list[type[BaseModel]] = []
        for arg in typing.get_args(annotation):
            found += _models_in(arg)
        return found
    return []
