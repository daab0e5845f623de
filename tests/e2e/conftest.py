"""Fixtures for the producer end-to-end tests, reused from the queue and producer tests.

Every worker a test starts runs as a subprocess in its own process group and is killed when the
test ends; the private Redis of a test is stopped with it.
"""

from __future__ import annotations

import pytest

from tests.producer.conftest import private_redis  # noqa: F401 - fixture reused as it is
from tests.queue.conftest import start_worker  # noqa: F401 - fixture reused as it is


@pytest.fixture(autouse=True)
def _clean_env(clean_env: None) -> None:
    """Every test here sees only the EVALQ_* variables it sets (``clean_env``)."""
