"""The benchmark plan a session has on offer: the advisor's `StagePlan` as made, and what the
Benchmark page needs to keep it honest (the profile it was made for, its number).

A module of its own, not the page's: Streamlit executes a page file afresh on every run, and a
model declared there would be a new class each time (and could not resolve its annotations).
"""

from __future__ import annotations

from pydantic import Field

from advisor.plan.stage_plan import StagePlan
from bench.core.strict import Strict

PLAN_KEY = "bench_plan"
"""Session key of the plan on offer: a `PlanShown`."""


class PlanShown(Strict):
    """The plan the page offers: the advisor's StagePlan as made, for the profile content it
    was made for (`digest`: an edit makes it stale), and its number in this session (a new plan
    gets fresh table and Run widgets)."""

    digest: str
    plan: StagePlan
    version: int = Field(ge=1)
