"""SQLite store faults: a full database is transient, a deleted or replaced file is detected.

``PRAGMA max_page_count`` on the store's own connection makes the database full for real
(SQLite raises ``SQLITE_FULL``, as on a full disk). The file checks use real renames and
unlinks of the database file under an open store.
"""

from __future__ import annotations

import shutil
import sqlite3
import threading
from pathlib import Path

import pytest

from tests.store._store_helpers import evaluation_record, snapshot_record
from worker.store import DeadLetterRecord, Store, TransientStoreError, open_store


def _sqlite_conn(store: Store) -> sqlite3.Connection:
    # The store's own per-thread connection: max_page_count is a per-connection setting.
    conn: sqlite3.Connection = store._backend._connection()  # type: ignore[attr-defined]
    return conn


def _fill(store: Store) -> None:
    conn = _sqlite_conn(store)
    (pages,) = conn.execute("PRAGMA page_count").fetchone()
    conn.execute(f"PRAGMA max_page_count = {int(pages)}")


def test_full_database_is_transient_store_full(tmp_path: Path) -> None:
    """SQLITE_FULL raises TransientStoreError STORE_FULL, writes nothing, and succeeds later."""
    with open_store(f"sqlite:///{tmp_path / 'full.db'}", retry_attempts=2) as store:
        _fill(store)
        snapshot = snapshot_record("t-full", text="x" * 20_000)
        record = evaluation_record(snapshot.snapshot_id)
        with pytest.raises(TransientStoreError) as caught:
            store.record_evaluation(record, snapshot)
        assert caught.value.code == "STORE_FULL"
        assert (store.count_evaluations(), store.count_snapshots()) == (0, 0)
        _sqlite_conn(store).execute("PRAGMA max_page_count = 1073741823")
        assert store.record_evaluation(record, snapshot).created


def test_full_database_batch_write_is_transient(tmp_path: Path) -> None:
    """A batch write into a full database is STORE_FULL too (never a permanent failure)."""
    with open_store(f"sqlite:///{tmp_path / 'full.db'}", retry_attempts=1) as store:
        _fill(store)
        snapshots = [snapshot_record(f"t-{i}", text="y" * 5_000) for i in range(4)]
        items = [(evaluation_record(s.snapshot_id), s) for s in snapshots]
        with pytest.raises(TransientStoreError) as caught:
            store.record_evaluations(items)
        assert caught.value.code == "STORE_FULL"


def test_full_dead_letter_write_is_transient(tmp_path: Path) -> None:
    """Recording a dead letter into a full database is STORE_FULL: the message stays unacked."""
    with open_store(f"sqlite:///{tmp_path / 'full.db'}", retry_attempts=1) as store:
        _fill(store)
        letter = DeadLetterRecord(reason="INVALID_JSON", payload=b"z" * 60_000)
        with pytest.raises(TransientStoreError) as caught:
            store.record_dead_letter(letter)
        assert caught.value.code == "STORE_FULL"


@pytest.mark.parametrize("how", ["deleted", "replaced", "renamed"])
def test_replaced_database_file_is_detected_before_commit(tmp_path: Path, how: str) -> None:
    """A file deleted, replaced or renamed under the store: STORE_REPLACED, nothing written."""
    path = tmp_path / "live.db"
    with open_store(f"sqlite:///{path}") as store:
        first = snapshot_record("t-before")
        store.record_evaluation(evaluation_record(first.snapshot_id), first)
        if how == "deleted":
            path.unlink()
        elif how == "replaced":
            shutil.copyfile(path, tmp_path / "copy.db")
            (tmp_path / "copy.db").replace(path)
        else:
            path.rename(tmp_path / "moved.db")
        later = snapshot_record("t-after")
        with pytest.raises(TransientStoreError) as caught:
            store.record_evaluation(evaluation_record(later.snapshot_id), later)
        assert caught.value.code == "STORE_REPLACED"
        with pytest.raises(TransientStoreError) as again:  # reads too: skip-if-done would lie
            store.existing_evaluations([evaluation_record(later.snapshot_id).evaluation_id])
        assert again.value.code == "STORE_REPLACED"


def test_replaced_file_is_refused_by_every_thread(tmp_path: Path) -> None:
    """After a replacement, a thread with a new connection is refused too."""
    # Its new connection would open the new file, which this process never migrated.
    path = tmp_path / "live.db"
    with open_store(f"sqlite:///{path}") as store:
        store.count_snapshots()
        path.unlink()
        sqlite3.connect(path).close()  # an empty file appears at the path
        codes: list[str] = []

        def write() -> None:
            snapshot = snapshot_record("t-thread")
            try:
                store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)
            except TransientStoreError as exc:
                codes.append(exc.code)

        worker = threading.Thread(target=write)
        worker.start()
        worker.join(10)
        assert codes == ["STORE_REPLACED"]


def test_replacement_between_begin_and_commit_is_refused(tmp_path: Path) -> None:
    """A file unlinked while a write transaction is open is caught just before COMMIT."""
    path = tmp_path / "live.db"
    with open_store(f"sqlite:///{path}") as store:
        store.count_snapshots()
        backend = store._backend  # the commit boundary itself is under test

        def unlink_mid_transaction() -> None:
            with backend.transaction(write=True) as tx:
                tx.run("CREATE TEMP TABLE scratch (x INTEGER)")
                path.unlink()

        with pytest.raises(TransientStoreError) as caught:
            unlink_mid_transaction()
        assert caught.value.code == "STORE_REPLACED"
