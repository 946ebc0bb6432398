"""What to run: the pydantic configuration of one benchmark run (workload, load pattern, SLOs).

Field descriptions double as CLI and web-form help text. Every model forbids unknown fields so a
typo in a profile or plan is an error, not a silently ignored option.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol, Self, get_args

from pydantic import AfterValidator, BaseModel, Field, model_validator

from bench.core.errors import UserError
from bench.core.limits import (  # re-exported: the bounds' one table is bench/core/limits.py
    MAX_BLOCK_SIZE,
    MAX_CONCURRENCY,
    MAX_PREFIXES,
    MAX_PROBE_REQUESTS,
    MAX_RATE_RPS,
    MAX_SEED,
    MAX_TIME_SCALE,
    MAX_TOKENS,
)
from bench.core.prediction import RunPrediction
from bench.core.strict import Strict as Strict  # re-exported: backends import it from here
from bench.core.strict import StrictInput

# --------------------------------------------------------------------------- bounds
# Upper bounds far above any real run, so that a typo or `1e300` is refused here, in one line,
# instead of overflowing an int conversion or never ending later.

MAX_DURATION_S = 7 * 24 * 3600.0
"""A week: the longest any phase, timeout or run may be."""
MAX_REQUESTS = 1_000_000_000
MAX_SLO_MS = 24 * 3600 * 1000.0
MAX_BATCH = 1_000_000
MAX_IMAGE_SIDE = 65_536
MAX_GPUS = 1024
MAX_PATH_CHARS = 4096
"""PATH_MAX on Linux; one path component is at most NAME_MAX = 255 bytes."""


def check_path_like(value: str) -> str:
    """A model name or checkpoint path the OS can look up (no `OSError 36` later)."""
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    for part in value.split("/"):
        if len(part.encode("utf-8", "surrogateescape")) > 255:
            raise ValueError(
                f"a name or path component is {len(part.encode('utf-8', 'surrogateescape'))} "
                "bytes; at most 255 are allowed"
            )
    return value


ModelName = Annotated[
    str,
    Field(min_length=1, max_length=MAX_PATH_CHARS),
    AfterValidator(check_path_like),
]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]

# --------------------------------------------------------------------------- workload shapes


class LengthDistribution(StrictInput):
    """A distribution of token counts (prompt or output length), sampled with a seeded RNG."""

    kind: Literal["fixed", "uniform", "normal", "lognormal"] = Field(
        "fixed",
        description="fixed = always `mean`; uniform = mean ± spread; normal/lognormal "
        "= mean with standard deviation `spread` (lognormal keeps that mean and std).",
    )
    mean: int = Field(128, gt=0, le=MAX_TOKENS, description="Mean length in tokens.")
    spread: float = Field(
        0.0, ge=0, le=MAX_TOKENS, description="Half-width (uniform) or standard deviation."
    )
    min: int = Field(1, ge=1, le=MAX_TOKENS, description="Lower clip in tokens.")
    max: int | None = Field(
        None, gt=0, le=MAX_TOKENS, description="Upper clip in tokens (none = no clip)."
    )

    @model_validator(mode="after")
    def _check_bounds(self) -> LengthDistribution:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self


class PrefixPool(StrictInput):
    """Shared prefixes (system prompts, RAG documents, tool schemas): each prompt is one of
    `count` distinct prefixes followed by a unique suffix of `prompt_tokens` length."""

    count: int = Field(
        1, gt=0, le=MAX_PREFIXES, description="Number of distinct prefixes in the pool."
    )
    tokens: LengthDistribution = Field(
        default_factory=lambda: LengthDistribution(mean=1024),
        description="Prefix length distribution (tokens), drawn once per prefix.",
    )
    pick: Literal["uniform", "weighted"] = Field(
        "uniform", description="How a request picks its prefix: uniform, or by `weights`."
    )
    weights: list[float] | None = Field(
        None, description="pick=weighted: one non-negative weight per prefix (normalised)."
    )

    @model_validator(mode="after")
    def _check_weights(self) -> PrefixPool:
        if self.pick == "weighted":
            if self.weights is None or len(self.weights) != self.count:
                raise ValueError(f"pick=weighted needs {self.count} weights (one per prefix)")
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 with a positive sum")
        elif self.weights is not None:
            raise ValueError("weights need pick=weighted")
        return self


class ConversationSpec(StrictInput):
    """Multi-turn sessions: each turn's prompt is the whole history (earlier prompts and the
    actual outputs) plus a new user message of `user_tokens`; the first turn's prompt is the
    workload's ordinary prompt (prefix + suffix with a prefix pool). The closed loop is per
    conversation: the load pattern's concurrency = conversations in progress at once."""

    turns: LengthDistribution = Field(
        default_factory=lambda: LengthDistribution(mean=4),
        description="Turns per conversation (drawn once per conversation).",
    )
    user_tokens: LengthDistribution = Field(
        default_factory=lambda: LengthDistribution(mean=64),
        description="New user message length of each later turn (tokens).",
    )
    think_time_ms: LengthDistribution | None = Field(
        None,
        description="Pause between a turn's answer and the next turn (ms), outside the "
        "measured request; none = no pause.",
    )


class PromptFile(StrictInput):
    """The user's own prompts: JSONL (`text` or chat `messages` per line) or CSV (a text column);
    tokenised with the model's tokenizer. Requests cycle through the file in order."""

    path: str = Field(description="JSONL or CSV file of prompts.")
    format: Literal["auto", "jsonl", "csv"] = Field(
        "auto", description="File format; auto = by extension (.jsonl/.json or .csv)."
    )
    text_field: str = Field("text", description="Field/column with the prompt text.")
    messages_field: str = Field(
        "messages", description="JSONL field with chat messages [{role, content}, ...]."
    )
    output_tokens_field: str | None = Field(
        "output_tokens",
        description="Field/column with the output length; missing = the workload's "
        "output_tokens distribution.",
    )


class GenerateWorkload(StrictInput):
    """LLM decoding: token-ID prompts of a length distribution, outputs forced to a length.

    Optional traffic shapes: a shared-prefix pool, multi-turn conversations, or the user's own
    prompt file (then prompt_tokens is unused)."""

    kind: Literal["generate"] = "generate"
    prompt_tokens: LengthDistribution = Field(
        default_factory=lambda: LengthDistribution(mean=128),
        description="Prompt length distribution (tokens); with a prefix pool: the unique "
        "suffix after the prefix.",
    )
    output_tokens: LengthDistribution = Field(
        default_factory=lambda: LengthDistribution(mean=128),
        description="Output length distribution (tokens); engines are told to ignore EOS.",
    )
    seed: Seed = Field(0, description="Seed of the prompt/length generator (reproducible runs).")
    prefix: PrefixPool | None = Field(
        None, description="Shared-prefix pool (none = every prompt unrelated)."
    )
    conversation: ConversationSpec | None = Field(
        None, description="Multi-turn conversations (none = single-turn requests)."
    )
    prompt_file: PromptFile | None = Field(
        None, description="The user's own prompts instead of generated ones."
    )

    def mean_prompt_tokens(self) -> int:
        """Mean prompt length with the traffic shape: prompt_tokens (the suffix) + the mean
        prefix, and for conversations the history at the last turn (earlier prompts, outputs
        and user messages), for sizing KV caches and context lengths. A prompt file's lengths
        are only known after tokenising: prompt_tokens stands in for them."""
        tokens = self.prompt_tokens.mean
        if self.prefix is not None:
            tokens += self.prefix.tokens.mean
        if self.conversation is not None:
            later_turns = max(0, self.conversation.turns.mean - 1)
            tokens += later_turns * (self.output_tokens.mean + self.conversation.user_tokens.mean)
        return tokens

    def mean_output_tokens(self) -> float | None:
        """The mean generated length (what the SLO's end-to-end bound is taken for)."""
        return self.output_tokens.mean

    @model_validator(mode="after")
    def _check_shapes(self) -> GenerateWorkload:
        if self.prompt_file is not None and self.prefix is not None:
            raise ValueError("prompt_file and prefix cannot be combined (the file is the prompt)")
        if self.prompt_file is not None and self.conversation is not None:
            raise ValueError("conversations over a prompt file are not supported (yet)")
        return self


