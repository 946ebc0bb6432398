"""Executor settings, a job's resource request, and the node's version check (no Ray needed)."""

from __future__ import annotations

import pytest

from bench.core.config import RunConfig
from bench.core.errors import UserError
from bench.orchestrate.executors import ExecutorSettings, job_resources, parse_settings
from bench.orchestrate.ray_executor import is_shared_store
from bench.orchestrate.ray_node import comparability_versions, version_differences


def config(**fields) -> RunConfig:
    return RunConfig(backend="pytorch", model="tiny-llama", **fields)


def test_settings_from_environment():
    assert ExecutorSettings.from_env({}).name == "local"
    settings = ExecutorSettings.from_env({"ADVISOR_EXECUTOR": "ray", "RAY_ADDRESS": "h:6379"})
    assert (settings.name, settings.ray_address) == ("ray", "h:6379")
    assert settings.runner_args() == ["--executor", "ray", "--ray-address", "h:6379"]
    # RAY_ADDRESS alone (set for other Ray tools) does not switch the executor
    assert ExecutorSettings.from_env({"RAY_ADDRESS": "h:6379"}).ray_address is None
    with pytest.raises(UserError, match=r"unknown executor .slurm.; known: local, ray"):
        ExecutorSettings.from_env({"ADVISOR_EXECUTOR": "slurm"})
    with pytest.raises(UserError, match="needs --executor ray"):
        parse_settings("local", "h:6379")


def test_job_resources_gpus_type_and_text():
    resources = job_resources([config(gpu_type="H200"), config(gpu_type="H200")], cpus=2)
    assert (resources.gpus, resources.gpu_type) == (1, "H200")
    assert resources.describe() == "1 × H200, 2 CPU"
    options = resources.ray_options()
    assert options["num_gpus"] == 1 and options["num_cpus"] == 2
    assert options["resources"] == {"accelerator_type:H200": 0.001}
    assert options["max_retries"] == 0 and options["retry_exceptions"] is False
    # Ray's workers run at nice 15 unless told otherwise; a measurement must not
    assert options["runtime_env"] == {"env_vars": {"RAY_worker_niceness": "0"}}
    assert resources.fits({"CPU": 8, "GPU": 2, "accelerator_type:H200": 1})
    assert not resources.fits({"CPU": 8, "GPU": 2, "accelerator_type:A100": 1})
    assert not resources.fits({"CPU": 1, "GPU": 2, "accelerator_type:H200": 1})

    cpu_only = job_resources([config(device="cpu")])
    assert cpu_only.gpus == 0 and cpu_only.describe() == "1 CPU"
    assert cpu_only.ray_options()["resources"] == {}


def test_gpus_are_tensor_parallel_size_times_replicas():
    tp2x2 = config(parallelism={"tensor_parallel_size": 2, "replicas": 2}, gpu_type="H200")
    resources = job_resources([tp2x2, config()])
    assert resources.gpus == 4 and resources.describe() == "4 × H200, 1 CPU"
    on_cpu = config(parallelism={"tensor_parallel_size": 2}, device="cpu")
    assert job_resources([on_cpu]).gpus == 0


def test_one_job_one_gpu_type():
    with pytest.raises(UserError, match="different GPU types"):
        job_resources([config(gpu_type="H200"), config(gpu_type="A100")])


def test_gpu_type_is_a_plain_name():
    with pytest.raises(ValueError):
        config(gpu_type="H200; rm -rf /")


def test_version_differences_name_what_differs():
    here = comparability_versions()
    assert here["bench"] and len(here["bench"]) == 12
    assert version_differences(here, dict(here)) == []
    node = {**here, "vllm": "0.1.0", "bench": "000000000000"}
    submitter = {**here, "vllm": "0.2.0"}
    lines = version_differences(submitter, node)
    assert len(lines) == 2
    assert "vllm: 0.1.0 on the node, 0.2.0 on the submitter" in lines
    assert any(line.startswith("bench: 000000000000 on the node") for line in lines)


def test_shared_store_is_a_postgresql_url():
    assert is_shared_store("postgresql://u@db:5432/results")
    assert is_shared_store("postgresql+psycopg://db/results")
    assert not is_shared_store("sqlite:////tmp/x.sqlite")
    assert not is_shared_store("/tmp/postgresql.sqlite")
    assert not is_shared_store(None)


def test_two_gpu_example_plan_asks_one_one_and_two_gpus():
    """examples/campaigns/ray-2gpu.yaml: two single-GPU steps that can share a 2-GPU node, then
    one that needs both."""
    from pathlib import Path

    from bench.orchestrate.campaign import load_plan, step_resources

    plan = load_plan(Path(__file__).resolve().parents[2] / "examples/campaigns/ray-2gpu.yaml")
    assert [step_resources(step).gpus for step in plan.steps] == [1, 1, 2]
    first, second, _ = (step.config for step in plan.steps)
    assert first.model_dump(exclude={"label"}) == second.model_dump(exclude={"label"})


def test_unreachable_cluster_is_one_line_and_exit_2(tmp_path):
    """Ray itself would retry an unreachable address for minutes; the runner says so at once."""
    import subprocess
    import sys
    from pathlib import Path

    command = [sys.executable, "-m", "bench.orchestrate.jobs", "--executor", "ray", "--ray-address"]
    completed = subprocess.run(
        [*command, "127.0.0.1:1", "--store", str(tmp_path / "s.sqlite"), "--idle-exit-s", "1"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert lines == [lines[0]] and "cannot reach the Ray cluster at '127.0.0.1:1'" in lines[0]
