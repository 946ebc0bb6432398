"""The bounds on what a user may ask for, as data: one table read by the models' `Field(...)`
bounds, the CLI checks and the docs (docs/limits.md is this table, checked by a test).

Each bound sits far above any real deployment and below what would overflow, hang or exhaust
memory, so that a typo or `1e300` is refused in one line where it enters instead of turning into
a 299-digit GPU count, an endless run or the OOM killer later. `why` says where the figure comes
from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LIMITS_DOC = "docs/limits.md"


@dataclass(frozen=True)
class Limit:
    """One bounded input: the allowed range, its unit and the reason for the figure.

    A plain dataclass, not a `Strict` model: bench/core/strict.py words its out-of-range errors
    from this table, so this module must not import it."""

    name: str
    """Python name of the bound (MAX_RATE_RPS ...)."""
    applies_to: str
    """The fields and options it bounds, in words (the docs' table)."""
    low: float | None
    """Smallest allowed value; None = any positive value."""
    high: float
    """Largest allowed value."""
    unit: str
    why: str
    fields: tuple[str, ...] = ()
    """The model fields bounded by it, by their name or their last two names
    (`prefix.count`): an error on such a field at exactly this bound is worded with the
    unit and the docs (`out_of_range`)."""

    def allowed(self) -> str:
        """The range as the docs and error lines write it: `(0, 1,000,000]`, `[0.01, 100]`."""
        low = "(0" if self.low is None else f"[{_figure(self.low)}"
        return f"{low}, {_figure(self.high)}]"


def _figure(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


_TOKEN_FIELDS = (
    *(
        f"{distribution}.{bound}"
        for distribution in (
            "prompt_tokens",
            "output_tokens",
            "tokens",
            "user_tokens",
            "sequence_length",
        )
        for bound in ("mean", "spread", "min", "max")
    ),
    "max_input_tokens",
    "max_output_tokens",
    "shared_prefix.tokens",
    "user_tokens",
)
"""Token-length fields: a length distribution's bounds (not turns or think_time_ms, which are
counts and milliseconds), the replay clips, a profile's prefix and message lengths."""

LIMITS: tuple[Limit, ...] = (
    Limit(
        name="MAX_RATE_RPS",
        applies_to="request rates: profile request_rate_rps and peak_request_rate_rps, rate "
        "load `rate`, capacity start_rps and max_rps, SLO min_request_throughput_rps",
        low=None,
        high=1_000_000,
        unit="requests/s",
        why="a million requests a second is a large fleet's whole front door; the bench's "
        "client sends from one process",
        fields=(
            "rate_rps",
            "capacity_rps",
            "start_rps",
            "max_rps",
            "min_request_throughput_rps",
            "request_rate_rps",
            "peak_request_rate_rps",
        ),
    ),
    Limit(
        name="MAX_PRICE_PER_GPU_HOUR",
        applies_to="profile gpu.price_per_hour",
        low=None,
        high=1000,
        unit="USD per GPU-hour",
        why="250 times the dearest on-demand price in data/gpu_prices.yaml (3.99 USD, "
        "H200 and H100 SXM); a cluster contract is far below it",
        fields=("price_per_hour",),
    ),
    Limit(
        name="BANDWIDTH_TB_S",
        applies_to="profile gpu.memory_bandwidth_tb_s",
        low=0.01,
        high=100,
        unit="TB/s",
        why="10 GB/s is one DDR4 channel (below it the roofline floor is meaningless); 100 TB/s "
        "is about 20 times the fastest GPU in advisor/workload/gpus.py (H200, 4.8 TB/s)",
        fields=("memory_bandwidth_tb_s",),
    ),
    Limit(
        name="MAX_TOKENS",
        applies_to="every token length: prompt and output length distributions, shared "
        "prefixes, conversation messages, trace rows, prompt-file output lengths, replay clips; "
        "where the run's model is known, prompt + output must also fit its context window "
        "(below)",
        low=1,
        high=10_000_000,
        unit="tokens",
        why="the longest context window of a released model (10M tokens)",
        fields=_TOKEN_FIELDS,
    ),
    Limit(
        name="MAX_CONCURRENCY",
        applies_to="concurrency in profiles and loads, step max, capacity start_concurrency "
        "and max_concurrency",
        low=1,
        high=100_000,
        unit="requests in flight",
        why="each request in flight is a task holding its prompt; 100,000 is far past any "
        "one engine's batch",
        fields=(
            "concurrency",
            "start_concurrency",
            "max_concurrency",
            "start",
            "step",
            "max",
            "levels",
        ),
    ),
    Limit(
        name="MAX_PROBE_REQUESTS",
        applies_to="capacity probe_requests",
        low=1,
        high=100_000,
        unit="requests per probe",
        why="200 times the largest derived probe (p99 at 0.99 attainment: 500 requests); a "
        "search runs up to max_probes of them",
        fields=("probe_requests",),
    ),
    Limit(
        name="MAX_BLOCK_SIZE",
        applies_to="replay block_size (tokens per Mooncake hash ID)",
        low=1,
        high=65_536,
        unit="tokens",
        why="128 times the Mooncake trace's 512; a block's token IDs are generated whole each "
        "time a request uses it",
        fields=("block_size",),
    ),
    Limit(
        name="MAX_TIME_SCALE",
        applies_to="replay time_scale (trace time multiplier); the scaled trace span, read with "
        "the trace, must also fit a week (the longest run allowed, MAX_DURATION_S)",
        low=None,
        high=7 * 24 * 3600 * 1000,
        unit="x trace time",
        why="trace timestamps are milliseconds: at this scale one millisecond between two rows "
        "lasts a week, the longest any run may be, so no run could send a second row",
        fields=("time_scale",),
    ),
    Limit(
        name="MAX_HASH_IDS",
        applies_to="hash_ids of one Mooncake trace row (prompt blocks)",
        low=0,
        high=100_000,
        unit="blocks",
        why="a row of 10,000,000 tokens (MAX_TOKENS) in blocks of 100 tokens; the Mooncake "
        "trace's blocks are 512 tokens. Each block's token IDs are generated when the row is sent",
    ),
    Limit(
        name="MAX_PREFIXES",
        applies_to="workload prefix.count, profile shared_prefix.count",
        low=1,
        high=100_000,
        unit="distinct prefixes",
        why="each prefix's token IDs are generated up front and held for the run",
        fields=("prefix.count", "shared_prefix.count"),
    ),
    Limit(
        name="MAX_SEED",
        applies_to="every seed (workload, load, replay, capacity, bench compare --seed)",
        low=0,
        high=2**32 - 1,
        unit="",
        why="numpy's legacy seeding takes 0 .. 2**32 - 1; a negative seed fails every generator",
        fields=("seed",),
    ),
    Limit(
        name="BOOTSTRAP_DRAWS",
        applies_to="bench compare --bootstrap",
        low=100,
        high=100_000,
        unit="draws per side",
        why="the interval's Monte-Carlo error is already below the printed precision at "
        "10,000; time grows linearly (1,000 is the default)",
    ),
    Limit(
        name="MAX_STAGES",
        applies_to="stages of a workload profile",
        low=1,
        high=100,
        unit="stages",
        why="each stage is its own recommendation (tens of ms each) and report section; "
        "the shipped profiles have at most 2",
    ),
    Limit(
        name="MAX_ENGINE_DELAY_S",
        applies_to="fake backend ttft_s, itl_s, ttft_jitter_s, ttft_growth_s_per_s",
        low=0,
        high=3600,
        unit="s",
        why="a test double's service time; `inf` would hold every request forever",
        fields=("ttft_s", "itl_s", "ttft_jitter_s", "ttft_growth_s_per_s"),
    ),
)

BY_NAME = {limit.name: limit for limit in LIMITS}
MAX_RATE_RPS = BY_NAME["MAX_RATE_RPS"].high
MAX_PRICE_PER_GPU_HOUR = BY_NAME["MAX_PRICE_PER_GPU_HOUR"].high
MIN_BANDWIDTH_TB_S = BY_NAME["BANDWIDTH_TB_S"].low or 0.0
MAX_BANDWIDTH_TB_S = BY_NAME["BANDWIDTH_TB_S"].high
MAX_TOKENS = int(BY_NAME["MAX_TOKENS"].high)
MAX_CONCURRENCY = int(BY_NAME["MAX_CONCURRENCY"].high)
MAX_PROBE_REQUESTS = int(BY_NAME["MAX_PROBE_REQUESTS"].high)
MAX_BLOCK_SIZE = int(BY_NAME["MAX_BLOCK_SIZE"].high)
MAX_HASH_IDS = int(BY_NAME["MAX_HASH_IDS"].high)
MAX_TIME_SCALE = BY_NAME["MAX_TIME_SCALE"].high
MAX_PREFIXES = int(BY_NAME["MAX_PREFIXES"].high)
MAX_SEED = int(BY_NAME["MAX_SEED"].high)
MIN_BOOTSTRAP_DRAWS = int(BY_NAME["BOOTSTRAP_DRAWS"].low or 0)
MAX_BOOTSTRAP_DRAWS = int(BY_NAME["BOOTSTRAP_DRAWS"].high)
MAX_STAGES = int(BY_NAME["MAX_STAGES"].high)
MAX_ENGINE_DELAY_S = BY_NAME["MAX_ENGINE_DELAY_S"].high


def check_bootstrap_and_seed(bootstrap: int, seed: int) -> None:
    """`--bootstrap` and `--seed` of every command that bootstraps (bench compare, bench
    quality): one rule, so a seed one accepts the other never refuses. UserError naming the
    option and its range."""
    from bench.core.errors import UserError

    if not MIN_BOOTSTRAP_DRAWS <= bootstrap <= MAX_BOOTSTRAP_DRAWS:
        raise UserError(
            f"--bootstrap {bootstrap}: from {MIN_BOOTSTRAP_DRAWS:,} to {MAX_BOOTSTRAP_DRAWS:,} "
            f"draws ({LIMITS_DOC})"
        )
    if not 0 <= seed <= MAX_SEED:
        raise UserError(f"--seed {seed}: from 0 to {MAX_SEED:,} (numpy's seed range)")


def out_of_range(loc: Sequence[Any], error_type: str, bound: Any, value: Any) -> str | None:
    """The words for a pydantic bound error on a field this table bounds, at exactly its
    figure: `1e+300 is over the limit of 1,000,000 requests/s (MAX_RATE_RPS in
    docs/limits.md)`; None for any other field or bound (pydantic's own words stay).

    `loc` is the field's location as the user wrote it, `error_type` pydantic's
    (`less_than_equal` for an `le` bound, `greater_than_equal` for `ge`), `bound` its figure."""
    names = [part for part in loc if isinstance(part, str)]
    if not names or isinstance(bound, bool) or not isinstance(bound, int | float):
        return None
    tails = {names[-1], ".".join(names[-2:])}
    for limit in LIMITS:
        if not tails & set(limit.fields):
            continue
        unit = f" {limit.unit}" if limit.unit else ""
        where = f"({limit.name} in {LIMITS_DOC})"
        if error_type == "less_than_equal" and bound == limit.high:
            return f"{_shown(value)} is over the limit of {_figure(limit.high)}{unit} {where}"
        if error_type == "greater_than_equal" and bound == limit.low:
            return f"{_shown(value)} is under the minimum of {_figure(bound)}{unit} {where}"
    return None


SHOWN_DIGITS = 30
"""A refused integer longer than this is named by its length: Python refuses to write an int of
over 4,300 digits in decimal (a YAML hex literal of 4,000 digits is one), and no reader wants
the digits of one that it would write."""


def _shown(value: Any) -> str:
    """A refused value as the user would recognise it: `1,000,000,000`, `1e+300`, `-1`, `a
    4,817-digit number`."""
    if isinstance(value, str):
        if len(value) > SHOWN_DIGITS:
            return f"{value[:SHOWN_DIGITS]}... ({len(value):,} characters)"
        try:
            value = float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return repr(value)
    if isinstance(value, int) and value.bit_length() > SHOWN_DIGITS * 3:  # over ~27 digits
        digits = int(value.bit_length() * 0.30103) + 1  # log10(2): within one digit
        sign = "negative " if value < 0 else ""
        return f"a {sign}{digits:,}-digit number"
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:g}"


def limits_table() -> str:
    """The Markdown table docs/limits.md holds (a test compares the two)."""
    rows = [
        "| Bound | Allowed | Unit | Applies to | Why this figure |",
        "|---|---|---|---|---|",
    ]
    for limit in LIMITS:
        rows.append(
            f"| `{limit.name}` | {limit.allowed()} | {limit.unit or '-'} | {limit.applies_to} "
            f"| {limit.why} |"
        )
    return "\n".join(rows) + "\n"


__all__ = [
    "LIMITS",
    "LIMITS_DOC",
    "MAX_BANDWIDTH_TB_S",
    "MAX_BLOCK_SIZE",
    "MAX_BOOTSTRAP_DRAWS",
    "MAX_CONCURRENCY",
    "MAX_ENGINE_DELAY_S",
    "MAX_PREFIXES",
    "MAX_PRICE_PER_GPU_HOUR",
    "MAX_PROBE_REQUESTS",
    "MAX_RATE_RPS",
    "MAX_SEED",
    "MAX_STAGES",
    "MAX_TIME_SCALE",
    "MAX_TOKENS",
    "MIN_BANDWIDTH_TB_S",
    "MIN_BOOTSTRAP_DRAWS",
    "Limit",
    "limits_table",
    "out_of_range",
]