class ForwardWorkload(StrictInput):
    """Batched fixed- or variable-shape inference (encoders, CV): one request = one batch."""

    kind: Literal["forward"] = "forward"
    batch_size: int = Field(1, gt=0, le=MAX_BATCH, description="Samples per request (batch).")
    sequence_length: LengthDistribution | None = Field(
        None, description="Text models: sequence length per batch (fixed = fixed shape)."
    )
    image_size: int | None = Field(
        None, gt=0, le=MAX_IMAGE_SIDE, description="CV models: square input side (px)."
    )
    dynamic_shapes: bool = Field(
        False, description="Export/compile with dynamic axes (batch and sequence) instead of fixed."
    )
    seed: Seed = Field(0, description="Seed of the input generator.")

    def mean_output_tokens(self) -> float | None:
        """None: a forward pass generates nothing."""
        return None


Workload = Annotated[GenerateWorkload | ForwardWorkload, Field(discriminator="kind")]


# --------------------------------------------------------------------------- load patterns


@dataclass(frozen=True)
class RehearsalBounds:
    """How far a CPU rehearsal shrinks a GPU plan's load (bench/orchestrate/rehearsal.py sets the
    values)."""

    warmup_requests: int
    request_timeout_s: float
    stage_s: float
    max_concurrency: int
    max_rate_rps: float
    replay_rows: int
    max_prompt_tokens: int
    max_output_tokens: int
    capacity_rps: float


TraceSpan = Callable[["ReplayLoad"], float]
"""Seconds a replayed trace spans (time-scaled); the caller reads the trace file."""


class TimedRow(Protocol):
    """What the config reads of a trace row: its send time, ms after the first row's."""

    @property
    def t_ms(self) -> float: ...


TraceReader = Callable[["ReplayLoad"], Sequence[TimedRow]]
"""Reads a replay's trace file, raising UserError when it is bad (the caller passes
bench.run.traffic_files.read_trace: bench/core reads no files of the run layer)."""


@dataclass(frozen=True)
class CpuReplayClip:
    """How a plan for a machine without a GPU clips a replay (advisor/workload/traffic.py sets the
    values): the trace's first rows, with short prompts and outputs."""

    max_requests: int
    max_input_tokens: int
    max_output_tokens: int


class LoadCommon(StrictInput):
    """Options every load pattern shares: warm-up, time-outs, hard bounds; and what each pattern
    answers about itself, so callers never switch on its name (GuideLLM's `Profile` subclasses)."""

    closed_loop: ClassVar[bool] = False
    """Every measured level keeps a number of requests in flight (concurrency, step)."""
    held_at_capacity: ClassVar[bool] = False
    """Its phases are fractions of a capacity that is given or first measured (steady, pulse)."""
    capacity_search: ClassVar[bool] = False
    """Searches the SLO capacity: needs an SLO and its infeasible probes break it by design."""

    warmup_requests: int = Field(
        2,
        ge=0,
        le=MAX_REQUESTS,
        description="Requests sent and completed before measuring; excluded from metrics.",
    )
    request_timeout_s: float = Field(
        120.0,
        gt=0,
        le=MAX_DURATION_S,
        description="A request taking longer is cancelled and counted as failed.",
    )
    client_processes: int = Field(
        1,
        ge=1,
        le=16,
        description="Client processes that share each open-loop phase: arrival i of the one "
        "Poisson or constant schedule goes to process i mod N, each with its own event loop and "
        "HTTP client; records merge into the run (openai backend only; "
        "bench/run/client_processes.py).",
    )
    max_duration_s: float = Field(
        3600.0, gt=0, le=MAX_DURATION_S, description="Hard bound on the whole run, all phases."
    )

    @property
    def pattern_name(self) -> str:
        return str(self.pattern)  # each subclass's `pattern` Literal field

    def level_label(self) -> str:
        """The level a one-level run is measured at (`c64`, `2 req/s`), else the pattern name."""
        return self.pattern_name

    def fixed_level(self) -> tuple[Literal["concurrency", "rate"], float] | None:
        """(closed or open loop, level) when the whole run is one fixed level, else None."""
        return None

    def describe(self, measured_phases: int) -> str:
        """The load in a few words for a report (`concurrency 64`, `step ladder (5 stages)`)."""
        return f"{self.pattern_name} pattern"

    def plan_words(self, figure: Callable[[float], str] = "{:g}".format) -> str:
        """The load a plan sets, as a sentence part (`64 requests in flight`, `2 req/s`);
        `figure` formats a rate the way the caller formats numbers."""
        return f"{self.pattern_name} pattern"

    def table_level(self) -> float | None:
        """The plan table's editable "load" value (concurrency, rate, capacity); None = none
        (a capacity search has no level to edit)."""
        return None

    def table_duration(self) -> float | None:
        """The plan table's editable "duration (s)" value; None = none (a capacity search's
        length is its probes)."""
        return None

    @classmethod
    def table_update(
        cls, level: float | None, duration: float | None, previous_level: float | None
    ) -> dict[str, Any]:
        """The fields a plan-table row's load and duration set on this pattern
        (`previous_level` = the row's plan level, so an unchanged level keeps the plan's own)."""
        return {}

    def phase_count(self) -> int | None:
        """Number of phases the run plans, when known in advance (for progress bars)."""
        return None

    def warmup_concurrency(self) -> int:
        """How many warm-up requests are in flight together.

        Closed loops (and a step ladder's first level) warm up at up to their own concurrency, so
        a batching engine runs the batch shape it is about to be measured at (its allocator grows
        and its kernels for that batch size are chosen before the clock starts, so the first,
        slower `generate` of a shape is never timed). Open-loop patterns warm up one request at
        a time: they have no concurrency of their own to copy.
        """
        return 1

    def planned_seconds(self, request_s: float, trace_span_s: TraceSpan) -> float:
        """Measured phases plus the drain of requests in flight when each phase ends, for a
        plan's time estimate (`request_s` = one request served alone)."""
        raise NotImplementedError(type(self).__name__)

    def rehearsal(self, bounds: RehearsalBounds) -> LoadPattern:
        """The same pattern shortened for a CPU rehearsal of a GPU plan
        (bench/orchestrate/rehearsal.py)."""
        raise NotImplementedError(type(self).__name__)

    def check_input_files(self, read_trace: TraceReader) -> None:
        """Read the files this load itself sends from (a replay's trace) now, so that a bad one
        is one UserError before anything starts; a pattern without files reads nothing."""

    def on_the_cpu(self, replay_clip: CpuReplayClip) -> Self:
        """This load in a plan for a machine without a GPU: unchanged, except that a replay
        sends only the trace's first rows, clipped (`replay_clip`)."""
        return self

    def _rehearsal_common(self, bounds: RehearsalBounds) -> dict[str, Any]:
        return {
            "warmup_requests": min(self.warmup_requests, bounds.warmup_requests),
            "request_timeout_s": bounds.request_timeout_s,
        }


