"""Diagnostics: each of the seed's troubleshooting rules fires on a crafted run, with the numbers,
inference-correct advice (never training-time remedies) and the profiling command."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import advisor.decide.diagnose as diagnose_module
from advisor.decide.diagnose import diagnose, profiling_command
from bench.core.schema import RunStatus
from tests.advisor.synthetic import synthetic_run

TRAINING_REMEDIES = re.compile(r"gradient|checkpointing|prun(e|ing)|backward|optimizer", re.I)


def rules(run) -> dict[str, object]:
    return {d.rule: d for d in diagnose(run)}


def test_healthy_run_has_no_findings() -> None:
    assert diagnose(synthetic_run("vllm", gpu_utilization_pct=97, memory_efficiency=2.2)) == []


def test_low_gpu_utilization() -> None:
    finding = rules(synthetic_run("vllm", gpu_utilization_pct=62.4))["low_gpu_utilization"]
    assert "62% < 90%" in finding.finding
    assert finding.command.startswith("nsys profile -t cuda,nvtx --stats=true -o ")


def test_utilization_not_measured_is_silent() -> None:
    assert "low_gpu_utilization" not in rules(synthetic_run("vllm", gpu_utilization_pct=None))


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"engine": {"cuda_graphs": False}}, "cuda_graphs = false"),
        ({"engine_args": {"enforce_eager": True}}, "enforce_eager = true"),
    ],
)
def test_cuda_graphs_off(kwargs: dict, why: str) -> None:
    finding = rules(synthetic_run("vllm", **kwargs))["cuda_graphs_off"]
    assert why in finding.finding
    assert "enforce_eager" in finding.advice


def test_long_tail() -> None:
    finding = rules(synthetic_run("vllm", e2e_p50_ms=1000, e2e_p99_ms=4200))["long_tail"]
    # The words are the catalogue's (E2E p99, ms): unchanged from the hand-written ones.
    assert finding.finding.startswith("E2E p99 4200.0 ms is 4.2x its p50 1000.0 ms (threshold")
    assert "enable_flash_sdp(True)" in finding.advice
    assert "time-out" in finding.advice and "priority queue" in finding.advice
    assert "long_tail" not in rules(synthetic_run("vllm", e2e_p50_ms=1000, e2e_p99_ms=2900))


@pytest.mark.parametrize(
    "cause",
    [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "worker died: OOM killer",
        "RuntimeError: CUDA_ERROR_OUT_OF_MEMORY",
    ],
)
def test_out_of_memory(cause: str) -> None:
    finding = rules(synthetic_run("vllm", status=RunStatus.FAILED, failure=cause))["out_of_memory"]
    assert finding.severity == "error"
    for remedy in (
        "gpu_memory_utilization",
        "max_num_seqs",
        "max_model_len",
        "AWQ",
        "FP8",
        "kv_cache_dtype=fp8",
        "tensor_parallel_size",
        "smaller batch",
    ):
        assert remedy in finding.advice


def test_a_room_is_not_an_oom() -> None:
    found = rules(synthetic_run("vllm", status=RunStatus.FAILED, failure="no room in the queue"))
    assert "out_of_memory" not in found
    assert "run_failed" in found


def test_high_error_rate_and_invalid() -> None:
    found = rules(synthetic_run("vllm", error_rate=0.05, valid=False))
    assert "5.0% > budget 1.0%" in found["high_error_rate"].finding
    assert "only 5 requests completed" in found["invalid_run"].finding


def test_memory_efficiency_far_above_the_seed_reference() -> None:
    finding = rules(synthetic_run("vllm", memory_efficiency=18.5))["memory_efficiency"]
    assert "18.50 GB per billion parameters" in finding.finding
    assert "1.2 GB/B" in finding.finding
    assert "gpu_memory_utilization" in finding.advice
    assert "memory_efficiency" not in rules(synthetic_run("vllm", memory_efficiency=2.3))


def test_profiling_command_wraps_the_runs_command() -> None:
    run = synthetic_run("vllm", command="python -m bench run --backend vllm --model llama-2-7b")
    assert profiling_command(run) == (
        f"nsys profile -t cuda,nvtx --stats=true -o {run.run_id} "
        "python -m bench run --backend vllm --model llama-2-7b"
    )
    rebuilt = profiling_command(synthetic_run("vllm"))  # no stored command: rebuilt from config
    assert "python -m bench run --backend vllm --model llama-2-7b" in rebuilt


def test_no_training_time_remedies_anywhere() -> None:
    """The seed's OOM advice is for training; none of it may appear in findings or the module."""
    runs = [
        synthetic_run("vllm", status=RunStatus.FAILED, failure="CUDA out of memory"),
        synthetic_run(
            "vllm",
            error_rate=0.5,
            valid=False,
            e2e_p99_ms=99999,
            gpu_utilization_pct=10,
            memory_efficiency=40,
            engine={"cuda_graphs": False},
        ),
        synthetic_run("torch_compile", engine={"cuda_graphs": False}),
        synthetic_run("tensorrt_llm", status=RunStatus.FAILED, failure="killed"),
    ]
    findings = [d for run in runs for d in diagnose(run)]
    assert len({d.rule for d in findings}) == 8  # every rule fired at least once
    for finding in findings:
        assert not TRAINING_REMEDIES.search(finding.finding + " " + finding.advice), finding
    source = inspect.getsource(diagnose_module)
    assert not TRAINING_REMEDIES.search(source)


