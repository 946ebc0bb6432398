"""The advisor asks for the traffic (issue 24 section 3): profile fields and flags, the plan's
workloads and the caching on/off pair, the tree's shared-prefix node, the low hit-rate finding."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from advisor.cli import app
from advisor.decide.diagnose import VLLM_BLOCK_TOKENS, diagnose, ran_on_cpu
from advisor.plan.stage_plan import plan_for_stage
from advisor.plan.tree import DEFAULT_TREE_PATH, evaluate, load_tree
from advisor.sizing.estimate import estimate_stage
from advisor.workload import traffic
from advisor.workload.profile_input import load_profile, profile_from_dict, profile_from_flags
from bench.core.config import (
    ConcurrencyLoad,
    ConversationSpec,
    GenerateWorkload,
    LengthDistribution,
    PrefixPool,
    ReplayLoad,
    RunConfig,
)
from bench.core.engine_facts import PrometheusSample, prefix_caching_setting
from bench.core.errors import UserError
from bench.engines.backends import get_backend
from bench.engines.models import resolve_model

RAG = Path("examples/profiles/rag_chat_7b_h200.yaml")
TRACE = "examples/traces/mooncake_small.jsonl"
PROMPTS = "examples/traces/prompts.jsonl"
BASE = {"model": "llama-2-7b", "gpu": {"type": "H200"}, "prompt_tokens": {"mean": 1152}}


def rag_stage():
    return load_profile(RAG).primary


# ---------------------------------------------------------------- profile


def test_rag_example_declares_its_traffic() -> None:
    stage = rag_stage()
    assert stage.shared_prefix is not None and stage.shared_prefix.tokens == 1024
    assert stage.shared_prefix.count == 8
    assert stage.conversation is not None and stage.conversation.turns == 4
    assert stage.declares_shared_prefixes()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"shared_prefix": {"tokens": 2048}}, "must be below prompt_tokens.mean"),
        ({"shared_prefix": {"tokens": 100, "count": 0}}, "shared_prefix.count"),
        ({"conversation": {"turns": 4, "think_time_ms": float("nan")}}, "think_time_ms"),
        ({"conversation": {"turns": 4, "user_tokens": float("inf")}}, "user_tokens"),
        ({"kind": "forward", "shared_prefix": {"tokens": 100}}, "generate kind"),
        ({"trace_file": TRACE, "shared_prefix": {"tokens": 100}}, "cannot be combined"),
        ({"prompt_file": PROMPTS, "conversation": {"turns": 2}}, "cannot be combined"),
        ({"trace_file": "no/such/trace.jsonl"}, "trace_file: trace no/such/trace.jsonl"),
        ({"prompt_file": "no/such/prompts.jsonl"}, "prompt_file:"),
    ],
)
def test_bad_traffic_is_one_user_error(data: dict, message: str) -> None:
    with pytest.raises(UserError) as caught:
        profile_from_dict({**BASE, **data})
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_binary_trace_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "trace.csv"
    bad.write_bytes(b"TIMESTAMP,ContextTokens\x00\x01\x02")
    with pytest.raises(UserError, match="binary"):
        profile_from_dict({**BASE, "trace_file": str(bad)})


def test_flags_set_the_traffic() -> None:
    profile = profile_from_flags(
        model="llama-2-7b",
        prompt_tokens=1152,
        shared_prefix_tokens=1024,
        shared_prefix_count=8,
        conversation_turns=3,
        user_message_tokens=32,
    )
    stage = profile.primary
    assert (stage.shared_prefix.tokens, stage.shared_prefix.count) == (1024, 8)
    assert (stage.conversation.turns, stage.conversation.user_tokens) == (3, 32)


def test_cli_bad_traffic_flag_is_one_line_exit_2() -> None:
    runner = CliRunner()
    missing = runner.invoke(
        app, ["bench-plan", "--model", "llama-2-7b", "--trace-file", "no/such.jsonl"]
    )
    assert missing.exit_code == 2
    assert missing.stderr.strip().count("\n") == 0 and "no/such.jsonl" in missing.stderr
    nan = runner.invoke(
        app, ["bench-plan", "--model", "llama-2-7b", "--shared-prefix-tokens", "nan"]
    )
    assert nan.exit_code == 2 and "Traceback" not in nan.output


# ---------------------------------------------------------------- plan


def test_every_rag_run_sends_the_profiles_traffic_and_vllm_is_paired() -> None:
    plan = plan_for_stage(rag_stage(), configurations=True)
    assert len(plan.configs) >= 4
    for config in plan.configs:
        workload = config.workload
        assert isinstance(workload, GenerateWorkload)
        assert workload.prefix is not None and workload.prefix.count == 8
        assert workload.prefix.tokens.mean == 1024
        assert workload.prompt_tokens.mean == 128  # the question after the shared context
        assert workload.conversation is not None and workload.conversation.turns.mean == 4
        assert workload.conversation.user_tokens.mean == 128
        assert workload.mean_prompt_tokens() == 1152 + 3 * (128 + 128)
    on = [c for c in plan.configs if c.label.endswith(traffic.CACHING_ON)]
    off = [c for c in plan.configs if c.label.endswith(traffic.CACHING_OFF)]
    assert len(on) == 1 and len(off) == 1
    assert on[0].backend == off[0].backend == "vllm"
    assert on[0].prefix_caching is True and off[0].prefix_caching is False  # the run setting
    assert "enable_prefix_caching" not in on[0].engine_args | off[0].engine_args
    # the engine gets vLLM's own switch, and the in-process engine reports the hit rate
    vllm = get_backend("vllm")
    args = vllm.framework_args(on[0].engine_args, prefix_caching=on[0].prefix_caching)
    assert args["enable_prefix_caching"] is True and args["prefix_cache_stats"] is True
    index = plan.configs.index(on[0])
    assert plan.configs[index + 1] is off[0]  # the pair sits together
    # the pair differs only in the switch and the label
    strip = {"label", "prefix_caching"}
    assert on[0].model_dump(exclude=strip) == off[0].model_dump(exclude=strip)
    # later turns resend the history: the engine is sized for the last turn's prompt
    assert on[0].engine_args["max_model_len"] >= 1152 + 3 * 256 + 128
    assert len(plan.estimates) == len(plan.configs)


def test_conversation_past_the_window_is_refused_before_planning() -> None:
    long = profile_from_dict({**BASE, "conversation": {"turns": 20, "user_tokens": 128}}).primary
    with pytest.raises(UserError, match=r"last turn is about .* over llama-2-7b.s 4,096-token"):
        plan_for_stage(long)
    fits = profile_from_dict({**BASE, "conversation": {"turns": 4, "user_tokens": 128}}).primary
    assert plan_for_stage(fits, quick=True).configs


def test_plain_profile_gets_no_pair_and_plain_workloads() -> None:
    plan = plan_for_stage(profile_from_dict(BASE).primary, quick=True)
    assert all(c.workload.prefix is None for c in plan.configs)
    assert all("prefix caching" not in c.label for c in plan.configs)
    assert all(c.prefix_caching is None for c in plan.configs)
    assert all("enable_prefix_caching" not in c.engine_args for c in plan.configs)


def test_cpu_quick_plan_keeps_the_traffic_and_the_pair() -> None:
    plan = plan_for_stage(rag_stage(), quick=True, cpu_only=True)
    vllm = [c for c in plan.configs if c.backend == "vllm"]
    assert [prefix_caching_setting(c) for c in vllm] == [True, False]
    assert all(c.device == "cpu" and c.model == "tiny-llama" for c in plan.configs)
    assert all(c.workload.prefix is not None for c in plan.configs)


def test_trace_profile_replays_the_trace() -> None:
    stage = profile_from_dict({**BASE, "trace_file": TRACE}).primary
    full = plan_for_stage(stage)
    assert all(isinstance(c.load, ReplayLoad) and c.load.trace == TRACE for c in full.configs)
    assert all(c.load.max_requests is None for c in full.configs)
    quick = plan_for_stage(stage, quick=True)
    assert all(c.load.max_requests == traffic.QUICK_REPLAY_REQUESTS for c in quick.configs)
    vllm = next(c for c in full.configs if c.backend == "vllm")
    # sized for the trace's longest row (3,581 in + 256 out in the shipped example)
    assert vllm.engine_args["max_model_len"] >= 3581 + 256
    cpu = plan_for_stage(stage, quick=True, cpu_only=True)
    assert all(c.load.max_requests == 8 and c.load.max_input_tokens == 64 for c in cpu.configs)
    assert all(e.parts_s["phases"] > 0 for e in full.estimates)


def test_prompt_file_profile_sends_the_file() -> None:
    stage = profile_from_dict({**BASE, "prompt_file": PROMPTS}).primary
    plan = plan_for_stage(stage, quick=True)
    assert all(c.workload.prompt_file.path == PROMPTS for c in plan.configs)
    assert all("prefix caching" not in c.label for c in plan.configs)


def test_bench_plan_refuses_a_prompt_file_bench_run_would_refuse(tmp_path: Path) -> None:
    """One rule: bench-plan puts each configuration it prints through bench run's own check, so
    `output_tokens: 4096` on llama-2-7b (4,096 positions) is refused by both, in one line."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"text": "hello", "output_tokens": 4096}\n')
    flags = ["--model", "llama-2-7b", "--gpu", "H200", "--prompt-file", str(prompts)]
    result = CliRunner().invoke(app, ["bench-plan", "--quick", *flags])
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert "prompt + output_tokens = 1 + 4,096 = 4,097 tokens, over model llama-2-7b" in line
    from bench.core.config import PromptFile, RunConfig
    from bench.run.api import check_traffic_files

    workload = {"kind": "generate", "prompt_file": PromptFile(path=str(prompts))}
    with pytest.raises(UserError, match="4,097 tokens, over model llama-2-7b"):
        check_traffic_files(RunConfig(backend="fake", model="llama-2-7b", workload=workload))
    prompts.write_text('{"text": "hello", "output_tokens": 4000}\n')  # fits: planned
    assert CliRunner().invoke(app, ["bench-plan", "--quick", *flags]).exit_code == 0


