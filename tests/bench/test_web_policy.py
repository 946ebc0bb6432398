"""The server's rules for web-submitted jobs: code-executing engine arguments and model paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.core.config import RunConfig
from bench.core.errors import UserError
from bench.orchestrate.web_policy import WebPolicy, check_web_jobs


def test_code_executing_arguments_need_the_server_setting():
    remote_code = RunConfig(backend="pytorch", model="tiny-llama", trust_remote_code=True)
    with pytest.raises(UserError, match="unless the server sets ADVISOR_WEB_ALLOW_REMOTE_CODE=1"):
        check_web_jobs([remote_code], WebPolicy.from_env({}))
    worker = RunConfig(
        backend="vllm", model="tiny-llama", engine_args={"worker_extension_cls": "evil.Ext"}
    )
    with pytest.raises(UserError, match="worker_extension_cls would run code"):
        check_web_jobs([worker], WebPolicy.from_env({}))
    allowed = WebPolicy.from_env({"ADVISOR_WEB_ALLOW_REMOTE_CODE": "1"})
    check_web_jobs([remote_code, worker], allowed)
    check_web_jobs([RunConfig(backend="pytorch", model="tiny-llama")], WebPolicy.from_env({}))


def test_model_paths_must_lie_under_the_model_roots(tmp_path: Path):
    root = tmp_path / "models"
    (root / "m").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    policy = WebPolicy.from_env({"ADVISOR_MODEL_ROOTS": str(root)})
    check_web_jobs([RunConfig(backend="pytorch", model=str(root / "m"))], policy)
    for path in (outside, root / "escape", root / ".." / "elsewhere"):
        with pytest.raises(
            UserError, match=f"outside the server's model roots .ADVISOR_MODEL_ROOTS={root}"
        ):
            check_web_jobs([RunConfig(backend="pytorch", model=str(path))], policy)
    with pytest.raises(UserError, match="ADVISOR_MODEL_ROOTS=unset"):
        check_web_jobs([RunConfig(backend="pytorch", model=str(root / "m"))], WebPolicy())
    tokenizer = RunConfig(backend="vllm", model="tiny-llama", engine_args={"tokenizer": "/etc"})
    with pytest.raises(UserError, match="model path /etc is outside"):
        check_web_jobs([tokenizer], policy)
