"""Side-by-side client capacity: our harness (`python -m bench run --backend openai`) and GuideLLM
against one fast C server on 127.0.0.1 (not a unit test).

nginx answers every POST with the same canned OpenAI streaming completion (16 SSE chunks, a
usage chunk, `[DONE]`), `/v1/models` and `/health`, so the server costs next to nothing and the
client is what is measured. Each client runs an open loop at constant rates, lowest first; a
rate is *sustained* when errors stay under 1% and the achieved rate reaches 98% of the target.
Per rate: achieved rate, error share, scheduling lag (actual send - planned send) p50/p99, and
the client's CPU seconds and peak RSS (its whole process tree, sampled with psutil).

    .venv/bin/python benchmarks/client_capacity.py --guidellm /work/guidellm-venv/bin/guidellm \
        --rates 100,200,400,800,1600 --duration-s 10 --json out/client_capacity.json

GuideLLM is not a dependency of this project: install it in its own virtual environment
(`python3 -m venv /work/guidellm-venv && /work/guidellm-venv/bin/pip install guidellm`).
Only 127.0.0.1 is contacted; nginx is started on a free port and stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
OUTPUT_TOKENS = 16
PROMPT_TOKENS = 128
MAX_ERROR_SHARE = 0.01
MIN_ACHIEVED_SHARE = 0.98


# --------------------------------------------------------------------------- the server


def canned_stream(chat: bool) -> str:
    """The SSE body of one streamed answer (nginx string escapes): `/v1/completions` chunks
    (`text`, what our openai backend sends to) or `/v1/chat/completions` chunks (`delta`, what
    GuideLLM's openai_http backend sends to by default)."""

    def event(text: str, finish: str | None = None, usage: dict | None = None) -> str:
        choice = {"index": 0, "finish_reason": finish}
        choice |= {"delta": {"content": text}} if chat else {"text": text}
        body = {
            "id": "cmpl-0",
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 0,
            "model": "canned",
            "choices": [choice],
            **({"usage": usage} if usage else {}),
        }
        return "data: " + json.dumps(body, separators=(",", ":")) + "\\n\\n"

    usage = {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": OUTPUT_TOKENS,
        "total_tokens": PROMPT_TOKENS + OUTPUT_TOKENS,
    }
    chunks = "".join(event(" a") for _ in range(OUTPUT_TOKENS))
    return chunks + event("", "length", usage) + "data: [DONE]\\n\\n"


def nginx_config(folder: Path, port: int) -> str:
    models = '{"object":"list","data":[{"id":"canned","object":"model"}]}'
    return f"""worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log warn;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  client_body_temp_path {folder}/body;
  keepalive_requests 10000000;
  server {{
    listen 127.0.0.1:{port};
    location = /health {{ default_type application/json; return 200 '{{}}'; }}
    location = /v1/models {{ default_type application/json; return 200 '{models}'; }}
    location /v1/chat/ {{ default_type text/event-stream; return 200 '{canned_stream(True)}'; }}
    location / {{ default_type text/event-stream; return 200 '{canned_stream(False)}'; }}
  }}
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Nginx:
    """nginx in the foreground on 127.0.0.1:PORT, one worker process, stopped on exit."""

    def __init__(self, nginx: str, folder: Path) -> None:
        self.port = free_port()
        self.folder = folder
        (folder / "nginx.conf").write_text(nginx_config(folder, self.port))
        self.process = subprocess.Popen(
            [nginx, "-c", str(folder / "nginx.conf"), "-p", str(folder), "-g", "daemon off;"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nginx did not listen on 127.0.0.1:{self.port}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)


# --------------------------------------------------------------------------- measuring a client


class TreeSampler(threading.Thread):
    """Peak RSS (sum over the process tree) and CPU seconds (user + system, every process the
    tree ever held) of a client, sampled every 0.1 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.stop_event = threading.Event()
        self.peak_rss = 0
        self.cpu_by_pid: dict[int, float] = {}

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            rss = 0
            for proc in procs:
                try:
                    with proc.oneshot():
                        rss += proc.memory_info().rss
                        times = proc.cpu_times()
                        self.cpu_by_pid[proc.pid] = times.user + times.system
                except psutil.NoSuchProcess:
                    continue
            self.peak_rss = max(self.peak_rss, rss)
            self.stop_event.wait(0.1)

    @property
    def cpu_s(self) -> float:
        return sum(self.cpu_by_pid.values())


def run_measured(command: list[str], log: Path, timeout_s: float) -> dict:
    started = time.perf_counter()
    with log.open("w") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT)
        sampler = TreeSampler(process.pid)
        sampler.start()
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for child in psutil.Process(process.pid).children(recursive=True):
                child.kill()
            process.kill()
            returncode = process.wait()
        sampler.stop_event.set()
        sampler.join()
    return {
        "returncode": returncode,
        "wall_s": time.perf_counter() - started,
        "client_cpu_s": sampler.cpu_s,
        "client_peak_rss_mb": sampler.peak_rss / 2**20,
    }


