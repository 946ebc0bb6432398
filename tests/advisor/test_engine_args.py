"""The advisor names engine arguments through the backends' one mapping
(`Backend.framework_args`): a chosen configuration's deploy arguments and the plan's caching
pair, never its own copy of which framework takes which name."""

from __future__ import annotations

import pytest

from advisor.plan.stage_plan import plan_for_stage
from advisor.sizing.calibration import calibration_from
from advisor.sizing.configurations import search_configurations
from advisor.sizing.deployments import RecommendedDeployment
from advisor.sizing.measured import read_reference_folder
from advisor.workload import traffic
from advisor.workload.profile_input import profile_from_dict, profile_from_flags
from bench.core.config import ParallelismConfig, PrecisionConfig, RunConfig
from bench.core.engine_facts import prefix_caching_setting
from bench.engines.backends import get_backend
from tests.advisor.conftest import SHIPPED_REFERENCE_DIR

TP2 = ParallelismConfig(tensor_parallel_size=2)
FP8_KV = PrecisionConfig(kv_cache_dtype="fp8")


def test_the_searched_configuration_names_its_settings_as_the_backend_maps_them() -> None:
    """70B on one H200: the search chooses vLLM with FP8 weights; its deploy arguments are the
    plan's vLLM options plus the backend's names for TP and FP8."""
    calibration = calibration_from([], read_reference_folder(SHIPPED_REFERENCE_DIR).runs)
    stage = profile_from_flags(model="llama-2-70b", parameters_b=70, gpu="H200").primary
    search = search_configurations(stage, "vllm", calibration[1].lookup(stage))
    assert search is not None
    best = search.estimates[0].deployment
    options = plan_for_stage(stage).configs[0].engine_args
    configuration = RecommendedDeployment(
        source="search",
        framework="vllm",
        parallelism=best.parallelism,
        precision=best.precision,
        engine_args=options,
    )
    typed = configuration.typed_engine_args()
    assert typed == get_backend("vllm").framework_args(options, best.parallelism, best.precision)
    assert typed["tensor_parallel_size"] == 1 and typed["quantization"] == "fp8"
    assert "tensor_parallel_size" not in configuration.engine_args  # said once, typed


@pytest.mark.parametrize(
    ("framework", "options", "expected"),
    [
        ("tensorrt_llm", {"max_batch_size": 8}, {"max_batch_size": 8, "tensor_parallel_size": 2}),
        ("pytorch", {}, None),  # one device per engine: TP=2 is not a pytorch configuration
        (
            "openai",
            {"launch": "vllm"},
            {"launch": "vllm", "server_args": {"tensor_parallel_size": 2}},
        ),
    ],
)
def test_each_framework_gets_its_own_names(
    framework: str, options: dict, expected: dict | None
) -> None:
    configuration = RecommendedDeployment(
        source="search",
        framework=framework,
        parallelism=TP2,
        precision=PrecisionConfig(),
        engine_args=options,
    )
    # A setting the framework cannot take leaves the options as given (the GPU rows say TP).
    assert configuration.typed_engine_args() == (options if expected is None else expected)


def test_without_a_chosen_configuration_the_options_are_as_given() -> None:
    configuration = RecommendedDeployment(
        source="plan", framework="vllm", precision=FP8_KV, engine_args={"max_num_seqs": 8}
    )
    assert configuration.typed_engine_args() == {"max_num_seqs": 8}


def test_the_caching_pair_switches_a_launched_vllm_server_in_its_own_arguments() -> None:
    """openai with launch=vllm is paired like vllm, the switch inside `server_args`; a server
    given by base_url cannot be switched from here, so it is not paired."""
    stage = profile_from_dict(
        {
            "model": "llama-2-7b",
            "gpu": {"type": "H200"},
            "prompt_tokens": {"mean": 1152},
            "shared_prefix": {"tokens": 1024},
        }
    ).primary
    launched = RunConfig(backend="openai", model="tiny-llama", engine_args={"launch": "vllm"})
    external = RunConfig(
        backend="openai", model="tiny-llama", engine_args={"base_url": "http://127.0.0.1:8000"}
    )
    assert traffic.caching_pair([external], stage) == [external]
    pair = traffic.caching_pair([external, launched], stage)
    assert pair[0] is external
    assert [prefix_caching_setting(c) for c in pair[1:]] == [True, False]
    assert pair[1].engine_args == {"launch": "vllm"}  # the setting is the run's, not an arg
    server = get_backend("openai").framework_args(pair[1].engine_args, prefix_caching=True)
    assert server["server_args"] == {"enable_prefix_caching": True}
