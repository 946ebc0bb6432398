"""A workload profile from what the user gives: a YAML or JSON file, a mapping, or CLI-style
flags; validated with one-line errors naming the field, then every file it names read.

Above the profile's models and its traffic (`advisor/workload/traffic.py` reads the files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from advisor.workload.profile import WorkloadProfile, describe_validation_error
from advisor.workload.traffic import check_files
from bench.core.errors import UserError


def load_profile(path: str | Path) -> WorkloadProfile:
    """Read a YAML or JSON profile; any problem is a one-line UserError naming the field."""
    from bench.core.files import load_user_mapping

    return profile_from_dict(load_user_mapping(path, "profile"), source=str(path))


def profile_from_dict(data: dict[str, Any], source: str = "profile") -> WorkloadProfile:
    """Validate a profile mapping (a parsed YAML or JSON file: the edge where the typed profile
    begins); errors name the field (`stages[1].gpu.type`) and the fix."""
    try:
        profile = WorkloadProfile.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc, single="stages" not in data)
        raise UserError(f"{source}: {message}") from None
    check_traffic_files(profile, source)
    check_model_names(profile, source)
    return profile


def check_stage_model(model: str) -> None:
    """A UserError unless the advisor can size `model`: the bench's rule (`check_model_name`),
    or a published speech model sized from its config (the bench has none of these: `bench-plan`
    says so)."""
    from advisor.workload.architectures import published_encoder
    from bench.engines.models import check_model_name

    if published_encoder(model) is None:
        check_model_name(model)


def check_model_names(profile: WorkloadProfile, source: str = "profile") -> None:
    """Every stage's model is a preset, a known Hugging Face id, a published speech model the
    advisor sizes (PUBLISHED_ENCODERS) or a local folder with a config.json (the bench's rule,
    `check_model_name`); a typo is one line with a "did you mean",
    never an unsized stage or a run of another model. A stage that states its own size
    (`parameters_b`) may name a checkpoint this machine does not hold (planned elsewhere)."""
    single = len(profile.stages) == 1
    for index, stage in enumerate(profile.stages):
        if stage.model is None or stage.parameters_b is not None:
            continue
        where = "" if single else f"stages[{index}]."
        try:
            check_stage_model(stage.model)
        except UserError as exc:
            raise UserError(f"{source}: {where}model: {exc}") from None


def check_traffic_files(profile: WorkloadProfile, source: str = "profile") -> None:
    """Read every trace and prompt file the profile names, through the bench's own readers
    (bounded, binary refused, columns and timestamp order checked), so that a bad file is one
    line now, not a failed benchmark later. Relative paths are from the working directory.
    A stage's quality_result is read too (a QualityResult from `bench quality`)."""
    from bench.core.quality import load_quality_result

    single = len(profile.stages) == 1
    for index, stage in enumerate(profile.stages):
        where = "" if single else f"stages[{index}]."
        try:
            check_files(stage)
            if stage.quality_result is not None:
                load_quality_result(stage.quality_result)
        except UserError as exc:
            raise UserError(f"{source}: {where}{exc}") from None


_YES = {"yes", "y", "true", "1", "on"}
_NO = {"no", "n", "false", "0", "off"}