def lag_ms(lags_s: list[float]) -> tuple[float | None, float | None]:
    if not lags_s:
        return None, None
    values = np.asarray(lags_s) * 1e3
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def ours(url: str, rate: float, seconds: float, out: Path, processes: int = 1) -> dict:
    """Our harness through its real CLI: worker process, openai backend (aiohttp), records;
    `processes` > 1 splits the schedule across that many client processes
    (load.client_processes)."""
    command = [
        sys.executable, "-m", "bench", "run", "--backend", "openai", "--model", "tiny-llama",
        "--engine-arg", f"base_url={url}", "--engine-arg", "scrape_metrics=false",
        "--pattern", "rate", "--rate", str(rate), "--duration-s", str(seconds),
        "--option", "load.arrival=constant", "--prompt-tokens", str(PROMPT_TOKENS),
        "--output-tokens", str(OUTPUT_TOKENS), "--out", str(out), "--no-store",
        "--option", f"load.client_processes={processes}",
    ]  # fmt: skip
    # Text prompts are prepared before the run's clock (up to ~5 ms each on a busy 2-core VM).
    timeout_s = seconds * 6 + 120 + rate * seconds * 0.01
    usage = run_measured(command, out.with_suffix(".log"), timeout_s=timeout_s)
    if not (out / "result.json").exists():
        tail = out.with_suffix(".log").read_text()[-2000:]
        raise RuntimeError(f"our client wrote no result (exit {usage['returncode']}):\n{tail}")
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    measured = [r for r in records if not r.get("warmup")]
    ok = [r for r in measured if r["error"] is None]
    lags = [(r["start_ns"] - r["scheduled_ns"]) / 1e9 for r in measured if r.get("scheduled_ns")]
    result = json.loads((out / "result.json").read_text())
    harness = result.get("pattern_report", {}).get("harness") or {}
    return {
        **usage,
        "processes": [
            {key: row[key] for key in ("process", "sent", "achieved_rps", "scheduling_lag_p99_ms")}
            for row in harness.get("processes", [])
        ],
        "sent": len(measured),
        "errors": len(measured) - len(ok),
        "achieved_rps": result["phases"][0]["summary"]["request_throughput_rps"],
        "lag_ms": lag_ms(lags),
    }


def guidellm(executable: str, tokenizer: Path, url: str, rate: float, seconds: float, out: Path):
    """GuideLLM's `run` with a constant profile and its openai_http backend (httpx)."""
    out.mkdir(parents=True, exist_ok=True)
    report = out / "benchmarks.json"
    data = f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},output_tokens={OUTPUT_TOKENS}"
    command = [
        executable, "run",
        "--backend", f"kind=openai_http,target={url},model=canned",
        "--profile", f"kind=constant,rate={rate}",
        "--constraint", f"kind=max_duration,seconds={seconds}",
        "--data", data,
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--output", f"kind=json,path={report}",
        "--disable-console-interactive",
    ]  # fmt: skip
    usage = run_measured(command, out / "guidellm.log", timeout_s=seconds * 6 + 240)
    if not report.exists():
        return {**usage, "sent": 0, "errors": None, "achieved_rps": None, "lag_ms": (None, None)}
    benchmark = json.loads(report.read_text())["benchmarks"][0]
    requests = benchmark["requests"]
    done = requests.get("successful") or []
    failed = requests.get("errored") or []
    # Incomplete = still in flight when the duration ended (cancelled): not errors.
    incomplete = requests.get("incomplete") or []
    lags = []
    for request in done + failed + incomplete:
        timings = request.get("info", {}).get("timings") or request.get("timings") or {}
        if timings.get("targeted_start") and timings.get("request_start"):
            lags.append(timings["request_start"] - timings["targeted_start"])
    window = benchmark.get("duration") or seconds
    return {
        **usage,
        "sent": len(done) + len(failed) + len(incomplete),
        "errors": len(failed),
        "incomplete": len(incomplete),
        "achieved_rps": len(done) / window,
        "lag_ms": lag_ms(lags),
    }


