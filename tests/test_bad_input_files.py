"""Every command that reads a file answers a broken one with ONE line on stderr and exit code 2.

Broken = random bytes (not UTF-8, not the format), or a real file of the right kind cut short
(truncated mid-write). The real files come from the shipped data (examples/profiles,
data/decision_tree.yaml, data/reference) or from the product's own writers (RunConfig and
RequestRecord JSON, a ResultStore holding a shipped reference run).
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "examples" / "profiles" / "chat_7b_h200.yaml"
TREE = ROOT / "data" / "decision_tree.yaml"
REFERENCE_RUNS = ROOT / "data" / "reference" / "h200_llama2-7b_engines_bert_resnet_runs.json"
CAMPAIGN_PLAN = ROOT / "data" / "reference" / "h200_llama2_torch_compile_c256" / "plan.yaml"


def random_bytes(size: int = 4096) -> bytes:
    data = random.Random(13).randbytes(size)
    assert not _is_utf8(data)
    return data


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def truncated(data: bytes, suffix: str) -> bytes:
    """A write cut short: a text file loses the end of its last line (every example ends with a
    flow mapping or a JSON line, so the cut leaves it unclosed); a database loses its later
    pages."""
    return data[: int(len(data) * 0.55)] if suffix == ".sqlite" else data[:-10]


# ------------------------------------------------------------------ real files of each kind


def real_profile(tmp: Path) -> bytes:
    return PROFILE.read_bytes()


def real_quality(tmp: Path) -> bytes:
    """The shipped quality measurement (written by `python -m bench quality`)."""
    return (ROOT / "data/reference/quality/cpu_tiny-llama-trained/quality.json").read_bytes()


def real_tree(tmp: Path) -> bytes:
    return TREE.read_bytes()


def real_campaign_plan(tmp: Path) -> bytes:
    return CAMPAIGN_PLAN.read_bytes()


def real_run_config(tmp: Path) -> bytes:
    from bench.core.config import RunConfig

    config = RunConfig(backend="fake", model="tiny-llama", engine_args={"ttft_s": 0.01})
    return json.dumps(config.model_dump(mode="json"), indent=1).encode()


def real_records(tmp: Path) -> bytes:
    from bench.core.schema import RequestRecord

    records = [
        RequestRecord(
            id=f"r{i}",
            start_ns=i * 10**6,
            chunk_ns=[i * 10**6 + 5 * 10**5, i * 10**6 + 8 * 10**5],
            chunk_tokens=[1, 1],
            end_ns=i * 10**6 + 9 * 10**5,
            input_tokens=16,
            output_tokens=2,
        )
        for i in range(40)
    ]
    return "".join(r.model_dump_json() + "\n" for r in records).encode()


def real_store(tmp: Path) -> bytes:
    from bench.core.schema import RunResult
    from bench.storage.store import ResultStore

    path = tmp / "real-store.sqlite"
    store = ResultStore(path)
    for run in json.loads(REFERENCE_RUNS.read_text())["runs"][:3]:
        store.create_run(RunResult.model_validate(run))
    store.close()
    return path.read_bytes()


def advisor(*args: str) -> tuple[int, str]:
    from advisor.cli import app

    result = CliRunner().invoke(app, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback: the test fails showing it
    return result.exit_code, result.stderr


def bench(*args: str) -> tuple[int, str]:
    import contextlib
    import io

    from bench.cli import main

    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(args))
    return code, stderr.getvalue()


# (name, real-file maker, suffix, command using {file})
CASES: list[tuple[str, Callable[[Path], bytes], str, Callable[[str], tuple[int, str]]]] = [
    (
        "advisor recommend --profile",
        real_profile,
        ".yaml",
        lambda f: advisor("recommend", "--profile", f),
    ),
    (
        "advisor recommend --profile (json)",
        real_run_config,
        ".json",
        lambda f: advisor("recommend", "--profile", f),
    ),
    (
        "advisor bench-plan --profile",
        real_profile,
        ".yaml",
        lambda f: advisor("bench-plan", "--profile", f),
    ),
    (
        "advisor recommend --tree",
        real_tree,
        ".yaml",
        lambda f: advisor("recommend", "--model", "llama-2-7b", "--tree", f),
    ),
    (
        "advisor recommend --store",
        real_store,
        ".sqlite",
        lambda f: advisor("recommend", "--model", "llama-2-7b", "--store", f),
    ),
    (
        "advisor report --profile",
        real_profile,
        ".yaml",
        lambda f: advisor(
            "report", "--profile", f, "--format", "json", "--out", str(Path(f).parent / "out")
        ),
    ),
    (
        "advisor report --store",
        real_store,
        ".sqlite",
        lambda f: advisor(
            "report",
            "--profile",
            str(PROFILE),
            "--store",
            f,
            "--format",
            "json",
            "--out",
            str(Path(f).parent / "out"),
        ),
    ),
    (
        "advisor recommend --quality-result",
        real_quality,
        ".json",
        lambda f: advisor("recommend", "--profile", str(PROFILE), "--quality-result", f),
    ),
    (
        "advisor report --quality-result",
        real_quality,
        ".json",
        lambda f: advisor(
            "report",
            "--profile",
            str(PROFILE),
            "--quality-result",
            f,
            "--format",
            "json",
            "--out",
            str(Path(f).parent / "out"),
        ),
    ),
    ("bench run --config", real_run_config, ".json", lambda f: bench("run", "--config", f)),
    ("bench run --config (yaml)", real_run_config, ".yaml", lambda f: bench("run", "--config", f)),
    ("bench summarize", real_records, ".jsonl", lambda f: bench("summarize", f)),
    (
        "bench campaign",
        real_campaign_plan,
        ".yaml",
        lambda f: bench("campaign", f, "--out", str(Path(f).parent / "campaign-out")),
    ),
    ("bench runs --store", real_store, ".sqlite", lambda f: bench("runs", "--store", f)),
    (
        "bench store info --store",
        real_store,
        ".sqlite",
        lambda f: bench("store", "info", "--store", f),
    ),
    (
        "bench store copy SOURCE",
        real_store,
        ".sqlite",
        lambda f: bench("store", "copy", f, str(Path(f).parent / "copy.sqlite")),
    ),
    (
        "bench show --store",
        real_store,
        ".sqlite",
        lambda f: bench("show", "no-such-run", "--store", f),
    ),
]


def _one_line_error(code: int, stderr: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, (code, stderr)
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("breakage", ["random-bytes", "truncated"])
@pytest.mark.parametrize(("name", "make", "suffix", "command"), CASES, ids=[c[0] for c in CASES])
def test_broken_file_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch, name, make, suffix, command, breakage: str
) -> None:
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "absent.sqlite"))
    real = make(tmp_path)
    path = tmp_path / f"input{suffix}"
    path.write_bytes(random_bytes() if breakage == "random-bytes" else truncated(real, suffix))
    _one_line_error(*command(str(path)))


def test_binary_profile_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "profile.yaml"
    path.write_bytes(b"stages:\n  - name: \xff\xfe\x00main\n")
    code, stderr = advisor("recommend", "--profile", str(path))
    _one_line_error(code, stderr)
    assert "not UTF-8" in stderr and str(path) in stderr


def test_broken_reference_file_is_skipped_with_a_note(tmp_path: Path, monkeypatch) -> None:
    """A reference folder is read file by file: a broken file is named and left out, the rest
    still count (one bad file must not hide the shipped evidence)."""
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "absent.sqlite"))
    folder = tmp_path / "reference"
    folder.mkdir()
    (folder / "good_runs.json").write_bytes(REFERENCE_RUNS.read_bytes())
    (folder / "random.json").write_bytes(random_bytes())
    (folder / "cut.json").write_bytes(truncated(REFERENCE_RUNS.read_bytes(), ".json"))
    code, _ = advisor(
        "recommend", "--model", "llama-2-7b", "--reference-dir", str(folder), "--json"
    )
    assert code == 0
    from advisor.sizing.measured import read_reference_folder

    loaded = read_reference_folder(folder)
    assert list(loaded.runs) == ["good_runs.json"]
    assert any("random.json" in note for note in loaded.notes)
    assert any("cut.json" in note for note in loaded.notes)


@pytest.mark.parametrize("breakage", ["random-bytes", "truncated"])
def test_checkpoint_with_a_broken_config_json(tmp_path: Path, monkeypatch, breakage: str) -> None:
    """`--model DIR` reads DIR/config.json: the bench refuses it in one line; the advisor
    answers from the tree without the model's size and says why."""
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "absent.sqlite"))
    from bench.engines.models import PRESETS

    real = PRESETS["tiny-llama"].build_config().to_json_string().encode()
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_bytes(
        random_bytes() if breakage == "random-bytes" else truncated(real, ".json")
    )
    _one_line_error(*bench("run", "--backend", "pytorch", "--model", str(checkpoint)))
    for command in ("recommend", "bench-plan"):
        code, stderr = advisor(command, "--model", str(checkpoint), "--json")
        assert code == 0 and "Traceback" not in stderr
    from advisor.workload.architectures import architecture_for

    architecture, note = architecture_for(str(checkpoint))
    assert architecture is None and "config.json" in note


