"""`python -m advisor`: exit codes, one-line errors, JSON keys, flags, the plan, the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from advisor.cli import app
from bench.storage.store import ResultStore
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR
from tests.advisor.synthetic import synthetic_run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "profiles"


@pytest.fixture(autouse=True)
def no_default_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never read the user's own results store in tests."""
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "absent.sqlite"))


def advisor(*args: str, env_store: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ADVISOR_STORE": str(env_store)}
    return subprocess.run(
        [sys.executable, "-m", "advisor", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_help_is_fast_and_imports_no_heavy_framework() -> None:
    code = (
        "import sys, advisor.cli, advisor.__main__;"
        "heavy = [m for m in ('torch', 'sklearn', 'vllm', 'transformers', 'streamlit') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_recommend_json_subprocess(tmp_path: Path) -> None:
    result = advisor(
        "recommend",
        "--profile",
        str(EXAMPLES / "chatbot_long_generation.yaml"),
        "--json",
        env_store=tmp_path / "absent.sqlite",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    stage = data["stages"][0]
    for key in ("recommendation", "decision", "evidence", "estimate", "diagnostics"):
        assert key in stage
    assert stage["recommendation"]["framework"] == "vllm"
    assert stage["recommendation"]["benchmarked"] is True
    assert all(set(step) >= {"question", "answer", "why"} for step in stage["decision"]["path"])
    assert stage["estimate"]["fits"] is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["recommend", "--profile", "no/such/file.yaml"], "does not exist"),
        (["recommend", "--gpu", "H300", "--model", "llama-2-7b"], "'H300' is not a known GPU"),
        (["recommend", "--dynamic-control-flow", "maybe"], "is not yes or no"),
        (["recommend"], "give a workload"),
        (["bench-plan", "--long-sequence-generation", "yes"], "has no model"),
    ],
)
def test_user_errors_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = advisor(*args, env_store=tmp_path / "absent.sqlite")
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]
    assert "Traceback" not in result.stderr


def test_bad_profile_field_exit_2(tmp_path: Path) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text("title: x\nstages:\n  - {name: a, dynamic_control_flow: perhaps}\n")
    result = invoke("recommend", "--profile", str(profile))
    assert result.exit_code == 2
    assert "stages[0].dynamic_control_flow" in result.output
    profile.write_text("title: x\nmodle: llama-2-7b\n")
    result = invoke("recommend", "--profile", str(profile))
    assert result.exit_code == 2 and "modle: unknown field" in result.output


def test_flags_build_the_profile() -> None:
    result = invoke(
        "recommend",
        "--dynamic-control-flow",
        "no",
        "--fixed-input-shapes",
        "no",
        "--long-sequence-generation",
        "yes",
        "--multi-backend",
        "no",
        "--kind",
        "generate",
        "--model",
        "llama-2-13b",
        "--gpu",
        "H200",
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    stage = data["stages"][0]
    assert stage["recommendation"]["framework"] == "vllm"
    answers = [s["answer"] for s in stage["decision"]["path"][:6]]
    # window, prefixes, control flow, hardware, shapes, long generation
    assert answers == ["no", "no", "no", "no", "no", "yes"]
    assert stage["estimate"]["gpu"] == "H200"


def test_flags_override_a_profile() -> None:
    result = invoke(
        "recommend",
        "--profile",
        str(EXAMPLES / "chatbot_long_generation.yaml"),
        "--dynamic-control-flow",
        "yes",
        "--json",
    )
    data = json.loads(result.output)
    assert data["stages"][0]["recommendation"]["framework"] == "pytorch"


def test_jax_is_flagged_in_json() -> None:
    data = json.loads(invoke("recommend", "--dynamic-control-flow", "yes", "--json").output)
    candidates = data["stages"][0]["decision"]["candidates"]
    jax = next(c for c in candidates if c["framework"] == "jax")
    assert jax["benchmarked"] is False


def test_multi_stage_json_and_stage_flag() -> None:
    profile = str(EXAMPLES / "ecommerce_two_stage.yaml")
    data = json.loads(invoke("recommend", "--profile", profile, "--json").output)
    assert [s["recommendation"]["framework"] for s in data["stages"]] == ["tensorrt", "vllm"]
    result = invoke("recommend", "--profile", profile, "--model", "llama-2-13b")
    assert result.exit_code == 2 and "--stage" in result.output
    data = json.loads(
        invoke(
            "recommend",
            "--profile",
            profile,
            "--stage",
            "generation",
            "--dynamic-control-flow",
            "yes",
            "--json",
        ).output
    )
    # the generation stage has TTFT/TPOT SLOs and tolerates builds: torch.compile first
    assert data["stages"][1]["decision"]["leaf"] == "torch_compile_first"
    assert data["stages"][1]["recommendation"]["framework"] == "torch_compile"
    assert data["stages"][0]["recommendation"]["framework"] == "tensorrt"  # untouched


def test_text_output_shows_path_estimate_and_evidence() -> None:
    result = invoke(
        "recommend",
        "--long-sequence-generation",
        "yes",
        "--model",
        "llama-2-13b",
        "--gpu",
        "A100-80GB-PCIE",
    )
    assert result.exit_code == 0
    for text in (
        "Recommendation: vllm",
        "Decision path:",
        "Estimate:",
        "[the article, A100-80GB-PCIE]",  # provenance in words, never "measured-here"
        "Physical floor",
    ):
        assert text in result.output
    assert "measured-here" not in result.output


def test_store_option(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    store = ResultStore(path)
    for run in (
        synthetic_run("tensorrt_llm", throughput_tok_s=800),
        synthetic_run("vllm", throughput_tok_s=1600),
    ):
        store.create_run(run)
        store.update_run(run)
    store.close()
    result = invoke(
        "recommend",
        "--fixed-input-shapes",
        "yes",
        "--build-time-tolerance",
        "hours",
        "--model",
        "llama-2-7b",
        "--gpu",
        "H200",
        "--prompt-tokens",
        "512",
        "--output-tokens",
        "256",
        "--concurrency",
        "8",
        "--store",
        str(path),
        "--json",
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    stage = data["stages"][0]
    assert stage["decision"]["candidates"][0]["framework"] == "tensorrt_llm"
    assert stage["recommendation"]["framework"] == "vllm"
    assert stage["recommendation"]["follows"] == "measurements"
    missing = invoke("recommend", "--model", "llama-2-7b", "--store", str(tmp_path / "nope.db"))
    assert missing.exit_code == 2 and "no store at" in missing.output


def test_bench_plan_json_and_text() -> None:
    profile = str(EXAMPLES / "chatbot_long_generation.yaml")
    data = json.loads(invoke("bench-plan", "--profile", profile, "--quick", "--json").output)
    assert data["quick"] is True
    stage = data["stages"][0]
    # SGLang (the tree's third candidate) is measured through the openai backend's launcher
    assert [c["backend"] for c in stage["configs"]] == ["vllm", "tensorrt_llm", "openai", "pytorch"]
    assert stage["configs"][2]["engine_args"] == {"launch": "sglang"}
    assert all(c["load"]["duration_s"] <= 30 for c in stage["configs"])
    assert all(cmd.startswith("python -m bench run --backend") for cmd in stage["commands"])
    text = invoke("bench-plan", "--profile", profile).output
    assert "# stage main: candidates vllm, tensorrt_llm, sglang, pytorch" in text
    # one run per candidate, then the configuration search's layouts of the first one
    assert text.count("--backend vllm") > 1 and text.count("python -m bench run") > 3
    assert "configuration vllm" in text


def test_recommend_prints_each_diagnostic_advice_once_with_its_runs(tmp_path: Path) -> None:
    """The shipped H200 runs trip the same rules on many runs: the advice paragraph appears once
    per rule with the run count, and every diagnosed run id is still listed."""
    from advisor.decide.diagnose import diagnose
    from advisor.sizing.measured import measured_reference_runs

    result = advisor(
        "recommend",
        "--profile",
        str(EXAMPLES / "chat_7b_h200.yaml"),
        env_store=tmp_path / "absent.sqlite",
    )
    assert result.returncode == 0, result.stderr
    headers = [line for line in result.stdout.splitlines() if line.startswith("Diagnostic [")]
    # one header per rule and advice (a CPU run's advice for a rule speaks of the CPU, so a
    # rule may head two paragraphs), each advice printed once
    keys = [(line.split("] ", 1)[1].split(",", 1)[0], line.rsplit(": ", 1)[-1]) for line in headers]
    assert len(keys) == len(set(keys)) > 0
    shipped = measured_reference_runs(SHIPPED_REFERENCE_DIR)
    runs = [run for group in shipped.values() for run in group]
    diagnosed = [d for run in runs for d in diagnose(run)]
    for header in headers:
        count = int(header.split(", ", 1)[1].split(" run", 1)[0])
        rule = header.split("] ", 1)[1].split(",", 1)[0]
        advice = next(d.advice for d in diagnosed if d.rule == rule and header.endswith(d.advice))
        assert result.stdout.count(advice) == 1
        assert count >= 1
    many = max(headers, key=lambda h: int(h.split(", ", 1)[1].split(" run", 1)[0]))
    assert int(many.split(", ", 1)[1].split(" run", 1)[0]) > 1  # grouping actually happened


def test_group_identical_merges_same_findings_and_keeps_every_run_id() -> None:
    from advisor.decide.diagnose import diagnose, group_identical
    from advisor.sizing.measured import measured_reference_runs

    runs = [
        run for group in measured_reference_runs(SHIPPED_REFERENCE_DIR).values() for run in group
    ]
    diagnostics = [d for run in runs for d in diagnose(run)]
    groups = group_identical(diagnostics)
    assert len(groups) < len(diagnostics)
    assert sorted(i for g in groups for i in g.run_ids) == sorted(
        {(d.rule, d.advice, d.run_id): d.run_id for d in diagnostics}.values()
    )
    for group in groups:
        findings = [f.finding for f in group.findings]
        assert len(findings) == len(set(findings))
        for finding in group.findings:
            for run_id in finding.run_ids:
                assert any(
                    d.run_id == run_id and d.finding == finding.finding and d.rule == group.rule
                    for d in diagnostics
                )


def assert_one_line_exit_2(result, needle: str) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in result.output and result.stdout == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["recommend", "--bogus"], "No such option: --bogus"),
        (["nosuchcmd"], "No such command 'nosuchcmd'"),
        (["recommend", "--concurrency", "many"], "--concurrency"),
        (["report", "--profile", "x.yaml"], "Missing option '--out'"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args: list[str], needle: str) -> None:
    assert_one_line_exit_2(invoke(*args), needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["recommend", "--model", "llama-2-7b", "--request-rate-rps", "inf"], "finite number"),
        (["recommend", "--gpu", "H200", "--gpu-memory-gb", "inf"], "finite number"),
        (["recommend", "--model", "llama-2-7b", "--parameters-b", "1e300"], "less than or equal"),
        (["recommend", "--model", "llama-2-7b", "--ttft-ms", "nan"], "finite number"),
        (["recommend", "--model", "m" * 100_000], "at most 4096 characters"),
        (["recommend", "--model", "llama-2-7b", "--reference-dir", "/no/such/ref"], "not a folder"),
        (["recommend", "--profile", "/proc/self/mem"], "cannot read profile /proc/self/mem"),
    ],
    ids=lambda value: None,
)
def test_non_finite_huge_and_missing_input_is_one_line(args: list[str], needle: str) -> None:
    assert_one_line_exit_2(invoke(*args), needle)


def test_non_finite_number_in_a_profile_file(tmp_path: Path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("model: llama-2-7b\nrequest_rate_rps: .nan\ngpu: {type: H200}\n")
    assert_one_line_exit_2(invoke("recommend", "--profile", str(profile)), "finite number")


def test_validation_names_flags_and_lists_every_problem(tmp_path: Path) -> None:
    result = invoke("recommend", "--model", "llama-2-7b", "--concurrency", "0",
                    "--request-rate-rps", "inf")  # fmt: skip
    assert_one_line_exit_2(
        result,
        "flags: 2 problems: (1) --concurrency: Input should be greater than 0 (2) "
        "--request-rate-rps: Input should be a finite number",
    )
    profile = tmp_path / "p.yaml"
    profile.write_text("title: x\ncolour: red\nstages:\n  - {name: a, concurrency: 0, tpye: 1}\n")
    result = invoke("recommend", "--profile", str(profile))
    assert_one_line_exit_2(result, "3 problems:")
    for problem in (
        "stages[0].concurrency: Input should be greater than 0",
        "stages[0].tpye: unknown field; allowed: name,",
        "colour: unknown field; allowed: title, owner, notes, stages,",
    ):
        assert problem in result.stderr, (problem, result.stderr)
