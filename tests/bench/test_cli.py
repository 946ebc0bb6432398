"""`python -m bench`: the stable CLI surface, run as a user runs it (subprocess)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def bench(*args: str, env: dict | None = None, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def write_records(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


MS = 1_000_000


def test_summarize_hand_computed(tmp_path):
    # two requests: A  ttft 10 ms, 3 tokens at 10/20/40 ms, end 40 ms
    #               B  ttft 20 ms, 2 tokens at 20/50 ms, end 60 ms; C failed
    records = [
        {
            "id": "a",
            "start_ns": 0,
            "chunk_ns": [10 * MS, 20 * MS, 40 * MS],
            "end_ns": 40 * MS,
            "input_tokens": 5,
            "output_tokens": 3,
            "error": None,
        },
        {
            "id": "b",
            "start_ns": 0,
            "chunk_ns": [20 * MS, 50 * MS],
            "chunk_tokens": [1, 1],
            "end_ns": 60 * MS,
            "input_tokens": 5,
            "output_tokens": 2,
            "error": None,
        },
        {
            "id": "c",
            "start_ns": 10 * MS,
            "chunk_ns": [],
            "end_ns": 30 * MS,
            "input_tokens": 5,
            "output_tokens": 0,
            "error": "boom",
        },
    ]
    out = bench(
        "summarize", str(write_records(tmp_path / "r.jsonl", records)), "--slo-ttft-ms", "15"
    )
    assert out.returncode == 0, out.stderr
    s = json.loads(out.stdout)
    assert (s["requests"], s["successful"], s["failed"]) == (3, 2, 1)
    assert s["duration_s"] == pytest.approx(0.060)
    assert s["request_throughput_rps"] == pytest.approx(2 / 0.060)
    assert s["output_throughput_tok_s"] == pytest.approx(5 / 0.060)
    assert s["goodput_rps"] == pytest.approx(1 / 0.060)  # only A meets TTFT <= 15 ms
    assert s["error_rate"] == pytest.approx(1 / 3)
    assert s["ttft_ms"]["mean"] == pytest.approx(15.0)
    # TPOT: A (40-10)/2 = 15 ms, B (60-20)/1 = 40 ms
    assert s["tpot_ms"]["mean"] == pytest.approx(27.5)
    # ITL pooled: A 10, 20; B 30
    assert s["itl_ms"]["mean"] == pytest.approx(20.0)
    assert s["e2e_ms"]["p50"] == pytest.approx(50.0)
    assert set(s["e2e_ms"]) == {"mean", "p50", "p90", "p99", "count"}
    assert (s["e2e_ms"]["count"], s["itl_ms"]["count"]) == (2, 3)  # 2 successes; 3 pooled gaps


def test_summarize_without_slo_has_no_goodput(tmp_path):
    path = write_records(
        tmp_path / "r.jsonl",
        [
            {
                "id": "a",
                "start_ns": 0,
                "chunk_ns": [MS],
                "end_ns": 2 * MS,
                "input_tokens": 1,
                "output_tokens": 1,
                "error": None,
            }
        ],
    )
    s = json.loads(bench("summarize", str(path)).stdout)
    assert "goodput_rps" not in s and s["tpot_ms"] is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("summarize", "/nonexistent/records.jsonl"), "records.jsonl"),
        (("run", "--backend", "nope", "--model", "tiny-llama"), "unknown backend 'nope'"),
        (
            ("run", "--backend", "fake", "--model", "tiny-llama", "--pattern", "zigzag"),
            "unknown pattern",
        ),
        (
            (
                "run",
                "--backend",
                "fake",
                "--model",
                "tiny-llama",
                "--pattern",
                "rate",
                "--rate",
                "-3",
            ),
            "rate_rps",
        ),
        (("run", "--backend", "fake", "--model", "/no/such/checkpoint"), "does not exist"),
        # Neither a preset, a known Hugging Face id nor a folder: how to give a config.json.
        (("run", "--backend", "fake", "--model", "acme/unknown-7b"), "--local-dir DIR"),
        (("run", "--backend", "fake", "--model", "tiny-lama"), "did you mean 'tiny-llama'"),
        (("run", "--backend", "fake", "--model", "tiny-llama", "--engine-arg", "warp=9"), "warp"),
        (("run", "--backend", "tensorrt_llm", "--model", "tiny-llama"), "not installed"),
        (
            ("run", "--backend", "fake", "--model", "tiny-llama", "--option", "load.bogus=1"),
            "bogus",
        ),
        (
            ("run", "--backend", "fake", "--model", "tiny-llama", "--option", 'event_loop="trio"'),
            "event_loop",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path, args, needle):
    store = tmp_path / "store.sqlite"
    out_dir = tmp_path / "out"
    extra = ("--store", str(store), "--out", str(out_dir)) if args[0] == "run" else ()
    result = bench(*args, *extra)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert needle in lines[0]
    assert "Traceback" not in result.stderr
    assert not store.exists() and not out_dir.exists()


def test_malformed_record_names_the_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"id": "a", "start_ns": 0, "chunk_ns": [], "end_ns": 1, '
        '"input_tokens": 1, "output_tokens": 0, "error": null}\n{not json\n'
    )
    result = bench("summarize", str(path))
    assert result.returncode == 2
    assert ":2" in result.stderr or "line 2" in result.stderr


def test_backends_json_lists_every_backend_with_reasons():
    result = bench("backends", "--json")
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert {
        "pytorch",
        "torch_compile",
        "vllm",
        "tensorrt_llm",
        "tensorrt",
        "onnxruntime",
        "openai",
        "fake",
    } <= set(rows)
    assert rows["tensorrt_llm"]["available"] is False
    assert "NOT been run" in rows["tensorrt_llm"]["reason"]
    assert rows["fake"]["details"]["test_double"] is True


def test_env_json_has_fingerprint_and_preflight():
    data = json.loads(bench("env", "--json").stdout)
    assert data["fingerprint"]["python"]
    assert any("CPU-only" in item["what"] or "GPU" in item["what"] for item in data["preflight"])


def test_run_fake_backend_writes_store_and_out(tmp_path):
    store = tmp_path / "store.sqlite"
    out = tmp_path / "out"
    result = bench(
        "run",
        "--backend",
        "fake",
        "--model",
        "tiny-llama",
        "--pattern",
        "concurrency",
        "--concurrency",
        "2",
        "--duration-s",
        "1",
        "--dtype",
        "float32",
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "4",
        "--engine-arg",
        "itl_s=0.001",
        "--option",
        "validity.min_duration_s=0.5",
        "--option",
        "validity.min_requests=5",
        "--store",
        str(store),
        "--out",
        str(out),
        "--json",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run = json.loads(result.stdout)
    assert run["status"] == "COMPLETED" and run["validity"]["status"] == "VALID"
    assert (out / "result.json").exists() and (out / "records.jsonl").exists()
    listed = bench("runs", "--store", str(store))
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith(run["run_id"])]
    assert line.split()[1:3] == ["COMPLETED", "VALID"], line


def test_runs_lists_a_completed_but_invalid_run_as_invalid(tmp_path):
    """A run that completes short of its validity minimum is COMPLETED and INVALID: the list
    says both (it said COMPLETED alone, so a reader took the run for a valid one)."""
    store = tmp_path / "store.sqlite"
    common = ("--backend", "fake", "--model", "tiny-llama", "--pattern", "concurrency")
    result = bench(
        "run",
        *common,
        "--concurrency",
        "1",
        "--duration-s",
        "1",
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "4",
        "--option",
        "validity.min_requests=100000",
        "--store",
        str(store),
        "--json",
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    run = json.loads(result.stdout)
    assert run["status"] == "COMPLETED" and run["validity"]["status"] == "INVALID"
    listed = bench("runs", "--store", str(store))
    (line,) = [line for line in listed.stdout.splitlines() if line.startswith(run["run_id"])]
    assert line.split()[1:3] == ["COMPLETED", "INVALID"], line


def bench_in_process(*args: str) -> tuple[int, str, str]:
    """`bench.cli.main([...])` in this process (cheap), with its stdout and stderr."""
    import contextlib
    import io

    from bench.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def assert_one_line_exit_2(code: int, stderr: str, needle: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, (code, stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("runs", "--limit", "abc"), "--limit"),
        (("run", "--bogus"), "No such option: --bogus"),
        (("summarize",), "Missing argument 'records'"),
        (("nosuchcmd",), "No such command 'nosuchcmd'"),
        (("store", "nosuch"), "No such command 'nosuch'"),
        (("run", "--prometheus-port", "70000"), "--prometheus-port"),
        (("runs", "--limit", "99999999999999999999"), "--limit"),  # was an sqlite OverflowError
    ],
)
def test_usage_errors_are_one_line_exit_2(args, needle):
    code, stdout, stderr = bench_in_process(*args)
    assert_one_line_exit_2(code, stderr, needle)
    assert "--help" in stderr and stdout == ""


def test_usage_error_as_a_program_is_one_line_exit_2():
    """The same through `python -m bench` (typer's vendored click raises its own exceptions)."""
    result = bench("runs", "--limit", "abc")
    assert_one_line_exit_2(result.returncode, result.stderr, "--limit")


RUN = ("run", "--backend", "fake", "--model", "tiny-llama")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ((*RUN, "--pattern", "rate", "--rate", "inf"), "finite number"),
        ((*RUN, "--duration-s", "nan"), "finite number"),
        ((*RUN, "--option", "load.duration_s=.inf"), "finite number"),
        ((*RUN, "--option", "workload.seed=-1"), "-1 is under the minimum of 0 (MAX_SEED"),
        ((*RUN, "--pattern", "rate", "--option", "load.seed=-1"), "-1 is under the minimum of 0"),
        ((*RUN, "--concurrency", "1000000000"), "over the limit of 100,000 requests in flight"),
        ((*RUN, "--slo-ttft-ms", "1e300"), "less than or equal to"),
        (("run", "--backend", "fake", "--model", "m" * 100_000), "at most 4096 characters"),
        (("run", "--backend", "fake", "--model", "m" * 300), "at most 255"),
        ((*RUN, "--out", "o" * 300), "at most 255"),
        ((*RUN, "--out", "o/" * 3000), "at most 4096"),
        (("summarize", "records.jsonl", "--slo-ttft-ms", "nan"), "finite number"),
        (("campaign", "plan.yaml", "--out", "o", "--budget-s", "nan"), "--budget-s"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_non_finite_huge_and_overlong_input_is_one_line(tmp_path, monkeypatch, args, needle):
    """inf/nan and huge numbers used to pass validation and crash or never end later; an
    overlong name failed with OSError 36 after the work. Nothing is written either way."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "records.jsonl").write_text("")
    shutil.copy(REPO / "examples" / "campaigns" / "ray-2gpu.yaml", tmp_path / "plan.yaml")
    store = tmp_path / "store.sqlite"
    extra = ("--store", str(store)) if args[0] == "run" else ()
    code, _, stderr = bench_in_process(*args, *extra)
    assert_one_line_exit_2(code, stderr, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml", "records.jsonl"]


def test_unreadable_file_is_one_line(tmp_path):
    """/proc/self/mem is a regular file whose first page cannot be read (EIO), even by root."""
    code, _, stderr = bench_in_process("run", "--config", "/proc/self/mem")
    assert_one_line_exit_2(code, stderr, "cannot read run config /proc/self/mem")


def test_os_errors_on_user_paths_are_one_line(capsys):
    """What a command meets on a path the user named (read-only folder, no permission) is one
    line: exit 2 for the user's paths (a full disk under them included), 1 for the machine's
    (an I/O error)."""
    import errno

    from bench.cli_errors import report_exception

    assert report_exception(PermissionError(errno.EACCES, "Permission denied", "/x/out")) == 2
    assert report_exception(OSError(errno.EROFS, "Read-only file system", "/proc/x")) == 2
    assert report_exception(OSError(errno.ENOSPC, "No space left on device", "/d/r")) == 2
    assert report_exception(OSError(errno.EIO, "Input/output error", "/d/s")) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        "error: cannot use /x/out: Permission denied",
        "error: cannot use /proc/x: Read-only file system",
        "error: cannot use /d/r: No space left on device",
        "error: cannot use /d/s: Input/output error",
    ]
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        report_exception(ZeroDivisionError("x"))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # A union's tag is not part of what the user wrote (pydantic: load.concurrency.concurrency).
        ((*RUN, "--option", "load.concurrency=0"), "load.concurrency: Input should be greater"),
        # A flag is named as typed, with the field it sets.
        ((*RUN, "--concurrency", "0"), "--concurrency (load.concurrency): Input should be"),
        (
            (*RUN, "--pattern", "rate", "--rate", "inf", "--duration-s", "-1", "--option",
             "load.bogus=1", "--option", "load.other=2"),
            "3 problems: (1) --rate (load.rate_rps): Input should be a finite number (2) "
            "--duration-s (load.duration_s): Input should be greater than 0 (3) load.bogus, "
            "load.other: unknown fields; allowed: warmup_requests,",
        ),
    ],
)  # fmt: skip
def test_validation_names_fields_as_written_and_lists_every_problem(args, expected):
    code, _, stderr = bench_in_process(*args)
    assert_one_line_exit_2(code, stderr, expected)
    assert "load.concurrency.concurrency" not in stderr and "load.rate.rate_rps" not in stderr


def test_validation_of_a_config_file_lists_every_problem(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "backend: fake\nmodle: tiny-llama\nload: {pattern: step, start: 0, levels: [1, -2]}\n"
        "workload: {kind: generate, seed: -1}\n"
    )
    code, _, stderr = bench_in_process("run", "--config", str(config))
    assert_one_line_exit_2(code, stderr, f"run config {config}: 5 problems:")
    for problem in (
        "model: required field is missing",
        "workload.seed: -1 is under the minimum of 0 (MAX_SEED in docs/limits.md)",
        "load.start: Input should be greater than 0",
        "load.levels[1]: Input should be greater than 0",
        "modle: unknown field; allowed: backend, model,",
    ):
        assert problem in stderr, (problem, stderr)


def _installed(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


@pytest.mark.parametrize(
    ("backend", "engine_args", "expected"),
    [
        pytest.param(
            "vllm",
            ["nosuch_arg=1", "max_num_seq=4"],
            "unknown vLLM engine arguments 'nosuch_arg', 'max_num_seq' (did you mean max_num_seqs,",
            marks=pytest.mark.skipif(not _installed("vllm"), reason="vLLM is not installed"),
        ),
        pytest.param(
            "torch_compile",
            ["mdoe=default", "fulgraph=true"],
            "mdoe, fulgraph: unknown fields; allowed: max_batch_size,",
            marks=pytest.mark.skipif(not _installed("torch"), reason="torch is not installed"),
        ),
        pytest.param(
            "onnxruntime",
            ["intra_op_threads=2"],
            "did you mean inter_op_num_threads, intra_op_num_threads?",
            marks=pytest.mark.skipif(
                not _installed("onnxruntime"), reason="onnxruntime is not installed"
            ),
        ),
    ],
)
def test_unknown_engine_arguments_are_refused_before_loading(
    tmp_path, backend, engine_args, expected
):
    """Checked against the engine's own argument set before any engine starts (vLLM: the
    installed EngineArgs fields; it used to start the engine, ~40 s here, and store a FAILED run);
    every unknown name is listed with the closest valid ones."""
    import time

    store, out = tmp_path / "store.sqlite", tmp_path / "out"
    args = [a for pair in engine_args for a in ("--engine-arg", pair)]
    started = time.monotonic()
    code, _, stderr = bench_in_process(
        "run", "--backend", backend, "--model", "tiny-llama", *args,
        "--store", str(store), "--out", str(out),
    )  # fmt: skip
    assert_one_line_exit_2(code, stderr, expected)
    assert time.monotonic() - started < 10  # no engine was started
    assert not store.exists() and not out.exists()


@pytest.mark.slow
@pytest.mark.skipif(not _installed("vllm"), reason="vLLM is not installed")
def test_vllm_engine_argument_names_read_from_source_equal_the_dataclass_fields():
    """The CLI reads EngineArgs' field names from vLLM's source (no import); the imported
    dataclass must agree, or the pre-load check would refuse or allow the wrong names."""
    import dataclasses

    from vllm.engine.arg_utils import AsyncEngineArgs

    from bench.engines.backends.vllm import _engine_arg_fields_from_source

    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs) if not f.name.startswith("_")}
    assert _engine_arg_fields_from_source() == fields


def test_broken_pipe_exits_quietly():
    """`python -m bench runs | head`: the reader leaving is exit code 1 with nothing on stderr
    (typer re-raises BrokenPipeError outside standalone mode; it was a traceback)."""
    code = (
        "import sys\n"
        "from bench.cli_errors import report_exception\n"
        "sys.stdout.write('x' * 100)\n"
        "sys.exit(report_exception(BrokenPipeError(32, 'Broken pipe')))\n"
    )
    reader = subprocess.Popen(["head", "-c", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, stdout=reader.stdin, stderr=subprocess.PIPE,
        text=True, timeout=60,
    )  # fmt: skip
    reader.stdin.close()
    reader.wait(timeout=10)
    assert result.returncode == 1 and result.stderr == ""


def test_no_store_is_one_flag_in_help_and_in_every_command():
    """`--no-store` is one flag: typer turns an unnamed bool option into a `--x/--no-x` pair,
    which made `--no-store/--no-no-store`. The help a user reads shows no `--no-no-` option,
    and no bool option of either CLI (bench, advisor) has a generated negative twin."""
    import typer.main

    from advisor.cli import app as advisor_app
    from bench.cli import app as bench_app

    for command in ("run", "fidelity"):
        shown = bench(command, "--help", env={"COLUMNS": "200"})
        assert shown.returncode == 0, shown.stderr
        assert "--no-store" in shown.stdout and "--no-no-" not in shown.stdout

    def options(group, path=()):
        for name, sub in getattr(group, "commands", {}).items():
            yield from options(sub, (*path, name))
        for param in getattr(group, "params", []):
            yield path, param

    seen = 0
    for app in (bench_app, advisor_app):
        for path, param in options(typer.main.get_command(app)):
            assert not getattr(param, "secondary_opts", []), (path, param.opts)
            seen += "--no-store" in getattr(param, "opts", [])
    assert seen >= 2  # bench run and bench fidelity both have it


def test_pattern_help_lists_every_registered_load_pattern():
    """`bench run --pattern`'s help is read from the pattern registry (LOAD_CLASSES), which holds
    every variant of the LoadPattern union: a new pattern shows up without editing the help."""
    import typing

    import typer.main

    from bench.cli import app as bench_app
    from bench.core.config import LOAD_CLASSES, LoadPattern

    union = typing.get_args(typing.get_args(LoadPattern)[0])
    names = {str(cls.model_fields["pattern"].default) for cls in union}
    assert names == set(LOAD_CLASSES) and len(names) == 7
    run = typer.main.get_command(bench_app).commands["run"]
    (option,) = [param for param in run.params if "--pattern" in param.opts]
    listed = option.help.removeprefix("Load pattern: ").split(" | ")
    assert listed == list(LOAD_CLASSES)