# --------------------------------------------------------------- bounded reading (bench.core.files)
# Inputs that are well-formed bytes but unbounded work: 100,000 `[` (every parser recursed per
# level: RecursionError), a YAML alias bomb (a few hundred bytes loading to gigabytes), a FIFO
# with no writer (the read waited forever) and /dev/zero (read until memory ran out).


def deep_nesting(tmp: Path, suffix: str) -> Path:
    path = tmp / f"deep{suffix}"
    path.write_text("[" * 100_000 + "\n")
    return path


def alias_bomb(tmp: Path, suffix: str) -> Path:
    """Nine levels of nine aliases each: 9**9 (387 million) strings once expanded."""
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for level in range(1, 9):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]")
    path = tmp / f"bomb{suffix}"
    path.write_text("\n".join(lines) + "\n")
    return path


def fifo(tmp: Path, suffix: str) -> Path:
    path = tmp / f"fifo{suffix}"
    os.mkfifo(path)
    return path


def dev_zero(tmp: Path, suffix: str) -> Path:
    path = tmp / f"zero{suffix}"
    path.symlink_to("/dev/zero")
    return path


HAZARDS = {
    "deep-nesting": (deep_nesting, "nested deeper than 100 levels"),
    "alias-bomb": (alias_bomb, "expands through its aliases"),
    "fifo": (fifo, "is not a regular file"),
    "dev-zero": (dev_zero, "is not a regular file"),
}

