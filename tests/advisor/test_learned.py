"""The learned second opinion on SYNTHETIC stored runs (crafted, labelled synthetic test data)."""

from __future__ import annotations

from pathlib import Path

from advisor.decide.learned import MIN_GROUPS, labelled_groups, learned_opinion
from advisor.decide.recommend import recommend
from advisor.workload.profile_input import profile_from_dict
from bench.storage.store import ResultStore
from tests.advisor.synthetic import SYNTHETIC_LABEL, synthetic_run


def synthetic_campaign() -> list:
    """Synthetic rule: TensorRT-LLM wins below concurrency 16, vLLM from 16 up (two runs each)."""
    runs = []
    for model in ("llama-2-7b", "mistral-7b"):
        for concurrency in (1, 2, 4, 8, 16, 32, 64, 128):
            low = concurrency < 16
            runs.append(
                synthetic_run(
                    "tensorrt_llm",
                    model=model,
                    concurrency=concurrency,
                    throughput_tok_s=100.0 * concurrency * (1.3 if low else 0.8),
                )
            )
            runs.append(
                synthetic_run(
                    "vllm",
                    model=model,
                    concurrency=concurrency,
                    throughput_tok_s=100.0 * concurrency,
                )
            )
    return runs


def test_groups_and_winners() -> None:
    x, y, used = labelled_groups(synthetic_campaign())
    assert len(x) == 16 and used == 32
    assert y.count("tensorrt_llm") == 8 and y.count("vllm") == 8
    assert all(run.config.label == SYNTHETIC_LABEL for run in synthetic_campaign())


def test_fitted_tree_with_cross_validated_accuracy() -> None:
    stage = profile_from_dict({"model": "llama-2-7b", "gpu": {"type": "H200"}, "concurrency": 64})
    opinion = learned_opinion(synthetic_campaign(), stage.primary, 6.7, recommended="vllm")
    assert opinion.fitted
    assert opinion.groups == 16 and opinion.runs == 32
    assert opinion.cv_scheme.startswith("stratified 5-fold")
    assert opinion.cv_accuracy >= 0.8  # the synthetic rule is one threshold on concurrency
    assert opinion.baseline_accuracy == 0.5
    assert "concurrency" in opinion.tree_text
    assert opinion.prediction == "vllm"
    assert opinion.agrees_with.startswith("agrees")
    low = profile_from_dict({"model": "llama-2-7b", "gpu": {"type": "H200"}, "concurrency": 2})
    assert learned_opinion(synthetic_campaign(), low.primary, 6.7, "vllm").agrees_with.startswith(
        "disagrees"
    )


def test_leave_one_out_when_a_class_has_one_example() -> None:
    runs = synthetic_campaign()
    # one extra group where pytorch wins: a class of size 1
    runs += [
        synthetic_run("pytorch", model="llama-2-13b", concurrency=1, throughput_tok_s=999),
        synthetic_run("vllm", model="llama-2-13b", concurrency=1, throughput_tok_s=1),
    ]
    opinion = learned_opinion(runs)
    assert opinion.fitted
    assert opinion.cv_scheme.startswith("leave-one-out")
    assert opinion.class_counts["pytorch"] == 1


def test_too_little_evidence_says_so() -> None:
    runs = synthetic_campaign()[: 2 * (MIN_GROUPS - 1)]
    opinion = learned_opinion(runs)
    assert not opinion.fitted
    assert opinion.cv_accuracy is None and opinion.tree_text is None
    assert opinion.message.startswith("not enough stored evidence for a learned opinion (5 ")
    assert not opinion.shown
    assert f"{MIN_GROUPS - 1} workload group(s)" in opinion.message


def test_one_winner_everywhere_is_not_fitted() -> None:
    runs = [r for r in synthetic_campaign() if r.config.load.concurrency >= 16]
    opinion = learned_opinion(runs)
    assert not opinion.fitted and "1 distinct winner" in opinion.message


