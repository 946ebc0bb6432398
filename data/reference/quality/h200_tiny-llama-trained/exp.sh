#!/bin/bash
# Quality beside speed on one H200 through the in-process vLLM engine (run detached; log in
# /tmp/exp/log). The tiny-llama-trained checkpoint is the one trained on the CPU (carried, sha256
# of model.safetensors in the README); a. `bench quality` at bf16 / fp8 / fp8-kv on the shipped
# evaluation files; b. one `bench run` per precision (concurrency 16, 20 s, 128/128 tokens).
set -u
R=/tmp/exp
mkdir -p $R
export PYTHONPATH=/tmp/site:/tmp/repo ADVISOR_MODEL_CACHE=/tmp/models VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
cd /tmp/repo
T0=$(date +%s)
stamp() { echo "=== $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s $*"; }
stamp start
nvidia-smi > $R/nvidia-smi.txt 2>&1
python3 -m bench env > $R/bench-env.txt 2>&1
Q=data/reference/quality/cpu_tiny-llama-trained
stamp a quality
python3 -m bench quality --model tiny-llama-trained --engine vllm \
  --precision bf16 --precision fp8 --precision fp8-kv \
  --text $Q/held_out.txt --labelled $Q/choices.jsonl --out $R/quality > $R/quality.log 2>&1
echo "quality rc $?"; tail -8 $R/quality.log
for p in bf16 fp8 fp8-kv; do
  stamp b run $p
  case $p in
    bf16) EA="" ;;
    fp8) EA="--option precision.quantization=fp8" ;;
    fp8-kv) EA="--option precision.quantization=fp8 --option precision.kv_cache_dtype=fp8" ;;
  esac
  python3 -m bench run --backend vllm --model tiny-llama-trained --pattern concurrency \
    --concurrency 16 --duration-s 20 --prompt-tokens 128 --output-tokens 128 --dtype bfloat16 \
    --engine-arg gpu_memory_utilization=0.5 --engine-arg max_model_len=1024 $EA \
    --out $R/run-$p --store $R/store.db > $R/run-$p.log 2>&1
  echo "run $p rc $?"; tail -5 $R/run-$p.log
done
stamp done
echo FINISHED
