"""Campaigns: a plan file of benchmark steps, run on a GPU host into one folder, resumable.

`python -m bench campaign PLAN.yaml --out DIR [--budget-s N]`. A `CampaignPlan` lists steps of
four kinds: `run` (one RunConfig through `bench.run.api.launch`), `fidelity` (a backend vs the
engine's own API, bench/orchestrate/fidelity.py), `advisor-plan` (the advisor's bench plan for a
profile, quick or full, each config run) and `quality` (`python -m bench quality`: quality per
precision on an evaluation file, written to `steps/<step>/quality.json`). A run or advisor-plan
step with `repeats: N` runs each config N times as one measurement group
(bench/orchestrate/repeats.py). DIR receives `campaign.json` (a `CampaignResult`), the plan,
`steps/<step>/outcome.json` per step with its run folders, and `results.sqlite` (the runs).

Steps are independent: each says what it needs (`step_resources`: GPUs = tensor parallel size x
replicas) and an executor (bench/orchestrate/executors.py) runs it as a `StepJob` (`step_job`:
name, resources, folder, the step as JSON), the executor's own type; the body it runs, here or
on a node, is `run_step_job`, and `step_outcome` reads the `StepJobResult` back. A step whose
outcome DIR already holds, for the same definition, is not run again. With a budget, a step is
started only when its estimate still fits; the skipped ones are listed.

The `advisor-plan` step gets its RunConfigs from `python -m advisor bench-plan --json` in a
subprocess, not by importing advisor: bench never imports advisor (ARCHITECTURE.md), the
advisor's plan builder stays the one copy, and the JSON it prints is validated back into
RunConfigs here.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Collection
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, model_validator

from bench.core.config import (
    MAX_DURATION_S,
    RepeatPolicy,
    RunConfig,
    cpu_dtype,
    stored_config,
)
from bench.core.errors import UserError
from bench.core.fingerprint import StoredFingerprint
from bench.core.outputs import prepare_out_dir, write_atomic
from bench.core.progress import RunProgress
from bench.core.quality import QualityPrecisionName, QualityResult
from bench.core.schema import RunResult
from bench.core.strict import Strict, StrictInput, describe_validation_error
from bench.orchestrate.executors import (
    Resources,
    StepContext,
    StepJob,
    StepJobResult,
    job_resources,
)
from bench.orchestrate.fidelity import FidelityCheck, FidelityResult, VllmFidelityCheck
from bench.run.environment import PreflightItem

if TYPE_CHECKING:
    from bench.orchestrate.executors import Executor
    from bench.storage.store import ResultStore, RunWriter

CAMPAIGN_SCHEMA_VERSION = 1
STEPS_DIR = "steps"
OUTCOME_FILE = "outcome.json"
RESULT_FILE = "campaign.json"
Device = Literal["auto", "cuda", "cpu"]


# --------------------------------------------------------------------------- the plan


class StepCommon(StrictInput):
    """What every step has: a unique name and, optionally, how long it is expected to take."""

    name: str = Field(min_length=1, max_length=120, description="Unique within the plan.")
    estimate_s: float | None = Field(
        None,
        gt=0,
        le=MAX_DURATION_S,
        description="Expected wall time, loads included (s); the budget check uses it "
        "(default: the plan's default_step_estimate_s).",
    )


class RunStep(StepCommon):
    """One benchmark run, or a measurement group of repeats of it (`repeats: 3`)."""

    kind: Literal["run"] = "run"
    config: RunConfig
    repeats: RepeatPolicy = Field(
        default_factory=RepeatPolicy,
        description="Repeats as one measurement group: a count, or count/cooldown_s/"
        "convergence_metric/convergence_width/min_repeats.",
    )


class FidelityStep(StepCommon):
    """One fidelity check (bench/orchestrate/fidelity.py)."""

    kind: Literal["fidelity"] = "fidelity"
    check: FidelityCheck


class AdvisorPlanStep(StepCommon):
    """The advisor's bench plan for a workload profile, every config run in turn."""

    kind: Literal["advisor-plan"] = "advisor-plan"
    profile: str | dict[str, Any] = Field(
        description="A profile file (relative to the plan file's folder) or the profile inline."
    )
    plan: Literal["quick", "full"] = Field(
        "quick", description="quick: short runs, a first answer in minutes; full: full runs."
    )
    stage: str | None = Field(None, description="Only this stage of a multi-stage profile.")
    device: Device | None = Field(None, description="Run every config on this device.")
    skip_unavailable: bool = Field(
        True, description="Leave out candidates whose backend is not installed here (listed)."
    )
    repeats: RepeatPolicy | None = Field(
        None,
        description="Repeats of every comparison config of the plan, each config one "
        "measurement group (none: the plan's own repeats; capacity searches run once).",
    )


