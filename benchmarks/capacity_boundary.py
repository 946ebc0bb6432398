"""Where a capacity search's boundary lies: its probes beside `vllm bench serve` at fixed rates.

    python benchmarks/capacity_boundary.py --search LABEL=DIR... --vbs DIR

`--search` takes a campaign output dir (or a raw folder holding `steps-*.tgz`) of a capacity
search; `--vbs` a folder of `vllm bench serve --save-result --save-detailed` JSON files. Prints
one markdown table: per probe / per run the offered rate, requests, p99 TTFT and TPOT, the
attainment (requests meeting TTFT <= the SLO's limit and TPOT <= its limit, over the planned
requests) with its 95% Wilson interval, and two diagnostics of where the misses come from:
the most requests in flight during the probe, and the share of the misses among the last 10%
of the requests sent (near 100%: the misses are the end of a still-growing queue, not spread
over the probe).
"""

from __future__ import annotations

import argparse
import json
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core.pattern_reports import CapacityReport, wilson_interval
from bench.core.schema import RunResult

NS = 1e9


def _run_dirs(root: Path, scratch: Path) -> list[Path]:
    for archive in sorted(root.glob("steps-*.tgz")):
        with tarfile.open(archive) as tar:
            tar.extractall(scratch / archive.stem, filter="data")
    found = [*root.rglob("result.json"), *scratch.rglob("result.json")]
    return sorted({path.parent for path in found})


def _tail_share(starts: list[float], missed: list[bool]) -> float | None:
    """Share of the misses among the last 10% of the requests, in send order."""
    order = sorted(range(len(starts)), key=starts.__getitem__)
    total = sum(missed)
    if not total:
        return None
    tail = order[int(0.9 * len(order)) :]
    return sum(missed[i] for i in tail) / total


def _cell(attainment_met: int, planned: int) -> str:
    low, high = wilson_interval(attainment_met, planned)
    return f"{attainment_met / planned:.1%} [{low:.1%}, {high:.1%}]"


def search_rows(label: str, root: Path) -> list[list[str]]:
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for run_dir in _run_dirs(root, Path(scratch)):
            run = RunResult.model_validate_json((run_dir / "result.json").read_text())
            report = run.pattern_report
            records = [
                json.loads(line)
                for line in (run_dir / "records.jsonl").read_text().splitlines()
                if line.strip()
            ]
            if not isinstance(report, CapacityReport):
                if run.config.load.pattern == "rate" and run.summary is not None:
                    rows.append(_rate_row(label, run, records))
                continue
            slo = report.slo
            for probe in report.probes:
                if probe.feasible is None:
                    continue
                mine = [r for r in records if r.get("phase") == probe.phase and not r["warmup"]]
                most = _most_in_flight(mine)
                missed = [_misses(r, slo.ttft_ms, slo.tpot_ms) for r in mine]
                met = sum(not m for m in missed)
                share = _tail_share([r["start_ns"] / NS for r in mine], missed)
                verdict = "pass" if probe.feasible else "fail"
                if probe.kind == "confirm":
                    verdict += f" (pair {'pass' if probe.pooled_feasible else 'fail'})"
                rows.append(
                    [
                        f"{label} #{probe.index} {probe.kind}",
                        f"{probe.level:g}",
                        f"{len(mine)}/{probe.planned_requests}",
                        f"{probe.ttft_ms.p99:.0f}" if probe.ttft_ms else "-",
                        f"{probe.tpot_ms.p99:.1f}" if probe.tpot_ms else "-",
                        _cell(met, probe.planned_requests),
                        str(most),
                        "-" if share is None else f"{share:.0%}",
                        verdict,
                    ]
                )
    return rows


def _most_in_flight(records: list[dict]) -> int:
    events = sorted(
        [(r["start_ns"], 1) for r in records] + [(r["end_ns"], -1) for r in records if r["end_ns"]]
    )
    level, most = 0, 0
    for _, step in events:
        level += step
        most = max(most, level)
    return most


