"""The Advisor page's traffic fields (AppTest of app.py): a seeded RAG profile shows its shared
context and conversations in the form, the tree asks about them, and edits reach the profile."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from streamlit.testing.v1 import AppTest

    from advisor.workload.profile_input import load_profile
    from ui import state

    monkeypatch.setenv("ADVISOR_STORE", str(tmp_path / "store.sqlite"))
    monkeypatch.chdir(REPO)
    main = sys.modules.get("__main__")
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    profile = load_profile(REPO / "examples/profiles/rag_chat_7b_h200.yaml")
    at.session_state[state.PROFILE_KEY] = profile
    yield at.run()
    if main is not None:  # AppTest replaces __main__ (see tests/ui/conftest.py)
        sys.modules["__main__"] = main
    # the page caches its advice and reference data process-wide; this folder's conftest points
    # the reference at the seed file only, which must not leak into later pages' tests
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()


def _number(at, label: str):
    return next(n for n in at.number_input if n.label == label)


def test_form_shows_the_traffic_and_the_tree_follows_it(page) -> None:
    at = page
    assert not at.exception
    assert _number(at, "Shared context (tokens, inside the prompt)").value == 1024
    assert _number(at, "Distinct shared contexts").value == 8
    assert _number(at, "Turns per conversation").value == 4
    text = " ".join(m.value for m in at.markdown)
    assert "Do requests share long prefixes" in text
    _number(at, "Shared context (tokens, inside the prompt)").set_value(512)
    _number(at, "Turns per conversation").set_value(2).run()
    assert not at.exception
    from ui import state

    stage = at.session_state[state.PROFILE_KEY].stages[0]  # the profile the form built
    assert (stage.shared_prefix.tokens, stage.shared_prefix.count) == (512, 8)
    assert stage.conversation.turns == 2 and stage.conversation.user_tokens == 128