class QualityStep(StepCommon):
    """`python -m bench quality` with these arguments: quality.json in the step's folder.

    It runs as a subprocess, as on the command line: its engine (vLLM in-process included)
    frees its memory when the step ends, and quality.json records that command."""

    kind: Literal["quality"] = "quality"
    model: str = Field(min_length=1, description="Preset name or local checkpoint path.")
    precisions: list[QualityPrecisionName] = Field(
        min_length=1, description="The first is the baseline every other is compared with."
    )
    text: str | None = Field(
        None, description="UTF-8 text file for perplexity (relative to the plan file's folder)."
    )
    labelled: str | None = Field(
        None,
        description="JSONL of {prompt, answer[, choices]} for accuracy (relative to the plan "
        "file's folder).",
    )
    engine: Literal["pytorch", "vllm", "openai", "onnxruntime"] = "pytorch"
    endpoints: dict[QualityPrecisionName, str] = Field(
        default_factory=dict,
        description="openai engine: precision -> URL of the server running it.",
    )
    tokenizer: str | None = Field(None, description="Tokenizer folder (default: the model's).")
    window: int = Field(256, ge=2, description="Tokens per perplexity window.")
    bootstrap: int = Field(1000, ge=100, le=100_000, description="Bootstrap draws.")
    seed: int = Field(0, description="Bootstrap seed.")

    @model_validator(mode="after")
    def _check(self) -> QualityStep:
        if self.text is None and self.labelled is None:
            raise ValueError("give text or labelled (or both)")
        if len(set(self.precisions)) != len(self.precisions):
            raise ValueError("a precision is given twice")
        if self.endpoints and self.engine != "openai":
            raise ValueError("endpoints are for engine openai")
        return self

    def command(self, plan_dir: Path, out_dir: Path) -> list[str]:
        """The `python -m bench quality` command line (files resolved from `plan_dir`)."""
        command = [sys.executable, "-m", "bench", "quality", "--model", self.model]
        for name in self.precisions:
            command += ["--precision", name]
        for flag, path in (("--text", self.text), ("--labelled", self.labelled)):
            if path is not None:
                command += [flag, str(plan_dir / path)]
        if self.tokenizer is not None:
            command += ["--tokenizer", str(plan_dir / self.tokenizer)]
        for name, url in self.endpoints.items():
            command += ["--endpoint", f"{name}={url}"]
        command += ["--engine", self.engine, "--window", str(self.window)]
        command += ["--bootstrap", str(self.bootstrap), "--seed", str(self.seed)]
        return [*command, "--out", str(out_dir)]


CampaignStep = Annotated[
    RunStep | FidelityStep | AdvisorPlanStep | QualityStep, Field(discriminator="kind")
]
_STEP = TypeAdapter(CampaignStep)


class CampaignPlan(StrictInput):
    """A named list of independent steps."""

    name: str = Field(min_length=1, max_length=120)
    description: str = Field("", description="What the campaign is for.")
    default_step_estimate_s: float = Field(
        60.0,
        gt=0,
        le=MAX_DURATION_S,
        description="Budget estimate of a step that gives no estimate_s (s).",
    )
    steps: list[CampaignStep] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_step_folders(self) -> CampaignPlan:
        seen: dict[str, str] = {}
        for step in self.steps:
            folder = step_folder(step.name)
            if folder in seen:
                raise ValueError(
                    f"step names {seen[folder]!r} and {step.name!r} are not distinct "
                    f"(both are stored as {folder!r})"
                )
            seen[folder] = step.name
        return self


