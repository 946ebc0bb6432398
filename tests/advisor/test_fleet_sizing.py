"""Fleet size for the peak, on the data the product ships (data/reference).

The held-out chat profile (llama-2-7b, 512/256 tokens, 40 req/s peak, p99 TTFT <= 300 ms and
TPOT <= 50 ms, one H200, the default float16) must be sized from the shipped bfloat16 capacity
search of exactly that workload (both shipped searches judged probes from an empty engine, so
the lower stands: 22 req/s per GPU, 3 GPUs with 20% headroom; the newer found 24, which did not
hold for 1,500 requests), not from a batch-1 estimate (54 GPUs before); the bf16 search may stand
for float16 only because a shipped pair of vLLM runs at both dtypes agrees. One load rule gives
every part of the answer its in-flight count.
"""

from __future__ import annotations

import json
import math

import pytest

from advisor.decide.recommend import recommend
from advisor.evidence.rows import capacity_runs_for
from advisor.sizing.measured import read_reference_folder
from advisor.sizing.speed_class import SAME_CLASS_TOLERANCE, speed_class_pairs
from advisor.workload.profile_input import profile_from_dict
from advisor.workload.stage_load import DEFAULT_IN_FLIGHT, ENGINE_SEQUENCE_LIMIT, stage_load
from bench.core.schema import RunResult
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR, shipped_h200_record

CHAT_40 = {
    "title": "Chat 7B, 40 req/s peak (held out)",
    "long_sequence_generation": True,
    "kind": "generate",
    "model": "llama-2-7b",
    "prompt_tokens": {"mean": 512},
    "output_tokens": {"mean": 256},
    "peak_request_rate_rps": 40,
    "slo": {"ttft_ms": 300, "tpot_ms": 50, "percentile": "p99"},
    "gpu": {"type": "H200", "count": 1},
}
SHIPPED_SEARCH = "h200_llama2-7b_capacity_chat_slo_runs.json"
"""The first shipped bf16 search of the chat workload, its probes judged from an empty engine."""
NEWEST_SEARCH = "h200_llama2-7b_capacity_boundary_runs.json"
"""The same workload searched again with the boundary-confirming rule, probes also unsettled."""
SETTLED_SEARCH = "h200_llama2-7b_capacity_settled_runs.json"
"""The shipped bf16 search of the chat workload with settled probes (20 req/s; 1,500 requests by
`vllm bench serve` held at 20 and failed at 23): it stands over the two searches judged from an
empty engine (22 and 24 req/s)."""


@pytest.fixture(scope="module")
def reference():
    return read_reference_folder(SHIPPED_REFERENCE_DIR)


def stage_of(data: dict):
    return profile_from_dict(data).stages[0]


def test_the_one_load_rule():
    stage = stage_of(CHAT_40)
    load = stage_load(stage)
    # Little's law with the E2E the SLO allows at p99: 300 + 255 x 50 = 13,050 ms at 40 req/s.
    assert load.source == "little's law" and load.e2e_ms == 13_050
    assert load.in_flight == math.ceil(40 * 13.05)
    assert load.per_engine == ENGINE_SEQUENCE_LIMIT  # the rest are other replicas' or queued
    assert "Little's law" in load.rule and "13,050 ms" in load.rule
    given = stage_of({**CHAT_40, "concurrency": 64})
    assert stage_load(given).in_flight == stage_load(given).per_engine == 64
    bare = stage_of({"kind": "generate", "model": "llama-2-7b"})
    assert stage_load(bare).in_flight == DEFAULT_IN_FLIGHT
    assert "assumed" in stage_load(bare).rule
    e2e = stage_of({**CHAT_40, "peak_request_rate_rps": 10, "slo": {"e2e_ms": 2000}})
    assert stage_load(e2e).in_flight == 20


def test_every_part_reads_the_one_load():
    """The memory fit, the configuration search and the plan all use the stage's load."""
    from advisor.sizing.calibration import calibration_from
    from advisor.sizing.configurations import search_configurations
    from advisor.sizing.engine_shape import workload_shape
    from advisor.sizing.estimate import estimate_stage

    stage = stage_of(CHAT_40)
    per_engine = stage_load(stage).per_engine
    assert estimate_stage(stage).concurrency == per_engine
    assert workload_shape(stage).concurrency == per_engine
    search = search_configurations(
        stage,
        "vllm",
        calibration_from([], read_reference_folder(SHIPPED_REFERENCE_DIR).runs)[1].lookup(stage),
    )
    assert search is not None and search.concurrency == per_engine


