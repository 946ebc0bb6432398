"""Prefix caching as a run setting (`RunConfig.prefix_caching`): an engine argument that restates
it is refused in one line, what was stored before it was a setting still loads into it, and each
backend takes it, maps it or refuses it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bench.core.config import ParallelismConfig, PrecisionConfig, RunConfig, legacy_axes_moved
from bench.core.engine_facts import EngineFacts, prefix_caching_setting
from bench.core.errors import UserError
from bench.core.schema import RunResult
from bench.engines.backends import get_backend, options_with_caching
from bench.orchestrate.campaign import CampaignResult, load_plan

REPO = Path(__file__).resolve().parents[2]
RUN_FILES = sorted((REPO / "data" / "reference").glob("*_runs.json"))
PLANS = sorted((REPO / "examples" / "campaigns").rglob("*.yaml"))
CAMPAIGN_RECORDS = sorted((REPO / "examples" / "campaigns" / "rehearsals").glob("*/campaign.json"))


@pytest.mark.parametrize(
    ("engine_args", "where"),
    [
        ({"enable_prefix_caching": True}, "engine_args.enable_prefix_caching"),
        ({"enable_block_reuse": False}, "engine_args.enable_block_reuse"),
        (
            {"launch": "vllm", "server_args": {"enable_prefix_caching": False}},
            "engine_args.server_args.enable_prefix_caching",
        ),
    ],
)
def test_an_engine_argument_restating_prefix_caching_is_refused_in_one_line(
    engine_args: dict[str, Any], where: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        RunConfig(backend="vllm", model="tiny-llama", engine_args=engine_args)
    message = str(caught.value)
    assert where in message and "`prefix_caching: " in message
    given = engine_args.get("server_args", engine_args)
    said = json.dumps(next(v for v in given.values() if isinstance(v, bool)))
    assert f"`prefix_caching: {said}`" in message


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--backend", "vllm", "--engine-arg", "enable_prefix_caching=false"],
         "prefix_caching: false"),
        (["--backend", "pytorch", "--prefix-caching", "off", "--device", "cpu"],
         "has no automatic prefix caching"),
    ],
)  # fmt: skip
def test_the_cli_refuses_in_one_line_with_exit_2(args: list[str], said: str) -> None:
    """A restated switch, and the run setting (`--prefix-caching on/off`) given to a
    backend without prefix caching."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--model", "tiny-llama", "--no-store", *args],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr
    assert said in done.stderr


def _stored_switch(config: dict[str, Any]) -> bool | None:
    """The prefix caching a stored config said, as it was written: the run setting itself
    (runs stored since it exists), or an engine argument (runs stored before)."""
    if config.get("prefix_caching") is not None:
        return config["prefix_caching"]
    args = config.get("engine_args") or {}
    if config.get("backend") == "openai" and args.get("launch") == "vllm":
        args = args.get("server_args") or {}
    name = {"tensorrt_llm": "enable_block_reuse"}.get(
        config.get("backend"), "enable_prefix_caching"
    )
    return args.get(name)


@pytest.mark.parametrize("path", RUN_FILES, ids=[p.name for p in RUN_FILES])
def test_every_shipped_run_file_loads_with_its_caching_in_the_setting(path: Path) -> None:
    for data in json.loads(path.read_text())["runs"]:
        run = RunResult.model_validate(data)
        switch = _stored_switch(data["config"])
        assert run.config.prefix_caching == switch, run.run_id
        assert "enable_prefix_caching" not in run.config.engine_args


@pytest.mark.parametrize("path", PLANS, ids=[str(p.relative_to(REPO)) for p in PLANS])
def test_every_shipped_plan_loads(path: Path) -> None:
    assert load_plan(path).steps


def test_the_prefix_caching_plan_says_it_as_the_run_setting() -> None:
    plan = load_plan(REPO / "examples/campaigns/h200-llama2-7b-prefix-caching.yaml")
    switches = [step.config.prefix_caching for step in plan.steps]
    assert switches == [True, False, True, False, True, False, True]


