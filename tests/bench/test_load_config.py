"""What each load-pattern config class answers about itself (bench/core/config.py), checked against
the phases its registered plan really yields (bench/run/load/patterns.py) and the plan table."""

from __future__ import annotations

from typing import Literal

import pytest

from bench.core.config import (
    LOAD_CLASSES,
    PATTERN_NAMES,
    SLO,
    CapacityLoad,
    ConcurrencyLoad,
    CpuReplayClip,
    LoadPattern,
    PulseLoad,
    RateLoad,
    ReplayLoad,
    SteadyLoad,
    StepLoad,
    ValidityRules,
)
from bench.run.load.patterns import PLANNERS, plan
from tests.bench.test_load_patterns import drive, summary

RULES = ValidityRules(max_error_rate=0.01)
KNOWN_LENGTH = [  # loads whose phases are fixed in advance (no knee, no capacity ladder)
    ConcurrencyLoad(concurrency=7, duration_s=5),
    RateLoad(rate_rps=3, duration_s=6),
    StepLoad(levels=[1, 4, 16], stage_duration_s=3, stop_at_knee=False),
    StepLoad(start=2, step=3, max=11, stage_duration_s=2, stop_at_knee=False),
    SteadyLoad(capacity_rps=10, duration_s=9),
    PulseLoad(capacity_rps=10, baseline_s=4, burst_s=2, recovery_s=5),
]


def test_every_pattern_has_a_config_class_and_a_phase_plan():
    assert set(LOAD_CLASSES) == set(PATTERN_NAMES)
    assert set(PLANNERS) == set(LOAD_CLASSES.values())


def test_the_load_pattern_union_is_the_one_pattern_registry():
    """The names a run config accepts (pydantic's discriminator tags), the registry, the web
    form's choices and `bench run --pattern`'s help are one list, read from `LoadPattern`."""
    import typer.main
    from pydantic import TypeAdapter, ValidationError

    from bench.cli import app as bench_app

    with pytest.raises(ValidationError) as refused:
        TypeAdapter(LoadPattern).validate_python({"pattern": "no-such-pattern"})
    (error,) = refused.value.errors()
    accepted = [tag.strip().strip("'") for tag in error["ctx"]["expected_tags"].split(",")]
    assert accepted == list(LOAD_CLASSES) == list(PATTERN_NAMES)
    assert len(PATTERN_NAMES) == 7
    for name, load_class in LOAD_CLASSES.items():
        assert load_class.model_fields["pattern"].annotation == Literal[name]
    run = typer.main.get_command(bench_app).commands["run"]
    (option,) = [param for param in run.params if "--pattern" in param.opts]
    assert option.help.removeprefix("Load pattern: ").split(" | ") == list(PATTERN_NAMES)


@pytest.mark.parametrize("load", KNOWN_LENGTH, ids=lambda load: load.pattern)
def test_phase_count_and_planned_seconds_match_the_phases_planned(load):
    specs, _ = drive(plan(load, SLO(), RULES), [summary(10 * (i + 1)) for i in range(20)])
    assert load.phase_count() == len(specs)
    request_s = 0.25  # each phase's drain: one request's time

    def no_trace(replay: ReplayLoad) -> float:
        raise AssertionError("only a replay reads its trace")

    planned = sum(spec.duration_s for spec in specs) + len(specs) * request_s
    if isinstance(load, PulseLoad):  # baseline and burst do not drain: the burst's queue carries
        planned = sum(spec.duration_s for spec in specs) + request_s
    assert load.planned_seconds(request_s, no_trace) == pytest.approx(planned)


