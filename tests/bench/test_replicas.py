"""Replicas behind one load generator, and the whole-tree kill, on CPU.

The routing and kill cases use the `fake` backend (a labelled test double: a crash and helper
processes in sessions of their own can be made on demand only there); the service cases run
real engines (pytorch, and vLLM's CPU build under the slow marker) on tiny-llama.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from bench.core.config import ConcurrencyLoad, GenerateWorkload, LengthDistribution, RunConfig
from bench.core.metrics import summarize
from bench.core.progress import RunProgress
from bench.core.schema import RunResult, RunStatus
from bench.run.api import launch
from bench.run.proctree import ProcessTree


def run_config(backend: str, engine_args: dict, replicas: int = 2, **load) -> RunConfig:
    return RunConfig(
        backend=backend,
        model="tiny-llama",
        device="cpu",
        precision={"dtype": "float32"},
        engine_args=engine_args,
        parallelism={"replicas": replicas},
        workload=GenerateWorkload(
            prompt_tokens=LengthDistribution(mean=16), output_tokens=LengthDistribution(mean=8)
        ),
        load=ConcurrencyLoad(**{"concurrency": 4, "duration_s": 2.0, "warmup_requests": 2, **load}),
        validity={"min_duration_s": 1, "min_requests": 10},
    )


def gone(pid: int) -> bool:
    try:
        process = psutil.Process(pid)
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def check_service_split(result, out_dir) -> None:
    """Records split across replicas; the run's summary is all of them, each replica's its own."""
    from bench.core.metrics import read_records_jsonl

    records = [r for r in read_records_jsonl(out_dir / "records.jsonl") if not r.warmup]
    served = {record.replica for record in records}
    assert served == {0, 1}, served
    assert len(result.replicas) == 2
    assert {replica.replica for replica in result.replicas} == {0, 1}
    by_replica = {replica.replica: replica.summary for replica in result.replicas}
    assert sum(s.requests for s in by_replica.values()) == result.summary.requests
    assert sum(s.output_tokens for s in by_replica.values()) == result.summary.output_tokens
    for index, summary in by_replica.items():
        own = [record for record in records if record.replica == index]
        assert summary == summarize(own, result.config.slo)
    assert summarize(records, result.config.slo) == result.summary
    pids = [replica.pid for replica in result.replicas]
    assert len(set(pids)) == 2 and all(gone(pid) for pid in pids)
    assert result.engine.processes_left == []


def test_fake_replicas_share_one_load_generator(tmp_path):
    """Least outstanding first: at concurrency 4 over 2 equal replicas both carry load."""
    out = tmp_path / "out"
    result = launch(run_config("fake", {"ttft_s": 0.002, "itl_s": 0.001}), out_dir=out)
    assert result.status == RunStatus.COMPLETED, result.failure
    assert result.validity.status.value == "VALID", result.validity.reasons
    check_service_split(result, out)
    shares = [replica.summary.requests for replica in result.replicas]
    assert min(shares) / max(shares) > 0.7, shares  # equal replicas, even split


def test_a_replica_that_fails_to_load_fails_the_run_with_its_cause(tmp_path):
    result = launch(run_config("fake", {"load_error": "no memory for weights"}), out_dir=tmp_path)
    assert result.status == RunStatus.FAILED
    assert result.failure.cause.startswith("replica ")
    assert "RuntimeError: no memory for weights" in result.failure.cause
    assert all(gone(replica.pid) for replica in result.replicas)
    assert all(Path(replica.log_path).exists() for replica in result.replicas)


def test_cli_runs_replicas_from_option_flags(tmp_path):
    """`bench run --option parallelism.replicas=2`: the stored result and records carry them."""
    from tests.bench.test_cli import bench

    done = bench(
        "run", "--backend", "fake", "--model", "tiny-llama", "--device", "cpu",
        "--concurrency", "4", "--duration-s", "1", "--dtype", "float32",
        "--prompt-tokens", "8", "--output-tokens", "4", "--engine-arg", "itl_s=0.001",
        "--option", "parallelism.replicas=2", "--option", "validity.min_requests=5",
        "--option", "validity.min_duration_s=0.5", "--no-store", "--out", str(tmp_path), "--json",
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = RunResult.model_validate_json(done.stdout)
    assert result.config.parallelism.replicas == 2 and len(result.replicas) == 2
    check_service_split(result, tmp_path)


def test_one_request_at_a_time_alternates_replicas(tmp_path):
    out = tmp_path / "out"
    config = run_config("fake", {"ttft_s": 0.001}, concurrency=1, duration_s=None, max_requests=10)
    result = launch(config, out_dir=out)
    from bench.core.metrics import read_records_jsonl

    order = [r.replica for r in read_records_jsonl(out / "records.jsonl")]
    assert order[:12] == [0, 1] * 6  # 2 warm-ups then 10 measured, ties taken in turn
    assert result.status == RunStatus.COMPLETED


def test_pytorch_replicas_of_tiny_llama(tmp_path, tiny_llama):
    """Two real PyTorch engines, one load generator: the service figures are their sum."""
    out = tmp_path / "out"
    config = run_config("pytorch", {"max_batch_size": 2}, duration_s=3.0)
    result = launch(config, out_dir=out)
    assert result.status == RunStatus.COMPLETED, result.failure
    check_service_split(result, out)
    assert result.summary.tok_s_per_user is not None
    assert result.summary.gpus is None  # CPU: no per-GPU figure is invented
    assert all(replica.load_s and replica.load_s > 0 for replica in result.replicas)


@pytest.mark.slow
def test_vllm_cpu_replicas_of_tiny_llama(tmp_path, tiny_llama):
    out = tmp_path / "out"
    config = run_config("vllm", {"max_model_len": 256, "max_num_seqs": 4}, duration_s=4.0)
    result = launch(config, out_dir=out)
    assert result.status == RunStatus.COMPLETED, result.failure
    check_service_split(result, out)


# --------------------------------------------------------------------------- kill -9


def kill_worker_when_helpers_run(progress_pids: list[int], helpers: list[int], result: list):
    """Wait for the worker and its session helpers, remember them, then SIGKILL the worker."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if progress_pids:
            tree = ProcessTree(progress_pids[0])
            tree.snapshot()
            # 2 helpers, each with a child: 4 processes that left the worker's group.
            outside = [p.pid for p in tree.known.values() if os.getpgid(p.pid) != progress_pids[0]]
            if len(outside) >= 4:
                helpers.extend(tree.known)
                os.kill(progress_pids[0], signal.SIGKILL)
                return
        time.sleep(0.1)
    result.append("helpers never appeared")


