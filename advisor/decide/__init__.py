"""The decide layer: the recommendation settled on evidence, its diagnostics and the learned
second opinion.

Imports every layer below it; the report layer reads it (docs/architecture.md).
"""
