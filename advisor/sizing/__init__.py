"""The sizing layer: memory fit and floors, engine shapes, configurations, capacity and fleet,
the calibrated serving model, and the measured runs they read.

Imports the workload layer only (docs/architecture.md).
"""