def step_folder(name: str) -> str:
    """The folder a step's outcome is stored in: its name with only safe characters."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_.") or "step"


def load_plan(path: Path) -> CampaignPlan:
    """Read and validate a plan file; any problem is one UserError line."""
    from bench.core.files import load_user_mapping

    data = load_user_mapping(path, "plan")
    try:
        return CampaignPlan.model_validate(data)
    except ValidationError as exc:
        raise UserError(f"plan {path}: {describe_validation_error(exc, CampaignPlan)}") from None


# --------------------------------------------------------------------------- resources


def step_resources(step: CampaignStep) -> Resources:
    """GPUs and CPUs a step needs. An advisor plan runs its configs one at a time on one GPU
    unless a config asks for more, which only becomes known once the plan is built."""
    if isinstance(step, RunStep):
        return job_resources([step.config])
    if isinstance(step, FidelityStep):
        check = step.check
        if check.device == "cpu":
            return Resources(gpus=0)
        if isinstance(check, VllmFidelityCheck):
            return Resources(gpus=check.parallelism.gpus_needed)
        return Resources(gpus=1)
    if isinstance(step, QualityStep):
        # openai scores on servers elsewhere; the others load the model here, on a GPU if any.
        return Resources(gpus=0 if step.engine == "openai" else 1)
    return Resources(gpus=0 if step.device == "cpu" else 1)


# --------------------------------------------------------------------------- outcomes


def stored_step_moved(step: Any) -> Any:
    """A run step (a dict) of a campaign record from an earlier version: its config through
    `stored_config` (stored records only; a plan given now is refused or takes today's
    defaults)."""
    is_run = isinstance(step, dict) and step.get("kind", "run") == "run"
    if is_run and isinstance(step.get("config"), dict):
        return {**step, "config": stored_config(step["config"])}
    return step


class StepOutcome(Strict):
    """What one step produced. `completed` = the step ran to its end (a run inside it may still
    be FAILED, with its cause, as any run); `failed` = the step itself raised."""

    name: str
    kind: str
    step: CampaignStep = Field(description="The definition it ran; resuming matches on it.")
    status: Literal["completed", "failed"]
    executor: str
    started_at: str
    wall_s: float
    error: str | None = None
    traceback: str | None = None
    runs: list[RunResult] = Field(default_factory=list)
    fidelity: FidelityResult | None = None
    skipped_backends: list[str] = Field(
        default_factory=list, description="advisor-plan: candidates not installed here."
    )
    quality: QualityResult | None = Field(
        None, description="quality: the QualityResult (also the step's quality.json)."
    )

    @model_validator(mode="before")
    @classmethod
    def _older_step(cls, data: Any) -> Any:
        if isinstance(data, dict) and "step" in data:
            return {**data, "step": stored_step_moved(data["step"])}
        return data


class SkippedStep(Strict):
    name: str
    reason: str


class CampaignResult(Strict):
    """Everything a campaign produced, written to DIR/campaign.json after every step."""

    schema_version: int = CAMPAIGN_SCHEMA_VERSION
    plan: CampaignPlan
    plan_file: str | None = None
    command: str = ""
    executor: str
    budget_s: float | None = None
    started_at: str
    wall_s: float = 0.0
    environment: StoredFingerprint = None
    preflight: list[PreflightItem] = Field(default_factory=list)
    steps: list[StepOutcome] = Field(default_factory=list)
    resumed: list[str] = Field(
        default_factory=list, description="Steps whose outcome the folder already held."
    )
    skipped: list[SkippedStep] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _older_plan(cls, data: Any) -> Any:
        """A record's plan from an earlier version (`stored_step_moved`)."""
        plan = data.get("plan") if isinstance(data, dict) else None
        if isinstance(plan, dict) and isinstance(plan.get("steps"), list):
            steps = [stored_step_moved(step) for step in plan["steps"]]
            return {**data, "plan": {**plan, "steps": steps}}
        return data

    @property
    def failed(self) -> list[StepOutcome]:
        return [outcome for outcome in self.steps if outcome.status == "failed"]

    @property
    def failed_runs(self) -> list[RunResult]:
        """Runs of completed steps that did not complete (each with its cause, as any run)."""
        return [
            run
            for outcome in self.steps
            for run in outcome.runs + (outcome.fidelity.runs if outcome.fidelity else [])
            if run.status.value != "COMPLETED"
        ]


