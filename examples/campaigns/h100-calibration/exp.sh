#!/bin/bash
# The calibration levels and held-out checks of llama-2-7b (random weights, bf16) on one GPU, run
# detached (log in /tmp/exp/log), in this order (on an H200, whose chat search is shipped, d before
# b and c):
# a. the calibration levels: plan-ladder.yaml (closed-loop ladder 1/8/32/128/256 over 1,024/128
#    and 128/512) through the in-process `vllm` backend;
# b. the settled capacity search for the 512/256 chat shape (SLO p99 TTFT 300 ms / TPOT 50 ms;
#    plan-cap-chat-h100.yaml on an H100, plan-cap-chat.yaml on an H200);
# c. a `vllm serve` of the same checkpoint and engine args, and `vllm bench serve` for 1,500
#    Poisson requests (random 512/256, ignore_eos, --goodput ttft:300 tpot:50) at the found
#    rate F, 1.1 F and 1.25 F (seed 302);
# d. the settled search for the 2,048/128 long-prompt shape (plan-cap-long.yaml, SLO p99 TTFT
#    1,000 ms / TPOT 50 ms), then `vllm bench serve` as in c with --goodput ttft:1000 tpot:50.
# Plans are read from this folder inside the repository copy at /tmp/repo.
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
found() {  # campaign folder -> the search's max_rate_rps, rounded
python3 - "$1" <<'PY'
import glob, json, sys
for f in glob.glob(sys.argv[1] + '/**/result.json', recursive=True):
    r = json.load(open(f)); pr = r.get('pattern_report') or {}
    if pr.get('max_rate_rps'): print(round(pr['max_rate_rps'], 2))
PY
}
serve() {
  python3 -m vllm.entrypoints.openai.api_server --model $CK --served-model-name llama-2-7b \
    --dtype bfloat16 --gpu-memory-utilization 0.85 --max-num-seqs 256 --max-model-len 4096 \
    --host 127.0.0.1 --port 8000 > $R/vllm-serve-$1.log 2>&1 &
  SERVER=$!
  python3 -c "
import time, urllib.request
for _ in range(300):
    try:
        urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2); break
    except Exception:
        time.sleep(1)
"
}
VBS='import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))'
vbs() {  # shape rate input output ttft_ms
  local name=vbs-$1-r$2-n1500
  python3 -c "$VBS" --backend vllm --base-url http://127.0.0.1:8000 --endpoint /v1/completions \
    --model llama-2-7b --tokenizer $CK --dataset-name random --random-input-len $3 \
    --random-output-len $4 --random-range-ratio 0 --ignore-eos --num-prompts 1500 \
    --request-rate $2 --seed 302 --goodput ttft:$5 tpot:50 \
    --percentile-metrics ttft,tpot,e2el --metric-percentiles 50,90,99 --disable-tqdm \
    --save-result --save-detailed --result-dir $R/vbs --result-filename $name.json \
    > $R/vbs/$name.log 2>&1
  echo "vbs $name rc $?"; grep -E "Request goodput|P99 TTFT|P99 TPOT|Request throughput" $R/vbs/$name.log
}
long_part() {
stamp d long search
python3 -m bench campaign $P/plan-cap-long.yaml --out $R/cap-long --budget-s 700 > $R/cap-long.log 2>&1
echo "rc $?"; tail -25 $R/cap-long.log
FL=$(found $R/cap-long | tail -1)
FL=${FL:-8}
stamp d found long: $FL
serve long
stamp d server up
for x in 1 1.1 1.25; do
  vbs long $(python3 -c "print(round($FL * $x, 2))") 2048 128 1000
  stamp d done x$x
done
kill $SERVER; wait $SERVER; sleep 3
}
chat_part() {
stamp b chat search
python3 -m bench campaign $P/$CHATPLAN --out $R/cap-chat --budget-s 700 > $R/cap-chat.log 2>&1
echo "rc $?"; tail -25 $R/cap-chat.log
F=$(found $R/cap-chat | tail -1)
F=${F:-20}
stamp b found chat: $F
serve chat
stamp c server up
for x in 1 1.1 1.25; do
  vbs chat $(python3 -c "print(round($F * $x, 2))") 512 256 300
  stamp c done x$x
done
kill $SERVER; wait $SERVER; sleep 3
}
# On an H100 (the calibration's unseen GPU) the chat shape comes first, as planned; on an H200,
# whose chat search is shipped (h200_llama2-7b_capacity_settled), the long-prompt shape first.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  CHATPLAN=plan-cap-chat.yaml; long_part; chat_part
else
  CHATPLAN=plan-cap-chat-h100.yaml; chat_part; long_part
fi
stamp done
echo FINISHED
