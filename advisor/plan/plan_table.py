"""The benchmark plan as an editable table and back: one row per run of the plan, and the run
configs a user's edited rows stand for (the Benchmark page shows the table; this module has no UI).

The edited table is read at its edge: each record `st.data_editor` hands back (column name to
cell, numpy scalars and NaN for an empty cell) becomes a `PlanRow`, and only the typed row
reaches `config_from_row`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd
from pydantic import Field, ValidationError, field_validator

from advisor.workload.profile import describe_validation_error
from bench.core.config import LOAD_CLASSES, GenerateWorkload, LengthDistribution, RunConfig
from bench.core.errors import UserError
from bench.core.keyvalue import format_pairs, parse_pairs_text
from bench.core.strict import Strict
from bench.engines.backends import get_backend
from bench.orchestrate.web_policy import check_web_jobs

COMPARISON = "comparison"
CAPACITY_SEARCH = "capacity search"
PLAN_ROW = "plan row"  # hidden: which plan config a table row edits (empty on an added row)


def runnable(config: RunConfig, available: set[str]) -> bool:
    """The run's backend is installed here, and so is the framework it launches (SGLang through
    the openai backend: `available` names it only where it is installed)."""
    return config.backend in available and (
        config.framework == config.backend or config.framework in available
    )


def plan_table(
    configs: list[RunConfig],
    available: set[str],
    repeats: int = 1,
    capacity_configs: list[RunConfig] | None = None,
) -> pd.DataFrame:
    """The plan as editable rows: the comparison runs (each made `repeats` times), then the SLO
    capacity searches (one each); frameworks not installed here start unticked. The hidden
    PLAN_ROW column names the plan config a row was made from, so a row keeps its own config
    (precision, parallelism, workload) when a row above it is deleted."""
    searches = list(capacity_configs or [])
    return pd.DataFrame(
        [
            {
                PLAN_ROW: index,
                "run": runnable(config, available),
                "role": CAPACITY_SEARCH if index >= len(configs) else COMPARISON,
                "repeats": 1 if index >= len(configs) else repeats,
                "backend": config.backend,
                "model": config.model,
                "prompt / output": workload_lengths(config),
                "pattern": config.load.pattern,
                "load": config.load.table_level(),
                "duration (s)": config.load.table_duration(),
                "engine args": format_pairs(config.engine_args),
                "device": config.device,
            }
            for index, config in enumerate([*configs, *searches])
        ],
        columns=[  # role and repeats last: the columns before them keep their places
            PLAN_ROW,
            "run",
            "backend",
            "model",
            "prompt / output",
            "pattern",
            "load",
            "duration (s)",
            "engine args",
            "device",
            "role",
            "repeats",
        ],
    )


class PlanRow(Strict):
    """One row of the edited plan table, typed (every cell may be empty: None)."""

    plan_row: int | None = Field(None, alias=PLAN_ROW, description="The plan config it edits.")
    run: bool | None = Field(None, description="Ticked; None on a row just added.")
    role: str | None = None
    repeats: int | None = None
    backend: str | None = None
    model: str | None = None
    prompt_output: str | None = Field(None, alias="prompt / output")
    pattern: str | None = None
    load: float | None = None
    duration_s: float | None = Field(None, alias="duration (s)")
    engine_args: str | None = Field(None, alias="engine args")
    device: str | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _plain_cell(cls, value: Any) -> Any:
        # A pandas cell: numpy scalars become Python values; NaN / NA (an emptied cell) is None.
        if hasattr(value, "item") and not isinstance(value, str | bytes):
            value = value.item()
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            return None
        return value

    @classmethod
    def from_record(cls, record: Mapping[str, object]) -> PlanRow:
        """The edge: one record of `st.data_editor`'s frame (`DataFrame.to_dict("records")`);
        UserError names the cell that is not of its column's type."""
        try:
            return cls.model_validate(dict(record))
        except ValidationError as exc:
            raise UserError(describe_validation_error(exc)) from None