# --------------------------------------------------------------------------- one step


def run_step(
    step: CampaignStep,
    context: StepContext,
    executor_name: str = "local",
    on_progress: Callable[[RunProgress], None] | None = None,
    store_handle: RunWriter | None = None,
) -> StepOutcome:
    """Run one step here and return its outcome; an exception becomes a `failed` outcome.

    `store_handle` is an open store to write to instead of opening `context.store` (a Ray node
    whose writes travel back to the submitter's SQLite file)."""
    started_at = datetime.now(UTC).isoformat()
    started = time.monotonic()
    context.out_dir.mkdir(parents=True, exist_ok=True)
    fields: dict[str, Any] = {}
    opened = None
    try:
        if store_handle is None:
            store_handle = opened = _open_store(context.store)
        store = store_handle
        if isinstance(step, RunStep):
            fields["runs"] = _launch_repeats(
                step.config, step.repeats, store, context.out_dir, on_progress
            )
        elif isinstance(step, FidelityStep):
            from bench.orchestrate.fidelity import run_check

            fields["fidelity"] = run_check(step.check, store, context.out_dir, on_progress)
        elif isinstance(step, QualityStep):
            fields["quality"] = run_quality(step, context)
        else:
            planned = advisor_plan_runs(step, context)
            fields["skipped_backends"] = planned.skipped
            fields["runs"] = []
            # The comparison runs with their repeats, then the SLO capacity searches (a search
            # is many probes already: one each).
            for config in planned.configs:
                fields["runs"] += _launch_repeats(
                    config, planned.repeats, store, context.out_dir, on_progress
                )
            for config in planned.capacity_configs:
                fields["runs"] += _launch_repeats(
                    config, RepeatPolicy(), store, context.out_dir, on_progress
                )
        status, error, trace = "completed", None, None
    except Exception as exc:  # one step's failure never ends the campaign
        status, error = "failed", f"{type(exc).__name__}: {exc}"
        trace = None if isinstance(exc, UserError) else traceback.format_exc()[-3000:]
    finally:
        if opened is not None:
            opened.close()
    return StepOutcome(
        name=step.name,
        kind=step.kind,
        step=step,
        status=status,
        executor=executor_name,
        started_at=started_at,
        wall_s=round(time.monotonic() - started, 1),
        error=error,
        traceback=trace,
        **fields,
    )


# --------------------------------------------------------------------------- a step as a job


def step_job(step: CampaignStep, context: StepContext) -> StepJob:
    """The job an executor runs for `step` (executors take their own job type, not the step)."""
    return StepJob(
        name=step.name,
        resources=step_resources(step),
        context=context,
        definition=step.model_dump_json(),
    )


def run_step_job(
    job: StepJob,
    executor_name: str = "local",
    on_progress: Callable[[RunProgress], None] | None = None,
    store_handle: RunWriter | None = None,
) -> StepJobResult:
    """The step body every executor runs, here or on a node: the job's definition read back as
    its step, run by `run_step`, the outcome handed back as JSON."""
    step = _STEP.validate_json(job.definition)
    outcome = run_step(step, job.context, executor_name, on_progress, store_handle)
    return StepJobResult(
        executor=executor_name,
        started_at=outcome.started_at,
        wall_s=outcome.wall_s,
        outcome_json=outcome.model_dump_json(),
    )


