"""What an engine says about itself and how its worker ended: the typed `RunResult.engine`.

A backend reports its facts at load (`EngineFacts`): the few every reader uses are fields; the
rest stay under the framework's own names in `extra` (vLLM's `max_num_seqs`, ONNX Runtime's
`providers`), so nothing an engine reports is lost and no reader looks a field up by string.
The run adds how the worker ended and the run's wall time (`RunEngine`). Results stored before
these models kept one flat dict; `_from_flat` maps its keys, so every stored run still loads.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, JsonValue, model_validator
from pydantic_core import to_jsonable_python

from bench.core.config import RunConfig
from bench.core.strict import Strict


class LaunchedServer(Strict):
    """The server the openai backend started itself (`launch`), as it ran."""

    name: str = Field(description="Which server was launched (vllm, trtllm).")
    version: str | None = None
    command: list[str] = Field(default_factory=list, description="The exact command line.")
    log: str | None = Field(None, description="The server's log file.")
    startup_s: float | None = Field(None, description="Start to the first answered health check.")
    args: dict[str, JsonValue] = Field(
        default_factory=dict, description="The server arguments the run's options gave."
    )


_SERVER_KEYS = {
    "server": "name",
    "server_version": "version",
    "server_command": "command",
    "server_log": "log",
    "server_startup_s": "startup_s",
    "server_args": "args",
}
"""Flat keys of results stored before LaunchedServer -> its field names."""


class PrefixCacheStats(Strict):
    """An in-process engine's own prefix-cache counters over the run."""

    hit_rate: float | None = Field(None, ge=0, le=1)
    queries: float | None = Field(None, ge=0, description="Query tokens looked up.")


class GpuProcess(Strict):
    """A process NVML lists on a GPU (bench/run/telemetry.py `gpu_processes`)."""

    pid: int
    used_bytes: int | None = None
    device: int | None = None
    name: str | None = None


class PrometheusSample(Strict):
    """One reading of a served engine's counters and gauges: a /metrics scrape, or the
    in-process vLLM engine's prefix-cache counters under the names its server exports."""

    t_ns: int = Field(description="When the scrape was sent (CLOCK ns).")
    t_received_ns: int | None = Field(None, description="When it was answered; None = instant.")
    values: dict[str, float] = Field(
        default_factory=dict, description="Metric name (summed over label sets) -> value."
    )
    json_stats: JsonValue = Field(None, description="trtllm-serve's JSON iteration stats.")

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        """Results stored before this model kept one flat dict per scrape: t_ns, t_received_ns,
        `json` (trtllm-serve) and every metric name beside them."""
        if not isinstance(data, dict) or "values" in data or "json_stats" in data:
            return data
        times = {k: data[k] for k in ("t_ns", "t_received_ns") if k in data}
        values = {k: v for k, v in data.items() if k not in {"t_ns", "t_received_ns", "json"}}
        return {**times, "values": values, "json_stats": data.get("json")}


class EngineFacts(Strict):
    """What the engine reports about itself once loaded (version, kernels, settings in force)."""

    framework: str | None = Field(None, description="The framework as the engine names itself.")
    version: str | None = Field(None, description="The framework's version.")
    device: str | None = Field(None, description="Where it ran: cuda, cpu.")
    dtype: str | None = None
    cuda_graphs: bool | None = Field(None, description="CUDA graphs in use; None = not reported.")
    enforce_eager: bool | None = Field(None, description="vLLM's eager mode (no CUDA graphs).")
    event_loop: str | None = Field(None, description="The worker's asyncio loop: uvloop, asyncio.")
    cuda_visible_devices: str | None = Field(None, description="The worker's visible GPUs.")
    server: LaunchedServer | None = Field(None, description="A server the backend launched.")
    prefix_cache: PrefixCacheStats | None = None
    extra: dict[str, JsonValue] = Field(
        default_factory=dict,
        description="Every other fact, under the framework's own name (max_num_seqs, providers).",
    )

    @property
    def kv_block_tokens(self) -> int | None:
        """The KV cache's block size in tokens, where the engine reported it (vLLM's
        `block_size`: 16 on GPUs, 128 on its CPU build); prefix caching finds whole blocks."""
        value = self.extra.get("block_size")
        return value if isinstance(value, int) and value > 0 else None

    @model_validator(mode="before")
    @classmethod
    def _from_flat(cls, data: Any) -> Any:
        """A flat dict (a backend's report, or a result stored before these models): known keys
        become fields, `server_*` keys the launched server, everything else `extra`."""
        if not isinstance(data, dict):
            return data
        known = set(cls.model_fields)
        out: dict[str, Any] = {}
        extra = dict(data.get("extra") or {})
        flat_server = isinstance(data.get("server"), str)  # older results: `server: "vllm"`
        server = {
            _SERVER_KEYS[k]: to_jsonable_python(v, fallback=str)
            for k, v in data.items()
            if k in _SERVER_KEYS and flat_server
        }
        for key, value in data.items():
            if key == "extra" or (flat_server and key in _SERVER_KEYS):
                continue
            if key in known:
                out[key] = value
            else:  # as JSON holds it: a tuple a list, a Path or a model its JSON form
                extra[key] = to_jsonable_python(value, fallback=str)
        if server:
            out["server"] = server
        if extra:
            out["extra"] = extra
        return out


class RunEngine(EngineFacts):
    """`RunResult.engine`: the engine's facts plus how its worker ended and the run's wall time."""

    worker_exit_code: int | None = Field(
        None, description="The engine worker's exit status (None: still running or unknown)."
    )
    processes_left: list[int] = Field(
        default_factory=list, description="Engine processes a stop failed to end (none normally)."
    )
    gpu_processes_left: list[GpuProcess] = Field(
        default_factory=list, description="The run's processes NVML still listed after the stop."
    )
    wall_s: float | None = Field(None, ge=0, description="The run's wall time, load included.")


def prefix_caching_setting(config: RunConfig, engine: EngineFacts | None = None) -> bool | None:
    """Whether the run switched the engine's automatic prefix caching on or off explicitly (the
    run setting `RunConfig.prefix_caching`; stored configs that said it as an engine argument
    load into it); None = the engine's default. Where the run left it to the engine and its
    engine reported the setting in force (vLLM's `enable_prefix_caching`, in `engine.extra`),
    that. The one reading the caching pair and the diagnostics share."""
    if config.prefix_caching is not None:
        return config.prefix_caching
    reported = None if engine is None else engine.extra.get("enable_prefix_caching")
    return reported if isinstance(reported, bool) else None


__all__ = [
    "EngineFacts",
    "GpuProcess",
    "LaunchedServer",
    "PrefixCacheStats",
    "PrometheusSample",
    "RunEngine",
    "prefix_caching_setting",
]