# (entry point, suffix of the file it reads, command given the file's path)
ENTRY_POINTS: list[tuple[str, str, Callable[[Path], tuple[int, str]]]] = [
    ("profile", ".yaml", lambda f: advisor("recommend", "--profile", str(f))),
    ("profile (json)", ".json", lambda f: advisor("recommend", "--profile", str(f))),
    ("run config", ".yaml", lambda f: bench("run", "--config", str(f))),
    ("campaign plan", ".yaml", lambda f: bench("campaign", str(f), "--out", str(f.parent / "o"))),
    (
        "decision tree",
        ".yaml",
        lambda f: advisor("recommend", "--model", "llama-2-7b", "--tree", str(f)),
    ),
    ("records file", ".jsonl", lambda f: bench("summarize", str(f))),
]


@pytest.fixture
def fail_instead_of_hanging():
    """A read that blocks (the FIFO before the fix) fails the test instead of hanging it."""
    import signal

    def _timeout(signum, frame):
        raise TimeoutError("the command blocked reading its input")

    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("hazard", list(HAZARDS))
@pytest.mark.parametrize(
    ("entry", "suffix", "command"), ENTRY_POINTS, ids=[e[0] for e in ENTRY_POINTS]
)
def test_unbounded_input_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch, fail_instead_of_hanging, entry, suffix, command, hazard
) -> None:
    if hazard == "alias-bomb" and suffix != ".yaml":
        pytest.skip("aliases are YAML only")
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "absent.sqlite"))
    make, needle = HAZARDS[hazard]
    code, stderr = command(make(tmp_path, suffix))
    _one_line_error(code, stderr)
    assert needle in stderr, stderr


