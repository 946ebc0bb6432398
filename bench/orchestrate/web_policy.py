"""What a job submitted from the web form may ask for, under the server's own configuration.

A person using the app's form may not be the person running the server (a team app, a cluster
behind it). Two things there would run code or read files the server's owner did not choose:
engine arguments that execute code shipped in a model folder (`trust_remote_code` and the like)
and model paths outside the folders the server serves models from. Both are refused for web
jobs unless the server's environment allows them; the refusal names the setting. The CLI is
not affected: whoever runs it runs code as themselves anyway.

Settings (environment of the app process):
- `ADVISOR_WEB_ALLOW_REMOTE_CODE=1`: web jobs may use code-executing engine arguments.
- `ADVISOR_MODEL_ROOTS=/models:/data/checkpoints` (os.pathsep-separated): folders whose
  checkpoints web jobs may name by path; model presets (tiny-llama, llama-2-7b ...) are always
  allowed. Unset = no path is allowed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from pydantic import Field

from bench.core.config import RunConfig
from bench.core.errors import UserError
from bench.core.strict import Strict

ALLOW_REMOTE_CODE_ENV = "ADVISOR_WEB_ALLOW_REMOTE_CODE"
MODEL_ROOTS_ENV = "ADVISOR_MODEL_ROOTS"

CODE_EXECUTING_ENGINE_ARGS = (
    "trust_remote_code",  # transformers / vLLM / TRT-LLM: runs the model folder's Python files
    "worker_cls",  # vLLM: imports and runs a class by its qualified name
    "worker_extension_cls",  # vLLM: same
    "logits_processors",  # vLLM: qualified names of classes to import
    "tool_parser_plugin",  # vLLM: a Python file to execute
    "reasoning_parser_plugin",  # vLLM: same
    "custom_op_library",  # ONNX Runtime: a shared library to load
)
"""Engine arguments that import or execute code chosen by the submitter."""
PATH_ENGINE_ARGS = ("tokenizer", "download_dir")
"""Engine arguments naming files to read: held to the model roots like the model itself."""


class WebPolicy(Strict):
    """The server's rules for web-submitted jobs (read from its environment)."""

    allow_remote_code: bool = Field(False, description=f"${ALLOW_REMOTE_CODE_ENV}=1")
    model_roots: list[Path] = Field(default_factory=list, description=f"${MODEL_ROOTS_ENV}")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> WebPolicy:
        env = os.environ if environ is None else environ
        allow = env.get(ALLOW_REMOTE_CODE_ENV, "").strip().lower() in ("1", "true", "yes")
        texts = [text.strip() for text in env.get(MODEL_ROOTS_ENV, "").split(os.pathsep)]
        roots = [Path(text).expanduser() for text in texts if text]
        return cls(allow_remote_code=allow, model_roots=roots)

    def path_allowed(self, path: str) -> bool:
        """Whether `path`, links resolved, lies inside one of the model roots."""
        resolved = Path(path).expanduser().resolve()
        return any(resolved.is_relative_to(root.resolve()) for root in self.model_roots)


def check_web_jobs(configs: Iterable[RunConfig], policy: WebPolicy | None = None) -> None:
    """Raise a UserError naming the setting for the first thing the policy refuses."""
    from bench.engines.models import PRESETS

    policy = policy or WebPolicy.from_env()
    roots = os.pathsep.join(map(str, policy.model_roots)) or "unset"
    for config in configs:
        if not policy.allow_remote_code:
            asked = ["trust_remote_code"] if config.trust_remote_code else []
            asked += [k for k in CODE_EXECUTING_ENGINE_ARGS if config.engine_args.get(k)]
            if asked:
                raise UserError(
                    f"{config.backend}: {', '.join(dict.fromkeys(asked))} would run code from "
                    f"the model folder or the submitter; jobs from the web form may not, unless "
                    f"the server sets {ALLOW_REMOTE_CODE_ENV}=1"
                )
        paths = [] if config.model in PRESETS else [config.model]
        paths += [str(config.engine_args[k]) for k in PATH_ENGINE_ARGS if config.engine_args.get(k)]
        for path in paths:
            if not policy.path_allowed(path):
                raise UserError(
                    f"{config.backend}: model path {path} is outside the server's model roots "
                    f"({MODEL_ROOTS_ENV}={roots}); jobs from the web form may only name "
                    f"checkpoints under them (or a preset)"
                )