def test_invalid_runs_and_single_framework_groups_do_not_count() -> None:
    runs = [synthetic_run("vllm", concurrency=c) for c in range(1, 20)]
    runs += [synthetic_run("tensorrt_llm", concurrency=c, valid=False) for c in range(1, 20)]
    assert labelled_groups(runs)[0] == []


def test_learned_opinion_never_overrides_measurements(tmp_path: Path) -> None:
    """Stored evidence teaches vLLM at high concurrency, but this workload's own measurements say
    TensorRT-LLM: the recommendation follows the measurements and reports the disagreement."""
    store = ResultStore(tmp_path / "results.sqlite")
    runs = [
        *synthetic_campaign(),
        synthetic_run("tensorrt_llm", concurrency=48, throughput_tok_s=9000),
        synthetic_run("vllm", concurrency=48, throughput_tok_s=4000),
    ]
    for run in runs:
        store.create_run(run)
        store.update_run(run)
    profile = profile_from_dict(
        {
            "fixed_input_shapes": True,
            "build_time_tolerance": "hours",
            "model": "llama-2-7b",
            "gpu": {"type": "H200"},
            "concurrency": 48,
        }
    )
    stage = recommend(profile, store=store, reference_dir=tmp_path / "none").stages[0]
    store.close()
    assert stage.recommendation.framework == "tensorrt_llm"
    assert stage.recommendation.follows == "measurements"
    assert stage.learned.fitted
    assert stage.learned.groups == 17


def test_shown_only_when_the_accuracy_interval_beats_the_baseline() -> None:
    opinion = learned_opinion(synthetic_campaign())
    assert opinion.shown and opinion.tree_text
    assert opinion.cv_accuracy_low > opinion.baseline_accuracy  # the rule, on clean data
    assert opinion.cv_accuracy_low <= opinion.cv_accuracy <= opinion.cv_accuracy_high


def test_no_better_than_guessing_is_one_line_and_nothing_else() -> None:
    """SYNTHETIC: the winner ignores every feature (alternates), so the tree cannot beat the
    majority guess by more than its interval."""
    runs = []
    for index, concurrency in enumerate((1, 2, 4, 8, 16, 32, 64, 128)):
        fast, slow = (200, 100) if index % 2 == 0 else (100, 200)
        runs += [
            synthetic_run("vllm", concurrency=concurrency, throughput_tok_s=fast),
            synthetic_run("pytorch", concurrency=concurrency, throughput_tok_s=slow),
        ]
    stage = profile_from_dict({"model": "llama-2-7b", "gpu": {"type": "H200"}, "concurrency": 8})
    opinion = learned_opinion(runs, stage.primary, 6.7, recommended="vllm")
    assert opinion.fitted and not opinion.shown
    assert opinion.message == (
        f"not enough stored evidence for a learned opinion (accuracy {opinion.cv_accuracy:.2f} "
        f"vs baseline {opinion.baseline_accuracy:.2f})"
    )
    assert opinion.prediction is None and opinion.agrees_with is None and opinion.tree_text is None


def test_shipped_reference_data_gives_an_opinion_only_where_it_beats_the_baseline() -> None:
    """The shipped reference runs (73 VALID in 26 workload groups once the H100 encoder ladders
    landed): the opinion is shown because the lower end of its cross-validated accuracy's
    interval clears the majority-class baseline, and it calls itself a second opinion."""
    from advisor.sizing.measured import measured_reference_runs
    from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

    shipped = measured_reference_runs(SHIPPED_REFERENCE_DIR)
    runs = [run for file_runs in shipped.values() for run in file_runs]
    opinion = learned_opinion(runs)
    assert opinion.fitted and opinion.groups >= 20
    assert opinion.shown and opinion.cv_accuracy_low > opinion.baseline_accuracy
    assert "a second opinion, never used over measurements" in opinion.message
    assert opinion.tree_text


def test_wilson_interval() -> None:
    from advisor.decide.learned import wilson_interval

    low, high = wilson_interval(8, 9)
    assert 0.5 < low < 8 / 9 < high <= 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
