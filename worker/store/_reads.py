"""Read queries: records back as frozen models, counts for reports, paged result rows."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from worker.canonical_json import FrozenJson

from ._audit import audits_of
from ._backends import Row, Tx
from ._errors import PermanentStoreError, StoreCode
from ._records import (
    Checkpoint,
    DeadLetter,
    EvaluationRecord,
    MetricResultRecord,
    OutcomeLink,
    OutcomeRecord,
    ResultAudit,
    ResultRow,
    SampledOutCount,
    SendRecord,
    SnapshotRecord,
    StoredEvaluation,
    UsageRecord,
    UtcTime,
)
from ._schema import BYTEWISE

__all__ = [
    "EvaluationRow",
    "LinkedOutcome",
    "MetricCounts",
    "RecordScope",
    "ResultCount",
    "SendCounts",
    "SnapshotLabels",
    "VersionCounts",
    "backfill_counts",
    "backfill_rule",
    "count_evaluations_in",
    "count_rows",
    "count_snapshots_in",
    "evaluation_page",
    "labels_page",
    "latest_checkpoint",
    "latest_checkpoints",
    "linked_outcome_page",
    "links",
    "metric_counts",
    "metric_counts_in",
    "open_dead_letter_counts",
    "open_dead_letters",
    "pending_criteria",
    "result_page",
    "sampled_out_counts",
    "scope_filter",
    "send_counts",
    "sends_of",
    "snapshot",
    "stored_evaluation",
    "version_counts",
]

MetricCounts = dict[str, dict[str, dict[str, int]]]


def _one(rows: list[Row]) -> Row | None:
    return rows[0] if rows else None


def snapshot(tx: Tx, snapshot_id: str) -> SnapshotRecord | None:
    """The snapshot's content, re-hashed: a stored text that no longer matches its id is refused.

    A snapshot recorded before schema version 4 keeps its whole-text id (``legacy_id``).
    """
    row = _one(
        tx.rows(
            "SELECT content FROM snapshot_contents WHERE snapshot_id = :id", {"id": snapshot_id}
        )
    )
    if row is None:
        return None
    record = SnapshotRecord(content=json.loads(row[0]))
    if snapshot_id not in (record.snapshot_id, record.legacy_id):
        raise PermanentStoreError(
            StoreCode.CONTENT_MISMATCH, "stored snapshot content fails its hash"
        )
    return record


_EVALUATION = """SELECT evaluation_id, trace_id, window_rule, cutoff_event_id, cutoff_time,
    previous_evaluation_id, created_at, snapshot_id, metric_set, metric_set_version, run,
    judge_kind, judge_model, synthetic, requests, usage, elapsed_s, lane
FROM evaluations WHERE evaluation_id = :evaluation_id"""

_RESULTS = """SELECT metric_id, metric_version, status, reason, score, passed, label, evidence,
    judge_model, question_ids, audit
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


def _result(row: Row, audits: dict[str, ResultAudit]) -> MetricResultRecord:
    fields: dict[str, Any] = dict(zip(_RESULT_FIELDS, row[:-1], strict=True))
    fields["evidence"] = json.loads(fields["evidence"])
    fields["question_ids"] = json.loads(fields["question_ids"])
    fields["audit"] = audits.get(fields["metric_id"])
    return MetricResultRecord.model_validate(fields)


def _record(tx: Tx, evaluation_id: str, row: Row) -> EvaluationRecord:
    fields: dict[str, Any] = dict(zip(_RECORD_FIELDS, row, strict=True))
    fields["usage"] = json.loads(fields["usage"])
    key = {"evaluation_id": evaluation_id}
    rows = tx.rows(_RESULTS, key)
    audits = audits_of(tx, evaluation_id, [(r[0], r[-1]) for r in rows])
    fields["results"] = [_result(r, audits) for r in rows]
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
    AND {scope}
