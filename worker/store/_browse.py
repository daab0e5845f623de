"""Read queries of the result browser (``evalq ui``): one page, one count or one record at a time.

Every query is bounded: a result list is a keyset page (``evaluations.seq`` descending, newest
first) walked along the ``evaluations`` primary key, each row's result found through the
``UNIQUE (evaluation_id, metric_id)`` index; nothing here reads every record into memory.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ._backends import Row, Tx
from ._reads import (
    RecordScope,
    _evaluation_conditions,
    _snapshot_conditions,
    links,
    pending_criteria,
    scope_filter,
    stored_evaluation,
)
from ._records import OutcomeLink, StatusName, StoredEvaluation, UtcTime

__all__ = [
    "MAX_PAGE",
    "MIN_PREFIX",
    "EvaluationLink",
    "ResultFilter",
    "ResultListRow",
    "ReviewedEvaluation",
    "SnapshotIndex",
    "SnapshotReview",
    "VerdictCount",
    "matching_snapshot_ids",
    "result_list_page",
    "snapshot_evaluations",
    "snapshot_index",
    "snapshot_review",
    "verdict_counts",
]

MAX_PAGE = 500
"""The largest page a caller may ask for."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ResultFilter(_Frozen):
    """Which results of one metric a list shows; None is "any"."""

    metric_id: str
    status: StatusName | None = None
    reason: str | None = None
    passed: bool | None = None


class ResultListRow(_Frozen):
    """One metric result as a list shows it (no evidence: that is on the record's page)."""

    seq: int
    evaluation_id: str
    trace_id: str
    unit_kind: str
    unit_event_id: str | None
    metric_set_version: str
    created_at: UtcTime
    status: StatusName
    reason: str
    score: float | None
    passed: bool | None
    label: str | None
    agent_version: str | None
    environment: str | None
    tool: str | None


class VerdictCount(_Frozen):
    """Results of one (metric id, status, reason, passed)."""

    metric_id: str
    status: StatusName
    reason: str
    passed: bool | None
    n: int


class SnapshotIndex(_Frozen):
    """A snapshot's indexed columns (kept when retention expired its content)."""

    snapshot_id: str
    trace_id: str
    session_id: str | None
    unit_kind: str
    unit_event_id: str | None
    window_rule: str
    cutoff_event_id: str
    cutoff_time: UtcTime | None
    agent_version: str | None
    environment: str | None
    tool: str | None
    sampling_rule: str
    sampling_weight: float
    has_content: bool


class EvaluationLink(_Frozen):
    """One evaluation of a snapshot (the record itself, its re-evaluations and re-runs)."""

    evaluation_id: str
    metric_set_version: str
    run: str
    previous_evaluation_id: str | None
    created_at: UtcTime


_LIST = """SELECT e.seq, e.evaluation_id, e.trace_id, s.unit_kind, s.unit_event_id,
    e.metric_set_version, e.created_at, r.status, r.reason, r.score, r.passed, r.label,
    s.agent_version, s.environment, s.tool
FROM evaluations e
JOIN metric_results r ON r.evaluation_id = e.evaluation_id AND r.metric_id = :metric_id
JOIN snapshots s ON s.snapshot_id = e.snapshot_id
WHERE {where}
ORDER BY e.seq DESC
LIMIT :limit"""

_LIST_FIELDS = tuple(ResultListRow.model_fields)


def _filter_conditions(
    chosen: ResultFilter, before: int | None
) -> tuple[list[str], dict[str, Any]]:
    conditions: list[str] = []
    params: dict[str, Any] = {"metric_id": chosen.metric_id}
    wanted = {"status": chosen.status, "reason": chosen.reason, "passed": chosen.passed}
    for column, value in wanted.items():
        if value is not None:
            conditions.append(f"r.{column} = :f_{column}")
            params[f"f_{column}"] = value
    if before is not None:
        conditions.append("e.seq < :before")
        params["before"] = before
    return conditions, params


def result_list_page(
    tx: Tx, chosen: ResultFilter, scope: RecordScope | None, before: int | None, limit: int
) -> tuple[tuple[ResultListRow, ...], int | None]:
    """Up to ``limit`` results of one metric, newest evaluation first, older than ``before``
    (an evaluation seq; None: from the newest), and the cursor of the next page (None: last)."""
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be in 1..{MAX_PAGE}")
    conditions, params = _filter_conditions(chosen, before)
    scoped, scope_params = scope_filter(scope)
    where = " AND ".join([*conditions, scoped])
    rows = tx.rows(_LIST.format(where=where), {**params, **scope_params, "limit": limit})
    page = tuple(_list_row(r) for r in rows)
    return page, (page[-1].seq if len(page) == limit else None)


def _list_row(row: Row) -> ResultListRow:
    fields: dict[str, Any] = dict(zip(_LIST_FIELDS, row, strict=True))
    fields["passed"] = None if fields["passed"] is None else bool(fields["passed"])
    return ResultListRow.model_validate(fields)


_VERDICTS = """SELECT r.metric_id, r.status, r.reason, r.passed, COUNT(*) FROM metric_results r
{joins} WHERE {where}
GROUP BY r.metric_id, r.status, r.reason, r.passed
ORDER BY r.metric_id, r.status, r.reason"""
_JOIN_EVALUATIONS = "JOIN evaluations e ON e.evaluation_id = r.evaluation_id"
_JOIN_SNAPSHOTS = "JOIN snapshots s ON s.snapshot_id = e.snapshot_id"


