"""Every command of the README's CLI tour runs as written (CPU), so the tour cannot rot.

Convention (the README is written by people, the commands are read from it, never copied here):
the tour is every fenced code block tagged ``bash``/``sh``/``shell``/``console`` under the first
Markdown heading whose text contains "CLI tour" (any level, any case), up to the next heading of
the same or a higher level. In a block, `#` lines are comments, a trailing backslash continues a
line, and a leading `$ ` prompt is dropped; in a ``console`` block only `$ ` lines are commands
(the rest is shown output). Commands run in order (a later one may read what an
earlier one wrote), from a scratch folder that mirrors the repository (so `out/`, `reports/` and
the results store land there, not in the checkout); `.venv/bin/python` is this interpreter when
the checkout has no .venv.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELL_TAGS = {"bash", "sh", "shell", "console"}
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w-]*)")


def tour_commands(markdown: str) -> list[str]:
    """The commands of the CLI tour section, in order (see the module docstring)."""
    lines = markdown.splitlines()
    commands: list[str] = []
    level = None
    fence: str | None = None
    in_shell_block = False
    console = False
    pending = ""
    for line in lines:
        if fence is not None:  # inside a fenced block
            if line.strip().startswith(fence):
                fence, in_shell_block = None, False
                continue
            if not in_shell_block:
                continue
            text = line.strip()
            if pending:
                text = f"{pending} {text}"
                pending = ""
            if not text or text.startswith("#"):
                continue
            if console and not pending and not text.startswith("$ "):
                continue  # output shown after a command
            text = text.removeprefix("$ ")
            if text.endswith("\\"):
                pending = text[:-1].strip()
                continue
            commands.append(text)
            continue
        heading = HEADING.match(line)
        if heading:
            depth = len(heading.group(1))
            if level is not None and depth <= level:
                break
            if level is None and "cli tour" in heading.group(2).lower():
                level = depth
            continue
        opening = FENCE.match(line.strip())
        if opening:
            fence = opening.group(1)
            tag = opening.group(2).lower()
            in_shell_block = level is not None and tag in SHELL_TAGS
            console = tag == "console"
    return commands


def test_parser_reads_the_convention() -> None:
    text = "\n".join(
        [
            "# Project",
            "```bash",
            "echo not-in-the-tour",
            "```",
            "## The CLI Tour",
            "Some words.",
            "```bash",
            "# a comment",
            "$ python -m bench backends",
            "python -m bench run --backend pytorch \\",
            "    --model tiny-llama",
            "```",
            "```text",
            "python -m not-a-command",
            "```",
            "### A sub-heading stays in the section",
            "```sh",
            "python -m advisor recommend --model tiny-llama",
            "```",
            "```console",
            "$ python -m bench runs",
            "20261130-1  COMPLETED  pytorch",
            "```",
            "## Next section",
            "```bash",
            "echo after-the-tour",
            "```",
        ]
    )
    assert tour_commands(text) == [
        "python -m bench backends",
        "python -m bench run --backend pytorch --model tiny-llama",
        "python -m advisor recommend --model tiny-llama",
        "python -m bench runs",
    ]


def test_the_readme_has_a_tour_of_known_commands() -> None:
    """Fast check: the tour exists and names only commands the CLIs have."""
    from advisor.cli import app as advisor_app
    from bench.cli import app as bench_app

    def names(app) -> set[str]:
        return {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}

    known = {"bench": names(bench_app), "advisor": names(advisor_app)}
    commands = tour_commands(README.read_text(encoding="utf-8"))
    assert len(commands) >= 3, "README.md has no CLI tour (see this module's docstring)"
    for command in commands:
        words = shlex.split(command)
        assert "-m" in words, command
        module = words[words.index("-m") + 1]
        assert module in known, command
        assert words[words.index("-m") + 2] in known[module], command


def _scratch_checkout(tmp_path: Path) -> Path:
    """A folder that looks like the checkout (links to each top-level entry) but writes apart."""
    scratch = tmp_path / "checkout"
    scratch.mkdir()
    for item in ROOT.iterdir():
        if item.name not in {".git", "out", "reports"}:
            (scratch / item.name).symlink_to(item)
    return scratch


@pytest.mark.slow
def test_every_tour_command_runs_as_written(tmp_path: Path) -> None:
    commands = tour_commands(README.read_text(encoding="utf-8"))
    scratch = _scratch_checkout(tmp_path)
    env = {
        **os.environ,
        "ADVISOR_STORE": str(tmp_path / "store.sqlite"),
        "PYTHONPATH": str(ROOT),
    }
    for command in commands:
        words = shlex.split(command)
        if words[0].endswith("python") and not (scratch / words[0]).exists():
            words[0] = sys.executable
        done = subprocess.run(
            words, cwd=scratch, env=env, capture_output=True, text=True, timeout=600
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, f"{command}\n{output[-3000:]}"
        assert "Traceback" not in output, f"{command}\n{output[-3000:]}"
        assert "FAILED" not in done.stdout, f"{command}\n{output[-3000:]}"
        words_run = words[words.index("-m") + 1 : words.index("-m") + 3]
        if words_run == ["bench", "run"]:  # the README promises a VALID run, on a slow CPU too
            assert "COMPLETED (VALID)" in done.stdout, f"{command}\n{output[-3000:]}"
        if words_run == ["bench", "runs"]:  # the list says VALID / INVALID beside the status
            assert " COMPLETED VALID " in done.stdout, f"{command}\n{output[-3000:]}"
