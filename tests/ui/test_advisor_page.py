"""AppTest of the Advisor page: the questionnaire renders, answers change the decision path."""

from __future__ import annotations

import pytest


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
    assert "pytorch" in path_text  # the tree's leaf: PyTorch first
    # On the default H200 the shipped measurements reorder the candidates: torch_compile meets
    # the SLOs where eager PyTorch does not, and the page says the evidence overrode the tree.
    assert any("### torch_compile" in s.value for s in at.success)
    assert any("Evidence disagrees with the tree" in w.value for w in at.warning)


def test_add_stage_gives_a_second_tab_and_advice(app_test):
    at = app_test().run()
    next(b for b in at.button if b.label == "Add a stage").click().run()
    assert not at.exception
    assert len(at.tabs) >= 2
    assert any("Stage 2" in s.value for s in at.subheader)
    from ui import state

    assert [s.name for s in at.session_state[state.PROFILE_KEY].stages] == ["main", "stage 2"]
    next(b for b in at.button if b.label == "Remove this stage").click().run()  # the first
    assert not at.exception
    assert [s.name for s in at.session_state[state.PROFILE_KEY].stages] == ["stage 2"]


def test_uploaded_profile_is_size_limited_and_validated():
    import pytest

    from bench.core.errors import UserError
    from ui.state import read_uploaded_profile as read_profile

    with pytest.raises(UserError, match="too large"):
        read_profile(b"x" * (300 * 1024), "big.yaml")
    with pytest.raises(UserError, match="unknown field"):
        read_profile(b"model: tiny-llama\nbogus: 1\n", "bad.yaml")
    profile = read_profile(b"title: T\nmodel: tiny-llama\nconcurrency: 4\n", "ok.yaml")
    assert profile.stages[0].concurrency == 4


def test_the_first_answer_rests_on_the_shipped_h200_measurements(app_test):
    """Out of the box the profile names the GPU the shipped data/reference runs were measured
    on, so the first answer is settled by those measurements, not by the tree alone."""
    at = app_test().run()
    assert not at.exception
    gpu = next(s for s in at.selectbox if s.label == "GPU type")
    assert gpu.value == "H200"
    # ... which are this project's published runs, not the user's (issue 23: provenance).
    assert any("settled by this project's published runs" in s.value for s in at.success)
    assert not any("No measurement counts" in i.value for i in at.info)
    # The evidence caption names the provenance: this project's H200 runs are not the
    # article's A100 figures, and nobody says the user measured them.
    captions = " ".join(c.value for c in at.caption)
    assert "'published run' rows are this project's published runs (data/reference)" in captions
    assert "article's A100 figures" not in captions and "'your run' rows" not in captions


def test_another_gpu_is_told_where_the_evidence_is_and_can_view_it(app_test):
    """An A100 user (a GPU no shipped run measured) sees where the published runs are and can
    view what they say, on H200, without the profile's GPU changing."""
    from ui import state

    at = app_test().run()
    next(s for s in at.selectbox if s.label == "GPU type").set_value("A100-80GB-SXM").run()
    assert not at.exception
    notice = [i.value for i in at.info if "No measurement counts" in i.value]
    assert notice and "**A100-80GB-SXM**" in notice[0] and "**H200**" in notice[0]
    assert any("the decision tree's first choice" in s.value for s in at.success)
    assert not [b for b in at.button if "Use the H200" in b.label]  # no nudge onto a GPU
    view = next(t for t in at.toggle if t.label == "See what the published H200 runs say")
    view.set_value(True).run()
    assert not at.exception
    assert next(s for s in at.selectbox if s.label == "GPU type").value == "A100-80GB-SXM"
    assert at.session_state[state.PROFILE_KEY].stages[0].gpu.type == "A100-80GB-SXM"
    successes = [s.value for s in at.success]
    assert any("the decision tree's first choice" in text for text in successes)  # yours
    # the view: this project's published runs on H200, never the user's GPU (issue 23)
    assert any(
        "settled by this project's published runs" in text
        and "a view of the published runs on H200, not of your GPU" in text
        for text in successes
    )
    assert any("a view, not your answer" in m.value for m in at.markdown)


