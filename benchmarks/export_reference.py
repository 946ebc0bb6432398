"""Turn campaign output (`python -m bench campaign PLAN --out DIR`) into data/reference files.

    python benchmarks/export_reference.py CAMPAIGN_DIR... --out data/reference/NAME.json \
        --raw-dir data/reference/NAME

For every run folder (`result.json` + `records.jsonl`) under each campaign dir it writes the full
RunResult (environment fingerprint and reproduce command included) to `{"runs": [...]}`, with
the telemetry series cut to REFERENCE_SAMPLES points (the full series stays in the raw archive).
Telemetry figures are re-summarised over the measured window with
`bench.run.telemetry.summarize_telemetry(window_ns=)` from the run's own samples and records:
campaigns run before that option existed averaged utilisation, power and energy over model
loading too. Request counts are re-derived from the records with the summary's own definitions
(`recount_requests`): results written before the summary counted the harness's cancellations
apart (a stopped run, a capacity probe ended early) had them among the failures. The campaign's
files (`campaign.json` with fidelity checks, skipped steps and the
command; the plan; a `campaign.log` when one was kept) and the raw step folders (`steps/`, every
step's outcome and run folders) are copied to `--raw-dir`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core.metrics import MetricsAccumulator, iter_records_jsonl
from bench.core.schema import MetricsSummary, RunResult
from bench.run.telemetry import downsample, summarize_telemetry

REFERENCE_SAMPLES = 300  # telemetry points kept per run (memory/power charts); full series in raw


def measured_window(records_path: Path) -> tuple[tuple[int, int] | None, int]:
    """(first start, last end) of the measured records, and their successful output tokens."""
    lo = hi = None
    output_tokens = 0
    for record in iter_records_jsonl(records_path):
        if record.warmup:
            continue
        lo = record.start_ns if lo is None else min(lo, record.start_ns)
        hi = record.end_ns if hi is None else max(hi, record.end_ns)
        if record.error is None:
            output_tokens += record.output_tokens
    return ((lo, hi) if lo is not None else None), output_tokens


def recounted(summary: MetricsSummary, counts: MetricsAccumulator) -> MetricsSummary:
    """`summary` with its failed / cancelled / error rate as `counts` (its records) gives them.

    Only the counts move: a cancelled request never entered a latency or throughput figure,
    before or now. The records must be the summary's own (same requests and successes)."""
    if (counts.requests, counts.successful) != (summary.requests, summary.successful):
        raise SystemExit(
            f"the records ({counts.requests} requests, {counts.successful} successful) are not "
            f"the summary's ({summary.requests}, {summary.successful})"
        )
    answered = counts.requests - counts.cancelled
    return summary.model_copy(
        update={
            "failed": counts.failed,
            "cancelled": counts.cancelled,
            "error_rate": counts.failed / answered if answered else 0.0,
        }
    )


def recount_requests(result: RunResult, records_path: Path) -> None:
    """Re-derive the run's and each phase's request counts from its records (warm-up aside)."""
    whole = MetricsAccumulator()
    by_phase: dict[str, MetricsAccumulator] = {}
    for record in iter_records_jsonl(records_path):
        if record.warmup:
            continue
        whole.add(record)
        by_phase.setdefault(record.phase, MetricsAccumulator()).add(record)
    for phase in result.phases:
        phase.summary = recounted(phase.summary, by_phase.get(phase.name, MetricsAccumulator()))
    if result.summary is not None:
        result.summary = recounted(result.summary, whole)


def export_run(result_path: Path) -> RunResult:
    result = RunResult.model_validate_json(result_path.read_text())
    recount_requests(result, result_path.parent / "records.jsonl")
    window, output_tokens = measured_window(result_path.parent / "records.jsonl")
    old = result.telemetry
    result.telemetry = summarize_telemetry(
        old.samples,
        output_tokens,
        result.model.parameters if result.model else None,
        old.gpu_available,
        old.reason,
        window_ns=window,
    )
    result.telemetry.samples = downsample(old.samples, REFERENCE_SAMPLES)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("campaigns", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--raw-dir", type=Path, required=True)
    args = parser.parse_args()
    args.raw_dir.mkdir(parents=True, exist_ok=True)
    runs = []
    for campaign in args.campaigns:
        for result_path in sorted(campaign.rglob("result.json")):
            runs.append(export_run(result_path))
        shutil.copy(campaign / "campaign.json", args.raw_dir / f"campaign-{campaign.name}.json")
        for name, suffix in (("plan", ".yaml"), ("campaign", ".log")):
            if (campaign / f"{name}{suffix}").is_file():
                shutil.copy(
                    campaign / f"{name}{suffix}", args.raw_dir / f"{name}-{campaign.name}{suffix}"
                )
        with tarfile.open(args.raw_dir / f"steps-{campaign.name}.tgz", "w:gz") as tar:
            tar.add(campaign / "steps", arcname="steps")
    provenance = {
        "what": "Measured by `python -m bench campaign`; telemetry re-summarised over each "
        "run's measured window and request counts re-derived from its records by "
        "benchmarks/export_reference.py.",
        "campaign_commands": [
            json.loads((c / "campaign.json").read_text())["command"] for c in args.campaigns
        ],
        "raw": str(args.raw_dir),
    }
    payload = {"provenance": provenance, "runs": [r.model_dump(mode="json") for r in runs]}
    args.out.write_text(json.dumps(payload, indent=1))
    print(f"{len(runs)} runs -> {args.out}")


if __name__ == "__main__":
    main()
