"""The store through the real command lines (subprocesses): bad URLs, wrong password, unreachable
server and newer schema are one line and exit 2; a run, `store copy`, `store info`, listings and
a report on a PostgreSQL store never show its password."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from bench.storage.store import STORE_SCHEMA_VERSION, open_store, parse_store_url

REPO = Path(__file__).resolve().parents[2]
PROFILE = REPO / "examples" / "profiles" / "chat_7b_h200.yaml"


def command(module: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def assert_one_line_exit_2(result: subprocess.CompletedProcess, needle: str) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert needle in lines[0], lines[0]
    return lines[0]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # closed again when the block ends: nothing listens


def make_newer(url: str) -> None:
    open_store(url).close()
    engine = create_engine(parse_store_url(url).url)
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE meta SET value = :v WHERE key = 'schema_version'"),
            {"v": str(STORE_SCHEMA_VERSION + 1)},
        )
    engine.dispose()


def test_bad_postgres_urls_are_one_line_exit_2(postgres):
    password = postgres.password
    port = postgres.port
    cases = [
        (f"postgresql://advisor:{password}@127.0.0.1:notaport/postgres", "malformed"),
        (f"postgresql://advisor:wrong-{password}@127.0.0.1:{port}/postgres", "password"),
        (f"postgresql://advisor:{password}@127.0.0.1:{closed_port()}/postgres", "cannot open"),
        (f"postgresql://advisor:{password}@127.0.0.1:{port}/no_such_db", "does not exist"),
        (f"mysql://advisor:{password}@127.0.0.1/x", "not supported"),
    ]
    for index, (url, needle) in enumerate(cases):
        commands = [("bench", ("runs", "--store", url))]
        if index in (1, 2):  # the job runner and `store info` open the store the same way
            commands += [
                ("bench", ("store", "info", "--store", url)),
                ("bench.orchestrate.jobs", ("--store", url, "--idle-exit-s", "1")),
            ]
        for module, args in commands:
            started = time.monotonic()
            result = command(module, *args)
            line = assert_one_line_exit_2(result, needle)
            assert password not in result.stdout + result.stderr, line
            assert time.monotonic() - started < 30  # an unreachable host fails fast


def test_newer_schema_is_one_line_exit_2(store_url):
    make_newer(store_url)
    for args in (
        ("runs", "--store", store_url),
        ("store", "copy", store_url, f"{store_url}-copy" if "sqlite" in store_url else store_url),
    ):
        assert_one_line_exit_2(command("bench", *args), "newer version")
    recommend = command("advisor", "recommend", "--profile", str(PROFILE), "--store", store_url)
    assert_one_line_exit_2(recommend, "newer version")


def test_cli_on_a_postgres_store_never_shows_the_password(postgres, tmp_path):
    team = postgres.create_database()
    password = postgres.password
    laptop = tmp_path / "laptop.sqlite"
    outputs: list[str] = []

    def bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        result = command("bench", *args, timeout=timeout)
        outputs.extend([result.stdout, result.stderr])
        assert result.returncode == 0, result.stderr[-2000:]
        return result

    run = bench(
        *("run", "--backend", "fake", "--model", "tiny-llama", "--concurrency", "2"),
        *("--duration-s", "1", "--prompt-tokens", "8", "--output-tokens", "4"),
        *("--engine-arg", "itl_s=0.001", "--option", "validity.min_duration_s=0.5"),
        *("--store", str(laptop), "--json"),
        timeout=300,
    )
    run_id = json.loads(run.stdout)["run_id"]
    first = bench("store", "copy", str(laptop), team)
    assert first.stdout.startswith("1 runs copied, 0 replaced, 0 already there")
    assert "postgresql://advisor:***@127.0.0.1" in first.stdout
    again = bench("store", "copy", str(laptop), team)
    assert again.stdout.startswith("0 runs copied, 0 replaced, 1 already there")
    info = json.loads(bench("store", "info", "--store", team, "--json").stdout)
    assert info["backend"] == "postgresql" and info["runs"] == 1
    assert info["location"].startswith("postgresql://advisor:***@")
    assert run_id in bench("runs", "--store", team).stdout
    shown = json.loads(bench("show", run_id, "--store", team).stdout)
    assert shown["run_id"] == run_id
    with open_store(team) as opened:
        assert opened.count_records(run_id) == open_store(laptop).count_records(run_id) > 0

    report_dir = tmp_path / "report"
    report = command(
        "advisor",
        *("report", "--profile", str(PROFILE), "--run", run_id, "--store", team),
        *("--format", "md,json", "--out", str(report_dir)),
        timeout=300,
    )
    outputs.extend([report.stdout, report.stderr])
    assert report.returncode == 0, report.stderr[-2000:]
    written = [path.read_text() for path in report_dir.rglob("*") if path.is_file()]
    assert written and any(run_id in content for content in written)
    assert not any(password in content for content in written + outputs)


CAMPAIGN = """
name: team-store
description: one short fake run written to the team store
steps:
  - kind: run
    name: fake c2
    config:
      backend: fake
      model: tiny-llama
      engine_args: {itl_s: 0.001}
      workload: {kind: generate, prompt_tokens: {mean: 8}, output_tokens: {mean: 4}}
      load: {pattern: concurrency, concurrency: 2, duration_s: 1, warmup_requests: 1}
      validity: {min_duration_s: 0.5, min_requests: 1}
      device: cpu
