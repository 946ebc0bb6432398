"""Fidelity checks: a backend under the harness vs the engine's own API on the same prompts.

The harness adds a client, streaming and a worker process around an engine; a fidelity check
measures what that costs by timing the engine's own plain API on the same model and shape.

- `vllm`: the `vllm` backend through `bench.run.api.launch` (closed loop over `requests` prompts at
  `client_concurrency`, engine `max_num_seqs`) against vLLM's offline `LLM.generate` of the same
  prompts in one call, in a fresh process, with the prefix cache emptied before each timed call.
- `pytorch`: the `pytorch` backend (dynamic batcher) at concurrency = max_batch_size = `batch`
  against a plain `model.generate` on a full batch. Mode `paired` loads the model once and
  alternates one plain `generate` and one harness batch in the same engine thread, `pairs`
  times in ABBA order (a linear drift of the host favours neither side); the ratio is the median
  pair's. Mode `launch` runs each side in its own process (`rounds` interleaved, median round).

Ratio = backend output tok/s / reference output tok/s; a check passes at `required_ratio`.
`run_check` runs one check: `python -m bench fidelity` and campaign steps of kind `fidelity`.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import multiprocessing
import queue
import statistics
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from bench.core.config import (
    RESTATED_AXES,
    ConcurrencyLoad,
    GenerateWorkload,
    LengthDistribution,
    ParallelismConfig,
    Precision,
    RunConfig,
    ValidityRules,
    legacy_axes_moved,
    restated_axis,
)
from bench.core.engine_facts import EngineFacts
from bench.core.errors import UserError
from bench.core.metric_catalog import CataloguedFields
from bench.core.progress import RunProgress
from bench.core.schema import ModelInfo, RequestRecord, RunResult
from bench.core.strict import Strict, StrictInput

if TYPE_CHECKING:  # bench.storage.store pulls in SQLAlchemy; only its types are needed here
    from bench.storage.store import RunWriter

Dtype = Literal["float16", "bfloat16", "float32"]
Device = Literal["auto", "cuda", "cpu"]
SUBPROCESS_TIMEOUT_S = 900


# --------------------------------------------------------------------------- what to check


class CheckCommon(StrictInput):
    """Model and shape every fidelity check states."""

    model: str = Field(description="Model preset name or checkpoint path.")
    dtype: Dtype = Field("float16", description="Weights and activations dtype.")
    device: Device = Field("auto", description="Where the engine runs.")
    prompt_tokens: int = Field(128, gt=0, description="Prompt length of every request (tokens).")
    output_tokens: int = Field(128, gt=0, description="Output length of every request (tokens).")


class VllmFidelityCheck(CheckCommon):
    """The `vllm` backend vs vLLM's offline `LLM.generate` on the same prompts."""

    engine: Literal["vllm"] = "vllm"
    requests: int = Field(1024, gt=0, description="Prompts timed on each side.")
    max_num_seqs: int = Field(
        256, gt=0, description="Engine sequences in flight (vLLM max_num_seqs), both sides."
    )
    client_concurrency: int | None = Field(
        None,
        gt=0,
        description="Harness requests in flight; none = max_num_seqs (a wave is re-submitted "
        "as its requests finish). `requests` hands every request over at once, as "
        "LLM.generate does, so only the harness differs.",
    )
    event_loop: Literal["asyncio", "uvloop"] = Field(
        "asyncio", description="The worker's event loop (RunConfig.event_loop)."
    )
    warmup_requests: int = Field(4, ge=0, description="Untimed requests first, on both sides.")
    single_wave: bool = Field(
        True,
        description="Also time LLM.generate over max_num_seqs prompts alone (context: one wave "
        "is dominated by its ramp-up and tail).",
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict,
        description="vLLM EngineArgs for both sides (not max_num_seqs, parallelism or precision).",
    )
    parallelism: ParallelismConfig = Field(
        default_factory=ParallelismConfig,
        description="GPUs the one engine spans on both sides (tensor_parallel_size; one replica).",
    )
    quantization: Literal["fp8"] | None = Field(
        None, description="Weight quantisation on both sides (precision.quantization)."
    )
    kv_cache_dtype: Literal["auto", "fp8"] = Field(
        "auto", description="KV-cache dtype on both sides (precision.kv_cache_dtype)."
    )
    required_ratio: float = Field(0.95, gt=0, description="Pass when the ratio is at least this.")

    @model_validator(mode="before")
    @classmethod
    def _older_axes_in_engine_args(cls, data: Any) -> Any:
        """Checks written before parallelism and precision were said once (the shipped plans
        and campaign records) gave `tensor_parallel_size`, `quantization: fp8` and
        `kv_cache_dtype: fp8` as engine args: read them into the fields. Any other restated
        axis (dtype, ...) is refused by the check below."""
        if not isinstance(data, dict):
            return data
        moved = legacy_axes_moved(
            {
                "engine_args": data.get("engine_args") or {},
                "parallelism": data.get("parallelism") or {},
                "precision": {k: data[k] for k in ("quantization", "kv_cache_dtype") if k in data},
            },
            backend="vllm",
        )
        if "prefix_caching" in moved:  # not a setting of the check: left in place, refused below
            moved["engine_args"] = data.get("engine_args") or {}
        if moved["engine_args"] == (data.get("engine_args") or {}):
            return data
        return {
            **data,
            **moved["precision"],
            "engine_args": moved["engine_args"],
            "parallelism": moved["parallelism"],
        }

    @model_validator(mode="after")
    def _axes_said_once(self) -> VllmFidelityCheck:
        caching = [name for name in self.engine_args if RESTATED_AXES.get(name) == "prefix_caching"]
        if caching:
            # Switched explicitly, the harness's engine also counts its hit rate (a stat logger
            # per step) that the offline LLM does not: the two sides would differ.
            raise ValueError(
                f"engine_args.{caching[0]}: a vLLM fidelity check runs both sides with vLLM's "
                "default prefix caching; leave it out"
            )
        restated = restated_axis(self.engine_args)
        if restated is not None:
            raise ValueError(restated)
        if self.parallelism.replicas != 1 or self.parallelism.gpu_ids is not None:
            raise ValueError(
                "a fidelity check times one engine: parallelism takes tensor_parallel_size only"
            )
        return self

    @property
    def precision(self) -> Precision:
        """The run precision both sides use."""
        return Precision(
            dtype=self.dtype, quantization=self.quantization, kv_cache_dtype=self.kv_cache_dtype
        )


