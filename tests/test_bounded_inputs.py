"""A number or size nobody bounded: every probe of the bounded-inputs list is one line on stderr
and exit code 2 (a full disk under an output path included: one line naming the file).

The inputs are the shipped ones (examples/profiles, data/reference runs) with one value made
absurd; the limits come from bench/core/limits.py, and docs/limits.md must hold its table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.test_bad_input_files import PROFILE, REFERENCE_RUNS, ROOT, advisor, bench

EXAMPLE_TRACE = ROOT / "examples" / "traces" / "mooncake_small.jsonl"


def one_line(code: int, stderr: str, needle: str, expected_code: int = 2) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == expected_code, (code, stderr)
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    assert needle in lines[0], stderr


@pytest.fixture(autouse=True)
def _no_user_store(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "absent.sqlite"))


# ----------------------------------------------------------------- values Python cannot build


@pytest.mark.parametrize(
    ("value", "needle"),
    [("9" * 5000, "4300 digits"), ("2026-13-45", "month must be in 1..12")],
    ids=["5000-digit-integer", "impossible-date"],
)
def test_yaml_value_python_cannot_build_is_one_line(tmp_path: Path, value: str, needle: str):
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE.read_text() + f"notes: {value}\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"backend: fake\nmodel: tiny-llama\nlabel: {value}\n")
    plan = tmp_path / "plan.yaml"
    plan.write_text(f"name: p\ndescription: {value}\nsteps: []\n")
    for code, stderr in (
        advisor("recommend", "--profile", str(profile)),
        bench("run", "--config", str(config), "--no-store"),
        bench("campaign", str(plan), "--out", str(tmp_path / "out")),
    ):
        one_line(code, stderr, needle)
        assert "a value cannot be read" in stderr and "set_int_max_str_digits" not in stderr


# ----------------------------------------------------------------- nonsense in a profile


def _profile_with(tmp_path: Path, extra: str) -> str:
    path = tmp_path / "profile.yaml"
    path.write_text(PROFILE.read_text() + extra)
    return str(path)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("gpu: {type: H200, price_per_hour: 1e300}\n", "gpu.price_per_hour"),
        ("peak_request_rate_rps: 1e300\n", "peak_request_rate_rps"),
        ("gpu: {type: H200, memory_bandwidth_tb_s: 1e-300}\n", "gpu.memory_bandwidth_tb_s"),
        ("gpu: {type: H200, memory_bandwidth_tb_s: 1e300}\n", "gpu.memory_bandwidth_tb_s"),
        ("precision: {dtype: float16, quantization: int3}\n", "awq, gptq, int4, fp8"),
    ],
    ids=["price", "peak-rate", "tiny-bandwidth", "huge-bandwidth", "int3"],
)
def test_implausible_profile_value_is_refused(tmp_path: Path, extra: str, needle: str) -> None:
    one_line(*advisor("recommend", "--profile", _profile_with(tmp_path, extra)), needle)


def test_a_plausible_price_and_bandwidth_still_pass(tmp_path: Path) -> None:
    extra = "gpu: {type: H200, price_per_hour: 12.5, memory_bandwidth_tb_s: 4.2}\n"
    code, stderr = advisor("recommend", "--profile", _profile_with(tmp_path, extra), "--json")
    assert code == 0, stderr


def test_duplicate_stage_names_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text("stages:\n  - {name: llm, model: llama-2-7b}\n  - {name: llm}\n")
    one_line(*advisor("recommend", "--profile", str(path)), "two stages are named 'llm'")


def test_ten_thousand_stages_are_refused_quickly(tmp_path: Path) -> None:
    """At ~40 ms a stage, 10,000 stages kept `advisor recommend` busy for minutes."""
    import time

    from bench.core.limits import MAX_STAGES

    path = tmp_path / "many.yaml"
    stages = [{"name": f"s{i}", "model": "llama-2-7b"} for i in range(10_000)]
    path.write_text(yaml.safe_dump({"stages": stages}))
    started = time.monotonic()
    one_line(*advisor("recommend", "--profile", str(path)), f"at most {MAX_STAGES} items")
    assert time.monotonic() - started < 30


# ----------------------------------------------------------------- nonsense in a run config


def _run_config(tmp_path: Path, **sections: dict) -> str:
    config = {"backend": "fake", "model": "tiny-llama", **sections}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


CAPACITY = {"pattern": "capacity"}
REPLAY = {"pattern": "replay", "trace": str(EXAMPLE_TRACE)}


@pytest.mark.parametrize(
    ("sections", "needle"),
    [
        ({"load": {**CAPACITY, "start_rps": 1e300}}, "load.start_rps"),
        ({"load": {**CAPACITY, "probe_requests": 10**12}}, "load.probe_requests"),
        ({"load": {**CAPACITY, "over": "concurrency", "start_concurrency": 10**9}}, "start_conc"),
        ({"load": {**REPLAY, "block_size": 10**9}}, "load.block_size"),
        ({"load": {**REPLAY, "seed": -1}}, "load.seed"),
        ({"workload": {"prefix": {"count": 10**9}}}, "workload.prefix.count"),
        ({"engine_args": {"ttft_s": float("inf")}}, "ttft_s"),
        ({"engine_args": {"itl_s": 1e300}}, "itl_s"),
    ],
    ids=[
        "start-rps",
        "probe-requests",
        "start-concurrency",
        "block-size",
        "replay-seed",
        "prefix-count",
        "fake-ttft-inf",
        "fake-itl",
    ],
)
def test_unbounded_run_config_value_is_refused_up_front(
    tmp_path: Path, sections: dict, needle: str
) -> None:
    one_line(*bench("run", "--config", _run_config(tmp_path, **sections), "--no-store"), needle)


@pytest.mark.parametrize("field", ["input_length", "output_length"])
def test_trace_row_of_a_billion_tokens_is_refused(tmp_path: Path, field: str) -> None:
    rows = [json.loads(line) for line in EXAMPLE_TRACE.read_text().splitlines() if line.strip()]
    rows[1][field] = 10**9
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = _run_config(tmp_path, load={"pattern": "replay", "trace": str(trace)})
    one_line(*bench("run", "--config", config, "--no-store"), "10,000,000-token limit")


def test_prompt_file_output_of_1e12_tokens_is_refused(tmp_path: Path) -> None:
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        '{"text": "hello", "output_tokens": 4}\n{"text": "hi", "output_tokens": 1e12}\n'
    )
    config = _run_config(tmp_path, workload={"prompt_file": {"path": str(prompts)}})
    one_line(*bench("run", "--config", config, "--no-store"), "line 2")


# ----------------------------------------------------------------- bench compare and summarize


def _run_folder(folder: Path, run: dict, schema_version: int | None = None) -> Path:
    folder.mkdir(parents=True)
    if schema_version is not None:
        run = {**run, "schema_version": schema_version}
    (folder / "result.json").write_text(json.dumps(run))
    return folder


@pytest.fixture(scope="module")
def reference_runs() -> list[dict]:
    return json.loads(REFERENCE_RUNS.read_text())["runs"]


def test_compare_options_are_bounded_before_any_store_is_opened(tmp_path: Path) -> None:
    missing = tmp_path / "MISSING" / "x.sqlite"
    for option, value, needle in (
        ("--bootstrap", "1000000000", "--bootstrap 1000000000: from 100 to 100,000"),
        ("--seed", "-1", "--seed -1: from 0 to"),
    ):
        one_line(*bench("compare", "a", "b", option, value, "--store", str(missing)), needle)
    one_line(*bench("compare", "a", "b", "--store", str(missing)), "no store at")
    assert not missing.parent.exists()  # a comparison reads: it created neither folder nor store


def test_compare_refuses_a_result_newer_than_this_tool(tmp_path: Path, reference_runs) -> None:
    from bench import SCHEMA_VERSION

    a = _run_folder(tmp_path / "a", reference_runs[0], schema_version=99)
    b = _run_folder(tmp_path / "b", reference_runs[0])
    one_line(*bench("compare", str(a), str(b)), f"newer than this tool's ({SCHEMA_VERSION})")


def test_a_folder_of_repeats_is_a_group_to_compare(tmp_path: Path, reference_runs) -> None:
    """`bench run --repeats N --out A` writes A/repeat-k/: `bench compare A B` takes A whole."""
    from bench.orchestrate.compare import load_side

    first, second = reference_runs[0], reference_runs[1]
    for k in (1, 2):  # two repeats: distinct runs of one configuration
        _run_folder(tmp_path / "A" / f"repeat-{k}", {**first, "run_id": f"{first['run_id']}{k}"})
        _run_folder(tmp_path / "B" / f"repeat-{k}", {**second, "run_id": f"{second['run_id']}{k}"})
    side = load_side(str(tmp_path / "A"))
    assert side.kind == "group" and len(side.runs) == 2
    code, stderr = bench("compare", str(tmp_path / "A"), str(tmp_path / "B"), "--json")
    assert code == 0, stderr


def test_a_run_listed_twice_in_a_group_is_refused(tmp_path: Path, reference_runs) -> None:
    """A copied run folder is not a second repeat: it would narrow every interval unseen."""
    first, second = reference_runs[0], reference_runs[1]
    for k in (1, 2):
        _run_folder(tmp_path / "A" / f"repeat-{k}", first)
    _run_folder(tmp_path / "B" / "repeat-1", second)
    one_line(
        *bench("compare", str(tmp_path / "A"), str(tmp_path / "B")),
        f"run {first['run_id']} is listed twice ({tmp_path / 'A' / 'repeat-1'} and "
        f"{tmp_path / 'A' / 'repeat-2'})",
    )


def test_summarize_of_an_empty_records_file_is_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "records.jsonl"
    empty.write_text("\n")
    one_line(*bench("summarize", str(empty)), "holds no request records")


# ----------------------------------------------------------------- a disk the machine filled


def test_a_write_failing_without_a_file_name_is_named(tmp_path: Path) -> None:
    """`write()` on a full disk raises ENOSPC with no file name; the writers name their file."""
    import errno

    from bench.core.outputs import naming_path

    with pytest.raises(OSError) as raised, naming_path(tmp_path / "report.md"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert raised.value.filename == str(tmp_path / "report.md")


def test_report_on_a_disk_too_small_is_one_line_naming_the_file(tmp_path: Path) -> None:
    """A real failed write: the report's process may write files of at most 1 kB
    (RLIMIT_FSIZE), so writing the JSON report fails in `write()` as on a full disk."""
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))\n"
        "from advisor.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    out = tmp_path / "report"
    completed = subprocess.run(
        [
            *(sys.executable, "-c", script, "report", "--profile", str(PROFILE)),
            *("--format", "json", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        # No bytecode written: under the 1 kB cap a .pyc would be cut short and break later
        # imports of the checkout.
        env={
            "ADVISOR_STORE": str(tmp_path / "absent.sqlite"),
            "PATH": "/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1",
        },
    )
    one_line(completed.returncode, completed.stderr, f"cannot use {out}/", expected_code=2)
    assert "File too large" in completed.stderr


# ----------------------------------------------------------------- the table of limits


def test_docs_hold_the_limits_table() -> None:
    from bench.core.limits import LIMITS, limits_table

    text = (ROOT / "docs" / "limits.md").read_text()
    assert limits_table() in text, "docs/limits.md: regenerate the table from bench/core/limits.py"
    assert len({limit.name for limit in LIMITS}) == len(LIMITS)
    assert "limits.md" in (ROOT / "docs" / "README.md").read_text()


# ----------------------------------------------------------------- campaigns checked up front


def _plan(tmp_path: Path, second_backend: str) -> Path:
    step = {
        "backend": "fake",
        "model": "tiny-llama",
        "load": {"pattern": "concurrency", "concurrency": 1, "duration_s": 1},
    }
    plan = {
        "name": "two-steps",
        "steps": [
            {"kind": "run", "name": "first", "config": step},
            {"kind": "run", "name": "second", "config": {**step, "backend": second_backend}},
        ],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def test_campaign_checks_every_step_before_the_first_runs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stderr = bench("campaign", str(_plan(tmp_path, "vlm")), "--out", str(out))
    one_line(code, stderr, "step 'second': unknown backend 'vlm'; available: fake")
    assert not out.exists()  # step 'first' did not run


def test_campaign_checks_its_store_before_the_first_step(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("x")
    out = tmp_path / "out"
    code, stderr = bench(
        "campaign",
        str(_plan(tmp_path, "fake")),
        "--out",
        str(out),
        "--store",
        str(not_a_folder / "results.sqlite"),
    )
    one_line(code, stderr, f"results store {not_a_folder / 'results.sqlite'}")
    assert not (out / "steps").exists()


# ----------------------------------------------------------------- a run that ran out of memory


def test_a_run_out_of_memory_is_failed_with_that_cause(tmp_path: Path) -> None:
    """Real memory exhaustion: the worker (the fake backend, a labelled test double) keeps 16 MB
    alive per request under a 1.5 GB address-space cap, so a request meets MemoryError after
    some tens of requests. The run was COMPLETED (INVALID), exit 0 when those errors were not
    in a row; it is FAILED with the cause on the console, exit 1."""
    import resource

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))

    completed = subprocess.run(
        [
            *(sys.executable, "-m", "bench", "run", "--backend", "fake", "--model", "tiny-llama"),
            *("--engine-arg", "leak_bytes_per_request=16777216", "--engine-arg", "ttft_s=0.001"),
            *("--concurrency", "4", "--duration-s", "20", "--warmup-requests", "0"),
            *("--no-store", "--out", str(tmp_path / "run")),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        preexec_fn=cap_memory,
        env={
            "PATH": "/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
        },
    )
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert "FAILED" in completed.stdout and "COMPLETED" not in completed.stdout
    assert "failure: out of memory while serving request" in completed.stdout
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["status"] == "FAILED" and "MemoryError" in result["failure"]["cause"]


# ----------------------------------------------------------------- the memory estimate


def test_counts_within_their_bounds_that_multiply_past_memory_are_refused(tmp_path: Path):
    """100,000 prefixes and 10,000,000 tokens are each allowed; together they are 10**12 token
    IDs: refused before the run with the estimate and the memory available."""
    workload = {"prefix": {"count": 100_000, "tokens": {"mean": 10_000_000}}}
    config = _run_config(tmp_path, workload=workload)
    one_line(
        *bench("run", "--config", config, "--no-store"),
        "the load generator would hold about 40,000.4 GB (100,000 prefixes of 10,000,000 tokens",
    )


def test_memory_estimate_of_the_shipped_plans_fits_a_small_machine() -> None:
    """Every run step of the shipped campaign plans passes the check on a machine with 1 GB
    available; one step made 1,000 times longer is refused on it, naming the figures."""
    from bench.core.errors import UserError
    from bench.orchestrate.campaign import RunStep, load_plan
    from bench.run.memory_budget import check_memory_fits

    steps = [
        step
        for path in sorted((ROOT / "examples" / "campaigns").glob("*.yaml"))
        for step in load_plan(path).steps
        if isinstance(step, RunStep)
    ]
    assert len(steps) > 10
    for step in steps:
        check_memory_fits(step.config, available=10**9)
    data = steps[0].config.model_dump(mode="json")
    data["workload"]["prompt_tokens"] = {"mean": 1_000_000}
    data["load"] = {"pattern": "concurrency", "concurrency": 64}
    huge = type(steps[0].config).model_validate(data)
    with pytest.raises(UserError, match=r"about 2\.6 GB \(64 prompts of 1,000,000 tokens"):
        check_memory_fits(huge, available=10**9)


def test_campaign_refuses_a_step_that_would_not_fit_in_memory(tmp_path: Path) -> None:
    plan = yaml.safe_load(_plan(tmp_path, "fake").read_text())
    plan["steps"][1]["config"]["workload"] = {
        "kind": "generate",
        "prefix": {"count": 100_000, "tokens": {"mean": 10_000_000}},
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    out = tmp_path / "out"
    code, stderr = bench("campaign", str(path), "--out", str(out))
    one_line(code, stderr, "step 'second': the load generator would hold about 40,000")
    assert not out.exists()


# ----------------------------------------------------------------- the model's context window


def test_trace_row_over_the_models_context_is_refused_naming_it(tmp_path: Path) -> None:
    """tiny-llama takes 4,096 positions: a row of 4,000 + 200 tokens, far under MAX_TOKENS, is
    refused before the run (it failed at the engine, request by request); clipped with
    max_input_tokens it fits."""
    rows = [json.loads(line) for line in EXAMPLE_TRACE.read_text().splitlines() if line.strip()]
    rows[1].update(input_length=4000, output_length=200)
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = _run_config(tmp_path, load={"pattern": "replay", "trace": str(trace)})
    one_line(
        *bench("run", "--config", config, "--no-store"),
        f"trace {trace} row 2: input_length + output_length = 4,000 + 200 = 4,200 tokens, over "
        "model tiny-llama's context of 4,096 tokens (max_position_embeddings); clip the rows",
    )

    from bench.core.config import ReplayLoad, RunConfig
    from bench.run.api import check_traffic_files

    load = ReplayLoad(trace=str(trace), max_input_tokens=3800)
    check_traffic_files(RunConfig(backend="fake", model="tiny-llama", load=load))


def test_length_distribution_over_the_models_context_is_refused(tmp_path: Path) -> None:
    """A distribution is checked at its longest draw: uniform 3,000 +- 1,000 clipped at 3,900
    plus 128 output tokens fits tiny-llama's 4,096; clipped at 4,000 it does not."""
    from bench.core.config import RunConfig
    from bench.core.errors import UserError
    from bench.run.context_check import check_context

    workload = {
        "kind": "generate",
        "prompt_tokens": {"kind": "uniform", "mean": 3000, "spread": 1000, "max": 3900},
    }
    check_context(RunConfig(backend="fake", model="tiny-llama", workload=workload))
    workload["prompt_tokens"]["max"] = 4000
    one_line(
        *bench("run", "--config", _run_config(tmp_path, workload=workload), "--no-store"),
        "workload.prompt_tokens + workload.output_tokens at their longest = 4,000 + 128 = "
        "4,128 tokens, over model tiny-llama's context of 4,096 tokens (max_position_embeddings)",
    )
    # A conversation's last turn resends the history: 4 turns of 512 + 256 + 512 tokens.
    talk = {
        "kind": "generate",
        "prompt_tokens": {"mean": 512},
        "output_tokens": {"mean": 512},
        "conversation": {"turns": {"mean": 4}, "user_tokens": {"mean": 256}},
    }
    data = {"backend": "fake", "model": "tiny-llama", "workload": talk}
    with pytest.raises(UserError, match=r"= 512 \+ 3 x 512 \+ 3 x 256 \+ 512 = 3,328 tokens"):
        check_context(RunConfig.model_validate({**data, "model": "tiny-llama-trained"}))
    check_context(RunConfig.model_validate(data))  # 3,328 fit 4,096


