"""The Streamlit pages of the advisor app; the only package that imports streamlit.

Pages are thin: they collect input, call `advisor` and `bench`, and draw what those return.
"""