def test_configuration_search_shows_table_chart_and_accuracy(app_test):
    """A two-H200 llama-2-7b profile: the configurations, the Pareto chart over the shipped
    runs, and the estimate's leave-one-out error."""
    from advisor.workload.profile_input import profile_from_flags
    from ui import state

    profile = profile_from_flags(
        model="llama-2-7b",
        gpu="H200",
        gpu_count=2,
        prompt_tokens=128,
        output_tokens=128,
        concurrency=256,
        long_sequence_generation="yes",
    )
    at = app_test()
    at.session_state[state.PROFILE_KEY] = profile
    at.run()
    assert not at.exception
    headings = [m.value for m in at.markdown]
    assert any("Configuration: GPUs per engine, replicas, precision" in h for h in headings)
    assert any("uses 2 of the profile's 2 GPUs" in i.value for i in at.info)
    assert not any("GPU(s)" in i.value for i in at.info)
    assert any("Leave-one-out over" in m.value for m in at.markdown)
    assert any("lm-evaluation-harness" in c.value for c in at.caption)


def _seeded(app_test, **stage):
    from advisor.workload.profile import WorkloadProfile
    from ui import state

    at = app_test()
    profile = WorkloadProfile.model_validate({"title": "seeded", **stage})
    at.session_state[state.PROFILE_KEY] = profile
    return at.run()


def test_an_over_long_context_is_refused_at_the_field(app_test):
    """Issue 23: 6,000 + 200 tokens on Llama-2-70B (4,096 positions) is not "fits"."""
    at = _seeded(
        app_test,
        model="llama-2-70b",
        prompt_tokens={"mean": 6000},
        output_tokens={"mean": 200},
        gpu={"type": "H200", "count": 4},
    )
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any(e.startswith("**prompt_tokens**") and "4,096" in e for e in errors), errors
    assert any("### none" in s.value and "refused" in s.value for s in at.success)
    assert not any(m.value == "fits" for m in at.metric)


def test_an_llm_slo_below_its_floor_is_an_error_at_its_fields(app_test):
    """A 32,000-token prompt within 100 ms on an L4 (its prefill floor is 6.5 s) and 20 ms a
    token (its decode floor 53.5 ms): both fields say so before anything runs."""
    at = _seeded(
        app_test,
        model="llama-3.1-8b",
        prompt_tokens={"mean": 32000},
        output_tokens={"mean": 100},
        peak_request_rate_rps=1,
        slo={"ttft_ms": 100, "tpot_ms": 20},
        gpu={"type": "L4"},
        precision={"dtype": "bfloat16"},
    )
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any(e.startswith("**slo.ttft_ms**") and "below the floor" in e for e in errors), errors
    assert any(e.startswith("**slo.tpot_ms**") and "floor of 54 ms" in e for e in errors), errors


def test_a_forward_slo_below_the_floor_is_said_in_the_app(app_test):
    """The form shows the forward floor check once its SLO and GPU are set (the check at the
    length fields sees neither): two batches of 32 ViT-B/16 images on a T4 within 20 ms."""
    at = _seeded(
        app_test, kind="forward", model="vit-base", batch_size=32, image_size=224,
        concurrency=2, slo={"e2e_ms": 20}, gpu={"type": "T4"},
    )  # fmt: skip
    assert not at.exception
    assert any("below the floor: no engine can meet it" in e.value for e in at.error)


def test_no_gpu_decided_says_there_is_no_gpu_to_fit_against(app_test):
    at = _seeded(app_test, model="tiny-llama")
    assert not at.exception
    memory = next(m for m in at.metric if m.label == "Memory")
    assert memory.value == "no GPU to fit against"
    captions = " ".join(c.value for c in at.caption)
    assert "0.00 B" not in captions and "parameters: 4.19 M" in captions


