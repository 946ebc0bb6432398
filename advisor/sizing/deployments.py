"""The typed contracts of a configuration: one deployment (engine, layout, precision), what
the recommendation deploys, and a configuration's predicted and measured figures. The search
that fills them is advisor/sizing/configurations.py."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from advisor.sizing.engine_shape import registered_backend
from bench.core.config import (
    RESTATED_AXES,
    LoadPattern,
    ParallelismConfig,
    PrecisionConfig,
    Workload,
)
from bench.core.errors import UserError
from bench.core.strict import Strict


class Deployment(Strict):
    """One configuration: the engine, GPUs per engine and side by side, and the precision."""

    model_config = ConfigDict(frozen=True)

    framework: str
    parallelism: ParallelismConfig = Field(default_factory=ParallelismConfig)
    precision: PrecisionConfig = Field(default_factory=PrecisionConfig)

    @property
    def gpus(self) -> int:
        return self.parallelism.gpus_needed

    @property
    def precision_key(self) -> str:
        """The calibration's precision partition: weights and KV cache formats, not the dtype."""
        weights = "fp8 weights" if self.precision.quantization == "fp8" else "16-bit weights"
        return weights + (" + fp8 KV" if self.precision.kv_cache_dtype == "fp8" else "")

    def label(self) -> str:
        return f"{self.framework} {self.parallelism.label()} {self.precision.label()}"


class DeploymentFigures(Strict):
    """What the recommended configuration is expected to do, and on what basis."""

    basis: str = Field(description="measured or estimate: what chose the configuration.")
    predicted_tpot_ms: float | None = None
    predicted_output_throughput_tok_s: float | None = None
    predicted_tok_s_per_gpu: float | None = None
    predicted_tok_s_per_user: float | None = None
    at_concurrency: int | None = None


class RecommendedDeployment(Strict):
    """What a recommendation says to deploy: the framework's configuration (parallelism,
    precision, engine arguments, GPUs) and where its settings come from.

    One model for every case: a measured run's settings, the benchmark plan's defaults (with the
    planned workload and load), the configuration search's choice (label, figures, trade-offs,
    estimate accuracy), or no configuration at all (`source` says why). `parallelism` is set
    only where the configuration search named one; None = not chosen."""

    source: str = Field(description="Where the settings come from (measured run ids, plan...).")
    framework: str | None = Field(None, description="The backend registry name.")
    label: str | None = Field(None, description="The configuration search's label for it.")
    parallelism: ParallelismConfig | None = None
    precision: PrecisionConfig | None = None
    weight_format: Literal["int8"] | None = Field(
        None, description="INT8 weights and activations of a forward stage (not in precision)."
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="The framework's own options (never parallelism or precision).",
    )
    shape: str | None = Field(None, description="The measured workload, in words.")
    workload: Workload | None = Field(None, description="The planned benchmark workload.")
    load: LoadPattern | None = Field(None, description="The planned benchmark load.")
    figures: DeploymentFigures | None = None
    trade_offs: list[str] = Field(default_factory=list)
    estimate_accuracy: str | None = None

    @property
    def gpus(self) -> int | None:
        return None if self.parallelism is None else self.parallelism.gpus_needed

    def typed_engine_args(self) -> dict[str, Any]:
        """The engine arguments as an engineer types them into the framework: its options plus,
        for a chosen configuration, the parallelism and precision under the framework's names,
        as its backend maps them (`Backend.framework_args`: vLLM's `tensor_parallel_size`,
        `quantization`, `kv_cache_dtype`; TensorRT-LLM's `tensor_parallel_size`). A prefix
        caching the options already name (`options_with_caching`) stays where it is."""
        args = dict(self.engine_args)
        if self.parallelism is None or self.precision is None:
            return args
        backend = registered_backend(self.framework or "")
        if backend is None:
            return args
        caching = {k for k, axis in RESTATED_AXES.items() if axis == "prefix_caching"}
        options = {k: v for k, v in args.items() if k not in caching}
        try:
            return {**args, **backend.framework_args(options, self.parallelism, self.precision)}
        except UserError:
            # Options that contradict the chosen precision (a measured run's awq beside an FP8
            # choice): the options as measured; the GPUs and precision rows say the choice.
            return args

    def deployment(self) -> Deployment | None:
        """The typed (framework, parallelism, precision) triple, when all three are known."""
        if self.framework is None or self.parallelism is None or self.precision is None:
            return None
        return Deployment(
            framework=self.framework, parallelism=self.parallelism, precision=self.precision
        )


class Prediction(Strict):
    """The estimate of one configuration at one load level."""

    concurrency: int
    batch_per_replica: int
    step_floor_ms: float = Field(description="Memory + compute floor of one decode step.")
    efficiency: float = Field(description="Floor / predicted step: what the factors imply.")
    tpot_ms: float
    output_throughput_tok_s: float
    output_throughput_tok_s_per_gpu: float
    tok_s_per_user: float


class MeasuredLevel(Strict):
    """A stored measurement of a configuration at one load level, beside its prediction."""

    concurrency: int
    run_id: str
    reference: str | None = None
    measured_tpot_ms: float
    measured_output_tok_s: float
    measured_tok_s_per_gpu: float
    measured_tok_s_per_user: float
    predicted_tpot_ms: float | None = None
    predicted_output_tok_s: float | None = None
    tpot_error: float | None = Field(
        None, description="Leave-one-out (predicted - measured) / measured."
    )
    throughput_error: float | None = None


class ConfigurationEstimate(Strict):
    """A configuration's memory fit per GPU, floors and predicted speed at the stage's load."""

    deployment: Deployment
    label: str
    within_gpu_budget: bool = True
    weights_gb_per_gpu: float
    kv_cache_gb_per_gpu: float | None
    required_gb_per_gpu: float
    memory_per_gpu_gb: float
    fits: bool
    max_concurrency_per_replica: int | None = None
    decode_floor_ms_per_token: float | None = Field(
        None, description="Batch-1 floor: weight bytes per GPU / memory bandwidth."
    )
    efficiency: float | None = None
    efficiency_source: str = ""
    prediction: Prediction | None = Field(None, description="At the stage's concurrency.")
    ladder: list[Prediction] = Field(
        default_factory=list, description="Predictions at the Pareto ladder's load levels."
    )
    measured: list[MeasuredLevel] = Field(
        default_factory=list, description="Stored measurements of exactly this configuration."
    )
    quality: str | None = Field(
        None, description="Measured quality at this precision (the stage's quality_result)."
    )
    notes: list[str] = Field(default_factory=list)


def precision_words(deployment: Deployment, scheme: str | None = None) -> str:
    """The precision a deployment runs at, in words: `bfloat16 + fp8 weights`, or the profile's
    pre-quantised checkpoint where the deployment keeps it, `float16 + awq weights`."""
    words = deployment.precision.label()
    if scheme and not deployment.precision.quantization:
        words += f" + {scheme} weights"
    return words


def deployment_label(deployment: Deployment, scheme: str | None = None) -> str:
    """`vllm TP=1 float16 + awq weights`: Deployment.label with the profile's scheme."""
    return f"{deployment.framework} {deployment.parallelism.label()} " + precision_words(
        deployment, scheme
    )


__all__ = [
    "ConfigurationEstimate",
    "Deployment",
    "DeploymentFigures",
    "MeasuredLevel",
    "Prediction",
    "RecommendedDeployment",
    "deployment_label",
    "precision_words",
]
