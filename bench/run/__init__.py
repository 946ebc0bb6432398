"""One run: `api.launch(RunConfig) -> RunResult`, the isolated worker processes and
replicas, the runner and load patterns (load/), workloads and traffic files, telemetry,
environment facts, placement, interrupts and process trees. Imports bench.core,
bench.storage and bench.engines.
"""
