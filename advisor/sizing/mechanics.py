"""Which of the engine model's mechanics a run exercises beyond plain dense serving: prefix
reuse (a shared prefix or conversations that resend their history), mixture-of-experts routing,
long context (prompts of LONG_CONTEXT_TOKENS or more).

Such runs check their mechanic (advisor/sizing/mechanism_validation.py) and are kept out of the
serving model's calibration fits (serving_calibration.calibrate): a fit's one compute and one
memory factor stand for the dense GEMMs and KV reads of ordinary prompts, and a run whose step
is dominated by long-context attention or by a shared prefix's reads would move them for every
other prediction (on the H100, taking them in moved the median capacity error of the shipped
searches from 9% to 14%).
"""

from __future__ import annotations

from typing import Literal

from advisor.workload.architectures import architecture_for
from bench.core.config import GenerateWorkload
from bench.core.schema import RunResult

Mechanism = Literal["prefix caching", "mixture-of-experts", "long context"]
LONG_CONTEXT_TOKENS = 8192
"""Prompts from this length on are long context: attention is a large share of their prefill
(a third at 8k tokens on Llama-3.1-8B, two thirds at 110k; docs/capacity-model.md)."""


def mechanisms_of(run: RunResult) -> list[Mechanism]:
    """The mechanics a generate run exercises ([] for a forward run or plain dense traffic)."""
    workload = run.config.workload
    if not isinstance(workload, GenerateWorkload):
        return []
    out: list[Mechanism] = []
    if workload.prefix is not None or workload.conversation is not None:
        out.append("prefix caching")
    architecture, _ = architecture_for(run.config.model)
    if architecture is not None and architecture.is_moe:
        out.append("mixture-of-experts")
    if workload.prompt_tokens.mean >= LONG_CONTEXT_TOKENS:
        out.append("long context")
    return out


__all__ = ["LONG_CONTEXT_TOKENS", "Mechanism", "mechanisms_of"]
