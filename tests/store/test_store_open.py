"""Opening stores: URL forms, errors that name EVALQ_STORE_URL, schema reuse, transient errors."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from tests.store._store_helpers import evaluation_record, snapshot_record
from worker.embedded import free_port
from worker.store import PermanentStoreError, Store, TransientStoreError, open_store
from worker.store._url import PostgresTarget, SqliteTarget, parse_store_url


@pytest.mark.parametrize(
    "url",
    [
        "",
        "store.db",
        "mysql://user:hunter2@db/evalq",
        "postgresql+psycopg://user:hunter2@db/evalq",
        "sqlite://host/evalq.db",
        "sqlite:///",
        "sqlite:///:memory:",
        "sqlite:///evalq.db?mode=ro",
        "postgresql://user:hunter2@db/evalq?no_such_option=1",
    ],
)
def test_bad_urls_name_the_setting_and_hide_secrets(url: str) -> None:
    """Every unusable URL raises ValueError naming EVALQ_STORE_URL, never echoing a password."""
    with pytest.raises(ValueError, match="EVALQ_STORE_URL") as caught:
        open_store(url)
    assert "hunter2" not in str(caught.value)


def test_url_forms_parse_to_their_targets() -> None:
    """Three slashes give a relative path, four an absolute one; both PostgreSQL schemes work."""
    assert parse_store_url("sqlite:///data/evalq.db") == SqliteTarget(Path("data/evalq.db"))
    assert parse_store_url("sqlite:////var/lib/evalq.db") == SqliteTarget(Path("/var/lib/evalq.db"))
    for scheme in ("postgresql", "postgres"):
        url = f"{scheme}://u@db:5433/evalq"
        assert parse_store_url(url) == PostgresTarget(url)


def test_relative_sqlite_url_opens_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sqlite:///sub/evalq.db`` creates the file under the working directory (WAL mode)."""
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///sub/evalq.db") as store:
        assert store.location == str(tmp_path / "sub" / "evalq.db")
    conn = sqlite3.connect(tmp_path / "sub" / "evalq.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


def test_reopening_keeps_records_and_migrates_once(store_url: str, store: Store) -> None:
    """A second open finds the schema (creates nothing) and sees the records already written."""
    snapshot = snapshot_record("t-reopen")
    store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)
    with open_store(store_url) as again:
        assert again.migrate() is False
        assert again.count_evaluations() == 1


def test_closed_store_refuses_use(store_url: str) -> None:
    """After close() every call raises STORE_CLOSED."""
    store = open_store(store_url)
    store.close()
    with pytest.raises(PermanentStoreError) as caught:
        store.count_snapshots()
    assert caught.value.code == "STORE_CLOSED"


def test_locked_sqlite_is_transient_and_the_write_succeeds_later(tmp_path: Path) -> None:
    """'database is locked' after the bounded retries is TransientStoreError; later it succeeds."""
    url = f"sqlite:///{tmp_path / 'locked.db'}"
    snapshot = snapshot_record("t-locked")
    record = evaluation_record(snapshot.snapshot_id)
    with open_store(url, busy_timeout_s=0.05, retry_attempts=3, retry_timeout_s=5) as store:
        holder = sqlite3.connect(tmp_path / "locked.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(TransientStoreError) as caught:
            store.record_evaluation(record, snapshot)
        assert caught.value.code == "STORE_BUSY"
        holder.execute("ROLLBACK")
        holder.close()
        assert store.count_evaluations() == 0
        assert store.record_evaluation(record, snapshot).created


def test_opening_a_new_sqlite_file_another_process_holds_waits_for_it(tmp_path: Path) -> None:
    """A lock on a new file while the store opens it (WAL not set yet) is waited out, not fatal."""
    path = tmp_path / "new.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")  # a rollback-journal file: the WAL switch must wait
    releaser = threading.Timer(0.4, lambda: holder.execute("ROLLBACK"))
    releaser.start()
    try:
        with open_store(f"sqlite:///{path}", busy_timeout_s=0.05, retry_timeout_s=10) as store:
            assert store.count_evaluations() == 0
    finally:
        releaser.join()
        holder.close()


def test_refused_postgresql_connection_is_transient() -> None:
    """A PostgreSQL URL with nothing listening fails as TransientStoreError, not a crash."""
    url = f"postgresql://evalq@127.0.0.1:{free_port()}/evalq"
    with pytest.raises(TransientStoreError) as caught:
        open_store(url, connect_timeout_s=1.0, retry_attempts=2, retry_timeout_s=5)
    assert caught.value.code == "STORE_UNAVAILABLE"
