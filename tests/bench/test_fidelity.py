"""bench/orchestrate/fidelity.py: the PyTorch checks on real tiny-llama (CPU), the CLI's user
errors, helpers.

The vLLM check and its `LLM.generate` reference are tested in tests/bench/backends/test_vllm.py,
beside the fixture that makes tiny-llama loadable by vLLM's CPU attention.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli import main
from bench.core.schema import ModelInfo, RequestRecord
from bench.orchestrate.fidelity import (
    PytorchFidelityCheck,
    paired_fidelity,
    percentile,
    plain_generate_throughput,
    run_check,
    step_gaps_ms,
)
from bench.storage.store import ResultStore


def record(chunks_ms: list[float], warmup: bool = False, error: str | None = None):
    chunk_ns = [int(ms * 1e6) for ms in chunks_ms]
    return RequestRecord(
        id="r",
        start_ns=0,
        chunk_ns=chunk_ns,
        end_ns=chunk_ns[-1] if chunk_ns else 1,
        input_tokens=8,
        output_tokens=len(chunk_ns),
        error=error,
        warmup=warmup,
    )


def test_step_gaps_come_from_a_measured_successful_record() -> None:
    records = [
        record([0, 100, 300], warmup=True),  # warm-up: not this batch's steps
        record([0, 5], error="boom"),
        record([10, 30, 70, 80]),
    ]
    assert step_gaps_ms(records) == [20.0, 40.0, 10.0]
    assert step_gaps_ms([record([0, 5], warmup=True)]) == []
    assert percentile([20.0, 40.0, 10.0], 0.10) == 10.0
    assert percentile([20.0, 40.0, 10.0], 0.50) == 20.0
    assert percentile([], 0.5) is None


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--engine", "tensorrt", "--model", "tiny-llama"], "unknown engine 'tensorrt'"),
        (
            ["--engine", "pytorch", "--model", "tiny-llama", "--option", "requests=8"],
            "requests: unknown field; allowed: model, dtype",
        ),
        (["--engine", "vllm", "--model", "m", "--option", "max_num_seqs=0"], "max_num_seqs:"),
        (["--engine", "pytorch", "--model", "m", "--option", "pairs"], "must look like key=value"),
    ],
)
def test_fidelity_cli_user_errors(
    args: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["fidelity", *args]) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


TINY = {
    "model": "tiny-llama",
    "dtype": "float32",
    "device": "cpu",
    "batch": 4,
    "prompt_tokens": 16,
    "output_tokens": 8,
}


@pytest.mark.slow
async def test_paired_mode_alternates_plain_and_harness_on_one_model(
    tiny_llama: ModelInfo,
) -> None:
    """Real tiny-llama on CPU: every pair ran both sides in ABBA order, on full batches."""
    check = PytorchFidelityCheck(**TINY, pairs=4)
    result = await paired_fidelity(check, tiny_llama)
    assert [pair.plain_first for pair in result.pairs] == [True, False, False, True]
    for pair in result.pairs:
        # Plain: 4 rows x 8 tokens in plain_elapsed_s; ours: the harness's measured phase.
        assert pair.plain_output_throughput_tok_s == pytest.approx(4 * 8 / pair.plain_elapsed_s)
        assert pair.backend_output_throughput_tok_s == pytest.approx(
            4 * 8 / pair.backend_duration_s
        )
        assert pair.ratio == pytest.approx(
            pair.backend_output_throughput_tok_s / pair.plain_output_throughput_tok_s
        )
        assert 0 < pair.backend_step_ms_p10 <= pair.backend_step_ms_p50
        # Read through the catalogue (FidelityPair.metric_of): the batch summary's TTFT p50.
        assert pair.backend_ttft_ms_p50 is not None and pair.backend_ttft_ms_p50 > 0
    ratios = sorted(pair.ratio for pair in result.pairs)
    assert result.ratio == pytest.approx((ratios[1] + ratios[2]) / 2)
    assert result.passed == (result.ratio >= 0.90)
    assert result.engine.extra["max_batch_size"] == 4 and result.engine.extra["compiled"] is False


@pytest.mark.slow
def test_launch_mode_runs_the_backend_through_launch(tmp_path: Path) -> None:
    """Plain generate in its own process vs the backend through bench.run.api.launch, 2 rounds."""
    check = PytorchFidelityCheck(**TINY, mode="launch", rounds=2, repeats=2, batches=2)
    with ResultStore(tmp_path / "results.sqlite") as store:
        result = run_check(check, store, tmp_path)
        stored = store.list_runs()
    assert len(result.rounds) == 2 and len(result.runs) == 2
    assert {run.run_id for run in stored} == {run.run_id for run in result.runs}
    for fidelity_round, run in zip(result.rounds, result.runs, strict=True):
        assert run.status.value == "COMPLETED"
        assert run.summary is not None and run.summary.successful == 4 * 2
        assert fidelity_round.backend_output_throughput_tok_s == pytest.approx(
            run.summary.output_throughput_tok_s
        )
        assert fidelity_round.plain is not None
        assert fidelity_round.plain.output_tokens_per_row == 8
        assert len(fidelity_round.plain.runs_output_throughput_tok_s) == 2
    median = sorted(r.ratio for r in result.rounds)[0]  # median of two = the lower (first) one
    assert result.ratio == pytest.approx(median)
    assert result.ratio_spread == sorted(r.ratio for r in result.rounds)
    assert (tmp_path / "runs" / "pytorch_fidelity_nvml0.5s_r0" / "result.json").is_file()


@pytest.mark.slow
def test_plain_generate_throughput_reference(tiny_llama: ModelInfo) -> None:
    result = plain_generate_throughput(tiny_llama.path, 4, 16, 8, dtype="float32", device="cpu")
    assert result.output_tokens_per_row == 8
    assert len(result.runs_output_throughput_tok_s) == 3
    assert min(result.runs_output_throughput_tok_s) <= result.output_throughput_tok_s
    assert result.output_throughput_tok_s > 0


REFERENCE = Path(__file__).resolve().parents[2] / "data" / "reference"


def test_vllm_checks_carry_their_parallelism_and_precision_and_older_checks_still_load():
    """A vLLM check says its TP degree in `parallelism` and FP8 in its precision fields; the
    shipped plan and campaign record wrote them as engine args and still read the same."""
    import json

    from bench.orchestrate.campaign import CampaignResult, FidelityStep, load_plan, step_resources
    from bench.orchestrate.fidelity import VllmFidelityCheck

    plan = load_plan(REFERENCE / "h200_llama2-7b_vllm_fp8" / "plan.yaml")
    checks = [s.check for s in plan.steps if isinstance(s, FidelityStep)]
    fp8 = [c for c in checks if isinstance(c, VllmFidelityCheck) and c.precision.uses_fp8]
    assert fp8 and all("quantization" not in c.engine_args for c in fp8)
    assert fp8[0].precision.quantization == "fp8" and fp8[0].precision.kv_cache_dtype == "fp8"
    campaign = json.loads(
        (REFERENCE / "h200_llama2-7b_vllm_fp8" / "campaign-vllm-fp8.json").read_text()
    )
    stored = [
        outcome.step.check
        for outcome in CampaignResult.model_validate(campaign).steps
        if isinstance(outcome.step, FidelityStep)
    ]
    assert stored and stored[0].precision.uses_fp8
    assert stored[0].engine_args == {"gpu_memory_utilization": 0.85, "max_model_len": 1024}
    older = {"model": "llama-2-13b", "engine_args": {"tensor_parallel_size": 2, "block_size": 16}}
    check = VllmFidelityCheck.model_validate(older)
    assert check.parallelism.tensor_parallel_size == 2 and check.engine_args == {"block_size": 16}
    step = FidelityStep(name="tp2", check=check)
    assert step_resources(step).gpus == 2
    with pytest.raises(ValueError, match=r"engine_args\.dtype restates the run's precision"):
        VllmFidelityCheck.model_validate({"model": "m", "engine_args": {"dtype": "float16"}})
    with pytest.raises(ValueError, match="one engine"):
        VllmFidelityCheck.model_validate({"model": "m", "parallelism": {"replicas": 2}})
