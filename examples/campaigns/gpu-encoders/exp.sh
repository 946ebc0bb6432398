#!/bin/bash
# Encoders on one GPU, run detached (log in /tmp/exp/log), in this order:
# a. plan-pytorch.yaml: bert-base and vit-base batch ladders through `pytorch`, their dynamic-batching
#    capacity searches (E2E p99 <= 50 ms), and bert-base's search without the batcher;
# b. `bench quality` of the tiny-bert-classifier preset on the GPU through `pytorch` at fp32 (baseline),
#    bf16, fp16, int8 and fp8 on the held-out lines of data/reference/quality/cpu_tiny-bert-classifier;
# c. plan-torch-compile.yaml (bert-base behind the batcher, padded to compiled buckets);
# d. once ONNX Runtime's CUDA build is installed in /tmp/ortsite (/tmp/ort-ready), if the script
#    has run under 800 s: the same quality run through `onnxruntime` (fp32, fp16, int8), then
#    plan-onnxruntime.yaml.
# Plans are read from this folder inside the repository copy at /tmp/repo; HELD_OUT is the
# held-out file's path there.
set -u
R=/tmp/exp
mkdir -p $R
export PYTHONPATH=/tmp/site:/tmp/repo ADVISOR_MODEL_CACHE=/tmp/models
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
P=/tmp/repo/examples/campaigns/gpu-encoders
HELD_OUT=${HELD_OUT:-/tmp/repo/data/reference/quality/cpu_tiny-bert-classifier/held_out.jsonl}
cd /tmp/repo
T0=$(date +%s)
stamp() { echo "=== $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s $*"; }
stamp start
nvidia-smi > $R/nvidia-smi.txt 2>&1
nvidia-smi -q > $R/nvidia-smi-q.txt 2>&1
python3 -m bench env > $R/bench-env.txt 2>&1
stamp a pytorch
python3 -m bench campaign $P/plan-pytorch.yaml --out $R/pytorch --budget-s 420 > $R/pytorch.log 2>&1
echo "rc $?"; tail -22 $R/pytorch.log
stamp b quality pytorch
python3 -m bench quality --model tiny-bert-classifier --engine pytorch --precision fp32 \
  --precision bf16 --precision fp16 --precision int8 --precision fp8 --labelled $HELD_OUT \
  --out $R/quality-pytorch > $R/quality-pytorch.log 2>&1
echo "rc $?"; tail -8 $R/quality-pytorch.log
stamp c torch-compile
python3 -m bench campaign $P/plan-torch-compile.yaml --out $R/torch-compile --budget-s 300 > $R/torch-compile.log 2>&1
echo "rc $?"; tail -10 $R/torch-compile.log
stamp d waiting for onnxruntime
for _ in $(seq 1 60); do [ -f /tmp/ort-ready ] && break; sleep 5; done
if [ -f /tmp/ort-ready ] && [ $(( $(date +%s) - T0 )) -lt 800 ]; then
  export PYTHONPATH=/tmp/ortsite:/tmp/site:/tmp/repo
  python3 -c "import torch, onnxruntime; print(onnxruntime.__version__, onnxruntime.get_available_providers())"
  stamp d quality onnxruntime
  python3 -m bench quality --model tiny-bert-classifier --engine onnxruntime --precision fp32 \
    --precision fp16 --precision int8 --labelled $HELD_OUT \
    --out $R/quality-onnxruntime > $R/quality-onnxruntime.log 2>&1
  echo "rc $?"; tail -8 $R/quality-onnxruntime.log
  stamp d onnxruntime
  python3 -m bench campaign $P/plan-onnxruntime.yaml --out $R/onnxruntime --budget-s 400 > $R/onnxruntime.log 2>&1
  echo "rc $?"; tail -20 $R/onnxruntime.log
else
  stamp d onnxruntime skipped: not installed or past 800 s
fi
stamp done
echo FINISHED
