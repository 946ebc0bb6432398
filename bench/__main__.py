"""`python -m bench`: the bench command line (see bench/cli.py)."""

from __future__ import annotations

import sys

from bench.cli import main

if __name__ == "__main__":  # guard: engines such as vLLM spawn processes that re-import main
    sys.exit(main())
