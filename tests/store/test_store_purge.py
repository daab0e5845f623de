"""Retention: ``purge_content`` expires old content and payloads; every record stays readable.

The append-only triggers allow exactly that expiry below a recorded horizon and nothing else:
newer content, other columns and other tables are still refused by the database itself.
"""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from tests.store._store_helpers import (
    dump_tables,
    evaluation_record,
    raw_connection,
    snapshot_record,
)
from worker.store import DeadLetterRecord, Store


def _refused(conn: sqlite3.Connection | psycopg.Connection[Any], sql: str) -> bool:
    try:
        conn.execute(sql)
    except sqlite3.IntegrityError as exc:
        return "append-only" in str(exc)
    except psycopg.Error as exc:
        return exc.sqlstate == "EQ001"
    return False


def _old_and_new(store: Store) -> tuple[str, str, datetime]:
    """An old snapshot + evaluation + dead letter, a horizon, then a newer snapshot."""
    old = snapshot_record("t-old")
    store.record_evaluation(evaluation_record(old.snapshot_id), old)
    store.record_dead_letter(DeadLetterRecord(reason="INVALID_JSON", payload=b"{old"))
    time.sleep(0.01)
    horizon = datetime.now(UTC)
    time.sleep(0.01)
    new = snapshot_record("t-new")
    store.record_evaluation(evaluation_record(new.snapshot_id), new)
    store.record_dead_letter(DeadLetterRecord(reason="INVALID_JSON", payload=b"{new"))
    return old.snapshot_id, new.snapshot_id, horizon


def test_purge_removes_old_content_and_keeps_records(store: Store) -> None:
    """Old content and payloads go; snapshots, evaluations, results and newer content stay."""
    old_id, new_id, horizon = _old_and_new(store)
    results_before = list(store.iter_results())
    summary = store.purge_content(horizon)
    assert (summary.contents_removed, summary.payloads_cleared) == (1, 1)
    assert summary.content_before == horizon
    assert store.get_snapshot(old_id) is None
    kept = store.get_snapshot(new_id)
    assert kept is not None
    assert kept.snapshot_id == new_id
    assert store.count_snapshots() == 2
    assert store.count_evaluations() == 2
    assert store.find_evaluation(old_id, "agent@1") is not None
    assert list(store.iter_results()) == results_before
    letters = store.open_dead_letters()
    assert [(d.payload, d.payload_expired) for d in letters] == [(b"", True), (b"{new", False)]
    assert letters[0].payload_size == 4


def test_purge_again_expires_nothing_more(store: Store) -> None:
    """A second purge with the same horizon removes nothing (content is already gone)."""
    _old_id, _new_id, horizon = _old_and_new(store)
    store.purge_content(horizon)
    again = store.purge_content(horizon)
    assert (again.contents_removed, again.payloads_cleared) == (0, 0)


def test_triggers_allow_only_the_recorded_expiry(store: Store, store_url: str) -> None:
    """After a purge, raw SQL still cannot delete newer content or touch other columns."""
    _old_id, _new_id, horizon = _old_and_new(store)
    store.purge_content(horizon)
    before = dump_tables(store_url)
    statements = (
        "DELETE FROM snapshot_contents",  # only newer content is left
        "UPDATE snapshot_contents SET content = content",
        "UPDATE dead_letters SET reason = 'X'",  # even on the expired row
        "UPDATE dead_letters SET payload = payload",
        "DELETE FROM dead_letters",
        "DELETE FROM snapshots",
        "DELETE FROM content_purges",
    )
    with raw_connection(store_url) as conn:
        accepted = [sql for sql in statements if not _refused(conn, sql)]
    assert accepted == []
    assert dump_tables(store_url) == before


def test_without_a_recorded_purge_nothing_expires(store: Store, store_url: str) -> None:
    """A raw DELETE of old content is refused unless a purge recorded its horizon first."""
    _old_and_new(store)
    with raw_connection(store_url) as conn:
        assert _refused(conn, "DELETE FROM snapshot_contents")
        assert _refused(
            conn,
            "UPDATE dead_letters SET payload = X''"
            if store.dialect == "sqlite"
            else "UPDATE dead_letters SET payload = ''::bytea",
        )


@pytest.mark.parametrize(
    "before",
    [datetime.now(UTC) + timedelta(days=1), datetime(2025, 1, 1)],  # noqa: DTZ001 - the point
    ids=["future", "naive"],
)
def test_purge_refuses_a_future_or_naive_horizon(store: Store, before: datetime) -> None:
    """``before`` in the future or without a time zone is a ValueError naming the problem."""
    with pytest.raises(ValueError, match="before must"):
        store.purge_content(before)
