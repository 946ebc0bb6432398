"""Page 1 of the report on the shipped data: the decision per stage with its provenance, the
workload in words, numbers without exponents. Reports come from the real `assemble_report`
over an empty store, the shipped examples/profiles and data/reference (no test double)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from advisor.report import generate
from advisor.report.build import assemble_report
from advisor.report.model import Report
from bench.storage.store import ResultStore

REPO = Path(__file__).resolve().parents[3]
PROFILES = REPO / "examples" / "profiles"
RAW_KEY = re.compile(
    r"stages\[\d+\]|\b(figures|engine_args|precision|slo|gpu|shared_prefix)\.[a-z_]+"
    r"|\b[a-z]+_tokens\.(mean|spread|kind|min|max)\b"
)
"""Model keys as the old report printed them (`stages[0].prompt_tokens.spread`,
`figures.basis`), not file names like decision_tree.yaml."""
EXPONENT = re.compile(r"\d\.?\d*e[+-]\d")
PYTHON_NONE = re.compile(r"\bNone\b")


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("store") / "empty.sqlite"
    ResultStore(path).close()  # a report only reads: the store must exist
    return str(path)


@pytest.fixture(scope="module")
def reports(empty_store: str) -> dict[str, Report]:
    names = (
        "chat_7b_h200",
        "shape_mismatched_evidence",
        "over_long_context",
        "ecommerce_two_stage",
    )
    return {
        name: assemble_report(PROFILES / f"{name}.yaml", store_location=empty_store)
        for name in names
    }


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_measured_answer_names_the_published_runs_that_settled_it(reports) -> None:
    """Shipped-only evidence on a CPU machine: the H200 runs are this project's published runs,
    never 'yours', and the facts say which file, host and date."""
    report = reports["chat_7b_h200"]
    (decision,) = report.decisions
    assert decision.settled_by == "published" and decision.framework_label == "vLLM"
    assert decision.sentence.startswith("Serve main with vLLM on 1 × H200")
    assert "max_num_seqs=256" in decision.sentence  # the configuration, as the engine takes it
    measured, verdict = decision.facts[0], decision.facts[1]
    assert measured.source == "published"
    assert "h200_llama2-7b_engines_bert_resnet_runs.json" in measured.source_words
    assert "tok/s output throughput on H200" in measured.text
    assert verdict.text.startswith("2.9") and "PyTorch (eager)" in verdict.text
    assert all(fact.source != "yours" for fact in decision.facts)
    assert all(run.provenance == "published" for run in report.runs)
    assert all(row.provenance in ("published", "article") for row in report.evidence)
    assert any("published runs, not on your machines" in risk for risk in decision.risks)
    assert any(risk.startswith("FP8 accuracy is unchecked") for risk in decision.risks)
    assert decision.runner_up and decision.runner_up.startswith("TensorRT-LLM")


def test_tree_answer_says_nothing_matched_and_shows_the_nearest_as_context(reports) -> None:
    (decision,) = reports["shape_mismatched_evidence"].decisions
    assert decision.settled_by == "tree"
    assert [fact.source for fact in decision.facts] == ["tree", "estimate", "published"]
    nearest = decision.facts[2].text  # the nearest shipped prompts are 512 tokens: 3,000 / 512
    assert "context only" in nearest
    assert "prompt length off by 5.86x: prompt 512 vs the stage's 3,000 tok" in nearest
    assert decision.risks[0].startswith("No measurement matches this workload")


def test_refused_answer_recommends_nothing(reports) -> None:
    (decision,) = reports["over_long_context"].decisions
    assert decision.refused and decision.framework_label == "no stack (refused)"
    assert "refused before any run" in decision.sentence
    assert "context window of 4,096 tokens" in decision.facts[0].text
    assert reports["over_long_context"].stages[0].deploy == []
    # nothing to measure: the reproduce box only rebuilds the report
    commands = [c.value for c in reports["over_long_context"].reproduce_commands]
    assert commands and not any("bench-plan" in c for c in commands)
    assert any("bench-plan" in c.value for c in reports["chat_7b_h200"].reproduce_commands)


def test_two_stages_get_a_decision_each(reports) -> None:
    report = reports["ecommerce_two_stage"]
    assert [d.stage for d in report.decisions] == ["feature-extraction", "generation"]
    assert [d.framework_label for d in report.decisions] == ["TensorRT", "vLLM"]
    assert [w.stage for w in report.workload] == ["feature-extraction", "generation"]


def test_workload_is_the_forms_questions_not_model_keys(reports) -> None:
    answers = {a.question: a.answer for a in reports["chat_7b_h200"].workload[0].answers}
    assert answers["Prompt length"] == "128 tokens (fixed)"
    assert answers["Requests in flight at peak"] == "64"
    assert answers["GPU"] == "1 × H200, 141 GB each"
    assert answers["Does it generate long sequences?"] == "Yes"
    assert answers["Peak traffic to size the fleet for"].startswith("Not given")
    for report in reports.values():
        for table in report.workload:
            for answer in table.answers:
                assert not RAW_KEY.search(answer.question), answer.question
                assert not PYTHON_NONE.search(answer.answer), answer


def test_deploy_rows_are_words(reports) -> None:
    deploy = {row.key: row.value for row in reports["chat_7b_h200"].stages[0].deploy}
    assert deploy["Framework"] == "vLLM"
    assert "max_model_len=1024" in deploy["Engine arguments"]
    # The figures are the engine model's, also where this configuration has measured runs.
    key = "Expected figures (the engine model's estimate; this configuration has measured runs)"
    # The expected TPOT is the configuration search's own, with the one calibration's factors.
    from advisor.report.numbers import figure
    from advisor.sizing.calibration import calibration_from
    from advisor.sizing.configurations import search_configurations
    from advisor.sizing.measured import read_reference_folder
    from advisor.workload.profile_input import load_profile

    stage = load_profile(PROFILES / "chat_7b_h200.yaml").stages[0]
    from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

    # The module's reports were assembled before the seed-only folder was patched in.
    accuracy, factors = calibration_from([], read_reference_folder(SHIPPED_REFERENCE_DIR).runs)
    search = search_configurations(
        stage, "vllm", factors.lookup(stage), lambda d: accuracy.measured_levels(stage, d)
    )
    assert search is not None and search.best() is not None
    prediction = search.best().prediction
    assert prediction is not None
    tpot = figure(round(prediction.tpot_ms, 3), "ms")
    assert deploy[key].startswith(f"TPOT p50 {tpot}")
    # The TP degree is said once, in the typed configuration, and shown where vLLM takes it.
    assert deploy["GPUs"] == "1 × H200 (tensor parallel 1, 1 replica(s))"
    assert "tensor_parallel_size=1" in deploy["Engine arguments"]


def test_the_configuration_is_typed_and_round_trips_through_the_json_export(reports) -> None:
    """A stage's configuration is one typed model (framework, parallelism, precision, engine
    arguments, GPUs): parallelism and precision are never inside engine_args, in the model or
    the JSON export, and the export reads back equal."""
    from advisor.report.json import read_report_json, render_json

    report = reports["chat_7b_h200"]
    configuration = report.stages[0].configuration
    assert configuration is not None and configuration.framework == "vllm"
    assert configuration.parallelism is not None and configuration.gpus == 1
    assert configuration.precision is not None and configuration.precision.dtype == "float16"
    assert "tensor_parallel_size" not in configuration.engine_args
    deployment = configuration.deployment()
    assert deployment is not None and deployment.label() == configuration.label
    text = render_json(report)
    exported = json.loads(text)["stages"][0]["configuration"]
    assert exported["parallelism"]["tensor_parallel_size"] == 1
    assert "tensor_parallel_size" not in exported["engine_args"]
    assert read_report_json(text) == report


@pytest.mark.parametrize("name", ["chat_7b_h200", "ecommerce_two_stage"])
def test_pdf_page_one_states_the_decision(reports, name: str, tmp_path: Path) -> None:
    from pypdf import PdfReader

    report = reports[name]
    files = generate(report, tmp_path, ["pdf", "md"], stem=name)
    pages = [page.extract_text() for page in PdfReader(files["pdf"]).pages]
    first = _squeezed(pages[0])
    assert _squeezed("The decision") in first
    for decision in report.decisions:
        assert _squeezed(decision.sentence) in first, decision.sentence
        assert _squeezed(f"{decision.stage} → {decision.framework_label}") in first
    assert "Reproduce" in first and _squeezed("python -m advisor bench-plan") in first
    assert not RAW_KEY.search(pages[0]), RAW_KEY.search(pages[0])
    assert not PYTHON_NONE.search(pages[0]) and "For —" not in pages[0]
    for page in pages:
        assert not EXPONENT.search(page), EXPONENT.search(page)
    # The Markdown carries the same decision, first.
    markdown = files["md"].read_text()
    head = markdown[: markdown.index("## The workload")]
    for decision in report.decisions:
        assert decision.sentence.replace("_", "\\_") in head
        for fact in decision.facts:
            assert fact.label in head
    assert not PYTHON_NONE.search(head) and not EXPONENT.search(markdown)
    # Files of this checkout are named relative to it (the report is read elsewhere).
    assert f"{REPO}/" not in markdown[: markdown.index("## Appendix B")]


def test_a_failed_run_reads_run_failed_not_zero_errors(reports) -> None:
    """A FAILED run whose summary says error_rate 0 (it crashed between requests) is shown as
    'run failed' in every format, never as 'Errors 0%'."""
    from advisor.report.html import render_html
    from advisor.report.markdown import render_markdown
    from advisor.report.model import EvidenceFigures

    failed = EvidenceFigures(
        framework="vllm",
        source="measured-here",
        run_id="run-that-crashed",
        validity="FAILED",
        error_rate=0.0,
        provenance="yours",
        provenance_words="your run (this store)",
    )
    report = reports["chat_7b_h200"].model_copy(update={"evidence": [failed], "charts": []})
    markdown = render_markdown(report, {})
    row = next(line for line in markdown.splitlines() if "run-that-crashed" in line)
    assert row.rstrip(" |").endswith("run failed") and "0%" not in row
    html = render_html(report, {})
    speed = html[html.index("<h3>Speed</h3>") : html.index("<h3>Resources and validity</h3>")]
    assert "run failed" in speed and ">0%<" not in speed


def test_a_ladder_run_shows_the_level_the_decision_cites(reports) -> None:
    """The evidence table reads a step ladder at the stage's concurrency, as page 1 does: its
    whole-run figures mix the levels (5,207 tok/s over c1-c256 against 7,179 at c64)."""
    report = reports["chat_7b_h200"]
    (decision,) = report.decisions
    ladder = [row for row in report.evidence if row.run_id and row.level is not None]
    assert ladder, "the shipped vLLM step run is among the evidence"
    row = ladder[0]
    assert row.level == "64" and "level at concurrency 64" in row.context
    cited = f"{row.output_throughput_tok_s:,.0f}"
    assert cited in decision.facts[0].text  # the same figure as the decision's first fact
    assert row.interval_note is not None and row.interval_note.endswith("level c64")
    assert row.output_throughput_low is not None
    assert row.output_throughput_low < row.output_throughput_tok_s < row.output_throughput_high


def test_a_capacity_search_row_counts_only_engine_failures(reports) -> None:
    """The shipped FP8 capacity search's ended-early probes cancelled 272 requests on purpose:
    its summary counts them as cancelled, so its evidence row shows a 0% error rate, not 6.8%."""
    rows = [
        row
        for report in reports.values()
        for row in report.evidence
        if row.run_id == "20261201-180135-222d04bd"
    ]
    assert rows, "the FP8 capacity search is cited as context by a shipped profile"
    assert all(row.error_rate == 0 for row in rows)


def test_a_model_the_bench_cannot_run_is_said_with_the_measuring_command(empty_store) -> None:
    """The speech example names openai/whisper-small, which `bench-plan` refuses as named (no
    preset): page 1's measuring command says what to give first; other profiles' do not."""
    speech = assemble_report(PROFILES / "speech_split_stage.yaml", store_location=empty_store)
    measure = speech.reproduce_commands[0]
    assert measure.value.startswith("python -m advisor bench-plan")
    assert "local folder with the checkpoint of openai/whisper-small" in measure.key
    chat = assemble_report(PROFILES / "chat_7b_h200.yaml", store_location=empty_store)
    assert "local folder" not in chat.reproduce_commands[0].key
