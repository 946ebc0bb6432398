#!/usr/bin/env bash
# Plumbing for one session on the lent GPU host (see .library/device): the steps each `run` call
# does there, kept here so the reference data says exactly how it was produced.
#
# The host has no package index and each call carries at most 64 MiB, so offline bundles
# (shared/tools/offline-bundle) travel one 50 MiB part per call and are staged in /tmp, which
# lives as long as the machine stays warm. Long work runs detached (setsid) so transfer calls can
# go on beside it; each detached job runs from its own copy of the tree (/tmp/repo-NAME), so
# neither the next call's sync nor another job's copy can pull files from under it.
# `prep` needs the vLLM bundle installed first (it brings pydantic, which the image lacks). Plans
# with onnxruntime steps want both bundles: PYTHONPATH=/tmp/site:/tmp/site_ort.
#
#   benchmarks/device_session.sh stage SRC_DIR STAGE_DIR     copy a carried part into STAGE_DIR
#   benchmarks/device_session.sh install STAGE_DIR TARGET    cat + untar + install.sh TARGET
#   benchmarks/device_session.sh prep MODEL...               detached: write the random-weight
#                                                            fp16 checkpoints (/tmp/prep.done)
#   benchmarks/device_session.sh campaign OUT BUDGET_S PLAN...  detached gpu_campaign.py run once
#                                                            prep is done (OUT/DONE at the end)
#   benchmarks/device_session.sh wait OUT SECONDS            until OUT/DONE or SECONDS; log tail
#   benchmarks/device_session.sh collect OUT DEST            campaign.json/.log + runs.tgz to DEST
set -euo pipefail

export PYTHONPATH=${PYTHONPATH:-/tmp/site}
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 ADVISOR_MODEL_CACHE=/tmp/models

snapshot_repo() {  # snapshot_repo DIR: a copy of the tree for one detached job
  rm -rf "$1" && mkdir -p "$1"
  tar --exclude=./.gpu --exclude=./.venv --exclude=./.git -cf - . | tar -xf - -C "$1"
}

command=${1:?usage: see the header}
shift
case $command in
  stage)
    mkdir -p "$2" && cp "$1"/part_* "$2"/ && ls "$2"
    ;;
  install)
    work=$(mktemp -d /tmp/unpack.XXXXXX)
    cat "$1"/part_* > "$work/bundle.tar"
    tar xf "$work/bundle.tar" -C "$work"
    sh "$work/install.sh" "$2" > "$work.log" 2>&1 || { tail -20 "$work.log"; exit 1; }
    rm -rf "$work"
    echo "installed into $2"
    ;;
  prep)
    snapshot_repo /tmp/repo-prep
    cat > /tmp/prep.sh <<SH
cd /tmp/repo-prep
for model in $*; do
  python3 -c "import sys, time; t = time.time(); from bench.models import resolve_model; \\
print(resolve_model(sys.argv[1], dtype='float16').path, round(time.time() - t, 1), 's')" \$model \\
    || exit 1
done
touch /tmp/prep.done
SH
    setsid bash /tmp/prep.sh > /tmp/prep.log 2>&1 < /dev/null &
    echo "prep started: $*"
    ;;
  campaign)
    out=$1 budget=$2
    shift 2
    plan_args=""
    for plan in "$@"; do plan_args="$plan_args --plan $plan"; done
    repo="/tmp/repo-$(basename "$out")"
    snapshot_repo "$repo"
    mkdir -p "$out"
    cat > "$out.sh" <<SH
while [ ! -f /tmp/prep.done ]; do sleep 2; done
cd $repo
python3 benchmarks/gpu_campaign.py $plan_args --out $out --budget-s $budget --step-estimate-s 60
touch $out/DONE
SH
    setsid bash "$out.sh" > "$out/campaign.log" 2>&1 < /dev/null &
    echo "campaign started: $plan_args -> $out"
    ;;
  wait)
    deadline=$((SECONDS + $2))
    while [ ! -f "$1/DONE" ] && [ $SECONDS -lt $deadline ]; do sleep 3; done
    grep -E '^\[ *[0-9.]+s\]' "$1/campaign.log" || true
    tail -c 1500 "$1/campaign.log"
    [ -f "$1/DONE" ] && echo "CAMPAIGN DONE" || echo "campaign still running"
    ;;
  collect)
    mkdir -p "$2"
    cp "$1/campaign.json" "$1/campaign.log" "$2"/
    tar czf "$2/runs.tgz" -C "$1" runs
    ls -la "$2"
    ;;
  *)
    echo "unknown command $command" >&2
    exit 2
    ;;
esac
