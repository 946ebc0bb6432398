#!/bin/bash
# Mixture-of-experts decode and 8-bit encoders on one GPU, run detached (log in /tmp/exp/log):
# a. ../gpu-llm-mechanisms/plan-moe.yaml: the qwen3-30b-a3b decode ladder (c1/8/32/128) through the
#    in-process vLLM engine. vLLM's fused-MoE operators live in `vllm/_moe_C_stable_libtorch.abi3.so`
#    (topk_softmax, moe_align_block_size); when MOE_SO names that file it is put beside vLLM
#    first, for an install that left it out;
# b. ../gpu-encoders/plan-8bit.yaml: bert-base and vit-base batch ladders at float16, INT8 and FP8
#    W8A8 through `pytorch`, then bert-base's dynamic-batching capacity search at INT8 and FP8.
# vLLM and this project's dependencies are on PYTHONPATH (/tmp/site); the repository copy is at
# /tmp/repo. Results under /tmp/exp/<part>.
set -u
R=/tmp/exp
mkdir -p $R
export PYTHONPATH=/tmp/site:/tmp/repo ADVISOR_MODEL_CACHE=/tmp/models VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
C=/tmp/repo/examples/campaigns
cd /tmp/repo
T0=$(date +%s)
stamp() { echo "=== $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s $*"; }
stamp start
nvidia-smi > $R/nvidia-smi.txt 2>&1
nvidia-smi -q > $R/nvidia-smi-q.txt 2>&1
python3 -m bench env > $R/bench-env.txt 2>&1
if [ -n "${MOE_SO:-}" ] && [ -f "$MOE_SO" ]; then
  cp "$MOE_SO" /tmp/site/vllm/ && echo "MoE operators: $(sha256sum /tmp/site/vllm/$(basename $MOE_SO))"
fi
stamp moe
python3 -m bench campaign $C/gpu-llm-mechanisms/plan-moe.yaml --out $R/moe --budget-s 420 > $R/moe.log 2>&1
echo "rc $?"; tail -15 $R/moe.log
stamp 8bit
python3 -m bench campaign $C/gpu-encoders/plan-8bit.yaml --out $R/8bit --budget-s 600 > $R/8bit.log 2>&1
echo "rc $?"; tail -40 $R/8bit.log
stamp done
echo FINISHED