def config_from_row(base: RunConfig, row: PlanRow) -> RunConfig:
    """The plan's RunConfig with the table's edits applied; UserError names what is wrong."""
    backend = (row.backend or "").strip()
    backend_cls = get_backend(backend)  # UserError lists the known names
    engine_args = backend_cls.validate_engine_args(
        parse_pairs_text(row.engine_args, "engine argument")
    )
    pattern = row.pattern or base.load.pattern
    if pattern not in LOAD_CLASSES:
        raise UserError(f"unknown load pattern {pattern!r}; known: {', '.join(LOAD_CLASSES)}")
    common = {
        key: getattr(base.load, key)
        for key in ("warmup_requests", "request_timeout_s", "max_duration_s")
    }
    # The validation input of the load union (its variant is picked by `pattern`): a mapping,
    # so that a pattern change starts from that pattern's own defaults.
    load: dict[str, Any] = (
        base.load.model_dump() if pattern == base.load.pattern else {"pattern": pattern, **common}
    )
    load.update(
        LOAD_CLASSES[pattern].table_update(row.load, row.duration_s, base.load.table_level())
    )
    data = base.model_dump(mode="json")
    data.update(
        backend=backend,
        model=(row.model or base.model).strip(),
        engine_args=engine_args,
        load=load,
        device=row.device or base.device,
    )
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise UserError(describe_validation_error(exc)) from None


def chosen_runs(
    edited: pd.DataFrame, configs: list[RunConfig], available: set[str]
) -> tuple[list[RunConfig], list[str]]:
    """The ticked rows of the edited plan table as runs (each repeated as its row says), and one
    problem line per row that cannot run. Each row is applied to the plan config it was made
    from (its PLAN_ROW), not to the config at its current position: deleting a row moves the
    rows below it up. A row the user added starts from the plan's first config."""
    chosen: list[RunConfig] = []
    problems: list[str] = []
    for position, record in enumerate(edited.to_dict("records")):
        try:
            row = PlanRow.from_record(record)
        except UserError as exc:
            problems.append(f"Row {position + 1}: {exc}")
            continue
        if not row.run:
            continue
        source = row.plan_row
        base = configs[source] if source is not None and 0 <= source < len(configs) else configs[0]
        try:
            config = config_from_row(base, row)
            check_web_jobs([config])  # the server's rules for code and paths from the form
        except UserError as exc:
            problems.append(f"Row {position + 1} ({row.backend}): {exc}")
            continue
        if not runnable(config, available):
            problems.append(
                f"Row {position + 1}: {config.framework} is not installed here "
                "(see *Frameworks installed here*); untick the row or pick another backend."
            )
            continue
        count = 1 if row.repeats is None else max(1, row.repeats)
        # The job runner makes each config once: repeats are queued as consecutive runs of
        # the same config (the advisor pools matching runs into one sample).
        chosen.extend([config] * count)
    return chosen, problems


def workload_lengths(config: RunConfig) -> str:
    """The run's request lengths in words, for plan tables (`prompt 6,000 / output 200 tok`)."""
    workload = config.workload
    if isinstance(workload, GenerateWorkload):
        prompt, output = _length(workload.prompt_tokens), _length(workload.output_tokens)
        return f"prompt {prompt} / output {output}"
    parts = [f"batch {workload.batch_size}"]
    if workload.sequence_length is not None:
        parts.append(_length(workload.sequence_length))
    if workload.image_size is not None:
        parts.append(f"{workload.image_size} px")
    return " x ".join(parts)


def _length(distribution: LengthDistribution) -> str:
    text = f"{distribution.mean:,}"
    if distribution.kind != "fixed" and distribution.spread:
        text += f" ({distribution.kind} ±{distribution.spread:g})"
    if distribution.max is not None:
        text += f" ≤{distribution.max:,}"
    return text + " tok"
