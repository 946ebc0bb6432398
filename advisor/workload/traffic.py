"""The profile's traffic as the bench runs it: a stage's shared context, conversations, prompt
file or trace become the benchmark's workload and load (bench/core/config.py), and the plan's
leading engine with automatic prefix caching is run twice, caching on and off, so the report
can say what the cache is worth on this traffic.

The profile counts the shared context inside `prompt_tokens` (so the estimates and the context
check see whole prompts); the bench's `prompt_tokens` is the unique suffix after the prefix, so
the suffix here is the profile's distribution shifted down by the prefix length.
"""

from __future__ import annotations

from advisor.workload.architectures import architecture_for, check_context
from advisor.workload.profile import StageProfile
from bench.core.config import (
    ConversationSpec,
    CpuReplayClip,
    GenerateWorkload,
    LengthDistribution,
    PrefixPool,
    PromptFile,
    ReplayLoad,
    RunConfig,
)
from bench.core.errors import UserError
from bench.engines.backends import get_backend

PREFIX_CACHING_ENGINES = ("vllm", "tensorrt_llm")
"""Engines with automatic prefix caching (vLLM's APC, TensorRT-LLM's KV-cache block reuse)."""
UNPAIRED_ENGINES = ("tensorrt_llm",)
"""Engines whose caching the plan ranks but does not run twice (on and off): TensorRT-LLM does
not run on this project's CPU machines. Every other engine whose backend can switch its caching
(`Backend.framework_args(..., prefix_caching=...)`: vllm, openai with launch=vllm) is paired."""
QUICK_REPLAY_REQUESTS = 200
"""The quick plan replays at most this many trace rows (a first answer in minutes)."""
CPU_REPLAY = CpuReplayClip(max_requests=8, max_input_tokens=64, max_output_tokens=16)
"""CPU rehearsals replay the first rows clipped (docs/traffic.md)."""
CACHING_ON = "prefix caching on"
CACHING_OFF = "prefix caching off"


def declares_traffic(stage: object) -> bool:
    """The stage names a traffic shape beyond plain length distributions."""
    return any(
        getattr(stage, name, None) is not None
        for name in ("shared_prefix", "conversation", "trace_file", "prompt_file")
    )


def check_files(stage: object) -> None:
    """Read the stage's trace and prompt file through the bench's readers (size cap, binary,
    columns, timestamp order): a UserError naming the field when one is bad."""
    trace = getattr(stage, "trace_file", None)
    if trace is not None:
        from bench.run.traffic_files import read_trace

        try:
            read_trace(ReplayLoad(trace=trace))
        except UserError as exc:
            raise UserError(f"trace_file: {exc}") from None
    prompts = getattr(stage, "prompt_file", None)
    if prompts is not None:
        from bench.run.traffic_files import read_prompt_file

        try:
            read_prompt_file(PromptFile(path=prompts))
        except UserError as exc:
            raise UserError(f"prompt_file: {exc}") from None


def _suffix(prompt: LengthDistribution, prefix_tokens: int) -> LengthDistribution:
    """The request's own part of a prompt whose first `prefix_tokens` are shared."""
    return prompt.model_copy(
        update={
            "mean": max(1, prompt.mean - prefix_tokens),
            "min": max(1, prompt.min - prefix_tokens),
            "max": None if prompt.max is None else max(1, prompt.max - prefix_tokens),
        }
    )


def workload(stage: StageProfile) -> GenerateWorkload:
    """The bench workload of a generate stage with its traffic: prefix pool, conversations or
    the prompt file (a trace's lengths come from the trace: see `replay_load`)."""
    prompt = stage.prompt_tokens
    prefix = None
    if stage.shared_prefix is not None:
        prefix = PrefixPool(
            count=stage.shared_prefix.count,
            tokens=LengthDistribution(mean=stage.shared_prefix.tokens),
        )
        prompt = _suffix(prompt, stage.shared_prefix.tokens)
    conversation = None
    if stage.conversation is not None:
        think = stage.conversation.think_time_ms
        conversation = ConversationSpec(
            turns=LengthDistribution(mean=stage.conversation.turns),
            user_tokens=LengthDistribution(mean=stage.conversation.user_tokens),
            think_time_ms=None if not think else LengthDistribution(mean=max(1, round(think))),
        )
    prompt_file = PromptFile(path=stage.prompt_file) if stage.prompt_file is not None else None
    return GenerateWorkload(
        prompt_tokens=prompt,
        output_tokens=stage.output_tokens,
        prefix=prefix,
        conversation=conversation,
        prompt_file=prompt_file,
    )


def _observed(lengths: list[int]) -> LengthDistribution:
    """A trace's lengths as a distribution: their mean, clipped at their longest."""
    top = max(1, max(lengths))
    mean = min(top, max(1, round(sum(lengths) / len(lengths))))
    return LengthDistribution(kind="uniform", mean=mean, spread=0, max=top)


