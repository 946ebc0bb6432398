"""The tables of a shipped forward (encoder, vision) measurement, from its files (nothing typed
in): each `data/reference/<name>/table.py` calls `print_tables` on its own folder.

The ladder from `<name>_runs.json` (one batch in flight: ms per batch = 1000 / batches per
second); the capacity searches from the same file, with the batches the batcher formed at each
search's boundary probe counted from its records in `steps-*.tgz` (the requests of one batch
share the batch's end time, their first chunk's ns).
"""

from __future__ import annotations

import collections
import io
import json
import tarfile
from pathlib import Path


def records_of(here: Path, run_folder_name: str) -> list[dict]:
    for archive in sorted(here.glob("steps-*.tgz")):
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                if member.name.endswith(f"/{run_folder_name}/records.jsonl"):
                    data = tar.extractfile(member)
                    assert data is not None
                    text = io.TextIOWrapper(data, encoding="utf-8")
                    return [json.loads(line) for line in text if line.strip()]
    return []


def print_tables(here: Path) -> None:
    """The ladder and capacity tables of the measurement in folder `here` (its runs file is
    `here`'s name + `_runs.json` beside it); a model column where the file holds several."""
    runs = json.loads((here.parent / f"{here.name}_runs.json").read_text())["runs"]
    several = len({run["config"]["model"] for run in runs}) > 1
    head, rule = ("| model ", "|---") if several else ("", "")

    def model(config: dict) -> str:
        return f"| {config['model']} " if several else ""

    print(f"{head}| engine | batch | ms per batch | samples/s | E2E p99 ms | requests |")
    print(f"{rule}|---|---|---|---|---|---|")
    ladder = [run for run in runs if run["config"]["load"]["pattern"] == "concurrency"]
    ladder.sort(
        key=lambda run: (
            run["config"]["model"],
            run["config"]["backend"],
            run["config"]["workload"]["batch_size"],
        )
    )
    for run in ladder:
        config, summary = run["config"], run["summary"]
        batch, rps = config["workload"]["batch_size"], summary["request_throughput_rps"]
        print(
            f"{model(config)}| {config['backend']} | {batch} | {1000 / rps:.2f} | "
            f"{batch * rps:,.0f} | "
            f"{summary['e2e_ms']['p99']:.2f} | {summary['e2e_ms']['count']:,} |"
        )
    print()
    print(
        f"{head}| engine | batcher | capacity (samples/s) | first infeasible | E2E p99 at "
        "capacity ms | attainment | batches at capacity: mean (max) samples | probes |"
    )
    print(f"{rule}|---|---|---|---|---|---|---|---|")
    for run in runs:
        config, report = run["config"], run.get("pattern_report")
        if config["load"]["pattern"] != "capacity" or report is None:
            continue
        args = config["engine_args"]
        batcher = (
            f"max batch {args['max_batch_size']}, delay {args['max_queue_delay_ms']:g} ms"
            if "max_queue_delay_ms" in args
            else "none (batch 1)"
        )
        boundary = next(
            (p for p in report["probes"] if p["phase"] == report.get("boundary_phase")), None
        )
        folder = Path(run["log_path"]).parent.name  # the run's folder in the steps archive
        sizes = collections.Counter(
            record["chunk_ns"][0]
            for record in records_of(here, folder)
            if boundary is not None
            and record["phase"] == boundary["phase"]
            and not record["warmup"]
            and record["error"] is None
            and record["chunk_ns"]
        )
        batches = (
            f"{sum(sizes.values()) / len(sizes):.1f} ({max(sizes.values())})" if sizes else "-"
        )
        p99 = (boundary.get("e2e_ms") or {}).get("p99") if boundary else None
        attained = "-" if boundary is None else f"{boundary['attainment']:.1%}"
        print(
            f"{model(config)}| {config['backend']} | {batcher} | "
            f"{report['max_rate_rps'] or 0:g} | "
            f"{report['first_infeasible_rps'] or 0:g} | "
            f"{'-' if p99 is None else f'{p99:.1f}'} | "
            f"{attained} | "
            f"{batches} | {len(report['probes'])} |"
        )
