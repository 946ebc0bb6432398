#!/bin/bash
# Fixed-rate runs of `vllm bench serve` long enough for the in-flight count to stop climbing:
# a `vllm serve` of llama-2-7b (random weights, bf16, the search's engine args), then 1,500
# requests at 22, 20, 24, 21 and 23 req/s and 500 at 24 and 25.3 (the short probe, same server).
# Log in /tmp/exp/log3; pack.py strips the per-token gaps from the results for the trip back.
set -u
R=/tmp/exp
mkdir -p $R/vbs
export PYTHONPATH=/tmp/site:/tmp/repo ADVISOR_MODEL_CACHE=/tmp/models VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
cd /tmp/repo
T0=$(date +%s)
stamp() { echo "=== $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s $*"; }
nvidia-smi > $R/nvidia-smi.txt 2>&1
python3 -m bench env > $R/bench-env.txt 2>&1
CK=$(python3 -c "from bench.engines.models import ensure_preset; print(ensure_preset('llama-2-7b', 0, 'bfloat16'))" 2>$R/ckpt.err | tail -1)
stamp checkpoint $CK
python3 -m vllm.entrypoints.openai.api_server --model $CK --served-model-name llama-2-7b \
  --dtype bfloat16 --gpu-memory-utilization 0.85 --max-num-seqs 256 --max-model-len 4096 \
  --host 127.0.0.1 --port 8000 > $R/vllm-serve.log 2>&1 &
python3 -c "
import time, urllib.request
for _ in range(300):
    try:
        urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2); break
    except Exception:
        time.sleep(1)
"
stamp server up
VBS='import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))'
vbs() {  # rate repeat prompts
  python3 -c "$VBS" --backend vllm --base-url http://127.0.0.1:8000 --endpoint /v1/completions \
    --model llama-2-7b --tokenizer $CK --dataset-name random --random-input-len 512 \
    --random-output-len 256 --random-range-ratio 0 --ignore-eos --num-prompts $3 \
    --request-rate $1 --seed $((200 + $2)) --goodput ttft:300 tpot:50 \
    --percentile-metrics ttft,tpot,e2el --metric-percentiles 50,90,99 --disable-tqdm \
    --save-result --save-detailed --result-dir $R/vbs --result-filename vbs-r$1-n$3-rep$2.json \
    > $R/vbs/vbs-r$1-n$3-rep$2.log 2>&1
  echo "vbs rate $1 rep $2 n $3 rc $?"; grep -E "Request goodput|P99 TTFT|P99 TPOT|Request throughput" $R/vbs/vbs-r$1-n$3-rep$2.log
}
for spec in "22 1 1500" "24 1 500" "20 1 1500" "24 1 1500" "21 1 1500" "25.3 1 500" "23 1 1500"; do
  vbs $spec
done
stamp done
pkill -f api_server
echo FINISHED3
