"""Benchmark package: drives inference engines with load patterns and measures them exactly.

`bench` never imports `advisor` or `streamlit`; heavy frameworks are imported inside backends.
"""

from __future__ import annotations

SCHEMA_VERSION = 1
"""Version of the RunResult / RequestRecord schema and of the results store layout."""
