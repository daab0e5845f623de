"""Batch paths for the backfill lane: many evaluations in one short transaction, one query each.

Measured (``bench/``): written one by one, a batch of 32 evaluations took ~250 statements inside one
SQLite write transaction, and every statement (every row of an ``executemany`` too) releases and
re-takes the GIL, which a busy worker hands back only every few milliseconds: the write lock stayed
held for hundreds of milliseconds and a live worker's single record waited seconds behind it.
Here a batch costs about eleven statements whatever its size: each table gets ONE insert
(``Tx.insert_rows``: one multi-row statement on SQLite; on PostgreSQL one ``COPY`` for a plain
insert and one pipeline for an insert-if-absent; the audit trail's question texts included),
facts, previous evaluations, existing ids and earlier outcomes are read with one query each, and
every row is built before the transaction opens (:func:`prepare_evaluations`), so the lock is held
for the writes alone.

Semantics are those of :func:`~worker.store._writes.write_evaluation`, item by item, in input
order: a snapshot is inserted if absent, an evaluation that exists writes nothing (its id is read
under the same write lock, so ``created`` is exact), a new one links to the latest earlier
evaluation of its snapshot — a retry attempt to the latest of its snapshot and metric-set version
(an earlier item of the same batch included) — and to the earlier outcomes
of its trace (and unit).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ._audit import insert_texts, text_rows
from ._backends import Tx
from ._errors import PermanentStoreError, StoreCode
from ._records import EvaluationRecord, StoredSnapshot, Written
from ._writes import (
    _INSERT_CONTENT,
    _INSERT_CRITERION,
    _INSERT_EVALUATION,
    _INSERT_RESULT,
    _INSERT_SNAPSHOT,
    _criteria_rows,
    _evaluation_params,
    _Facts,
    _result_rows,
    _snapshot_params,
    _trace_key,
    supersedes_same_version,
)

__all__ = [
    "EvaluationItem",
    "PreparedBatch",
    "existing_evaluation_ids",
    "prepare_evaluations",
    "write_evaluations",
]

EvaluationItem = tuple[EvaluationRecord, StoredSnapshot | None]
"""An evaluation and (optionally) its snapshot, as :meth:`Store.record_evaluation` takes them."""

_IN_CHUNK = 500  # ids per IN (...) list: far below SQLite's and PostgreSQL's parameter limits
_PENDING = datetime.min.replace(tzinfo=UTC)  # replaced by the transaction's own time

_INSERT_LINK = """INSERT INTO outcome_links (outcome_event_id, evaluation_id, linked_at)
VALUES (:event_id, :evaluation_id, :now) ON CONFLICT DO NOTHING"""


def _in_rows(tx: Tx, sql: str, values: Sequence[str]) -> list[tuple[Any, ...]]:
    """``sql`` with ``{ids}`` replaced by placeholders, run over ``values`` in chunks."""
    rows: list[tuple[Any, ...]] = []
    for start in range(0, len(values), _IN_CHUNK):
        chunk = values[start : start + _IN_CHUNK]
        names = [f"v{i}" for i in range(len(chunk))]
        # Only generated placeholder names are interpolated; the values travel as parameters.
        text = sql.format(ids=", ".join(f":{name}" for name in names))
        rows.extend(tx.rows(text, dict(zip(names, chunk, strict=True))))
    return rows


def _insert_rows(tx: Tx, sql: str, rows: Sequence[dict[str, Any]]) -> None:
    """Every row of a table at once (one statement on SQLite, a COPY or pipeline on PostgreSQL)."""
    tx.insert_rows(sql, rows)


def existing_evaluation_ids(tx: Tx, evaluation_ids: Sequence[str]) -> frozenset[str]:
    """The ids among ``evaluation_ids`` that are already recorded."""
    sql = "SELECT evaluation_id FROM evaluations WHERE evaluation_id IN ({ids})"
    return frozenset(str(row[0]) for row in _in_rows(tx, sql, list(dict.fromkeys(evaluation_ids))))


def _meta_facts(snapshot: StoredSnapshot) -> _Facts:
    # The snapshot row holds exactly these values (content-addressed: same id, same content).
    meta = snapshot.meta
    return _Facts(
        meta.trace_id,
        meta.unit.event_id,
        meta.window.rule,
        meta.window.cutoff_event_id,
        meta.window.cutoff_time,
    )


@dataclass(frozen=True)
class _Rows:
    """One evaluation's rows, except what only the database can say (previous id, time)."""

    evaluation: dict[str, Any]
    results: list[dict[str, Any]]
    criteria: list[dict[str, Any]]
    texts: dict[str, dict[str, Any]]  # the audit's question texts, by digest


def _rows(record: EvaluationRecord, facts: _Facts) -> _Rows:
    return _Rows(
        _evaluation_params(record, facts, None, _PENDING),
        _result_rows(record, facts),
        _criteria_rows(record),
        text_rows(record),
    )


@dataclass(frozen=True)
class PreparedBatch:
    """Rows of a batch built BEFORE its transaction opens (see :func:`prepare_evaluations`)."""

    items: Sequence[EvaluationItem]
    snapshots: dict[str, StoredSnapshot]
    facts: dict[str, _Facts]
    rows: list[_Rows | None]  # None: the snapshot's facts are read inside the transaction


def prepare_evaluations(items: Sequence[EvaluationItem]) -> PreparedBatch:
    """Everything about a batch that does not depend on the database, computed outside the lock.

    Row building (pydantic dumps, canonical JSON of evidence and usage) is most of a batch's CPU;
    done inside the transaction it held the write lock for as long again as the writes did.
    """
    snapshots = {s.snapshot_id: s for _, s in items if s is not None}
    facts = {i: _meta_facts(s) for i, s in snapshots.items()}
    rows = [_rows(r, facts[r.snapshot_id]) if r.snapshot_id in facts else None for r, _ in items]
    return PreparedBatch(items, snapshots, facts, rows)


