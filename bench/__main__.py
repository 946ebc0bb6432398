"""`python -m bench`: the bench command line (see bench/cli.py)."""

from __future__ import annotations

import sys

from bench.cli import main
from bench.run.interrupts import hold_repeated_signals

if __name__ == "__main__":  # guard: engines such as vLLM spawn processes that re-import main
    hold_repeated_signals()  # a second Ctrl-C after a run stopped cannot cut its report short
    sys.exit(main())
