"""AppTest of the Advisor page: the questionnaire renders, answers change the decision path."""

from __future__ import annotations


def test_default_profile_shows_path_and_recommendation(app_test):
    at = app_test().run()
    assert not at.exception
    assert at.title[0].value == "Which inference framework?"
    headings = [h.value for h in at.markdown]
    assert any("How the tree decided" in text for text in headings)
    assert any("Recommendation" in text for text in headings)
    # The default chat profile answers "long sequence generation: yes" -> vLLM first.
    assert any("### vllm" in s.value for s in at.success)


def test_answering_dynamic_control_flow_changes_the_path(app_test):
    at = app_test().run()
    question = next(r for r in at.radio if r.label.startswith("Does the model need dynamic"))
    question.set_value("Yes").run()
    assert not at.exception
    path_text = " ".join(m.value for m in at.markdown)
    assert "**yes**" in path_text
    assert any("### pytorch" in s.value for s in at.success)


def test_add_stage_gives_a_second_tab_and_advice(app_test):
    at = app_test().run()
    next(b for b in at.button if b.label == "Add a stage").click().run()
    assert not at.exception
    assert len(at.tabs) >= 2
    assert any("Stage 2" in s.value for s in at.subheader)


def test_uploaded_profile_is_size_limited_and_validated():
    import pytest

    from bench.errors import UserError
    from ui.state import read_uploaded_profile as read_profile

    with pytest.raises(UserError, match="too large"):
        read_profile(b"x" * (300 * 1024), "big.yaml")
    with pytest.raises(UserError, match="unknown field"):
        read_profile(b"model: tiny-llama\nbogus: 1\n", "bad.yaml")
    profile = read_profile(b"title: T\nmodel: tiny-llama\nconcurrency: 4\n", "ok.yaml")
    assert profile.stages[0].concurrency == 4
