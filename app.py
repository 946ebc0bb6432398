"""Streamlit entry point (placeholder until the app pages land): says what is coming."""

from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="Inference framework advisor", layout="wide")
st.title("Inference framework advisor")
st.info(
    "The questionnaire, benchmark runner, results and report pages are being built. "
    "Meanwhile the bench CLI works: `python -m bench --help`."
)
