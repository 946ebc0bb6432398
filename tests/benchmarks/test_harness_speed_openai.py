"""benchmarks/harness_speed.py's openai check in short form (issue 51): the real openai client
over HTTP against nginx's canned SSE answer must send TEXT prompts, past its prepared buffer,
at no less than 90% of the rate it reaches with token-ID prompts at the same target, both
measured in this one test run (a ratio, not an absolute time: the machine may be shared).

What it would have caught: requests past the runner's prefetch window prepared (decoded and
re-tokenised) on the sending loop, which cut a 2,000 req/s text run to ~1,000. The rate ratio is
taken as a user runs (the run's prompts prepared before its clock); then the buffer is shrunk to
a third of the run, so the rest is prepared while the run sends as in that bug, and the sending
loop's own CPU per request must not grow with text prompts (robust to a shared machine).
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from bench.core.schema import ModelInfo
from bench.run import request_producer

ROOT = Path(__file__).resolve().parents[2]
RATE_RPS = 800.0
SECONDS = 4.0
MIN_RATIO = 0.9
PAIRS = 2
"""Alternated text/token-ID pairs at most: the best of each form is compared, so one burst of
another process's work on a shared machine does not decide the verdict alone."""


def load_module():
    spec = importlib.util.spec_from_file_location(
        "harness_speed", ROOT / "benchmarks" / "harness_speed.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def best_pair(module, url: str, model: ModelInfo) -> dict[str, dict]:
    """Text and token-ID runs alternated up to PAIRS times; the best run of each form."""
    best: dict[str, dict] = {}
    for _ in range(PAIRS):
        for form in ("text", "tokens"):
            row = module.openai_check(RATE_RPS, SECONDS, form, url, model)
            assert row["errors"] == 0, row["first_error"]
            if form not in best or row["achieved_rps"] > best[form]["achieved_rps"]:
                best[form] = row
        if best["text"]["achieved_rps"] >= MIN_RATIO * best["tokens"]["achieved_rps"]:
            break
    return best


@pytest.mark.slow
def test_text_prompts_keep_the_rate_of_token_id_prompts(tmp_path, monkeypatch) -> None:
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(nginx).exists():
        pytest.skip("nginx is not installed (scripts/test.sh installs Debian's nginx)")
    module = load_module()
    from bench.engines.models import ensure_preset

    path = ensure_preset("tiny-llama")
    model = ModelInfo(name="tiny-llama", path=str(path), vocab_size=32000)
    try:
        server = module.nginx_server(nginx, tmp_path)
    except (RuntimeError, OSError) as exc:
        pytest.skip(f"nginx could not start: {exc}")
    try:
        # As a user runs it: the run's prompts prepared before its clock starts.
        whole = best_pair(module, server.url, model)
        # Past the prepared buffer (shrunk to a third of the run; a prepared 128-token text
        # request takes ~1.3 kB): the worker thread prepares the rest while the run sends.
        monkeypatch.setattr(
            request_producer, "PREPARED_MAX_BYTES", int(RATE_RPS * SECONDS / 3) * 1300
        )
        past = best_pair(module, server.url, model)
    finally:
        server.stop()
    text, tokens = whole["text"], whole["tokens"]
    ratio = text["achieved_rps"] / tokens["achieved_rps"]
    assert ratio >= MIN_RATIO, (
        f"text prompts reached {text['achieved_rps']} req/s, token IDs {tokens['achieved_rps']} "
        f"at {RATE_RPS:g} req/s target ({ratio:.2f} < {MIN_RATIO}); lag p99 "
        f"{text['lag_p99_ms']} vs {tokens['lag_p99_ms']} ms"
    )
    # Past the buffer, preparing on the sending loop would show as the loop's own CPU per
    # request (~0.7 ms more per text prompt); the worker thread's CPU is not the loop's. The
    # rate is not compared here: the worker's CPU competes with the loop's on a small machine.
    text, tokens = past["text"], past["tokens"]
    assert text["sent"] > RATE_RPS * SECONDS * 0.9  # the run went well past the buffer
    assert text["loop_cpu_us_per_request"] <= 1.5 * tokens["loop_cpu_us_per_request"] + 100, (
        text["loop_cpu_us_per_request"],
        tokens["loop_cpu_us_per_request"],
    )