def step_outcome(step: CampaignStep, result: StepJobResult) -> StepOutcome:
    """The step's outcome from its executor's result: the body's own, or `failed` with the
    executor's reason when the body never returned one."""
    if result.outcome_json is not None:
        return StepOutcome.model_validate_json(result.outcome_json)
    return StepOutcome(
        name=step.name,
        kind=step.kind,
        step=step,
        status="failed",
        executor=result.executor,
        started_at=result.started_at,
        wall_s=result.wall_s,
        error=result.error,
    )


def _open_store(location: str | None) -> ResultStore | None:
    from bench.storage.store import ResultStore

    return ResultStore(location) if location else None


def _launch(
    config: RunConfig,
    store: RunWriter | None,
    out_dir: Path,
    on_progress: Callable[[RunProgress], None] | None,
) -> RunResult:
    from bench.run.api import launch

    name = step_folder(config.label or f"{config.backend} {config.model}")
    return launch(config, store=store, out_dir=out_dir / "runs" / name, on_progress=on_progress)


def _launch_repeats(
    config: RunConfig,
    repeats: RepeatPolicy,
    store: RunWriter | None,
    out_dir: Path,
    on_progress: Callable[[RunProgress], None] | None,
) -> list[RunResult]:
    """One run, or with `repeats.count > 1` a measurement group (bench/orchestrate/repeats.py) whose
    repeats go to `runs/<name>/repeat-N`."""
    if repeats.count == 1:
        return [_launch(config, store, out_dir, on_progress)]
    from bench.orchestrate.repeats import launch_group

    name = step_folder(config.label or f"{config.backend} {config.model}")
    return launch_group(config, repeats, store, out_dir / "runs" / name, on_progress).runs


QUALITY_TIMEOUT_S = MAX_DURATION_S


def run_quality(step: QualityStep, context: StepContext) -> QualityResult:
    """`python -m bench quality` for the step, into its folder; its QualityResult read back.

    Exit 1 (no precision ran) still wrote the file, each precision with why it did not run: the
    step is completed with that result. Exit 2 (bad input) is the command's one line."""
    from bench.core.quality import load_quality_result

    command = step.command(context.plan_dir, context.out_dir)
    done = subprocess.run(command, capture_output=True, text=True, timeout=QUALITY_TIMEOUT_S)
    written = context.out_dir / "quality.json"
    if done.returncode not in (0, 1) or not written.is_file():
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        if done.returncode == 2:
            raise UserError(f"step {step.name!r}: bench quality: {last}")
        raise RuntimeError(f"bench quality exited {done.returncode}: {last}")
    return load_quality_result(str(written))


class _PlannedStage(BaseModel):
    """One stage of `python -m advisor bench-plan --json` (other fields it prints are ignored:
    they are the advisor's to add)."""

    stage: str
    configs: list[RunConfig]
    repeats: int = Field(1, ge=1, description="Repeats of each comparison config (older: 1).")
    capacity_configs: list[RunConfig] = Field(default_factory=list)


class _AdvisorPlan(BaseModel):
    stages: list[_PlannedStage]


class AdvisorPlanRuns(BaseModel):
    """What an advisor-plan step runs: the comparison configs with their repeats, then the
    plan's SLO capacity searches, and the backends left out (not installed here)."""

    configs: list[RunConfig]
    repeats: RepeatPolicy
    capacity_configs: list[RunConfig]
    skipped: list[str]


def advisor_plan_configs(
    step: AdvisorPlanStep, context: StepContext
) -> tuple[list[RunConfig], list[str]]:
    """The advisor's bench plan for the step's profile: (every config to run, comparison runs
    then capacity searches, once each; backends left out)."""
    planned = advisor_plan_runs(step, context)
    return [*planned.configs, *planned.capacity_configs], planned.skipped