def test_kill_9_of_the_worker_leaves_no_process(tmp_path):
    """A worker whose engine started helpers in sessions of their own (vllm#55510's shape)
    is killed with SIGKILL mid-run: the run is FAILED and none of its processes survive."""
    pids: list[int] = []
    helpers: list[int] = []
    errors: list[str] = []

    def on_progress(p: RunProgress) -> None:
        if p.worker_pid and not pids:
            pids.append(p.worker_pid)

    config = run_config("fake", {"itl_s": 0.01, "session_children": 2}, replicas=1, duration_s=60)
    killer = threading.Thread(target=kill_worker_when_helpers_run, args=(pids, helpers, errors))
    killer.start()
    result = launch(config, out_dir=tmp_path, on_progress=on_progress)
    killer.join()
    assert not errors
    assert result.status == RunStatus.FAILED
    assert "exited with code -9" in result.failure.cause
    assert len(helpers) >= 4
    assert all(gone(pid) for pid in [*pids, *helpers]), [p for p in helpers if not gone(p)]
    assert result.engine.processes_left == []


def test_kill_9_of_one_replica_fails_the_run_and_leaves_nothing(tmp_path):
    pids: list[int] = []
    helpers: list[int] = []
    errors: list[str] = []

    def on_progress(p: RunProgress) -> None:
        if p.worker_pid and not pids:
            pids.append(p.worker_pid)

    config = run_config("fake", {"itl_s": 0.01, "session_children": 2}, duration_s=60)
    killer = threading.Thread(target=kill_worker_when_helpers_run, args=(pids, helpers, errors))
    killer.start()
    result = launch(config, out_dir=tmp_path, on_progress=on_progress)
    killer.join()
    assert not errors
    assert result.status == RunStatus.FAILED
    assert result.failure.cause.startswith("replica 0: worker exited with code -9")
    assert result.replicas[0].status == RunStatus.FAILED
    assert "code -9" in result.replicas[0].failure.cause
    every = [*helpers, *(replica.pid for replica in result.replicas)]
    assert all(gone(pid) for pid in every), [p for p in every if not gone(p)]
    assert result.engine.processes_left == []


def test_process_tree_finds_helpers_that_left_the_group():
    """The tree-kill logic alone, on a real process tree: root -> helper (new session) ->
    grandchild; root killed first, the helper re-parented; kill() still ends both."""
    import subprocess
    import sys

    script = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import subprocess, sys, time; "
        'subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]); '
        "time.sleep(60)'], start_new_session=True); time.sleep(60)"
    )
    root = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    tree = ProcessTree(root.pid)
    deadline = time.monotonic() + 20
    while len(tree.known) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
        tree.snapshot()
    assert len(tree.known) == 2
    remembered = list(tree.known)
    root.kill()
    root.wait()
    assert all(not gone(pid) for pid in remembered)  # orphans, outside the root's group
    assert tree.kill() == []
    assert all(gone(pid) for pid in remembered)