class PytorchFidelityCheck(CheckCommon):
    """The `pytorch` backend's dynamic batcher vs a plain `model.generate` on a full batch."""

    engine: Literal["pytorch"] = "pytorch"
    batch: int = Field(64, gt=0, description="max_batch_size = closed-loop concurrency.")
    batch_wait_ms: float = Field(20.0, ge=0, description="The batcher's batch_wait_ms.")
    mode: Literal["paired", "launch"] = Field(
        "paired",
        description="paired: one process, plain and harness alternated ABBA; launch: each side "
        "in its own process, the backend through bench.run.api.launch.",
    )
    pairs: int = Field(10, gt=0, description="paired: plain/harness pairs.")
    rounds: int = Field(1, gt=0, description="launch: interleaved rounds (median reported).")
    batches: int = Field(3, gt=0, description="launch: full batches the backend runs per round.")
    repeats: int = Field(3, gt=0, description="launch: timed plain generates per round.")
    telemetry_interval_s: float = Field(
        0.5, gt=0, description="launch: the run's NVML sampling period."
    )
    required_ratio: float = Field(0.90, gt=0, description="Pass when the ratio is at least this.")


FidelityCheck = Annotated[VllmFidelityCheck | PytorchFidelityCheck, Field(discriminator="engine")]
CHECKS: dict[str, type[CheckCommon]] = {"vllm": VllmFidelityCheck, "pytorch": PytorchFidelityCheck}


# --------------------------------------------------------------------------- what it found