def advisor_plan_runs(step: AdvisorPlanStep, context: StepContext) -> AdvisorPlanRuns:
    """The advisor's bench plan for the step's profile, its capacity searches and repeats (the
    step's `repeats` when set, else the plan's)."""
    import yaml

    from bench.engines.backends import get_backend

    if isinstance(step.profile, dict):
        profile_path = context.out_dir / "profile.yaml"
        write_atomic(profile_path, yaml.safe_dump(step.profile, sort_keys=False))
    else:
        profile_path = (context.plan_dir / step.profile).resolve()
        if not profile_path.is_file():
            raise UserError(f"step {step.name!r}: profile {profile_path} does not exist")
    command = [sys.executable, "-m", "advisor", "bench-plan", "--profile", str(profile_path)]
    command += ["--json", "--quick"] if step.plan == "quick" else ["--json"]
    if step.stage:
        command += ["--stage", step.stage]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"step {step.name!r}: the advisor could not plan it: {last}")
    plan = _AdvisorPlan.model_validate_json(done.stdout)
    configs: list[RunConfig] = []
    searches: list[RunConfig] = []
    skipped: list[str] = []
    plan_repeats = 1
    for stage in plan.stages:
        if step.stage and stage.stage != step.stage:
            continue
        plan_repeats = max(plan_repeats, stage.repeats)
        for config, into in [
            *((c, configs) for c in stage.configs),
            *((c, searches) for c in stage.capacity_configs),
        ]:
            if step.device is not None:
                config = config.model_copy(update={"device": step.device})
            if step.device == "cpu":  # one CPU dtype rule (bench.core.config.cpu_dtype)
                dtype = cpu_dtype(config.workload.kind, config.precision.dtype)
                precision = config.precision.model_copy(update={"dtype": dtype})
                config = config.model_copy(update={"precision": precision})
            if step.skip_unavailable and not get_backend(config.backend).availability().available:
                if config.backend not in skipped:
                    skipped.append(config.backend)
                continue
            into.append(config)
    repeats = step.repeats if step.repeats is not None else RepeatPolicy(count=plan_repeats)
    return AdvisorPlanRuns(
        configs=configs, repeats=repeats, capacity_configs=searches, skipped=skipped
    )


# --------------------------------------------------------------------------- the campaign


class CampaignReporter:
    """What a campaign tells its user; the base says nothing (tests, library use)."""

    def step_started(self, index: int, total: int, step: CampaignStep) -> None: ...

    def step_progress(self, progress: RunProgress) -> None: ...

    def step_finished(self, outcome: StepOutcome, resumed: bool = False) -> None: ...

    def step_skipped(self, skipped: SkippedStep) -> None: ...

    def close(self) -> None: ...


