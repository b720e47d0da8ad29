"""Analyses: tracer events in, plain-data results and Findings out (no printing)."""
