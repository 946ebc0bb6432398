"""Tests of bench/engines/launchers.py: command construction (vLLM, trtllm-serve) and the launcher's
readiness and process-group stop, the latter against a labelled test-double server script."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from bench.core.errors import UserError
from bench.engines.launchers import (
    ServerLauncher,
    ServerStartError,
    engine_args_to_vllm_flags,
    free_port,
    trtllm_serve_command,
    vllm_serve_command,
)


def _vllm_installed() -> bool:
    from bench.engines.backends.vllm import vllm_version

    return vllm_version() is not None


def test_engine_args_map_to_kebab_case_flags() -> None:
    flags = engine_args_to_vllm_flags(
        {
            "block_size": 16,
            "gpu_memory_utilization": 0.9,
            "enforce_eager": True,
            "enable_prefix_caching": False,
            "disable_log_stats": False,  # store_true flag: False = leave it out
            "quantization": None,
            "cuda_graph_sizes": [1, 2, 4],
            "compilation_config": {"mode": 3},
        }
    )
    assert flags == [
        "--block-size",
        "16",
        "--gpu-memory-utilization",
        "0.9",
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--cuda-graph-sizes",
        "1",
        "2",
        "4",
        "--compilation-config",
        '{"mode":3}',
    ]


@pytest.mark.skipif(not _vllm_installed(), reason="vLLM is not installed")
def test_vllm_serve_command_is_an_argument_list_with_checked_names() -> None:
    command = vllm_serve_command(
        "/models/x", 8123, {"tensor_parallel_size": 2, "max_num_seqs": 64}, dtype="float16"
    )
    assert command[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert command[3:9] == ["--model", "/models/x", "--host", "127.0.0.1", "--port", "8123"]
    assert command[9:] == [
        "--dtype",
        "float16",
        "--tensor-parallel-size",
        "2",
        "--max-num-seqs",
        "64",
    ]
    with pytest.raises(UserError, match=r"max_num_seq'.*max_num_seqs"):
        vllm_serve_command("/models/x", 8123, {"max_num_seq": 8})
    with pytest.raises(UserError, match="model"):
        vllm_serve_command("/models/x", 8123, {"model": "other"})


def test_trtllm_serve_command_follows_its_cli(tmp_path: Path) -> None:
    command = trtllm_serve_command(
        "/ckpt",
        9000,
        {
            "backend": "pytorch",
            "tp_size": 2,
            "max_batch_size": 256,
            "kv_cache_free_gpu_memory_fraction": 0.9,
            "trust_remote_code": True,
            "enable_chunked_prefill": False,
            "extra_llm_api_options": {"cuda_graph_config": {"max_batch_size": 256}},
        },
        work_dir=tmp_path,
    )
    yaml_path = tmp_path / "extra_llm_api_options.yaml"
    assert command == [
        "trtllm-serve",
        "/ckpt",
        "--host",
        "127.0.0.1",
        "--port",
        "9000",
        "--backend",
        "pytorch",
        "--tp_size",
        "2",
        "--max_batch_size",
        "256",
        "--kv_cache_free_gpu_memory_fraction",
        "0.9",
        "--trust_remote_code",
        "--extra_llm_api_options",
        str(yaml_path),
    ]
    import yaml

    assert yaml.safe_load(yaml_path.read_text()) == {"cuda_graph_config": {"max_batch_size": 256}}
    with pytest.raises(UserError, match=r"max_batch'.*max_batch_size"):
        trtllm_serve_command("/ckpt", 9000, {"max_batch": 8})
    with pytest.raises(UserError, match="backend"):
        trtllm_serve_command("/ckpt", 9000, {"backend": "onnx"})


def test_launcher_refuses_a_shell_string() -> None:
    with pytest.raises(TypeError):
        ServerLauncher("python -m http.server", "http://127.0.0.1:1", "/tmp/x.log")  # type: ignore[arg-type]


# TEST DOUBLE of an OpenAI-compatible server: answers /health, /v1/models and a one-token
# /v1/completions, and keeps a child process (like vLLM's engine core) in its process group.
# With IGNORE_TERM it ignores SIGTERM, so only the launcher's SIGKILL can end it.
FAKE_SERVER = textwrap.dedent(
    """
    import json, os, signal, subprocess, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    if os.environ.get("IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time, signal; "
        "signal.signal(signal.SIGTERM, signal.SIG_IGN) if %r else None; time.sleep(600)"
        % bool(os.environ.get("IGNORE_TERM"))])
    print("child", child.pid, flush=True)

    class Handler(BaseHTTPRequestHandler):
        def _json(self, payload, status=200):
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._json({})
            elif self.path == "/v1/models":
                self._json({"data": [{"id": "double"}]})
            else:
                self._json({"error": "no"}, 404)

        def do_POST(self):
            length = int(self.headers["Content-Length"])
            body = json.loads(self.rfile.read(length))
            assert body["max_tokens"] == 1 and body["model"] == "double"
            self._json({"choices": [{"text": "x", "index": 0}]})

    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
    """
)


@pytest.mark.parametrize("ignore_term", [False, True])
def test_launcher_waits_for_readiness_and_stop_kills_the_group(
    tmp_path: Path, ignore_term: bool
) -> None:
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    port = free_port()
    env = {"PATH": "/usr/bin:/bin", **({"IGNORE_TERM": "1"} if ignore_term else {})}
    launcher = ServerLauncher(
        [sys.executable, str(script), str(port)],
        f"http://127.0.0.1:{port}",
        tmp_path / "server.log",
        env=env,
        startup_timeout_s=30,
        stop_grace_s=1.0,
    )
    with launcher:
        assert launcher.served_model == "double"
        leader = psutil.Process(launcher.pid)
        family = [leader, *leader.children(recursive=True)]
        assert len(family) == 2
        assert all(p.is_running() for p in family)
    _gone, alive = psutil.wait_procs(family, timeout=5)
    assert not alive
    assert launcher.pid is None


def test_launcher_reports_a_server_that_dies_with_its_log(tmp_path: Path) -> None:
    port = free_port()
    launcher = ServerLauncher(
        [sys.executable, "-c", "import sys; print('bad flag --foo'); sys.exit(3)"],
        f"http://127.0.0.1:{port}",
        tmp_path / "server.log",
        startup_timeout_s=30,
    )
    with pytest.raises(ServerStartError, match=r"code 3(.|\n)*bad flag --foo"):
        launcher.start()
    assert launcher.pid is None


def test_a_server_that_raises_leads_the_error_with_its_own_line(tmp_path: Path) -> None:
    port = free_port()
    launcher = ServerLauncher(
        [sys.executable, "-c", "raise ValueError('model path /nope has no config.json')"],
        f"http://127.0.0.1:{port}",
        tmp_path / "server.log",
        startup_timeout_s=30,
    )
    with pytest.raises(ServerStartError) as raised:
        launcher.start()
    first_line = str(raised.value).splitlines()[0]
    assert first_line.startswith("ValueError: model path /nope has no config.json"), first_line
    assert "server exited with code 1" in first_line


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
