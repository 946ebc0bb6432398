"""SGLang through the openai backend's launcher: the server command and the run settings under
SGLang's own names. SGLang is not installable on the CPU test machine (it needs CUDA): its server
has not been run by this project; these tests check the argument logic only."""

from __future__ import annotations

import sys

import pytest

from bench.core.config import ParallelismConfig, PrecisionConfig, RunConfig
from bench.core.errors import UserError
from bench.engines.backends.openai import OpenAIBackend
from bench.engines.launchers import sglang_serve_command


def test_the_server_command_uses_sglangs_names():
    command = sglang_serve_command(
        "/models/llama", 30001, {"tp_size": 2, "disable_radix_cache": True, "dtype": "bfloat16"}
    )
    assert command[:3] == [sys.executable, "-m", "sglang.launch_server"]
    assert command[command.index("--model-path") + 1] == "/models/llama"
    assert command[command.index("--port") + 1] == "30001"
    assert command[command.index("--tp-size") + 1] == "2"
    assert "--disable-radix-cache" in command
    with pytest.raises(UserError, match="max_num_seqs"):
        sglang_serve_command("/m", 1, {"max_num_seqs": 8})  # a vLLM name, not SGLang's


def test_run_settings_map_to_sglang():
    args = OpenAIBackend.framework_args(
        {"launch": "sglang"},
        ParallelismConfig(tensor_parallel_size=2),
        PrecisionConfig(dtype="bfloat16", quantization="fp8", kv_cache_dtype="fp8"),
        prefix_caching=False,
    )
    server = args["server_args"]
    assert server["tp_size"] == 2 and server["quantization"] == "fp8"
    assert server["kv_cache_dtype"] == "fp8_e4m3" and server["disable_radix_cache"] is True
    with pytest.raises(UserError, match="replicas"):
        OpenAIBackend.framework_args({"launch": "sglang"}, ParallelismConfig(replicas=2))


def test_a_launched_sglang_run_counts_as_sglang_in_the_evidence():
    config = RunConfig(backend="openai", model="tiny-llama", engine_args={"launch": "sglang"})
    assert config.framework == "sglang"
    served = RunConfig(backend="openai", model="tiny-llama", engine_args={"launch": "vllm"})
    assert served.framework == "openai"