def test_tree_data_has_no_training_remedies() -> None:
    tree_text = (Path(__file__).resolve().parents[2] / "data" / "decision_tree.yaml").read_text()
    assert not TRAINING_REMEDIES.search(tree_text)


# ---------------------------------------------------------------- CPU runs get CPU advice


@pytest.mark.parametrize("device", ["cpu", "auto"])
def test_a_cpu_run_gets_no_cuda_graph_finding_and_no_nsys(device: str) -> None:
    """Issue 23: the quick plan sets enforce_eager for vLLM on the CPU; that is no finding."""
    run = synthetic_run(
        "vllm",
        gpu=None,
        engine_args={"enforce_eager": True},
        e2e_p50_ms=1000,
        e2e_p99_ms=4200,
        command="python -m bench run --backend vllm --model tiny-llama --device cpu",
    )
    run = run.model_copy(update={"config": run.config.model_copy(update={"device": device})})
    found = rules(run)
    assert "cuda_graphs_off" not in found
    tail = found["long_tail"]
    assert "on the CPU" in tail.finding and "OMP_NUM_THREADS" in tail.advice
    assert "flash" not in tail.advice.lower()
    assert tail.command.startswith("py-spy record --subprocesses -o ")
    assert "nsys" not in profiling_command(run) and "cuda" not in tail.command.split("--")[0]


def test_the_same_run_on_a_gpu_keeps_the_gpu_advice() -> None:
    run = synthetic_run("vllm", engine_args={"enforce_eager": True})
    assert "cuda_graphs_off" in rules(run)
    assert profiling_command(run).startswith("nsys profile -t cuda")


def test_a_cpu_out_of_memory_is_about_host_memory() -> None:
    run = synthetic_run("vllm", gpu=None, status=RunStatus.FAILED, failure="Out of memory")
    run = run.model_copy(update={"config": run.config.model_copy(update={"device": "cpu"})})
    finding = rules(run)["out_of_memory"]
    assert "host memory" in finding.finding and "VLLM_CPU_KVCACHE_SPACE" in finding.advice
    assert "gpu_memory_utilization" not in finding.advice


def test_a_capacity_search_is_not_flagged_for_the_requests_its_ended_probes_cancelled() -> None:
    """The shipped FP8 capacity search (data/reference/h200_llama2-7b_capacity_chat_slo_runs.json):
    its ended-early probes cancelled 272 of its 4,000 requests on purpose. The summary counts
    them as cancelled, not failed (the report had called it a 6.8% error rate), and the
    error-rate rule judges the engine's failures only; with real failures among the answered
    requests it fires and says what it left out."""
    import json

    from bench.core.schema import RunResult

    path = (
        Path(__file__).resolve().parents[2]
        / "data/reference/h200_llama2-7b_capacity_chat_slo_runs.json"
    )
    runs = [RunResult.model_validate(r) for r in json.loads(path.read_text())["runs"]]
    (search,) = [r for r in runs if r.run_id == "20261201-180135-222d04bd"]
    assert (search.summary.failed, search.summary.cancelled) == (0, 272)
    assert any(probe.ended_early for probe in search.pattern_report.probes)
    assert "high_error_rate" not in {d.rule for d in diagnose(search)}
    failing = search.model_copy(
        update={
            "summary": search.summary.model_copy(
                update={"failed": 100, "successful": 3628, "error_rate": 100 / 3728}
            )
        }
    )
    (finding,) = [d for d in diagnose(failing) if d.rule == "high_error_rate"]
    assert finding.finding.startswith("100 of 3728 requests failed (error rate 2.7% > budget 1.0%")
    assert "272 more were cancelled by the harness and are not counted" in finding.finding