@pytest.mark.parametrize("path", CAMPAIGN_RECORDS, ids=[p.parent.name for p in CAMPAIGN_RECORDS])
def test_campaign_records_from_before_load_with_the_caching_moved(path: Path) -> None:
    """A campaign record keeps its plan, each step's definition and its runs as they were
    written: the ones that gave enable_prefix_caching as an engine argument read back with it in
    prefix_caching (the rehearsal of the prefix-caching plan has seven such steps)."""
    raw = json.loads(path.read_text())
    result = CampaignResult.model_validate(raw)
    moved = 0
    for raw_step, step in zip(raw["plan"]["steps"], result.plan.steps, strict=True):
        if raw_step["kind"] == "run":
            assert step.config.prefix_caching == _stored_switch(raw_step["config"])
            moved += _stored_switch(raw_step["config"]) is not None
    for raw_outcome, outcome in zip(raw["steps"], result.steps, strict=True):
        for raw_run, run in zip(raw_outcome["runs"], outcome.runs, strict=True):
            assert run.config.prefix_caching == _stored_switch(raw_run["config"])
            assert run.config.prefix_caching == outcome.step.config.prefix_caching
    if path.parent.name == "h200-llama2-7b-prefix-caching":
        assert moved == 7


def test_stored_forms_move_per_backend_and_a_disagreement_stays_refused() -> None:
    older = {
        "backend": "openai",
        "model": "tiny-llama",
        "engine_args": {"launch": "vllm", "server_args": {"enable_prefix_caching": False, "x": 1}},
    }
    config = RunConfig.model_validate(legacy_axes_moved(older))
    assert config.prefix_caching is False
    assert config.engine_args == {"launch": "vllm", "server_args": {"x": 1}}
    trt = {"backend": "tensorrt_llm", "model": "m", "engine_args": {"enable_block_reuse": True}}
    assert RunConfig.model_validate(legacy_axes_moved(trt)).prefix_caching is True
    # a value that disagrees with the setting is left in place, and the config refused
    both = {
        "backend": "vllm",
        "model": "m",
        "engine_args": {"enable_prefix_caching": True},
        "prefix_caching": False,
    }
    with pytest.raises(ValidationError, match="restates the run's prefix caching"):
        RunConfig.model_validate(legacy_axes_moved(both))


def test_each_backend_takes_maps_or_refuses_the_setting() -> None:
    bf16 = PrecisionConfig(dtype="bfloat16")
    one = ParallelismConfig()
    assert get_backend("vllm").engine_args_for({}, one, bf16, True) == {}
    with pytest.raises(UserError, match="no automatic prefix caching"):
        get_backend("pytorch").engine_args_for({}, one, bf16, False)
    with pytest.raises(UserError, match="no automatic prefix caching"):
        get_backend("fake")({}, prefix_caching=True)
    with pytest.raises(UserError, match="base_url"):
        get_backend("openai")({"base_url": "http://127.0.0.1:8000"}, prefix_caching=True)
    assert get_backend("vllm")({}, prefix_caching=False).prefix_caching is False


def test_the_setting_is_read_first_then_what_the_engine_reported() -> None:
    config = RunConfig(backend="vllm", model="tiny-llama")
    reported = EngineFacts.model_validate({"enable_prefix_caching": True})
    assert prefix_caching_setting(config) is None
    assert prefix_caching_setting(config, reported) is True
    off = config.model_copy(update={"prefix_caching": False})
    assert prefix_caching_setting(off, reported) is False
    assert options_with_caching(off) == {"enable_prefix_caching": False, "prefix_cache_stats": True}
    assert options_with_caching(config) == {}


def test_a_vllm_fidelity_check_refuses_a_caching_switch_never_drops_it() -> None:
    """Both sides of the check run vLLM's default caching: a switch given (or stored) is refused,
    not moved out of the check's engine args and lost."""
    from bench.orchestrate.fidelity import VllmFidelityCheck

    given = {"model": "tiny-llama", "engine_args": {"enable_prefix_caching": False}}
    with pytest.raises(ValidationError, match="default prefix caching; leave it out"):
        VllmFidelityCheck.model_validate(given)
