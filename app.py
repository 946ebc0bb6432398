"""Streamlit entry point: routes to the pages in ui/ with st.navigation and nothing else.

Run with `streamlit run app.py` (settings in .streamlit/config.toml: bound to 127.0.0.1).
"""

from __future__ import annotations

import streamlit as st

st.set_page_config(
    page_title="Inference framework advisor",
    page_icon=":material/insights:",
    layout="wide",
)

pages = [
    st.Page("ui/advisor_page.py", title="Advisor", icon=":material/account_tree:", default=True),
    st.Page("ui/benchmark_page.py", title="Benchmark", icon=":material/speed:"),
    st.Page("ui/results_page.py", title="Results", icon=":material/table_chart:"),
    st.Page("ui/report_page.py", title="Report", icon=":material/description:"),
]
st.navigation(pages).run()