def test_unknown_lengths_say_so_and_count_the_capacity_ladder():
    assert StepLoad(stop_at_knee=True).phase_count() is None  # the knee decides
    steady = SteadyLoad(duration_s=9)
    assert steady.phase_count() is None  # capacity is measured first
    specs, _ = drive(plan(steady, SLO(), RULES), [summary(10 * (i + 1)) for i in range(20)])
    ladder_s = sum(spec.duration_s for spec in specs if spec.name.startswith("capacity"))
    ladder_stages = sum(1 for spec in specs if spec.name.startswith("capacity"))
    assert ladder_stages >= 2
    # The estimate assumes the whole ladder: an upper bound on the ladder plan() runs.
    assert steady.planned_seconds(0.0, lambda replay: 0.0) >= ladder_s + 9
    replay = ReplayLoad(trace="t.jsonl")
    assert replay.planned_seconds(0.5, lambda load: 12.0) == 12.5
    assert CapacityLoad().phase_count() is None


def test_level_labels_and_fixed_levels():
    assert ConcurrencyLoad(concurrency=64).level_label() == "c64"
    assert RateLoad(rate_rps=2.0).level_label() == "2 req/s"
    assert StepLoad().level_label() == "step"
    assert ConcurrencyLoad(concurrency=64).fixed_level() == ("concurrency", 64.0)
    assert RateLoad(rate_rps=2.5).fixed_level() == ("rate", 2.5)
    for load in (StepLoad(), SteadyLoad(), PulseLoad(), CapacityLoad()):
        assert load.fixed_level() is None
    assert [cls.closed_loop for cls in (ConcurrencyLoad, StepLoad, RateLoad)] == [1, 1, 0]
    assert SteadyLoad.held_at_capacity and PulseLoad.held_at_capacity
    assert not StepLoad.held_at_capacity
    assert CapacityLoad.capacity_search and not RateLoad.capacity_search


@pytest.mark.parametrize(
    "load",
    [*KNOWN_LENGTH, CapacityLoad(), SteadyLoad(), ReplayLoad(trace="t.jsonl")],
    ids=lambda load: load.pattern,
)
def test_a_table_row_unedited_changes_nothing(load):
    update = type(load).table_update(load.table_level(), load.table_duration(), load.table_level())
    assert type(load).model_validate({**load.model_dump(), **update}) == load


def test_warmup_is_at_the_first_closed_loop_level():
    assert StepLoad(levels=[3, 9], warmup_requests=8).warmup_concurrency() == 3
    assert SteadyLoad(warmup_requests=8).warmup_concurrency() == 1


def test_each_load_says_in_words_what_a_plan_sets() -> None:
    """The report's and the Advisor page's plan wording come from the load itself."""
    assert ConcurrencyLoad(concurrency=64).plan_words() == "64 requests in flight"
    assert RateLoad(rate_rps=2.5).plan_words() == "2.5 req/s"
    assert RateLoad(rate_rps=2.5).plan_words(lambda v: f"{v:.2f}") == "2.50 req/s"
    assert StepLoad().plan_words() == "step pattern"


EVERY_PATTERN = [*KNOWN_LENGTH, CapacityLoad(), ReplayLoad(trace="t.jsonl", max_requests=50)]


@pytest.mark.parametrize("load", EVERY_PATTERN, ids=lambda load: load.pattern)
def test_only_a_replay_reads_an_input_file_of_its_own(load):
    read: list[ReplayLoad] = []
    load.check_input_files(read.append)
    assert read == ([load] if isinstance(load, ReplayLoad) else [])


@pytest.mark.parametrize("load", EVERY_PATTERN, ids=lambda load: load.pattern)
def test_on_the_cpu_clips_a_replay_and_keeps_every_other_load(load):
    clip = CpuReplayClip(max_requests=8, max_input_tokens=64, max_output_tokens=16)
    cpu = load.on_the_cpu(clip)
    if not isinstance(load, ReplayLoad):
        assert cpu == load
        return
    assert (cpu.max_requests, cpu.max_input_tokens, cpu.max_output_tokens) == (8, 64, 16)
    assert cpu.model_dump(exclude=CLIPPED) == load.model_dump(exclude=CLIPPED)
    assert type(cpu).model_validate(cpu.model_dump()) == cpu  # still a valid config


CLIPPED = {"max_requests", "max_input_tokens", "max_output_tokens"}
