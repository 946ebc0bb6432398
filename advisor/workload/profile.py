"""The workload profile an engineer fills in (YAML, JSON, CLI flags or the web form).

A profile has one or more stages (the article's e-commerce case: an encoder stage feeding an LLM
stage); each stage gets its own recommendation. A simple single-stage YAML needs no `stages:` key:
its stage fields sit at the top level. With `stages:`, top-level stage fields are defaults every
stage inherits (a stage's own value wins). Field descriptions are the CLI and web-form help text.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from advisor.workload.gpus import GPUS, find_gpu
from bench.core.config import (
    MAX_BATCH,
    MAX_CONCURRENCY,
    MAX_IMAGE_SIDE,
    MAX_RATE_RPS,
    MAX_TOKENS,
    SLO,
    LengthDistribution,
    ModelName,
    PrecisionConfig,
)
from bench.core.limits import (
    MAX_BANDWIDTH_TB_S,
    MAX_PREFIXES,
    MAX_PRICE_PER_GPU_HOUR,
    MAX_STAGES,
    MIN_BANDWIDTH_TB_S,
)
from bench.core.strict import StrictInput
from bench.core.strict import describe_validation_error as describe_error

PROFILE_LEVEL_FIELDS = ("title", "owner", "notes", "stages")
MAX_PARAMETERS_B = 100_000.0
"""100 trillion parameters: far above any model, low enough that byte counts stay finite."""
MAX_GPU_MEMORY_GB = 100_000.0
QUANTIZATION_SCHEMES = ("awq", "gptq", "int4", "fp8", "int8", "w8a8")
"""Weight quantisations the memory estimate sizes (advisor/sizing/estimate.py QUANTIZATION_BYTES); a
name containing one (`gptq-int4`, `awq-marlin`) is that scheme."""


Modality = Literal["text", "image", "audio"]
"""What a forward model takes in."""


class ProfilePrecision(StrictInput):
    """The precision a deployment plans for: any weight quantisation name for the estimates
    (awq, gptq, int4, fp8), of which the bench runs fp8 (see `run_precision`)."""

    dtype: Literal["float16", "bfloat16", "float32"] = Field(
        "float16", description="Weights and activations dtype."
    )
    allow_tf32: bool = Field(False, description="Allow TF32 matmuls for float32.")
    quantization: str | None = Field(
        None,
        max_length=100,
        description=f"Weight quantisation ({', '.join(QUANTIZATION_SCHEMES)}, or a name "
        "containing one such as gptq-int4); the bench runs fp8.",
    )
    kv_cache_dtype: Literal["auto", "fp8"] = Field(
        "auto", description="KV-cache dtype: auto = the model dtype; fp8 = FP8 KV cache (vLLM)."
    )

    @field_validator("quantization")
    @classmethod
    def _known_scheme(cls, value: str | None) -> str | None:
        # An unknown name (int3) would be sized at the 16-bit dtype: a wrong fit, silently.
        if value is not None and not any(s in value.lower() for s in QUANTIZATION_SCHEMES):
            raise ValueError(
                f"{value!r} is not a weight quantisation the estimates know; allowed: "
                f"{', '.join(QUANTIZATION_SCHEMES)} (or a name containing one)"
            )
        return value

    def checkpoint_scheme(self) -> str | None:
        """The pre-quantised checkpoint's scheme (awq, gptq-int4, int8...), None where the
        weights are the dtype's or FP8 (which a run applies itself: `run_precision`)."""
        if (self.quantization or "").lower() == "fp8":
            return None
        return self.quantization

    def run_precision(self) -> PrecisionConfig:
        """The RunConfig precision a benchmark of this profile runs at: weight schemes other
        than fp8 need a pre-quantised checkpoint, so they reach the engine through the model
        path and its engine arguments, not through the run's precision."""
        quantization = "fp8" if (self.quantization or "").lower() == "fp8" else None
        return PrecisionConfig(
            dtype=self.dtype,
            allow_tf32=self.allow_tf32,
            quantization=quantization,
            kv_cache_dtype=self.kv_cache_dtype,
        )


