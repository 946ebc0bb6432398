"""The configuration search and its calibration as report tables (typed, bounded).

The search table lists the configurations of a stage (TP x replicas x precision) with memory per
GPU and the estimate beside any stored measurement of exactly that configuration; the calibration
table puts every stored level's leave-one-out prediction (the serving model's step time with
factors fitted without its run: the one calibration) beside its measurement, with the MAPE and
where the predictor stands against the 10%-per-partition gate in its note.
"""

from __future__ import annotations

from advisor.report.model import ReferenceTable
from advisor.sizing.calibration import Calibration
from advisor.sizing.configurations import FP8_ACCURACY_NOTE, ConfigurationSearch
from bench.core.metric_catalog import metric as catalogue_metric

TPOT_P50, OUTPUT = catalogue_metric("tpot_ms_p50"), catalogue_metric("output_throughput_tok_s")
"""What the step model predicts and the stored levels measured (the tables' headings)."""

MAX_CALIBRATION_ROWS = 200
"""Rows of the calibration table at most (a large store is summarised by its MAPE anyway)."""


def configurations_table(search: ConfigurationSearch | None) -> ReferenceTable | None:
    """One row per configuration that fits, best first; None without a search."""
    if search is None or not search.estimates:
        return None
    rows: list[list[str | float | int | None]] = []
    for estimate in search.estimates:
        prediction = estimate.prediction
        measured = next((m for m in estimate.measured if m.concurrency == search.concurrency), None)
        rows.append(
            [
                estimate.label + ("" if estimate.within_gpu_budget else " (beyond the budget)"),
                estimate.deployment.gpus,
                round(estimate.weights_gb_per_gpu, 1),
                round(estimate.kv_cache_gb_per_gpu, 2)
                if estimate.kv_cache_gb_per_gpu is not None
                else None,
                round(prediction.tpot_ms, 2) if prediction else None,
                round(prediction.output_throughput_tok_s) if prediction else None,
                round(measured.measured_tpot_ms, 2) if measured else None,
                round(measured.measured_output_tok_s) if measured else None,
                round(estimate.efficiency, 3) if estimate.efficiency is not None else None,
            ]
            # Beside the speed, only when the stage measured quality (quality_result).
            + ([estimate.quality or "not measured"] if search.quality_note else [])
        )
    notes = list(search.trade_offs)
    if search.quality_note is not None:
        notes.append(search.quality_note)
    elif any(e.deployment.precision.uses_fp8 for e in search.estimates):
        notes.append(FP8_ACCURACY_NOTE)
    return ReferenceTable(
        title=f"Configurations of {search.framework} on {search.gpu_budget} GPU(s), best first "
        f"(recommended: {search.recommended}, {search.recommended_basis})",
        source="advisor configuration search (docs/configurations.md)",
        conditions=f"concurrency {search.concurrency}, objective {search.objective}",
        note="Predicted figures are estimates; measured figures are stored runs of exactly that "
        "configuration.",
        caveats=notes + [f"excluded: {text}" for text in search.excluded],
        keys=[
            "configuration",
            "gpus",
            "weights_gb_per_gpu",
            "kv_cache_gb_per_gpu",
            "predicted_tpot_ms",
            "predicted_output_tok_s",
            "measured_tpot_ms",
            "measured_output_tok_s",
            "efficiency",
        ]
        + (["quality"] if search.quality_note else []),
        columns=[
            "Configuration",
            "GPUs",
            "Weights GB/GPU",
            "KV GB/GPU",
            f"Predicted {TPOT_P50.column}",
            f"Predicted {OUTPUT.unit}",
            f"Measured {TPOT_P50.column}",
            f"Measured {OUTPUT.unit}",
            "Floor / step",
        ]
        + (["Quality"] if search.quality_note else []),
        rows=rows,
    )


def calibration_table(calibration: Calibration | None) -> ReferenceTable | None:
    """Every stored level, its leave-one-out prediction and error; None with no stored level."""
    if calibration is None or not calibration.points:
        return None
    rows: list[list[str | float | int | None]] = [
        [
            point.partition,
            point.model,
            point.gpu,
            point.concurrency,
            round(point.measured_tpot_ms, 2),
            round(point.predicted_tpot_ms or 0, 2),
            round((point.tpot_error or 0) * 100, 1),
            round(point.measured_output_tok_s),
            round(point.predicted_output_tok_s or 0),
            round((point.throughput_error or 0) * 100, 1),
        ]
        for point in calibration.points[:MAX_CALIBRATION_ROWS]
    ]
    caveats = [
        f"{p.partition}: {p.points} level(s), TPOT MAPE {p.tpot_mape:.1%}, tok/s MAPE "
        f"{p.throughput_mape:.1%}"
        + ("" if p.within_gate is None else (" (under 10%)" if p.within_gate else " (above 10%)"))
        for p in calibration.partitions
    ]
    if len(calibration.points) > MAX_CALIBRATION_ROWS:
        caveats.append(f"first {MAX_CALIBRATION_ROWS} of {len(calibration.points)} levels shown")
    return ReferenceTable(
        title="Estimate accuracy: each stored level predicted with its own measurement left out",
        source="stored runs (data/reference and the results store)",
        note=calibration.verdict,
        caveats=caveats,
        keys=[
            "partition",
            "model",
            "gpu",
            "concurrency",
            "measured_tpot_ms",
            "predicted_tpot_ms",
            "tpot_error_pct",
            "measured_output_tok_s",
            "predicted_output_tok_s",
            "throughput_error_pct",
        ],
        columns=[
            "Engine / TP / precision",
            "Model",
            "GPU",
            "Concurrency",
            f"Measured {TPOT_P50.spec.label} ({TPOT_P50.unit})",
            f"Predicted {TPOT_P50.spec.label} ({TPOT_P50.unit})",
            f"{TPOT_P50.spec.label} error %",
            f"Measured {OUTPUT.unit}",
            f"Predicted {OUTPUT.unit}",
            f"{OUTPUT.unit} error %",
        ],
        rows=rows,
    )


__all__ = ["calibration_table", "configurations_table"]
