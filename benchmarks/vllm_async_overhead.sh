#!/usr/bin/env bash
# vLLM's own measure of what streaming through the async engine costs against `LLM.generate`.
#
# Issue #3 asks our `vllm` backend (AsyncLLM, streaming every output delta) to be within 5% of
# `LLM.generate` on the same prompts. This runs vLLM's own `vllm bench throughput` twice on the
# same model and random 128/128-token dataset: once through `LLM.generate` and once with
# `--async-engine` (AsyncLLM, every request's generator consumed step by step, as our backend and
# vLLM's OpenAI server do). Their ratio is the async-engine overhead vLLM's own tool sees, the
# yardstick for our backend's fidelity ratio. Stats logging is off in both (the `LLM` default).
#
#   benchmarks/vllm_async_overhead.sh MODEL_DIR OUT_DIR [NUM_PROMPTS]
set -euo pipefail

model=${1:?model dir}
out=${2:?out dir}
prompts=${3:-1024}
mkdir -p "$out"
common=(
  --model "$model" --dtype float16 --random-input-len 128 --random-output-len 128
  --random-range-ratio 0 --num-prompts "$prompts"
  --num-warmups 256 --max-num-seqs 256 --gpu-memory-utilization 0.85 --max-model-len 1024
  --disable-log-stats --seed 0
)
for mode in llm async; do
  extra=()
  [ "$mode" = async ] && extra=(--async-engine)
  cmd=(python3 -m vllm.entrypoints.cli.main bench throughput "${common[@]}" "${extra[@]}"
       --output-json "$out/bench_throughput_$mode.json")
  echo "${cmd[*]}" > "$out/bench_throughput_$mode.cmd"
  "${cmd[@]}" > "$out/bench_throughput_$mode.log" 2>&1 || { tail -30 "$out/bench_throughput_$mode.log"; exit 1; }
  grep -E "^Throughput" "$out/bench_throughput_$mode.log"
done