class Objective(StrEnum):
    """What "best" means when candidates meet the SLOs."""

    MAXIMIZE_THROUGHPUT = "maximize_throughput"
    MAXIMIZE_GOODPUT = "maximize_goodput"
    MINIMIZE_LATENCY = "minimize_latency"
    MINIMIZE_COST_PER_TOKEN = "minimize_cost_per_token"


class Constraint(StrEnum):
    """Deployment constraints that call for a portable runtime ("several backends")."""

    NON_NVIDIA_HARDWARE = "non_nvidia_hardware"
    EDGE = "edge"
    CPU_ONLY = "cpu_only"
    MULTIPLE_RUNTIMES = "multiple_runtimes"


class GpuProfile(StrictInput):
    """The GPU the workload will be served on."""

    type: str | None = Field(
        None,
        description=f"GPU model from the catalogue ({', '.join(GPUS)}); none = not decided.",
    )
    count: int = Field(1, gt=0, le=64, description="GPUs available to this stage.")
    memory_gb: float | None = Field(
        None,
        gt=0,
        le=MAX_GPU_MEMORY_GB,
        description='Memory per GPU as its datasheet states it ("80 GB", read as GiB, as '
        "nvidia-smi counts it); derived from the GPU type when not given.",
    )
    memory_bandwidth_tb_s: float | None = Field(
        None,
        ge=MIN_BANDWIDTH_TB_S,
        le=MAX_BANDWIDTH_TB_S,
        description="Measured memory bandwidth (TB/s); none = the datasheet figure.",
    )
    price_per_hour: float | None = Field(
        None,
        gt=0,
        le=MAX_PRICE_PER_GPU_HOUR,
        description="What one GPU costs per hour (USD, on-demand or your contract rate); none = "
        "the reference price of data/gpu_prices.yaml for the GPU type.",
    )

    @field_validator("type")
    @classmethod
    def _known_gpu(cls, value: str | None) -> str | None:
        if value is None:
            return None
        spec = find_gpu(value)
        if spec is None:
            raise ValueError(f"{value!r} is not a known GPU; known: {', '.join(GPUS)}")
        return spec.name

    @model_validator(mode="after")
    def _derive_memory(self) -> GpuProfile:
        if self.memory_gb is None and self.type is not None:
            self.memory_gb = float(GPUS[self.type].memory_gb)
        return self


class ProfileSLO(SLO):
    """Service-level objectives (bench's SLO, its percentile included) plus minimum
    throughputs."""

    min_request_throughput_rps: float | None = Field(
        None, gt=0, le=MAX_RATE_RPS, description="Successful requests per second at least."
    )
    min_output_throughput_tok_s: float | None = Field(
        None, gt=0, le=1e12, description="Output tokens per second at least (generate kind)."
    )

    def is_set(self) -> bool:
        return super().is_set() or any(
            v is not None
            for v in (self.min_request_throughput_rps, self.min_output_throughput_tok_s)
        )


MAX_TURNS = 1_000


class SharedPrefixProfile(StrictInput):
    """Requests that start with the same long context: a system prompt, retrieved documents,
    tool schemas. Engines with automatic prefix caching skip its prefill after the first use."""

    tokens: int = Field(
        gt=0,
        le=MAX_TOKENS,
        description="Length of the shared context in tokens (part of prompt_tokens).",
    )
    count: int = Field(
        1,
        gt=0,
        le=MAX_PREFIXES,
        description="How many distinct contexts requests pick from (uniformly): 1 = one system "
        "prompt; 8 = eight documents.",
    )


class ConversationProfile(StrictInput):
    """Multi-turn chat: each turn resends the whole history (a growing shared prefix)."""

    turns: int = Field(gt=0, le=MAX_TURNS, description="Turns per conversation.")
    user_tokens: int = Field(
        64, gt=0, le=MAX_TOKENS, description="Length of each later user message (tokens)."
    )
    think_time_ms: float | None = Field(
        None,
        ge=0,
        le=3_600_000,
        description="Pause between an answer and the user's next message (ms); none = none.",
    )


