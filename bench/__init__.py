"""Benchmarks of the figures in issue 6 (not tests): ``.venv/bin/python bench/run_all.py``."""
