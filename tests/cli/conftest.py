"""Fixtures for the CLI tests: a clean environment and a SQLite store in the test's directory."""

from __future__ import annotations

import pytest

from tests.queue.conftest import start_worker  # noqa: F401 - fixture reused as it is


@pytest.fixture(autouse=True)
def _clean_env(clean_env: None) -> None:
    """Every test here sees only the EVALQ_* variables it sets (``clean_env``)."""
