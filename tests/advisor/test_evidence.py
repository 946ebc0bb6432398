"""Benchmark plans and evidence rows: sources, closeness, SLOs, repeats, ranking, the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.evidence.rows import (
    gather_evidence,
    rank_rows,
    reference_runs_and_rows,
    rows_from_runs,
)
from advisor.plan.run_configs import bench_plan
from advisor.plan.tree import evaluate, load_tree
from advisor.sizing.estimate import estimate_stage
from advisor.sizing.measured import DEFAULT_REFERENCE_DIR, same_gpu_type
from advisor.workload.profile_input import profile_from_dict
from bench.core.config import (
    ConcurrencyLoad,
    ForwardWorkload,
    GenerateWorkload,
    ParallelismConfig,
    RateLoad,
    StepLoad,
)
from bench.core.errors import UserError
from bench.core.schema import RunStatus
from bench.storage.store import ResultStore
from tests.advisor.synthetic import synthetic_run

TREE = load_tree()


def stage(**data):
    return profile_from_dict(data).primary


def decision_for(s):
    return evaluate(TREE, s, estimate_stage(s))


CHAT = {
    "long_sequence_generation": True,
    "model": "llama-2-7b",
    "gpu": {"type": "H200"},
    "prompt_tokens": {"mean": 512},
    "output_tokens": {"mean": 256},
    "concurrency": 8,
    "slo": {"ttft_ms": 500, "tpot_ms": 50},
}


# ---------------------------------------------------------------- plan


def test_plan_one_config_per_benchmarkable_candidate() -> None:
    s = stage(**CHAT)
    decision = decision_for(s)
    configs = bench_plan(s, decision)
    # one config per candidate, each under the framework it measures (SGLang through openai)
    assert [c.framework for c in configs] == [c.framework for c in decision.candidates]
    for config in configs:
        assert config.model == "llama-2-7b"
        assert isinstance(config.workload, GenerateWorkload)
        assert config.workload.prompt_tokens.mean == 512
        assert config.workload.output_tokens.mean == 256
        assert isinstance(config.load, ConcurrencyLoad) and config.load.concurrency == 8
        assert config.slo.ttft_ms == 500 and config.slo.tpot_ms == 50
        assert config.precision == s.precision.run_precision()
    vllm = next(c for c in configs if c.backend == "vllm")
    assert vllm.engine_args["enforce_eager"] is False  # CUDA graphs on
    assert vllm.engine_args["max_model_len"] >= 512 + 256


def test_quick_plan_is_short() -> None:
    s = stage(**CHAT)
    configs = bench_plan(s, decision_for(s), quick=True)
    for config in configs:
        assert isinstance(config.load, ConcurrencyLoad)
        assert config.load.duration_s <= 30
        assert config.load.warmup_requests <= 3
        assert config.load.max_duration_s <= 180
        assert "quick" in (config.label or "")


def test_plan_skips_jax() -> None:
    s = stage(dynamic_control_flow=True, model="llama-2-7b")
    decision = decision_for(s)
    assert "jax" in [c.framework for c in decision.candidates]
    assert "jax" not in [c.backend for c in bench_plan(s, decision)]


def test_plan_load_pattern_follows_the_profile() -> None:
    rate = stage(model="llama-2-7b", request_rate_rps=5.0)
    assert isinstance(bench_plan(rate, decision_for(rate))[0].load, RateLoad)
    neither = stage(model="llama-2-7b")
    assert isinstance(bench_plan(neither, decision_for(neither))[0].load, StepLoad)


def test_plan_forward_kind_fixed_shapes() -> None:
    s = stage(
        kind="forward",
        fixed_input_shapes=True,
        model="resnet-50",
        batch_size=16,
        image_size=224,
        build_time_tolerance="minutes",
    )
    configs = bench_plan(s, decision_for(s))
    assert configs[0].backend == "tensorrt"
    for config in configs:
        assert isinstance(config.workload, ForwardWorkload)
        assert config.workload.batch_size == 16
        assert config.workload.dynamic_shapes is False


def test_plan_needs_a_model() -> None:
    s = stage(long_sequence_generation=True)
    with pytest.raises(UserError, match="has no model"):
        bench_plan(s, decision_for(s))


# ---------------------------------------------------------------- rows


def test_a_cpu_run_on_a_gpu_machine_is_not_evidence_for_that_gpu() -> None:
    s = stage(**CHAT)
    on_cpu = synthetic_run("pytorch", gpu="H200")
    on_cpu.config = on_cpu.config.model_copy(update={"device": "cpu"})
    (row,) = rows_from_runs(s, [on_cpu])
    assert row.source == "measured-elsewhere" and row.gpu is None
    assert not row.closeness.same_gpu
    # The one rule: catalogue aliases match, unknown names only when equal, none never.
    assert same_gpu_type("H200", "NVIDIA H200") and same_gpu_type("Mystery X", "Mystery X")
    assert not same_gpu_type("H200", "A100-80GB-SXM") and not same_gpu_type(None, "H200")


def test_measured_here_vs_elsewhere_by_fingerprinted_gpu() -> None:
    s = stage(**CHAT)
    rows = rows_from_runs(
        s, [synthetic_run("vllm", gpu="H200"), synthetic_run("vllm", gpu="A100-80GB-SXM")]
    )
    sources = {row.gpu: row.source for row in rows}
    assert sources == {"H200": "measured-here", "A100-80GB-SXM": "measured-elsewhere"}
    here = next(r for r in rows if r.source == "measured-here")
    assert here.closeness.same_gpu and here.closeness.same_model and here.closeness.same_shape
    assert here.objective_metric == "output_throughput_tok_s"
    assert here.objective_value == 1000.0


def test_closeness_shape_and_model() -> None:
    s = stage(**CHAT)
    rows = rows_from_runs(
        s,
        [
            synthetic_run("vllm", output_mean=2048),  # different output length
            synthetic_run("vllm", concurrency=64),  # different concurrency
            synthetic_run("vllm", model="mistral-7b"),  # different model
        ],
    )
    by_shape = {(r.model, r.shape): r.closeness for r in rows}
    assert all(c.same_gpu for c in by_shape.values())
    assert sum(1 for c in by_shape.values() if c.same_shape) == 1  # only the mistral one
    mistral = next(c for (model, _), c in by_shape.items() if model == "mistral-7b")
    assert mistral.same_model is False and mistral.same_shape is True


def ladder_run(levels: list[int], throughputs: list[float]):
    """A synthetic step-ladder run (labelled synthetic): one closed-loop phase per level."""
    from bench.core.schema import PhaseResult

    run = synthetic_run("torch_compile", throughput_tok_s=max(throughputs))
    run.config.load = StepLoad(levels=levels, stage_duration_s=15, stop_at_knee=False)
    run.phases = [
        PhaseResult(
            name=f"step-c{level}",
            strategy="concurrency",
            target=level,
            start_ns=index,
            end_ns=index + 1,
            summary=run.summary.model_copy(update={"output_throughput_tok_s": rate}),
        )
        for index, (level, rate) in enumerate(zip(levels, throughputs, strict=True))
    ]
    return run


def test_a_ladder_is_the_stages_shape_only_through_its_phase_at_that_concurrency() -> None:
    s = stage(**CHAT)  # 512 / 256 tokens at concurrency 8
    with_phase, without_phase = rows_from_runs(
        s, [ladder_run([1, 8, 64], [100.0, 700.0, 3000.0]), ladder_run([256], [9000.0])]
    )
    assert with_phase.closeness.same_shape is True
    assert with_phase.metrics["output_throughput_tok_s"] == 700.0  # the c8 phase's figure
    assert "phase at concurrency 8" in with_phase.shape
    # Only a c256 phase: its figures are not the stage's shape, so it ranks behind.
    assert without_phase.closeness.same_shape is False
    assert "without a phase at concurrency 8" in without_phase.shape
    assert rank_rows([without_phase, with_phase])[0] is with_phase


def test_slo_check_uses_the_profile_percentile() -> None:
    s = stage(**CHAT)  # ttft 500 ms at p99
    rows = rows_from_runs(s, [synthetic_run("vllm", ttft_p50_ms=200, ttft_p99_ms=900)])
    assert rows[0].meets_slo is False
    assert "ttft_ms_p99 900 > ttft_ms 500" in rows[0].slo_failures[0]
    p50 = stage(**{**CHAT, "slo": {"ttft_ms": 500, "percentile": "p50"}})
    assert rows_from_runs(p50, [synthetic_run("vllm", ttft_p50_ms=200, ttft_p99_ms=900)])[
        0
    ].meets_slo


def test_min_throughput_slo() -> None:
    s = stage(**{**CHAT, "slo": {"min_output_throughput_tok_s": 2000}})
    rows = rows_from_runs(s, [synthetic_run("vllm", throughput_tok_s=1500)])
    assert rows[0].meets_slo is False


def test_repeats_grouped_with_variance() -> None:
    s = stage(**CHAT)
    runs = [synthetic_run("vllm", throughput_tok_s=v) for v in (900.0, 1000.0, 1100.0)]
    rows = rows_from_runs(s, runs)
    assert len(rows) == 1
    row = rows[0]
    assert row.repeats == 3 and len(row.run_ids) == 3
    assert row.objective_value == pytest.approx(1000.0)
    assert row.objective_cv == pytest.approx(100.0 / 1000.0)


def test_invalid_and_failed_runs_are_not_eligible() -> None:
    s = stage(**CHAT)
    rows = rows_from_runs(
        s,
        [
            synthetic_run("vllm", valid=False),
            synthetic_run("tensorrt_llm", status=RunStatus.FAILED, failure="CUDA out of memory"),
            synthetic_run("pytorch"),
        ],
    )
    eligible = {r.framework: r.eligible for r in rows}
    assert eligible == {"vllm": False, "tensorrt_llm": False, "pytorch": True}
    ranked = rank_rows(rows)
    assert ranked[0].framework == "pytorch"
    failed = next(r for r in rows if r.framework == "tensorrt_llm")
    assert failed.status == "FAILED" and "out of memory" in failed.failure


def test_other_kinds_are_ignored() -> None:
    s = stage(**CHAT)
    assert rows_from_runs(s, [synthetic_run("tensorrt", kind="forward", batch_size=8)]) == []


def test_objectives_pick_their_metric() -> None:
    runs = [
        synthetic_run("vllm", throughput_tok_s=2000, e2e_p99_ms=9000),
        synthetic_run("tensorrt_llm", throughput_tok_s=1500, e2e_p99_ms=4000),
    ]
    fast = rank_rows(rows_from_runs(stage(**CHAT), runs))
    assert fast[0].framework == "vllm"
    latency = stage(**{**CHAT, "objective": "minimize_latency"})
    ranked = rank_rows(rows_from_runs(latency, runs))
    assert ranked[0].framework == "tensorrt_llm"
    assert ranked[0].objective_metric == "e2e_ms_p99"
    cost = rank_rows(
        rows_from_runs(stage(**{**CHAT, "objective": "minimize_cost_per_token"}), runs)
    )
    assert cost[0].framework == "vllm"
    assert cost[0].objective_value == pytest.approx(1e6 / 2000)


# ---------------------------------------------------------------- published and ranking


def test_published_seed_table_rows() -> None:
    s = stage(long_sequence_generation=True, model="llama-2-13b", gpu={"type": "A100-80GB-PCIE"})
    rows = gather_evidence(s, store=None)
    published = [r for r in rows if r.source == "published"]
    assert {r.framework: r.metrics["request_throughput_rps"] for r in published} == {
        "pytorch": 18.7,
        "tensorrt_llm": 52.3,
        "vllm": 61.8,
        "onnxruntime": 45.6,
    }
    for row in published:
        assert row.closeness.same_gpu and row.closeness.same_model
        assert row.closeness.same_shape is None
        assert any("not state the workload" in c for c in row.caveats)
        assert "seed_a100_llama2_13b.json" in row.reference
    # forward-kind stages get no LLM rows
    assert gather_evidence(stage(kind="forward", model="resnet-50")) == []


def test_published_never_outranks_a_measurement_on_the_users_gpu() -> None:
    s = stage(long_sequence_generation=True, model="llama-2-13b", gpu={"type": "A100-80GB-PCIE"})
    slow_here = synthetic_run(
        "pytorch", gpu="A100-80GB-PCIE", model="llama-2-13b", throughput_tok_s=10, request_rps=0.1
    )
    rows = rank_rows(rows_from_runs(s, [slow_here]) + gather_evidence(s))
    assert rows[0].source == "measured-here"
    assert rows[0].objective_value < 61.8  # slower than every published figure, still first
    assert all(r.source == "published" for r in rows[1:])


def test_published_slo_check_only_where_comparable() -> None:
    s = stage(
        long_sequence_generation=True,
        model="llama-2-13b",
        slo={"e2e_ms": 400, "ttft_ms": 100},
    )
    rows = {r.framework: r for r in gather_evidence(s) if r.source == "published"}
    assert rows["vllm"].meets_slo is True  # P99 380 ms <= 400; TTFT statistic unknown: unchecked
    assert rows["tensorrt_llm"].meets_slo is False  # P99 420 ms


def test_measured_reference_file(tmp_path: Path) -> None:
    run = synthetic_run("vllm", gpu="H200")
    (tmp_path / "measured_h200.json").write_text(
        json.dumps({"runs": [run.model_dump(mode="json")]})
    )
    (tmp_path / "README.md").write_text("not evidence")
    rows = gather_evidence(stage(**CHAT), reference_dir=tmp_path)
    assert len(rows) == 1
    assert rows[0].source == "measured-here"
    assert rows[0].reference.endswith("measured_h200.json")


def test_default_reference_dir_is_data_reference() -> None:
    assert DEFAULT_REFERENCE_DIR.name == "reference"
    assert (DEFAULT_REFERENCE_DIR / "seed_a100_llama2_13b.json").is_file()
    data = json.loads((DEFAULT_REFERENCE_DIR / "seed_a100_llama2_13b.json").read_text())
    assert data["kind"] == "published"
    assert "seed" in data["source"]["title"]


def test_evidence_from_a_real_result_store(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "results.sqlite")
    for run in (
        synthetic_run("vllm", throughput_tok_s=1200),
        synthetic_run("tensorrt_llm", throughput_tok_s=1500),
        synthetic_run("pytorch", throughput_tok_s=300, gpu="L4"),
    ):
        store.create_run(run)
        store.update_run(run)
    running = synthetic_run("vllm", throughput_tok_s=99999)
    store.create_run(running)  # still RUNNING: not evidence
    rows = gather_evidence(stage(**CHAT), store=store, reference_dir=tmp_path / "none")
    assert [(r.framework, r.source) for r in rows] == [
        ("tensorrt_llm", "measured-here"),
        ("vllm", "measured-here"),
        ("pytorch", "measured-elsewhere"),
    ]
    store.close()


def test_plan_engine_limits_cover_the_longest_request() -> None:
    s = stage(
        model="llama-2-7b",
        concurrency=4,
        prompt_tokens={"kind": "normal", "mean": 256, "spread": 64, "max": 1024},
        output_tokens={"kind": "fixed", "mean": 128},
    )
    configs = {c.backend: c for c in bench_plan(s, decision_for(s))}
    assert configs["vllm"].engine_args["max_model_len"] >= 1024 + 128
    assert configs["tensorrt_llm"].engine_args["max_seq_len"] >= 1024 + 128
    assert configs["tensorrt_llm"].engine_args["max_batch_size"] == 4


def test_plan_engine_args_are_accepted_by_the_adapters() -> None:
    """Every planned option is one the registered adapter declares (names and types)."""
    from bench.engines.backends import get_backend

    for data in (
        CHAT,
        {**CHAT, "dynamic_control_flow": True},
        {"kind": "forward", "fixed_input_shapes": True, "model": "resnet-50", "image_size": 224},
    ):
        s = stage(**data)
        for config in bench_plan(s, decision_for(s)):
            get_backend(config.backend).validate_engine_args(config.engine_args)


def test_shipped_h200_reference_runs_are_measured_evidence() -> None:
    """The committed H200 campaign (data/reference) loads as measured RunResults with their
    fingerprint and command, and ranks as measured-here for an H200 7B profile."""
    from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

    s = stage(
        long_sequence_generation=True,
        model="llama-2-7b",
        gpu={"type": "H200"},
        prompt_tokens={"mean": 128},
        output_tokens={"mean": 128},
        concurrency=64,
    )
    rows = rank_rows(gather_evidence(s, store=None, reference_dir=SHIPPED_REFERENCE_DIR))
    here = [r for r in rows if r.source == "measured-here"]
    assert {r.framework for r in here} >= {"vllm", "pytorch", "openai"}
    assert rows[0].source == "measured-here" and rows[0].framework in ("vllm", "openai")
    runs, _, notes = reference_runs_and_rows(s, SHIPPED_REFERENCE_DIR)
    measured = runs["h200_llama2-7b_engines_bert_resnet_runs.json"]
    assert not notes
    assert all(r.environment.primary_gpu_name == "NVIDIA H200" for r in measured)
    assert all(r.command.startswith("python -m bench run") for r in measured)


def test_parallelism_and_precision_keep_runs_apart_and_fp8_says_speed_only() -> None:
    """A TP=2 run is not a repeat of a TP=1 run; FP8 rows carry the speed-only caveat."""
    s = stage(**CHAT)
    tp1 = synthetic_run("vllm", throughput_tok_s=1000.0)
    tp2 = synthetic_run("vllm", throughput_tok_s=1500.0)
    tp2.config = tp2.config.model_copy(
        update={"parallelism": ParallelismConfig(tensor_parallel_size=2)}
    )
    fp8 = synthetic_run("vllm", throughput_tok_s=1300.0)
    fp8.config = fp8.config.model_copy(
        update={"precision": fp8.config.precision.model_copy(update={"quantization": "fp8"})}
    )
    rows = rows_from_runs(s, [tp1, tp2, fp8])
    assert len(rows) == 3
    by_value = {row.objective_value: row for row in rows}
    assert by_value[1500.0].parallelism.tensor_parallel_size == 2
    assert by_value[1000.0].parallelism.tensor_parallel_size == 1
    # gpu_s_per_million_tokens counts both GPUs of the TP=2 engine.
    assert by_value[1500.0].metrics["gpu_s_per_million_tokens"] == pytest.approx(2e6 / 1500)
    assert by_value[1300.0].run_precision.quantization == "fp8"
    assert by_value[1300.0].precision == "float16 + fp8 weights"
    assert any("speed" in c and "accuracy" in c for c in by_value[1300.0].caveats)
    assert not any("FP8" in c for c in by_value[1000.0].caveats)
