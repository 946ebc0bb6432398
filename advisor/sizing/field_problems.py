"""What the profile form and the CLI say under a stage's fields before anything runs: sequences
longer than the model's context window (advisor/workload/architectures.py's check_context) and an
LLM's TTFT or TPOT limit below its floor (advisor/sizing/llm_feasibility.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from advisor.sizing.llm_feasibility import llm_floor_verdict
from advisor.workload.architectures import architecture_for, check_context
from advisor.workload.profile import StageProfile
from bench.core.strict import Strict


class FieldProblem(Strict):
    """A problem of one profile field found before anything runs (for the form and the CLI)."""

    stage: str
    field: str = Field(description="Stage field path, e.g. prompt_tokens or gpu.type.")
    severity: Literal["error", "warning"]
    message: str


def feasibility_problems(profile_stages: list[StageProfile]) -> list[FieldProblem]:
    """Per-field problems the form and the CLI show before anything runs: the context window
    (errors refuse the stage; warnings say what the runs will clip) and an LLM's TTFT or TPOT
    limit below its floor (advisor/sizing/llm_feasibility.py)."""
    problems: list[FieldProblem] = []
    for stage in profile_stages:
        verdict = llm_floor_verdict(stage)
        for check in verdict.failing if verdict is not None else []:
            field = "slo.ttft_ms" if check.metric == "TTFT" else "slo.tpot_ms"
            remedy = next((r for r in verdict.remedies if r.startswith(f"for {check.metric}:")), "")
            problems.append(
                FieldProblem(
                    stage=stage.name,
                    field=field,
                    severity="error",
                    message=f"{check.metric} <= {check.slo_ms:,.0f} ms is below the floor of "
                    f"{check.floor_ms:,.0f} ms on {verdict.gpus} × {verdict.gpu} "
                    f"({check.times_the_limit:.1f}x): no engine meets it; {remedy}",
                )
            )
        architecture, _ = architecture_for(stage.model)
        check = check_context(stage, architecture)
        if check is None:
            continue
        field = "prompt_tokens" if stage.kind == "generate" else "sequence_length"
        if check.problem:
            severity, message = "error", check.problem
        elif check.warning:
            severity, message = "warning", check.warning
        else:
            continue
        problems.append(
            FieldProblem(stage=stage.name, field=field, severity=severity, message=message)
        )
    return problems


__all__ = ["FieldProblem", "feasibility_problems"]
