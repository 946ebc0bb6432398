"""The one plan builder: `plan_for_stage` is what the CLI and the Benchmark page both plan with."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from advisor.plan.run_configs import bench_plan
from advisor.plan.stage_plan import plan_for_stage
from advisor.plan.tree import evaluate, load_tree
from advisor.sizing.calibration_fit import shipped_records
from advisor.sizing.estimate import estimate_stage
from advisor.workload.profile_input import load_profile, profile_from_dict

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PROFILES = sorted((ROOT / "examples" / "profiles").glob("*.yaml"))


def _bench_runs_its_model(stage) -> bool:
    """Whether the bench can run the stage's model (a model named, not a published speech
    model the advisor only sizes: `unplannable`, tested below)."""
    from advisor.plan.run_configs import unplannable
    from bench.core.errors import UserError

    try:
        unplannable(stage)
    except UserError:
        return False
    return True


def test_a_published_speech_model_is_sized_but_not_planned_in_one_line(tmp_path: Path) -> None:
    """The speech example names openai/whisper-small: the advisor sizes it from its published
    config (its report has a fleet), the bench has no preset of it, so the plan is refused in
    one line, by the library and by `bench-plan` (exit 2)."""
    import subprocess
    import sys

    from bench.core.errors import UserError

    speech = ROOT / "examples" / "profiles" / "speech_split_stage.yaml"
    stage = load_profile(speech).stages[0]
    with pytest.raises(UserError, match="no preset of it"):
        plan_for_stage(stage, quick=True, tree=load_tree())
    done = subprocess.run(
        [sys.executable, "-m", "advisor", "bench-plan", "--profile", str(speech)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
        env={**os.environ, "ADVISOR_STORE": str(tmp_path / "store.sqlite")},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "local folder with its checkpoint" in done.stderr


@pytest.mark.parametrize("path", EXAMPLE_PROFILES, ids=lambda p: p.stem)
@pytest.mark.parametrize("quick", [True, False])
def test_plan_for_stage_is_the_tree_walk_plus_bench_plan(path: Path, quick: bool) -> None:
    tree = load_tree()
    for stage in load_profile(path).stages:
        if not _bench_runs_its_model(stage):
            continue
        decision = evaluate(tree, stage, estimate_stage(stage))
        if decision.refused:  # over_long_context: refused before planning, by both
            from bench.core.errors import UserError

            with pytest.raises(UserError, match="cannot be planned"):
                plan_for_stage(stage, quick=quick, tree=tree)
            with pytest.raises(UserError, match="cannot be planned"):
                bench_plan(stage, decision, quick=quick)
            continue
        plan = plan_for_stage(stage, quick=quick, tree=tree)
        assert plan.decision == decision
        # the plan's runs carry the shipped calibration's prediction where one covers them
        unpredicted = [c.model_copy(update={"prediction": None}) for c in plan.configs]
        assert unpredicted == bench_plan(stage, decision, quick=quick)
        shipped = {r.calibration_id for r in shipped_records()}
        assert all(c.prediction.calibration_id in shipped for c in plan.configs if c.prediction)
        assert plan.not_benchmarked == [
            c.framework for c in decision.candidates if not c.benchmarked
        ]


def test_cli_bench_plan_prints_plan_for_stage(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "absent.sqlite"))
    path = ROOT / "examples" / "profiles" / "ecommerce_two_stage.yaml"
    result = CliRunner().invoke(app, ["bench-plan", "--profile", str(path), "--quick", "--json"])
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)["stages"]
    expected = [plan_for_stage(s, quick=True) for s in load_profile(path).stages]
    assert [s["stage"] for s in printed] == [p.stage for p in expected]
    for shown, plan in zip(printed, expected, strict=True):
        assert shown["configs"] == [c.model_dump(mode="json") for c in plan.configs]
        assert shown["estimates"] == [e.model_dump(mode="json") for e in plan.estimates]


def test_benchmark_page_plans_with_plan_for_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    import advisor.plan.run_estimate
    from ui.benchmark_page import plan_for

    # an idle machine
    monkeypatch.setattr(advisor.plan.run_estimate, "host_busy_factor", lambda: 1.0)

    stage = load_profile(ROOT / "examples" / "profiles" / "chat_7b_h200.yaml").primary
    shown = plan_for(stage, quick=True)
    assert shown == plan_for_stage(stage, quick=True, cpu_only=shown.cpu_only)


# ---------------------------------------------------------------- CPU sizing and estimates


@pytest.fixture
def empty_model_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No checkpoint written yet, whatever this machine's own cache holds."""
    monkeypatch.setenv("ADVISOR_MODEL_CACHE", str(tmp_path / "models"))
    return tmp_path / "models"