class StagePart(StrictInput):
    """One part of a stage with its own traits: a static encoder exported to a graph runtime
    beside a data-dependent decode loop kept in eager PyTorch. The tree routes each part."""

    name: str = Field(min_length=1, max_length=100, description="Part name (encoder, decoder).")
    dynamic_control_flow: bool = Field(
        False, description="This part branches or loops on data (a decode loop)."
    )
    fixed_input_shapes: bool = Field(False, description="This part sees one input shape.")
    flops_fraction: float = Field(
        gt=0, le=1, description="The part's share of the stage's FLOPs per request (0-1]."
    )


MAX_PARTS = 4


class StageProfile(StrictInput):
    """One stage of a workload: one model served one way; it gets its own recommendation."""

    name: str = Field("main", min_length=1, max_length=100, description="Stage name.")
    notes: str | None = Field(None, description="Free text about this stage.")
    # The article's four traits (section 6), in the article's order.
    dynamic_control_flow: bool = Field(
        False,
        description="The model's forward pass branches or loops on data (Python control flow, "
        "variable-depth recursion, custom research code).",
    )
    fixed_input_shapes: bool = Field(
        False, description="Every request has the same input shape (batch, length or image size)."
    )
    long_sequence_generation: bool = Field(
        False, description="Long generated outputs (chat, creative writing, long answers)."
    )
    multi_backend: bool = Field(
        False, description="The same model must run on several runtimes or hardware vendors."
    )
    kind: Literal["generate", "forward"] = Field(
        "generate", description="generate = LLM decoding; forward = batched encoder/CV inference."
    )
    model: ModelName | None = Field(
        None, description="Model preset name (e.g. llama-2-13b) or a local checkpoint path."
    )
    parameters_b: float | None = Field(
        None,
        gt=0,
        le=MAX_PARAMETERS_B,
        description="Parameter count in billions (overrides the preset's count).",
    )
    prompt_tokens: LengthDistribution = Field(
        default_factory=lambda: LengthDistribution(mean=512),
        description="Prompt length distribution in tokens (generate kind).",
    )
    output_tokens: LengthDistribution = Field(
        default_factory=lambda: LengthDistribution(mean=256),
        description="Output length distribution in tokens (generate kind).",
    )
    batch_size: int = Field(
        1, gt=0, le=MAX_BATCH, description="Samples per request (forward kind)."
    )
    sequence_length: LengthDistribution | None = Field(
        None, description="Text encoders: tokens per sample (forward kind)."
    )
    image_size: int | None = Field(
        None, gt=0, le=MAX_IMAGE_SIDE, description="CV models: square input side in px."
    )
    modality: Modality | None = Field(
        None,
        description="Forward kind: what the model takes in. Read from the model's name or the "
        "input shape where not given; evidence of another modality is never a match "
        "(advisor/evidence/modality.py).",
    )
    concurrency: int | None = Field(
        None,
        gt=0,
        le=MAX_CONCURRENCY,
        description="Requests in flight at peak (closed-loop clients).",
    )
    request_rate_rps: float | None = Field(
        None,
        gt=0,
        le=MAX_RATE_RPS,
        description="Expected arrival rate in requests per second (open loop).",
    )
    peak_request_rate_rps: float | None = Field(
        None,
        gt=0,
        le=MAX_RATE_RPS,
        description="Peak traffic to serve within the SLO (requests/s); sizes the GPU fleet "
        "(advisor/sizing/capacity.py). None = request_rate_rps.",
    )
    headroom_fraction: float = Field(
        0.2,
        ge=0,
        le=10,
        description="Spare capacity on top of the peak when sizing the fleet (0.2 = 20%).",
    )
    practical_threshold: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="Smallest difference that counts: one candidate is faster than another only "
        "when the 95% interval of their ratio clears it (0.05 = 5%).",
    )
    slo: ProfileSLO = Field(default_factory=ProfileSLO, description="Service-level objectives.")
    objective: Objective = Field(
        Objective.MAXIMIZE_THROUGHPUT, description="What best means among candidates meeting SLOs."
    )
    gpu: GpuProfile = Field(default_factory=GpuProfile, description="Target GPU.")
    precision: ProfilePrecision = Field(
        default_factory=ProfilePrecision,
        description="Weights/activations dtype and weight quantisation (awq, gptq, int4, fp8).",
    )
    determinism_required: bool = Field(
        False, description="Identical outputs for identical inputs, run to run (audit, finance)."
    )
    build_time_tolerance: Literal["none", "minutes", "hours"] | None = Field(
        None,
        description="How long an ahead-of-time compile or engine build may take: none (serve "
        "seconds after load), minutes (JIT compile), hours (long engine builds); unset = "
        "not stated.",
    )
    constraints: list[Constraint] = Field(
        default_factory=list,
        description="Deployment constraints: non_nvidia_hardware, edge, cpu_only, "
        "multiple_runtimes.",
    )
    # The traffic (generate kind): what the benchmarks send instead of unrelated prompts.
    shared_prefix: SharedPrefixProfile | None = Field(
        None,
        description="Shared system prompt / retrieved context: its length (counted in "
        "prompt_tokens) and how many distinct ones; none = every prompt unrelated.",
    )
    conversation: ConversationProfile | None = Field(
        None, description="Multi-turn conversations (turns, user message length)."
    )
    trace_file: str | None = Field(
        None,
        max_length=4096,
        description="A request trace to replay (Mooncake .jsonl or Azure-layout .csv): its "
        "arrival times and lengths replace the load and the length distributions.",
    )
    prompt_file: str | None = Field(
        None,
        max_length=4096,
        description="Your own prompts (JSONL with text or chat messages, or CSV) instead of "
        "generated ones.",
    )
    quality_result: str | None = Field(
        None,
        max_length=4096,
        description="Your model's quality per precision: the quality.json that `python -m bench "
        "quality` wrote from your evaluation file (text or labelled JSONL). A precision that "
        "loses more than max_quality_loss_pct on it is not recommended.",
    )
    max_quality_loss_pct: float = Field(
        1.0,
        ge=0,
        le=100,
        description="Tolerated quality loss vs the baseline precision, in percent: perplexity's "
        "relative increase, or accuracy points lost (used with quality_result).",
    )

    parts: list[StagePart] = Field(
        default_factory=list,
        max_length=MAX_PARTS,
        description="Parts with their own traits (a static encoder and a dynamic decode loop); "
        "each is routed on its own, and their FLOPs fractions add up to 1.",
    )

    @model_validator(mode="after")
    def _check_parts(self) -> StageProfile:
        if not self.parts:
            return self
        names = [part.name for part in self.parts]
        if len(set(names)) != len(names):
            raise ValueError(f"parts need distinct names, got {', '.join(names)}")
        if len(self.parts) < 2:
            raise ValueError("parts split a stage: give two or more, or none")
        total = sum(part.flops_fraction for part in self.parts)
        if abs(total - 1) > 0.01:
            raise ValueError(f"the parts' flops_fraction must add up to 1, got {total:g}")
        return self

    @model_validator(mode="after")
    def _check_traffic(self) -> StageProfile:
        declared = [
            name
            for name in ("shared_prefix", "conversation", "trace_file", "prompt_file")
            if getattr(self, name) is not None
        ]
        if declared and self.kind != "generate":
            raise ValueError(f"{declared[0]} is for the generate kind (LLM traffic)")
        if self.trace_file is not None and len(declared) > 1:
            raise ValueError(
                "trace_file replays the trace's own lengths and arrivals; it cannot be combined "
                f"with {', '.join(d for d in declared if d != 'trace_file')}"
            )
        if self.prompt_file is not None and len(declared) > 1:
            raise ValueError(
                "prompt_file is the prompt: it cannot be combined with "
                f"{', '.join(d for d in declared if d != 'prompt_file')}"
            )
        if self.shared_prefix is not None and self.shared_prefix.tokens >= self.prompt_tokens.mean:
            raise ValueError(
                f"shared_prefix.tokens ({self.shared_prefix.tokens:,}) must be below "
                f"prompt_tokens.mean ({self.prompt_tokens.mean:,}): the prompt is the shared "
                "context plus the request's own part"
            )
        return self

    def declares_shared_prefixes(self) -> bool:
        """Requests share long prefixes: a shared context or conversation history (a trace
        may too, through repeated hash IDs, but that is known only once it is replayed)."""
        return self.shared_prefix is not None or self.conversation is not None