class GenerateTiming(Strict):
    """One timed `LLM.generate` call."""

    requests: int
    output_tokens: int
    cached_prompt_tokens: int = Field(description="Prompt tokens that still hit the cache.")
    elapsed_s: float
    output_throughput_tok_s: float
    request_throughput_rps: float


class VllmReference(GenerateTiming):
    """vLLM's `LLM.generate` over every prompt, and optionally over one wave alone."""

    method: str = "vllm.LLM.generate"
    vllm_version: str | None
    input_tokens: int
    engine_args: dict[str, Any]
    dtype: str
    detokenize: bool
    single_wave: GenerateTiming | None = None


class PlainGenerateReference(Strict):
    """Plain `model.generate` on a full batch: the median of `repeats` timed runs."""

    batch_size: int
    prompt_len: int
    output_len: int
    output_tokens_per_row: int
    elapsed_s: float
    output_throughput_tok_s: float
    runs_output_throughput_tok_s: list[float]
    dtype: str
    device: str
    torch_version: str


THROUGHPUT_FIELDS: dict[str, str] = {
    "reference_output_throughput_tok_s": "output_throughput_tok_s",
    "backend_output_throughput_tok_s": "output_throughput_tok_s",
}
"""The two sides' output throughput, stored under these names since the first checks."""


class FidelityRound(CataloguedFields, Strict):
    """Launch mode: one reference measurement and one backend run."""

    field_metrics: ClassVar[dict[str, str]] = THROUGHPUT_FIELDS

    reference_output_throughput_tok_s: float
    backend_output_throughput_tok_s: float | None
    ratio: float | None
    plain: PlainGenerateReference | None = None


class FidelityPair(CataloguedFields, Strict):
    """Paired mode: one plain `generate` and one harness batch, neighbours on one model.

    `backend_ttft_ms_p50` is the batch's TTFT p50 (`ttft_ms_p50` of its summary, hence the
    name); the step gaps are one request's inter-token gaps, nearest-rank, not the pooled ITL
    of the catalogue, so they have no catalogued metric."""

    field_metrics: ClassVar[dict[str, str]] = {
        "plain_output_throughput_tok_s": "output_throughput_tok_s",
        "backend_output_throughput_tok_s": "output_throughput_tok_s",
        "backend_ttft_ms_p50": "ttft_ms_p50",
    }

    plain_first: bool
    plain_elapsed_s: float
    plain_output_throughput_tok_s: float
    backend_duration_s: float
    backend_output_throughput_tok_s: float
    backend_ttft_ms_p50: float | None
    backend_step_ms_p10: float | None = Field(description="Inter-token gap p10 of the batch.")
    backend_step_ms_p50: float | None
    ratio: float


class FidelityResult(CataloguedFields, Strict):
    """One check's outcome. `ratio` = backend / reference output tok/s (median round or pair)."""

    field_metrics: ClassVar[dict[str, str]] = THROUGHPUT_FIELDS

    check: FidelityCheck
    ratio: float | None
    passed: bool | None = Field(description="ratio >= the check's required_ratio; none = no ratio.")
    backend_output_throughput_tok_s: float | None
    reference_output_throughput_tok_s: float | None
    ratio_spread: list[float] | None = Field(
        None, description="Lowest and highest ratio over rounds (launch) or quartiles (paired)."
    )
    ratio_best_of_each: float | None = Field(
        None, description="Best backend figure / best reference figure."
    )
    vllm_reference: VllmReference | None = None
    rounds: list[FidelityRound] = Field(default_factory=list)
    pairs: list[FidelityPair] = Field(default_factory=list)
    engine: EngineFacts = Field(
        default_factory=EngineFacts, description="Paired mode: engine facts."
    )
    runs: list[RunResult] = Field(
        default_factory=list, description="The backend's runs through bench.run.api.launch."
    )
    wall_s: float = 0.0


# --------------------------------------------------------------------------- running one check


