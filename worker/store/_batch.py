"""Batch paths for the backfill lane: many evaluations in one transaction, one existence query.

Measured (``bench/``): with one transaction per evaluation a worker spent most of its time waiting
for SQLite's single write lock and its commit fsync, or for a PostgreSQL round trip per statement
batch; a backfill message of N snapshots now costs one ``BEGIN … COMMIT`` and one skip-if-done
query instead of N of each. Semantics are those of the single-record paths, item by item.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ._backends import Tx
from ._records import EvaluationRecord, SnapshotRecord, Written
from ._writes import write_evaluation

__all__ = ["EvaluationItem", "existing_evaluation_ids", "write_evaluations"]

EvaluationItem = tuple[EvaluationRecord, SnapshotRecord | None]
"""An evaluation and (optionally) its snapshot, as :meth:`Store.record_evaluation` takes them."""

_IN_CHUNK = 500  # ids per IN (...) list: far below SQLite's and PostgreSQL's parameter limits


def _lock_order(item: EvaluationItem) -> str:
    # PostgreSQL takes one advisory lock per trace; taking them in one global order keeps two
    # concurrent batches from deadlocking on each other.
    record, snapshot = item
    return snapshot.meta.trace_id if snapshot is not None else record.snapshot_id


def write_evaluations(tx: Tx, items: Sequence[EvaluationItem], now: datetime) -> list[Written]:
    """Insert every evaluation (insert-if-absent, like ``write_evaluation``); input order kept."""
    written: dict[int, Written] = {}
    for index in sorted(range(len(items)), key=lambda i: _lock_order(items[i])):
        record, snapshot = items[index]
        written[index] = write_evaluation(tx, record, snapshot, now)
    return [written[i] for i in range(len(items))]


def existing_evaluation_ids(tx: Tx, evaluation_ids: Sequence[str]) -> frozenset[str]:
    """The ids among ``evaluation_ids`` that are already recorded."""
    found: set[str] = set()
    for start in range(0, len(evaluation_ids), _IN_CHUNK):
        chunk = evaluation_ids[start : start + _IN_CHUNK]
        names = [f"e{i}" for i in range(len(chunk))]
        # Only generated placeholder names are interpolated; the ids travel as parameters.
        placeholders = ", ".join(f":{name}" for name in names)
        sql = f"SELECT evaluation_id FROM evaluations WHERE evaluation_id IN ({placeholders})"  # noqa: S608
        found.update(str(row[0]) for row in tx.rows(sql, dict(zip(names, chunk, strict=True))))
    return frozenset(found)
