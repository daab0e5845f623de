"""The database itself refuses UPDATE, DELETE (and TRUNCATE) on every store table."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from tests.store._store_helpers import (
    dump_tables,
    evaluation_record,
    outcome_record,
    raw_connection,
    record_as_schema_4,
    send_record,
    snapshot_record,
)
from worker.store import (
    APPEND_ONLY_TABLES,
    AppendOnlyError,
    DeadLetterRecord,
    Store,
    TallyRecord,
    TallyRowRecord,
)
from worker.store._errors import translating


def _fill_every_table(store: Store, url: str) -> None:
    snapshot = snapshot_record("t-fill")
    store.record_evaluation(evaluation_record(snapshot.snapshot_id, criteria=("x",)), snapshot)
    # The schema-4 audit tables (still read), and a text nobody asked for the purge to expire.
    record_as_schema_4(store, url, evaluation_record(snapshot.snapshot_id, version="agent@0"))
    with raw_connection(url) as conn:
        conn.execute("INSERT INTO question_texts VALUES ('" + "0" * 64 + "', 'orphan')")
    store.record_sends([send_record(snapshot)])
    store.record_outcome(outcome_record("o-fill", "t-fill"))
    store.record_redrive(store.record_dead_letter(DeadLetterRecord(reason="BAD", payload=b"{")))
    store.record_checkpoint("backfill-1", "file.jsonl", offset=10, enqueued=3)
    store.record_tally(
        TallyRecord(
            tally_id="tally-fill",
            producer="host:1",
            started_at=datetime(2025, 1, 1, tzinfo=UTC),
            ended_at=datetime(2025, 1, 1, 0, 1, tzinfo=UTC),
            rows=(TallyRowRecord(rule="default", rate=0.5, lane="live", seen=4, sampled=2),),
        )
    )
    # A recorded horizon far before every row: the expiry triggers must still refuse them all.
    store.purge_content(datetime(2000, 1, 1, tzinfo=UTC))


def _data_column(conn: sqlite3.Connection | psycopg.Connection[Any], table: str) -> str:
    # Not ``seq``: PostgreSQL refuses updates of an identity column before any trigger runs.
    if isinstance(conn, sqlite3.Connection):
        names = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
    else:
        cur = conn.execute(f"SELECT * FROM {table} LIMIT 0")
        assert cur.description is not None
        names = [column.name for column in cur.description]
    return str(next(name for name in names if name != "seq"))


def _refused(conn: sqlite3.Connection | psycopg.Connection[Any], sql: str) -> bool:
    try:
        conn.execute(sql)
    except sqlite3.IntegrityError as exc:
        return "append-only" in str(exc)
    except psycopg.Error as exc:
        return exc.sqlstate == "EQ001"
    return False


def test_every_table_is_filled_by_the_fixture(store: Store, store_url: str) -> None:
    """The refusal test below is meaningful: every store table has rows (row triggers fire)."""
    _fill_every_table(store, store_url)
    empty = [t for t, rows in dump_tables(store_url).items() if not rows]
    assert empty == []


def test_update_and_delete_are_refused_by_the_database(store: Store, store_url: str) -> None:
    """A plain driver connection's UPDATE and DELETE fail on every table; rows stay as they were."""
    _fill_every_table(store, store_url)
    before = dump_tables(store_url)
    accepted = []
    with raw_connection(store_url) as conn:
        for table in APPEND_ONLY_TABLES:
            column = _data_column(conn, table)
            for sql in (f"UPDATE {table} SET {column} = {column}", f"DELETE FROM {table}"):
                if not _refused(conn, sql):
                    accepted.append(sql)
    assert accepted == []
    assert dump_tables(store_url) == before


@pytest.mark.parametrize(
    "store_url", [pytest.param("postgresql", marks=pytest.mark.services)], indirect=True
)
def test_truncate_is_refused_by_postgresql(store: Store, store_url: str) -> None:
    """PostgreSQL refuses TRUNCATE of every store table (SQLite has no TRUNCATE)."""
    assert store.dialect == "postgresql"
    _fill_every_table(store, store_url)
    with raw_connection(store_url) as conn:
        accepted = [t for t in APPEND_ONLY_TABLES if not _refused(conn, f"TRUNCATE {t} CASCADE")]
    assert accepted == []


def test_refusal_translates_to_append_only_error(store: Store, store_url: str) -> None:
    """The driver's refusal becomes AppendOnlyError (code APPEND_ONLY) at the store boundary."""
    _fill_every_table(store, store_url)
    with (
        raw_connection(store_url) as conn,
        pytest.raises(AppendOnlyError) as caught,
        translating(),
    ):
        conn.execute("DELETE FROM evaluations")
    assert caught.value.code == "APPEND_ONLY"
    assert "DELETE" not in str(caught.value)  # a code and driver class, not the driver's text