class ConcurrencyLoad(LoadCommon):
    """Closed loop: keep N requests in flight for a duration or a number of requests."""

    closed_loop: ClassVar[bool] = True

    pattern: Literal["concurrency"] = "concurrency"
    concurrency: int = Field(
        1, gt=0, le=MAX_CONCURRENCY, description="Requests in flight at all times."
    )
    duration_s: float | None = Field(
        30.0, gt=0, le=MAX_DURATION_S, description="Measured phase length (s)."
    )
    max_requests: int | None = Field(
        None, gt=0, le=MAX_REQUESTS, description="Stop after this many requests."
    )
    min_requests: int | None = Field(
        None,
        gt=0,
        le=MAX_REQUESTS,
        description="Keep sending past duration_s until this many requests were sent (a run "
        "sized to reach its validity minimum; max_duration_s still bounds it).",
    )

    def level_label(self) -> str:
        return f"c{self.concurrency}"

    def describe(self, measured_phases: int) -> str:
        return f"concurrency {self.concurrency}"

    def plan_words(self, figure: Callable[[float], str] = "{:g}".format) -> str:
        return f"{self.concurrency} requests in flight"

    def fixed_level(self) -> tuple[Literal["concurrency", "rate"], float] | None:
        return "concurrency", float(self.concurrency)

    def table_level(self) -> float | None:
        return float(self.concurrency)

    def table_duration(self) -> float | None:
        return self.duration_s

    @classmethod
    def table_update(
        cls, level: float | None, duration: float | None, previous_level: float | None
    ) -> dict[str, Any]:
        return {"concurrency": int(level or 1), "duration_s": duration}

    def phase_count(self) -> int | None:
        return 1

    def warmup_concurrency(self) -> int:
        return min(max(1, self.warmup_requests), self.concurrency)

    def planned_seconds(self, request_s: float, trace_span_s: TraceSpan) -> float:
        waves = math.ceil((self.max_requests or self.min_requests or 1) / self.concurrency)
        if self.duration_s is None:
            return waves * request_s
        if self.min_requests is not None:  # on past the window until that many were sent
            return max(self.duration_s, (waves - 1) * request_s) + request_s
        return self.duration_s + request_s

    def rehearsal(self, bounds: RehearsalBounds) -> LoadPattern:
        return ConcurrencyLoad(
            concurrency=min(self.concurrency, bounds.max_concurrency),
            duration_s=bounds.stage_s,
            **self._rehearsal_common(bounds),
        )


class RateLoad(LoadCommon):
    """Open loop: requests sent at a rate (Poisson or constant arrivals, seeded)."""

    pattern: Literal["rate"] = "rate"
    rate_rps: float = Field(
        1.0, gt=0, le=MAX_RATE_RPS, description="Mean arrival rate (requests/s)."
    )
    arrival: Literal["poisson", "constant"] = Field("poisson", description="Inter-arrival law.")
    seed: Seed = Field(0, description="Seed of the arrival process.")
    duration_s: float | None = Field(
        30.0, gt=0, le=MAX_DURATION_S, description="Measured phase length (s)."
    )
    max_requests: int | None = Field(
        None, gt=0, le=MAX_REQUESTS, description="Stop after this many requests."
    )
    max_concurrency: int | None = Field(
        None,
        gt=0,
        le=MAX_CONCURRENCY,
        description="Client-side cap on requests in flight (none = unbounded).",
    )

    def level_label(self) -> str:
        return f"{self.rate_rps:g} req/s"

    def describe(self, measured_phases: int) -> str:
        return f"{self.rate_rps} req/s"

    def plan_words(self, figure: Callable[[float], str] = "{:g}".format) -> str:
        return f"{figure(self.rate_rps)} req/s"

    def fixed_level(self) -> tuple[Literal["concurrency", "rate"], float] | None:
        return "rate", float(self.rate_rps)

    def table_level(self) -> float | None:
        return self.rate_rps

    def table_duration(self) -> float | None:
        return self.duration_s

    @classmethod
    def table_update(
        cls, level: float | None, duration: float | None, previous_level: float | None
    ) -> dict[str, Any]:
        return {"rate_rps": level or 1.0, "duration_s": duration}

    def phase_count(self) -> int | None:
        return 1

    def planned_seconds(self, request_s: float, trace_span_s: TraceSpan) -> float:
        if self.duration_s is not None:
            return self.duration_s + request_s
        return (self.max_requests or 1) * request_s  # one level of one request in flight

    def rehearsal(self, bounds: RehearsalBounds) -> LoadPattern:
        return RateLoad(
            rate_rps=min(self.rate_rps, bounds.max_rate_rps),
            arrival=self.arrival,
            seed=self.seed,
            duration_s=bounds.stage_s,
            max_concurrency=bounds.max_concurrency,
            **self._rehearsal_common(bounds),
        )


class StepLoad(LoadCommon):
    """The article's step load (3.3): concurrency start/step/max, each stage timed, knee found."""

    pattern: Literal["step"] = "step"
    start: int = Field(10, gt=0, le=MAX_CONCURRENCY, description="First stage's concurrency.")
    step: int = Field(
        10, gt=0, le=MAX_CONCURRENCY, description="Concurrency added per stage (article: 10)."
    )
    max: int = Field(100, gt=0, le=MAX_CONCURRENCY, description="Last stage's concurrency at most.")
    levels: list[Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)]] | None = Field(
        None,
        description="Explicit concurrency per stage (e.g. [1, 16, 64, 256]); overrides "
        "start/step/max.",
    )
    stage_duration_s: float = Field(
        30.0, gt=0, le=MAX_DURATION_S, description="Length of each stage (s)."
    )
    min_gain: float = Field(
        0.05,
        ge=0,
        le=100,
        description="Knee = first stage whose throughput gain is under this fraction.",
    )
    stop_at_knee: bool = Field(True, description="Stop climbing once the knee is found.")

    closed_loop: ClassVar[bool] = True

    def concurrencies(self) -> list[int]:
        """The ladder's concurrency per stage: `levels`, else start, start+step, ... <= max."""
        if self.levels:  # an explicit ladder, e.g. [1, 16, 64, 256]
            return list(self.levels)
        return list(range(self.start, self.max + 1, self.step)) or [self.start]

    def table_level(self) -> float | None:
        return float(max(self.levels) if self.levels else self.max)

    def describe(self, measured_phases: int) -> str:
        return f"step ladder ({measured_phases} stages)"

    def table_duration(self) -> float | None:
        return self.stage_duration_s

    @classmethod
    def table_update(
        cls, level: float | None, duration: float | None, previous_level: float | None
    ) -> dict[str, Any]:
        update: dict[str, Any] = {}
        if level is not None and level != previous_level:
            update.update(max=int(level), levels=None)
        if duration:
            update["stage_duration_s"] = duration
        return update

    def phase_count(self) -> int | None:
        return None if self.stop_at_knee else len(self.concurrencies())

    def warmup_concurrency(self) -> int:
        return min(max(1, self.warmup_requests), self.concurrencies()[0])

    def planned_seconds(self, request_s: float, trace_span_s: TraceSpan) -> float:
        return len(self.concurrencies()) * (self.stage_duration_s + request_s)

    def rehearsal(self, bounds: RehearsalBounds) -> LoadPattern:
        capped = sorted({min(level, bounds.max_concurrency) for level in self.concurrencies()})
        return StepLoad(
            levels=capped,
            stage_duration_s=bounds.stage_s,
            stop_at_knee=False,
            **self._rehearsal_common(bounds),
        )


