"""The README's tables of this measurement, from its files (nothing typed in):

    python data/reference/cpu_tiny-bert_batching/table.py

(benchmarks/forward_tables.py does the reading.)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from benchmarks.forward_tables import print_tables  # noqa: E402

if __name__ == "__main__":
    print_tables(HERE)