def run_check(
    check: VllmFidelityCheck | PytorchFidelityCheck,
    store: RunWriter | None = None,
    out_dir: Path | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
) -> FidelityResult:
    """Run one fidelity check; backend runs go to `store` and `out_dir/runs/`.

    `out_dir` is checked (created, a file written in it) before anything runs: a folder that
    cannot be written fails in one line at once, not after the whole check."""
    if out_dir is not None:
        from bench.core.outputs import prepare_out_dir

        prepare_out_dir(out_dir)
    started = time.monotonic()
    if isinstance(check, VllmFidelityCheck):
        result = _vllm_check(check, store, out_dir, on_progress)
    elif check.mode == "paired":
        result = run_in_subprocess(paired_check, check)
    else:
        result = _pytorch_launch_check(check, store, out_dir, on_progress)
    return result.model_copy(update={"wall_s": round(time.monotonic() - started, 1)})


def _workload(check: CheckCommon) -> GenerateWorkload:
    return GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=check.prompt_tokens),
        output_tokens=LengthDistribution(mean=check.output_tokens),
    )


def _runs_dir(out_dir: Path | None, name: str) -> Path | None:
    return None if out_dir is None else out_dir / "runs" / name


def _vllm_check(
    check: VllmFidelityCheck,
    store: RunWriter | None,
    out_dir: Path | None,
    on_progress: Callable[[RunProgress], None] | None,
) -> FidelityResult:
    from bench.engines.models import resolve_model
    from bench.run.api import launch
    from bench.run.workload import RequestFactory

    client = check.client_concurrency or check.max_num_seqs
    engine_args = {**check.engine_args, "max_num_seqs": check.max_num_seqs}
    info = resolve_model(check.model, dtype=check.dtype)
    workload = _workload(check)
    # The harness draws its prompts from the same seeded factory, so both sides see one set.
    factory = RequestFactory(workload, info.vocab_size, seed=0)
    prompts = [next(factory).prompt_token_ids for _ in range(check.requests)]
    wave = check.max_num_seqs if check.single_wave and check.requests > check.max_num_seqs else None
    reference = run_in_subprocess(
        llm_generate_throughput, info.path, prompts, check.output_tokens, dict(engine_args),
        check.precision, check.warmup_requests, True, wave, check.parallelism,
    )  # fmt: skip
    loop_tag = "" if check.event_loop == "asyncio" else f" {check.event_loop}"
    config = RunConfig(
        backend="vllm",
        model=check.model,
        engine_args=engine_args,
        workload=workload,
        load=ConcurrencyLoad(
            concurrency=client,
            duration_s=None,
            max_requests=check.requests,
            warmup_requests=check.warmup_requests,
        ),
        precision=check.precision,
        parallelism=check.parallelism,
        device=check.device,
        validity=ValidityRules(min_duration_s=0, min_requests=check.requests),
        event_loop=check.event_loop,
        label=f"vllm fidelity c{client} n{check.requests} seqs{check.max_num_seqs}{loop_tag}",
    )
    run = launch(
        config,
        store=store,
        out_dir=_runs_dir(out_dir, f"vllm_fidelity_c{client}{loop_tag.replace(' ', '_')}"),
        on_progress=on_progress,
    )
    ours = run.summary.output_throughput_tok_s if run.summary else None
    ratio = ours / reference.output_throughput_tok_s if ours else None
    return FidelityResult(
        check=check,
        ratio=ratio,
        passed=None if ratio is None else ratio >= check.required_ratio,
        backend_output_throughput_tok_s=ours,
        reference_output_throughput_tok_s=reference.output_throughput_tok_s,
        vllm_reference=reference,
        runs=[run],
    )


def _pytorch_launch_config(check: PytorchFidelityCheck) -> RunConfig:
    return RunConfig(
        backend="pytorch",
        model=check.model,
        engine_args={"max_batch_size": check.batch, "batch_wait_ms": check.batch_wait_ms},
        workload=_workload(check),
        load=ConcurrencyLoad(
            # Warm-up: one full batch, as plain_generate_throughput's untimed first generate.
            concurrency=check.batch,
            duration_s=None,
            max_requests=check.batch * check.batches,
            warmup_requests=check.batch,
        ),
        precision=Precision(dtype=check.dtype),
        device=check.device,
        validity=ValidityRules(min_duration_s=0, min_requests=check.batch),
        telemetry_interval_s=check.telemetry_interval_s,
        label=f"pytorch fidelity {check.batch} nvml {check.telemetry_interval_s:g}s",
    )