def test_a_model_that_does_not_fit_reads_plainly(app_test):
    """llama-2-70b on one L4: a red (negative) headroom, "needs N GPUs; the profile has 1", and
    a configuration to deploy as setting/value rows without None; tables without None."""
    from advisor.workload.profile_input import profile_from_flags
    from ui import state

    profile = profile_from_flags(
        model="llama-2-70b",
        gpu="L4",
        gpu_count=1,
        prompt_tokens=128,
        output_tokens=128,
        concurrency=16,
        long_sequence_generation="yes",
    )
    at = app_test()
    at.session_state[state.PROFILE_KEY] = profile
    at.run()
    assert not at.exception
    memory = next(m for m in at.metric if m.label == "Memory")
    assert memory.value == "does not fit" and memory.delta.startswith("-")
    from streamlit.proto.Metric_pb2 import Metric

    assert memory.proto.color == Metric.MetricColor.RED  # a shortfall is never green
    infos = [i.value for i in at.info]
    assert any("needs 8 GPUs; the profile has 1" in text for text in infos), infos
    settings = at.table[0].value
    assert list(settings.columns) == ["setting", "value"]
    assert "Deployment" in set(settings["setting"])
    assert not settings.isin(["None", "null", "nan"]).any().any()
    for frame in [d.value for d in at.dataframe]:
        assert not frame.astype(str).isin(["None", "nan"]).any().any(), frame


def test_figures_are_formatted_with_units_and_sensible_digits():
    """The pages write figures with the report's formatter (advisor.report.numbers) and name
    metrics by the catalogue's labels and units."""
    from advisor.report.numbers import figure
    from ui.components import metric_label, metric_unit

    assert figure(4889.7054, "tok/s") == "4,890 tok/s"
    assert figure(13.4789, "GB") == "13.5 GB"
    assert figure(5.3521, "ms") == "5.35 ms"
    assert figure(0.012345) == "0.0123"
    assert figure(None, "ms") == "—" and figure(float("nan")) == "—"
    assert metric_unit("output_throughput_tok_s") == "tok/s" and metric_unit("ttft_ms") == "ms"
    assert metric_label("output_throughput_tok_s") == "output throughput"
    # Names the old suffix rule read as `e2e ms p99` without a unit, now the catalogue's.
    assert (metric_label("e2e_ms_p99"), metric_unit("e2e_ms_p99")) == ("E2E p99", "ms")
    assert metric_unit("gpu_s_per_million_tokens") == "GPU-s"
    assert metric_label("not_a_metric") == "not a metric" and metric_unit("not_a_metric") == ""


def test_an_edit_keeps_the_fields_the_form_does_not_show(app_test):
    """Peak traffic, headroom, the verdict threshold and the GPU price come from a YAML profile
    (no widget for them): editing another field must not drop them."""
    from ui import state

    at = _seeded(
        app_test,
        model="llama-2-7b",
        gpu={"type": "H200", "count": 1, "price_per_hour": 4.5},
        peak_request_rate_rps=40,
        headroom_fraction=0.3,
        practical_threshold=0.1,
    )
    assert not at.exception
    next(n for n in at.number_input if n.label == "GPU count").set_value(2).run()
    assert not at.exception
    stage = at.session_state[state.PROFILE_KEY].stages[0]
    assert stage.gpu.count == 2 and stage.gpu.price_per_hour == 4.5
    assert stage.peak_request_rate_rps == 40 and stage.headroom_fraction == 0.3
    assert stage.practical_threshold == 0.1


def test_configuration_rows_read_the_typed_configuration():
    """The page's setting/value rows come from the typed configuration's fields: the layout
    from parallelism, the precision from precision, the TP degree and FP8 shown as the vLLM
    engine arguments an engineer types (they are not in engine_args themselves)."""
    from advisor.sizing.deployments import DeploymentFigures, RecommendedDeployment
    from bench.core.config import ParallelismConfig, PrecisionConfig
    from ui.advisor_page import configuration_rows

    configuration = RecommendedDeployment(
        source="benchmark plan defaults (not yet measured)",
        framework="vllm",
        label="vllm TP=2 bfloat16 + fp8 weights",
        parallelism=ParallelismConfig(tensor_parallel_size=2, replicas=2),
        precision=PrecisionConfig(quantization="fp8"),
        engine_args={"max_model_len": 1024},
        figures=DeploymentFigures(basis="estimate", predicted_tpot_ms=12.5, at_concurrency=64),
    )
    rows = {row["setting"]: row["value"] for row in configuration_rows(configuration)}
    assert rows["GPUs"] == "4 (tensor parallel 2 × 2 replicas)"
    assert rows["Weight quantisation"] == "fp8" and rows["Precision"] == "bfloat16"
    assert rows["Engine argument: tensor_parallel_size"] == "2"
    assert rows["Engine argument: quantization"] == "fp8"
    assert rows["Engine argument: max_model_len"] == "1024"
    assert rows["Chosen on"] == "the estimate"
    assert rows["TPOT (predicted)"].endswith("at concurrency 64")
    assert "tensor_parallel_size" not in configuration.engine_args