# ---------------------------------------------------------------- tree


def test_tree_asks_about_shared_prefixes() -> None:
    tree = load_tree()
    stage = rag_stage()
    decision = evaluate(tree, stage, estimate_stage(stage))
    step = next(s for s in decision.path if s.node == "shared_prefixes")
    assert step.answer == "yes" and "shared_prefix" in step.why
    plain = profile_from_dict(BASE).primary
    plain_step = next(s for s in evaluate(tree, plain).path if s.node == "shared_prefixes")
    assert plain_step.answer == "no"


def test_shared_prefixes_put_prefix_caching_engines_first(tmp_path: Path) -> None:
    """The real tree with one leaf's order changed (torch_compile first): the shared-prefix
    answer moves the prefix-caching engines ahead of it, keeping their own order."""
    data = yaml.safe_load(DEFAULT_TREE_PATH.read_text())
    leaf = data["leaves"]["vllm_default"]
    leaf["candidates"] = leaf["candidates"][::-1]  # torch_compile, sglang, tensorrt_llm, vllm
    path = tmp_path / "tree.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    tree = load_tree(path)
    shared = rag_stage()
    plain = profile_from_dict(BASE).primary
    assert [c.framework for c in evaluate(tree, plain).candidates] == [
        "torch_compile",
        "sglang",
        "tensorrt_llm",
        "vllm",
    ]
    ranked = evaluate(tree, shared).candidates
    assert [c.framework for c in ranked] == ["sglang", "tensorrt_llm", "vllm", "torch_compile"]
    assert [c.rank for c in ranked] == [1, 2, 3, 4]


