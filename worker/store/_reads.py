"""Read queries: records back as frozen models, counts for reports, paged result rows."""

from __future__ import annotations

import json
from typing import Any

from ._backends import Row, Tx
from ._errors import PermanentStoreError
from ._records import (
    Checkpoint,
    DeadLetter,
    EvaluationRecord,
    MetricResultRecord,
    OutcomeLink,
    OutcomeRecord,
    ResultRow,
    SnapshotRecord,
    StoredEvaluation,
)

__all__ = [
    "MetricCounts",
    "count_rows",
    "latest_checkpoint",
    "links",
    "metric_counts",
    "open_dead_letters",
    "pending_criteria",
    "result_page",
    "snapshot",
    "stored_evaluation",
]

MetricCounts = dict[str, dict[str, dict[str, int]]]


def _one(rows: list[Row]) -> Row | None:
    return rows[0] if rows else None


def snapshot(tx: Tx, snapshot_id: str) -> SnapshotRecord | None:
    """The snapshot's content, re-hashed: a stored text that no longer matches its id is refused."""
    row = _one(
        tx.rows(
            "SELECT content FROM snapshot_contents WHERE snapshot_id = :id", {"id": snapshot_id}
        )
    )
    if row is None:
        return None
    record = SnapshotRecord(content=json.loads(row[0]))
    if record.snapshot_id != snapshot_id:
        raise PermanentStoreError("CONTENT_MISMATCH", "stored snapshot content fails its hash")
    return record


_EVALUATION = """SELECT evaluation_id, trace_id, window_rule, cutoff_event_id, cutoff_time,
    previous_evaluation_id, created_at, snapshot_id, metric_set, metric_set_version, run,
    judge_kind, judge_model, synthetic, requests, usage, elapsed_s, lane
FROM evaluations WHERE evaluation_id = :evaluation_id"""

_RESULTS = """SELECT metric_id, metric_version, status, reason, score, passed, label, evidence,
    judge_model, question_ids
FROM metric_results WHERE evaluation_id = :evaluation_id ORDER BY position"""

_CRITERIA = "SELECT criterion FROM pending_outcomes WHERE evaluation_id = :evaluation_id"

_STORED_FIELDS = (
    "evaluation_id",
    "trace_id",
    "window_rule",
    "cutoff_event_id",
    "cutoff_time",
    "previous_evaluation_id",
    "created_at",
)
_RECORD_FIELDS = (
    "snapshot_id",
    "metric_set",
    "metric_set_version",
    "run",
    "judge_kind",
    "judge_model",
    "synthetic",
    "requests",
    "usage",
    "elapsed_s",
    "lane",
)
_RESULT_FIELDS = (
    "metric_id",
    "metric_version",
    "status",
    "reason",
    "score",
    "passed",
    "label",
    "evidence",
    "judge_model",
    "question_ids",
)


def _result(row: Row) -> MetricResultRecord:
    fields = dict(zip(_RESULT_FIELDS, row, strict=True))
    fields["evidence"] = json.loads(fields["evidence"])
    fields["question_ids"] = json.loads(fields["question_ids"])
    return MetricResultRecord.model_validate(fields)


def _record(tx: Tx, evaluation_id: str, row: Row) -> EvaluationRecord:
    fields: dict[str, Any] = dict(zip(_RECORD_FIELDS, row, strict=True))
    fields["usage"] = json.loads(fields["usage"])
    key = {"evaluation_id": evaluation_id}
    fields["results"] = [_result(r) for r in tx.rows(_RESULTS, key)]
    fields["outcome_criteria"] = [c for (c,) in tx.rows(_CRITERIA, key)]
    return EvaluationRecord.model_validate(fields)


def stored_evaluation(tx: Tx, evaluation_id: str) -> StoredEvaluation | None:
    """The evaluation with its results and criteria, or None."""
    row = _one(tx.rows(_EVALUATION, {"evaluation_id": evaluation_id}))
    if row is None:
        return None
    n = len(_STORED_FIELDS)
    fields: dict[str, Any] = dict(zip(_STORED_FIELDS, row[:n], strict=True))
    fields["record"] = _record(tx, evaluation_id, row[n:])
    return StoredEvaluation.model_validate(fields)


_LINKS = """SELECT o.event_id, o.trace_id, o.session_id, o.unit_event_id, o.name, o.value,
    o.observed_at, o.received_at, l.linked_at
FROM outcome_links l JOIN outcomes o ON o.event_id = l.outcome_event_id
WHERE l.evaluation_id = :evaluation_id ORDER BY o.seq"""

_OUTCOME_FIELDS = ("event_id", "trace_id", "session_id", "unit_event_id", "name", "value")


def _link(row: Row) -> OutcomeLink:
    fields: dict[str, Any] = dict(zip(_OUTCOME_FIELDS, row[:6], strict=True))
    fields["value"] = json.loads(fields["value"])
    fields["observed_at"] = row[6]
    return OutcomeLink(
        outcome=OutcomeRecord.model_validate(fields), received_at=row[7], linked_at=row[8]
    )


def links(tx: Tx, evaluation_id: str) -> tuple[OutcomeLink, ...]:
    """Outcomes linked to the evaluation, in arrival order."""
    return tuple(_link(r) for r in tx.rows(_LINKS, {"evaluation_id": evaluation_id}))


