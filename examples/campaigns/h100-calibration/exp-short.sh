#!/bin/bash
# The short form of exp.sh that fits one session's remaining device time (about 19 minutes with
# the staging): a. the calibration ladder (plan-ladder.yaml), b. the settled 512/256 chat search
# (plan-cap-chat-h100.yaml); no `vllm bench serve` checks and no long-prompt shape. Detached; log
# in /tmp/exp/log; pack.py packs what has finished.
set -u
R=/tmp/exp
mkdir -p $R/vbs
export PYTHONPATH=/tmp/site:/tmp/repo ADVISOR_MODEL_CACHE=/tmp/models VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
P=/tmp/repo/examples/campaigns/h100-calibration
cd /tmp/repo
T0=$(date +%s)
stamp() { echo "=== $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s $*"; }
stamp start
nvidia-smi > $R/nvidia-smi.txt 2>&1
nvidia-smi -q > $R/nvidia-smi-q.txt 2>&1
python3 -m bench env > $R/bench-env.txt 2>&1
CK=$(python3 -c "from bench.engines.models import ensure_preset; print(ensure_preset('llama-2-7b', 0, 'bfloat16'))" 2>$R/ckpt.err | tail -1)
stamp a checkpoint $CK
python3 -m bench campaign $P/plan-ladder.yaml --out $R/ladder --budget-s 500 > $R/ladder.log 2>&1
echo "rc $?"; tail -15 $R/ladder.log
stamp b chat search
python3 -m bench campaign $P/plan-cap-chat-h100.yaml --out $R/cap-chat --budget-s 600 > $R/cap-chat.log 2>&1
echo "rc $?"; tail -20 $R/cap-chat.log
stamp done
echo FINISHED
