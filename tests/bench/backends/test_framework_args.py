"""`Backend.framework_args`, the one mapping of (engine args, parallelism, precision, prefix
caching) to each framework's own arguments: a few settings per backend, the refusals, and
`engine_args_for` deciding with it."""

from __future__ import annotations

import pytest

from bench.core.config import ParallelismConfig, PrecisionConfig
from bench.core.errors import UserError
from bench.engines.backends import get_backend
from bench.engines.backends.vllm import BACKEND_OPTIONS, engine_arg_fields

TP2 = ParallelismConfig(tensor_parallel_size=2)
TWO_REPLICAS = ParallelismConfig(replicas=2)
FP8_BOTH = PrecisionConfig(quantization="fp8", kv_cache_dtype="fp8")
FP8_KV = PrecisionConfig(kv_cache_dtype="fp8")
BF16 = PrecisionConfig()
ONE_DEVICE_BACKENDS = ("pytorch", "torch_compile", "onnxruntime", "tensorrt", "fake")


def test_vllm_names_every_setting_as_engine_args() -> None:
    vllm = get_backend("vllm")
    args = vllm.framework_args({"block_size": 16}, TP2, FP8_BOTH, prefix_caching=False)
    assert args == {
        "block_size": 16,
        "tensor_parallel_size": 2,
        "quantization": "fp8",
        "kv_cache_dtype": "fp8",
        "enable_prefix_caching": False,
        "prefix_cache_stats": True,  # caching switched = caching measured
    }
    assert set(args) <= engine_arg_fields(import_vllm=False) | set(BACKEND_OPTIONS)
    # One GPU, 16-bit: the degree is still said; the KV format only where it is not the dtype.
    assert vllm.framework_args({}, ParallelismConfig(), FP8_KV) == {
        "tensor_parallel_size": 1,
        "kv_cache_dtype": "fp8",
    }
    # Settings not given are left out: a run's engine_args never hold them.
    assert vllm.framework_args({"max_num_seqs": 8}) == {"max_num_seqs": 8}
    assert vllm.framework_args({}, prefix_caching=True) == {
        "enable_prefix_caching": True,
        "prefix_cache_stats": True,
    }


def test_vllm_refuses_a_contradiction_and_a_restated_axis() -> None:
    vllm = get_backend("vllm")
    with pytest.raises(UserError, match="quantization='awq' contradicts"):
        vllm.framework_args({"quantization": "awq"}, TP2, FP8_BOTH)
    with pytest.raises(UserError, match="restates the run's parallelism"):
        vllm.framework_args({"tensor_parallel_size": 2})


def test_openai_maps_a_launched_vllm_servers_own_arguments() -> None:
    openai = get_backend("openai")
    given = {"launch": "vllm", "server_args": {"block_size": 32}, "prompt_format": "text"}
    args = openai.framework_args(given, TP2, FP8_KV, prefix_caching=True)
    assert args == {
        "launch": "vllm",
        "server_args": {
            "block_size": 32,
            "tensor_parallel_size": 2,
            "kv_cache_dtype": "fp8",
            "enable_prefix_caching": True,
        },
        "prompt_format": "text",
    }
    assert given["server_args"] == {"block_size": 32}  # the caller's dict is not changed
    assert openai.framework_args({"launch": "vllm"}, prefix_caching=False) == {
        "launch": "vllm",
        "server_args": {"enable_prefix_caching": False},  # vllm serve has no prefix_cache_stats
    }


def test_openai_trtllm_and_base_url_servers_take_only_what_can_be_set() -> None:
    openai = get_backend("openai")
    trtllm = openai.framework_args({"launch": "trtllm"}, TP2, BF16)
    assert trtllm == {"launch": "trtllm", "server_args": {"tensor_parallel_size": 2}}
    with pytest.raises(UserError, match="FP8 is not mapped for trtllm-serve"):
        openai.framework_args({"launch": "trtllm"}, TP2, FP8_KV)
    with pytest.raises(UserError, match=r"prefix caching .* is not mapped for trtllm-serve"):
        openai.framework_args({"launch": "trtllm"}, prefix_caching=True)
    external = {"base_url": "http://127.0.0.1:8000"}
    assert openai.framework_args(external, ParallelismConfig(), BF16) == external
    with pytest.raises(UserError, match="set where it runs"):
        openai.framework_args(external, prefix_caching=False)