def test_promote_on_yes_names_known_frameworks(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT_TREE_PATH.read_text())
    data["questions"]["shared_prefixes"]["promote_on_yes"] = ["lmdeploy"]
    path = tmp_path / "tree.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(UserError, match="unknown framework 'lmdeploy' in promote_on_yes"):
        load_tree(path)


# ---------------------------------------------------------------- diagnostics


def _fake_run(tmp_path: Path, prefix_tokens: int, **engine_args):
    """A real launch of the fake backend on a shared-prefix workload (its summary, with the
    prefix share, comes from the real metrics code)."""
    from bench.run.api import launch

    resolve_model("tiny-llama", dtype="float32")
    config = RunConfig(
        backend="fake",
        model="tiny-llama",
        precision={"dtype": "float32"},
        engine_args={"ttft_s": 0.002, "itl_s": 0.001, **engine_args},
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16),
            output_tokens=LengthDistribution(mean=4),
            prefix=PrefixPool(count=2, tokens=LengthDistribution(mean=prefix_tokens)),
        ),
        load=ConcurrencyLoad(concurrency=2, max_requests=12, warmup_requests=1),
        validity={"min_duration_s": 0.01, "min_requests": 5},
    )
    return launch(config, out_dir=tmp_path / "out")


def _with_hit_rate(run, hits: float, queries: float):
    """The fake backend reports no prefix cache: the hit rate goes through the real counter
    arithmetic (bench.core.metrics.prefix_cache_hit_rate) from two scrape-like samples whose
    counts are chosen by this test (a test double, not a measurement)."""
    from bench.core.metrics import PREFIX_CACHE_HITS, PREFIX_CACHE_QUERIES, prefix_cache_hit_rate

    samples = [
        PrometheusSample(t_ns=0, values={PREFIX_CACHE_QUERIES: 0.0, PREFIX_CACHE_HITS: 0.0}),
        PrometheusSample(t_ns=1, values={PREFIX_CACHE_QUERIES: queries, PREFIX_CACHE_HITS: hits}),
    ]
    rate, counted = prefix_cache_hit_rate(samples)
    run.summary.prefix_cache_hit_rate = rate
    run.summary.prefix_cache_queries = counted
    return run


