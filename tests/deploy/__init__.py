"""Test package (lets mypy and pytest tell same-named modules apart)."""
