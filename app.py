"""Streamlit entry point: routes to the pages in ui/ with st.navigation, behind a Host check.

Run with `streamlit run app.py` (settings in .streamlit/config.toml: bound to 127.0.0.1; served
to others, it requires sign-in first: ui/auth.py). `streamlit run` finds `app` below, an
`st.App` whose middleware answers 403 to any request or websocket handshake whose Host header
is not a name the app is served under (ui/host_check.py: DNS rebinding); the same file, run
by Streamlit as the page script (`__main__`), is the router.
"""

from __future__ import annotations

import streamlit as st


def route() -> None:
    from bench.core.errors import UserError
    from ui.auth import require_sign_in

    st.set_page_config(
        page_title="Inference framework advisor",
        page_icon=":material/insights:",
        layout="wide",
    )
    require_sign_in()  # served beyond 127.0.0.1: nothing below runs for an anonymous visitor
    pages = [
        st.Page(
            "ui/advisor_page.py", title="Advisor", icon=":material/account_tree:", default=True
        ),
        st.Page("ui/benchmark_page.py", title="Benchmark", icon=":material/speed:"),
        st.Page("ui/results_page.py", title="Results", icon=":material/table_chart:"),
        st.Page("ui/report_page.py", title="Report", icon=":material/description:"),
    ]
    try:
        st.navigation(pages).run()
    except UserError as exc:  # e.g. a results store that cannot be reached: one line, no traceback
        st.error(str(exc), icon=":material/error:")


if __name__ == "__main__":
    route()
else:  # imported by the server (`streamlit run` hands `app:app` to uvicorn)
    from starlette.middleware import Middleware

    from ui.answer_times import answer_times_middleware
    from ui.host_check import HostCheckMiddleware

    # The Host check first: a refused request is not an answer to time.
    app = st.App("app.py", middleware=[Middleware(HostCheckMiddleware), *answer_times_middleware()])