def test_an_emptied_slo_field_stays_empty_after_a_rerun(app_test):
    """Issue 47: a cleared E2E or TTFT limit came back as 5000 / 300 ms on the next run, so a
    form-made profile could never say "no limit" (what the shipped capacity searches need)."""
    from ui import state

    at = app_test()
    at.run()
    e2e = next(n for n in at.number_input if n.label.startswith("End-to-end"))
    ttft = next(n for n in at.number_input if n.label.startswith("TTFT"))
    assert e2e.value == 5000 and ttft.value == 300  # the first-visit profile's limits
    e2e.set_value(None)
    ttft.set_value(None).run()
    assert not at.exception
    for _ in range(2):  # the page's own rerun, then another
        slo = at.session_state[state.PROFILE_KEY].stages[0].slo
        assert slo.e2e_ms is None and slo.ttft_ms is None
        assert next(n for n in at.number_input if n.label.startswith("End-to-end")).value is None
        assert next(n for n in at.number_input if n.label.startswith("TTFT")).value is None
        at.run()
    typed = next(n for n in at.number_input if n.label.startswith("End-to-end"))
    typed.set_value(8000).run()
    assert at.session_state[state.PROFILE_KEY].stages[0].slo.e2e_ms == 8000
    assert next(n for n in at.number_input if n.label.startswith("End-to-end")).value == 8000


def test_an_unknown_model_is_refused_at_the_field_and_nothing_is_advised(app_test):
    """A typed model that is no preset, known Hugging Face id nor local folder is refused with
    the message at the field; the page gives no advice (never tiny-llama "instead")."""
    from ui import state
    from ui.advisor_page import CUSTOM_MODEL

    at = app_test()
    at.run()
    at.selectbox(key="v0_s0_model_choice").set_value(CUSTOM_MODEL).run()
    at.text_input(key="v0_s0_model_path").set_value("meta-llama/Llama-9-1B").run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert any("unknown model 'meta-llama/Llama-9-1B'" in e and "config.json" in e for e in errors)
    # The profile the other pages read (the Benchmark page's runs) is not the refused one.
    assert at.session_state[state.PROFILE_KEY].stages[0].model != "meta-llama/Llama-9-1B"
    assert not [h for h in at.header if h.value == "Advice"]
    # A known Hugging Face id is accepted and advised on.
    at.text_input(key="v0_s0_model_path").set_value("Qwen/Qwen2.5-7B-Instruct").run()
    assert not at.exception and not at.error
    assert at.session_state[state.PROFILE_KEY].stages[0].model == "Qwen/Qwen2.5-7B-Instruct"


def test_the_form_takes_a_published_speech_model_as_a_profile_does() -> None:
    """One rule for the field and the profile file (`check_stage_model`): a Whisper id the
    advisor sizes from its published config is accepted, a near miss is refused with a "did you
    mean"-style line."""
    from ui.advisor_page import unknown_model

    assert unknown_model("openai/whisper-small") is None
    assert unknown_model("OpenAI/Whisper-Large-v3") is None
    problem = unknown_model("openai/whisper-smal")
    assert problem is not None and "unknown model 'openai/whisper-smal'" in problem