CAPACITY_LADDER = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""Concurrencies of the short ladder that finds capacity for steady/pulse when none is given:
doubling (not +10) so a few stages span one to hundreds of requests in flight."""
CAPACITY_STAGE_S = 10.0
"""Length of each stage of that ladder (s); same knee rule as `step` with min_gain 5%."""
CAPACITY_MIN_GAIN = 0.05


class HeldLoad(LoadCommon):
    """A pattern whose rates are fractions of a capacity, given or measured first (steady,
    pulse). Each subclass declares `capacity_rps` itself, so its fields keep their order."""

    held_at_capacity: ClassVar[bool] = True
    if TYPE_CHECKING:
        capacity_rps: float | None

    def table_level(self) -> float | None:
        return self.capacity_rps

    def _capacity_ladder_s(self, request_s: float) -> float:
        if self.capacity_rps is not None:
            return 0.0
        return len(CAPACITY_LADDER) * (CAPACITY_STAGE_S + request_s)

    def rehearsal(self, bounds: RehearsalBounds) -> LoadPattern:
        # The same phases, each one stage long, around a CPU-sized capacity (the capacity
        # search a GPU plan may ask for is skipped: its ladder alone would take minutes).
        phases = ("duration_s", "baseline_s", "burst_s", "recovery_s", "window_s")
        return self.model_copy(  # type: ignore[return-value]  # a SteadyLoad or PulseLoad
            update={
                **self._rehearsal_common(bounds),
                "capacity_rps": bounds.capacity_rps,
                **{name: bounds.stage_s for name in phases if name in type(self).model_fields},
            }
        )


class SteadyLoad(HeldLoad):
    """Section 3.3 soak: hold a fraction of capacity for a duration; detect leaks and drift."""

    pattern: Literal["steady"] = "steady"
    fraction: float = Field(0.8, gt=0, le=2, description="Fraction of capacity to hold.")
    capacity_rps: float | None = Field(
        None,
        gt=0,
        le=MAX_RATE_RPS,
        description="Capacity in requests/s; none = find it first with a step ladder.",
    )
    duration_s: float = Field(
        1800.0, gt=0, le=MAX_DURATION_S, description="Soak length (article: 30 min)."
    )
    window_s: float = Field(
        60.0, gt=0, le=MAX_DURATION_S, description="Window for the per-window slope fits."
    )

    def table_duration(self) -> float | None:
        return self.duration_s

    @classmethod
    def table_update(
        cls, level: float | None, duration: float | None, previous_level: float | None
    ) -> dict[str, Any]:
        return {"capacity_rps": level, **({"duration_s": duration} if duration else {})}

    def describe(self, measured_phases: int) -> str:
        return f"steady {self.fraction}x capacity"

    def phase_count(self) -> int | None:
        return 1 if self.capacity_rps is not None else None

    def planned_seconds(self, request_s: float, trace_span_s: TraceSpan) -> float:
        return self._capacity_ladder_s(request_s) + self.duration_s + request_s


class PulseLoad(HeldLoad):
    """Section 3.3 burst: baseline, then a multiple of capacity, then baseline; measure recovery."""

    pattern: Literal["pulse"] = "pulse"
    capacity_rps: float | None = Field(
        None,
        gt=0,
        le=MAX_RATE_RPS,
        description="Capacity in requests/s; none = find it first with a step ladder.",
    )
    baseline_fraction: float = Field(
        0.5, gt=0, le=100, description="Baseline rate as capacity fraction."
    )
    burst_factor: float = Field(
        2.0, gt=0, le=100, description="Burst rate as capacity multiple (article: 2x)."
    )
    baseline_s: float = Field(
        30.0, gt=0, le=MAX_DURATION_S, description="Baseline length before the burst (s)."
    )
    burst_s: float = Field(10.0, gt=0, le=MAX_DURATION_S, description="Burst length (s).")
    recovery_s: float = Field(
        60.0, gt=0, le=MAX_DURATION_S, description="Baseline length after the burst (s)."
    )
    window_s: float = Field(
        2.0, gt=0, le=MAX_DURATION_S, description="Window for p99 tracking during recovery."
    )

    def table_duration(self) -> float | None:
        return self.baseline_s

    def describe(self, measured_phases: int) -> str:
        return f"pulse {self.burst_factor}x capacity"

    @classmethod
    def table_update(
        cls, level: float | None, duration: float | None, previous_level: float | None
    ) -> dict[str, Any]:
        return {"capacity_rps": level, **({"baseline_s": duration} if duration else {})}

    def phase_count(self) -> int | None:
        return 3 if self.capacity_rps is not None else None

    def planned_seconds(self, request_s: float, trace_span_s: TraceSpan) -> float:
        held = self.baseline_s + self.burst_s + self.recovery_s
        return self._capacity_ladder_s(request_s) + held + request_s


class ReplayLoad(LoadCommon):
    """Trace replay: each request is sent at its trace timestamp (scaled) with the trace's input
    and output lengths. Mooncake JSONL (`timestamp` ms, `input_length`, `output_length`,
    `hash_ids`: equal IDs = equal prompt blocks of `block_size` tokens, so prefix reuse is
    reproduced) or CSV with named columns (default: the Azure LLM inference trace layout).
    Open loop, no coordinated omission: each send's lateness is recorded, and the run is
    INVALID when the p99 lateness exceeds `max_lateness_ms` (the generator fell behind)."""

    pattern: Literal["replay"] = "replay"
    trace: str = Field(description="Trace file (Mooncake .jsonl or .csv).")
    format: Literal["auto", "mooncake", "csv"] = Field(
        "auto", description="Trace format; auto = mooncake for .jsonl/.json, csv for .csv."
    )
    time_scale: float = Field(
        1.0,
        gt=0,
        le=MAX_TIME_SCALE,
        description="Multiply trace time by this (0.5 = twice as fast).",
    )
    max_requests: int | None = Field(None, gt=0, description="Replay at most this many rows.")
    block_size: int = Field(
        512, gt=0, le=MAX_BLOCK_SIZE, description="Mooncake hash_ids block size (tokens)."
    )
    timestamp_column: str = Field("TIMESTAMP", description="CSV: send-time column.")
    timestamp_unit: Literal["auto", "s", "ms", "datetime"] = Field(
        "auto",
        description="CSV timestamp unit; auto = datetime text if not numeric, else seconds.",
    )
    input_column: str = Field("ContextTokens", description="CSV: input-token column.")
    output_column: str = Field("GeneratedTokens", description="CSV: output-token column.")
    max_lateness_ms: float = Field(
        10.0,
        gt=0,
        description="p99 send lateness (actual - scheduled) above this makes the run INVALID.",
    )
    seed: Seed = Field(0, description="Seed of the prompt token IDs (blocks / unique prompts).")
    max_input_tokens: int | None = Field(
        None,
        gt=0,
        le=MAX_TOKENS,
        description="Clip each row's input length (a shorter context, rehearsals).",
    )
    max_output_tokens: int | None = Field(
        None, gt=0, le=MAX_TOKENS, description="Clip each row's output length (rehearsals)."
    )

    def planned_seconds(self, request_s: float, trace_span_s: TraceSpan) -> float:
        return trace_span_s(self) + request_s  # the trace's span, then the last request's drain

    def check_input_files(self, read_trace: TraceReader) -> None:
        rows = read_trace(self)
        span_s = rows[-1].t_ms * self.time_scale / 1000.0 if rows else 0.0
        # The bound is the week no run may outlast, not this run's max_duration_s: a replay cut
        # short by its own bound runs and is INVALID naming the rows it left unsent (a plan
        # estimates that run); one whose schedule no run could ever reach is refused here.
        if not math.isfinite(span_s) or span_s > MAX_DURATION_S:
            raise UserError(
                f"trace {self.trace}: its {len(rows):,} rows span {span_s:.4g} s at time_scale "
                f"{self.time_scale:g}, past the longest run allowed ({MAX_DURATION_S:g} s); "
                "lower load.time_scale or replay the first rows (load.max_requests)"
            )

    def on_the_cpu(self, replay_clip: CpuReplayClip) -> Self:
        return self.model_copy(update=asdict(replay_clip))

    def rehearsal(self, bounds: RehearsalBounds) -> LoadPattern:
        # The trace's first rows, on its own schedule, with short prompts and outputs.
        return self.model_copy(
            update={
                **self._rehearsal_common(bounds),
                "max_requests": min(self.max_requests or bounds.replay_rows, bounds.replay_rows),
                "max_input_tokens": bounds.max_prompt_tokens,
                "max_output_tokens": bounds.max_output_tokens,
            }
        )


SloPercentile = Literal["p50", "p90", "p99"]
"""The latency percentiles an SLO can be judged at."""
PERCENTILE_LEVELS = {"p50": 0.50, "p90": 0.90, "p99": 0.99}
TAIL_SAMPLES = 5
"""A probe holds enough requests that at least this many lie beyond its percentile, and that
the attainment target allows at least this many misses (below that, one request decides)."""
MIN_PROBE_REQUESTS_FLOOR = 20
SERIAL_PROBE_REQUESTS = 8
"""Requests of the quick closed-loop (concurrency 1) probe that sets the first rate."""


def min_probe_requests(percentile: str, attainment_target: float) -> int:
    """Requests per probe: ceil(TAIL_SAMPLES / (1 - q)) for percentile q, and as many for
    the attainment target (ceil(TAIL_SAMPLES / (1 - target)) when target < 1), at least 20.

    p99 with target 0.99 -> 500; p90 with target 0.9 -> 50; p50 with target 0.5 -> 20.
    """
    quantile = PERCENTILE_LEVELS[percentile]
    needed = math.ceil(TAIL_SAMPLES / (1 - quantile) - 1e-9)
    if attainment_target < 1:
        needed = max(needed, math.ceil(TAIL_SAMPLES / (1 - attainment_target) - 1e-9))
    return max(MIN_PROBE_REQUESTS_FLOOR, needed)


class CapacityLoad(LoadCommon):
    """SLO capacity search: the highest open-loop rate (or concurrency) at which the SLO holds.

    Algorithm and report: bench/run/load/capacity.py. Needs an SLO (slo.ttft_ms, tpot_ms or e2e_ms).
    """

    pattern: Literal["capacity"] = "capacity"
    over: Literal["rate", "concurrency"] = Field(
        "rate",
        description="Search the open-loop arrival rate (requests/s) or, for closed-loop users, "
        "the concurrency (requests in flight).",
    )
    arrival: Literal["poisson", "constant"] = Field(
        "poisson", description="Inter-arrival law of the rate probes."
    )
    seed: Seed = Field(0, description="Seed of the arrival process (each probe adds its index).")
    percentile: SloPercentile = Field(
        "p99",
        description="Percentile of each SLO metric that must be within its limit: the run's "
        "slo.percentile (RunConfig keeps the two equal; give it in either, or both alike).",
    )
    attainment_target: float = Field(
        0.99,
        gt=0,
        le=1,
        description="Share of a probe's requests that must meet every SLO (goodput attainment).",
    )
    precision: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="Stop bisecting when (first infeasible - last feasible) / first infeasible "
        "is at most this.",
    )
    growth_factor: float = Field(
        2.0, gt=1, le=16, description="Bracketing: each level is the previous one times this."
    )
    probe_requests: int | None = Field(
        None,
        gt=0,
        le=MAX_PROBE_REQUESTS,
        description="Requests per probe; none = derived from the percentile and the attainment "
        "target (bench.run.load.capacity.min_probe_requests).",
    )
    start_rps: float | None = Field(
        None,
        gt=0,
        le=MAX_RATE_RPS,
        description="First rate probed; none = the rate of a quick closed-loop probe.",
    )
    start_concurrency: int = Field(
        1, gt=0, le=MAX_CONCURRENCY, description="First concurrency probed (over=concurrency)."
    )
    max_rps: float = Field(
        MAX_RATE_RPS, gt=0, le=MAX_RATE_RPS, description="Bracketing ceiling for the rate."
    )
    max_concurrency: int = Field(
        4096, gt=0, le=MAX_CONCURRENCY, description="Bracketing ceiling for concurrency."
    )
    max_probes: int = Field(
        24, ge=3, le=200, description="Probes at most; a search that needs more did not converge."
    )
    recheck_boundary: bool = Field(
        True, description="Probe the last feasible level again (new seed) before accepting it."
    )
    end_early: bool = Field(
        True,
        description="End a probe as soon as it cannot pass any more (more requests have missed "
        "the SLO than the attainment target allows).",
    )
    confirm_boundary: bool = Field(
        True,
        description="Repeat (new seed) a failed probe whose verdict would set the boundary (a "
        "failure above a passing level, a failed re-check) and decide on both probes' requests.",
    )
    settle_s: Annotated[float, Field(ge=0, le=MAX_DURATION_S)] | Literal["slo"] | None = Field(
        "slo",
        description="over=rate: seconds of arrivals at the probe's rate before its judged "
        "requests (served, not judged), so that the requests in flight have levelled off "
        "before the probe is judged; slo = the end-to-end time the SLO allows (E2E limit, or "
        "TTFT limit + (mean output - 1) x TPOT limit); none = judge from the first request "
        "(a probe on an empty engine passes rates it cannot hold).",
    )

    capacity_search: ClassVar[bool] = True

    def describe(self, measured_phases: int) -> str:
        return f"SLO capacity search over {self.over}"

    def planned_seconds(self, request_s: float, trace_span_s: TraceSpan) -> float:
        """A planning estimate of a search's length: the serial probe, then the probes a 5%
        search typically needs (4 to bracket, log2(1 / precision) to bisect, 1 re-check; at
        most max_probes), each of its probe requests served one after another (`request_s`
        each). An engine that batches is faster; early-ended probes are shorter."""
        requests = self.probe_requests or min_probe_requests(
            self.percentile, self.attainment_target
        )
        serial = SERIAL_PROBE_REQUESTS if self.over == "rate" and self.start_rps is None else 0
        return (serial + self.planned_probes() * requests) * request_s

    def planned_probes(self) -> int:
        """The judged probes a search typically needs (see `planned_seconds`)."""
        return min(self.max_probes, 4 + math.ceil(math.log2(1 / self.precision)) + 1)

    @property
    def probes_settled(self) -> bool:
        """Each judged probe holds its level before it is judged: a rate probe after its
        `settle_s`, a concurrency probe always (a closed loop holds its level from the first
        request). A search without it passes rates it cannot sustain."""
        return self.over == "concurrency" or self.settle_s is not None

    def settle_for(self, slo: SLO, output_tokens: float | None) -> tuple[float | None, str]:
        """(Seconds each judged rate probe settles first, the rule in words): `settle_s`, or
        for `slo` the end-to-end time the SLO allows (`SLO.e2e_bound_ms`) for the workload's
        mean output; None where nothing settles (a concurrency search, `settle_s: null`, an SLO
        that bounds no end-to-end time)."""
        if self.over != "rate" or self.settle_s is None:
            return None, "none: each probe is judged from its first request"
        if self.settle_s != "slo":
            return float(self.settle_s), f"{self.settle_s:g} s (given)"
        bound, how = slo.e2e_bound_ms(output_tokens)
        if bound is None:
            return None, (
                "none: the SLO bounds no end-to-end time to settle by (set settle_s, or an E2E "
                "limit, or TTFT and TPOT limits on a generation)"
            )
        return bound / 1000, f"{bound / 1000:,.1f} s, the end-to-end time the SLO allows: {how}"

    def rehearsal(self, bounds: RehearsalBounds) -> LoadPattern:
        # The same search, coarse: 10 requests a probe, 25% precision, 6 probes at most, 1 s
        # of settling, concurrency capped (a search of 500-request probes would take the CPU
        # for hours).
        return self.model_copy(
            update={
                **self._rehearsal_common(bounds),
                "probe_requests": 10,
                "precision": 0.25,
                "max_probes": 6,
                # the settle path runs, briefly (the plan's SLO-long settle would dominate)
                "settle_s": None if self.settle_s is None else 1.0,
                "max_concurrency": min(self.max_concurrency, bounds.max_concurrency),
            }
        )


LoadPattern = Annotated[
    ConcurrencyLoad | RateLoad | StepLoad | SteadyLoad | PulseLoad | CapacityLoad | ReplayLoad,
    Field(discriminator="pattern"),
]
"""Every load pattern: the one registration of a pattern's config class. The names below, the
`--pattern` help (bench/cli.py), the web form's choices and the accepted `load.pattern` values
are all read from this union; its phase plan is registered beside it (`@planner`,
bench/run/load/patterns.py), checked by tests/bench/test_load_config.py."""
LOAD_CLASSES: dict[str, type[LoadCommon]] = {
    str(cls.model_fields["pattern"].default): cls for cls in get_args(get_args(LoadPattern)[0])
}
"""Each pattern's config class by its name (the `pattern` discriminator), in union order."""
PATTERN_NAMES: tuple[str, ...] = tuple(LOAD_CLASSES)
"""The pattern names, in union order (the web form's choices)."""