def _rate_row(label: str, run: RunResult, records: list[dict]) -> list[str]:
    """A plain rate run (a `bench capacity-check` check): one row, judged like a probe."""
    slo = run.config.slo
    mine = [r for r in records if not r["warmup"]]
    missed = [_misses(r, slo.ttft_ms, slo.tpot_ms) for r in mine]
    met = sum(not m for m in missed)
    share = _tail_share([r["start_ns"] / NS for r in mine], missed)
    summary = run.summary
    return [
        f"{label} ({run.config.load.arrival} rate run)",
        f"{run.config.load.rate_rps:g}",
        f"{len(mine)}/{len(mine)}",
        f"{summary.ttft_ms.p99:.0f}" if summary.ttft_ms else "-",
        f"{summary.tpot_ms.p99:.1f}" if summary.tpot_ms else "-",
        _cell(met, len(mine)),
        str(_most_in_flight(mine)),
        "-" if share is None else f"{share:.0%}",
        "pass" if met >= 0.99 * len(mine) else "fail",
    ]


def _misses(record: dict, ttft_ms: float | None, tpot_ms: float | None) -> bool:
    if record.get("error") or not record["chunk_ns"] or not record["end_ns"]:
        return True
    ttft = (record["chunk_ns"][0] - record["start_ns"]) / 1e6
    tokens = record["output_tokens"]
    tpot = (record["end_ns"] - record["chunk_ns"][0]) / 1e6 / (tokens - 1) if tokens > 1 else 0
    return (ttft_ms is not None and ttft > ttft_ms) or (tpot_ms is not None and tpot > tpot_ms)


def vbs_rows(folder: Path, ttft_ms: float, tpot_ms: float) -> list[list[str]]:
    rows = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        ttfts, lens = data.get("ttfts", []), data.get("output_lens", [])
        planned = data.get("num_prompts") or len(ttfts)
        # Per-request TPOT: from the per-token gaps (a full --save-detailed file) or from the
        # `tpots_s` list a slimmed file keeps instead of them.
        if "itls" in data:
            tpots = [
                sum(g) / (n - 1) if n > 1 else 0.0 for g, n in zip(data["itls"], lens, strict=False)
            ]
        else:
            tpots = data.get("tpots_s")
        if tpots is not None:
            missed = [
                ttft * 1000 > ttft_ms or tpot * 1000 > tpot_ms or not tokens
                for ttft, tpot, tokens in zip(ttfts, tpots, lens, strict=False)
            ]
            met = sum(not m for m in missed)
        else:
            # Neither kept: vLLM's own goodput (requests meeting --goodput ttft:.. tpot:.., per
            # second of the run) gives the count met; the misses' place is judged on TTFT alone.
            met = round(data["request_goodput"] * data["duration"])
            missed = [ttft * 1000 > ttft_ms for ttft in ttfts]
        # vLLM's detailed lists are in request order, which is the send order.
        share = _tail_share(list(range(len(missed))), missed)
        rows.append(
            [
                f"vllm bench serve {path.stem}",
                f"{data.get('request_rate')}",
                f"{data.get('completed')}/{planned}",
                f"{data.get('p99_ttft_ms', float('nan')):.0f}",
                f"{data.get('p99_tpot_ms', float('nan')):.1f}",
                _cell(met, planned),
                f"{data.get('max_concurrent_requests', '-')}",
                "-" if share is None else f"{share:.0%}",
                "pass" if met >= 0.99 * planned else "fail",
            ]
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--search", action="append", default=[], help="LABEL=DIR")
    parser.add_argument("--vbs", type=Path, help="folder of vllm bench serve result JSON files")
    parser.add_argument("--ttft-ms", type=float, default=300.0)
    parser.add_argument("--tpot-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    rows: list[list[str]] = []
    for item in args.search:
        label, _, folder = item.partition("=")
        if not folder or not Path(folder).is_dir():
            print(f"--search {item!r}: expected LABEL=DIR with an existing DIR", file=sys.stderr)
            return 2
        rows += search_rows(label, Path(folder))
    if args.vbs is not None:
        if not args.vbs.is_dir():
            print(f"--vbs {args.vbs}: not a folder", file=sys.stderr)
            return 2
        rows += vbs_rows(args.vbs, args.ttft_ms, args.tpot_ms)
    header = [
        "probe / run",
        "rate req/s",
        "requests",
        "p99 TTFT ms",
        "p99 TPOT ms",
        "attainment [95% CI]",
        "most in flight",
        "misses in last 10% sent",
        "verdict",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
