"""What the stored records of a client fidelity check say about its differences (docs/fidelity.md).

    python benchmarks/client_fidelity_records.py data/reference/h200_llama2-7b_client_fidelity

Reads the check's `client-fidelity.json` and the harness records in its `runs.tgz` and prints,
for every harness run of a check made before each level had its own seed (every level used
seed = repeat, so a run's first requests were the prompts of the same repeat's lower levels,
which the server's prefix cache still held):

- TTFT p50 of the measured requests whose prompt an earlier run had sent, and of the others;
- TTFT p50 of the first wave (the first `level` requests sent) and of the later requests;
- ITL p50 and p99 of ours and of vLLM's run of the same level and repeat;

and, by regenerating the harness's prompts of one run (same seed, same generator) and
tokenising their text as the server did (with the model's tokenizer, BOS added), the prompt
length the server saw for a plain decode and for the length-matched text the harness sends now.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f}" if values else "      -"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument(
        "--tokenizer",
        help="Tokenizer of the check's model (default: the tiny-llama preset's, which has the "
        "same generated 32000-entry tokenizer as the llama-2-7b preset).",
    )
    parser.add_argument("--prompts", type=int, default=256, help="Prompts to re-tokenise.")
    args = parser.parse_args(argv)
    check_file = args.folder / "client-fidelity.json"
    if not check_file.exists():
        print(f"error: {check_file} not found", file=sys.stderr)
        return 2
    result = json.loads(check_file.read_text())
    check = result["check"]
    levels, warmup = check["levels"], check["warmup_requests"]
    factor, minimum = check["requests_per_level_factor"], check["min_requests"]

    def sent(level: int) -> int:
        return warmup + max(minimum, factor * level)

    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(args.folder / "runs.tgz") as archive:
            archive.extractall(tmp, filter="data")
        print("level repeat  TTFT p50 ms: resent   new    | first wave  later  (requests)")
        itl: list[str] = []
        for level in levels:
            earlier = [sent(lower) for lower in levels if lower < level]
            resent_up_to = max(earlier, default=0)  # request ids 1..this were sent before
            for repeat in range(check["repeats"]):
                path = Path(tmp) / f"harness-c{level}-r{repeat}" / "records.jsonl"
                if not path.exists():
                    continue
                records = [json.loads(line) for line in path.read_text().splitlines()]
                measured = sorted(
                    (r for r in records if not r["warmup"] and not r["error"] and r["chunk_ns"]),
                    key=lambda r: r["start_ns"],
                )

                def ttft(record: dict) -> float:
                    return (record["chunk_ns"][0] - record["start_ns"]) / 1e6

                resent = [ttft(r) for r in measured if int(r["id"][1:]) <= resent_up_to]
                new = [ttft(r) for r in measured if int(r["id"][1:]) > resent_up_to]
                first = [ttft(r) for r in measured[:level]]
                later = [ttft(r) for r in measured[level:]]
                print(
                    f"c{level:<4d} r{repeat}     {_median(resent)} {_median(new)}  | "
                    f"{_median(first)}  {_median(later)}  ({len(resent)} resent, {len(new)} new)"
                )
                ours = json.loads((path.parent / "result.json").read_text())["summary"]["itl_ms"]
                vllm_path = Path(tmp) / f"vllm-bench-serve-c{level}-r{repeat}.json"
                if vllm_path.exists():
                    theirs = json.loads(vllm_path.read_text())
                    itl.append(
                        f"c{level:<4d} r{repeat}  ITL p50 ours {ours['p50']:6.2f} vLLM "
                        f"{theirs['median_itl_ms']:6.2f}  p99 ours {ours['p99']:6.1f} vLLM "
                        f"{theirs['p99_itl_ms']:6.1f} ms"
                    )
        print("\n".join(itl))

    from transformers import AutoTokenizer

    from bench.core.config import GenerateWorkload, LengthDistribution
    from bench.engines.backends.openai import match_prompt_texts
    from bench.run.workload import RequestFactory

    if args.tokenizer is None:
        from bench.engines.models import resolve_model

        args.tokenizer = resolve_model("tiny-llama", dtype="bfloat16").path
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    workload = GenerateWorkload(
        prompt_tokens=LengthDistribution(mean=check["prompt_tokens"]),
        output_tokens=LengthDistribution(mean=check["output_tokens"]),
        seed=0,
    )
    factory = RequestFactory(workload, len(tokenizer), 0)
    ids = [list(next(factory).prompt_token_ids) for _ in range(args.prompts)]
    plain = [len(tokenizer(text)["input_ids"]) for text in tokenizer.batch_decode(ids)]
    specials = int(tokenizer.num_special_tokens_to_add())
    texts = [text for text, _ in match_prompt_texts(tokenizer, ids, specials)]
    matched = [len(tokenizer(text)["input_ids"]) for text in texts]
    print(
        f"server-side prompt tokens for {check['prompt_tokens']} requested ({args.prompts} "
        f"prompts of seed 0): plain decode {statistics.mean(plain):.1f} "
        f"[{min(plain)}-{max(plain)}], length-matched {statistics.mean(matched):.2f} "
        f"[{min(matched)}-{max(matched)}]"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