def test_float16_and_bfloat16_are_one_class_only_where_a_shipped_pair_says_so(reference):
    runs = [run for file_runs in reference.runs.values() for run in file_runs]
    files = {run.run_id: name for name, file_runs in reference.runs.items() for run in file_runs}
    pairs = speed_class_pairs(runs, files)
    assert pairs, "the shipped vLLM ladders at float16 and bfloat16 should form a pair"
    best = pairs[0]
    assert (best.engine, best.gpu_type) == ("vllm", "H200")
    assert best.largest_difference <= SAME_CLASS_TOLERANCE and len(best.levels) == 4
    # Without the pair the bf16 search is left out for the float16 stage, as before.
    stage = stage_of(CHAT_40)
    search = next(
        run
        for run in reference.runs[SHIPPED_SEARCH]
        if run.config.load.capacity_search and run.config.precision.quantization is None
    )
    kept, notes = capacity_runs_for(stage, [search])
    assert kept == [] and any("precision bfloat16" in note for note in notes)
    kept, notes = capacity_runs_for(stage, runs, files)
    assert search in kept
    assert any("one speed class for vllm on H200" in note for note in notes)
    # FP8 weights are another precision: never a stand-in for float16.
    assert all(run.config.precision.quantization is None for run in kept)


FP8_SEARCH = SHIPPED_SEARCH
"""The shipped FP8-weights search of the chat workload (27 req/s, probes judged from an empty
engine), in the same file as the first bf16 search."""


def test_the_held_out_chat_profile_gets_2_to_4_gpus_from_the_shipped_search():
    """The one fleet answer weighs every configuration with its measured basis: the shipped FP8
    search (27 req/s, an upper bound: unsettled) needs 2 x H200 and is chosen; the profile's own
    precision stays on page 1 from the settled bf16 search (20 req/s, 3 x H200)."""
    report = recommend(profile_from_dict(CHAT_40), reference_dir=SHIPPED_REFERENCE_DIR)
    chosen = report.stages[0].recommendation
    capacity = chosen.capacity
    assert chosen.framework == "vllm"
    assert capacity is not None and capacity.source == "measured"
    assert 2 <= capacity.gpus_needed <= 4
    assert capacity.gpus_needed == math.ceil(40 * 1.2 / capacity.max_rate_rps)
    assert capacity.reference == FP8_SEARCH and capacity.max_rate_rps == pytest.approx(27)
    assert chosen.fleet.chosen.precision.quantization == "fp8"
    assert "published capacity search" in chosen.capacity_basis
    assert "upper bound" in chosen.capacity_basis  # unsettled: said, and its range reaches 3
    assert capacity.gpus_range == (2, 3)
    asked = next(o for o in chosen.fleet.alternatives if o.departures == 0)
    assert asked.basis.source == "shipped" and asked.basis.settled
    assert asked.capacity.reference == SETTLED_SEARCH and asked.gpus == 3
    assert asked.capacity.max_rate_rps == pytest.approx(20)
    for unsettled in ("24 req/s", "22 req/s"):
        assert any(
            f"{unsettled}): superseded by the settled search {asked.capacity.run_id}" in note
            for note in chosen.capacity_notes
        ), unsettled
    assert f"{capacity.gpus_needed} x H200" in chosen.headline
    assert "3 x H200" in chosen.headline  # the profile's own precision, one line


def test_page_one_names_the_basis(tmp_path):
    """The report's first page says how many GPUs, what they cost and what sized them."""
    import yaml

    from advisor.report.build import assemble_report
    from advisor.report.markdown import render_markdown
    from bench.storage.store import ResultStore

    profile = tmp_path / "chat40.yaml"
    profile.write_text(yaml.safe_dump(CHAT_40), encoding="utf-8")
    store = tmp_path / "empty.sqlite"
    ResultStore(store).close()  # a report only reads: the store must exist
    report = assemble_report(
        profile, store_location=str(store), reference_dir=SHIPPED_REFERENCE_DIR
    )
    links = {chart.id: "x.svg" for chart in report.available_charts()}
    page_one = render_markdown(report, links).split("## The workload")[0]
    assert "**GPUs and cost:** 2 × H200 for 40 req/s" in page_one
    assert "3 x H200" in page_one  # the profile's own precision, measured, in one line
    assert "per 1M output tokens" in page_one
    assert "published capacity search" in page_one