def default_stage():
    from ui.state import default_profile

    return default_profile().primary


def test_cpu_quick_plan_of_the_default_profile_runs_the_cpu_sized_model(empty_model_cache) -> None:
    stage = default_stage()
    assert stage.model not in ("tiny-llama", None)  # the default profile names a GPU-sized model
    plan = plan_for_stage(stage, quick=True, cpu_only=True)
    assert plan.profile_model == stage.model
    assert {c.model for c in plan.configs} == {"tiny-llama"}
    assert {c.device for c in plan.configs} == {"cpu"}
    assert plan.note is not None and "not GPU figures" in plan.note
    vllm = [c for c in plan.configs if c.backend == "vllm"]
    assert vllm and vllm[0].engine_args.get("enforce_eager") is True
    assert "gpu_memory_utilization" not in vllm[0].engine_args
    assert not plan.needs_confirmation, plan.duration_s
    assert plan.disk_bytes < 100e6  # tiny checkpoints, not a 13 GB one


def test_full_cpu_plan_of_a_7b_model_asks_for_confirmation(empty_model_cache) -> None:
    stage = default_stage()
    plan = plan_for_stage(stage, quick=False, cpu_only=True)
    assert {c.model for c in plan.configs} == {stage.model}  # only the quick plan swaps models
    assert plan.needs_confirmation and plan.duration_s > 600
    first, *others = plan.estimates
    assert first.disk_bytes >= 13e9 and not first.checkpoint_cached  # llama-2-7b in bf16
    assert "write checkpoint" in first.parts_s
    # The checkpoint is written once, by the first run that needs it.
    assert all("write checkpoint" not in e.parts_s for e in others)


def test_gpu_plan_keeps_the_profile_model() -> None:
    stage = default_stage()
    plan = plan_for_stage(stage, quick=True)
    assert {c.model for c in plan.configs} == {stage.model} and plan.note is None
    assert {c.device for c in plan.configs} == {"auto"}


def test_estimate_is_in_the_range_of_a_measured_quick_plan() -> None:
    """The H200 quick plan (vLLM + PyTorch, llama-2-7b, checkpoint on disk) took 171 s end to
    end (the quick_plan step in data/reference/h200_llama2-7b_fidelity_quick_plan_onnx_genai/
    campaign-fidelity-rounds-quick-plan.json); the estimate must be in range."""
    from advisor.plan.run_estimate import estimate_run
    from bench.core.config import RunConfig

    folder = ROOT / "data/reference/h200_llama2-7b_fidelity_quick_plan_onnx_genai"
    data = json.loads(
        (folder / "campaign-fidelity-rounds-quick-plan.json").read_text(encoding="utf-8")
    )
    (step,) = [s for s in data["steps"] if s.get("kind") == "quick_plan"]
    configs = [RunConfig.model_validate(run["config"]) for run in step["runs"]]
    estimated = sum(
        estimate_run(c, cpu_only=False, gpu="H200", written=True).duration_s for c in configs
    )
    assert 0.5 < estimated / step["wall_s"] < 2.0, (estimated, step["wall_s"])


@pytest.mark.parametrize("path", EXAMPLE_PROFILES, ids=lambda p: p.stem)
def test_each_planned_run_carries_its_backends_recommended_args(path: Path) -> None:
    """The plan's engine options come from the backend (`recommended_args` of the stage's
    shape), not from a list of framework names in the advisor."""
    from advisor.plan.tree import SERVED_THROUGH_OPENAI
    from advisor.sizing.engine_shape import workload_shape
    from advisor.workload.stage_load import stage_load
    from advisor.workload.traffic import sized_for_engine
    from bench.engines.backends import registry

    for stage in load_profile(path).stages:
        if not _bench_runs_its_model(stage) or estimate_stage(stage).refused:
            continue  # a refused stage is never planned (test above)
        # sized for what the engine holds: a conversation's history at its last turn
        shape = workload_shape(sized_for_engine(stage))
        assert shape.concurrency == stage_load(stage).per_engine  # the stage's one load rule
        assert shape.max_sequence_tokens % 256 == 0
        for config in plan_for_stage(stage).configs:
            backend = registry()[config.backend]
            # the caching on/off pair switches the run setting, never an engine argument; a
            # framework measured through the openai launcher (SGLang) adds what launches it
            launch = SERVED_THROUGH_OPENAI.get(config.framework, {})
            assert config.engine_args == {**backend.recommended_args(shape), **launch}