def run_campaign(
    plan: CampaignPlan,
    out_dir: Path,
    executor: Executor,
    budget_s: float | None = None,
    plan_file: Path | None = None,
    store: str | None = None,
    reporter: CampaignReporter | None = None,
    command: str = "",
    plan_text: str | None = None,
) -> CampaignResult:
    """Run every step of `plan` not already in `out_dir`, within `budget_s` when given.
    `plan_text` is written as DIR/plan.yaml instead of `plan_file`'s bytes (a CPU rehearsal
    keeps the plan it really ran)."""
    from bench.run.environment import fingerprint, preflight

    reporter = reporter or CampaignReporter()
    out_dir = Path(out_dir)
    plan_dir = Path(plan_file).resolve().parent if plan_file else Path.cwd()
    # A resume the folder refuses (a step defined differently, an unreadable outcome) is found
    # before anything is written: the folder is left exactly as it was.
    previous_outcomes = {
        step.name: _finished_outcome(out_dir / STEPS_DIR / step_folder(step.name), step)
        for step in plan.steps
    }
    check_steps(
        plan,
        skip={name for name, done in previous_outcomes.items() if done},
        here=executor.name == "local",
        plan_dir=plan_dir,
    )
    prepare_out_dir(out_dir)
    store = store or str(out_dir / "results.sqlite")
    check_store(store)
    if plan_text is not None:
        write_atomic(out_dir / "plan.yaml", plan_text)
    elif plan_file is not None:
        write_atomic(out_dir / "plan.yaml", Path(plan_file).read_bytes())
    environment = fingerprint()
    result = CampaignResult(
        plan=plan,
        plan_file=str(plan_file) if plan_file else None,
        command=command,
        executor=executor.name,
        budget_s=budget_s,
        started_at=datetime.now(UTC).isoformat(),
        environment=environment,
        preflight=preflight(environment),
    )
    started = time.monotonic()
    # An executor that runs several steps at once (ray) gets every step up front; the outcomes
    # are gathered in plan order. The budget then counts the estimates of the steps started.
    pool = ThreadPoolExecutor(executor.max_jobs) if getattr(executor, "max_jobs", 1) > 1 else None
    pending: list[tuple[Path, CampaignStep, Future[StepJobResult]]] = []
    committed_s = 0.0
    for index, step in enumerate(plan.steps):
        step_dir = out_dir / STEPS_DIR / step_folder(step.name)
        previous = previous_outcomes[step.name]
        if previous is not None:
            result.steps.append(previous)
            result.resumed.append(step.name)
            reporter.step_finished(previous, resumed=True)
            continue
        estimate = step.estimate_s or plan.default_step_estimate_s
        elapsed = committed_s if pool is not None else time.monotonic() - started
        if budget_s is not None and elapsed + estimate > budget_s:
            skipped = SkippedStep(
                name=step.name,
                reason=f"time budget: {elapsed:.0f} of {budget_s:.0f} s used, "
                f"step estimate {estimate:.0f} s",
            )
            result.skipped.append(skipped)
            reporter.step_skipped(skipped)
            continue
        reporter.step_started(index, len(plan.steps), step)
        job = step_job(step, StepContext(out_dir=step_dir, store=store, plan_dir=plan_dir))
        if pool is not None:
            committed_s += estimate
            pending.append((step_dir, step, pool.submit(executor.run, job, None)))
            continue
        done = executor.run(job, reporter.step_progress)
        _record_outcome(result, step_dir, step_outcome(step, done))
        reporter.step_finished(result.steps[-1])
        _write_result(result, out_dir, started)
    for step_dir, step, future in pending:
        _record_outcome(result, step_dir, step_outcome(step, future.result()))
        reporter.step_finished(result.steps[-1])
        _write_result(result, out_dir, started)
    if pool is not None:
        pool.shutdown()
    _write_result(result, out_dir, started)
    return result


def check_steps(
    plan: CampaignPlan,
    skip: Collection[str] = (),
    here: bool = False,
    plan_dir: Path | None = None,
) -> None:
    """Every run step still to run checked before the first one starts: its backend is a known
    name, its engine arguments are the backend's, when the steps run `here` (the local
    executor) its load generator fits this machine's memory, its trace and prompt files read
    and every token length fits its model's context window.
    A quality step's text and labelled files are read (from `plan_dir`, default the working
    directory) and its model named a preset or an existing checkpoint.
    A typo in step 5 is one line now, not a failed step after steps 1 to 4 have run.
    Availability is not checked: a Ray executor runs steps on nodes that have what this host
    lacks."""
    from bench.engines.backends import get_backend
    from bench.run.api import check_traffic_files
    from bench.run.memory_budget import check_memory_fits

    for step in plan.steps:
        if step.name in skip:
            continue
        if isinstance(step, QualityStep):
            _check_quality_step(step, plan_dir or Path.cwd())
        if not isinstance(step, RunStep):
            continue
        try:
            get_backend(step.config.backend).validate_engine_args(step.config.engine_args)
            if here:
                check_memory_fits(step.config)
            check_traffic_files(step.config)
        except UserError as exc:
            raise UserError(f"step {step.name!r}: {exc}") from None


def _check_quality_step(step: QualityStep, plan_dir: Path) -> None:
    from bench.core.quality import read_labelled_file, read_text_file
    from bench.engines.models import check_model_name
    from bench.run.quality import check_window_fits

    try:
        check_model_name(step.model)
        check_window_fits(step.model, step.window)
        if step.text is not None:
            read_text_file(str(plan_dir / step.text))
        if step.labelled is not None:
            read_labelled_file(str(plan_dir / step.labelled))
    except UserError as exc:
        raise UserError(f"step {step.name!r}: {exc}") from None


def check_store(location: str) -> None:
    """The campaign's results store opened (created when new) and closed once before the
    first step: an unreachable store is one line up front, not a failure in every step."""
    opened = _open_store(location)
    if opened is not None:
        opened.close()


