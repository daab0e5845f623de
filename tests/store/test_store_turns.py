"""Writer turns on SQLite (``worker.store._turns``) and batch writes in short transactions:
single-record writers go before waiting batch writers, a turn hands over across processes and
times out with a reason code, and a batch longer than one transaction keeps every batch rule."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.store._store_helpers import evaluation_record, snapshot_record
from worker.store import EvaluationRecord, SnapshotRecord, Store, TransientStoreError, open_store
from worker.store._backends import SQLITE_BULK_ROWS, SQLITE_BULK_ROWS_BESIDE_URGENT
from worker.store._turns import Turn, WriterTurns

_WAIT_S = 5.0


def _until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` for at most five seconds."""
    deadline = time.monotonic() + _WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def _urgent_held(db: Path) -> bool:
    """True while some writer holds ``<db>-urgent`` shared (an urgent writer waits or writes)."""
    fd = os.open(f"{db}-urgent", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _turn_order(db: Path) -> list[str]:
    """A bulk writer holds the turn; an urgent one, then a bulk one queue; the order they ran."""
    turns = WriterTurns(db, timeout_s=_WAIT_S)
    order: list[str] = []
    release = threading.Event()

    def writer(name: str, *, kind: Turn, hold: threading.Event | None = None) -> None:
        with turns.turn(kind):
            order.append(name)
            if hold is not None:
                hold.wait(_WAIT_S)

    held = {"kind": Turn.BULK, "hold": release}
    first = threading.Thread(target=writer, args=("holder",), kwargs=held)
    first.start()
    _until(lambda: order == ["holder"], "the first turn")
    urgent = threading.Thread(target=writer, args=("urgent",), kwargs={"kind": Turn.URGENT})
    urgent.start()
    _until(lambda: _urgent_held(db), "the urgent writer to queue")
    bulk = threading.Thread(target=writer, args=("bulk",), kwargs={"kind": Turn.BULK})
    bulk.start()
    time.sleep(0.05)  # the bulk writer is now yielding (or, if broken, queued for the lock)
    release.set()
    for thread in (first, urgent, bulk):
        thread.join(_WAIT_S)
    turns.close()
    return order


def test_a_waiting_urgent_writer_goes_before_a_waiting_bulk_writer(tmp_path: Path) -> None:
    """When the turn is released, the queued single-record writer gets it before the batch."""
    orders = [_turn_order(tmp_path / f"store-{i}.db") for i in range(5)]
    assert orders == [["holder", "urgent", "bulk"]] * 5


def _holder(db: Path) -> subprocess.Popen[bytes]:
    """Another process that takes a writer turn on ``db`` and keeps it until killed."""
    code = (
        "import sys, time; from pathlib import Path\n"
        "from worker.store._turns import Turn, WriterTurns\n"
        "turns = WriterTurns(Path(sys.argv[1]), timeout_s=5)\n"
        "with turns.turn(Turn.URGENT):\n"
        "    print('held', flush=True); time.sleep(60)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE)
    assert process.stdout is not None
    assert process.stdout.readline() == b"held\n"
    return process


def test_a_turn_held_elsewhere_times_out_then_is_freed_by_the_holders_death(
    tmp_path: Path,
) -> None:
    """STORE_BUSY (transient) within the busy timeout; a killed holder frees the turn at once."""
    db = tmp_path / "store.db"
    holder = _holder(db)
    turns = WriterTurns(db, timeout_s=0.2)
    try:
        started = time.monotonic()
        with pytest.raises(TransientStoreError) as busy, turns.turn(Turn.URGENT):
            pass
        assert busy.value.code == "STORE_BUSY"
        assert 0.2 <= time.monotonic() - started < 2.0
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(_WAIT_S)
    with turns.turn(Turn.BULK):
        assert not _urgent_held(db)  # the failed urgent writer let go of its shared lock too
    turns.close()


def test_a_bulk_writer_waits_at_most_the_yield_bound(tmp_path: Path) -> None:
    """An urgent writer that never finishes delays a batch by YIELD_MAX_S, not forever."""
    db = tmp_path / "store.db"
    turns = WriterTurns(db, timeout_s=_WAIT_S)
    stuck = os.open(f"{db}-urgent", os.O_RDWR | os.O_CREAT)
    fcntl.flock(stuck, fcntl.LOCK_SH)  # an urgent writer that queued and hangs
    try:
        started = time.monotonic()
        with turns.turn(Turn.BULK):
            waited_s = time.monotonic() - started
    finally:
        os.close(stuck)
        turns.close()
    assert 0.9 <= waited_s < 3.0


def test_a_batch_longer_than_one_transaction_keeps_every_rule(store: Store) -> None:
    """Order, duplicates and previous-evaluation links hold across transaction boundaries."""
    size = SQLITE_BULK_ROWS * 2 + 3
    snapshots = [snapshot_record(f"t-{i}") for i in range(size)]
    items: list[tuple[EvaluationRecord, SnapshotRecord | None]] = [
        (evaluation_record(s.snapshot_id), s) for s in snapshots
    ]
    again = evaluation_record(snapshots[0].snapshot_id, version="agent@2")
    items += [(again, snapshots[0]), items[1]]  # a re-evaluation and a duplicate of early items
    written = store.record_evaluations(items)
    assert [w.id for w in written] == [record.evaluation_id for record, _ in items]
    assert [w.created for w in written] == [True] * (size + 1) + [False]
    stored = store.get_evaluation(again.evaluation_id)
    assert stored is not None
    assert stored.previous_evaluation_id == items[0][0].evaluation_id
    assert store.count_evaluations() == size + 1
    assert [w.created for w in store.record_evaluations(items)] == [False] * (size + 2)


def _batch_transactions(store: Store, prefix: str, size: int) -> int:
    """Write ``size`` new evaluations as one batch; how many write transactions it took."""
    backend = store._backend
    real = backend.transaction
    taken: list[bool] = []

    def counted(*, write: bool, turn: Turn = Turn.URGENT) -> Any:
        taken.extend([True] if write and turn is Turn.BULK else [])
        return real(write=write, turn=turn)

    snapshots = [snapshot_record(f"{prefix}-{i}") for i in range(size)]
    items: list[tuple[EvaluationRecord, SnapshotRecord | None]] = [
        (evaluation_record(s.snapshot_id), s) for s in snapshots
    ]
    backend.transaction = counted  # type: ignore[method-assign]
    try:
        written = store.record_evaluations(items)
    finally:
        backend.transaction = real  # type: ignore[method-assign]
    assert all(w.created for w in written)
    return len(taken)


def test_a_batch_written_beside_live_writers_takes_smaller_transactions(tmp_path: Path) -> None:
    """A batch takes 16 evaluations per transaction, 4 within URGENT_RECENT_S of a live write."""
    # Smaller transactions beside live writers, so the live lane waits behind less.
    db = tmp_path / "store.db"
    with open_store(f"sqlite:///{db}") as store:
        assert _batch_transactions(store, "quiet", 32) == 32 // SQLITE_BULK_ROWS
        live = snapshot_record("live-1")
        store.record_evaluations([(evaluation_record(live.snapshot_id), live)], urgent=True)
        assert _batch_transactions(store, "beside", 32) == 32 // SQLITE_BULK_ROWS_BESIDE_URGENT


def test_only_an_urgent_turn_marks_urgent_writers_as_recent(tmp_path: Path) -> None:
    """Only an urgent turn is a recent urgent write; a fresh file, a bulk or plain turn are not."""
    turns = WriterTurns(tmp_path / "store.db", timeout_s=_WAIT_S)
    try:
        assert not turns.urgent_recently()
        with turns.turn(Turn.BULK):
            pass
        with turns.turn(Turn.PLAIN):
            pass
        assert not turns.urgent_recently()
        with turns.turn(Turn.URGENT):
            pass
        assert turns.urgent_recently()
    finally:
        turns.close()


def test_schema_and_checkpoints_leave_a_batch_its_full_transactions(tmp_path: Path) -> None:
    """A batch after schema creation and checkpoints still takes 16 evaluations per transaction."""
    # Both are plain writes, not live writers, so they must not shrink the batch's transactions.
    with open_store(f"sqlite:///{tmp_path / 'store.db'}") as store:
        store.record_checkpoint("backfill-1", "traces.jsonl", 500, 500)
        store.record_checkpoint("backfill-1", "traces.jsonl", 1000, 1000)
        assert _batch_transactions(store, "after-checkpoints", 32) == 32 // SQLITE_BULK_ROWS
