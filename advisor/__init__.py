"""Advisor package: workload profile -> decision tree -> evidence -> recommendation -> report.

May import `bench`; never imports `streamlit`.
"""