def _lock_traces(tx: Tx, facts: Iterable[_Facts]) -> None:
    """Lock the traces of ``facts`` in one global (sorted) order: batches never deadlock."""
    tx.lock(*sorted({_trace_key(f.trace_id) for f in facts}))


def _put_snapshots(tx: Tx, batch: PreparedBatch, now: datetime) -> None:
    """Lock the traces of the given snapshots and insert those absent."""
    _lock_traces(tx, batch.facts.values())
    _insert_rows(tx, _INSERT_SNAPSHOT, [_snapshot_params(s, now) for s in batch.snapshots.values()])
    contents = [{"snapshot_id": i, "content": s.canonical_text} for i, s in batch.snapshots.items()]
    _insert_rows(tx, _INSERT_CONTENT, contents)


def _stored_facts(tx: Tx, snapshot_ids: list[str]) -> dict[str, _Facts]:
    """Facts of snapshots recorded earlier (items passed without their snapshot), locked."""
    sql = """SELECT snapshot_id, trace_id, unit_event_id, window_rule, cutoff_event_id,
        cutoff_time FROM snapshots WHERE snapshot_id IN ({ids})"""
    found = {str(row[0]): _Facts(*row[1:]) for row in _in_rows(tx, sql, snapshot_ids)}
    if len(found) < len(snapshot_ids):
        raise PermanentStoreError(StoreCode.UNKNOWN_SNAPSHOT, "record the snapshot first")
    _lock_traces(tx, found.values())
    return found


@dataclass
class _Latest:
    """The latest evaluation of each snapshot, and of each (snapshot, metric-set version)."""

    of_snapshot: dict[str, str]
    of_version: dict[tuple[str, str], str]

    def previous(self, record: EvaluationRecord) -> str | None:
        """What ``record`` links to (the rule of ``write_evaluation``'s ``_previous``)."""
        if supersedes_same_version(record):
            return self.of_version.get((record.snapshot_id, record.metric_set_version))
        return self.of_snapshot.get(record.snapshot_id)

    def add(self, record: EvaluationRecord) -> None:
        """``record`` is now the latest of its snapshot and of its version."""
        self.of_snapshot[record.snapshot_id] = record.evaluation_id
        self.of_version[record.snapshot_id, record.metric_set_version] = record.evaluation_id


def _latest_evaluations(tx: Tx, snapshot_ids: list[str]) -> _Latest:
    """The latest evaluations of the snapshots (the last row read wins)."""
    sql = """SELECT snapshot_id, metric_set_version, evaluation_id FROM evaluations
        WHERE snapshot_id IN ({ids}) ORDER BY seq"""
    latest = _Latest({}, {})
    for snapshot_id, version, evaluation_id in _in_rows(tx, sql, snapshot_ids):
        latest.of_snapshot[str(snapshot_id)] = str(evaluation_id)
        latest.of_version[str(snapshot_id), str(version)] = str(evaluation_id)
    return latest


def _links(tx: Tx, created: list[tuple[str, _Facts]], now: datetime) -> list[dict[str, Any]]:
    """Link rows: each new evaluation to the earlier outcomes of its trace (and unit)."""
    traces = sorted({facts.trace_id for _, facts in created})
    sql = "SELECT event_id, trace_id, unit_event_id FROM outcomes WHERE trace_id IN ({ids})"
    outcomes = _in_rows(tx, sql, traces) if traces else []
    return [
        {"event_id": event_id, "evaluation_id": evaluation_id, "now": now}
        for evaluation_id, facts in created
        for event_id, trace_id, unit in outcomes
        if trace_id == facts.trace_id and (unit is None or unit == facts.unit_event_id)
    ]


def write_evaluations(tx: Tx, batch: PreparedBatch, now: datetime) -> list[Written]:
    """Insert every evaluation (insert-if-absent, like ``write_evaluation``); input order kept."""
    _put_snapshots(tx, batch, now)
    facts = dict(batch.facts)
    missing = [i for i in dict.fromkeys(r.snapshot_id for r, _ in batch.items) if i not in facts]
    if missing:
        facts.update(_stored_facts(tx, missing))
    latest = _latest_evaluations(tx, list(facts))
    # Under the write lock (SQLite) or the trace locks (PostgreSQL) nobody else can add these.
    known = set(existing_evaluation_ids(tx, [r.evaluation_id for r, _ in batch.items]))
    written: list[Written] = []
    evaluations: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    criteria: list[dict[str, Any]] = []
    texts: dict[str, dict[str, Any]] = {}
    created: list[tuple[str, _Facts]] = []
    for (record, _), prepared in zip(batch.items, batch.rows, strict=True):
        is_new = record.evaluation_id not in known
        written.append(Written(record.evaluation_id, created=is_new))
        if not is_new:
            continue
        rows = prepared or _rows(record, facts[record.snapshot_id])
        previous = latest.previous(record)
        evaluations.append({**rows.evaluation, "previous_evaluation_id": previous, "now": now})
        results.extend(rows.results)
        criteria.extend(rows.criteria)
        for digest, row in rows.texts.items():
            texts.setdefault(digest, row)
        known.add(record.evaluation_id)
        latest.add(record)
        created.append((record.evaluation_id, facts[record.snapshot_id]))
    _insert_rows(tx, _INSERT_EVALUATION, evaluations)
    _insert_rows(tx, _INSERT_RESULT, results)
    insert_texts(tx, texts)  # after the results: see insert_texts
    _insert_rows(tx, _INSERT_CRITERION, criteria)
    _insert_rows(tx, _INSERT_LINK, _links(tx, created, now))
    return written