def test_tensorrt_llm_takes_tp_and_block_reuse_and_refuses_fp8() -> None:
    trtllm = get_backend("tensorrt_llm")
    args = trtllm.framework_args({"max_batch_size": 8}, TP2, BF16, prefix_caching=False)
    assert args == {"max_batch_size": 8, "tensor_parallel_size": 2, "enable_block_reuse": False}
    with pytest.raises(UserError, match="does not map precision"):
        trtllm.framework_args({}, TP2, FP8_BOTH)


@pytest.mark.parametrize("name", ONE_DEVICE_BACKENDS)
def test_one_device_backends_take_replicas_and_refuse_the_rest(name: str) -> None:
    backend = get_backend(name)
    assert backend.framework_args({}, TWO_REPLICAS, BF16) == {}
    for settings, message in (
        ({"parallelism": TP2}, "runs one engine on one device"),
        ({"precision": FP8_KV}, "does not map precision"),
        ({"prefix_caching": True}, "no automatic prefix caching"),
    ):
        with pytest.raises(UserError, match=message):
            backend.framework_args({}, **settings)


@pytest.mark.parametrize(
    ("name", "engine_args", "parallelism", "precision"),
    [
        ("pytorch", {}, TP2, BF16),
        ("tensorrt_llm", {}, ParallelismConfig(), FP8_KV),
        ("openai", {"base_url": "http://127.0.0.1:8000"}, TWO_REPLICAS, BF16),
        ("vllm", {"quantization": "awq"}, ParallelismConfig(), FP8_BOTH),
    ],
)
def test_engine_args_for_refuses_what_the_mapping_refuses(
    name: str, engine_args: dict, parallelism: ParallelismConfig, precision: PrecisionConfig
) -> None:
    """The run-time check is the mapping: the same refusal, before anything loads."""
    backend = get_backend(name)
    with pytest.raises(UserError) as mapped:
        backend.framework_args(engine_args, parallelism, precision)
    with pytest.raises(UserError) as checked:
        backend.engine_args_for(engine_args, parallelism, precision)
    assert str(checked.value) == str(mapped.value)


def test_engine_options_read_back_what_the_engine_runs_with() -> None:
    """The reading side: a launched server's own arguments; nothing for a server run elsewhere;
    an in-process engine's options as given."""
    openai = get_backend("openai")
    launched = openai.framework_args({"launch": "vllm"}, ParallelismConfig(), BF16, True)
    assert openai.engine_options(launched) == {
        "tensor_parallel_size": 1,
        "enable_prefix_caching": True,
    }
    assert openai.engine_options({"base_url": "http://127.0.0.1:8000"}) == {}
    vllm_args = get_backend("vllm").framework_args({"block_size": 16}, prefix_caching=False)
    assert get_backend("vllm").engine_options(vllm_args) == vllm_args


def test_w8a8_weights_are_the_pytorch_backends_alone() -> None:
    """INT8/FP8 W8A8 of an encoder maps to the pytorch backend (applied at load); every other
    framework refuses it in one line, vLLM saying how it does take INT8."""
    for quantization in ("int8", "fp8"):
        w8a8 = PrecisionConfig(dtype="float16", quantization=quantization)
        assert get_backend("pytorch").framework_args({}, TWO_REPLICAS, w8a8) == {}
        for name in ("torch_compile", "onnxruntime", "tensorrt"):
            with pytest.raises(UserError, match="quantization"):
                get_backend(name).framework_args({}, ParallelismConfig(), w8a8)
    int8 = PrecisionConfig(dtype="float16", quantization="int8")
    with pytest.raises(UserError, match="checkpoint quantized for it"):
        get_backend("vllm").framework_args({}, ParallelismConfig(), int8)
    with pytest.raises(UserError, match="FP8"):  # the HF cache has no FP8 store
        get_backend("pytorch").framework_args({}, ParallelismConfig(), FP8_KV)
