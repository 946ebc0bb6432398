"""Parallelism and precision as run axes: the config, its placement on the visible GPUs, the
backends' refusals, and the CLI's one-line errors. GPU counts come from the labelled fake NVML
(tests/bench/fake_nvml.py): this machine has no GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from bench.core.config import ParallelismConfig, PrecisionConfig, RunConfig
from bench.core.errors import UserError
from bench.core.schema import RunResult
from bench.engines.backends import get_backend
from bench.run.placement import place, visible_devices
from tests.bench.fake_nvml import FakeGpu, FakeNvml
from tests.bench.test_cli import bench

REPO = Path(__file__).resolve().parents[2]


def two_gpus() -> FakeNvml:
    return FakeNvml([FakeGpu(uuid="GPU-aaaa-0"), FakeGpu(uuid="GPU-bbbb-1")])


def config(**fields) -> RunConfig:
    return RunConfig.model_validate({"backend": "vllm", "model": "tiny-llama", **fields})


# --------------------------------------------------------------------------- the config


def test_gpus_needed_and_labels():
    parallelism = ParallelismConfig(tensor_parallel_size=2, replicas=3)
    assert parallelism.gpus_needed == 6
    assert parallelism.label() == "3 x TP=2"
    assert ParallelismConfig().label() == "TP=1"
    assert PrecisionConfig(quantization="fp8", kv_cache_dtype="fp8").label() == (
        "bfloat16 + fp8 weights + fp8 KV"
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tensor_parallel_size": 0}, "greater than or equal to 1"),
        ({"replicas": 2, "gpu_ids": [0]}, "needs 2"),
        ({"replicas": 2, "gpu_ids": [1, 1]}, "twice"),
        ({"gpu_ids": [-1]}, ">= 0"),
    ],
)
def test_bad_parallelism_is_refused(fields, message):
    with pytest.raises(ValidationError, match=message):
        ParallelismConfig(**fields)


def test_only_fp8_and_int8_weights_and_fp8_kv_are_run_precisions():
    with pytest.raises(ValidationError):
        PrecisionConfig(quantization="awq")
    with pytest.raises(ValidationError):
        PrecisionConfig(kv_cache_dtype="int8")


@pytest.mark.parametrize(
    ("engine_args", "named"),
    [
        ({"tensor_parallel_size": 2, "block_size": 16}, "engine_args.tensor_parallel_size"),
        ({"pipeline_parallel_size": 2}, "engine_args.pipeline_parallel_size"),
        ({"dtype": "float16"}, "engine_args.dtype"),
        ({"quantization": "fp8"}, "engine_args.quantization='fp8'"),
        ({"kv_cache_dtype": "fp8"}, "engine_args.kv_cache_dtype='fp8'"),
        (
            {"launch": "vllm", "server_args": {"tensor_parallel_size": 2}},
            "engine_args.server_args.tensor_parallel_size",
        ),
    ],
)
def test_an_engine_arg_that_restates_an_axis_is_refused_naming_it(engine_args, named):
    """Parallelism and precision are said once, in their axes: an engine argument saying one
    of them again is one line naming the argument as written and where it belongs."""
    backend = "openai" if "launch" in engine_args else "vllm"
    with pytest.raises(ValidationError) as caught:
        RunConfig.model_validate(
            {"backend": backend, "model": "tiny-llama", **{"engine_args": engine_args}}
        )
    message = caught.value.errors()[0]["msg"]
    assert named in message and "give it once" in message and "\n" not in message


def test_a_checkpoint_format_or_other_kv_dtype_stays_an_engine_arg():
    kept = config(engine_args={"quantization": "awq", "kv_cache_dtype": "fp8_e5m2"})
    assert kept.engine_args == {"quantization": "awq", "kv_cache_dtype": "fp8_e5m2"}
    assert kept.precision.quantization is None


def test_the_cli_refuses_a_restated_axis_in_one_line():
    done = bench(
        "run", "--backend", "vllm", "--model", "tiny-llama", "--no-store",
        "--engine-arg", "tensor_parallel_size=2",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr
    assert "engine_args.tensor_parallel_size" in done.stderr


def test_results_stored_with_the_axes_in_engine_args_still_load():
    """Results written before parallelism and precision were said once kept the TP degree (and
    vLLM's fp8 options) in the config's engine args. The shipped runs have none such, so the
    older form is made from a shipped run the way those versions wrote it, and must read back
    as the run with the axes in place."""
    path = REPO / "data" / "reference" / "h200_llama2-7b_vllm_fp8_runs.json"
    shipped = next(
        data
        for data in json.loads(path.read_text())["runs"]
        if data["config"]["precision"].get("quantization") == "fp8"
    )
    expected = RunResult.model_validate(shipped)
    older = json.loads(json.dumps(shipped))
    config_data = older["config"]
    config_data["engine_args"] = {
        **config_data["engine_args"],
        "tensor_parallel_size": 1,
        "quantization": config_data["precision"].pop("quantization"),
    }
    if config_data["precision"].get("kv_cache_dtype") == "fp8":
        config_data["engine_args"]["kv_cache_dtype"] = config_data["precision"].pop(
            "kv_cache_dtype"
        )
    config_data.pop("parallelism", None)
    assert RunResult.model_validate(older).config == expected.config


def test_stored_results_from_before_the_axes_still_load():
    """Runs stored before the parallelism/precision axes (no `parallelism` key, no
    `kv_cache_dtype`) read as one engine on one GPU with the model-dtype KV cache; the runs
    recorded with the axes read back exactly as recorded."""
    old = new = 0
    for path in sorted((REPO / "data" / "reference").glob("*_runs.json")):
        for data in json.loads(path.read_text())["runs"]:
            run = RunResult.model_validate(data)
            if "parallelism" not in data["config"]:
                assert "kv_cache_dtype" not in data["config"]["precision"]
                assert run.config.parallelism == ParallelismConfig()
                assert run.config.precision.kv_cache_dtype == "auto"
                old += 1
            else:
                recorded = data["config"]
                assert run.config.parallelism.model_dump() == recorded["parallelism"]
                assert run.config.precision.model_dump() == recorded["precision"]
                new += 1
    assert old > 10
    assert new >= 4  # h200_llama2-7b_vllm_fp8_runs.json


def test_round_trip_keeps_both_axes():
    original = config(
        parallelism={"tensor_parallel_size": 2, "replicas": 2, "gpu_ids": [3, 2, 1, 0]},
        precision={"quantization": "fp8", "kv_cache_dtype": "fp8"},
    )
    again = RunConfig.model_validate_json(original.model_dump_json())
    assert again == original and again.parallelism.gpus_needed == 4


# --------------------------------------------------------------------------- placement


def test_cpu_refuses_tensor_parallelism_and_allows_replicas(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    no_gpu = FakeNvml([])
    with pytest.raises(UserError, match="no GPU is visible here: CPU engines run one process"):
        place(config(parallelism={"tensor_parallel_size": 2}), nvml=no_gpu)
    with pytest.raises(UserError, match="device is cpu"):
        place(config(device="cpu", parallelism={"tensor_parallel_size": 2}), nvml=no_gpu)
    placement = place(config(parallelism={"replicas": 3}), nvml=no_gpu)
    assert placement.device == "cpu" and placement.replicas == 3 and placement.gpus is None
    assert placement.env(0) == {}
    with pytest.raises(UserError, match="CPU"):
        place(config(device="cpu", parallelism={"gpu_ids": [0]}), nvml=no_gpu)


def test_two_gpus_split_by_tensor_parallelism_or_replicas(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    tp2 = place(config(parallelism={"tensor_parallel_size": 2}), nvml=two_gpus())
    assert tp2.device == "cuda" and tp2.replica_devices == [["0", "1"]] and tp2.gpus == 2
    assert tp2.env(0) == {"CUDA_VISIBLE_DEVICES": "0,1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    replicas = place(config(parallelism={"replicas": 2}), nvml=two_gpus())
    assert replicas.replica_devices == [["0"], ["1"]] and replicas.nvml_indices == [0, 1]
    assert replicas.env(1)["CUDA_VISIBLE_DEVICES"] == "1"
    single = place(config(), nvml=two_gpus())
    assert single.replica_devices == [["0"]] and single.nvml_indices == [0]
    chosen = place(config(parallelism={"gpu_ids": [1]}), nvml=two_gpus())
    assert chosen.replica_devices == [["1"]] and chosen.nvml_indices == [1]


def test_more_gpus_than_visible_is_one_line(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(UserError, match=r"x replicas 2 needs 4 GPUs, but 2 GPU\(s\) are visible"):
        place(config(parallelism={"tensor_parallel_size": 2, "replicas": 2}), nvml=two_gpus())
    with pytest.raises(UserError, match="GPU 2 is not visible"):
        place(config(parallelism={"gpu_ids": [2]}), nvml=two_gpus())
    with pytest.raises(UserError, match="needs 1 GPUs, but no GPU is visible"):
        place(config(device="cuda"), nvml=FakeNvml([]))


def test_cuda_visible_devices_is_respected(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert visible_devices(two_gpus()) == (["1"], [1])
    with pytest.raises(UserError, match=r"CUDA_VISIBLE_DEVICES=1"):
        place(config(parallelism={"replicas": 2}), nvml=two_gpus())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb,GPU-aaaa")
    placement = place(config(parallelism={"replicas": 2}), nvml=two_gpus())
    assert placement.replica_devices == [["GPU-bbbb"], ["GPU-aaaa"]]
    assert placement.nvml_indices == [1, 0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_devices(two_gpus()) == ([], [])


@pytest.mark.parametrize("backend", ["pytorch", "torch_compile", "onnxruntime"])
def test_single_device_backends_refuse_tensor_parallelism(backend):
    backend_cls = get_backend(backend)
    with pytest.raises(UserError, match=r"tensor_parallel_size 2 is not implemented.*replicas"):
        backend_cls.engine_args_for(
            {}, ParallelismConfig(tensor_parallel_size=2), PrecisionConfig()
        )
    with pytest.raises(UserError, match="FP8"):  # an FP8 KV cache: no engine here has one
        backend_cls.engine_args_for({}, ParallelismConfig(), PrecisionConfig(kv_cache_dtype="fp8"))
    if backend != "pytorch":  # pytorch maps W8A8 weights of a forward run (bench/engines/w8a8.py)
        with pytest.raises(UserError, match="FP8"):
            backend_cls.engine_args_for(
                {}, ParallelismConfig(), PrecisionConfig(quantization="fp8")
            )
    assert backend_cls.engine_args_for({"a": 1}, ParallelismConfig(replicas=4), PrecisionConfig())


# --------------------------------------------------------------------------- the CLI


def test_cli_option_paths_reach_the_config_and_errors_are_one_line():
    """`--option parallelism.* / precision.*` set the axes; what the machine cannot run is
    one line on stderr and exit code 2 (this machine has no GPU)."""
    from bench.cli import build_run_config

    built = build_run_config(
        None,
        "vllm",
        "tiny-llama",
        None,
        {},
        [],
        [
            "parallelism.tensor_parallel_size=2",
            "parallelism.replicas=2",
            "precision.quantization=fp8",
            "precision.kv_cache_dtype=fp8",
        ],
    )
    assert built.parallelism.gpus_needed == 4
    assert built.precision.quantization == "fp8" and built.precision.kv_cache_dtype == "fp8"
    done = bench(
        "run", "--backend", "pytorch", "--model", "tiny-llama", "--no-store",
        "--option", "parallelism.tensor_parallel_size=2",
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "tensor_parallel_size 2 is not implemented" in done.stderr
    done = bench(
        "run", "--backend", "pytorch", "--model", "tiny-llama", "--no-store",
        "--option", "precision.quantization=awq",
    )  # fmt: skip
    assert done.returncode == 2 and "precision.quantization" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_client_of_a_remote_server_pins_nothing_and_samples_every_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    remote = RunConfig(
        backend="openai", model="tiny-llama", engine_args={"base_url": "http://127.0.0.1:1"}
    )
    placement = place(remote, get_backend("openai"), nvml=two_gpus())
    assert not placement.pinned and placement.env(0) == {} and placement.nvml_indices is None
    assert placement.gpus is None
    launched = RunConfig(backend="openai", model="tiny-llama", engine_args={"launch": "vllm"})
    placement = place(launched, get_backend("openai"), nvml=two_gpus())
    assert placement.pinned and placement.env(0)["CUDA_VISIBLE_DEVICES"] == "0"


def test_an_older_openai_config_with_the_degree_in_server_args_still_loads():
    """Older versions accepted a launched server's `tensor_parallel_size` in server_args when
    it equalled the run's; stored so, it reads back with the degree in parallelism only."""
    from bench.core.config import legacy_axes_moved

    older = {
        "backend": "openai",
        "model": "tiny-llama",
        "engine_args": {"launch": "vllm", "server_args": {"tensor_parallel_size": 2, "x": 1}},
        "parallelism": {"tensor_parallel_size": 2},
    }
    config = RunConfig.model_validate(legacy_axes_moved(older))
    assert config.engine_args == {"launch": "vllm", "server_args": {"x": 1}}
    assert config.parallelism.tensor_parallel_size == 2
    with pytest.raises(ValidationError, match=r"server_args\.tensor_parallel_size restates"):
        RunConfig.model_validate(older)
