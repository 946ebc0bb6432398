"""Many runs: the job queue runner and one job's body, executors (local, ray) and their
registry, campaigns, rehearsals, fidelity checks, capacity checks, repeats and
comparisons, the web-form job policy. Imports every lower bench layer.
"""
