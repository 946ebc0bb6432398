"""The evidence layer: measured and published rows matched to a stage and ranked.

Imports the workload, sizing and plan layers (docs/architecture.md).
"""
