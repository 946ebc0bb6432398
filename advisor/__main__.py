"""`python -m advisor`: the advisor's command line (see advisor/cli.py)."""

from __future__ import annotations

import sys

from advisor.cli import main

if __name__ == "__main__":
    sys.exit(main())