def test_prompt_file_output_over_the_models_context_is_refused(tmp_path: Path) -> None:
    from bench.core.config import RunConfig
    from bench.core.errors import UserError
    from bench.run.api import check_traffic_files

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        '{"text": "hello", "output_tokens": 4}\n{"text": "hi", "output_tokens": 4096}\n'
    )
    workload = {"kind": "generate", "prompt_file": {"path": str(prompts)}}
    config = RunConfig(backend="fake", model="tiny-llama", workload=workload)
    with pytest.raises(
        UserError,
        match=rf"^prompt file {prompts} prompt 2: its prompt \+ "
        r"output_tokens = 1 \+ 4,096 = 4,097 tokens, over model tiny-llama's",
    ):
        check_traffic_files(config)


def test_forward_sequence_length_over_an_encoders_positions_is_refused() -> None:
    from bench.core.config import RunConfig
    from bench.core.errors import UserError
    from bench.run.context_check import check_context

    workload = {"kind": "forward", "sequence_length": {"mean": 512}}
    check_context(RunConfig(backend="onnxruntime", model="bert-base", workload=workload))
    workload["sequence_length"] = {"mean": 600}
    with pytest.raises(UserError, match=r"^workload.sequence_length at its longest = 600 tokens, "):
        check_context(RunConfig(backend="onnxruntime", model="bert-base", workload=workload))


