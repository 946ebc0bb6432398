"""The one strict pydantic base model of bench and advisor, and the one validation-error formatter.

Every config, plan, profile and result model derives from `Strict`: an unknown field is an error,
not a silently ignored option (a typo in a plan or a corrupt result file is caught, not read).
`describe_validation_error` turns pydantic's error into the single line every CLI prints before
exit code 2; `validate` does both for a mapping read from a file. It lives in bench because
advisor may import bench and bench never imports advisor.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from bench.errors import UserError

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
    allowed_fields: Callable[[list[Any]], list[str]] | None = None,
) -> str:
    """One pydantic error as `field.path: what is wrong` on one line (an unknown field first).

    An unknown field lists the allowed ones, found by walking `model` along the error's location
    (or by `allowed_fields(parent_loc)` when the caller knows better, e.g. a profile's top level).
    `drop_loc_prefix` hides a location prefix the user never wrote (a single-stage profile is
    validated as `stages[0]`).
    """
    errors = exc.errors()
    # A misspelt field is both unknown and (its real name) missing: the unknown one says more.
    error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    loc = list(error["loc"])
    prefix = list(drop_loc_prefix)
    shown = loc[len(prefix) :] if prefix and loc[: len(prefix)] == prefix else loc
    path = format_loc(shown) or (model.__name__ if model is not None else exc.title)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        parent = loc[:-1]
        names = allowed_fields(parent) if allowed_fields is not None else None
        if names is None and model is not None:
            names = fields_at(model, parent)
        message = f"unknown field; allowed: {', '.join(names)}" if names else "unknown field"
    elif error["type"] == "missing":
        message = "required field is missing"
    return f"{path}: {message}"


def validate(model: type[ModelT], data: Any, source: str | None = None) -> ModelT:
    """`model.model_validate(data)`, a ValidationError turned into a one-line UserError."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc, model)
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