def _verdict_sql(scope: RecordScope | None) -> tuple[str, dict[str, object]]:
    """Join only the tables the scope filters on: unscoped counts read ``metric_results`` alone."""
    if scope is None:
        return _VERDICTS.format(joins="", where="1 = 1"), {}
    snap, snap_params = _snapshot_conditions(scope)
    ev, ev_params = _evaluation_conditions(scope)
    joins = [_JOIN_EVALUATIONS, *([_JOIN_SNAPSHOTS] if snap else [])]
    where = " AND ".join(snap + ev) or "1 = 1"
    return _VERDICTS.format(joins=" ".join(joins), where=where), {**snap_params, **ev_params}


def verdict_counts(tx: Tx, scope: RecordScope | None) -> tuple[VerdictCount, ...]:
    """Results per (metric id, status, reason, passed) of the evaluations in the scope."""
    sql, params = _verdict_sql(scope)
    return tuple(
        VerdictCount(
            metric_id=m, status=s, reason=r, passed=None if p is None else bool(p), n=int(n)
        )
        for m, s, r, p, n in tx.rows(sql, params)
    )


_SNAPSHOT = """SELECT s.snapshot_id, s.trace_id, s.session_id, s.unit_kind, s.unit_event_id,
    s.window_rule, s.cutoff_event_id, s.cutoff_time, s.agent_version, s.environment, s.tool,
    s.sampling_rule, s.sampling_weight,
    EXISTS (SELECT 1 FROM snapshot_contents c WHERE c.snapshot_id = s.snapshot_id)
FROM snapshots s WHERE s.snapshot_id = :snapshot_id"""


def snapshot_index(tx: Tx, snapshot_id: str) -> SnapshotIndex | None:
    """The snapshot's indexed columns and whether its content is still kept, or None."""
    rows = tx.rows(_SNAPSHOT, {"snapshot_id": snapshot_id})
    if not rows:
        return None
    fields: dict[str, Any] = dict(zip(SnapshotIndex.model_fields, rows[0], strict=True))
    fields["has_content"] = bool(fields["has_content"])
    return SnapshotIndex.model_validate(fields)


def snapshot_evaluations(tx: Tx, snapshot_id: str, limit: int) -> tuple[EvaluationLink, ...]:
    """Up to ``limit`` evaluations of the snapshot, oldest first (re-evaluations and re-runs)."""
    rows = tx.rows(
        """SELECT evaluation_id, metric_set_version, run, previous_evaluation_id, created_at
        FROM evaluations WHERE snapshot_id = :snapshot_id ORDER BY seq LIMIT :limit""",
        {"snapshot_id": snapshot_id, "limit": limit},
    )
    return tuple(
        EvaluationLink.model_validate(dict(zip(EvaluationLink.model_fields, r, strict=True)))
        for r in rows
    )


# --- one snapshot's evaluations, whole (evalq show) ------------------------------------------

MIN_PREFIX = 8
"""The shortest snapshot-id prefix :func:`matching_snapshot_ids` looks up (hex digits)."""


class ReviewedEvaluation(_Frozen):
    """One evaluation as recorded (results with their audits), its outcomes and open criteria."""

    evaluation: StoredEvaluation
    outcomes: tuple[OutcomeLink, ...]
    pending: tuple[str, ...]


class SnapshotReview(_Frozen):
    """A snapshot's indexed columns and its evaluations, oldest first, read in one transaction.

    ``more`` is True when the snapshot has more evaluations than were read (the limit).
    """

    snapshot: SnapshotIndex
    evaluations: tuple[ReviewedEvaluation, ...]
    more: bool


def snapshot_review(tx: Tx, snapshot_id: str, limit: int) -> SnapshotReview | None:
    """The snapshot and up to ``limit`` of its evaluations with outcomes, or None if unknown."""
    index = snapshot_index(tx, snapshot_id)
    if index is None:
        return None
    listed = snapshot_evaluations(tx, snapshot_id, limit + 1)
    reviewed = []
    for link in listed[:limit]:
        stored = stored_evaluation(tx, link.evaluation_id)
        if stored is None:  # pragma: no cover - listed in this very transaction
            continue
        reviewed.append(
            ReviewedEvaluation(
                evaluation=stored,
                outcomes=links(tx, link.evaluation_id),
                pending=pending_criteria(tx, link.evaluation_id),
            )
        )
    return SnapshotReview(snapshot=index, evaluations=tuple(reviewed), more=len(listed) > limit)


_HEX = frozenset("0123456789abcdef")


def _after_prefix(prefix: str) -> str | None:
    """The smallest hex string above every string starting with ``prefix`` (None: none is)."""
    digits = prefix.rstrip("f")
    if not digits:
        return None
    last = "0123456789abcdef".index(digits[-1])
    return digits[:-1] + "0123456789abcdef"[last + 1]


def matching_snapshot_ids(tx: Tx, prefix: str, limit: int = 2) -> tuple[str, ...]:
    """Up to ``limit`` snapshot ids starting with ``prefix`` (lower-case hex, >= MIN_PREFIX).

    A range over the primary key (ids are lower-case hex, which every collation orders like
    bytes), so a prefix costs one index probe however many snapshots there are.
    """
    if len(prefix) < MIN_PREFIX or not set(prefix) <= _HEX:
        raise ValueError(f"a snapshot id prefix is {MIN_PREFIX}..64 lower-case hex digits")
    upper = _after_prefix(prefix)
    condition = "snapshot_id >= :low" + ("" if upper is None else " AND snapshot_id < :high")
    rows = tx.rows(
        f"SELECT snapshot_id FROM snapshots WHERE {condition} ORDER BY snapshot_id LIMIT :limit",  # noqa: S608
        {"low": prefix, "high": upper, "limit": limit},
    )
    return tuple(str(r[0]) for r in rows if str(r[0]).startswith(prefix))