"""


def test_campaign_on_a_postgres_store_writes_no_password(postgres, tmp_path):
    team = postgres.create_database()
    plan = tmp_path / "plan.yaml"
    plan.write_text(CAMPAIGN)
    out = tmp_path / "campaign"
    result = command(
        "bench", "campaign", str(plan), "--out", str(out), "--store", team, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    recorded = json.loads((out / "campaign.json").read_text())
    assert "--store postgresql://advisor:***@127.0.0.1" in recorded["command"]
    with open_store(team) as opened:
        assert [run.status.value for run in opened.list_runs()] == ["COMPLETED"]
    written = [path.read_bytes() for path in out.rglob("*") if path.is_file()]
    everything = b"".join(written) + (result.stdout + result.stderr).encode()
    assert postgres.password.encode() not in everything


def test_read_commands_never_create_a_store(tmp_path):
    missing = tmp_path / "nonexistent" / "dir" / "x.sqlite"
    reads = [
        ("bench", "runs", "--store", str(missing)),
        ("bench", "show", "some-run", "--store", str(missing)),
        ("bench", "store", "info", "--store", str(missing)),
        ("bench", "store", "copy", str(missing), str(tmp_path / "dst.sqlite")),
        ("advisor", "recommend", "--profile", str(PROFILE), "--store", str(missing)),
    ]
    for module, *args in reads:
        line = assert_one_line_exit_2(command(module, *args), "no store at")
        assert line == f"error: no store at {missing}"
    assert not (tmp_path / "nonexistent").exists()  # no folder, no empty database
    assert not (tmp_path / "dst.sqlite").exists()  # the copy stopped before its destination


def test_store_copy_salvages_the_readable_runs_and_lists_the_rest(tmp_path):
    source, destination = tmp_path / "src.sqlite", tmp_path / "dst.sqlite"
    ran = command("bench", "run", "--backend", "fake", "--model", "tiny-llama",
                  "--duration-s", "1", "--store", str(source))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    with open_store(source) as store:
        [good] = store.list_runs()
        with store._engine.begin() as conn:  # a second row, corrupted behind the store's back
            conn.execute(
                text(
                    "INSERT INTO runs (run_id, status, backend, model, pattern, created_at, "
                    "heartbeat_at, updated_at, result_json) SELECT 'broken', status, backend, "
                    "model, pattern, created_at, heartbeat_at, updated_at, '{\"run_id\": ' "
                    "FROM runs"
                )
            )
    listed = command("bench", "runs", "--store", str(source))
    assert listed.returncode == 0 and good.run_id in listed.stdout
    [warning] = listed.stderr.strip().splitlines()
    assert "skipped 1 run(s)" in warning and "broken (corrupt JSON" in warning
    copied = command("bench", "store", "copy", str(source), str(destination))
    assert copied.returncode == 1  # not everything was copied
    assert copied.stdout.startswith("1 runs copied, 0 replaced, 0 already there")
    assert "1 unreadable skipped" in copied.stdout
    [skipped] = copied.stderr.strip().splitlines()
    assert skipped.startswith("skipped broken (COMPLETED): corrupt JSON")
    with open_store(destination, create=False) as store:
        assert [run.run_id for run in store.list_runs()] == [good.run_id]