def _pytorch_launch_check(
    check: PytorchFidelityCheck,
    store: RunWriter | None,
    out_dir: Path | None,
    on_progress: Callable[[RunProgress], None] | None,
) -> FidelityResult:
    from bench.engines.models import resolve_model
    from bench.run.api import launch

    info = resolve_model(check.model, dtype=check.dtype)
    config = _pytorch_launch_config(check)
    rounds: list[FidelityRound] = []
    runs: list[RunResult] = []
    for index in range(check.rounds):
        plain = run_in_subprocess(
            plain_generate_throughput, info.path, check.batch, check.prompt_tokens,
            check.output_tokens, check.dtype, check.device, 0, check.repeats,
        )  # fmt: skip
        run = launch(
            config,
            store=store,
            out_dir=_runs_dir(
                out_dir, f"pytorch_fidelity_nvml{check.telemetry_interval_s:g}s_r{index}"
            ),
            on_progress=on_progress,
        )
        ours = run.summary.output_throughput_tok_s if run.summary else None
        rounds.append(
            FidelityRound(
                reference_output_throughput_tok_s=plain.output_throughput_tok_s,
                backend_output_throughput_tok_s=ours,
                ratio=ours / plain.output_throughput_tok_s if ours else None,
                plain=plain,
            )
        )
        runs.append(run)
    # The host's speed moves between back-to-back processes; the median round is the figure.
    measured = sorted((r for r in rounds if r.ratio is not None), key=lambda r: r.ratio or 0)
    median = measured[(len(measured) - 1) // 2] if measured else rounds[0]
    backend_best = max((r.backend_output_throughput_tok_s or 0 for r in rounds), default=0)
    plain_best = max(max(r.plain.runs_output_throughput_tok_s) for r in rounds if r.plain)
    return FidelityResult(
        check=check,
        ratio=median.ratio,
        passed=None if median.ratio is None else median.ratio >= check.required_ratio,
        backend_output_throughput_tok_s=median.backend_output_throughput_tok_s,
        reference_output_throughput_tok_s=median.reference_output_throughput_tok_s,
        ratio_spread=[measured[0].ratio, measured[-1].ratio] if len(measured) > 1 else None,  # type: ignore[list-item]
        ratio_best_of_each=backend_best / plain_best if backend_best else None,
        rounds=rounds,
        runs=runs,
    )


# --------------------------------------------------------------------------- pytorch references


def plain_generate_timer(
    model: Any, batch_size: int, prompt_len: int, output_len: int, device: str, seed: int = 0
) -> Callable[[], tuple[float, int]]:
    """A function running one plain `model.generate` on a full batch: (seconds, tokens per row).

    The batcher's reference, with the `pytorch` backend's settings (SDPA as loaded, greedy,
    outputs forced to `output_len`, no streamer) on seeded random prompts of `prompt_len` tokens.
    Each call synchronises the GPU before and after, so the time is the whole generate. Taking an
    already-loaded `model` lets the paired check alternate it with the backend on the same
    weights, in the same process and thread.
    """
    import torch

    from bench.engines.backends.pytorch import pad_token_id_of

    pad = pad_token_id_of(model)
    generator = torch.Generator().manual_seed(seed)
    vocab = int(model.config.vocab_size)
    low = min(100, vocab // 2)
    input_ids = torch.randint(low, vocab, (batch_size, prompt_len), generator=generator).to(device)
    attention_mask = torch.ones_like(input_ids)

    def timed_generate() -> tuple[float, int]:
        with torch.inference_mode():
            if device == "cuda":
                torch.cuda.synchronize()
            start_ns = time.perf_counter_ns()
            output = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=output_len,
                min_new_tokens=output_len,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                pad_token_id=pad,
            )
            if device == "cuda":
                torch.cuda.synchronize()
        return (time.perf_counter_ns() - start_ns) / 1e9, int(output.shape[1] - prompt_len)

    return timed_generate


def plain_generate_throughput(
    model_dir: str | Path,
    batch_size: int,
    prompt_len: int,
    output_len: int,
    dtype: str = "bfloat16",
    device: str = "auto",
    seed: int = 0,
    repeats: int = 3,
) -> PlainGenerateReference:
    """Plain `model.generate` on a full batch (no batcher): the launch mode's reference.

    Loads the checkpoint, then one untimed generate of the full shape (a first run pays for the
    CUDA allocator's growth as the KV cache grows), then `repeats` timed runs of
    `plain_generate_timer`. Output throughput = batch_size * output_len / elapsed; the median run
    is reported.
    """
    import torch

    from bench.engines.backends.pytorch import load_hf_model, resolve_device

    device = resolve_device(device)
    model = load_hf_model(model_dir, getattr(torch, dtype), device, "sdpa")
    timed_generate = plain_generate_timer(model, batch_size, prompt_len, output_len, device, seed)
    timed_generate()
    runs = [timed_generate() for _ in range(max(1, repeats))]
    throughputs = [batch_size * produced / elapsed for elapsed, produced in runs]
    model = timed_generate = None  # drop the weights before emptying the CUDA cache
    if device == "cuda":
        torch.cuda.empty_cache()
    return PlainGenerateReference(
        batch_size=batch_size,
        prompt_len=prompt_len,
        output_len=output_len,
        output_tokens_per_row=runs[0][1],
        elapsed_s=statistics.median(elapsed for elapsed, _ in runs),
        output_throughput_tok_s=statistics.median(throughputs),
        runs_output_throughput_tok_s=throughputs,
        dtype=dtype,
        device=device,
        torch_version=torch.__version__,
    )


def step_gaps_ms(records: list[RequestRecord]) -> list[float]:
    """Inter-token gaps of one batch: its requests share every step's time, so one suffices."""
    measured = [r for r in records if not r.warmup and r.error is None and len(r.chunk_ns) > 1]
    if not measured:
        return []
    chunks = measured[0].chunk_ns
    return [(b - a) / 1e6 for a, b in itertools.pairwise(chunks)]


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def paired_check(check: PytorchFidelityCheck) -> FidelityResult:
    """`paired_fidelity` from synchronous code (the subprocess `run_check` starts)."""
    from transformers.utils import logging as transformers_logging

    from bench.engines.models import resolve_model

    transformers_logging.disable_progress_bar()  # this process writes to the caller's terminal
    model = resolve_model(check.model, dtype=check.dtype)
    return asyncio.run(paired_fidelity(check, model))


async def paired_fidelity(check: PytorchFidelityCheck, model: ModelInfo) -> FidelityResult:
    """Plain `generate` and the harness alternated on one loaded model (see the module doc)."""
    from bench.engines.backends.pytorch import PyTorchBackend
    from bench.run.runner import RunEvents, execute

    batch = check.batch
    # One phase of exactly one full batch, no warm-up: the untimed runs below warm both paths.
    config = _pytorch_launch_config(check).model_copy(
        update={
            "load": ConcurrencyLoad(
                concurrency=batch, duration_s=None, max_requests=batch, warmup_requests=0
            )
        }
    )
    backend = PyTorchBackend(config.engine_args)
    info = await backend.load(model, config.workload, config.precision, config.device)
    assert backend.batcher is not None
    engine_thread = backend.batcher.executor  # plain runs in the thread the batches run in
    loop = asyncio.get_running_loop()
    timer = plain_generate_timer(
        backend.model, batch, check.prompt_tokens, check.output_tokens, backend.device
    )

    async def plain_run() -> tuple[float, float]:
        elapsed_s, produced = await loop.run_in_executor(engine_thread, timer)
        return elapsed_s, batch * produced / elapsed_s

    async def backend_run() -> dict[str, Any]:
        records: list[RequestRecord] = []
        events = RunEvents(records.append, lambda _p: None, lambda _p: None)
        outcome = await execute(config, backend, model, events, asyncio.Event())
        summary = outcome.summary
        if summary is None or summary.failed or summary.successful != batch:
            raise RuntimeError(f"backend batch incomplete: {summary}")
        gaps = step_gaps_ms(records)
        return {
            "backend_duration_s": summary.duration_s,
            **{
                field: FidelityPair.metric_of(field).read(summary)
                for field in ("backend_output_throughput_tok_s", "backend_ttft_ms_p50")
            },
            "backend_step_ms_p10": percentile(gaps, 0.10),
            "backend_step_ms_p50": percentile(gaps, 0.50),
        }

    pairs: list[FidelityPair] = []
    try:
        await plain_run()  # untimed, as plain_generate_throughput's first generate
        await backend_run()  # untimed: the harness path's first full batch
        for index in range(check.pairs):
            plain_first = index % 4 in (0, 3)  # ABBA: a linear drift favours neither side
            if plain_first:
                (elapsed_s, plain_tok_s), ours = await plain_run(), await backend_run()
            else:
                ours, (elapsed_s, plain_tok_s) = await backend_run(), await plain_run()
            pairs.append(
                FidelityPair(
                    plain_first=plain_first,
                    plain_elapsed_s=elapsed_s,
                    plain_output_throughput_tok_s=plain_tok_s,
                    ratio=ours["backend_output_throughput_tok_s"] / plain_tok_s,
                    **ours,
                )
            )
    finally:
        await backend.close()
    ratios = [pair.ratio for pair in pairs]
    median_ratio = statistics.median(ratios)
    backend_best = max(pair.backend_output_throughput_tok_s for pair in pairs)
    plain_best = max(pair.plain_output_throughput_tok_s for pair in pairs)
    return FidelityResult(
        check=check,
        ratio=median_ratio,
        passed=median_ratio >= check.required_ratio,
        backend_output_throughput_tok_s=statistics.median(
            pair.backend_output_throughput_tok_s for pair in pairs
        ),
        reference_output_throughput_tok_s=statistics.median(
            pair.plain_output_throughput_tok_s for pair in pairs
        ),
        ratio_spread=[percentile(ratios, 0.25), percentile(ratios, 0.75)],  # type: ignore[list-item]
        ratio_best_of_each=backend_best / plain_best,
        pairs=pairs,
        engine=info.engine.model_copy(update={"device": backend.device}),
    )


# --------------------------------------------------------------------------- vLLM reference


def llm_generate_throughput(
    model_dir: str,
    prompts_token_ids: list[list[int]],
    output_len: int,
    engine_args: dict[str, Any] | None = None,
    precision: Precision | None = None,
    warmup_requests: int = 4,
    detokenize: bool = True,
    single_wave: int | None = None,
    parallelism: ParallelismConfig | None = None,
) -> VllmReference:
    """vLLM's own offline `LLM.generate` on these prompts: the `vllm` backend's reference.

    Same sampling as the backend (greedy, exactly `output_len` tokens). A few warm-up requests
    run first, as the harness excludes warm-up too; the prefix cache is emptied before each timed
    call (`cached_prompt_tokens` says what still hit it). Output throughput = output tokens /
    elapsed wall time of the one `generate` call over all prompts. With more prompts than
    `max_num_seqs` the engine keeps that many in flight and admits a waiting one as each
    finishes: the offline twin of a closed loop at concurrency `max_num_seqs`.
    `single_wave=n` also times one `generate` over the first n prompts alone. Run it in its own
    process (`run_in_subprocess`) so the engine is freed for sure. `precision` (default
    bfloat16) and `parallelism` (default one GPU) map to vLLM's arguments as the backend maps
    them (`vllm_parallel_args`).
    """
    from bench.engines.backends.vllm import (
        _import_engine_api,
        check_arg_names,
        engine_arg_fields,
        forced_length_sampling_params,
        vllm_parallel_args,
        vllm_version,
    )

    precision = precision or Precision(dtype="bfloat16")
    engine_args = dict(engine_args or {})
    check_arg_names(engine_args, engine_arg_fields(), "vLLM engine")
    engine_args = vllm_parallel_args(engine_args, parallelism or ParallelismConfig(), precision)
    from vllm import LLM

    from bench.engines.backends.vllm import size_cpu_kv_cache

    # On vLLM's CPU platform the KV cache is sized from the workload exactly as the `vllm`
    # backend sizes it (vLLM's default takes 92% of the node's memory and fails when less is
    # free); the same arguments then reach both sides. No effect on a GPU.
    mean_prompt = round(sum(map(len, prompts_token_ids)) / max(1, len(prompts_token_ids)))
    shape = GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=max(1, mean_prompt)),
        output_tokens=LengthDistribution(mean=output_len),
    )
    size_cpu_kv_cache(engine_args, model_dir, shape, precision)
    api = _import_engine_api()
    llm = LLM(model=model_dir, dtype=precision.dtype, **engine_args)
    params = forced_length_sampling_params(api, output_len, detokenize, delta=False)
    prompts = [api["TokensPrompt"](prompt_token_ids=list(ids)) for ids in prompts_token_ids]
    if warmup_requests:
        llm.generate(prompts[:warmup_requests], params, use_tqdm=False)

    def timed_generate(engine: Any, batch: list[Any]) -> GenerateTiming:
        # The warm-up and the single wave ran some of these prompts already: without a reset
        # their prefill would be prefix-cache hits, which the backend (fresh prompts) never gets.
        engine.reset_prefix_cache()
        start = time.perf_counter()
        outputs = engine.generate(batch, params, use_tqdm=False)
        elapsed_s = time.perf_counter() - start
        tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
        return GenerateTiming(
            requests=len(outputs),
            output_tokens=tokens,
            cached_prompt_tokens=sum(o.num_cached_tokens or 0 for o in outputs),
            elapsed_s=elapsed_s,
            output_throughput_tok_s=tokens / elapsed_s,
            request_throughput_rps=len(outputs) / elapsed_s,
        )

    wave = timed_generate(llm, prompts[:single_wave]) if single_wave else None
    measured = timed_generate(llm, prompts)
    # LLM has no public shutdown in 0.25/0.32; its engine-core client does.
    engine_core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if engine_core is not None:
        engine_core.shutdown()
    del llm
    gc.collect()
    return VllmReference(
        **measured.model_dump(),
        vllm_version=vllm_version(),
        input_tokens=sum(len(p) for p in prompts_token_ids),
        engine_args=engine_args,
        dtype=precision.dtype,
        detokenize=detokenize,
        single_wave=wave,
    )


