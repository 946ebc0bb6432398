"""Tests of the `openai` backend: SSE parsing, errors and slots against a labelled test double of an
OpenAI server (fast), then for real against a vLLM server of the CPU build (slow)."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path

import psutil
import pytest
from aiohttp import web

from bench.core.config import GenerateWorkload, LengthDistribution, Precision
from bench.core.engine_facts import PrometheusSample
from bench.core.errors import UserError
from bench.core.schema import ModelInfo
from bench.engines.backends.base import Chunk, GenerateRequest
from bench.engines.backends.openai import (
    DEFAULT_METRIC_NAMES,
    OpenAIBackend,
    OpenAIServerError,
    _chunks_from_sse,
    error_message,
    event_token_count,
    parse_prometheus,
)
from bench.run.workload import RequestFactory
from tests.bench.backends.test_vllm import cpu_attention_compatible

# --------------------------------------------------------------------------- pure parsing


async def _blocks(*blocks: bytes):
    for block in blocks:
        yield block


def _fields(chunks: list[Chunk]) -> list[tuple]:
    return [
        (c.tokens, c.usage_output_tokens, c.usage_input_tokens, c.token_ids, c.text) for c in chunks
    ]


def _canned_answer() -> bytes:
    """benchmarks/client_capacity.py's nginx answer: 16 one-token events, usage, [DONE]."""
    import importlib.util

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "client_capacity.py"
    spec = importlib.util.spec_from_file_location("client_capacity", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    # nginx's string escapes (\n) as the bytes nginx sends
    return module.canned_stream(chat=False).replace("\\n", "\n").encode()


async def test_sse_events_are_the_same_however_the_bytes_arrive() -> None:
    """The stream is read in blocks as they arrive (a whole answer in one, or a line cut
    anywhere): the chunks are the same as line by line, and each event is stamped no earlier
    than the one before."""
    body = _canned_answer()
    by_lines = [c async for c in _chunks_from_sse(_blocks(*body.splitlines(keepends=True)))]
    assert len(by_lines) == 17 and [c.text for c in by_lines[:16]] == [" a"] * 16
    assert by_lines[-1].usage_output_tokens == 16 and by_lines[-1].usage_input_tokens == 128
    whole = [c async for c in _chunks_from_sse(_blocks(body))]
    cuts = [0, 1, 7, 40, 41, 300, 777, len(body) // 2, len(body) - 3, len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(cuts)]
    cut = [c async for c in _chunks_from_sse(_blocks(*pieces))]
    byte_by_byte = [c async for c in _chunks_from_sse(_blocks(*(bytes([b]) for b in body)))]
    for chunks in (whole, cut, byte_by_byte):
        assert _fields(chunks) == _fields(by_lines)
        assert all(a.t_ns <= b.t_ns for a, b in itertools.pairwise(chunks))


async def test_sse_joins_data_lines_and_skips_comments_and_other_fields() -> None:
    stream = _blocks(
        b": keep-alive\r\n\r\n",  # a comment alone is no event
        b"event: message\r\nid: 7\r\n",
        b'data: {"choices": [{"text": "ab",\r\n',
        b'data: "token_ids": [1, 2]}]}\r\n\r\n',  # one event over two data lines
        b'data:{"choices": [{"text": "c"}]}\n\n',  # no space after the colon
        b'data: {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}',
    )  # the stream ends without a newline after its last event
    chunks = [c async for c in _chunks_from_sse(stream)]
    assert _fields(chunks) == [(2, None, None, (1, 2), "ab"), (1, 3, 5, None, "c")]


async def test_sse_line_over_the_limit_fails_the_request() -> None:
    with pytest.raises(OpenAIServerError, match="longer than 64 bytes"):
        [c async for c in _chunks_from_sse(_blocks(b"data: " + b"x" * 100), max_line_bytes=64)]


def test_event_token_count_prefers_exact_sources() -> None:
    assert event_token_count({"choices": [{"text": "ab", "token_ids": [1, 2, 3]}]}, None) == 3
    with_usage = {"choices": [{"text": "x"}], "usage": {"completion_tokens": 7}}
    assert event_token_count(with_usage, 5) == 2
    with_logprobs = {"choices": [{"text": "xy", "logprobs": {"tokens": ["x", "y"]}}]}
    assert event_token_count(with_logprobs, None) == 2
    assert event_token_count({"choices": [{"text": "x"}]}, None) == 1
    # Without usage: an empty text mid-stream is a token whose text is held back; an empty
    # final event (finish_reason set) and an empty chat delta are not counted.
    assert event_token_count({"choices": [{"text": "", "finish_reason": None}]}, None) == 1
    assert event_token_count({"choices": [{"text": "", "finish_reason": "length"}]}, None) == 0
    assert (
        event_token_count({"choices": [{"delta": {"role": "assistant", "content": ""}}]}, None) == 0
    )
    assert event_token_count({"choices": [], "usage": {"completion_tokens": 9}}, 9) == 0


def test_error_message_extracts_the_servers_words() -> None:
    assert error_message('{"error": {"message": "max_tokens too big", "code": 400}}') == (
        "max_tokens too big"
    )
    assert error_message('{"detail": "Not Found"}') == "Not Found"
    assert error_message("plain failure") == "plain failure"


def test_parse_prometheus_sums_label_sets_and_filters_names() -> None:
    text = (
        "# HELP vllm:num_requests_running Running.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 2.0\n'
        "# TYPE vllm:num_preemptions counter\n"
        'vllm:num_preemptions_total{engine="0"} 4.0\n'
        "# TYPE other gauge\nother 1.0\n"
    )
    names = {"vllm:num_requests_running", "vllm:num_preemptions_total"}
    assert parse_prometheus(text, names) == {
        "vllm:num_requests_running": 5.0,
        "vllm:num_preemptions_total": 4.0,
    }
    assert parse_prometheus(text, None)["other"] == 1.0


async def _lines(*lines: bytes):
    for line in lines:
        yield line


async def test_chunks_hold_usage_on_the_last_chunk() -> None:
    def event(text: str, completion_tokens: int) -> bytes:
        body = {"choices": [{"text": text}], "usage": {"completion_tokens": completion_tokens}}
        return b"data: " + json.dumps(body).encode() + b"\n"

    usage = {"prompt_tokens": 11, "completion_tokens": 4}
    stream = _lines(
        event("a", 1),
        b"\n",
        event("bc", 3),  # two tokens merged into one event
        b"\n",
        event("", 3),  # no new token: no chunk
        b"\n",
        event("d", 4),
        b"\n",
        b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n",
        b"\n",
        b"data: [DONE]\n",
        b"\n",
    )
    chunks = [chunk async for chunk in _chunks_from_sse(stream)]
    assert [c.tokens for c in chunks] == [1, 2, 1]
    assert [c.usage_output_tokens for c in chunks] == [None, None, 4]
    assert chunks[-1].usage_input_tokens == 11
    assert all(a.t_ns <= b.t_ns for a, b in itertools.pairwise(chunks))


async def test_error_event_mid_stream_raises() -> None:
    stream = _lines(b'data: {"error": {"message": "engine died"}}\n', b"\n")
    with pytest.raises(OpenAIServerError, match="engine died"):
        [chunk async for chunk in _chunks_from_sse(stream)]


def test_options_need_a_server_and_reject_unknown_names() -> None:
    with pytest.raises(UserError, match="base_url"):
        OpenAIBackend({})
    with pytest.raises(UserError, match="max_conections"):
        OpenAIBackend({"base_url": "http://127.0.0.1:1", "max_conections": 4})
    backend = OpenAIBackend({"base_url": "http://127.0.0.1:1", "prompt_format": "text"})
    assert backend.options.prompt_format == "text"


# --------------------------------------------------------------------------- test double server


class FakeOpenAIServer:
    """TEST DOUBLE of an OpenAI-compatible server (aiohttp), for error paths and client logic.

    /v1/completions streams one event per token with continuous usage; max_tokens 400 -> HTTP
    400 with an OpenAI error body, 500 -> HTTP 500 text. It records request bodies and the
    highest number of requests it saw in flight. /metrics has vLLM's prefix-cache counters, moved
    by each finished request: PROMPT_TOKENS queried, CACHED_TOKENS of them hit.
    """

    PROMPT_TOKENS = 3
    CACHED_TOKENS = 2

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.finished = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> FakeOpenAIServer:
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/chat/completions", self.chat_completions)
        app.router.add_get("/metrics", self.metrics)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "double-model"}]})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text="# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0"}} {self.in_flight}\n'
            f'vllm:prefix_cache_queries_total{{engine="0"}} {self.finished * self.PROMPT_TOKENS}\n'
            f'vllm:prefix_cache_hits_total{{engine="0"}} {self.finished * self.CACHED_TOKENS}\n'
        )

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self.completions(request, chat=True)

    async def completions(self, request: web.Request, chat: bool = False) -> web.StreamResponse:
        body = await request.json()
        body["_path"] = request.path
        self.bodies.append(body)
        n = body["max_tokens"]
        if n == 400:
            return web.json_response(
                {"error": {"message": "max_tokens is too large", "type": "BadRequestError"}},
                status=400,
            )
        if n == 500:
            return web.Response(status=500, text="Internal Server Error")
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for i in range(n):
                await asyncio.sleep(0.002)
                choice = (
                    {"index": 0, "delta": {"content": f"t{i} "}}
                    if chat
                    else {"index": 0, "text": f"t{i} "}
                )
                event = {
                    "choices": [choice],
                    "usage": {"prompt_tokens": 3, "completion_tokens": i + 1},
                }
                await response.write(f"data: {json.dumps(event)}\n\n".encode())
            usage = {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": n + 3}
            await response.write(
                f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode()
            )
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            self.finished += 1
            return response
        finally:
            self.in_flight -= 1


@pytest.fixture
async def fake_server():
    server = await FakeOpenAIServer().start()
    yield server
    await server.stop()


MODEL = ModelInfo(name="double", path="/nonexistent")


async def _collect(backend: OpenAIBackend, request: GenerateRequest) -> list[Chunk]:
    return [chunk async for chunk in backend.stream(request)]


async def test_stream_against_double_and_request_body(fake_server: FakeOpenAIServer) -> None:
    backend = OpenAIBackend(
        {
            "base_url": fake_server.url,
            "metrics_interval_s": 0.05,
            "extra_body": {"top_k": 1},
            "prompt_format": "tokens",
        }
    )
    info = await backend.load(MODEL, GenerateWorkload(), Precision(), "auto")
    try:
        assert info.engine.extra["served_model"] == "double-model"
        chunks = await _collect(backend, GenerateRequest("r1", [5, 6, 7], 6))
        assert sum(c.tokens for c in chunks) == 6 == chunks[-1].usage_output_tokens
        body = fake_server.bodies[-1]
        assert body["prompt"] == [5, 6, 7] and body["stream"] is True
        assert body["min_tokens"] == 6 and body["ignore_eos"] is True
        assert body["stream_options"]["include_usage"] is True
        assert body["top_k"] == 1 and body["model"] == "double-model"
        await asyncio.sleep(0.2)
        samples = backend.server_metrics()
        assert samples and "vllm:num_requests_running" in samples[0].values
    finally:
        await backend.close()


async def test_counters_are_read_at_both_ends_of_a_window_shorter_than_the_polling(
    fake_server: FakeOpenAIServer,
) -> None:
    """Polling reads /metrics once an hour here, so the only reads inside the run are the ones the
    runner asks for where the measured window starts and ends: the hit rate covers exactly the
    measured requests (the warm-up's excluded), however short the window is."""
    from bench.core.config import ConcurrencyLoad, RunConfig
    from bench.core.metrics import prefix_cache_hit_rate
    from bench.run.runner import RunEvents, execute

    config = RunConfig(
        backend="openai",
        model="double",
        engine_args={
            "base_url": fake_server.url,
            "metrics_interval_s": 3600,
            "prompt_format": "tokens",
        },
        workload=GenerateWorkload(output_tokens=LengthDistribution(mean=2)),
        load=ConcurrencyLoad(concurrency=2, duration_s=None, max_requests=8, warmup_requests=2),
    )
    model = ModelInfo(name="double", path="/nonexistent", vocab_size=1000)
    backend = OpenAIBackend(config.engine_args)
    await backend.load(model, config.workload, config.precision, "auto")
    records = []
    try:
        events = RunEvents(records.append, lambda _phase: None, lambda _progress: None)
        await execute(config, backend, model, events, asyncio.Event())
    finally:
        await backend.close()
    measured = [r for r in records if not r.warmup]
    assert len(measured) == 8 and fake_server.finished == 10
    window = (min(r.start_ns for r in measured), max(r.end_ns for r in measured))
    samples = backend.server_metrics()
    assert len(samples) == 3  # the polling read at load, then one at each end of the window
    assert samples[1].t_received_ns <= window[0] and samples[2].t_ns >= window[1]
    rate, queries = prefix_cache_hit_rate(samples, window)
    assert queries == 8 * FakeOpenAIServer.PROMPT_TOKENS
    assert rate == pytest.approx(FakeOpenAIServer.CACHED_TOKENS / FakeOpenAIServer.PROMPT_TOKENS)


async def test_strict_server_mode_sends_no_extras(fake_server: FakeOpenAIServer) -> None:
    backend = OpenAIBackend(
        {
            "base_url": fake_server.url,
            "sampling_extras": False,
            "scrape_metrics": False,
            "prompt_format": "tokens",
        }
    )
    await backend.load(MODEL, GenerateWorkload(), Precision(), "auto")
    try:
        await _collect(backend, GenerateRequest("r1", [5], 2))
        body = fake_server.bodies[-1]
        assert "min_tokens" not in body and "ignore_eos" not in body
        assert body["stream_options"] == {"include_usage": True}
    finally:
        await backend.close()


@pytest.mark.parametrize(
    ("max_tokens", "expected"),
    [(400, r"HTTP 400 .*max_tokens is too large"), (500, "HTTP 500 .*Internal Server Error")],
)
async def test_http_errors_raise_with_status_and_message(
    fake_server: FakeOpenAIServer, max_tokens: int, expected: str
) -> None:
    backend = OpenAIBackend(
        {"base_url": fake_server.url, "scrape_metrics": False, "prompt_format": "tokens"}
    )
    await backend.load(MODEL, GenerateWorkload(), Precision(), "auto")
    try:
        with pytest.raises(OpenAIServerError, match=expected):
            await _collect(backend, GenerateRequest("bad", [1], max_tokens))
    finally:
        await backend.close()


async def test_client_slots_cap_in_flight_requests(fake_server: FakeOpenAIServer) -> None:
    backend = OpenAIBackend(
        {
            "base_url": fake_server.url,
            "max_connections": 2,
            "scrape_metrics": False,
            "prompt_format": "tokens",
        }
    )
    await backend.load(MODEL, GenerateWorkload(), Precision(), "auto")
    try:
        requests = [GenerateRequest(f"r{i}", [1, 2], 5) for i in range(6)]
        results = await asyncio.gather(*(_collect(backend, r) for r in requests))
        assert all(sum(c.tokens for c in chunks) == 5 for chunks in results)
        assert fake_server.max_in_flight == 2
    finally:
        await backend.close()


async def test_text_is_the_default_and_decoded_before_the_request_is_timed(
    fake_server: FakeOpenAIServer, tiny_llama: ModelInfo
) -> None:
    """Default prompt form = text: prepare_request turns the token IDs into text with the
    model's tokenizer (the runner calls it before start_ns), and stream() sends that text as is.
    The text re-tokenises (with the BOS the server adds) to as many tokens as were asked for;
    a plain decode of the same IDs does not (match_prompt_tokens=False keeps that)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama.path)
    factory = RequestFactory(
        GenerateWorkload(prompt_tokens=LengthDistribution(mean=128)), 32000, seed=3
    )
    requests = [next(factory) for _ in range(16)]
    backend = OpenAIBackend({"base_url": fake_server.url, "scrape_metrics": False})
    assert backend.options.prompt_format == "text" and backend.options.match_prompt_tokens
    info = await backend.load(tiny_llama, GenerateWorkload(), Precision(), "auto")
    try:
        assert info.engine.extra["prompt_format"] == "text"
        prepared = [backend.prepare_request(request) for request in requests]
        server_side = [len(tokenizer(r.prompt_text)["input_ids"]) for r in prepared]
        assert sum(server_side) / len(server_side) < 128.5 and min(server_side) >= 128
        plain = [len(tokenizer(tokenizer.decode(list(r.prompt_token_ids)))["input_ids"])
                 for r in requests]  # fmt: skip
        assert sum(plain) / len(plain) > 132  # what unmatched text prompts cost the server
        assert backend.prepare_requests(requests) == prepared  # the batch path: same texts
        backend._tokenizer = None  # stream() must not need the tokenizer any more
        await _collect(backend, prepared[0])
        body = fake_server.bodies[-1]
        assert body["_path"] == "/v1/completions" and body["prompt"] == prepared[0].prompt_text
    finally:
        await backend.close()
    unmatched = OpenAIBackend(
        {"base_url": fake_server.url, "scrape_metrics": False, "match_prompt_tokens": False}
    )
    await unmatched.load(tiny_llama, GenerateWorkload(), Precision(), "auto")
    try:
        text = unmatched.prepare_request(requests[0]).prompt_text
        assert text == tokenizer.decode(list(requests[0].prompt_token_ids))
    finally:
        await unmatched.close()


async def test_continuous_usage_can_be_left_off_as_vllms_client_does(
    fake_server: FakeOpenAIServer,
) -> None:
    backend = OpenAIBackend(
        {
            "base_url": fake_server.url,
            "scrape_metrics": False,
            "prompt_format": "tokens",
            "continuous_usage": False,
        }
    )
    await backend.load(MODEL, GenerateWorkload(), Precision(), "auto")
    try:
        chunks = await _collect(backend, GenerateRequest("r1", [5, 6], 4))
        body = fake_server.bodies[-1]
        assert body["stream_options"] == {"include_usage": True}
        assert body["ignore_eos"] is True and body["min_tokens"] == 4
        assert chunks[-1].usage_output_tokens == 4 and chunks[-1].usage_input_tokens == 3
    finally:
        await backend.close()


async def test_chat_form_sends_messages_to_chat_completions(
    fake_server: FakeOpenAIServer, tiny_llama: ModelInfo
) -> None:
    backend = OpenAIBackend(
        {"base_url": fake_server.url, "scrape_metrics": False, "prompt_format": "chat"}
    )
    await backend.load(tiny_llama, GenerateWorkload(), Precision(), "auto")
    try:
        messages = ({"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"})
        request = GenerateRequest(
            "c1", [300, 301], 4, prompt_text="be brief\nhi", messages=messages
        )
        chunks = await _collect(backend, backend.prepare_request(request))
        body = fake_server.bodies[-1]
        assert body["_path"] == "/v1/chat/completions"
        assert body["messages"] == [dict(m) for m in messages] and "prompt" not in body
        assert sum(c.tokens for c in chunks) == 4 == chunks[-1].usage_output_tokens
        assert "".join(c.text or "" for c in chunks) == "t0 t1 t2 t3 "  # chat deltas' content
        plain = backend.prepare_request(GenerateRequest("c2", [300, 301], 2))
        assert plain.messages == ({"role": "user", "content": plain.prompt_text},)
    finally:
        await backend.close()


def test_prefix_cache_hit_rate_from_scraped_counters() -> None:
    from bench.core.metrics import prefix_cache_hit_rate
    from bench.engines.backends.openai import parse_prometheus

    def scrape(t_ns: int, queries: float, hits: float) -> dict:
        text = (
            "# TYPE vllm:prefix_cache_queries counter\n"
            f'vllm:prefix_cache_queries_total{{engine="0"}} {queries}\n'
            "# TYPE vllm:prefix_cache_hits counter\n"
            f'vllm:prefix_cache_hits_total{{engine="0"}} {hits}\n'
        )
        values = parse_prometheus(text, set(DEFAULT_METRIC_NAMES))
        return PrometheusSample(t_ns=t_ns, values=values)

    samples = [scrape(0, 100, 0), scrape(10, 150, 20), scrape(20, 1150, 620), scrape(30, 1200, 640)]
    # Whole series: (640 - 0) / (1200 - 100); measured window 10..20: (620 - 20) / (1150 - 150).
    assert prefix_cache_hit_rate(samples) == (640 / 1100, 1100)
    assert prefix_cache_hit_rate(samples, (10, 20)) == (0.6, 1000)
    assert prefix_cache_hit_rate([scrape(0, 5, 0), scrape(1, 5, 0)]) == (None, None)
    assert prefix_cache_hit_rate([PrometheusSample(t_ns=0)]) == (None, None)


# --------------------------------------------------------------------------- real vLLM server


def _vllm_installed() -> bool:
    from bench.engines.backends.vllm import vllm_version

    return vllm_version() is not None


async def _check_real_requests(backend: OpenAIBackend, prompt_format: str) -> None:
    lengths = [3, 9, 17, 5]
    requests = [
        GenerateRequest(f"{prompt_format}-{i}", list(range(100, 100 + 8 + i)), n)
        for i, n in enumerate(lengths)
    ]
    results = await asyncio.gather(*(_collect(backend, r) for r in requests))
    for request, chunks in zip(requests, results, strict=True):
        assert chunks[-1].usage_output_tokens == request.output_tokens
        assert sum(c.tokens for c in chunks) == request.output_tokens
        assert all(a.t_ns <= b.t_ns for a, b in itertools.pairwise(chunks))
        if prompt_format == "tokens":
            assert chunks[-1].usage_input_tokens == len(request.prompt_token_ids)
        else:  # decoded text re-tokenizes to some other length
            assert chunks[-1].usage_input_tokens > 0


@pytest.mark.slow
@pytest.mark.skipif(not _vllm_installed(), reason="vLLM is not installed")
async def test_real_vllm_server_launched_measured_and_stopped(
    tiny_llama: ModelInfo, tmp_path: Path
) -> None:
    """A REAL vLLM OpenAI server of the installed (CPU) build, launched by the backend on
    127.0.0.1: token-ID and text prompts, usage counts, /metrics scraped, and after close()
    no process of the server's tree is left."""
    model = cpu_attention_compatible(tiny_llama, tmp_path / "tiny-llama-hd32")
    precision = Precision(dtype="float32")
    launched = OpenAIBackend(
        {
            "launch": "vllm",
            "server_args": {"max_model_len": 512, "max_num_seqs": 8, "enforce_eager": True},
            "server_env": {"VLLM_CPU_KVCACHE_SPACE": "1"},
            "server_log_path": str(tmp_path / "server.log"),
            "startup_timeout_s": 300,
            "metrics_interval_s": 0.2,
            "max_connections": 8,
            "prompt_format": "tokens",
        }
    )
    info = await launched.load(model, GenerateWorkload(), precision, "auto")
    try:
        assert info.engine.server.name == "vllm" and info.engine.server.startup_s > 0
        assert "--enforce-eager" in info.engine.server.command
        await _check_real_requests(launched, "tokens")
        text_client = OpenAIBackend(
            {"base_url": launched.base_url, "prompt_format": "text", "scrape_metrics": False}
        )
        await text_client.load(model, GenerateWorkload(), precision, "auto")
        try:
            await _check_real_requests(text_client, "text")
        finally:
            await text_client.close()
        await asyncio.sleep(0.5)  # at least one scrape after the requests
        samples = launched.server_metrics()
        assert any(key.startswith("vllm:") for sample in samples for key in sample.values)
        finished = [
            s.values["vllm:request_success_total"]
            for s in samples
            if "vllm:request_success_total" in s.values
        ]
        assert max(finished) >= 8
        leader = psutil.Process(launched._launcher.pid)
        family = [leader, *leader.children(recursive=True)]
        assert len(family) >= 2  # API server + engine core (vLLM V1 runs the engine apart)
    finally:
        await launched.close()
    _gone, alive = psutil.wait_procs(family, timeout=5)
    assert not alive, f"still running: {[p.pid for p in alive]}"


async def test_chat_form_without_a_chat_template_is_refused_before_launching(
    tiny_llama: ModelInfo,
) -> None:
    backend = OpenAIBackend({"launch": "vllm", "prompt_format": "chat", "scrape_metrics": False})
    with pytest.raises(UserError, match="no chat template"):
        await backend.load(tiny_llama, GenerateWorkload(), Precision(), "auto")
    assert backend._launcher is None  # no server was started
