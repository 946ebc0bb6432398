"""`pytorch` backend: PyTorch native as people run it — transformers in eager mode.

generate kind: `model.generate` (SDPA attention, greedy, outputs forced to length) behind a
dynamic batcher (bench/engines/backends/batcher.py) that streams per-step timestamps. forward kind:
one eager forward per request on synthetic inputs of the request's shape, optionally under autocast.
torch and transformers are imported inside methods only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import importlib.util
import shutil
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, Field

from bench.core.clock import CLOCK
from bench.core.config import ForwardWorkload, GenerateWorkload, ParallelismConfig, Precision
from bench.core.engine_facts import EngineFacts
from bench.core.errors import UserError
from bench.core.schema import ModelInfo
from bench.core.strict import Strict
from bench.engines.backends.base import (
    ONE_ENGINE_ONE_DEVICE,
    Availability,
    Backend,
    Chunk,
    ForwardRequest,
    GenerateRequest,
    LoadInfo,
    Request,
    WorkloadShape,
    package_version,
    register_backend,
)
from bench.engines.backends.batcher import DynamicBatcher, StepCallback
from bench.engines.backends.forward_batcher import ForwardBatcher

if TYPE_CHECKING:
    import torch

FORWARD_INPUT_SEED = 0


class PyTorchOptions(Strict):
    """Engine arguments of the `pytorch` backend."""

    max_batch_size: int = Field(32, gt=0, description="Most requests decoded together (generate).")
    batch_wait_ms: float = Field(
        5.0, ge=0, description="How long a lone waiting request waits for others to batch with."
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = Field(
        "sdpa", description="transformers attention kernel."
    )
    autocast: bool = Field(
        False,
        description="Keep fp32 weights and run under torch.autocast at the precision dtype "
        "(automatic mixed precision) instead of casting the weights.",
    )
    trust_remote_code: bool = Field(False, description="Let the checkpoint's own code run.")
    intra_op_num_threads: int | None = Field(
        None,
        gt=0,
        description="torch.set_num_threads for the run (CPU); none = torch's default (one per "
        "core). On a shared CPU one thread avoids stalls at OpenMP barriers.",
    )
    max_queue_delay_ms: float | None = Field(
        None,
        ge=0,
        description="Forward kind: serve through the dynamic batcher, which joins requests into "
        "batches of up to max_batch_size samples, waiting at most this long (ms) after the "
        "oldest; none = each request runs as its own batch.",
    )


def resolve_device(device: str) -> str:
    """'auto' -> cuda when a GPU is visible, else cpu; an unavailable 'cuda' is a UserError."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("device cuda requested but torch sees no CUDA GPU")
    return device


def from_pretrained_dtype_kwargs(dtype: torch.dtype) -> dict[str, Any]:
    """transformers >= 4.56 takes `dtype=`; older versions only `torch_dtype=`."""
    import transformers

    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def load_hf_model(
    model_dir: str | Path,
    dtype: torch.dtype,
    device: str,
    attn_implementation: str | None = "sdpa",
    trust_remote_code: bool = False,
) -> torch.nn.Module:
    """The checkpoint's transformers model (class from config.json), eval mode, on `device`."""
    from bench.engines.models import load_config, model_class_for

    config = load_config(model_dir, trust_remote_code=trust_remote_code)
    kwargs: dict[str, Any] = from_pretrained_dtype_kwargs(dtype)
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model_class = model_class_for(config)
    try:
        model = model_class.from_pretrained(
            str(model_dir), trust_remote_code=trust_remote_code, **kwargs
        )
    except (ValueError, ImportError) as exc:
        if attn_implementation and "attn" in str(exc).lower():
            raise UserError(f"attn_implementation {attn_implementation!r}: {exc}") from None
        raise
    return model.to(device).eval()


def pad_token_id_of(model: torch.nn.Module) -> int:
    """Pad id for left padding: the model's pad token, else its EOS, else 0."""
    for source in (getattr(model, "generation_config", None), model.config):
        pad = getattr(source, "pad_token_id", None)
        if pad is not None:
            return int(pad)
    eos = getattr(model.config, "eos_token_id", None)
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    return int(eos) if eos is not None else 0