def sustained(row: dict, rate: float) -> bool:
    sent = row["sent"] or 0
    return (
        sent > 0
        and row["errors"] is not None
        and row["errors"] / sent < MAX_ERROR_SHARE
        and (row["achieved_rps"] or 0) >= MIN_ACHIEVED_SHARE * rate
    )


def markdown(rows: list[dict]) -> str:
    """The rows as the table docs/harness-speed.md shows."""
    lines = [
        "| client | target req/s | achieved req/s | errors | lag p50 / p99 ms | client CPU s "
        "| wall s | client peak RSS MB | sustained | load avg before |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for row in rows:
        p50, p99 = row["lag_ms"]
        lag = "-" if p50 is None else f"{p50:,.1f} / {p99:,.1f}"
        lines.append(
            f"| {row['client']} | {row['target_rps']:,.0f} | {row['achieved_rps'] or 0:,.1f} "
            f"| {row['errors']} of {row['sent']:,} | {lag} | {row['client_cpu_s']:.1f} "
            f"| {row['wall_s']:.0f} | {row['client_peak_rss_mb']:,.0f} "
            f"| {'yes' if row['sustained'] else 'no'} | {row['loadavg_1min_before']:.1f} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="100,200,400,800,1600")
    parser.add_argument("--duration-s", type=float, default=10.0)
    parser.add_argument("--clients", default="ours,guidellm")
    parser.add_argument("--guidellm", default=shutil.which("guidellm") or "guidellm")
    parser.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument(
        "--client-processes",
        default="1",
        help="ours: comma-separated client process counts to measure (load.client_processes)",
    )
    parser.add_argument(
        "--keep-going", action="store_true", help="measure every rate, sustained or not"
    )
    parser.add_argument(
        "--table", type=Path, help="print the Markdown table of a --json file and exit"
    )
    args = parser.parse_args()
    if args.table:
        print(markdown(json.loads(args.table.read_text())["rows"]))
        return 0
    rates = [float(r) for r in args.rates.split(",")]
    sys.path.insert(0, str(ROOT))
    from bench.engines.models import ensure_preset

    tokenizer = ensure_preset("tiny-llama")  # GuideLLM's synthetic prompts need a tokenizer
    rows = []
    with tempfile.TemporaryDirectory(prefix="client-capacity-") as tmp:
        folder = Path(tmp)
        server = Nginx(args.nginx, folder)
        try:
            clients = []
            for client in args.clients.split(","):
                if client == "ours":
                    counts = [int(n) for n in args.client_processes.split(",")]
                    clients += [(f"ours x{n}" if n > 1 else "ours", n) for n in counts]
                else:
                    clients.append((client, 1))
            for client, processes in clients:
                for rate in rates:  # lowest first; stop at the first rate not sustained
                    out = folder / f"{client.replace(' ', '-')}-{rate:g}"
                    load_before = os.getloadavg()[0]
                    if client.startswith("ours"):
                        row = ours(server.url, rate, args.duration_s, out, processes)
                    else:
                        row = guidellm(
                            args.guidellm, tokenizer, server.url, rate, args.duration_s, out
                        )
                    row |= {
                        "client": client,
                        "target_rps": rate,
                        "sustained": sustained(row, rate),
                        "loadavg_1min_before": load_before,
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    if not row["sustained"] and not args.keep_going:
                        break
        finally:
            server.stop()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"cpus": os.cpu_count(), "rows": rows}, indent=1))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