ORDER BY e.seq, r.position
LIMIT :limit"""

_ROW_FIELDS = tuple(ResultRow.model_fields)


def _result_row(row: Row) -> ResultRow:
    fields: dict[str, Any] = dict(zip(_ROW_FIELDS, row[1:], strict=True))
    fields["evidence"] = json.loads(fields["evidence"])
    fields["question_ids"] = json.loads(fields["question_ids"])
    return ResultRow.model_validate(fields)


def result_page(
    tx: Tx,
    after: tuple[int, int],
    metric_set_version: str | None,
    limit: int,
    scope: RecordScope | None = None,
) -> tuple[tuple[ResultRow, ...], tuple[int, int] | None]:
    """Up to ``limit`` result rows after the ``(evaluation seq, position)`` cursor, and the next
    cursor (None when this page was the last); ``scope`` narrows them further."""
    where, scoped = scope_filter(scope)
    params = {
        **scoped,
        "seq": after[0],
        "position": after[1],
        "metric_set_version": metric_set_version,
        "limit": limit,
    }
    rows = tx.rows(_RESULT_ROWS.format(scope=where), params)
    page = tuple(_result_row(r) for r in rows)
    if len(rows) < limit:
        return page, None
    return page, (int(rows[-1][0]), int(rows[-1][11]))


# --- scoped reads for reports and status -----------------------------------------------------


class RecordScope(BaseModel):
    """Which records a report or a status count covers. Every field set narrows; None is "any".

    ``since``/``until`` bound the evaluation's ``created_at`` (``since`` inclusive, ``until``
    exclusive); ``metric_set`` (a name such as ``agent``) and ``metric_set_version`` match the
    evaluation's. ``backfill_id`` keeps snapshots with a send of that backfill (a ``sends`` row
    whose rule is ``backfill:<id>`` or ``backfill:<id>/<sampler rule>``), so a unit sent live
    first and backfilled later is in the backfill's scope; ``lane`` likewise keeps snapshots
    with a send on that lane. The slice fields match the snapshot's indexed slice metadata
    exactly. ``newest`` keeps, of each (snapshot, metric-set version), only its newest
    evaluation inside the time range (highest ``seq``): each unit counted once per version,
    re-evaluations superseding earlier ones.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    since: UtcTime | None = None
    until: UtcTime | None = None
    backfill_id: str | None = None
    agent_version: str | None = None
    environment: str | None = None
    tool: str | None = None
    metric_set_version: str | None = None
    metric_set: str | None = None
    lane: str | None = None
    newest: bool = False

    @property
    def narrows_evaluations(self) -> bool:
        """True when the scope filters on evaluation columns (time range, metric set, newest)."""
        chosen = (self.since, self.until, self.metric_set_version, self.metric_set)
        return self.newest or any(v is not None for v in chosen)


class EvaluationRow(BaseModel):
    """One evaluation with its snapshot's slice and sampling facts (for reports)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evaluation_id: str
    snapshot_id: str
    trace_id: str
    metric_set_version: str
    judge_kind: str
    judge_model: str | None
    synthetic: bool
    requests: int
    usage: tuple[UsageRecord, ...]
    elapsed_s: float
    lane: str
    created_at: UtcTime
    agent_version: str | None
    environment: str | None
    tool: str | None
    sampling_rate: float
    sampling_weight: float
    sampling_rule: str


class SnapshotLabels(BaseModel):
    """A snapshot's gold labels (``{metric_id: {passed|label}}``) and its ``source`` field."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    snapshot_id: str
    labels: FrozenJson
    source: str | None


