"""Traffic shapes on the fake backend (a TEST DOUBLE: timed fake tokens, no inference) in
virtual time: shared-prefix pools, multi-turn conversations, trace replay, prompt files, and
the bad-file paths (one line, exit code 2)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.core.config import (
    ConcurrencyLoad,
    ConversationSpec,
    GenerateWorkload,
    LengthDistribution,
    PrefixPool,
    PromptFile,
    ReplayLoad,
    RunConfig,
)
from bench.core.errors import UserError
from bench.core.metrics import summarize
from bench.core.percentiles import Percentiles
from bench.core.schema import ModelInfo, RequestRecord
from bench.engines.backends.base import Chunk, GenerateRequest
from bench.engines.backends.fake import FakeBackend, fake_output_base
from bench.run.conversations import ConversationRequests
from bench.run.load.driver import PhaseSpec, run_phase
from bench.run.load.replay import Replay, TraceRequests, replay_validity_reasons
from bench.run.runner import RunEvents, execute
from bench.run.traffic_files import read_csv_trace, read_mooncake, read_prompt_file
from bench.run.workload import RequestFactory

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "traces"
MODEL = ModelInfo(name="tiny", path="tiny", vocab_size=1000)


def fixed(n: int) -> LengthDistribution:
    return LengthDistribution(mean=n)


async def execute_fake(workload, load, engine_args=None):
    config = RunConfig(
        backend="fake",
        model="tiny",
        engine_args=engine_args or {"ttft_s": 0.05, "itl_s": 0.01},
        workload=workload,
        load=load,
    )
    backend = FakeBackend(config.engine_args)
    await backend.load(MODEL, config.workload, config.precision, "cpu")
    records: list[RequestRecord] = []
    events = RunEvents(records.append, lambda _p: None, lambda _p: None)
    outcome = await execute(config, backend, MODEL, events, asyncio.Event())
    return outcome, records


# --------------------------------------------------------------------------- shared prefixes


def test_prefix_pool_prompts_are_prefix_plus_unique_suffix_and_seeded():
    workload = GenerateWorkload(
        prompt_tokens=fixed(16),
        output_tokens=fixed(4),
        prefix=PrefixPool(count=3, tokens=LengthDistribution(kind="uniform", mean=64, spread=8)),
        seed=7,
    )
    factory = RequestFactory(workload, 1000)
    pool = factory.prefixes
    assert len(pool) == 3 and len({tuple(p) for p in pool}) == 3
    requests = [next(factory) for _ in range(300)]
    used = set()
    for request in requests:
        prefix = pool[request.prefix_id]
        assert request.prompt_token_ids[: len(prefix)] == prefix
        assert request.prefix_tokens == len(prefix)
        assert len(request.prompt_token_ids) == len(prefix) + 16
        used.add(request.prefix_id)
    assert used == {0, 1, 2}
    suffixes = {tuple(r.prompt_token_ids[r.prefix_tokens :]) for r in requests}
    assert len(suffixes) == 300  # the suffix is unique per request
    again = [next(RequestFactory(workload, 1000)) for _ in range(1)]
    assert again[0] == requests[0]  # same seed, same sequence


def test_a_workload_without_prefix_keeps_its_old_token_stream():
    """Adding the prefix RNG streams did not move the prompt tokens of existing workloads."""
    workload = GenerateWorkload(prompt_tokens=fixed(8), seed=3)
    first = next(RequestFactory(workload, 1000))
    token_seq = np.random.SeedSequence(3).spawn(3)[2]
    expected = np.random.default_rng(token_seq).integers(100, 1000, size=8).tolist()
    assert first.prompt_token_ids == expected and first.prefix_id is None


def test_weighted_pick_follows_the_weights():
    workload = GenerateWorkload(
        prompt_tokens=fixed(4),
        prefix=PrefixPool(count=3, tokens=fixed(8), pick="weighted", weights=[3, 1, 0]),
    )
    factory = RequestFactory(workload, 1000)
    picks = [next(factory).prefix_id for _ in range(4000)]
    assert picks.count(2) == 0
    assert picks.count(0) / len(picks) == pytest.approx(0.75, abs=0.03)
    with pytest.raises(ValueError, match="3 weights"):
        PrefixPool(count=3, pick="weighted", weights=[1, 2])


async def test_run_summary_reports_the_prefix_share_of_input_tokens(time_travel):
    workload = GenerateWorkload(
        prompt_tokens=fixed(32),
        output_tokens=fixed(3),
        prefix=PrefixPool(count=4, tokens=fixed(96)),
    )
    outcome, records = await execute_fake(
        workload, ConcurrencyLoad(concurrency=4, duration_s=5, warmup_requests=2)
    )
    measured = [r for r in records if not r.warmup]
    assert measured and all(r.prefix_tokens == 96 and r.prefix_id is not None for r in measured)
    assert outcome.summary.prefix_tokens == 96 * len(measured)
    assert outcome.summary.prefix_share_of_input_tokens == pytest.approx(96 / 128)
    plain, _ = await execute_fake(
        GenerateWorkload(output_tokens=fixed(3)), ConcurrencyLoad(concurrency=2, duration_s=2)
    )
    assert plain.summary.prefix_share_of_input_tokens is None


# --------------------------------------------------------------------------- conversations


async def test_each_turn_resends_the_history_with_the_actual_outputs(time_travel):
    workload = GenerateWorkload(prompt_tokens=fixed(10), output_tokens=fixed(5))
    spec = ConversationSpec(turns=fixed(3), user_tokens=fixed(4), think_time_ms=fixed(500))
    conversations = ConversationRequests(RequestFactory(workload, 1000), spec, seed=0)
    backend = FakeBackend({"ttft_s": 0.05, "itl_s": 0.01})
    await backend.load(MODEL, workload, RunConfig(backend="fake", model="t").precision, "cpu")
    sent: dict[str, GenerateRequest] = {}

    def send(request):
        sent[request.id] = request
        return backend.stream(request)

    records: list[RequestRecord] = []
    phase = PhaseSpec("concurrency", "concurrency", 2, None, max_requests=12)
    await run_phase(phase, conversations.observe(send), conversations, records.append, 30)
    assert len(records) == 12 and all(r.ok for r in records)
    assert conversations.started == 4 and conversations.finished == 4
    by_id = {r.id: r for r in records}
    for request in sent.values():
        if request.turn == 0:
            assert len(request.prompt_token_ids) == 10 and request.prefix_tokens == 0
            continue
        previous = sent[f"c{request.conversation:06d}t{request.turn - 1:02d}"]
        base = fake_output_base(previous.id)
        output = list(range(base, base + 5))  # what the fake backend actually returned
        history = previous.prompt_token_ids + output
        assert request.prompt_token_ids[: len(history)] == history
        assert len(request.prompt_token_ids) == len(history) + 4
        assert request.prefix_tokens == len(history)
        # The closed loop is per conversation: the next turn starts after the previous one
        # ended plus the think time, which is outside the measured request.
        gap_ns = by_id[request.id].start_ns - by_id[previous.id].end_ns
        assert gap_ns == pytest.approx(500_000_000, abs=1_000_000)
    summary = summarize(records)
    assert [t.turn for t in summary.by_turn] == [0, 1, 2]
    assert [t.requests for t in summary.by_turn] == [4, 4, 4]
    assert [t.input_tokens_mean for t in summary.by_turn] == [10, 19, 28]
    assert all(t.ttft_ms.p50 == pytest.approx(50) for t in summary.by_turn)


class CharCodec:
    """TEST DOUBLE tokenizer: one token per character (ord/chr)."""

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


async def test_text_histories_use_the_output_text_and_chat_messages(time_travel):
    workload = GenerateWorkload(prompt_tokens=fixed(3), output_tokens=fixed(2))
    spec = ConversationSpec(turns=fixed(2), user_tokens=fixed(2))
    conversations = ConversationRequests(
        RequestFactory(workload, 200), spec, seed=0, codec=CharCodec()
    )
    sent = []

    async def text_server(request):  # TEST DOUBLE server: answers "<id>!" as two text chunks
        sent.append(request)
        yield Chunk(0, 1, text=request.id[-3:])
        yield Chunk(0, 1, text="!")

    records = []
    phase = PhaseSpec("concurrency", "concurrency", 1, None, max_requests=2)
    await run_phase(phase, conversations.observe(text_server), conversations, records.append, 30)
    first, second = sent
    assert second.prompt_text.startswith(first.prompt_text + "t00!")
    assert [m["role"] for m in second.messages] == ["user", "assistant", "user"]
    assert second.messages[1]["content"] == "t00!"
    assert second.prompt_token_ids == CharCodec().encode(second.prompt_text)


async def test_conversation_run_reports_ttft_by_turn(time_travel):
    workload = GenerateWorkload(
        output_tokens=fixed(3), conversation=ConversationSpec(turns=fixed(4), user_tokens=fixed(8))
    )
    outcome, records = await execute_fake(
        workload, ConcurrencyLoad(concurrency=3, duration_s=5, warmup_requests=0)
    )
    assert {r.turn for r in records} == {0, 1, 2, 3}
    turns = outcome.summary.by_turn
    assert [t.turn for t in turns] == [0, 1, 2, 3]
    assert sum(t.requests for t in turns) == outcome.summary.successful
    assert turns[3].input_tokens_mean > turns[0].input_tokens_mean
    assert outcome.summary.prefix_share_of_input_tokens > 0  # the history is the shared part


# --------------------------------------------------------------------------- trace replay


def write_mooncake(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


MOONCAKE_ROWS = [
    {"timestamp": 1000, "input_length": 20, "output_length": 3, "hash_ids": [1, 2, 3]},
    {"timestamp": 1500, "input_length": 18, "output_length": 2, "hash_ids": [1, 2, 7]},
    {"timestamp": 1500, "input_length": 12, "output_length": 4, "hash_ids": [9, 2]},
    {"timestamp": 4000, "input_length": 30, "output_length": 2, "hash_ids": [1, 2, 3, 4]},
]


def test_mooncake_blocks_reproduce_prefix_reuse(tmp_path):
    rows = read_mooncake(write_mooncake(tmp_path / "t.jsonl", MOONCAKE_ROWS))
    assert [r.t_ms for r in rows] == [0, 500, 500, 3000]  # re-based to the first send
    requests = list(TraceRequests(rows, 1000, block_size=8))
    assert [len(r.prompt_token_ids) for r in requests] == [20, 18, 12, 30]
    a, b, c, d = (r.prompt_token_ids for r in requests)
    assert a[:16] == b[:16] and a[16:18] != b[16:18]  # blocks 1, 2 shared; 3 vs 7 differ
    assert c[8:12] == a[8:12]  # block 2 is the same block wherever it appears
    assert d[:20] == a and len(d) == 30  # 1, 2, 3 in full, then block 4 cut to 6 tokens
    assert [r.prefix_tokens for r in requests] == [0, 16, 0, 24]


async def test_replay_sends_at_trace_times_with_trace_lengths(time_travel, tmp_path):
    trace = write_mooncake(tmp_path / "t.jsonl", MOONCAKE_ROWS)
    load = ReplayLoad(trace=str(trace), time_scale=0.5, block_size=8, warmup_requests=1)
    outcome, records = await execute_fake(GenerateWorkload(output_tokens=fixed(2)), load)
    replayed = [r for r in records if r.phase == "replay"]
    assert len(replayed) == 4 and all(r.ok for r in replayed)
    start = replayed[0].scheduled_ns
    offsets_ms = sorted((r.scheduled_ns - start) / 1e6 for r in replayed)
    assert offsets_ms == pytest.approx([0, 250, 250, 1500])  # trace times x 0.5
    assert sorted(r.input_tokens for r in replayed) == [12, 18, 20, 30]
    assert sorted(r.output_tokens for r in replayed) == [2, 2, 3, 4]
    assert all(r.start_ns - r.scheduled_ns == 0 for r in replayed)  # lateness, virtual time
    report = outcome.pattern_report
    assert report.pattern == "replay" and report.trace_rows == 4
    assert len(report.trace_sha256) == 64
    assert report.scheduling_lag_ms["replay"].p99 == 0
    assert replay_validity_reasons(load, report) == []
    late = report.model_copy(
        update={"scheduling_lag_ms": {"replay": Percentiles(mean=9, p50=5, p90=9, p99=40)}}
    )
    assert "fell behind" in replay_validity_reasons(load, late)[0]
    assert replay_validity_reasons(load, None) == ["replay: no send was recorded"]


async def test_a_replay_that_leaves_rows_unsent_is_invalid_saying_so(time_travel, tmp_path):
    """A later row far in the future (or a huge time_scale) ends the replay at max_duration_s
    with rows never sent: the run is INVALID naming them, not a replay of the trace."""
    rows = [{**row, "timestamp": 1000 + index} for index, row in enumerate(MOONCAKE_ROWS[:3])]
    rows.append({**MOONCAKE_ROWS[3], "timestamp": 10**12})  # 31 years later
    trace = write_mooncake(tmp_path / "t.jsonl", rows)
    load = ReplayLoad(trace=str(trace), block_size=8, warmup_requests=0, max_duration_s=5)
    outcome, records = await execute_fake(GenerateWorkload(output_tokens=fixed(2)), load)
    assert len([r for r in records if r.phase == "replay"]) == 3
    report = outcome.pattern_report
    assert report.incomplete == "max_duration_s reached" and report.trace_rows == 4
    [reason] = replay_validity_reasons(load, report)
    assert reason.startswith("replay left 1 of 4 trace rows unsent (max_duration_s reached)")


def test_replay_request_cap_and_azure_csv_layout():
    load = ReplayLoad(trace=str(EXAMPLES / "azure_small.csv"), max_requests=50)
    replay = Replay(load)
    assert len(replay.rows) == 50 and replay.rows[0].t_ms == 0
    assert all(a.t_ms <= b.t_ms for a, b in zip(replay.rows, replay.rows[1:], strict=False))
    rows = read_csv_trace(
        EXAMPLES / "azure_small.csv", "TIMESTAMP", "ContextTokens", "GeneratedTokens"
    )
    assert len(rows) == 120 and all(r.input_tokens >= 16 for r in rows)
    moon = Replay(ReplayLoad(trace=str(EXAMPLES / "mooncake_small.jsonl")))
    assert len(moon.rows) == 120 and all(r.hash_ids for r in moon.rows)


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("gone.csv", None, "does not exist"),
        ("bin.csv", b"\x00\x01\x02TIMESTAMP", "binary"),
        ("cols.csv", b"time,in,out\n1,2,3\n", "missing column(s) TIMESTAMP"),
        ("back.csv", b"TIMESTAMP,ContextTokens,GeneratedTokens\n2,5,5\n1,5,5\n", "backwards"),
        ("neg.csv", b"TIMESTAMP,ContextTokens,GeneratedTokens\n1,-5,5\n", "whole number"),
        (
            "back.jsonl",
            b'{"timestamp": 5, "input_length": 1, "output_length": 1}\n'
            b'{"timestamp": 4, "input_length": 1, "output_length": 1}\n',
            "backwards",
        ),
        ("field.jsonl", b'{"timestamp": 5, "input_length": 1}\n', "output_length"),
        ("empty.jsonl", b"\n\n", "empty"),
    ],
)
def test_bad_trace_files_are_one_user_error(tmp_path, name, content, needle):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        Replay(ReplayLoad(trace=str(path)))


def test_huge_files_are_refused(tmp_path, monkeypatch):
    import bench.run.traffic_files as traffic_files

    monkeypatch.setattr(traffic_files, "MAX_TRAFFIC_FILE_BYTES", 100)
    path = write_mooncake(tmp_path / "big.jsonl", MOONCAKE_ROWS * 3)
    with pytest.raises(UserError, match="limit"):
        read_mooncake(path)


def test_the_pre_run_check_reads_a_replays_trace_and_nothing_else(tmp_path):
    from bench.run.api import check_traffic_files

    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n3,10,10\n1,10,10\n")

    def config(load):
        return RunConfig(backend="fake", model="tiny", load=load)

    with pytest.raises(UserError, match="backwards"):
        check_traffic_files(config(ReplayLoad(trace=str(bad))))
    check_traffic_files(
        config(ReplayLoad(trace=str(write_mooncake(tmp_path / "ok.jsonl", MOONCAKE_ROWS))))
    )
    check_traffic_files(config(ConcurrencyLoad()))


def test_bad_trace_through_the_cli_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n3,10,10\n1,10,10\n")
    result = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--backend", "fake", "--model", "tiny-llama",
         "--pattern", "replay", "--option", f"load.trace={bad}",
         "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "out")],
        cwd=REPO, capture_output=True, text=True, timeout=120, env=dict(os.environ),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "backwards" in lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


# --------------------------------------------------------------------------- prompt files


def test_prompt_files_tokenised_with_the_models_tokenizer(tiny_llama):
    from transformers import AutoTokenizer

    from bench.run.workload import PromptFileRequests

    tokenizer = AutoTokenizer.from_pretrained(tiny_llama.path)
    spec = PromptFile(path=str(EXAMPLES / "prompts.jsonl"))
    rows = read_prompt_file(spec)
    assert len(rows) == 8 and rows[1].messages and rows[0].text
    workload = GenerateWorkload(output_tokens=fixed(77), prompt_file=spec)
    requests = PromptFileRequests(workload, rows, tokenizer)
    first, second = next(requests), next(requests)
    assert first.prompt_token_ids == tokenizer.encode(rows[0].text)
    assert first.prompt_text == rows[0].text and first.output_tokens == 77  # from the workload
    assert second.messages == rows[1].messages
    assert second.output_tokens == rows[1].output_tokens  # from the file
    assert [next(requests).id for _ in range(7)][-1] == "r000009"  # cycles through the file
    csv_rows = read_prompt_file(PromptFile(path=str(EXAMPLES / "prompts.csv")))
    assert len(csv_rows) == 8 and all(r.output_tokens for r in csv_rows)


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("p.jsonl", b'{"prompt": "hi"}\n', "needs a 'text' or 'messages'"),
        ("p.csv", b"question\nhi\n", "missing column 'text'"),
        ("p.jsonl", b'{"messages": [{"role": "user"}]}\n', "role and content"),
        ("p.txt", b"hi\n", "cannot tell the format"),
        ("p.jsonl", b"\xff\xfe\x00h\x00i", "binary"),
    ],
)
def test_bad_prompt_files_are_one_user_error(tmp_path, name, content, needle):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UserError, match=needle):
        read_prompt_file(PromptFile(path=str(path)))


def test_old_configs_and_records_still_load():
    old = {"kind": "generate", "prompt_tokens": {"mean": 64}, "seed": 1}
    workload = GenerateWorkload.model_validate(old)
    assert workload.prefix is None and workload.conversation is None
    record = RequestRecord.model_validate({"id": "r1", "start_ns": 0, "end_ns": 5})
    assert record.prefix_id is None and record.turn is None and record.prefix_tokens == 0


def test_in_process_vllm_prefix_counter_gives_scrape_like_samples():
    from bench.core.metrics import prefix_cache_hit_rate
    from bench.engines.backends.vllm import PrefixCacheCounter

    counter = PrefixCacheCounter(interval_ns=0)
    counter.add(100, 0)  # warm-up step before the measured window
    first_t = counter.samples()[0].t_ns
    counter.add(200, 150)
    counter.add(200, 190)
    samples = counter.samples()
    assert samples[-1].values["vllm:prefix_cache_queries_total"] == 500
    assert samples[-1].values["vllm:prefix_cache_hits_total"] == 340
    rate, queries = prefix_cache_hit_rate(samples, (first_t, samples[-1].t_ns))
    assert (rate, queries) == (340 / 400, 400)


def test_the_stored_config_states_the_prompt_form():
    from bench.run.api import with_explicit_prompt_form

    config = RunConfig(backend="openai", model="tiny-llama", engine_args={"base_url": "http://x"})
    stored = with_explicit_prompt_form(config)
    assert stored.engine_args["prompt_format"] == "text"  # the default, written down
    tokens = config.model_copy(update={"engine_args": {"base_url": "x", "prompt_format": "tokens"}})
    assert with_explicit_prompt_form(tokens).engine_args["prompt_format"] == "tokens"
    fake = RunConfig(backend="fake", model="tiny-llama")
    assert with_explicit_prompt_form(fake) is fake


def test_shapes_that_do_not_combine_are_refused_in_the_config():
    spec = PromptFile(path="p.jsonl")
    with pytest.raises(ValueError, match="prompt_file and prefix"):
        GenerateWorkload(prompt_file=spec, prefix=PrefixPool())
    with pytest.raises(ValueError, match="conversations over a prompt file"):
        GenerateWorkload(prompt_file=spec, conversation=ConversationSpec())


def test_reproduce_command_keeps_sections_switched_on_with_defaults():
    from bench.run.api import reproduce_command

    config = RunConfig(
        backend="fake", model="tiny-llama", workload=GenerateWorkload(conversation={})
    )
    command = reproduce_command(config)
    assert "workload.conversation={}" in command
    assert "load={}" not in command  # the top-level load section stays implicit


def test_a_rehearsal_keeps_the_traffic_shape_at_cpu_sizes():
    from bench.orchestrate.rehearsal import REPLAY_ROWS, rehearse_config

    config = RunConfig(
        backend="vllm",
        model="llama-2-7b",
        workload=GenerateWorkload(
            prefix=PrefixPool(count=3, tokens=fixed(4096)),
            conversation=ConversationSpec(turns=fixed(8)),
        ),
        load=ReplayLoad(trace=str(EXAMPLES / "mooncake_small.jsonl"), time_scale=0.5),
    )
    rehearsed = rehearse_config(config)
    assert rehearsed.workload.prefix.count == 3
    assert rehearsed.workload.prefix.tokens.mean < 4096
    assert rehearsed.workload.conversation.turns.mean == 2
    assert rehearsed.load.pattern == "replay" and rehearsed.load.max_requests == REPLAY_ROWS
    assert rehearsed.load.time_scale == 0.5
    replay = Replay(rehearsed.load)
    requests = list(replay.phase(1000).requests)
    assert len(requests) == REPLAY_ROWS
    assert max(len(r.prompt_token_ids) for r in requests) <= rehearsed.load.max_input_tokens
    assert max(r.output_tokens for r in requests) <= rehearsed.load.max_output_tokens
    RunConfig.model_validate(rehearsed.model_dump())  # still a valid config
