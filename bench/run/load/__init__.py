"""Load patterns (what shape of load) and strategies (when each request goes)."""