# --------------------------------------------------------------------------- SLOs and validity


class SLO(StrictInput):
    """Service-level objectives; a request meets them when every one set is met (goodput).

    `percentile` is the one a run's latency limits are judged at where a pattern judges a
    distribution against them: the step ladder's knee, the capacity search's probes, the
    advisor's evidence. Stored runs from before it was a field read as p99 (what the ladder
    judged at then), or as their capacity search's `load.percentile`."""

    ttft_ms: float | None = Field(
        None, gt=0, le=MAX_SLO_MS, description="Time to first token at most (ms)."
    )
    tpot_ms: float | None = Field(
        None, gt=0, le=MAX_SLO_MS, description="Time per output token at most (ms)."
    )
    e2e_ms: float | None = Field(
        None, gt=0, le=MAX_SLO_MS, description="End-to-end latency at most (ms)."
    )
    percentile: SloPercentile = Field(
        "p99",
        description="Latency percentile that must meet ttft_ms/tpot_ms/e2e_ms (article: P99).",
    )

    def is_set(self) -> bool:
        return any(v is not None for v in (self.ttft_ms, self.tpot_ms, self.e2e_ms))

    def e2e_bound_ms(self, output_tokens: float | None) -> tuple[float | None, str]:
        """(The end-to-end latency a request may take and still meet the SLO, how it follows),
        None where the SLO bounds no E2E: the E2E limit when set, else TTFT limit + (output
        tokens - 1) x TPOT limit for a generation of `output_tokens`."""
        if self.e2e_ms is not None:
            return self.e2e_ms, f"the E2E limit ({self.percentile} E2E <= {self.e2e_ms:g} ms)"
        if output_tokens is not None and self.ttft_ms is not None and self.tpot_ms is not None:
            steps = max(output_tokens - 1, 0)
            bound = self.ttft_ms + steps * self.tpot_ms
            return bound, (
                f"TTFT limit + (output - 1) x TPOT limit = {self.ttft_ms:g} + {steps:g} "
                f"x {self.tpot_ms:g} = {bound:,.0f} ms at {self.percentile}"
            )
        return None, ""


