#!/usr/bin/env bash
# Sets up .venv (scripts/setup.sh) and runs lint and the whole test suite, real CPU engines and
# browser tests included. Extra arguments go to pytest (e.g. -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Browser tests use Debian's Chromium (Playwright's own browser download does not work offline);
# the PDF report test rasterises pages with poppler's pdftoppm.
if ! command -v chromium >/dev/null 2>&1 || ! command -v pdftoppm >/dev/null 2>&1; then
  if [[ $(id -u) == 0 ]]; then
    (apt-get update -q && apt-get install -y -q chromium poppler-utils) >/dev/null 2>&1 \
      || echo "warning: could not install chromium/poppler-utils; those tests will be skipped"
  else
    echo "warning: chromium or pdftoppm missing (install: apt-get install chromium poppler-utils)"
  fi
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest "$@"