class WorkloadProfile(StrictInput):
    """A workload: who it is for and its stages (one stage is the common case)."""

    title: str = Field("Untitled workload", max_length=200, description="Short title.")
    owner: str | None = Field(None, description="Team or person the recommendation is for.")
    notes: str | None = Field(None, description="Free text: context for the review.")
    stages: list[StageProfile] = Field(
        min_length=1, max_length=MAX_STAGES, description="Stages, in pipeline order."
    )

    @field_validator("stages")
    @classmethod
    def _distinct_names(cls, stages: list[StageProfile]) -> list[StageProfile]:
        # --stage NAME, the report's sections and the plan's steps pick a stage by its name.
        seen: set[str] = set()
        for stage in stages:
            if stage.name in seen:
                raise ValueError(f"two stages are named {stage.name!r}; give each its own name")
            seen.add(stage.name)
        return stages

    @model_validator(mode="before")
    @classmethod
    def _lift_stage_fields(cls, data: Any) -> Any:
        """Top-level stage fields become the single stage, or defaults shared by all stages."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        shared = {
            key: data.pop(key)
            for key in list(data)
            if key in StageProfile.model_fields and key not in PROFILE_LEVEL_FIELDS
        }
        if "stages" not in data:
            data["stages"] = [shared]
            return data
        stages = data["stages"]
        if isinstance(stages, list) and shared:
            data["stages"] = [
                _merge(shared, stage) if isinstance(stage, dict) else stage for stage in stages
            ]
        return data

    @property
    def primary(self) -> StageProfile:
        return self.stages[0]


def _merge(defaults: dict[str, Any], own: dict[str, Any]) -> dict[str, Any]:
    """A stage's own values over the shared defaults; nested dicts (gpu, slo) merge one level.
    Mappings, as read from a YAML or JSON profile: this runs before validation."""
    merged = dict(defaults)
    for key, value in own.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


def describe_validation_error(
    exc: ValidationError, single: bool = False, names: dict[str, str] | None = None
) -> str:
    """Every error as `field.path: what is wrong; allowed: ...`, on one line.

    `single`: the user wrote a single-stage profile without `stages:`, so `stages[0].` is not
    shown, and an unknown top-level field lists profile and stage fields together. `names`:
    paths the user gave as CLI flags (`{"request_rate_rps": "--request-rate-rps"}`).
    """
    return describe_error(
        exc,
        WorkloadProfile,
        drop_loc_prefix=["stages", 0] if single else (),
        allowed_fields=lambda parent: None if parent else _top_level_fields(),
        names=names,
    )


def _top_level_fields() -> list[str]:
    stage_fields = [f for f in StageProfile.model_fields if f not in PROFILE_LEVEL_FIELDS]
    return [*PROFILE_LEVEL_FIELDS, *stage_fields]


__all__ = [
    "Constraint",
    "ConversationProfile",
    "GpuProfile",
    "Objective",
    "ProfileSLO",
    "SharedPrefixProfile",
    "StagePart",
    "StageProfile",
    "WorkloadProfile",
    "describe_validation_error",
]
