"""Store fixtures: every store test runs on SQLite and on PostgreSQL (a fresh schema per test)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from worker.store import Store, open_store


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store URL: a SQLite file in tmp_path, or a new schema in the session's PostgreSQL DB."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    base: str = request.getfixturevalue("postgres_url")
    schema = f"store_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        joiner = "&" if "?" in base else "?"
        yield f"{base}{joiner}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(base, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """An open, migrated store on ``store_url``; closed after the test."""
    with open_store(store_url) as opened:
        yield opened
