#!/usr/bin/env bash
# Sets up .venv (without the CPU vLLM build unless asked) and starts the Streamlit app on
# http://127.0.0.1:8501 with the embedded SQLite store. Extra arguments go to streamlit.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -x .venv/bin/streamlit ]] || scripts/setup.sh "${SETUP_ARGS:---no-engines}"
exec .venv/bin/streamlit run app.py "$@"
