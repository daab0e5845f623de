"""Smoke runs of the benchmark scripts (``bench/``): they must keep running, not meet figures."""