# --------------------------------------------------------------------------- process isolation


def run_in_subprocess(function: Callable[..., Any], *args: Any) -> Any:
    """Call `function(*args)` in a fresh spawned process and return its result.

    An engine's own API runs apart from the harness so its memory is freed for sure (vLLM needs
    spawn). Not a Pool: pool workers are daemonic and vLLM's engine starts children of its own.
    An exception in the child is raised here as a RuntimeError with the child's traceback tail.
    """
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    process = context.Process(target=_call_into_queue, args=(results, function, args))
    process.start()
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT_S
    try:
        while True:
            try:
                ok, value = results.get(timeout=1.0)
                break
            except queue.Empty:
                # A child killed outright (out of memory, a crash in native code) sends nothing.
                if not process.is_alive():
                    raise RuntimeError(
                        f"{function.__name__} ended without a result (exit code {process.exitcode})"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{function.__name__} gave no result in {SUBPROCESS_TIMEOUT_S} s"
                    ) from None
    finally:
        process.join(timeout=60)
        if process.is_alive():
            process.kill()
    if not ok:
        kind, message = value
        raise UserError(message) if kind == "user" else RuntimeError(message)
    return value


def _call_into_queue(results: Any, function: Callable[..., Any], args: tuple) -> None:
    try:
        results.put((True, function(*args)))
    except UserError as exc:  # a user's mistake stays one line in the parent
        results.put((False, ("user", str(exc))))
    except BaseException as exc:
        detail = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
        results.put((False, ("error", detail)))
