"""Words and rules about a measured capacity search that the recommendation and the fleet
answer share: whether its probes were settled, and what an unsettled search is read as."""

from __future__ import annotations

from bench.core.config import CapacityLoad
from bench.core.schema import RunResult

UNSETTLED_NOTE = (
    "its probes were judged from an empty engine (a search from before settled probes), which "
    "can overstate what a rate holds: read it as an upper bound (on one H200, 500 requests from "
    "empty held 24 req/s, 1,500 held 22 and not 23; docs/capacity.md, "
    "data/reference/h200_llama2-7b_capacity_boundary)"
)


def settled(run: RunResult | None) -> bool:
    """A capacity search whose probes held their level before being judged
    (`CapacityLoad.probes_settled`)."""
    return (
        run is not None
        and isinstance(run.config.load, CapacityLoad)
        and run.config.load.probes_settled
    )


__all__ = ["UNSETTLED_NOTE", "settled"]
