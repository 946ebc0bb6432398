"""Writes the example traces and prompt files in this folder (seeded; nothing is downloaded).

Run from the repository root: `python examples/traces/make_examples.py`. The files are small
synthetic stand-ins in the public layouts (Mooncake JSONL, Azure LLM inference CSV), generated
by this project; they are not samples of anyone's real traffic.
"""

from __future__ import annotations

import csv
import json
import random
from datetime import datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLOCK = 512  # Mooncake's block size: tokens per hash ID
WINDOW = 4096
"""Context window of llama-2-7b, the model the README's commands use (tiny-llama's too): no row
may ask for more, or `bench run` refuses the trace before it starts (bench/run/context_check.py)."""


def mooncake(path: Path, rows: int = 120, seed: int = 24) -> None:
    """Chat/RAG-like requests: 4 shared system prompts (2 blocks each, weighted), half of the
    requests also share one of 8 documents (3 blocks), then unique blocks; Poisson arrivals at
    ~4 req/s (timestamps in ms)."""
    rng = random.Random(seed)
    next_id = 1000
    systems = [[i * 2, i * 2 + 1] for i in range(4)]
    documents = [[100 + i * 3, 101 + i * 3, 102 + i * 3] for i in range(8)]
    t_ms = 0.0
    with path.open("w", encoding="utf-8") as handle:
        for _ in range(rows):
            blocks = list(rng.choices(systems, weights=[8, 4, 2, 1])[0])
            if rng.random() < 0.5:
                blocks += rng.choice(documents)
            unique = rng.randint(1, 2)
            blocks += list(range(next_id, next_id + unique))
            next_id += unique
            input_length = (len(blocks) - 1) * BLOCK + rng.randint(64, BLOCK)
            row = {
                "timestamp": int(t_ms),
                "input_length": input_length,
                "output_length": rng.randint(32, 256),
                "hash_ids": blocks,
            }
            handle.write(json.dumps(row) + "\n")
            t_ms += rng.expovariate(4.0) * 1000.0


def azure_csv(path: Path, rows: int = 120, seed: int = 25) -> None:
    """The Azure LLM inference trace layout: TIMESTAMP (datetime text), ContextTokens,
    GeneratedTokens; bursty arrivals (~3 req/s with occasional bursts). A context drawn past the
    window is clipped to what fits beside its generated tokens (2 of the 120 rows)."""
    rng = random.Random(seed)
    moment = datetime(2026, 1, 1, 12, 0, 0)
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for _ in range(rows):
            gap = rng.expovariate(20.0) if rng.random() < 0.2 else rng.expovariate(3.0)
            moment += timedelta(seconds=gap)
            context = max(16, int(rng.lognormvariate(6.5, 0.8)))
            generated = max(8, int(rng.lognormvariate(5.0, 0.6)))
            stamp = moment.strftime("%Y-%m-%d %H:%M:%S.%f")
            writer.writerow([stamp, min(context, WINDOW - generated), generated])


TOPICS = [
    "a database index",
    "TCP slow start",
    "a bloom filter",
    "the CAP theorem",
    "gradient checkpointing",
    "a B-tree",
    "paged attention",
    "consistent hashing",
]
SYSTEM = "You are a concise assistant for platform engineers. Answer in three sentences."


def prompts(jsonl: Path, csv_path: Path) -> None:
    """Prompt files: JSONL with text prompts and chat `messages` (a shared system prompt), and
    a CSV with a text column and an output-length column."""
    rng = random.Random(26)
    with jsonl.open("w", encoding="utf-8") as handle:
        for index, topic in enumerate(TOPICS):
            if index % 2:
                row = {
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        {"role": "user", "content": f"Explain {topic} to a new team member."},
                    ],
                    "output_tokens": rng.randint(32, 128),
                }
            else:
                row = {"text": f"{SYSTEM}\n\nQuestion: when should I use {topic}?"}
            handle.write(json.dumps(row) + "\n")
    with csv_path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "output_tokens"])
        for topic in TOPICS:
            writer.writerow([f"Summarise {topic} in one paragraph.", rng.randint(32, 128)])


def main() -> None:
    mooncake(HERE / "mooncake_small.jsonl")
    azure_csv(HERE / "azure_small.csv")
    prompts(HERE / "prompts.jsonl", HERE / "prompts.csv")


if __name__ == "__main__":
    main()
