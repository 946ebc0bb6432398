"""What a recommendation says about deploying its framework: the fleet answer's configuration
(layout, precision, engine settings, capacity and basis), the configuration search's chosen
configuration with its figures and how far they can be trusted, and the measured quality of a
fixed precision."""

from __future__ import annotations

from advisor.decide.fleet_answer import basis_words, deployed_parallelism
from advisor.decide.models import Recommendation
from advisor.sizing.calibration import Calibration
from advisor.sizing.configurations import ConfigurationSearch
from advisor.sizing.deployments import DeploymentFigures
from advisor.sizing.fleet import FleetOption
from advisor.workload.profile import StageProfile
from advisor.workload.quality import (
    fixed_precision_risk,
    profile_quality_name,
    quality_note,
    stage_quality,
)


def apply_fleet(recommendation: Recommendation, chosen: FleetOption, stage: StageProfile) -> None:
    """The fleet answer's configuration is what the recommendation deploys: its layout over
    the fleet's GPUs, its precision and engine settings, its capacity and basis."""
    recommendation.capacity = chosen.capacity
    recommendation.capacity_basis = basis_words(chosen, stage.gpu.type or "GPU")
    configuration = recommendation.configuration
    same = (
        configuration.parallelism is not None
        and configuration.parallelism.tensor_parallel_size
        == chosen.parallelism.tensor_parallel_size
        and configuration.precision == chosen.precision
        and configuration.weight_format == chosen.weight_format
    )
    update: dict = {
        "framework": chosen.framework,
        "label": chosen.label,
        "parallelism": deployed_parallelism(chosen),
        "precision": chosen.precision,
        "weight_format": "int8" if chosen.weight_format == "int8" else None,
        "engine_args": {**configuration.engine_args, **chosen.engine_args},
    }
    if not same:
        # The configuration search's figures were for another layout or precision.
        update["figures"] = None
    recommendation.configuration = configuration.model_copy(update=update)


def add_fixed_precision_quality(recommendation: Recommendation, stage: StageProfile) -> None:
    """A stage without a configuration search (forward kind) runs at the profile's precision:
    page 1 still names the measured deltas, and a risk when that precision loses more than the
    tolerance."""
    quality = stage_quality(stage.quality_result)
    if quality is None:
        return
    recommendation.caveats.append(quality_note(quality, stage.quality_result or ""))
    name = profile_quality_name(stage.precision.dtype, stage.precision.quantization)
    risk = fixed_precision_risk(quality, name, stage.max_quality_loss_pct)
    if risk is not None:
        recommendation.caveats.append(risk)


def add_deployment(
    recommendation: Recommendation,
    search: ConfigurationSearch,
    calibration: Calibration,
    search_gpu: str | None = None,
) -> None:
    """Name the configuration in the recommendation: TP, replicas, precision, engine arguments,
    the trade-offs in numbers and how far the estimate can be trusted."""
    best = search.best()
    assert best is not None
    deployment = best.deployment
    prediction = best.prediction
    figures = DeploymentFigures(basis=search.recommended_basis)
    if prediction is not None:
        figures = figures.model_copy(
            update={
                "predicted_tpot_ms": round(prediction.tpot_ms, 3),
                "predicted_output_throughput_tok_s": round(prediction.output_throughput_tok_s, 1),
                "predicted_tok_s_per_gpu": round(prediction.output_throughput_tok_s_per_gpu, 1),
                "predicted_tok_s_per_user": round(prediction.tok_s_per_user, 2),
                "at_concurrency": prediction.concurrency,
            }
        )
    # The engine arguments stay the framework's own options: the search's parallelism and
    # precision are their own fields, said once.
    recommendation.configuration = recommendation.configuration.model_copy(
        update={
            "framework": deployment.framework,
            "label": best.label,
            "parallelism": deployment.parallelism,
            "precision": deployment.precision,
            "figures": figures,
            "trade_offs": list(search.trade_offs),
            "estimate_accuracy": calibration.verdict,
        }
    )
    if search.recommended_basis == "estimate":
        recommendation.caveats.append(
            f"{best.label} is not measured: its figures are estimates (the serving model's "
            f"step time, {best.efficiency_source}; "
            f"{calibration.accuracy_of(best.deployment, search_gpu)})"
        )
    if not best.within_gpu_budget:
        within = [e for e in search.estimates if e.within_gpu_budget]
        why = (
            f"the fleet answer finds it cheaper for the peak than {within[0].label}"
            if within
            else f"nothing holds the model on {search.gpu_budget} at its precision"
        )
        recommendation.caveats.append(
            f"{best.label} needs {deployment.gpus} GPUs, more than the profile's "
            f"{search.gpu_budget}: {why}"
        )
    if search.quality_note is not None:  # the stage measured quality: name the deltas
        recommendation.caveats.append(search.quality_note)
    elif any(e.deployment.precision.uses_fp8 for e in search.estimates[: len(search.plan)]):
        from advisor.sizing.configurations import FP8_ACCURACY_NOTE

        recommendation.caveats.append(FP8_ACCURACY_NOTE)


__all__ = ["add_deployment", "add_fixed_precision_quality", "apply_fleet"]
