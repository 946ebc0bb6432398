"""The plan <-> table conversions (advisor/plan/plan_table.py) on real plans of the shipped
profiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.plan.plan_table import (
    CAPACITY_SEARCH,
    PLAN_ROW,
    PlanRow,
    chosen_runs,
    config_from_row,
    plan_table,
)
from advisor.plan.stage_plan import plan_for_stage
from advisor.workload.profile_input import load_profile
from bench.core.config import RunConfig
from bench.core.errors import UserError

PROFILES = sorted((Path(__file__).parents[2] / "examples" / "profiles").glob("*.yaml"))


def _plans(quick: bool):
    for path in PROFILES:
        for stage in load_profile(path).stages:
            try:
                plan = plan_for_stage(stage, quick=quick, cpu_only=not quick)
            except UserError:
                continue  # a stage the advisor refuses to plan (no model, refused decision)
            if plan.configs:
                yield path.stem, stage.name, plan


@pytest.mark.parametrize("quick", [False, True])
def test_an_unedited_table_reads_back_to_the_plan_configs(quick):
    """Every pattern's table level and duration, read back by config_from_row, give the very
    config the row was made from (the table's columns lose nothing the plan set)."""
    seen_patterns: set[str] = set()
    planned = list(_plans(quick))
    assert len(planned) >= 5, "the shipped profiles plan benchmarks"
    for profile, stage, plan in planned:
        configs = [*plan.configs, *plan.capacity_configs]
        # every framework of the plan installed (SGLang through the openai backend too)
        available = {c.backend for c in configs} | {c.framework for c in configs}
        table = plan_table(plan.configs, available, 2, plan.capacity_configs)
        assert list(table[PLAN_ROW]) == list(range(len(configs)))
        assert list(table["role"]).count(CAPACITY_SEARCH) == len(plan.capacity_configs)
        chosen, problems = chosen_runs(table, configs, available)
        assert not problems, (profile, stage, problems)
        expected = [c for c in plan.configs for _ in range(2)] + list(plan.capacity_configs)
        assert [c.model_dump_json() for c in chosen] == [c.model_dump_json() for c in expected]
        seen_patterns.update(config.load.pattern for config in configs)
    assert {"concurrency"} <= seen_patterns
    if not quick:
        assert {"rate", "capacity"} <= seen_patterns, seen_patterns


def test_edits_to_load_and_duration_land_on_each_pattern_own_fields():
    _profile, _stage, plan = next(_plans(False))
    base = plan.configs[0]
    row = plan_table([base], {base.backend}).iloc[0].to_dict()
    concurrency = config_from_row(
        base, PlanRow.from_record({**row, "pattern": "concurrency", "load": 3})
    )
    assert concurrency.load.concurrency == 3
    rate = config_from_row(
        base, PlanRow.from_record({**row, "pattern": "rate", "load": 2.5, "duration (s)": 7})
    )
    assert (rate.load.rate_rps, rate.load.duration_s) == (2.5, 7)
    step = config_from_row(
        base, PlanRow.from_record({**row, "pattern": "step", "load": 40, "duration (s)": 5})
    )
    assert (step.load.max, step.load.levels, step.load.stage_duration_s) == (40, None, 5)
    steady = config_from_row(
        base, PlanRow.from_record({**row, "pattern": "steady", "load": 9, "duration (s)": 60})
    )
    assert (steady.load.capacity_rps, steady.load.duration_s) == (9, 60)
    pulse = config_from_row(
        base, PlanRow.from_record({**row, "pattern": "pulse", "load": 4, "duration (s)": 12})
    )
    assert (pulse.load.capacity_rps, pulse.load.baseline_s) == (4, 12)
    assert pulse.load.burst_s == 10.0  # the pattern's own default, not the base's
    for edited in (concurrency, rate, step, steady, pulse):  # the run's other settings stay
        assert edited.workload == base.workload and edited.precision == base.precision
        assert edited.load.warmup_requests == base.load.warmup_requests
    with pytest.raises(UserError, match="unknown load pattern 'soak'"):
        config_from_row(base, PlanRow.from_record({**row, "pattern": "soak"}))


def test_engine_arguments_are_validated_against_the_backend():
    base = RunConfig(backend="fake", model="tiny-llama")
    row = {
        "backend": "fake",
        "model": "tiny-llama",
        "pattern": "concurrency",
        "load": 3,
        "duration (s)": 8,
        "engine args": "itl_s=0.01",
        "device": "cpu",
    }
    config = config_from_row(base, PlanRow.from_record(row))
    assert config.load.concurrency == 3 and config.load.duration_s == 8
    assert config.engine_args == {"itl_s": 0.01}
    with pytest.raises(UserError, match="bad engine argument"):
        config_from_row(base, PlanRow.from_record({**row, "engine args": "no_such_option=1"}))
    with pytest.raises(UserError, match="must look like key=value"):
        config_from_row(base, PlanRow.from_record({**row, "engine args": "justtext"}))
    step = config_from_row(
        base, PlanRow.from_record({**row, "pattern": "step", "load": 40, "duration (s)": 5})
    )
    assert step.load.pattern == "step" and step.load.max == 40
    assert step.load.stage_duration_s == 5


def test_plan_table_and_cli_read_engine_arguments_the_same_way():
    """One parser: the table cell and repeated --engine-arg give identical values and types."""
    from bench.cli import build_run_config
    from bench.core.keyvalue import format_pairs

    pairs = ["max_num_seqs=256", "enforce_eager=yes", "gpu_memory_utilization=0.5", "seed=null"]
    cli = build_run_config(None, "vllm", "tiny-llama", None, {}, pairs, [])
    base = RunConfig(backend="vllm", model="tiny-llama")
    row = {"backend": "vllm", "model": "tiny-llama", "engine args": ", ".join(pairs)}
    table = config_from_row(base, PlanRow.from_record(row))
    assert table.engine_args == cli.engine_args
    assert cli.engine_args == {
        "max_num_seqs": 256,
        "enforce_eager": True,
        "gpu_memory_utilization": 0.5,
        "seed": None,
    }
    assert [type(v) for v in table.engine_args.values()] == [int, bool, float, type(None)]
    shown = format_pairs(cli.engine_args)  # what the table shows reads back to the same values
    assert (
        config_from_row(base, PlanRow.from_record({**row, "engine args": shown})).engine_args
        == cli.engine_args
    )


def test_a_table_record_is_read_into_a_typed_row_at_the_edge():
    """What st.data_editor hands back (numpy scalars, NaN in an emptied number cell, None in a
    row just added) becomes plain typed cells; a cell of the wrong type is one problem line."""
    import numpy as np

    _profile, _stage, plan = next(iter(_plans(True)))
    base = plan.configs[0]
    table = plan_table([base], {base.backend})
    table.loc[0, "load"] = np.nan  # the user emptied the load cell
    row = PlanRow.from_record(table.to_dict("records")[0])
    assert (row.plan_row, row.run, row.load) == (0, True, None)
    assert row.duration_s == base.load.table_duration()
    scalars = PlanRow.from_record({PLAN_ROW: np.int64(2), "run": np.bool_(True)})
    assert (scalars.plan_row, scalars.run) == (2, True) and type(scalars.plan_row) is int
    added = PlanRow.from_record({column: None for column in table.columns})
    assert added.run is None and added.repeats is None
    bad = table.assign(repeats="twice")
    chosen, problems = chosen_runs(bad, [base], {base.backend})
    assert chosen == [] and problems == [
        "Row 1: repeats: Input should be a valid integer, unable to parse string as an integer"
    ]