def left_padded_batch(
    prompts: list[list[int]], pad_token_id: int, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and attention_mask with prompts of different lengths padded on the left."""
    import torch

    width = max(len(prompt) for prompt in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, width - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        attention_mask[row, width - len(prompt) :] = 1
    return input_ids.to(device), attention_mask.to(device)


def make_step_streamer(on_step: StepCallback) -> Any:
    """A transformers streamer that reports the time of every decode step.

    `generate` first puts the prompt, then each step's new tokens as a CPU tensor (the copy to
    the host synchronises with the GPU), so the timestamp taken in `put` is when the token exists.
    """
    from transformers.generation.streamers import BaseStreamer

    class StepTimestampStreamer(BaseStreamer):
        def __init__(self) -> None:
            self.prompt_seen = False

        def put(self, value: Any) -> None:
            if not self.prompt_seen:
                self.prompt_seen = True
                return
            on_step(CLOCK.now_ns())

        def end(self) -> None:
            pass

    return StepTimestampStreamer()


def forward_inputs(
    config: Any,
    batch_size: int,
    sequence_length: int | None,
    image_size: int | None,
    device: str,
    dtype: torch.dtype,
    seed: int = FORWARD_INPUT_SEED,
) -> dict[str, torch.Tensor]:
    """Seeded synthetic inputs: pixel_values for vision configs, input_ids + mask for text."""
    import torch

    from bench.engines.onnx_export import resolve_shape

    # The same shape rules (vision or text, defaults, the max_position_embeddings check) as the
    # ONNX export and the engines built from it.
    shape = resolve_shape(config, batch_size, sequence_length, image_size)
    generator = torch.Generator().manual_seed(seed)
    if shape.image_size is not None:
        side = shape.image_size
        pixels = torch.randn((batch_size, config.num_channels, side, side), generator=generator)
        return {"pixel_values": pixels.to(device=device, dtype=dtype)}
    sequence = shape.sequence_length
    vocab = int(getattr(config, "vocab_size", 1000))
    # Low ids are pad/special tokens in most vocabularies.
    ids = torch.randint(min(5, vocab - 1), vocab, (batch_size, sequence), generator=generator)
    mask = torch.ones((batch_size, sequence), dtype=torch.long)
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def primary_output(outputs: Any) -> torch.Tensor:
    """logits for classifiers, last_hidden_state for encoders (the first output tensor)."""
    logits = getattr(outputs, "logits", None)
    return logits if logits is not None else outputs[0]


def _torch_availability(name: str, extra_check: Callable[[], str] | None = None) -> Availability:
    missing = [pkg for pkg in ("torch", "transformers") if importlib.util.find_spec(pkg) is None]
    if missing:
        return Availability(name, False, reason=f"{' and '.join(missing)} not installed")
    version = package_version("torch")
    cuda_build = version is not None and "+cpu" not in version
    gpu_present = Path("/dev/nvidiactl").exists()
    details = {
        "torch": version,
        "transformers": package_version("transformers"),
        "cuda_build": cuda_build,
        "device": "cuda" if (cuda_build and gpu_present) else "cpu",
    }
    reason = extra_check() if extra_check else ""
    return Availability(name, not reason, version=version, reason=reason, details=details)


@register_backend("pytorch")
class PyTorchBackend(Backend):
    """transformers eager `generate` with a dynamic batcher; eager forward for encoders/CV."""

    kinds: ClassVar[frozenset[str]] = frozenset({"generate", "forward"})
    options_model: ClassVar[type[BaseModel] | None] = PyTorchOptions
    maps_w8a8: ClassVar[bool] = True
    """Forward runs take precision.quantization int8/fp8 as W8A8 (bench/engines/w8a8.py)."""

    @classmethod
    def framework_args(
        cls,
        engine_args: dict[str, Any],
        parallelism: ParallelismConfig | None = None,
        precision: Precision | None = None,
        prefix_caching: bool | None = None,
    ) -> dict[str, Any]:
        """The default mapping, with INT8/FP8 W8A8 weights taken (applied at `load`, forward
        runs only); an FP8 KV cache is still refused (the HF cache has no FP8 store)."""
        if cls.maps_w8a8 and precision is not None and precision.quantization is not None:
            precision = precision.model_copy(update={"quantization": None})
        return super().framework_args(engine_args, parallelism, precision, prefix_caching)

    @classmethod
    def recommended_args(cls, shape: WorkloadShape) -> dict[str, Any]:
        """PyTorch's fused SDPA attention; the batcher sized to the requests in flight."""
        args: dict[str, Any] = {"attn_implementation": "sdpa"}
        if shape.kind == "generate":
            args["max_batch_size"] = shape.concurrency
        return args

    options: PyTorchOptions

    def __init__(
        self, engine_args: dict[str, Any] | None = None, prefix_caching: bool | None = None
    ) -> None:
        super().__init__(engine_args, prefix_caching)
        self.model: Any = None
        self.device = "cpu"
        self.kind: str = "generate"
        self.batcher: DynamicBatcher | None = None
        self.forward_batcher: ForwardBatcher | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"{self.name}-engine"
        )
        self._forward_inputs: dict[tuple, dict[str, Any]] = {}
        self._forward_call: Callable[..., Any] | None = None
        self._compute_dtype: Any = None
        self._autocast = False
        self._pad_token_id = 0
        self.engine_info: dict[str, Any] = {}

    @classmethod
    def availability(cls) -> Availability:
        return _torch_availability(cls.name)

    # ------------------------------------------------------------------ load

    async def load(
        self,
        model: ModelInfo,
        workload: GenerateWorkload | ForwardWorkload,
        precision: Precision,
        device: str,
        parallelism: ParallelismConfig = ONE_ENGINE_ONE_DEVICE,
    ) -> LoadInfo:
        if precision.quantization and not (self.maps_w8a8 and workload.kind == "forward"):
            raise UserError(
                f"{self.name} does not support quantization {precision.quantization!r} for "
                f"{workload.kind} runs (W8A8 INT8/FP8 is the pytorch backend's, forward runs only)"
            )
        if model.kind != workload.kind:
            raise UserError(
                f"model {model.name} is a {model.kind} model, workload is {workload.kind}"
            )
        loop = asyncio.get_running_loop()
        start = time.perf_counter()
        await loop.run_in_executor(self._executor, self._load_sync, model, precision, device)
        load_s = time.perf_counter() - start
        warmup_start = time.perf_counter()
        compiled = await loop.run_in_executor(self._executor, self._prepare_sync, workload)
        warmup_s = time.perf_counter() - warmup_start
        # Compiling backends report their warm-up apart (compile_s); an eager warm-up is load time.
        compile_s = warmup_s if compiled else None
        if not compiled:
            load_s += warmup_s
        if self.kind == "generate":
            self.batcher = DynamicBatcher(
                self._generate_batch,
                self._executor,
                max_batch_size=self.options.max_batch_size,
                batch_wait_ms=self.options.batch_wait_ms,
            )
        elif self.options.max_queue_delay_ms is not None:
            self.forward_batcher = ForwardBatcher(
                lambda request: self._run_forward(request)[0],
                self._executor,
                max_batch_size=self.options.max_batch_size,
                max_queue_delay_ms=self.options.max_queue_delay_ms,
            )
        return LoadInfo(
            load_s=load_s, compile_s=compile_s, engine=EngineFacts.model_validate(self.engine_info)
        )

    def _load_sync(self, model: ModelInfo, precision: Precision, device: str) -> None:
        import torch
        import transformers

        self.device = resolve_device(device)
        self.kind = model.kind
        if self.options.intra_op_num_threads is not None:
            torch.set_num_threads(self.options.intra_op_num_threads)
        torch.backends.cuda.matmul.allow_tf32 = precision.allow_tf32
        torch.backends.cudnn.allow_tf32 = precision.allow_tf32
        self._compute_dtype = getattr(torch, precision.dtype)
        quantization = precision.quantization
        # W8A8 layers carry their own scales: the model runs at dtype, never under autocast.
        use_autocast = self.options.autocast and precision.dtype != "float32" and not quantization
        weights_dtype = torch.float32 if use_autocast else self._compute_dtype
        if quantization and self.device == "cpu":
            if quantization == "fp8":
                raise UserError("quantization fp8 needs a GPU with FP8 tensor cores; run on cuda")
            weights_dtype = self._compute_dtype = torch.float32  # torch's dynamic INT8 is fp32
        # Forward models: transformers' default (SDPA where the architecture has it; ResNet has
        # no attention, and asking it for a kernel would be an error).
        attn = self.options.attn_implementation if model.kind == "generate" else None
        self.model = load_hf_model(
            model.path, weights_dtype, self.device, attn, self.options.trust_remote_code
        )
        self._pad_token_id = pad_token_id_of(self.model) if model.kind == "generate" else 0
        self._autocast = use_autocast
        quantized_with = self._quantize(quantization)
        self.engine_info = {
            "framework": "transformers",
            "torch_version": torch.__version__,
            "transformers_version": transformers.__version__,
            "device": self.device,
            "device_name": (
                torch.cuda.get_device_name(self.device) if self.device == "cuda" else "cpu"
            ),
            "dtype": precision.dtype,
            "weights_dtype": str(weights_dtype).removeprefix("torch."),
            "autocast": use_autocast,
            "allow_tf32": precision.allow_tf32,
            "attn_implementation": getattr(
                self.model.config, "_attn_implementation", self.options.attn_implementation
            ),
            "cuda_graphs": False,
            "compiled": False,
            "intra_op_num_threads": torch.get_num_threads(),
        }
        if quantized_with:
            self.engine_info["quantization"] = quantized_with
        if model.kind == "generate":
            self.engine_info.update(
                max_batch_size=self.options.max_batch_size,
                batch_wait_ms=self.options.batch_wait_ms,
                kv_cache="dynamic",
            )
        elif self.options.max_queue_delay_ms is not None:
            self.engine_info.update(
                batching="dynamic batcher (forward)",
                max_batch_size=self.options.max_batch_size,
                max_queue_delay_ms=self.options.max_queue_delay_ms,
            )

    def _quantize(self, quantization: str | None) -> str | None:
        """Swap the Linear layers for their 8-bit form; the method's words, None when unquantized.

        On a GPU, W8A8 with the 8-bit GEMMs serving engines use (INT8 `torch._int_mm` / FP8
        `torch._scaled_mm`), its activations quantized per token by separate elementwise kernels
        where serving engines fuse that step into the GEMM (so it measures eager PyTorch's
        8-bit speed, not theirs: docs/forward-serving.md); on the CPU, torch's dynamic INT8 (the
        CPU path `bench quality` measures too)."""
        if not quantization:
            return None
        if self.device == "cpu":
            from bench.engines.cpu_int8 import int8_dynamic

            self.model = int8_dynamic(self.model)
            return "int8 dynamic (torch.ao quantize_dynamic, Linear layers)"
        from bench.engines.w8a8 import quantize_linears

        self.model = quantize_linears(self.model, quantization)  # type: ignore[arg-type]
        return f"{quantization} W8A8 (bench/engines/w8a8.py, Linear layers)"

    def _prepare_sync(self, workload: GenerateWorkload | ForwardWorkload) -> bool:
        """Warm up at the shapes the run will use; returns True when that compiled something."""
        import torch

        if self.kind == "forward":
            assert isinstance(workload, ForwardWorkload)
            self._forward_call = self.model
            request = self._warmup_forward_request(workload)
            self._run_forward(request)
            if self.options.max_queue_delay_ms is not None:
                # Behind the batcher every size up to max_batch_size will occur; on a GPU each
                # size's first forward picks its kernels (~50 ms for bert-base on an H100, seen
                # by data/reference/h100_encoders), so warm them all now, as TEI and Triton do.
                for size in range(1, self.options.max_batch_size + 1):
                    self._run_forward(dataclasses.replace(request, batch_size=size))
                self.engine_info["warmed_batch_sizes"] = self.options.max_batch_size
            return False
        assert isinstance(workload, GenerateWorkload)
        # A full-size batch of typical lengths primes the CUDA allocator (the dynamic KV cache
        # grows every step) and kernel selection, which make the first such run the slowest.
        prompt_tokens = min(workload.prompt_tokens.mean, 512)
        output_tokens = min(workload.output_tokens.mean, 512)
        warmup = [
            GenerateRequest(
                f"warmup-{row}", [self._pad_token_id + 1] * prompt_tokens, output_tokens
            )
            for row in range(self.options.max_batch_size)
        ]
        with torch.inference_mode():
            self._generate_batch(warmup, lambda _t_ns: None)
        return False

    @staticmethod
    def _warmup_forward_request(workload: ForwardWorkload) -> ForwardRequest:
        sequence = workload.sequence_length.mean if workload.sequence_length else None
        if sequence and workload.sequence_length and workload.sequence_length.max:
            sequence = min(sequence, workload.sequence_length.max)
        return ForwardRequest("warmup", workload.batch_size, sequence, workload.image_size)

    # ------------------------------------------------------------------ generate

    def _generate_kwargs(self, batch_rows: int) -> dict[str, Any]:
        """Extra `generate` arguments (the compiled backend adds its static cache here)."""
        return {}

    def _batch_rows(self, requests: int) -> int:
        """Rows the batch runs with (the compiled backend pads to a compiled bucket)."""
        return requests

    def _generate_batch(self, requests: list[GenerateRequest], on_step: StepCallback) -> None:
        """Runs in the engine thread: one left-padded greedy `generate`, forced to length."""
        import torch

        rows = self._batch_rows(len(requests))
        prompts = [list(request.prompt_token_ids) for request in requests]
        # Filler rows (compiled buckets) repeat the first prompt; their tokens are not streamed.
        prompts += [prompts[0]] * (rows - len(prompts))
        new_tokens = max(request.output_tokens for request in requests)
        input_ids, attention_mask = left_padded_batch(prompts, self._pad_token_id, self.device)
        with torch.inference_mode(), self._autocast_context():
            extra = self._generate_kwargs(rows)
            self._check_fits(input_ids.shape[1], new_tokens)
            self.model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=new_tokens,
                # min = max new tokens: EOS is masked out, so every row runs to length (ignore_eos).
                min_new_tokens=new_tokens,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                pad_token_id=self._pad_token_id,
                streamer=make_step_streamer(on_step),
                **extra,
            )

    def _check_fits(self, prompt_width: int, new_tokens: int) -> None:
        limit = getattr(self.model.config, "max_position_embeddings", None)
        if limit and prompt_width + new_tokens > limit:
            raise RuntimeError(
                f"prompt {prompt_width} + output {new_tokens} tokens exceed the model's "
                f"max_position_embeddings ({limit})"
            )

    def _autocast_context(self) -> Any:
        import contextlib

        import torch

        if not self._autocast:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device, dtype=self._compute_dtype)

    # ------------------------------------------------------------------ forward

    def _inputs_for(self, request: ForwardRequest) -> dict[str, Any]:
        key = (request.batch_size, request.sequence_length, request.image_size)
        inputs = self._forward_inputs.get(key)
        if inputs is None:
            # Pixel values at the weights' dtype (fp32 under autocast, which casts per op).
            inputs = forward_inputs(
                self.model.config,
                request.batch_size,
                request.sequence_length,
                request.image_size,
                self.device,
                self.model.dtype,
            )
            self._forward_inputs[key] = inputs
        return inputs

    def _run_forward(self, request: ForwardRequest) -> tuple[int, Any]:
        """Runs in the engine thread: one forward pass; returns (time after sync, outputs)."""
        import torch

        inputs = self._inputs_for(request)
        assert self._forward_call is not None
        with torch.inference_mode(), self._autocast_context():
            outputs = self._forward_call(**inputs)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return CLOCK.now_ns(), outputs

    async def forward_output(
        self, batch_size: int, sequence_length: int | None = None, image_size: int | None = None
    ) -> torch.Tensor:
        """The primary output (fp32, on CPU) for the fixed seeded input of this shape (checks)."""

        def run() -> Any:
            _, outputs = self._run_forward(
                ForwardRequest("check", batch_size, sequence_length, image_size)
            )
            return primary_output(outputs).detach().float().cpu().clone()

        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    # ------------------------------------------------------------------ stream

    async def stream(self, request: Request) -> AsyncIterator[Chunk]:
        if self.model is None:
            raise RuntimeError(f"{self.name}: stream() before load()")
        if isinstance(request, GenerateRequest):
            if self.batcher is None:
                raise RuntimeError(f"{self.name}: model is a forward model, got a generate request")
            self._check_request(request)
            async for chunk in self.batcher.stream(request):
                yield chunk
            return
        if self.kind != "forward":
            raise RuntimeError(f"{self.name}: model is a generate model, got a forward request")
        if self.forward_batcher is not None:
            t_ns = await self.forward_batcher.run(request)
        else:
            loop = asyncio.get_running_loop()
            t_ns, _ = await loop.run_in_executor(self._executor, self._run_forward, request)
        yield Chunk(t_ns=t_ns, tokens=request.batch_size)

    def _check_request(self, request: GenerateRequest) -> None:
        """Per-request limits (the compiled backend adds its cache length)."""
        if not request.prompt_token_ids:
            raise RuntimeError("empty prompt")

    @property
    def batch_stats(self) -> Any:
        """The batcher's counters (batches run and their sizes), None for the forward kind."""
        return self.batcher.stats if self.batcher else None

    async def close(self) -> None:
        if self.batcher is not None:
            await self.batcher.close()
        if self.forward_batcher is not None:
            await self.forward_batcher.close()
        await asyncio.get_running_loop().run_in_executor(None, self._executor.shutdown, True)
        self.model = None
        self._forward_call = None
        self._forward_inputs.clear()
        if importlib.util.find_spec("torch") is not None:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def c_compiler_reason() -> str:
    """Empty when a C++ compiler exists (CPU inductor needs one), else why compile cannot run."""
    if any(shutil.which(name) for name in ("g++", "c++", "clang++")):
        return ""
    return "no C++ compiler on PATH (torch.compile's CPU inductor needs g++ or clang++)"