def test_a_local_checkpoints_window_follows_the_engines_rope_rule(tmp_path: Path) -> None:
    """A config.json with yarn x4 over 32,768 original positions: vLLM takes 131,072 tokens,
    the transformers engines the position table (32,768)."""
    from bench.core.errors import UserError
    from bench.engines.models import model_context

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "max_position_embeddings": 32768,
                "rope_scaling": {
                    "rope_type": "yarn",
                    "factor": 4.0,
                    "original_max_position_embeddings": 32768,
                },
            }
        )
    )
    context = model_context(str(folder))
    assert context is not None
    assert (context.tokens_for("vllm"), context.tokens_for("pytorch")) == (131_072, 32_768)
    assert model_context("tiny-vit") is None and model_context("served-name") is None

    from bench.core.context_window import Term, check_fits

    terms = [Term(field="a", tokens=100_000)]
    check_fits("", terms, context, "vllm", "")
    with pytest.raises(UserError, match=r"context of 32,768 tokens \(max_position_embeddings\)"):
        check_fits("", terms, context, "pytorch", "")


def test_longest_tokens_is_the_advisors_upper_tokens() -> None:
    """The bench refuses a run on the rule the advisor clips its plans to: a planned run passes."""
    from advisor.workload.architectures import upper_tokens
    from bench.core.config import LengthDistribution
    from bench.core.context_window import longest_tokens

    for kind in ("fixed", "uniform", "normal", "lognormal"):
        for spread, clip in ((0, None), (300, None), (300, 2000)):
            dist = LengthDistribution(kind=kind, mean=1000, spread=spread, max=clip)
            assert longest_tokens(dist) == upper_tokens(dist), dist


