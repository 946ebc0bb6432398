"""AppTest of the Advisor page's quality fields, on the shipped quality measurement
(data/reference/quality/cpu_tiny-llama-trained/quality.json, written by `python -m bench
quality`): the path and tolerance set the stage's fields, the configurations table gets its
Quality column, a precision beyond the tolerance is named as not recommended, a bad file is one
message and the advice goes on without it. The upload is read by ui.state.save_uploaded_quality
(AppTest cannot drive a file uploader)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.core.errors import UserError

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "data" / "reference" / "quality" / "cpu_tiny-llama-trained" / "quality.json"


def _fp8_page(app_test):
    at = app_test().run()
    next(s for s in at.selectbox if s.label == "Precision").set_value("bfloat16")
    next(s for s in at.selectbox if s.label == "Weight quantisation").set_value("fp8").run()
    assert not at.exception
    return at


def _quality_column(at) -> list[str]:
    frames = [frame.value for frame in at.dataframe if "Quality" in frame.value.columns]
    return list(frames[0]["Quality"]) if frames else []


def test_without_a_file_the_risk_stays_worded_as_before(app_test):
    at = _fp8_page(app_test)
    assert _quality_column(at) == []
    assert any("accuracy is yours to check" in c.value for c in at.caption)


def test_the_path_and_tolerance_set_the_profile_and_the_quality_column(app_test):
    from ui import state

    at = _fp8_page(app_test)
    next(t for t in at.text_input if t.label == "…or its path").set_value(str(SHIPPED)).run()
    assert not at.exception
    stage = at.session_state[state.PROFILE_KEY].stages[0]
    assert stage.quality_result == str(SHIPPED) and stage.max_quality_loss_pct == 1.0
    assert any("Read: tiny-llama-trained on pytorch, baseline bf16" in c.value for c in at.caption)
    cells = _quality_column(at)
    assert any("ppl 296.1 (+0.0817" in cell for cell in cells)  # fp8 within 1%
    assert any(c.value.startswith("Quality measured on your model") for c in at.caption)
    assert not any("not recommended" in w.value.lower() for w in at.warning)

    loss = next(n for n in at.number_input if n.label == "Tolerated quality loss (%)")
    loss.set_value(0.01).run()  # below FP8's measured +0.03%
    assert not at.exception
    assert at.session_state[state.PROFILE_KEY].stages[0].max_quality_loss_pct == 0.01
    assert not any("(+0.0817" in cell for cell in _quality_column(at))  # fp8 rows left out
    warning = next(w.value for w in at.warning if w.value.startswith("Not recommended"))
    assert "measured quality loss 0.03% vs bf16 exceeds the tolerated 0.01%" in warning


def test_a_bad_file_is_one_message_and_the_advice_goes_on_without_it(app_test, tmp_path):
    from ui import state

    bad = tmp_path / "quality.json"
    bad.write_text('{"model": "x"}')
    at = _fp8_page(app_test)
    next(t for t in at.text_input if t.label == "…or its path").set_value(str(bad)).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "quality result" in errors[0] and "Not used" in errors[0]
    assert at.session_state[state.PROFILE_KEY].stages[0].quality_result is None
    assert any("accuracy is yours to check" in c.value for c in at.caption)


def test_an_uploaded_quality_file_is_checked_and_kept(tmp_path, monkeypatch):
    from bench.core.quality import load_quality_result
    from ui.state import save_uploaded_quality

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    data = SHIPPED.read_bytes()
    path = save_uploaded_quality(data, "quality.json")
    assert Path(path).parent == tmp_path / "inference-advisor" / "quality"
    assert load_quality_result(path) == load_quality_result(str(SHIPPED))
    assert save_uploaded_quality(data, "again.json") == path  # same bytes, same file
    with pytest.raises(UserError, match=r"quality result q\.json: .*precisions"):
        save_uploaded_quality(b'{"model": "x"}', "q.json")
    with pytest.raises(UserError, match="not valid JSON"):
        save_uploaded_quality(b"\x89PNG", "q.json")
    with pytest.raises(UserError, match="too large"):
        save_uploaded_quality(b" " * (2 * 1024 * 1024), "q.json")
