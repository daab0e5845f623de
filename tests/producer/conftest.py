"""Fixtures for the producer tests (sampling, submission, observer, backfill)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.embedded import RedisServer


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A Redis of this test's own, so it can be stopped and restarted without harming others."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    try:
        yield server
    finally:
        server.stop()