_PENDING = """SELECT p.criterion FROM pending_outcomes p
WHERE p.evaluation_id = :evaluation_id AND NOT EXISTS (
    SELECT 1 FROM outcome_links l JOIN outcomes o ON o.event_id = l.outcome_event_id
    WHERE l.evaluation_id = p.evaluation_id AND o.name = p.criterion)
ORDER BY p.criterion"""


def pending_criteria(tx: Tx, evaluation_id: str) -> tuple[str, ...]:
    """Criteria of the evaluation with no linked outcome of that name yet."""
    return tuple(str(c) for (c,) in tx.rows(_PENDING, {"evaluation_id": evaluation_id}))


_DEAD_LETTERS = """SELECT dead_letter_id, received_at, reason, task, lane, payload, payload_size,
    payload_sha256, truncated
FROM dead_letters d
WHERE NOT EXISTS (SELECT 1 FROM redrives r WHERE r.dead_letter_id = d.dead_letter_id)
    AND (CAST(:reason AS TEXT) IS NULL OR d.reason = :reason)
ORDER BY d.seq"""

_DEAD_LETTER_FIELDS = tuple(DeadLetter.model_fields)


def open_dead_letters(tx: Tx, reason: str | None, limit: int | None) -> tuple[DeadLetter, ...]:
    """Dead letters never redriven, oldest first."""
    sql = _DEAD_LETTERS if limit is None else f"{_DEAD_LETTERS} LIMIT :limit"
    rows = tx.rows(sql, {"reason": reason, "limit": limit})
    return tuple(
        DeadLetter.model_validate(dict(zip(_DEAD_LETTER_FIELDS, r, strict=True))) for r in rows
    )


def count_rows(tx: Tx, table: str) -> int:
    """Rows in one of the store's own tables."""
    (count,) = tx.rows(f"SELECT COUNT(*) FROM {table}")[0]  # noqa: S608 - table names are ours
    return int(count)


def metric_counts(tx: Tx) -> MetricCounts:
    """``{metric_id: {"by_status": {...}, "by_reason": {...}}}`` over every metric result."""
    counts: MetricCounts = {}
    rows = tx.rows(
        """SELECT metric_id, status, reason, COUNT(*) FROM metric_results
        GROUP BY metric_id, status, reason ORDER BY metric_id, status, reason"""
    )
    for metric_id, status, reason, n in rows:
        entry = counts.setdefault(metric_id, {"by_status": {}, "by_reason": {}})
        entry["by_status"][status] = entry["by_status"].get(status, 0) + int(n)
        entry["by_reason"][reason] = entry["by_reason"].get(reason, 0) + int(n)
    return counts


def latest_checkpoint(tx: Tx, backfill_id: str, source: str) -> Checkpoint | None:
    """The most recent checkpoint of one backfill source."""
    row = _one(
        tx.rows(
            """SELECT backfill_id, source, position, enqueued, recorded_at
            FROM backfill_checkpoints WHERE backfill_id = :backfill_id AND source = :source
            ORDER BY seq DESC LIMIT 1""",
            {"backfill_id": backfill_id, "source": source},
        )
    )
    fields = ("backfill_id", "source", "position", "enqueued", "recorded_at")
    return None if row is None else Checkpoint.model_validate(dict(zip(fields, row, strict=True)))


_RESULT_ROWS = """SELECT e.seq, e.evaluation_id, e.snapshot_id, e.trace_id, e.metric_set,
    e.metric_set_version, e.run, e.judge_kind, e.synthetic, e.lane, e.created_at, r.position,
    r.metric_id, r.metric_version, r.status, r.reason, r.score, r.passed, r.label, r.evidence,
    r.judge_model, r.question_ids, r.window_rule, r.cutoff_event_id, r.cutoff_time,
    s.agent_version, s.environment, s.tool, s.sampling_weight
FROM metric_results r
JOIN evaluations e ON e.evaluation_id = r.evaluation_id
JOIN snapshots s ON s.snapshot_id = e.snapshot_id
WHERE (e.seq > :seq OR (e.seq = :seq AND r.position > :position))
    AND (CAST(:metric_set_version AS TEXT) IS NULL OR e.metric_set_version = :metric_set_version)
ORDER BY e.seq, r.position
LIMIT :limit"""

_ROW_FIELDS = tuple(ResultRow.model_fields)


def _result_row(row: Row) -> ResultRow:
    fields: dict[str, Any] = dict(zip(_ROW_FIELDS, row[1:], strict=True))
    fields["evidence"] = json.loads(fields["evidence"])
    fields["question_ids"] = json.loads(fields["question_ids"])
    return ResultRow.model_validate(fields)


def result_page(
    tx: Tx, after: tuple[int, int], metric_set_version: str | None, limit: int
) -> tuple[tuple[ResultRow, ...], tuple[int, int] | None]:
    """Up to ``limit`` result rows after the ``(evaluation seq, position)`` cursor, and the next
    cursor (None when this page was the last)."""
    params = {
        "seq": after[0],
        "position": after[1],
        "metric_set_version": metric_set_version,
        "limit": limit,
    }
    rows = tx.rows(_RESULT_ROWS, params)
    page = tuple(_result_row(r) for r in rows)
    if len(rows) < limit:
        return page, None
    return page, (int(rows[-1][0]), int(rows[-1][11]))