PREDICTED = {
    "code completion on H100": {
        **CHAT_40,
        "prompt_tokens": {"mean": 1024},
        "output_tokens": {"mean": 64},
        "peak_request_rate_rps": 30,
        "slo": {"ttft_ms": 200, "tpot_ms": 30, "percentile": "p99"},
        "gpu": {"type": "H100-SXM", "count": 1},
    },
    "multi-turn chat on H200": {
        **CHAT_40,
        "model": "llama-3-8b",
        "output_tokens": {"mean": 200},
        "conversation": {"turns": 4, "user_tokens": 64},
        "peak_request_rate_rps": 25,
        "slo": {"ttft_ms": 400, "tpot_ms": 50, "percentile": "p99"},
    },
    "chat on L40S": {
        **CHAT_40,
        "prompt_tokens": {"mean": 256},
        "peak_request_rate_rps": 20,
        "slo": {"ttft_ms": 500, "tpot_ms": 60, "percentile": "p99"},
        "gpu": {"type": "L40S", "count": 1},
    },
}


@pytest.mark.parametrize("name", list(PREDICTED))
def test_unmeasured_profiles_get_a_predicted_fleet_with_its_interval(name):
    """No search of these workloads is measured: the serving model's prediction sizes the
    fleet, with the GPUs at its interval's ends and its basis in the answer (not 50+ GPUs from
    a batch-1 estimate)."""
    chosen = (
        recommend(profile_from_dict(PREDICTED[name]), reference_dir=SHIPPED_REFERENCE_DIR)
        .stages[0]
        .recommendation
    )
    capacity = chosen.capacity
    assert capacity is not None and capacity.source == "estimate"
    assert capacity.low_rate_rps <= capacity.max_rate_rps <= capacity.high_rate_rps
    low, high = capacity.gpus_range
    assert low <= capacity.gpus_needed <= high <= 10
    assert chosen.capacity_basis.startswith("predicted, not measured")
    # calibrated where the engine ran on the GPU type (its validated error, the doc), else the
    # error there is not known, and said so with the command that measures it
    basis = chosen.capacity_basis
    assert "docs/capacity-model.md" in basis or (
        "is not measured" in basis and "bench calibrate" in basis
    )
    assert "about" in chosen.headline and "x " in chosen.headline


def test_your_own_search_sizes_the_fleet_before_a_published_one(reference):
    """A matching search in your store comes first, even when the shipped one needs fewer
    GPUs: your GPU, your driver, your engine build. (Your run here is the shipped search's
    result re-filed with a lower capacity: a labelled stand-in for a stored search.)"""
    shipped = next(
        run
        for run in reference.runs[SHIPPED_SEARCH]
        if run.config.load.capacity_search and run.config.precision.quantization is None
    )
    report = shipped.pattern_report.model_copy(update={"max_rate_rps": 12.0})
    yours = shipped.model_copy(
        update={
            "run_id": "yours-capacity-search",
            "pattern_report": report,
            "config": shipped.config.model_copy(
                update={"label": "TEST STAND-IN: the shipped search re-filed as yours"}
            ),
        }
    )
    chosen = (
        recommend(profile_from_dict(CHAT_40), runs=[yours], reference_dir=SHIPPED_REFERENCE_DIR)
        .stages[0]
        .recommendation
    )
    # Within its configuration (bf16, TP=1) your search stands over the shipped one; across
    # configurations the cheapest answer is chosen (here the shipped FP8 search's).
    asked = next(o for o in [chosen.fleet.chosen, *chosen.fleet.alternatives] if o.departures == 0)
    assert asked.basis.source == "yours" and asked.capacity.run_id == "yours-capacity-search"
    assert asked.gpus == math.ceil(40 * 1.2 / 12.0)
    assert "your capacity search" in chosen.headline or chosen.capacity.run_id != (
        "yours-capacity-search"
    )
    assert any(c.provenance == "published" for c in chosen.capacities)


def test_a_peak_only_stage_matches_evidence_at_its_one_load(reference):
    """A stage that gives only its peak is matched at that load (the rate open loop, its
    in-flight count per engine closed loop), not at any level a run happened to measure."""
    from advisor.evidence.rows import workload_match

    stage = stage_of(CHAT_40)
    quick = [
        run
        for run in reference.runs["h200_llama2-7b_fidelity_quick_plan_onnx_genai_runs.json"]
        if run.config.workload.kind == "generate"
        and run.config.workload.prompt_tokens.mean == 512
        and run.config.load.fixed_level() == ("concurrency", 8.0)
    ]
    assert quick, "the shipped 512/256 runs at 8 in flight"
    match = workload_match(quick[0], stage)
    assert not match.traffic and any("concurrency 8" in d for d in match.differences)


