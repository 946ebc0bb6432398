"""The plan layer: the decision tree's candidates and the benchmark runs that measure them.

Imports the workload and sizing layers (docs/architecture.md).
"""
