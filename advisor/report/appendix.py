"""The report's appendix sections from the runs: diagnostics (the advisor's findings and failed
runs) and the environment (fingerprint, preflight warnings, each run's setting)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from advisor.decide.diagnose import Diagnostic as AdvisorDiagnostic
from advisor.report.display import flatten, readable
from advisor.report.model import Diagnostic, KeyValue, PreflightWarning, RunEnvironment
from bench.core.fingerprint import Fingerprint
from bench.core.schema import RunResult

if TYPE_CHECKING:
    from bench.run.environment import PreflightItem


def report_diagnostics(
    findings: Iterable[AdvisorDiagnostic], runs: Sequence[RunResult]
) -> list[Diagnostic]:
    backend_of = {run.run_id: run.config.backend for run in runs}
    out: list[Diagnostic] = []
    for finding in findings:
        item = Diagnostic(
            run_id=finding.run_id,
            framework=backend_of.get(finding.run_id),
            title=finding.rule.replace("_", " "),
            severity=finding.severity,
            finding=finding.finding,
            advice=finding.advice,
            command=finding.command,
        )
        if item not in out:
            out.append(item)
    # Same rule and advice next to each other, in first-seen order: the formats print the
    # advice once per group (with 30 runs, the same paragraph 30 times buried the findings).
    first_seen: dict[tuple[str, str, str], int] = {}
    for item in out:
        first_seen.setdefault((item.title, item.severity, item.advice), len(first_seen))
    out.sort(key=lambda item: first_seen[(item.title, item.severity, item.advice)])
    for run in runs:
        if run.failure is not None:
            out.append(
                Diagnostic(
                    run_id=run.run_id,
                    framework=run.config.backend,
                    title="run failed",
                    severity="error",
                    finding=run.failure.cause,
                    advice=run.failure.advice or "",
                )
            )
    return out


def environment_items(fp: Fingerprint) -> list[KeyValue]:
    shown = fp.model_dump(mode="json", exclude={"libraries"})
    libraries = {name: v for name, v in fp.libraries.items() if v is not None}
    return readable(flatten(shown) + flatten({"libraries": libraries}))


def run_environment(run: RunResult) -> RunEnvironment:
    env = run.environment or Fingerprint()
    items = {
        "host": env.hostname,
        "gpu": env.primary_gpu_name or "none",
        "driver": env.driver_version,
        "cpu": env.cpu.model,
        "torch": env.libraries.get("torch"),
        run.config.backend: run.engine.version,
        "comparability digest": run.environment.digest() if run.environment else None,
    }
    return RunEnvironment(run_id=run.run_id, framework=run.config.backend, items=flatten(items))


def preflight_warnings(items: Iterable[PreflightItem]) -> list[PreflightWarning]:
    return [
        PreflightWarning(
            severity=item.severity, what=item.what, why=item.why, admin_command=item.admin_command
        )
        for item in items
    ]