def test_a_busy_host_stretches_cpu_estimates(empty_model_cache) -> None:
    from advisor.plan.run_estimate import host_busy_factor

    assert host_busy_factor() >= 1.0
    stage = default_stage()
    idle = plan_for_stage(stage, quick=True, cpu_only=True)
    busy = plan_for_stage(stage, quick=True, cpu_only=True, busy=4.0)
    for calm, loaded in zip(idle.estimates, busy.estimates, strict=True):
        assert loaded.parts_s["engine start"] == pytest.approx(
            4 * calm.parts_s["engine start"], 0.01
        )
        assert loaded.parts_s["warm-up"] == pytest.approx(4 * calm.parts_s["warm-up"], 0.05)
    assert busy.duration_s > 3 * idle.duration_s
    # A GPU plan is not scaled by the host's load.
    assert (
        plan_for_stage(stage, quick=True, busy=4.0).duration_s
        == plan_for_stage(stage, quick=True).duration_s
    )


# ---------------------------------------------------------------- the context window (issue 23)


def _stage(**data):
    from advisor.workload.profile_input import profile_from_dict

    return profile_from_dict(data).primary


def test_a_stage_longer_than_the_models_window_is_refused_before_planning() -> None:
    from bench.core.errors import UserError

    stage = _stage(
        model="llama-2-70b",
        prompt_tokens={"mean": 6000},
        output_tokens={"mean": 200},
        gpu={"type": "H200", "count": 4},
    )
    with pytest.raises(UserError, match="cannot be planned: prompt \\+ output of up to 6,200"):
        plan_for_stage(stage, quick=False)


def test_max_model_len_never_passes_the_window() -> None:
    """4,000 tokens round up to 4,096, not 4,352 (which vLLM refuses on 4,096 positions)."""
    stage = _stage(model="llama-2-7b", prompt_tokens={"mean": 3900}, output_tokens={"mean": 100})
    plan = plan_for_stage(stage, quick=True, cpu_only=False)
    vllm = next(c for c in plan.configs if c.backend == "vllm")
    assert vllm.engine_args["max_model_len"] == 4096


def test_cpu_quick_plan_scales_a_long_prompt_to_the_substitute_and_says_so() -> None:
    """mistral-7b takes 6,000 + 200 tokens; its CPU stand-in tiny-llama takes 4,096."""
    from advisor.plan.plan_table import workload_lengths

    stage = _stage(
        model="mistral-7b",
        long_sequence_generation=True,
        prompt_tokens={"mean": 6000},
        output_tokens={"mean": 200},
    )
    plan = plan_for_stage(stage, quick=True, cpu_only=True, busy=1.0)
    assert plan.configs and all(c.model == "tiny-llama" for c in plan.configs)
    for config in plan.configs:
        prompt, output = config.workload.prompt_tokens.mean, config.workload.output_tokens.mean
        assert prompt + output <= 4096
        assert prompt / output == pytest.approx(6000 / 200, rel=0.02)  # one factor for both
        limit = config.engine_args.get("max_model_len") or config.engine_args.get("max_cache_len")
        assert limit is None or limit <= 4096
    assert "scales the lengths by 0.66" in plan.note
    assert "from prompt 6,000 / output 200 tokens" in plan.note
    assert workload_lengths(plan.configs[0]) == "prompt 3,963 tok / output 132 tok"


def test_only_the_tail_past_the_window_is_clipped_and_said() -> None:
    stage = _stage(
        model="llama-2-7b",
        prompt_tokens={"kind": "normal", "mean": 3000, "spread": 300},
        output_tokens={"mean": 256},
    )
    plan = plan_for_stage(stage, quick=True, cpu_only=False)
    assert all(c.workload.prompt_tokens.max == 4096 - 256 for c in plan.configs)
    assert "prompts clipped at 3,840 tokens" in plan.note


