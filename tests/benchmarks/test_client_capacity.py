"""benchmarks/client_capacity.py: the canned answer is a valid OpenAI stream in both formats, and
a rate counts as sustained only under 1% errors at >= 98% of the target."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_module():
    spec = importlib.util.spec_from_file_location(
        "client_capacity", ROOT / "benchmarks" / "client_capacity.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def events(body: str) -> list[str]:
    # nginx turns the two-character escapes back into newlines when it reads its config.
    text = body.replace("\\n", "\n")
    return [part.removeprefix("data: ") for part in text.split("\n\n") if part]


def test_canned_stream_is_an_openai_stream_with_usage() -> None:
    module = load_module()
    for chat in (False, True):
        parts = events(module.canned_stream(chat))
        assert parts[-1] == "[DONE]"
        chunks = [json.loads(part) for part in parts[:-1]]
        texts = [
            c["choices"][0]["delta"]["content"] if chat else c["choices"][0]["text"] for c in chunks
        ]
        assert sum(1 for text in texts if text) == module.OUTPUT_TOKENS
        assert chunks[-1]["usage"]["completion_tokens"] == module.OUTPUT_TOKENS
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert "'" not in module.canned_stream(chat)  # it sits in a single-quoted nginx string


def test_sustained_needs_few_errors_and_the_rate() -> None:
    module = load_module()
    row = {"sent": 1000, "errors": 9, "achieved_rps": 98.0}
    assert module.sustained(row, 100)
    assert not module.sustained(row | {"errors": 10}, 100)
    assert not module.sustained(row | {"achieved_rps": 97.9}, 100)
    assert not module.sustained(row | {"sent": 0, "errors": 0}, 100)
