#!/bin/bash
# The short form of exp.sh: one `vllm serve` of llama-2-7b (random weights, bf16, the engine args
# of data/reference/h200_llama2-7b_capacity_settled) and, against that one server, through this
# harness's `openai` client (log in /tmp/exp/log):
# a. `bench calibrate`: closed-loop ladder 1/8/32/128 over 1,024/128 and 128/512 (the held-out
#    512/256 chat shape left out), then settled levels near the knee of p99 TTFT 300 ms /
#    TPOT 50 ms on the first mix;
# b. the settled capacity search of the held-out 512/256 chat shape
#    (plan-cap-chat-h100-openai.yaml, SLO p99 TTFT 300 ms / TPOT 50 ms);
# c. `vllm bench serve`, 1,500 Poisson requests (random 512/256, ignore_eos, seed 302,
#    --goodput ttft:300 tpot:50) at the found rate F.
# The 2,048/128 long-prompt check of exp.sh is left out here.
# Expects the checkout at /tmp/repo and vLLM installed under /tmp/site; reuses a checkpoint
# written earlier under /tmp/models.
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
stamp a server up
python3 -m bench calibrate --backend openai --model llama-2-7b \
  --engine-arg base_url=http://127.0.0.1:8000 --engine-arg prompt_format=text \
  --mix 1024x128 --mix 128x512 --ladder 1,8,32,128 --stage-duration-s 6 --settled-probes 3 \
  --slo-ttft-ms 300 --slo-tpot-ms 50 --level-duration-s 12 --budget-s 220 --dtype bfloat16 \
  --store $R/store.sqlite --out $R/calibration.json > $R/calibrate.log 2>&1
echo "calibrate rc $?"; tail -5 $R/calibrate.log
stamp b chat search
python3 -m bench campaign $P/plan-cap-chat-h100-openai.yaml --out $R/cap-chat --budget-s 330 \
  > $R/cap-chat.log 2>&1
echo "rc $?"; tail -25 $R/cap-chat.log
F=$(python3 - <<'PY'
import glob, json
for f in glob.glob('/tmp/exp/cap-chat/**/result.json', recursive=True):
    r = json.load(open(f)); pr = r.get('pattern_report') or {}
    if pr.get('max_rate_rps'): print(round(pr['max_rate_rps'], 2))
PY
)
F=${F:-14}
stamp c found chat: $F
VBS='import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))'
name=vbs-chat-r$F-n1500
python3 -c "$VBS" --backend vllm --base-url http://127.0.0.1:8000 --endpoint /v1/completions \
  --model llama-2-7b --tokenizer $CK --dataset-name random --random-input-len 512 \
  --random-output-len 256 --random-range-ratio 0 --ignore-eos --num-prompts 1500 \
  --request-rate $F --seed 302 --goodput ttft:300 tpot:50 \
  --percentile-metrics ttft,tpot,e2el --metric-percentiles 50,90,99 --disable-tqdm \
  --save-result --save-detailed --result-dir $R/vbs --result-filename $name.json \
  > $R/vbs/$name.log 2>&1
echo "vbs $name rc $?"; grep -E "Request goodput|P99 TTFT|P99 TPOT|Request throughput" $R/vbs/$name.log
kill $SERVER; wait $SERVER
stamp done
echo FINISHED
