"""The bottom layer: typed models and pure helpers every other layer reads: run configs,
result schema and pattern reports, the environment fingerprint model, metrics and
statistics, percentiles, the strict base model, errors, clock, bounded file reading and
output folders. Imports nothing else of bench.
"""