class LinkedOutcome(BaseModel):
    """An outcome event linked to an evaluation (name and value only: the report's view)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    evaluation_id: str
    event_id: str
    name: str
    value: FrozenJson
    observed_at: UtcTime


def _snapshot_conditions(scope: RecordScope) -> tuple[list[str], dict[str, object]]:
    conditions: list[str] = []
    params: dict[str, object] = {}
    for column in ("agent_version", "environment", "tool"):
        value = getattr(scope, column)
        if value is not None:
            conditions.append(f"s.{column} = :{column}")
            params[column] = value
    if scope.backfill_id is not None:
        rule = backfill_rule(scope.backfill_id)
        conditions.append(
            "EXISTS (SELECT 1 FROM sends d WHERE d.snapshot_id = s.snapshot_id"
            " AND (d.rule = :bf_rule"
            " OR substr(d.rule, 1, CAST(:bf_len AS INTEGER)) = :bf_prefix))"
        )
        params.update(bf_rule=rule, bf_prefix=rule + "/", bf_len=len(rule) + 1)
    if scope.lane is not None:
        conditions.append(
            "EXISTS (SELECT 1 FROM sends d WHERE d.snapshot_id = s.snapshot_id AND d.lane = :lane)"
        )
        params["lane"] = scope.lane
    return conditions, params


def backfill_rule(backfill_id: str) -> str:
    """The sampling rule a backfill stamps (``backfill:<id>``; a sampler's rule follows a ``/``)."""
    return f"backfill:{backfill_id}"


def _newer_condition(scope: RecordScope) -> str:
    """No later evaluation of the same (snapshot, metric-set version) inside the time range."""
    bounds = ""
    if scope.since is not None:
        bounds += " AND n.created_at >= :since"
    if scope.until is not None:
        bounds += " AND n.created_at < :until"
    return f"""NOT EXISTS (SELECT 1 FROM evaluations n WHERE n.snapshot_id = e.snapshot_id
        AND n.metric_set_version = e.metric_set_version AND n.seq > e.seq{bounds})"""  # noqa: S608


def _evaluation_conditions(scope: RecordScope) -> tuple[list[str], dict[str, object]]:
    conditions: list[str] = []
    params: dict[str, object] = {}
    if scope.since is not None:
        conditions.append("e.created_at >= :since")
        params["since"] = scope.since
    if scope.until is not None:
        conditions.append("e.created_at < :until")
        params["until"] = scope.until
    if scope.metric_set_version is not None:
        conditions.append("e.metric_set_version = :scope_version")
        params["scope_version"] = scope.metric_set_version
    if scope.metric_set is not None:
        conditions.append("e.metric_set = :scope_set")
        params["scope_set"] = scope.metric_set
    if scope.newest:
        conditions.append(_newer_condition(scope))
    return conditions, params


def scope_filter(scope: RecordScope | None) -> tuple[str, dict[str, object]]:
    """``(sql, params)``: a condition over ``e`` (evaluations) and ``s`` (snapshots) aliases."""
    if scope is None:
        return "1 = 1", {}
    snap, snap_params = _snapshot_conditions(scope)
    ev, ev_params = _evaluation_conditions(scope)
    return " AND ".join(snap + ev) or "1 = 1", {**snap_params, **ev_params}


_FROM_SCOPED = "FROM evaluations e JOIN snapshots s ON s.snapshot_id = e.snapshot_id"
_SAME_SNAPSHOT = "e.snapshot_id = s.snapshot_id"


def count_snapshots_in(tx: Tx, scope: RecordScope) -> int:
    """Snapshots matching the slice/backfill filters; with a time range or version, only those
    with an evaluation inside it."""
    snap, params = _snapshot_conditions(scope)
    ev, ev_params = _evaluation_conditions(scope)
    if ev:
        exists = " AND ".join(ev)
        snap.append(f"EXISTS (SELECT 1 FROM evaluations e WHERE {_SAME_SNAPSHOT} AND {exists})")  # noqa: S608
        params.update(ev_params)
    where = " AND ".join(snap) or "1 = 1"
    (count,) = tx.rows(f"SELECT COUNT(*) FROM snapshots s WHERE {where}", params)[0]  # noqa: S608
    return int(count)


def count_evaluations_in(tx: Tx, scope: RecordScope) -> int:
    """Evaluations in the scope."""
    where, params = scope_filter(scope)
    (count,) = tx.rows(f"SELECT COUNT(*) {_FROM_SCOPED} WHERE {where}", params)[0]
    return int(count)


def metric_counts_in(tx: Tx, scope: RecordScope) -> MetricCounts:
    """:func:`metric_counts` restricted to the results of evaluations in the scope."""
    counts: MetricCounts = {}
    for metric_id, status, reason, n in result_counts_in(tx, scope):
        entry = counts.setdefault(metric_id, {"by_status": {}, "by_reason": {}})
        entry["by_status"][status] = entry["by_status"].get(status, 0) + n
        entry["by_reason"][reason] = entry["by_reason"].get(reason, 0) + n
    return counts


_EVALUATION_ROWS = """SELECT e.seq, e.evaluation_id, e.snapshot_id, e.trace_id,
    e.metric_set_version, e.judge_kind, e.judge_model, e.synthetic, e.requests, e.usage,
    e.elapsed_s, e.lane, e.created_at, s.agent_version, s.environment, s.tool, s.sampling_rate,
    s.sampling_weight, s.sampling_rule
{from_} WHERE e.seq > :after_seq AND {where} ORDER BY e.seq LIMIT :limit"""

_EVALUATION_ROW_FIELDS = tuple(EvaluationRow.model_fields)


def evaluation_page(
    tx: Tx, after: int, scope: RecordScope | None, limit: int
) -> tuple[tuple[EvaluationRow, ...], int | None]:
    """Up to ``limit`` evaluations in the scope after sequence ``after``, and the next cursor."""
    where, params = scope_filter(scope)
    sql = _EVALUATION_ROWS.format(from_=_FROM_SCOPED, where=where)
    rows = tx.rows(sql, {**params, "after_seq": after, "limit": limit})
    page = []
    for row in rows:
        fields: dict[str, Any] = dict(zip(_EVALUATION_ROW_FIELDS, row[1:], strict=True))
        fields["usage"] = json.loads(fields["usage"])
        page.append(EvaluationRow.model_validate(fields))
    return tuple(page), (int(rows[-1][0]) if len(rows) == limit else None)


_LABEL_SQL: dict[str, tuple[str, str, str]] = {
    # (labels JSON text, source text, "labels present and non-empty") per dialect
    "sqlite": (
        "json_extract(c.content, '$.labels')",
        "json_extract(c.content, '$.source')",
        "json_extract(c.content, '$.labels') <> '{}'",
    ),
    "postgresql": (
        "(c.content::jsonb -> 'labels')::text",
        "c.content::jsonb ->> 'source'",
        "(c.content::jsonb -> 'labels') <> '{}'::jsonb",
    ),
}


def labels_page(
    tx: Tx, dialect: str, after: str, scope: RecordScope | None, limit: int
) -> tuple[tuple[SnapshotLabels, ...], str | None]:
    """Snapshots (id order, after ``after``) with gold labels and an evaluation in the scope.

    Labels are read inside the database (JSON functions of each dialect), so a report never
    loads the snapshots' evaluated content.
    """
    labels, source, present = _LABEL_SQL[dialect]
    where, params = scope_filter(scope)
    sql = f"""SELECT s.snapshot_id, {labels}, {source}
    FROM snapshots s JOIN snapshot_contents c ON c.snapshot_id = s.snapshot_id
    WHERE s.snapshot_id > :after_id AND {present} AND EXISTS (
        SELECT 1 FROM evaluations e WHERE e.snapshot_id = s.snapshot_id AND {where})
    ORDER BY s.snapshot_id LIMIT :limit"""  # noqa: S608 - fragments are ours, values are params
    rows = tx.rows(sql, {**params, "after_id": after, "limit": limit})
    page = tuple(
        SnapshotLabels(snapshot_id=r[0], labels=json.loads(r[1]), source=r[2]) for r in rows
    )
    return page, (str(rows[-1][0]) if len(rows) == limit else None)


def linked_outcome_page(
    tx: Tx, after: tuple[int, int], scope: RecordScope | None, limit: int
) -> tuple[tuple[LinkedOutcome, ...], tuple[int, int] | None]:
    """Outcome links of evaluations in the scope, by (evaluation seq, outcome seq)."""
    where, params = scope_filter(scope)
    sql = f"""SELECT e.seq, o.seq, l.evaluation_id, o.event_id, o.name, o.value, o.observed_at
    FROM outcome_links l JOIN outcomes o ON o.event_id = l.outcome_event_id
    JOIN evaluations e ON e.evaluation_id = l.evaluation_id
    JOIN snapshots s ON s.snapshot_id = e.snapshot_id
    WHERE (e.seq > :after_seq OR (e.seq = :after_seq AND o.seq > :after_oseq)) AND {where}
    ORDER BY e.seq, o.seq LIMIT :limit"""  # noqa: S608 - fragments are ours, values are params
    rows = tx.rows(sql, {**params, "after_seq": after[0], "after_oseq": after[1], "limit": limit})
    page = tuple(
        LinkedOutcome(
            evaluation_id=r[2], event_id=r[3], name=r[4], value=json.loads(r[5]), observed_at=r[6]
        )
        for r in rows
    )
    cursor = (int(rows[-1][0]), int(rows[-1][1])) if len(rows) == limit else None
    return page, cursor


def open_dead_letter_counts(tx: Tx) -> dict[str, int]:
    """``{reason: n}`` over dead letters never redriven."""
    rows = tx.rows(
        """SELECT d.reason, COUNT(*) FROM dead_letters d
        WHERE NOT EXISTS (SELECT 1 FROM redrives r WHERE r.dead_letter_id = d.dead_letter_id)
        GROUP BY d.reason ORDER BY d.reason"""
    )
    return {str(reason): int(n) for reason, n in rows}


def latest_checkpoints(tx: Tx) -> tuple[Checkpoint, ...]:
    """The most recent checkpoint of every (backfill id, source), by backfill id and source."""
    rows = tx.rows(
        """SELECT c.backfill_id, c.source, c.position, c.enqueued, c.recorded_at
        FROM backfill_checkpoints c
        WHERE c.seq = (SELECT MAX(c2.seq) FROM backfill_checkpoints c2
            WHERE c2.backfill_id = c.backfill_id AND c2.source = c.source)
        ORDER BY c.backfill_id, c.source"""
    )
    fields = ("backfill_id", "source", "position", "enqueued", "recorded_at")
    return tuple(Checkpoint.model_validate(dict(zip(fields, r, strict=True))) for r in rows)


_BACKFILL_COUNTS = """SELECT COUNT(DISTINCT e.snapshot_id), COUNT(DISTINCT CASE WHEN EXISTS (
    SELECT 1 FROM metric_results r
    WHERE r.evaluation_id = e.evaluation_id AND r.status = 'ERROR')
    THEN e.snapshot_id END)
FROM evaluations e
WHERE e.snapshot_id IN (SELECT d.snapshot_id FROM sends d
    WHERE d.rule {c} = :rule OR (d.rule {c} >= :prefix AND d.rule {c} < :prefix_end))"""


def backfill_counts(tx: Tx, backfill_id: str, dialect: str = "sqlite") -> tuple[int, int]:
    """(snapshots sent by the backfill with an evaluation, those with an ERROR result).

    Found through their sends, so a unit evaluated earlier (sent live, or by another backfill)
    counts for this backfill too. The send's rule is ``backfill:<id>`` or
    ``backfill:<id>/<sampler rule>``: an equality or a prefix, written as a byte-wise range
    (``/`` + 1 is ``0``) so both walk the ``sends_by_rule`` index, whatever the database's
    default collation.
    """
    rule = backfill_rule(backfill_id)
    params = {"rule": rule, "prefix": rule + "/", "prefix_end": rule + "0"}
    sql = _BACKFILL_COUNTS.format(c=BYTEWISE[dialect])
    evaluated, failed = tx.rows(sql, params)[0]
    return int(evaluated), int(failed)


_TALLY_GROUP = "rule, rate, lane, agent_version, environment, tool"
_TALLY_FILTERS = {
    "lane": "lane = :lane",
    "since": "ended_at >= :since",
    "until": "ended_at < :until",
}


def _nulls_first(value: object) -> tuple[bool, object]:
    return (value is not None, value if value is not None else "")


def sampled_out_counts(
    tx: Tx, *, lane: str | None = None, since: object = None, until: object = None
) -> tuple[SampledOutCount, ...]:
    """Seen / sampled totals per (rule, rate, lane, slice) over the stored tallies.

    ``lane`` keeps one lane; ``since`` (inclusive) and ``until`` (exclusive) bound the tallies'
    ``ended_at``. Ordered by the grouping columns, ``None`` first in both databases.
    """
    given = {"lane": lane, "since": since, "until": until}
    params = {k: v for k, v in given.items() if v is not None}
    where = " AND ".join(_TALLY_FILTERS[k] for k in params) or "1 = 1"
    rows = tx.rows(
        f"""SELECT {_TALLY_GROUP}, SUM(seen), SUM(sampled) FROM sampling_tallies
        WHERE {where} GROUP BY {_TALLY_GROUP}""",  # noqa: S608 - fragments are ours
        params,
    )
    fields = ("rule", "rate", "lane", "agent_version", "environment", "tool", "seen", "sampled")
    counts = [
        SampledOutCount.model_validate(
            dict(zip(fields, (*r[:6], int(r[6]), int(r[7])), strict=True))
        )
        for r in rows
    ]
    return tuple(sorted(counts, key=lambda c: [_nulls_first(getattr(c, f)) for f in fields[:6]]))


class ResultCount(NamedTuple):
    """Metric results of one (metric id, status, reason)."""

    metric_id: str
    status: str
    reason: str
    n: int


def result_counts_in(tx: Tx, scope: RecordScope | None) -> tuple[ResultCount, ...]:
    """Results per (metric id, status, reason) of the evaluations in the scope."""
    where, params = scope_filter(scope)
    rows = tx.rows(
        f"""SELECT r.metric_id, r.status, r.reason, COUNT(*) FROM metric_results r
        JOIN evaluations e ON e.evaluation_id = r.evaluation_id
        JOIN snapshots s ON s.snapshot_id = e.snapshot_id
        WHERE {where}
        GROUP BY r.metric_id, r.status, r.reason ORDER BY r.metric_id, r.status, r.reason""",  # noqa: S608
        params,
    )
    return tuple(ResultCount(str(m), str(s), str(r), int(n)) for m, s, r, n in rows)


class VersionCounts(NamedTuple):
    """Evaluations of one metric-set version in a scope: all of them, and the newest per unit."""

    metric_set_version: str
    evaluations: int
    newest: int

    @property
    def superseded(self) -> int:
        """Evaluations a newer one of the same (snapshot, version) replaced."""
        return self.evaluations - self.newest


def version_counts(tx: Tx, scope: RecordScope | None) -> tuple[VersionCounts, ...]:
    """Per metric-set version: evaluations in the scope (``newest`` ignored) and the newest."""
    every = (scope or RecordScope()).model_copy(update={"newest": False})
    where, params = scope_filter(every)
    newest = _newer_condition(every)
    rows = tx.rows(
        f"""SELECT e.metric_set_version, COUNT(*), SUM(CASE WHEN {newest} THEN 1 ELSE 0 END)
        {_FROM_SCOPED} WHERE {where}
        GROUP BY e.metric_set_version ORDER BY e.metric_set_version""",
        params,
    )
    return tuple(VersionCounts(str(v), int(n), int(k or 0)) for v, n, k in rows)


class SendCounts(NamedTuple):
    """Sends of the snapshots in a scope: all of them, and the snapshots they delivered."""

    sends: int
    snapshots: int

    @property
    def duplicates(self) -> int:
        """Sends beyond each snapshot's first (the same unit sent live, backfilled, re-sent)."""
        return self.sends - self.snapshots


def send_counts(tx: Tx, scope: RecordScope | None) -> SendCounts:
    """Every send of the snapshots with an evaluation in ``scope`` (whatever lane or backfill)."""
    where, params = scope_filter(scope)
    rows = tx.rows(
        f"""SELECT COUNT(*), COUNT(DISTINCT d.snapshot_id) FROM sends d
        WHERE d.snapshot_id IN (SELECT e.snapshot_id {_FROM_SCOPED} WHERE {where})""",  # noqa: S608
        params,
    )
    sends, snapshots = rows[0]
    return SendCounts(int(sends), int(snapshots))


_SENDS = """SELECT snapshot_id, message_id, lane, rate, weight, rule, source FROM sends
WHERE snapshot_id = :snapshot_id ORDER BY seq"""
_SEND_FIELDS = ("snapshot_id", "message_id", "lane", "rate", "weight", "rule", "source")


def sends_of(tx: Tx, snapshot_id: str) -> tuple[SendRecord, ...]:
    """The snapshot's sends, in arrival order."""
    rows = tx.rows(_SENDS, {"snapshot_id": snapshot_id})
    return tuple(SendRecord.model_validate(dict(zip(_SEND_FIELDS, r, strict=True))) for r in rows)


def sampling_weight_sum(tx: Tx, scope: RecordScope | None) -> tuple[int, float]:
    """(evaluations in the scope, the sum of their snapshots' sampling weights)."""
    where, params = scope_filter(scope)
    rows = tx.rows(
        f"SELECT COUNT(*), COALESCE(SUM(s.sampling_weight), 0) {_FROM_SCOPED} WHERE {where}",
        params,
    )
    count, total = rows[0]
    return int(count), float(total)
