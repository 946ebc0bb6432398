#!/bin/bash
# The second held-out workload on the H100 and the rest of the chat check: one `vllm serve` of
# llama-2-7b (random weights, bf16, the engine args of data/reference/h200_llama2-7b_capacity_settled
# and of exp-one-server.sh), and against that one server (log in /tmp/exp/log):
# a. the product's settled capacity search of the held-out 2,048/128 long-prompt shape through
#    this harness's `openai` client (plan-cap-long-h100-openai.yaml, SLO p99 TTFT 1,000 ms /
#    TPOT 50 ms);
# b. `vllm bench serve`, 1,500 Poisson requests per rate (random 2,048/128, ignore_eos, seed 302,
#    --goodput ttft:1000 tpot:50) at the found rate F;
# c. `vllm bench serve` of the 512/256 chat shape (seed 302, --goodput ttft:300 tpot:50) at 1.1 and
#    1.25 times its found rate 20.25 req/s (data/reference/h100_llama2-7b_capacity_heldout_runs.json);
# d. the long shape at 1.1 F and 1.25 F.
# Expects the checkout at /tmp/repo and vLLM installed under /tmp/site.
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
stamp checkpoint $CK
python3 -m vllm.entrypoints.openai.api_server --model $CK --served-model-name llama-2-7b \
  --dtype bfloat16 --gpu-memory-utilization 0.85 --max-num-seqs 256 --max-model-len 4096 \
  --host 127.0.0.1 --port 8000 > $R/vllm-serve.log 2>&1 &
SERVER=$!
python3 -c "
import time, urllib.request
for _ in range(300):
    try:
        urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2); break
    except Exception:
        time.sleep(1)
"
stamp a server up, long search
python3 -m bench campaign $P/plan-cap-long-h100-openai.yaml --out $R/cap-long --budget-s 420 \
  > $R/cap-long.log 2>&1
echo "rc $?"; tail -25 $R/cap-long.log
F=$(python3 - <<'PY'
import glob, json
for f in glob.glob('/tmp/exp/cap-long/**/result.json', recursive=True):
    r = json.load(open(f)); pr = r.get('pattern_report') or {}
    if pr.get('max_rate_rps'): print(round(pr['max_rate_rps'], 2))
PY
)
F=${F:-8}
stamp b found long: $F
VBS='import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))'
vbs() {  # shape-name input output rate ttft-limit
  local name=vbs-$1-r$4-n1500
  python3 -c "$VBS" --backend vllm --base-url http://127.0.0.1:8000 --endpoint /v1/completions \
    --model llama-2-7b --tokenizer $CK --dataset-name random --random-input-len $2 \
    --random-output-len $3 --random-range-ratio 0 --ignore-eos --num-prompts 1500 \
    --request-rate $4 --seed 302 --goodput ttft:$5 tpot:50 \
    --percentile-metrics ttft,tpot,e2el --metric-percentiles 50,90,99 --disable-tqdm \
    --save-result --save-detailed --result-dir $R/vbs --result-filename $name.json \
    > $R/vbs/$name.log 2>&1
  echo "vbs $name rc $?"; grep -E "Request goodput|P99 TTFT|P99 TPOT|Request throughput" $R/vbs/$name.log
}
vbs long 2048 128 $F 1000
stamp c chat 1.1 and 1.25 F
vbs chat 512 256 22.28 300
vbs chat 512 256 25.31 300
stamp d long 1.1 and 1.25 F
vbs long 2048 128 $(python3 -c "print(round($F*1.1, 2))") 1000
vbs long 2048 128 $(python3 -c "print(round($F*1.25, 2))") 1000
kill $SERVER; wait $SERVER
stamp done
echo FINISHED
