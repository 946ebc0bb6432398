"""The workload layer: the profile an engineer fills in, its GPUs, models, load and traffic.

The advisor's lowest layer: imports nothing else of advisor (docs/architecture.md).
"""