class ValidityRules(StrictInput):
    """When a run counts: a run breaking any rule is INVALID, with the reasons listed."""

    min_duration_s: float = Field(
        10.0, ge=0, le=MAX_DURATION_S, description="Measured window at least (s)."
    )
    min_requests: int = Field(
        20, ge=0, le=MAX_REQUESTS, description="Completed measured requests at least."
    )
    max_error_rate: float = Field(0.01, ge=0, le=1, description="Failed fraction at most.")


class PrecisionConfig(StrictInput):
    """One precision semantics per comparison, stated in every result and evidence row.

    `quantization: fp8` is vLLM's dynamic FP8 weight quantisation (weights cast to FP8 at load
    time with per-tensor scales, no calibration data); `kv_cache_dtype: fp8` stores the KV cache
    in FP8. On random-weight checkpoints both measure speed and memory only: whether FP8 keeps a
    real model's accuracy is for the user to check on their own checkpoint and evaluation set.

    For forward (encoder, vision) runs of the `pytorch` backend, `quantization: int8` or `fp8`
    is W8A8 of every Linear layer: weights 8-bit per output channel, activations per token at
    run time (bench/engines/w8a8.py on a GPU; torch's dynamic INT8 on the CPU), the rest at
    `dtype`. `bench quality` measures what either costs a real model's accuracy.
    """

    dtype: Literal["float16", "bfloat16", "float32"] = Field(
        "bfloat16", description="Weights and activations dtype."
    )
    allow_tf32: bool = Field(
        False, description="Allow TF32 matmuls for float32 (ONNX Runtime CUDA allows by default)."
    )
    quantization: Literal["fp8", "int8"] | None = Field(
        None,
        description="Weight quantisation: fp8 = vLLM's dynamic FP8 weights (no calibration), "
        "or W8A8 FP8 for pytorch forward runs; int8 = W8A8 INT8 (pytorch forward runs only); "
        "none = weights at `dtype`.",
    )
    kv_cache_dtype: Literal["auto", "fp8"] = Field(
        "auto", description="KV-cache dtype: auto = the model dtype; fp8 = FP8 KV cache (vLLM)."
    )

    @property
    def uses_fp8(self) -> bool:
        return self.quantization == "fp8" or self.kv_cache_dtype == "fp8"

    def label(self) -> str:
        """Short text for tables: `bfloat16`, `bfloat16 + fp8 weights + fp8 KV`."""
        parts = [self.dtype]
        if self.quantization:
            parts.append(f"{self.quantization} weights")
        if self.kv_cache_dtype != "auto":
            parts.append(f"{self.kv_cache_dtype} KV")
        return " + ".join(parts)


Precision = PrecisionConfig
"""The name this model had before precision became a run axis (kept so old imports work)."""

CPU_HALF_DTYPE = "bfloat16"
"""The one half-precision dtype of CPU runs, in the advisor's plans as in `bench run` (whose
default is bfloat16): CPUs have bfloat16 matmul kernels (AVX-512 BF16, AMX) in PyTorch and vLLM,
while float16 on a CPU is slow or unsupported - vLLM's CPU backend casts float16 to bfloat16
itself, so a "float16" CPU run would be labelled with a dtype it never ran at."""
CPU_FORWARD_DTYPE = "float32"
"""Forward (encoder/CV) CPU runs: float32, the one dtype every forward backend runs on the CPU
(ONNX Runtime's CPU provider refuses bfloat16 and has few float16 kernels), so one comparison
keeps one precision for every framework."""


def cpu_dtype(kind: str, dtype: str) -> str:
    """The dtype a CPU run of this kind uses when `dtype` was planned (float32 stays float32)."""
    if dtype == "float32":
        return dtype
    return CPU_HALF_DTYPE if kind == "generate" else CPU_FORWARD_DTYPE


FP8_RANDOM_WEIGHTS_NOTE = (
    "FP8 on random weights measures speed and memory only: accuracy is not measured; check it "
    "on the real checkpoint (e.g. the same evaluation set through bf16 and FP8, compare scores)"
)