def test_quality_window_over_the_models_context_is_refused() -> None:
    from bench.core.errors import UserError
    from bench.run.quality import check_window_fits

    check_window_fits("tiny-llama-trained", 1023)
    with pytest.raises(UserError, match=r"--window \+ its BOS token = 1,024 \+ 1 = 1,025 tokens, "):
        check_window_fits("tiny-llama-trained", 1024)


class _CharTokenizer:
    """TEST DOUBLE: one token per character, BOS id 1 (item_tokens only counts tokens)."""

    bos_token_id = 1

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(character) for character in text]}


def test_labelled_item_over_the_models_context_names_its_lengths() -> None:
    from bench.core.errors import UserError
    from bench.core.quality import LabelledItem
    from bench.run.quality import item_tokens

    items = [LabelledItem(prompt="x" * 9, answer="yy"), LabelledItem(prompt="x" * 10, answer="yy")]
    with pytest.raises(UserError) as raised:
        item_tokens(_CharTokenizer(), items, max_len=12)
    assert str(raised.value) == (
        "labelled item 2: prompt + longest answer = 11 + 2 = 13 tokens, over the model's "
        "context of 12 tokens (max_position_embeddings); shorten it (docs/limits.md)"
    )


@pytest.mark.parametrize(
    "rope",
    [
        None,
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192},
        {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
        {"type": "dynamic", "factor": 2.0},
    ],
    ids=["none", "linear", "yarn", "llama3", "dynamic"],
)
def test_the_bench_and_the_advisor_read_one_window(tmp_path: Path, rope: dict | None) -> None:
    """A checkpoint's window per engine is the same for the advisor's profile check
    (advisor/workload/architectures.py) and the bench's run check."""
    from advisor.workload.architectures import architecture_for, context_limits
    from bench.engines.models import model_context

    config = {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 128,
        "vocab_size": 1000,
        "max_position_embeddings": 16384,
        "rope_scaling": rope,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    architecture, _ = architecture_for(str(tmp_path))
    assert architecture is not None
    _, per_engine, _ = context_limits(architecture)
    context = model_context(str(tmp_path))
    assert context is not None
    assert per_engine == {engine: context.tokens_for(engine) for engine in per_engine}


# ----------------------------------------------------------------- out-of-range wording


@pytest.mark.parametrize(
    ("sections", "line"),
    [
        (
            {"load": {**CAPACITY, "start_rps": 1e300}},
            "load.start_rps: 1e+300 is over the limit of 1,000,000 requests/s "
            "(MAX_RATE_RPS in docs/limits.md)",
        ),
        (
            {"workload": {"prompt_tokens": {"mean": 10**9}}},
            "workload.prompt_tokens.mean: 1,000,000,000 is over the limit of 10,000,000 tokens "
            "(MAX_TOKENS in docs/limits.md)",
        ),
        (
            {"workload": {"seed": -1}},
            "workload.seed: -1 is under the minimum of 0 (MAX_SEED in docs/limits.md)",
        ),
    ],
    ids=["rate", "tokens", "seed"],
)
def test_out_of_range_names_the_field_the_limit_its_unit_and_the_docs(
    tmp_path: Path, sections: dict, line: str
) -> None:
    one_line(*bench("run", "--config", _run_config(tmp_path, **sections), "--no-store"), line)


def test_a_bound_outside_the_table_keeps_pydantics_words() -> None:
    """Only a field the table bounds, at its figure, gets its unit: the telemetry interval's
    3,600 s bound is not MAX_ENGINE_DELAY_S's, and `turns` are not tokens."""
    from bench.core.limits import out_of_range

    assert out_of_range(["telemetry_interval_s"], "less_than_equal", 3600, 5000) is None
    assert out_of_range(["conversation", "turns", "mean"], "less_than_equal", 10**7, 10**8) is None
    assert "MAX_TOKENS" in (
        out_of_range(["conversation", "user_tokens", "mean"], "less_than_equal", 10**7, 10**8) or ""
    )
    assert out_of_range(["price_per_hour"], "less_than_equal", 1000, "1e300") == (
        "1e+300 is over the limit of 1,000 USD per GPU-hour (MAX_PRICE_PER_GPU_HOUR in "
        "docs/limits.md)"
    )


def test_a_yaml_hex_integer_of_4000_digits_is_one_line(tmp_path: Path) -> None:
    """YAML reads `0x...` without Python's 4,300-digit guard; the refusal used to try to write
    the 4,817 decimal digits and died with a traceback. It is named by its length instead."""
    config = tmp_path / "run.yaml"
    config.write_text("backend: fake\nmodel: tiny-llama\nworkload:\n  seed: 0x" + "f" * 4000 + "\n")
    one_line(
        *bench("run", "--config", str(config), "--no-store"),
        "workload.seed: a 4,817-digit number is over the limit of 4,294,967,295",
    )


def test_compare_of_a_deeply_nested_result_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "result.json").write_text("[" * 100_000 + "]" * 100_000)
    one_line(*bench("compare", str(folder), str(folder)), "nested deeper than 100 levels")
    campaign = tmp_path / "campaign-x.json"
    campaign.write_text('{"steps": ' + "[" * 100_000 + "]" * 100_000 + "}")
    one_line(*bench("compare", str(campaign), str(campaign)), "nested deeper than 100 levels")


