"""Tensor parallelism and FP8 as each framework's own arguments: vLLM in-process and `vllm serve`
(names checked against the installed vLLM), trtllm-serve, TensorRT-LLM's LLM API (against the
labelled stand-in in tests/standins), and the refusals of the single-device backends."""

from __future__ import annotations

import asyncio

import pytest

from bench.core.config import GenerateWorkload, ParallelismConfig, PrecisionConfig
from bench.core.errors import UserError
from bench.engines.backends import get_backend
from bench.engines.backends.vllm import engine_arg_fields, vllm_parallel_args
from bench.engines.launchers import trtllm_serve_command, vllm_serve_command
from tests.bench.backends.test_tensorrt_llm import MODEL, _init_event, standin  # noqa: F401

TP2 = ParallelismConfig(tensor_parallel_size=2)
FP8_BOTH = PrecisionConfig(quantization="fp8", kv_cache_dtype="fp8")


def test_vllm_tp2_uses_the_multiprocessing_executor_and_fp8_names():
    """The axes reach vLLM only at load, from the typed values: engine_args_for leaves the
    user's engine args as given; vllm_parallel_args (what load uses) adds the axes."""
    assert get_backend("vllm").engine_args_for({"block_size": 16}, TP2, FP8_BOTH) == {
        "block_size": 16
    }
    args = vllm_parallel_args({"block_size": 16}, TP2, FP8_BOTH)
    assert args == {
        "block_size": 16,
        "tensor_parallel_size": 2,
        "distributed_executor_backend": "mp",
        "quantization": "fp8",
        "kv_cache_dtype": "fp8",
    }
    # Every name is a field of the installed vLLM's EngineArgs (read from its source).
    assert set(args) <= engine_arg_fields(import_vllm=False)


def test_vllm_single_gpu_args_are_left_alone_and_choices_are_kept():
    backend = get_backend("vllm")
    assert backend.engine_args_for({}, ParallelismConfig(replicas=2), PrecisionConfig()) == {}
    kept = vllm_parallel_args({"distributed_executor_backend": "ray"}, TP2, PrecisionConfig())
    assert kept["distributed_executor_backend"] == "ray"  # an explicit choice wins


@pytest.mark.parametrize(
    ("engine_args", "message"),
    [
        ({"quantization": "awq"}, "quantization='awq' contradicts"),
        ({"kv_cache_dtype": "fp8_e5m2"}, "kv_cache_dtype='fp8_e5m2' contradicts"),
    ],
)
def test_vllm_contradictions_are_refused(engine_args, message):
    with pytest.raises(UserError, match=message):
        vllm_parallel_args(engine_args, TP2, FP8_BOTH)
    with pytest.raises(UserError, match=message):  # before anything loads, too
        get_backend("vllm").engine_args_for(engine_args, TP2, FP8_BOTH)


@pytest.mark.parametrize("name", ["vllm", "openai", "tensorrt_llm", "pytorch"])
def test_a_restated_axis_is_refused_by_every_backend_by_the_one_check(name):
    """A backend built directly (not through RunConfig) gets the same one-line refusal."""
    engine_args = {"tensor_parallel_size": 2}
    if name == "openai":
        engine_args = {"launch": "vllm", "server_args": engine_args}
    with pytest.raises(UserError, match=r"tensor_parallel_size restates the run's parallelism"):
        get_backend(name).engine_args_for(engine_args, TP2, PrecisionConfig())


def test_openai_launch_vllm_passes_tp_and_fp8_to_the_server_command():
    backend = get_backend("openai")
    args = backend.engine_args_for({"launch": "vllm"}, TP2, FP8_BOTH)
    assert args == {"launch": "vllm"}  # the axes reach the server at load, typed
    server_args = backend(args).launched_server_args(FP8_BOTH, TP2)
    command = vllm_serve_command("/models/x", 8000, server_args, dtype="bfloat16")
    flags = " ".join(command)
    assert "--tensor-parallel-size 2" in flags
    assert "--distributed-executor-backend mp" in flags
    assert "--quantization fp8" in flags and "--kv-cache-dtype fp8" in flags


def test_openai_launch_trtllm_passes_tp_and_refuses_fp8():
    backend = get_backend("openai")
    args = backend.engine_args_for({"launch": "trtllm"}, TP2, PrecisionConfig())
    command = trtllm_serve_command(
        "/models/x", 8000, backend(args).launched_server_args(PrecisionConfig(), TP2)
    )
    assert command[command.index("--tensor_parallel_size") + 1] == "2"
    with pytest.raises(UserError, match="FP8 is not mapped for trtllm-serve"):
        backend.engine_args_for({"launch": "trtllm"}, ParallelismConfig(), FP8_BOTH)


def test_openai_against_a_running_server_cannot_set_its_gpus():
    backend = get_backend("openai")
    external = {"base_url": "http://127.0.0.1:8000"}
    for parallelism, precision in (
        (TP2, PrecisionConfig()),
        (ParallelismConfig(replicas=2), PrecisionConfig()),
        (ParallelismConfig(), FP8_BOTH),
    ):
        with pytest.raises(UserError, match="set where it runs"):
            backend.engine_args_for(external, parallelism, precision)
    assert backend.engine_args_for(external, ParallelismConfig(), PrecisionConfig()) == external


def test_tensorrt_llm_tp_reaches_the_llm_api(standin):  # noqa: F811
    """parallelism.tensor_parallel_size=2 -> LLM(..., tensor_parallel_size=2) (stand-in)."""
    backend_cls = get_backend("tensorrt_llm")
    args = backend_cls.engine_args_for({"max_batch_size": 8}, TP2, PrecisionConfig())
    backend = backend_cls(args)
    precision = PrecisionConfig(dtype="float16")
    asyncio.run(backend.load(MODEL, GenerateWorkload(), precision, "cuda", parallelism=TP2))
    _cls_name, kwargs = _init_event(standin)
    assert kwargs["tensor_parallel_size"] == 2
    with pytest.raises(UserError, match="FP8"):
        backend_cls.engine_args_for({}, TP2, FP8_BOTH)


@pytest.mark.slow
def test_vllm_own_parser_reads_the_server_flags():
    """The flags we build for TP=2 + FP8 parse into the EngineArgs we meant (vLLM's parser)."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    backend = get_backend("openai")
    server_args = backend({"launch": "vllm"}).launched_server_args(FP8_BOTH, TP2)
    command = vllm_serve_command("/models/x", 8000, server_args, dtype="bfloat16")
    flags = command[command.index("--model") :]
    parser = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser())
    parsed, _server_only = parser.parse_known_args(flags)  # --host/--port are the server's
    engine_args = AsyncEngineArgs.from_cli_args(parsed)
    assert engine_args.tensor_parallel_size == 2
    assert engine_args.distributed_executor_backend == "mp"
    assert engine_args.quantization == "fp8" and engine_args.kv_cache_dtype == "fp8"