@pytest.mark.parametrize(
    ("blocks", "cause"),
    [(0.5, "shorter than a KV block"), (1.25, "not block-aligned"), (2, "eviction under memory")],
)
def test_low_hit_rate_on_shared_prefixes_is_flagged(tmp_path, blocks, cause) -> None:
    # the fake backend has no block size: the rule uses vLLM's default for the device it ran on
    # (no GPU here: the CPU build's 128 tokens)
    probe = _fake_run(tmp_path / "probe", 16)
    block = VLLM_BLOCK_TOKENS["cpu" if ran_on_cpu(probe) else "gpu"]
    prefix_tokens = int(block * blocks)
    run = _fake_run(tmp_path, prefix_tokens)
    assert run.summary is not None and run.summary.prefix_cache_hit_rate is None
    assert run.summary.prefix_share_of_input_tokens == pytest.approx(
        prefix_tokens / (prefix_tokens + 16)
    )
    assert [d for d in diagnose(run) if d.rule == "low_prefix_cache_hit_rate"] == []
    low = diagnose(_with_hit_rate(run, hits=50, queries=1000))
    finding = next(d for d in low if d.rule == "low_prefix_cache_hit_rate")
    assert finding.severity == "warning"
    assert "5.0%" in finding.finding and cause in finding.finding
    assert "caching off" in finding.finding and "eviction" in finding.finding
    high = diagnose(_with_hit_rate(run, hits=900, queries=1000))
    assert [d for d in high if d.rule == "low_prefix_cache_hit_rate"] == []


def test_caching_off_run_is_an_expected_low_hit_rate(tmp_path) -> None:
    run = _fake_run(tmp_path, 32)
    # the fake backend has no caching switch: the off half of a pair is the vLLM config's setting
    run.config = run.config.model_copy(update={"prefix_caching": False})
    finding = next(
        d
        for d in diagnose(_with_hit_rate(run, hits=0, queries=1000))
        if d.rule == "low_prefix_cache_hit_rate"
    )
    assert finding.severity == "info" and "prefix caching is off" in finding.finding


def test_unrelated_prompts_get_no_hit_rate_finding(tmp_path) -> None:
    run = _fake_run(tmp_path, 32)
    run.config = run.config.model_copy(
        update={"workload": run.config.workload.model_copy(update={"prefix": None})}
    )
    assert not [
        d for d in diagnose(_with_hit_rate(run, 0, 1000)) if d.rule == "low_prefix_cache_hit_rate"
    ]


def test_conversation_without_measured_share_uses_the_floor(tmp_path) -> None:
    run = _fake_run(tmp_path, 32)
    workload = run.config.workload.model_copy(
        update={"prefix": None, "conversation": ConversationSpec(turns=LengthDistribution(mean=3))}
    )
    run.config = run.config.model_copy(update={"workload": workload})
    run.summary.prefix_share_of_input_tokens = None
    flagged = diagnose(_with_hit_rate(run, 20, 1000))
    finding = next(d for d in flagged if d.rule == "low_prefix_cache_hit_rate")
    assert "multi-turn" in finding.finding and "history" in finding.finding


# ---------------------------------------------------------------- report


def test_rag_report_benchmark_configuration_sends_the_traffic(tmp_path: Path) -> None:
    """`advisor report --format json` for the RAG example: the stage's benchmark configuration
    (the command it gives to reproduce) is the profile's traffic, not 128/128."""
    import json

    from bench.storage.store import ResultStore

    ResultStore(tmp_path / "empty.sqlite").close()
    result = CliRunner().invoke(
        app,
        [
            "report",
            "--profile",
            str(RAG),
            "--store",
            str(tmp_path / "empty.sqlite"),
            "--format",
            "json",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "out" / f"{RAG.stem}.json").read_text())
    workload = data["stages"][0]["configuration"]["workload"]
    assert workload["prefix"]["count"] == 8 and workload["prefix"]["tokens"]["mean"] == 1024
    assert workload["prompt_tokens"]["mean"] == 128
    assert workload["conversation"]["turns"]["mean"] == 4
