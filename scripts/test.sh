#!/usr/bin/env bash
# Sets up .venv (scripts/setup.sh) and runs lint and the whole test suite, real CPU engines and
# browser tests included. Extra arguments go to pytest (e.g. -m "not slow").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Browser tests use Debian's Chromium (Playwright's own browser download does not work offline).
if ! command -v chromium >/dev/null 2>&1; then
  (apt-get update -q && apt-get install -y -q chromium) >/dev/null 2>&1 \
    || echo "warning: could not install chromium; browser tests will be skipped"
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest "$@"
