#!/bin/bash
# The LLM engine mechanisms on one GPU, run detached (log in /tmp/exp/log), in this order:
# a. plan-prefix.yaml: llama-2-7b with a shared 1,024-token prefix and with 4-turn conversations,
#    prefix caching on and off, and a replay of examples/traces/mooncake_small.jsonl;
# b. plan-moe.yaml: the qwen3-30b-a3b decode ladder (c1/8/32/128);
# c. plan-long-load.yaml: llama-3.1-8b with 16,000-token prompts at c1/4/16, chunked prefill at
#    2,048 and 8,192 batch tokens.
# Every plan asks vLLM to initialise the random weights itself (load_format=dummy), so only the
# presets' config.json and tokenizer are written. Plans are read from this folder inside the
# repository copy at /tmp/repo; vLLM and this project's dependencies are on PYTHONPATH (/tmp/site).
set -u
R=/tmp/exp
mkdir -p $R
export PYTHONPATH=/tmp/site:/tmp/repo ADVISOR_MODEL_CACHE=/tmp/models VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
P=/tmp/repo/examples/campaigns/gpu-llm-mechanisms
cd /tmp/repo
T0=$(date +%s)
stamp() { echo "=== $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s $*"; }
stamp start
nvidia-smi > $R/nvidia-smi.txt 2>&1
nvidia-smi -q > $R/nvidia-smi-q.txt 2>&1
python3 -m bench env > $R/bench-env.txt 2>&1
for part in prefix:700 moe:300 long-load:450; do
  name=${part%%:*}; budget=${part##*:}
  stamp $name
  python3 -m bench campaign $P/plan-$name.yaml --out $R/$name --budget-s $budget > $R/$name.log 2>&1
  echo "rc $?"; tail -15 $R/$name.log
done
stamp done
echo FINISHED