def _record_outcome(result: CampaignResult, step_dir: Path, outcome: StepOutcome) -> None:
    step_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(step_dir / OUTCOME_FILE, outcome.model_dump_json(indent=1))
    result.steps.append(outcome)


def _finished_outcome(step_dir: Path, step: CampaignStep) -> StepOutcome | None:
    """The stored outcome of this very step when it completed; a failed one runs again."""
    path = step_dir / OUTCOME_FILE
    if not path.is_file():
        return None
    try:
        outcome = StepOutcome.model_validate_json(path.read_bytes())
    except ValidationError:
        raise UserError(
            f"{path} is not a step outcome this version can read; move it away to run the step"
        ) from None
    if outcome.status != "completed":
        return None
    if outcome.step != step:
        raise UserError(
            f"{path} holds step {step.name!r} as defined differently; use another --out folder "
            "or remove that step's folder"
        )
    return outcome


def _write_result(result: CampaignResult, out_dir: Path, started: float) -> None:
    result.wall_s = round(time.monotonic() - started, 1)
    write_atomic(out_dir / RESULT_FILE, result.model_dump_json(indent=1))


def outcome_line(outcome: StepOutcome) -> str:
    """One line per finished step: status, wall time, and its headline figures."""
    head = f"{outcome.name}: {outcome.status} in {outcome.wall_s:.0f} s"
    if outcome.error:
        return f"{head} - {outcome.error.splitlines()[0]}"
    parts = []
    for run in outcome.runs:
        summary = run.summary
        figure = f"{summary.output_throughput_tok_s:,.0f} tok/s" if summary else "no summary"
        if run.config.workload.kind == "forward" and summary:
            figure = f"{summary.request_throughput_rps:,.1f} batches/s"
        if run.failure is not None:  # a stopped run's figure is of its last seconds, not a run
            figure = run.failure.cause.splitlines()[0]
        parts.append(f"{run.config.backend} {run.status.value} {figure}")
    if outcome.fidelity is not None:
        fidelity = outcome.fidelity
        ratio = f"{fidelity.ratio:.3f}" if fidelity.ratio is not None else "n/a"
        verdict = {True: "pass", False: "below", None: "no ratio"}[fidelity.passed]
        parts.append(f"fidelity ratio {ratio} ({verdict} at {fidelity.check.required_ratio:g})")
    if outcome.quality is not None:
        parts += [f"{row.precision} {row.summary()}" for row in outcome.quality.precisions]
    if outcome.skipped_backends:
        parts.append(f"not installed here: {', '.join(outcome.skipped_backends)}")
    return f"{head} - {'; '.join(parts)}" if parts else head


class RichReporter(CampaignReporter):
    """A rich progress line for the running step and one printed line per finished step."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.task: Any = None
        self.progress.start()

    def step_started(self, index: int, total: int, step: CampaignStep) -> None:
        description = f"[{index + 1}/{total}] {step.name}"
        if self.task is None:
            self.task = self.progress.add_task(description, info="")
        else:
            self.progress.update(self.task, description=description, info="")

    def step_progress(self, progress: RunProgress) -> None:
        if self.task is None:
            return
        stage = progress.phase or progress.stage
        counts = (
            f"{progress.completed} ok, {progress.failed or 0} failed"
            if progress.counts_requests
            else ""
        )
        self.progress.update(self.task, info=f"{stage} {counts}".strip())

    def step_finished(self, outcome: StepOutcome, resumed: bool = False) -> None:
        mark = "already in the folder: " if resumed else ""
        style = "red" if outcome.status == "failed" else "green"
        self.console.print(
            f"[{style}]{mark}{outcome_line(outcome)}[/{style}]", highlight=False, soft_wrap=True
        )

    def step_skipped(self, skipped: SkippedStep) -> None:
        self.console.print(
            f"[yellow]skipped {skipped.name}: {skipped.reason}[/yellow]", soft_wrap=True
        )

    def close(self) -> None:
        self.progress.stop()