def test_cpu_runs_use_one_dtype_rule_and_say_so() -> None:
    """The CLI's CPU runs are bfloat16 (bench run's default); the quick plan on the CPU too."""
    from bench.core.config import CPU_HALF_DTYPE, PrecisionConfig

    assert PrecisionConfig().dtype == CPU_HALF_DTYPE == "bfloat16"
    stage = _stage(model="llama-2-7b", precision={"dtype": "float16"})
    plan = plan_for_stage(stage, quick=True, cpu_only=True, busy=1.0)
    assert plan.configs and {c.precision.dtype for c in plan.configs} == {"bfloat16"}
    assert "CPU runs use bfloat16, not the profile's float16" in plan.note
    gpu_plan = plan_for_stage(stage, quick=True, cpu_only=False)
    assert {c.precision.dtype for c in gpu_plan.configs} == {"float16"}  # GPUs: as asked
    fp32 = plan_for_stage(
        _stage(model="llama-2-7b", precision={"dtype": "float32"}), quick=True, cpu_only=True
    )
    assert {c.precision.dtype for c in fp32.configs} == {"float32"}
    forward = plan_for_stage(
        _stage(kind="forward", model="resnet-50", image_size=224, fixed_input_shapes=True),
        quick=True,
        cpu_only=True,
    )
    assert {c.precision.dtype for c in forward.configs} == {"float32"}


def test_a_replay_run_is_estimated_from_its_traces_span() -> None:
    """A replay run's phase lasts the trace's span (times time_scale): the shipped example."""
    from advisor.workload.traffic import replay_seconds
    from bench.core.config import ReplayLoad
    from bench.run.traffic_files import read_trace

    trace = Path(__file__).resolve().parents[2] / "examples/traces/mooncake_small.jsonl"
    load = ReplayLoad(trace=str(trace), time_scale=0.5)
    rows = read_trace(load)
    span_s = (rows[-1].t_ms - rows[0].t_ms) / 1000
    assert load.planned_seconds(1.0, replay_seconds) == pytest.approx(span_s * 0.5 + 1.0)


def test_a_model_that_needs_several_gpus_is_planned_with_that_parallelism() -> None:
    """llama-2-70b in bfloat16 does not fit one H200: the vLLM run is planned at the estimate's
    TP degree in `parallelism` (never as an engine argument); a single-device framework keeps
    one GPU (it cannot split an engine)."""
    stage = default_stage().model_copy(update={"model": "llama-2-70b"})
    stage = stage.model_copy(update={"gpu": stage.gpu.model_copy(update={"count": 4})})
    needed = estimate_stage(stage).tensor_parallel_needed
    assert needed is not None and needed > 1
    for config in plan_for_stage(stage).configs:
        assert "tensor_parallel_size" not in config.engine_args
        expected = needed if config.backend in ("vllm", "tensorrt_llm") else 1
        assert config.parallelism.tensor_parallel_size == expected, config.backend


def test_the_cpu_quick_plan_is_sized_to_end_valid():
    """A 1024/256 chat on a machine without a GPU: before, 8 in flight for a fixed 15 s gave 8
    requests (INVALID every time); now at most 4 in flight, the window runs on until the
    validity minimum + 20% were sent, and the time bound fits the estimated waves."""
    from advisor.plan.cpu_plan import CPU_QUICK_CONCURRENCY, CPU_QUICK_MAX_S, VALID_MARGIN

    stage = profile_from_dict(
        {
            "kind": "generate",
            "model": "llama-2-7b",
            "long_sequence_generation": True,
            "prompt_tokens": {"mean": 1024},
            "output_tokens": {"mean": 256},
            "concurrency": 8,
            "gpu": {"type": "H200"},
        }
    ).stages[0]
    plan = plan_for_stage(stage, quick=True, cpu_only=True, busy=1.0)
    for config, estimate in zip(plan.configs, plan.estimates, strict=True):
        load = config.load
        assert load.concurrency == CPU_QUICK_CONCURRENCY
        assert load.min_requests == math.ceil(config.validity.min_requests * VALID_MARGIN)
        assert load.duration_s >= config.validity.min_duration_s
        assert estimate.parts_s["phases"] <= load.max_duration_s <= CPU_QUICK_MAX_S
    assert "keeps 4 requests in flight, not 8" in (plan.note or "")
    assert "cannot be VALID" not in (plan.note or "")
    # Lengths a CPU cannot serve a dozen times within the bound: said before it runs.
    long = stage.model_copy(
        update={
            "prompt_tokens": stage.prompt_tokens.model_copy(update={"mean": 1000}),
            "output_tokens": stage.output_tokens.model_copy(update={"mean": 3000}),
        }
    )
    assert "cannot be VALID" in (plan_for_stage(long, quick=True, cpu_only=True).note or "")