def sized_for_engine(stage: StageProfile) -> StageProfile:
    """The stage with prompt lengths that include a conversation's history at its last turn,
    for sizing the engine (max_model_len, KV cache): later turns resend the whole history; a
    trace's own lengths (its longest row) for a replay."""
    if stage.trace_file is not None:
        from bench.run.traffic_files import read_trace

        rows = read_trace(ReplayLoad(trace=stage.trace_file))
        if not rows:
            return stage
        inputs = [r.input_tokens for r in rows]
        outputs = [r.output_tokens for r in rows]
        return stage.model_copy(
            update={
                "prompt_tokens": _observed(inputs),
                "output_tokens": _observed(outputs),
            }
        )
    if stage.conversation is None:
        return stage
    history = max(0, stage.conversation.turns - 1) * (
        stage.output_tokens.mean + stage.conversation.user_tokens
    )
    prompt = stage.prompt_tokens
    longer = prompt.model_copy(
        update={
            "mean": prompt.mean + history,
            "max": None if prompt.max is None else prompt.max + history,
        }
    )
    return stage.model_copy(update={"prompt_tokens": longer})


def check_history(stage: StageProfile) -> None:
    """A conversation whose last turn (first prompt + the history of earlier turns + output)
    exceeds the model's context window cannot be benchmarked as declared: a UserError saying by
    how much, before any run (the engine would refuse those turns)."""
    if stage.conversation is None or stage.model is None:
        return
    sized = sized_for_engine(stage)
    architecture, _ = architecture_for(stage.model)
    check = check_context(sized, architecture)
    if check is None or check.window_tokens is None:
        return
    if check.near_worst_tokens > check.window_tokens:
        raise UserError(
            f"stage {stage.name!r}: the conversation's last turn is about "
            f"{check.near_worst_tokens:,} tokens (prompt + {stage.conversation.turns - 1} "
            f"earlier turns of history + output), over {stage.model}'s "
            f"{check.window_tokens:,}-token window; declare fewer turns or shorter messages"
        )


def replay_load(stage: StageProfile, quick: bool, *, cpu_only: bool = False) -> ReplayLoad:
    """The stage's trace replayed at its own timestamps; the quick plan caps the rows, and a
    CPU plan replays the first rows clipped (the rehearsal shape)."""
    options: dict[str, object] = {"trace": stage.trace_file, "warmup_requests": 2}
    if quick:
        options["max_requests"] = QUICK_REPLAY_REQUESTS
    load = ReplayLoad.model_validate(options)
    return load.on_the_cpu(CPU_REPLAY) if cpu_only else load


def on_the_cpu(config: RunConfig) -> RunConfig:
    """A CPU plan's load (a replay: its first rows, clipped; other loads unchanged)."""
    return config.model_copy(update={"load": config.load.on_the_cpu(CPU_REPLAY)})


def replay_seconds(load: ReplayLoad) -> float:
    """The replayed span of the trace in seconds (time-scaled), for the plan's estimate."""
    from bench.run.traffic_files import read_trace

    rows = read_trace(load)
    if not rows:
        return 0.0
    return (rows[-1].t_ms - rows[0].t_ms) / 1000.0 * load.time_scale


def _with_caching(config: RunConfig, on: bool) -> RunConfig:
    """The run with prefix caching switched explicitly (the run setting, which its backend maps
    to the engine's own name and with which the in-process vLLM engine also reports its hit
    rate), and labelled."""
    state = CACHING_ON if on else CACHING_OFF
    return config.model_copy(update={"prefix_caching": on, "label": f"{config.label}, {state}"})


def _pairable(config: RunConfig) -> bool:
    """Whether the plan runs this engine twice, caching on and off: its backend can switch the
    caching (no UserError from the mapping) and it is not one of UNPAIRED_ENGINES."""
    if config.backend in UNPAIRED_ENGINES:
        return False
    try:
        get_backend(config.backend).framework_args(config.engine_args, prefix_caching=True)
    except UserError:
        return False
    return True


def caching_pair(configs: list[RunConfig], stage: StageProfile) -> list[RunConfig]:
    """Where the stage declares shared prefixes or conversations: the leading engine with
    automatic prefix caching that can be switched here runs twice, caching on (in its place)
    and off (right after it); other runs are unchanged."""
    if not stage.declares_shared_prefixes():
        return configs
    leading = next((i for i, c in enumerate(configs) if _pairable(c)), None)
    if leading is None:
        return configs
    on = _with_caching(configs[leading], True)
    off = _with_caching(configs[leading], False)
    return [*configs[:leading], on, off, *configs[leading + 1 :]]


__all__ = [
    "CACHING_OFF",
    "CACHING_ON",
    "PREFIX_CACHING_ENGINES",
    "UNPAIRED_ENGINES",
    "caching_pair",
    "check_files",
    "check_history",
    "declares_traffic",
    "on_the_cpu",
    "replay_load",
    "replay_seconds",
    "sized_for_engine",
    "workload",
]
