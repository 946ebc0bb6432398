"""Fleet size and cost from capacity reports that the real search produced on the fake backend.

Each report comes from `bench.run.load.capacity`'s search driven through bench.run.runner.execute in
virtual time against the fake backend (a test double with a known capacity: 4 slots x 0.2 s
per request = 20 req/s; see tests/bench/test_load_capacity.py); the arithmetic under test is
advisor/sizing/capacity.py's.
"""

from __future__ import annotations

import math

import pytest
from typer.testing import CliRunner

from advisor.sizing.capacity import (
    HOURS_PER_MONTH,
    EstimatedCapacity,
    capacity_from_report,
    capacity_from_run,
    fleet_for_stage,
    load_price_catalogue,
    size_fleet,
)
from advisor.workload.gpus import GPUS
from advisor.workload.profile import StageProfile
from bench.core.config import SLO, CapacityLoad
from bench.core.errors import UserError
from bench.core.schema import RunResult, RunStatus
from tests.bench.test_load_capacity import OUTPUT_TOKENS, SLO_TTFT_MS, run_search


@pytest.fixture
async def searched(time_travel):
    """(CapacityReport, the RunResult a launch would store) of a constant-rate search."""
    report, outcome, config = await run_search(
        CapacityLoad(arrival="constant", warmup_requests=0), SLO(ttft_ms=SLO_TTFT_MS)
    )
    run = RunResult(
        config=config.model_copy(update={"gpu_type": "H200"}),
        status=RunStatus.COMPLETED,
        phases=outcome.phases,
        summary=outcome.summary,
        pattern_report=outcome.pattern_report,
    )
    return report, run


async def test_gpus_cost_and_cost_per_token_follow_the_formula(searched):
    report, _ = searched
    assert report.result == "found" and report.max_rate_rps
    peak, headroom, gpus_per_replica, price = 40.0, 0.2, 2, 3.5
    capacity = capacity_from_report(
        report,
        peak_request_rate_rps=peak,
        gpus_per_replica=gpus_per_replica,
        headroom_fraction=headroom,
        price_per_gpu_hour=price,
    )
    replicas = math.ceil(peak * (1 + headroom) / report.max_rate_rps)
    assert replicas == 3  # 48 req/s on units of ~20 req/s
    assert capacity.source == "measured" and capacity.converged
    assert capacity.max_rate_rps == report.max_rate_rps
    assert capacity.binding_constraint == report.binding_constraint
    assert capacity.gpus_needed == replicas * gpus_per_replica == 6
    assert capacity.monthly_cost == pytest.approx(6 * price * HOURS_PER_MONTH)  # $15,330
    # The boundary probe produced OUTPUT_TOKENS per request: that is the cost's token count.
    assert capacity.mean_output_tokens == pytest.approx(OUTPUT_TOKENS)
    tokens_per_hour = peak * OUTPUT_TOKENS * 3600
    assert capacity.cost_per_million_output_tokens == pytest.approx(
        6 * price / tokens_per_hour * 1e6
    )
    assert capacity.price_source == "profile"


async def test_the_reference_price_is_used_when_the_profile_gives_none(searched):
    _, run = searched
    capacity = capacity_from_run(run, peak_request_rate_rps=10)
    reference = load_price_catalogue().for_gpu("H200")
    assert capacity.gpus_per_replica == 1 and capacity.gpus_needed == 1  # 12 req/s < 20
    assert capacity.price_per_gpu_hour == reference.usd_per_gpu_hour
    assert capacity.price_source.startswith("reference: ")
    assert reference.source_url in capacity.price_source
    assert capacity.monthly_cost == pytest.approx(reference.usd_per_gpu_hour * HOURS_PER_MONTH)


async def test_fleet_for_stage_keeps_estimates_apart_and_leaves_out_other_gpus(searched):
    _, run = searched
    stage = StageProfile(
        peak_request_rate_rps=100,
        gpu={"type": "H200", "price_per_hour": 2.0},
        output_tokens={"mean": OUTPUT_TOKENS},
    )
    elsewhere = run.model_copy(update={"config": run.config.model_copy(update={"gpu_type": "L4"})})
    sizing = fleet_for_stage(
        stage, [run, elsewhere], [EstimatedCapacity(label="pytorch (estimate)", max_rate_rps=7)]
    )
    assert [c.source for c in sizing.measured] == ["measured"]
    assert sizing.measured[0].gpus_needed == math.ceil(120 / sizing.measured[0].max_rate_rps)
    assert sizing.measured[0].run_id == run.run_id and "fake" in sizing.measured[0].label
    assert [c.source for c in sizing.estimates] == ["estimate"]
    assert sizing.estimates[0].gpus_needed == math.ceil(120 / 7) == 18
    assert any("not H200: left out" in note for note in sizing.notes)


async def test_an_unconverged_search_says_so_in_the_capacity(time_travel):
    report, _, _ = await run_search(
        CapacityLoad(arrival="constant", warmup_requests=0, max_probes=4),
        SLO(ttft_ms=SLO_TTFT_MS),
    )
    assert not report.converged and report.max_rate_rps is not None
    capacity = capacity_from_report(report, peak_request_rate_rps=5, gpus_per_replica=1)
    assert not capacity.converged
    assert any("did not converge" in note for note in capacity.notes)
    assert capacity.monthly_cost is None  # no GPU type, no price: the count alone


def test_every_reference_price_names_a_known_gpu_a_source_and_a_date():
    catalogue = load_price_catalogue()
    assert catalogue.prices
    for price in catalogue.prices:
        assert price.gpu in GPUS
        assert price.source_url.startswith("https://") and price.usd_per_gpu_hour > 0
    assert len({price.gpu for price in catalogue.prices}) == len(catalogue.prices)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"max_rate_rps": -1}, "max_rate_rps must be > 0"),
        ({"peak_request_rate_rps": 0}, "peak request rate must be > 0"),
        ({"price_per_gpu_hour": 0}, "GPU price per hour must be > 0"),
        ({"gpus_per_replica": 0}, "GPUs per replica"),
        ({"headroom_fraction": -0.1}, "headroom"),
    ],
)
def test_bad_inputs_are_user_errors(kwargs, text):
    arguments = {
        "max_rate_rps": 10.0,
        "source": "measured",
        "peak_request_rate_rps": 5.0,
        "gpus_per_replica": 1,
        **kwargs,
    }
    max_rate = arguments.pop("max_rate_rps")
    with pytest.raises(UserError, match=text):
        size_fleet(max_rate, **arguments)


@pytest.mark.parametrize(
    ("stage_yaml", "text"),
    [
        ("gpu: {type: H200, price_per_hour: 0}\n", "price_per_hour"),
        ("peak_request_rate_rps: -3\n", "peak_request_rate_rps"),
    ],
)
def test_bad_profile_fields_are_one_line_and_exit_2(tmp_path, stage_yaml, text):
    from advisor.cli import app

    profile = tmp_path / "profile.yaml"
    profile.write_text("kind: generate\nmodel: tiny-llama\n" + stage_yaml, encoding="utf-8")
    result = CliRunner().invoke(app, ["recommend", "--profile", str(profile)])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and text in lines[0], result.output