@pytest.mark.parametrize("hazard", ["deep-nesting", "fifo", "dev-zero"])
def test_unbounded_reference_file_is_a_note(
    tmp_path: Path, monkeypatch, fail_instead_of_hanging, hazard: str
) -> None:
    """A reference folder is read file by file: the bad one is named in a note, the good one
    still counts."""
    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "absent.sqlite"))
    folder = tmp_path / "reference"
    folder.mkdir()
    (folder / "good_runs.json").write_bytes(REFERENCE_RUNS.read_bytes())
    make, needle = HAZARDS[hazard]
    bad = make(folder, ".json")
    code, _ = advisor("recommend", "--model", "llama-2-7b", "--reference-dir", str(folder))
    assert code == 0
    from advisor.sizing.measured import read_reference_folder

    loaded = read_reference_folder(folder)
    assert list(loaded.runs) == ["good_runs.json"]
    assert any(bad.name in note and needle in note for note in loaded.notes), loaded.notes


@pytest.mark.parametrize("hazard", ["deep-nesting", "alias-bomb"])
def test_unbounded_app_upload_is_one_line(tmp_path: Path, hazard: str) -> None:
    """The app's profile upload parses through the same bounded reader."""
    from bench.core.errors import UserError
    from ui.state import read_uploaded_profile

    make, needle = HAZARDS[hazard]
    data = make(tmp_path, ".yaml").read_bytes()
    with pytest.raises(UserError, match=needle):
        read_uploaded_profile(data, "upload.yaml")


def test_deeply_nested_option_value_is_one_line() -> None:
    code, stderr = bench(
        "run", "--backend", "fake", "--model", "tiny-llama", "--engine-arg", "x=" + "[" * 100_000
    )
    _one_line_error(code, stderr)
    assert "nested deeper than 100 levels" in stderr


def test_size_cap_and_the_shipped_files_within_the_bounds(tmp_path: Path) -> None:
    """A file over the cap is refused; every shipped YAML/JSON input (anchors and merge keys
    included) still loads through the bounded reader."""
    from bench.core.errors import UserError
    from bench.core.files import load_user_json, load_user_mapping, read_user_bytes

    big = tmp_path / "big.yaml"
    big.write_bytes(b"a: 1\n" * 1000)
    with pytest.raises(UserError, match="larger than"):
        read_user_bytes(big, "profile", max_bytes=1024)
    shipped = [*ROOT.glob("examples/**/*.yaml"), *ROOT.glob("data/**/*.yaml")]
    assert len(shipped) > 10
    for path in shipped:
        assert isinstance(load_user_mapping(path, "shipped file"), dict), path
    for path in ROOT.glob("data/reference/*.json"):
        load_user_json(path, "reference file")


@pytest.mark.parametrize("hazard", ["deep-nesting", "fifo", "dev-zero"])
def test_unbounded_checkpoint_config_json(tmp_path: Path, fail_instead_of_hanging, hazard: str):
    """`--model DIR` reads DIR/config.json through the same bounded reader."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    make, needle = HAZARDS[hazard]
    make(checkpoint, ".json").rename(checkpoint / "config.json")
    code, stderr = bench("run", "--backend", "pytorch", "--model", str(checkpoint))
    _one_line_error(code, stderr)
    assert needle in stderr and "config.json" in stderr, stderr
