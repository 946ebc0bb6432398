"""The one `key=value` grammar of the CLI and the plan table."""

from __future__ import annotations

import pytest

from bench.core.errors import UserError
from bench.core.keyvalue import format_pairs, parse_pairs, parse_pairs_text, parse_value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("256", 256),
        ("0.9", 0.9),
        ("1e3", 1000.0),  # JSON first: YAML 1.1 would keep this as text
        ("yes", True),
        ("off", False),
        ("true", True),
        ("null", None),
        ("[1, 16, 64]", [1, 16, 64]),
        ('{"kind": "fixed", "mean": 512}', {"kind": "fixed", "mean": 512}),
        ("fp8", "fp8"),
        (" awq ", "awq"),
        ("a: [", "a: ["),  # neither JSON nor YAML: the text itself
        ("", ""),
    ],
)
def test_values(text: str, value: object) -> None:
    assert parse_value(text) == value
    assert type(parse_value(text)) is type(value)


def test_quotes_protect_commas_and_apostrophes_are_text() -> None:
    assert parse_pairs_text('name="a, b=c", n=1', "x") == {"name": "a, b=c", "n": 1}
    assert parse_pairs_text("label=it's mine, n=1", "x") == {"label": "it's mine", "n": 1}


def test_pairs_and_text_agree() -> None:
    pairs = ["max_num_seqs=256", "enforce_eager=yes", "levels=[1, 16]", "name=a=b"]
    assert parse_pairs_text(", ".join(pairs), "x") == parse_pairs(pairs, "x")
    assert parse_pairs(pairs, "x")["name"] == "a=b"


@pytest.mark.parametrize("bad", ["novalue", "=3", "bad key=1"])
def test_malformed_pairs_name_the_pair(bad: str) -> None:
    with pytest.raises(UserError, match="must look like key=value"):
        parse_pairs([bad], "--engine-arg")


def test_format_reads_back() -> None:
    values = {
        "a": 1,
        "b": True,
        "c": "text",
        "d": "yes",  # a string that would read back as a bool is quoted
        "e": [1, 2],
        "f": {"x": 1, "y": "z"},
        "g": None,
        "h": "1, i=2",
    }
    assert parse_pairs_text(format_pairs(values), "x") == values
