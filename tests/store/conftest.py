"""Store fixtures: every store test runs on SQLite and on PostgreSQL (a fresh schema per test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import backend_url
from worker.store import Store, open_store


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL: a SQLite file in tmp_path, or a new schema in the session's PostgreSQL DB."""
    with backend_url(request.param, request, tmp_path, "store") as url:
        yield url


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """An open, migrated store on ``store_url``; closed after the test."""
    with open_store(store_url) as opened:
        yield opened