def test_a_forward_slo_below_the_floor_is_said_under_the_form() -> None:
    """ui.advisor_page.forward_floor_message on a ViT-B/16 stage on a T4 (issue 48): two
    batches of 32 in flight cannot meet 20 ms at the floor; one can, but only within error."""
    from advisor.workload.profile_input import profile_from_dict
    from ui.advisor_page import forward_floor_message

    stage = {
        "title": "t", "kind": "forward", "model": "vit-base", "batch_size": 32,
        "image_size": 224, "slo": {"e2e_ms": 20}, "gpu": {"type": "T4"},
    }  # fmt: skip
    two = profile_from_dict({**stage, "concurrency": 2}).stages[0]
    infeasible, text = forward_floor_message(two)
    assert infeasible and "below the floor" in text and "Would make it feasible" in text
    one = profile_from_dict({**stage, "concurrency": 1}).stages[0]
    assert forward_floor_message(one)[0] is False
    generate = profile_from_dict({"title": "t", "model": "llama-2-7b"}).stages[0]
    assert forward_floor_message(generate) is None


def test_memory_chart_spec_is_valid_vega_lite_with_each_part_and_the_gpu_line():
    """The memory chart is written as a Vega-Lite spec (not through altair, which Streamlit
    validates on every draw): checked here against the schema, as altair would."""
    import altair as alt

    from ui.advisor_page import memory_chart_spec

    spec = memory_chart_spec({"weights": 14.9, "KV cache": 20.0, "runtime overhead": 1.5}, 79.6)
    alt.LayerChart.from_dict(spec)  # raises on a spec the schema refuses
    bars, rule, label = spec["layer"]
    assert [row["what"] for row in bars["data"]["values"]] == ["weights", "KV cache",
                                                              "runtime overhead"]  # fmt: skip
    assert rule["mark"]["type"] == "rule" and rule["data"]["values"][0]["GB"] == 79.6
    assert label["data"]["values"][0]["label"] == "available 79.6 GB"
    assert len(memory_chart_spec({"weights": 1.0}, None)["layer"]) == 1  # no GPU line unknown
    with pytest.raises(Exception):  # noqa: B017 - the check itself refuses a wrong spec
        alt.LayerChart.from_dict({**spec, "height": "tall"})


def test_the_kept_answer_is_made_again_when_a_run_lands_or_finishes(store_path):
    """The app keeps each profile's answer while the stored runs stay as they were (the Report
    page reuses the Advisor page's): a run that lands changes the key the answer is kept by."""
    import streamlit as st

    from tests.ui.conftest import stored_run
    from ui import state

    st.cache_data.clear()
    before = state.runs_version(str(store_path))
    assert state.runs_version(str(store_path)) == before  # nothing changed, same key
    run = stored_run(store_path)
    st.cache_data.clear()  # what the 5 s of `stored_runs` do in the app
    landed = state.runs_version(str(store_path))
    assert landed != before
    from bench.core.schema import RunStatus

    state.get_store().update_run(run.model_copy(update={"status": RunStatus.FAILED}))
    st.cache_data.clear()
    assert state.runs_version(str(store_path)) not in (before, landed)


def test_the_answers_report_is_warmed_once_until_the_runs_change(store_path, monkeypatch):
    """The Advisor page starts the report's slow part (its cited runs' intervals) in the
    background; the same answer shown again starts nothing, a run that lands warms again."""
    import time

    import advisor.report.build
    from tests.ui.conftest import stored_run
    from ui import state

    calls: list[int] = []
    monkeypatch.setattr(advisor.report.build, "warm_intervals", lambda *args: calls.append(1) or 1)
    monkeypatch.setattr(state, "_WARMED", {})

    def warm_and_wait() -> None:
        state.warm_report(answer, str(store_path))
        deadline = time.monotonic() + 10
        while state._WARMING and time.monotonic() < deadline:
            time.sleep(0.01)

    import streamlit as st

    st.cache_data.clear()
    answer = state.advise(state.default_profile(), str(store_path))
    warm_and_wait()
    warm_and_wait()
    assert calls == [1]  # the second view of the same answer started nothing
    stored_run(store_path)
    st.cache_data.clear()
    warm_and_wait()
    assert calls == [1, 1]