class ParallelismConfig(StrictInput):
    """How many GPUs a run uses and how: engines split over GPUs, and engines side by side.

    `tensor_parallel_size` GPUs serve one engine (tensor parallelism, inside the framework);
    `replicas` independent engine workers, each on its own `tensor_parallel_size` GPUs, are
    driven by one load generator (least outstanding requests first). A run needs
    `gpus_needed = tensor_parallel_size * replicas` GPUs; `bench.run.placement` checks that against
    the GPUs visible here before anything starts. On CPU, replicas are processes.
    """

    tensor_parallel_size: int = Field(
        1,
        ge=1,
        le=MAX_GPUS,
        description="GPUs per engine (tensor parallelism inside the framework).",
    )
    replicas: int = Field(
        1,
        ge=1,
        le=MAX_GPUS,
        description="Independent engine workers, each on its own GPUs, one load generator.",
    )
    gpu_ids: list[int] | None = Field(
        None,
        description="GPUs the run uses, as indices of the GPUs visible here (CUDA order, "
        "CUDA_VISIBLE_DEVICES applied); exactly tensor_parallel_size x replicas of them. "
        "None = the first that many visible GPUs.",
    )

    @property
    def gpus_needed(self) -> int:
        return self.tensor_parallel_size * self.replicas

    @model_validator(mode="after")
    def _check_gpu_ids(self) -> ParallelismConfig:
        if self.gpu_ids is None:
            return self
        if any(index < 0 for index in self.gpu_ids):
            raise ValueError(f"gpu_ids must be >= 0, got {self.gpu_ids}")
        if len(set(self.gpu_ids)) != len(self.gpu_ids):
            raise ValueError(f"gpu_ids lists a GPU twice: {self.gpu_ids}")
        if len(self.gpu_ids) != self.gpus_needed:
            raise ValueError(
                f"gpu_ids has {len(self.gpu_ids)} GPU(s) but tensor_parallel_size "
                f"{self.tensor_parallel_size} x replicas {self.replicas} needs {self.gpus_needed}"
            )
        return self

    def label(self) -> str:
        """Short text for tables: `TP=1`, `TP=2`, `2 x TP=1`."""
        text = f"TP={self.tensor_parallel_size}"
        return f"{self.replicas} x {text}" if self.replicas > 1 else text


class RepeatPolicy(StrictInput):
    """How many times to run one config as a measurement group (bench/orchestrate/repeats.py), the
    pause between repeats, and optional convergence stopping (AIPerf's `--convergence-*` model):
    stop once the 95% interval of `convergence_metric` is narrower than `convergence_width`
    (relative to its median), after at least `min_repeats` and at most `count`."""

    count: int = Field(1, ge=1, le=100, description="Repeats of the same config (at most).")
    cooldown_s: float = Field(
        0.0, ge=0, le=3600, description="Pause before each repeat after the first (s)."
    )
    convergence_metric: str | None = Field(
        None,
        description="Stop early when this metric's interval is narrow enough, e.g. "
        "output_throughput_tok_s or ttft_ms_p50 (none = always run `count`).",
    )
    convergence_width: float = Field(
        0.05, gt=0, le=10, description="Convergence: (high - low) / median at most."
    )
    min_repeats: int = Field(
        3, ge=2, le=100, description="Convergence: repeats before it may stop."
    )

    @model_validator(mode="before")
    @classmethod
    def _from_count(cls, data: Any) -> Any:
        """`repeats: 3` in a plan means RepeatPolicy(count=3)."""
        if isinstance(data, int) and not isinstance(data, bool):
            return {"count": data}
        return data


# --------------------------------------------------------------------------- axes said once
# Parallelism, precision and prefix caching are run settings (RunConfig.parallelism / .precision
# / .prefix_caching): the backends get them typed and map them to their framework's own
# arguments. An engine argument that says one of them again is refused here, at config time, so
# a run never carries two values for one setting.

RESTATED_AXES: dict[str, str] = {
    "tensor_parallel_size": "parallelism.tensor_parallel_size",
    "tp_size": "parallelism.tensor_parallel_size",
    "pipeline_parallel_size": "parallelism (pipeline parallelism is not a run axis here: "
    "tensor_parallel_size x replicas GPUs)",
    "pp_size": "parallelism (pipeline parallelism is not a run axis here: "
    "tensor_parallel_size x replicas GPUs)",
    "dtype": "precision.dtype",
    "torch_dtype": "precision.dtype",
    "enable_prefix_caching": "prefix_caching",
    "enable_block_reuse": "prefix_caching",
}
"""Engine-argument names (any backend, any framework's spelling) -> the run axis that says it
(vLLM's `enable_prefix_caching` and TensorRT-LLM's `enable_block_reuse` are prefix caching)."""

PREFIX_CACHING_ARGS: dict[str, str] = {
    "vllm": "enable_prefix_caching",
    "tensorrt_llm": "enable_block_reuse",
}
"""Backend -> the engine argument its prefix caching was given as before it was a run setting
(an openai backend's launched vLLM server took vLLM's, in `server_args`)."""

RESTATED_PRECISION_VALUES: dict[str, tuple[str, ...]] = {
    "quantization": ("fp8",),
    "kv_cache_dtype": ("fp8", "auto"),
}
"""Engine arguments that restate precision only at these values (vLLM's `quantization: awq`
names a checkpoint's format, not a run axis, and stays an engine argument)."""

NESTED_ENGINE_ARGS = ("server_args",)
"""Engine arguments that hold a launched server's own arguments (the openai backend)."""


def restated_axis(engine_args: dict[str, Any], prefix: str = "engine_args") -> str | None:
    """One line naming the first engine argument (as the user wrote it) that restates the
    run's parallelism, precision or prefix caching, and where to say it instead; None when none
    does."""
    for name, value in engine_args.items():
        where = f"{prefix}.{name}"
        if RESTATED_AXES.get(name) == "prefix_caching":
            setting = json.dumps(value) if isinstance(value, bool) else "true or false"
            return (
                f"{where} restates the run's prefix caching: give it once, as the run setting "
                f"`prefix_caching: {setting}`"
            )
        if name in RESTATED_AXES:
            return f"{where} restates the run's {RESTATED_AXES[name]}: give it once, there"
        if name in RESTATED_PRECISION_VALUES and value in RESTATED_PRECISION_VALUES[name]:
            return f"{where}={value!r} restates the run's precision.{name}: give it once, there"
        if name in NESTED_ENGINE_ARGS and isinstance(value, dict):
            nested = restated_axis(value, where)
            if nested is not None:
                return nested
    return None


def capacity_before_settle(config: Any) -> Any:
    """A stored run config (a dict) from before capacity probes settled (`settle_s`): its
    capacity load says `settle_s: null`, judged from each probe's first request as it was,
    instead of taking today's default. For reading stored results and campaigns only."""
    load = config.get("load") if isinstance(config, dict) else None
    if isinstance(load, dict) and load.get("pattern") == "capacity" and "settle_s" not in load:
        return {**config, "load": {**load, "settle_s": None}}
    return config


def stored_config(data: Any) -> Any:
    """A stored run config (a dict) from an earlier version, read as it ran: its axes moved out
    of the engine args (`legacy_axes_moved`) and a capacity search from before settled probes
    judged from each probe's first request (`capacity_before_settle`). For stored results,
    jobs' records and campaign records only."""
    return capacity_before_settle(legacy_axes_moved(data))


