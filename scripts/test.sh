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
# The store tests run against a real PostgreSQL: Debian's server binaries (initdb, pg_ctl), and a
# throwaway server for this run only (temporary folder, 127.0.0.1 on a free port, stopped on exit).
if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && ! command -v initdb >/dev/null; then
  if [[ $(id -u) == 0 ]]; then
    (apt-get update -q && apt-get install -y -q postgresql) >/dev/null 2>&1 \
      || echo "warning: could not install postgresql; the PostgreSQL store tests will be skipped"
  else
    echo "warning: PostgreSQL missing (install: apt-get install postgresql); its tests are skipped"
  fi
fi
# The harness-speed test (tests/benchmarks/test_harness_speed_openai.py) drives the real openai
# client against a canned SSE answer from Debian's nginx (one worker on 127.0.0.1, its own config).
if ! command -v nginx >/dev/null 2>&1 && [[ ! -x /usr/sbin/nginx ]]; then
  if [[ $(id -u) == 0 ]]; then
    (apt-get update -q && apt-get install -y -q nginx) >/dev/null 2>&1 \
      || echo "warning: could not install nginx; the harness-speed test will be skipped"
  else
    echo "warning: nginx missing (install: apt-get install nginx); the harness-speed test is skipped"
  fi
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
if pg_exports=$(.venv/bin/python -m tests.pg_server start); then
  eval "$pg_exports"  # ADVISOR_TEST_PG_URL, ADVISOR_TEST_PG_ROOT
  trap '.venv/bin/python -m tests.pg_server stop "$ADVISOR_TEST_PG_ROOT"' EXIT
else
  echo "warning: could not start a PostgreSQL server; the PostgreSQL store tests will be skipped"
fi
.venv/bin/python -m pytest "$@"