FLAG_FIELDS: dict[str, tuple[str, ...]] = {
    # flag keyword -> path inside a stage mapping
    "dynamic_control_flow": ("dynamic_control_flow",),
    "fixed_input_shapes": ("fixed_input_shapes",),
    "long_sequence_generation": ("long_sequence_generation",),
    "multi_backend": ("multi_backend",),
    "determinism_required": ("determinism_required",),
    "kind": ("kind",),
    "model": ("model",),
    "parameters_b": ("parameters_b",),
    "prompt_tokens": ("prompt_tokens", "mean"),
    "output_tokens": ("output_tokens", "mean"),
    "batch_size": ("batch_size",),
    "concurrency": ("concurrency",),
    "request_rate_rps": ("request_rate_rps",),
    "ttft_ms": ("slo", "ttft_ms"),
    "tpot_ms": ("slo", "tpot_ms"),
    "e2e_ms": ("slo", "e2e_ms"),
    "objective": ("objective",),
    "gpu": ("gpu", "type"),
    "gpu_count": ("gpu", "count"),
    "gpu_memory_gb": ("gpu", "memory_gb"),
    "dtype": ("precision", "dtype"),
    "quantization": ("precision", "quantization"),
    "build_time_tolerance": ("build_time_tolerance",),
    "shared_prefix_tokens": ("shared_prefix", "tokens"),
    "shared_prefix_count": ("shared_prefix", "count"),
    "conversation_turns": ("conversation", "turns"),
    "user_message_tokens": ("conversation", "user_tokens"),
    "trace_file": ("trace_file",),
    "prompt_file": ("prompt_file",),
    "quality_result": ("quality_result",),
    "max_quality_loss_pct": ("max_quality_loss_pct",),
}


BOOL_FLAGS = (
    "dynamic_control_flow",
    "fixed_input_shapes",
    "long_sequence_generation",
    "multi_backend",
    "determinism_required",
)


def parse_yes_no(flag: str, value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in _YES:
        return True
    if lowered in _NO:
        return False
    raise UserError(f"--{flag.replace('_', '-')}: {value!r} is not yes or no")


def profile_from_flags(
    base: WorkloadProfile | None = None, stage: str | None = None, **flags: Any
) -> WorkloadProfile:
    """Build a profile from CLI-style flags, or override a loaded one (None = flag not given).

    Boolean traits accept yes/no/true/false. With a multi-stage base profile, `stage` names the
    stage the flags change; without it, flags on a multi-stage profile are a UserError.
    """
    given = {key: value for key, value in flags.items() if value is not None}
    unknown = sorted(set(given) - set(FLAG_FIELDS))
    if unknown:
        raise UserError(f"unknown flag(s): {', '.join(unknown)}; known: {', '.join(FLAG_FIELDS)}")
    data = base.model_dump(mode="json") if base is not None else {"title": "Workload from flags"}
    # The flags are written into the profile's data (the validation input, so that an error
    # names the field by its path and the flag), then the whole profile is validated again.
    stages = data.setdefault("stages", [{}])
    names = [s.name for s in base.stages] if base is not None else ["main"]
    if stage is not None:
        if stage not in names:
            raise UserError(f"--stage {stage!r} is not in the profile; stages: {', '.join(names)}")
        target = stages[names.index(stage)]
    elif given and len(stages) > 1:
        raise UserError(
            f"the profile has {len(stages)} stages; choose one with --stage ({', '.join(names)})"
        )
    else:
        target = stages[0]
    single = len(stages) == 1
    where = "" if single else f"stages[{stages.index(target)}]."
    names = {where + ".".join(FLAG_FIELDS[key]): "--" + key.replace("_", "-") for key in given}
    for key, value in given.items():
        if key in BOOL_FLAGS:
            value = parse_yes_no(key, value)
        node = target
        *parents, leaf = FLAG_FIELDS[key]
        for parent in parents:
            if not isinstance(node.get(parent), dict):
                node[parent] = {}
            node = node[parent]
        node[leaf] = value
        if key == "gpu" and "memory_gb" not in given:
            target["gpu"]["memory_gb"] = None  # re-derive from the new GPU type
    try:
        profile = WorkloadProfile.model_validate(data)
    except ValidationError as exc:
        message = describe_validation_error(exc, single=single, names=names)
        raise UserError(f"flags: {message}") from None
    check_traffic_files(profile, "flags")
    check_model_names(profile, "flags")
    return profile


__all__ = [
    "check_model_names",
    "check_stage_model",
    "check_traffic_files",
    "load_profile",
    "parse_yes_no",
    "profile_from_dict",
    "profile_from_flags",
]