@pytest.mark.parametrize("model", ["llama-2-7b", "tiny-llama"])
@pytest.mark.parametrize("trace", ["azure_small.csv", "mooncake_small.jsonl"])
def test_the_shipped_example_traces_fit_the_models_the_readme_uses(trace: str, model: str):
    """examples/traces/README.md replays these on llama-2-7b (the tests on tiny-llama): every row
    must fit the model's context window, or the README's command is refused before it starts."""
    from bench.core.config import ReplayLoad, RunConfig
    from bench.run.api import check_traffic_files

    load = ReplayLoad(trace=str(EXAMPLE_TRACE.parent / trace))
    check_traffic_files(RunConfig(backend="fake", model=model, load=load))


def test_a_trace_row_of_300000_hash_ids_is_refused_naming_the_field(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in EXAMPLE_TRACE.read_text().splitlines() if line.strip()]
    rows[2]["hash_ids"] = list(range(300_000))
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = _run_config(tmp_path, load={"pattern": "replay", "trace": str(trace)})
    one_line(
        *bench("run", "--config", config, "--no-store"),
        "line 3: hash_ids holds 300,000 blocks, over the limit of 100,000 per row "
        "(MAX_HASH_IDS in docs/limits.md)",
    )


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        (["--seed", "-1"], "--seed -1: from 0 to 4,294,967,295"),
        (["--seed", str(2**40)], "from 0 to 4,294,967,295"),
        (["--bootstrap", "5"], "--bootstrap 5: from 100 to 100,000 draws"),
        (["--engine", "openai"], "--engine openai scores through running servers: give --endpoint"),
    ],
    ids=["negative-seed", "huge-seed", "bootstrap", "openai-without-endpoint"],
)
def test_bench_quality_options_follow_compares_rule_before_any_work(
    tmp_path: Path, option: list[str], needle: str
) -> None:
    """One rule for --seed and --bootstrap (bench compare's, in bench/core/limits.py); the
    openai engine without a server is refused before the model or text is read."""
    text = tmp_path / "text.txt"
    text.write_text("hello\n")
    args = ["quality", "--model", "tiny-llama", "--precision", "fp32", "--text", str(text)]
    one_line(*bench(*args, "--out", str(tmp_path / "q"), *option), needle)
    assert not (tmp_path / "q").exists()
    if option[0] != "--engine":  # bench compare refuses the same value in the same words
        one_line(*bench("compare", "a", "b", *option), needle)