def test_a_settled_search_supersedes_searches_judged_from_an_empty_engine():
    """A search whose probes settled (`load.settle_s`) stands over unsettled ones of the same
    configuration, though it found more: the unsettled ones are upper bounds by chance."""
    from advisor.decide.recommend import settled, stage_capacities

    stage = profile_from_dict({**CHAT_40, "precision": {"dtype": "bfloat16"}}).stages[0]
    data = json.loads((SHIPPED_REFERENCE_DIR / SHIPPED_SEARCH).read_text(encoding="utf-8"))
    shipped = [RunResult.model_validate(raw) for raw in data["runs"]]
    search = next(run for run in shipped if run.config.load.pattern == "capacity")
    load = search.config.load.model_copy(update={"settle_s": "slo"})
    # TEST DOUBLE: the shipped search relabelled as settled and faster (not a measurement).
    report = search.pattern_report.model_copy(update={"max_rate_rps": 23.0})
    redone = search.model_copy(
        update={
            "run_id": "settled-double",
            "created_at": "2000-01-01T00:00:00+00:00",  # older: settling decides, not age
            "config": search.config.model_copy(update={"load": load}),
            "pattern_report": report,
        }
    )
    assert settled(redone) and not settled(search)
    candidates, notes = stage_capacities(stage, [search, redone], set())
    measured = [c for c in candidates if c.capacity.source == "measured"]
    assert [c.capacity.run_id for c in measured] == ["settled-double"]
    assert not any("upper bound" in note for note in measured[0].capacity.notes)
    assert any("superseded by the settled search settled-double" in note for note in notes)


def test_a_hugging_face_id_is_sized_from_its_presets_shipped_search():
    """meta-llama/Llama-2-7b-chat-hf has llama-2-7b's config.json (bench.core.model_ids): the
    shipped random-weight search of that shape sizes it (speed does not depend on the weights)."""
    as_id = {**CHAT_40, "model": "meta-llama/Llama-2-7b-chat-hf"}
    report = recommend(profile_from_dict(as_id), reference_dir=SHIPPED_REFERENCE_DIR)
    capacity = report.stages[0].recommendation.capacity
    assert capacity is not None and capacity.source == "measured"
    assert capacity.reference == FP8_SEARCH and capacity.gpus_needed == 2
    fleet = report.stages[0].recommendation.fleet
    asked = next(o for o in fleet.alternatives if o.departures == 0)
    assert asked.capacity.reference == SETTLED_SEARCH and asked.gpus == 3


def test_a_calibration_record_in_your_store_sizes_the_fleet_and_is_named(tmp_path):
    """With a `bench calibrate` record of the engine on the stage's GPU in the store, the
    predicted fleet is sized with its factors and the basis names the record; the search's
    configurations name the same record (one calibration)."""
    from bench.storage.calibrations import put_calibration
    from bench.storage.store import ResultStore

    record = shipped_h200_record()
    store = ResultStore(tmp_path / "store.sqlite")
    put_calibration(store, record)
    profile = profile_from_dict(PREDICTED["multi-turn chat on H200"])
    stage = recommend(profile, store=store, reference_dir=SHIPPED_REFERENCE_DIR).stages[0]
    chosen = stage.recommendation
    assert chosen.capacity is not None and chosen.capacity.source == "estimate"
    assert f"yours: record {record.calibration_id}" in chosen.capacity_basis
    without = recommend(profile, reference_dir=SHIPPED_REFERENCE_DIR).stages[0].recommendation
    assert record.calibration_id not in without.capacity_basis
    assert chosen.capacity.max_rate_rps != without.capacity.max_rate_rps
    search = stage.configurations
    if search is not None and search.best() is not None:
        assert record.calibration_id in search.best().efficiency_source
    store.close()


def test_a_gpu_without_calibration_says_so_and_offers_the_command():
    chosen = (
        recommend(
            profile_from_dict(PREDICTED["chat on L40S"]),
            reference_dir=SHIPPED_REFERENCE_DIR,
        )
        .stages[0]
        .recommendation
    )
    assert "uncalibrated" in chosen.capacity_basis
    assert "python -m bench calibrate --backend vllm --model llama-2-7b" in chosen.capacity_basis
