"""The plan's SLO capacity searches (`--pattern capacity`) of the leading candidates: to 5% in the
full plan, coarse in the quick plan to keep its time budget."""

from __future__ import annotations

from advisor.plan.run_estimate import estimate_runs
from advisor.workload.profile import StageProfile
from bench.core.config import CapacityLoad, RunConfig

CAPACITY_CANDIDATES = 2
"""Leading candidates (the tree's order) whose SLO capacity the plan searches."""
QUICK_CAPACITY = {
    "precision": 0.25,
    "probe_requests": 20,
    "max_probes": 6,
    "recheck_boundary": False,
    "warmup_requests": 2,
    "max_duration_s": 300.0,
}
"""The quick plan's coarse capacity search: 25% precision, 20 requests a probe (below the
percentile's minimum: its report says so), at most 6 probes, no re-check of the boundary."""


def capacity_plan(
    stage: StageProfile, configs: list[RunConfig], quick: bool
) -> tuple[list[RunConfig], str]:
    """The SLO capacity search (`--pattern capacity`) of the first CAPACITY_CANDIDATES
    frameworks of the plan, each at its comparison config's workload and settings; the quick
    plan's search is coarse (QUICK_CAPACITY). None without a latency SLO (nothing to search
    under), with the reason."""
    slo = stage.slo
    if slo.ttft_ms is None and slo.tpot_ms is None and slo.e2e_ms is None:
        return [], (
            "No capacity search: the profile sets no latency SLO (ttft_ms, tpot_ms or e2e_ms), "
            "so there is no rate to search under; the GPU count cannot be measured"
        )
    leading: list[RunConfig] = []
    for config in configs:
        if config.backend not in {c.backend for c in leading}:
            leading.append(config)
        if len(leading) == CAPACITY_CANDIDATES:
            break
    options = dict(QUICK_CAPACITY) if quick else {"warmup_requests": 8}
    load = CapacityLoad(percentile=slo.percentile, **options)
    planned = [
        config.model_copy(
            update={
                "load": load,
                "label": f"advisor {'quick ' if quick else ''}plan: stage {stage.name}, "
                f"{config.backend} SLO capacity search",
            }
        )
        for config in leading
    ]
    names = ", ".join(c.backend for c in planned) or "no candidate"
    if quick:
        note = (
            f"Capacity search of {names}: coarse (25% precision, 20 requests a probe, at most "
            "6 probes, no boundary re-check) to keep the quick plan's time budget; the full plan "
            "searches to 5% with probes long enough for the percentile"
        )
    else:
        note = (
            f"Capacity search of {names}: to 5% precision at {slo.percentile}, probes long "
            "enough for the percentile and judged after settling for the end-to-end time the "
            "SLO allows, boundary confirmed and re-checked (docs/capacity.md)"
        )
    return planned, note


def capacity_search_s(
    stage: StageProfile, configs: list[RunConfig], backends: list[str], cpu_only: bool, busy: float
) -> float:
    """Estimated seconds of the quick capacity searches of `backends` (for the note)."""
    searches, _ = capacity_plan(stage, [c for c in configs if c.backend in backends], True)
    return sum(
        e.duration_s
        for e in estimate_runs(
            searches, cpu_only=cpu_only, gpu=stage.gpu.type, busy=busy if cpu_only else 1.0
        )
    )
