#!/bin/bash
# The settled capacity searches on one H200 (run detached; log in /tmp/exp/log):
# a. llama-2-7b random-weight checkpoint (bf16); b. the settled search in-process (`vllm` backend);
# c. a `vllm serve` of the same checkpoint and engine args, and `vllm bench serve` for 1,500
#    Poisson requests at the found rate F, 1.15 F and 1.3 F (seeds 300+); d. the settled search
#    through the `openai` backend against a `vllm serve` the step starts.
# (Plan paths as in this repository; on the machine both plans lay beside this script, same content.)
set -u
R=/tmp/exp
mkdir -p $R/vbs
export PYTHONPATH=/tmp/site:/tmp/repo ADVISOR_MODEL_CACHE=/tmp/models VLLM_USE_FLASHINFER_SAMPLER=0
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
P=/tmp/repo/data/reference/h200_llama2-7b_capacity_settled
cd /tmp/repo
T0=$(date +%s)
stamp() { echo "=== $(date -u +%H:%M:%S) +$(( $(date +%s) - T0 ))s $*"; }
stamp start
nvidia-smi > $R/nvidia-smi.txt 2>&1
python3 -m bench env > $R/bench-env.txt 2>&1
CK=$(python3 -c "from bench.engines.models import ensure_preset; print(ensure_preset('llama-2-7b', 0, 'bfloat16'))" 2>$R/ckpt.err | tail -1)
stamp a checkpoint $CK
python3 -m bench campaign $P/plan-cap-inproc.yaml --out $R/cap-inproc --budget-s 700 > $R/cap-inproc.log 2>&1
echo "rc $?"; tail -30 $R/cap-inproc.log
F=$(python3 - <<'PY'
import glob, json
for f in glob.glob('/tmp/exp/cap-inproc/**/result.json', recursive=True):
    r = json.load(open(f)); pr = r.get('pattern_report') or {}
    if pr.get('max_rate_rps'): print(round(pr['max_rate_rps'], 2))
PY
)
F=${F:-22}
stamp b found in-process: $F
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
stamp c server up
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
    --request-rate $1 --seed $((300 + $2)) --goodput ttft:300 tpot:50 \
    --percentile-metrics ttft,tpot,e2el --metric-percentiles 50,90,99 --disable-tqdm \
    --save-result --save-detailed --result-dir $R/vbs --result-filename vbs-r$1-n$3-rep$2.json \
    > $R/vbs/vbs-r$1-n$3-rep$2.log 2>&1
  echo "vbs rate $1 rep $2 n $3 rc $?"; grep -E "Request goodput|P99 TTFT|P99 TPOT|Request throughput" $R/vbs/vbs-r$1-n$3-rep$2.log
}
for x in 1 1.15 1.3; do
  vbs $(python3 -c "print(round($F * $x, 2))") 2 1500
done
kill $SERVER; sleep 8
stamp d openai search
python3 -m bench campaign /tmp/repo/examples/campaigns/h200-llama2-7b-capacity-settled-openai.yaml --out $R/cap-openai --budget-s 700 > $R/cap-openai.log 2>&1
echo "rc $?"; tail -30 $R/cap-openai.log
stamp done
echo FINISHED
