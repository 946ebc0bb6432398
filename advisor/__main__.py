"""`python -m advisor`: the advisor's command line (see advisor/cli.py)."""

from __future__ import annotations

import sys

from advisor.cli import main
from bench.run.interrupts import hold_repeated_signals

if __name__ == "__main__":
    hold_repeated_signals()  # a second Ctrl-C after a run stopped cannot cut its report short
    sys.exit(main())
