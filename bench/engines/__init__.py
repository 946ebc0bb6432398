"""Inference engines: one backend adapter per framework (backends/), engine server
launchers and their logs, the random-weight model presets, ONNX export. Imports only
bench.core.
"""
