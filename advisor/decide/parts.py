"""A stage split into parts (a static encoder beside a data-dependent decode loop): the decision
tree routes each part with the stage's traits overridden by the part's own, so the encoder can
go to a graph runtime (TensorRT, ONNX Runtime) while the loop stays where control flow runs
(eager PyTorch, torch.compile), as production speech and captioning stacks deploy them.

The combined answer names each part's framework and its share of the FLOPs; the stage's own
route (its traits taken whole) stays the recommendation the fleet is sized for, and the split is
said beside it with the share of the work a graph runtime would carry.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import Field

from advisor.plan.tree import DecisionTree, evaluate
from advisor.sizing.estimate import Estimate
from advisor.workload.profile import StagePart, StageProfile
from bench.core.strict import Strict


class PartRoute(Strict):
    """Where the tree sends one part of a stage."""

    part: str
    flops_fraction: float = Field(gt=0, le=1)
    dynamic_control_flow: bool
    framework: str = Field(description="The tree's first candidate for the part.")
    leaf: str = Field(description="The tree's leaf for the part.")
    why: str = Field(description="The last step of the part's path, in words.")


def part_stage(stage: StageProfile, part: StagePart) -> StageProfile:
    """The stage as the tree sees one part: the part's traits, no parts of its own."""
    return stage.model_copy(
        update={
            "name": f"{stage.name}.{part.name}",
            "dynamic_control_flow": part.dynamic_control_flow,
            "fixed_input_shapes": part.fixed_input_shapes,
            "parts": [],
        }
    )


def route_parts(
    tree: DecisionTree, stage: StageProfile, estimate: Estimate | None
) -> list[PartRoute]:
    """Each part of the stage routed on its own traits; [] for a stage without parts or where
    the tree refuses a part (the stage's own refusal says why)."""
    routes: list[PartRoute] = []
    for part in stage.parts:
        decision = evaluate(tree, part_stage(stage, part), estimate)
        if decision.refused or not decision.candidates:
            return []
        routes.append(
            PartRoute(
                part=part.name,
                flops_fraction=part.flops_fraction,
                dynamic_control_flow=part.dynamic_control_flow,
                framework=decision.first.framework,
                leaf=decision.leaf,
                why=decision.path[-1].why if decision.path else decision.title,
            )
        )
    return routes


def split_sentence(routes: list[PartRoute], label: Callable[[str], str] = str) -> str | None:
    """`Split it: encoder (static, 90% of the FLOPs) on TensorRT; decoder_loop (dynamic control
    flow, 10%) on PyTorch (eager)`; None when every part goes to one framework."""
    if len({route.framework for route in routes}) < 2:
        return None
    parts = [
        f"{route.part} ({'dynamic control flow' if route.dynamic_control_flow else 'static'}, "
        f"{route.flops_fraction:.0%} of the FLOPs) on {label(route.framework)}"
        for route in routes
    ]
    return "Split it: " + "; ".join(parts)


__all__ = ["PartRoute", "part_stage", "route_parts", "split_sentence"]
