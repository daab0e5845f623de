"""``evalq ui`` over a PostgreSQL store: the same pages, the same numbers as on SQLite."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.store._store_helpers import evaluation_record, wire
from tests.ui.ui_kit import UiServer, ui_server
from worker.store import SnapshotRecord, open_store

pytestmark = pytest.mark.services

SCORES = (0.9, 0.1, 0.2)
"""Three evaluations; groundedness fails below 0.8 (two fail)."""


@pytest.fixture
def postgres_store(postgres_url: str) -> Iterator[tuple[str, list[str]]]:
    """A new schema in the session's PostgreSQL database with three evaluations in it."""
    schema = f"ui_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    joiner = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{joiner}options=-csearch_path%3D{schema}"
    ids = []
    try:
        with open_store(url) as store:
            for n, score in enumerate(SCORES):
                snapshot = SnapshotRecord(content=wire(f"pg-{n}", text=f"question {n}"))
                record = evaluation_record(snapshot.snapshot_id, score=score)
                ids.append(store.record_evaluation(record, snapshot).id)
        yield url, ids
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def pg_ui(postgres_store: tuple[str, list[str]], tmp_path: Path) -> Iterator[UiServer]:
    """``evalq ui`` over the PostgreSQL store."""
    with ui_server(postgres_store[0], tmp_path / "ui.log") as server:
        yield server


def test_pages_over_postgresql(pg_ui: UiServer, postgres_store: tuple[str, list[str]]) -> None:
    """Overview counts, the failed list (newest first) and one record, read from PostgreSQL."""
    _, ids = postgres_store
    with httpx.Client(base_url=pg_ui.base_url) as client:
        overview = client.get("/")
        assert overview.status_code == 200
        assert 'id="evaluations">3<' in overview.text
        failed = client.get(
            "/metrics/groundedness", params={"status": "DECIDED", "passed": "false"}
        )
        listed = re.findall(r'href="/records/([0-9a-f]{64})\?metric=groundedness"', failed.text)
        assert listed == [ids[2], ids[1]]
        record = client.get(f"/records/{ids[1]}", params={"metric": "groundedness"})
    assert record.status_code == 200
    assert '<span id="trace-id">pg-1</span>' in record.text
    assert "TIMEOUT" in record.text
    assert "question 1" in record.text  # the evidence window, from the content table
    assert "Traceback" not in pg_ui.log