def legacy_axes_moved(data: Any, backend: str | None = None) -> Any:
    """A stored config (a dict) from before parallelism, precision and prefix caching were said
    once: its engine args' `tensor_parallel_size` moves to `parallelism`; for vLLM,
    `quantization: fp8` / `kv_cache_dtype: fp8` move to `precision`; vLLM's
    `enable_prefix_caching` (also in an openai backend's `server_args` with `launch: vllm`) and
    TensorRT-LLM's `enable_block_reuse` move to `prefix_caching`. For reading stored results,
    jobs and campaigns only; a config given now is refused instead (`restated_axis`). A value
    that disagrees with the one in the axis is left in place (the config is then refused)."""
    if not isinstance(data, dict) or not isinstance(data.get("engine_args"), dict):
        return data
    backend = backend if backend is not None else data.get("backend")
    engine_args = dict(data["engine_args"])
    moves = [("tensor_parallel_size", "parallelism", None)]
    if backend == "vllm":
        moves += [("quantization", "precision", "fp8"), ("kv_cache_dtype", "precision", "fp8")]
    data = dict(data)
    for name, section, only in moves:
        if name not in engine_args or (only is not None and engine_args[name] != only):
            continue
        target = data.get(section) or {}
        if isinstance(target, BaseModel):
            target = target.model_dump(exclude_unset=True)
        target = dict(target)
        stated, given = target.get(name), engine_args[name]
        if stated not in (None, "auto") and stated != given:
            continue
        engine_args.pop(name)
        if given is not None:
            target[name] = given
        data[section] = target
    server_args = engine_args.get("server_args")
    if (
        backend == "openai"
        and isinstance(server_args, dict)
        and "tensor_parallel_size" in server_args
    ):
        # Older versions took a launched server's degree there when it equalled parallelism's.
        parallelism = data.get("parallelism") or {}
        if isinstance(parallelism, BaseModel):
            parallelism = parallelism.model_dump()
        if server_args["tensor_parallel_size"] == parallelism.get("tensor_parallel_size", 1):
            engine_args["server_args"] = {
                k: v for k, v in server_args.items() if k != "tensor_parallel_size"
            }
    data["engine_args"] = _prefix_caching_moved(data, engine_args, backend)
    return data


def _prefix_caching_moved(
    data: dict[str, Any], engine_args: dict[str, Any], backend: str | None
) -> dict[str, Any]:
    """`legacy_axes_moved` for prefix caching: the engine argument that switched it (the
    backend's, `PREFIX_CACHING_ARGS`) moves from `engine_args` into `data["prefix_caching"]`;
    the engine args without it are returned."""
    server_args = engine_args.get("server_args")
    if (
        backend == "openai"
        and engine_args.get("launch") == "vllm"
        and isinstance(server_args, dict)
    ):
        name, source = PREFIX_CACHING_ARGS["vllm"], server_args
    elif backend in PREFIX_CACHING_ARGS:
        name, source = PREFIX_CACHING_ARGS[backend], engine_args
    else:
        return engine_args
    given = source.get(name)
    if not isinstance(given, bool) or data.get("prefix_caching") not in (None, given):
        return engine_args
    data["prefix_caching"] = given
    moved = {k: v for k, v in source.items() if k != name}
    return {**engine_args, "server_args": moved} if source is server_args else moved


SERVED_FRAMEWORKS = ("sglang",)
"""Frameworks measured through the `openai` backend's launcher (no adapter of their own)."""


class RunConfig(StrictInput):
    """One benchmark run: one backend on one model with one workload and load pattern."""

    backend: str = Field(description="Backend registry name (python -m bench backends).")
    model: ModelName = Field(
        description="Model preset name (e.g. tiny-llama) or a checkpoint path."
    )
    engine_args: dict[str, Any] = Field(
        default_factory=dict, description="Framework options under the framework's own names."
    )
    workload: Workload = Field(default_factory=GenerateWorkload)
    load: LoadPattern = Field(default_factory=ConcurrencyLoad)
    slo: SLO = Field(default_factory=SLO)
    validity: ValidityRules = Field(default_factory=ValidityRules)
    precision: PrecisionConfig = Field(default_factory=PrecisionConfig)
    parallelism: ParallelismConfig = Field(default_factory=ParallelismConfig)
    prefix_caching: bool | None = Field(
        None,
        description="Automatic prefix caching on or off (vLLM enable_prefix_caching, TensorRT-LLM "
        "KV-cache block reuse); none = the engine's default.",
    )
    device: Literal["auto", "cuda", "cpu"] = Field("auto", description="Where the engine runs.")
    telemetry_interval_s: float = Field(
        0.5, gt=0, le=3600, description="NVML/RSS sampling interval (s)."
    )
    watchdog_s: float = Field(
        300.0,
        gt=0,
        le=MAX_DURATION_S,
        description="No token progress for this long = hung worker, killed.",
    )
    trust_remote_code: bool = Field(False, description="Let the model's own code run (opt-in).")
    event_loop: Literal["asyncio", "uvloop"] = Field(
        "asyncio",
        description="The worker's event loop (harness and engine front-end share it). asyncio: "
        "timers to the microsecond, for open-loop schedules. uvloop: what vLLM's own server and "
        "`vllm bench throughput` run on; its timers tick in milliseconds.",
    )
    label: str | None = Field(None, max_length=200, description="Free-text label for the run.")
    gpu_type: str | None = Field(
        None,
        max_length=64,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="GPU model the run must get (Ray's accelerator type, e.g. H200, A100, L4); "
        "the ray executor places the run on a node of that type; the local executor runs on "
        "this host whatever its GPU. None = any GPU.",
    )
    prediction: RunPrediction | None = Field(
        None,
        description="What the advisor predicted for this run when it planned it (median TTFT "
        "and TPOT with intervals, the calibration behind them); stored with the run, which is "
        "flagged as drift when it measures outside the interval (bench/core/prediction.py).",
    )

    @property
    def framework(self) -> str:
        """The serving framework measured: the backend, except the `openai` client launching a
        server of another framework (`launch: sglang` measures SGLang, as `vllm serve` stays
        counted as the `openai` backend's own)."""
        if self.backend == "openai" and self.engine_args.get("launch") in SERVED_FRAMEWORKS:
            return str(self.engine_args["launch"])
        return self.backend

    @model_validator(mode="after")
    def _client_processes_need_http(self) -> RunConfig:
        if self.load.client_processes > 1 and self.backend != "openai":
            raise ValueError(
                f"load.client_processes={self.load.client_processes} needs the openai backend "
                f"(an HTTP client each process opens); {self.backend} runs in one process"
            )
        return self

    @model_validator(mode="after")
    def _capacity_needs_an_slo(self) -> RunConfig:
        if self.load.capacity_search and not self.slo.is_set():
            raise ValueError(
                "the capacity pattern needs an SLO to search under: give --slo-ttft-ms, "
                "--slo-tpot-ms or --slo-e2e-ms (slo.ttft_ms / tpot_ms / e2e_ms)"
            )
        return self

    @model_validator(mode="after")
    def _one_percentile(self) -> RunConfig:
        """A capacity search's `load.percentile` and `slo.percentile` are one setting: the
        one given sets the other (a stored search gave it in the load only); both given and
        different is refused."""
        load = self.load
        if not isinstance(load, CapacityLoad) or load.percentile == self.slo.percentile:
            return self
        in_load = "percentile" in load.model_fields_set
        in_slo = "percentile" in self.slo.model_fields_set
        if in_load and in_slo:
            raise ValueError(
                f"load.percentile {load.percentile} and slo.percentile {self.slo.percentile} "
                "disagree: give the SLO percentile once, in slo.percentile"
            )
        if in_load:
            self.slo = self.slo.model_copy(update={"percentile": load.percentile})
        else:
            self.load = load.model_copy(update={"percentile": self.slo.percentile})
        return self

    @model_validator(mode="after")
    def _engine_args_do_not_restate_axes(self) -> RunConfig:
        problem = restated_axis(self.engine_args)
        if problem is not None:
            raise ValueError(problem)
        return self
