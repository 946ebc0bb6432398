"""Streamlit entry point: routes to the pages in ui/ with st.navigation and nothing else.

Run with `streamlit run app.py` (settings in .streamlit/config.toml: bound to 127.0.0.1; served
to others, it requires sign-in first: ui/auth.py).
"""

from __future__ import annotations

import streamlit as st

from bench.errors import UserError
from ui.auth import require_sign_in

st.set_page_config(
    page_title="Inference framework advisor",
    page_icon=":material/insights:",
    layout="wide",
)

require_sign_in()  # served beyond 127.0.0.1: nothing below runs for an anonymous visitor

pages = [
    st.Page("ui/advisor_page.py", title="Advisor", icon=":material/account_tree:", default=True),
    st.Page("ui/benchmark_page.py", title="Benchmark", icon=":material/speed:"),
    st.Page("ui/results_page.py", title="Results", icon=":material/table_chart:"),
    st.Page("ui/report_page.py", title="Report", icon=":material/description:"),
]
try:
    st.navigation(pages).run()
except UserError as exc:  # e.g. a results store that cannot be reached: one line, no traceback
    st.error(str(exc), icon=":material/error:")
