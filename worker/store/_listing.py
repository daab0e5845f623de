"""Result listings: the newest metric results first, one bounded page at a time.

``evalq results`` (and any reader that shows records one by one) asks for a page: at most
``limit`` rows, newest recorded first, filtered by metric, status, reason and a
:class:`~worker.store.RecordScope`. Each page is one ``LIMIT`` query walking the evaluations'
primary key backwards, never a scan into memory; the next page continues strictly before the
last row's :class:`ResultCursor`, so rows recorded meanwhile never shift a page.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._backends import Row, Tx
from ._reads import RecordScope, scope_filter
from ._records import StatusName, UtcTime

__all__ = [
    "ListedResult",
    "ResultCursor",
    "ResultQuery",
    "listed_reasons",
    "result_listing",
]

_CURSOR = re.compile(r"^(\d{1,18}):(\d{1,9})$")


class ResultCursor(BaseModel):
    """Where a listing stopped: (evaluation sequence, result position); text ``SEQ:POS``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int = Field(ge=0)
    position: int = Field(ge=0)

    def __str__(self) -> str:
        return f"{self.seq}:{self.position}"

    @classmethod
    def parse(cls, text: str) -> ResultCursor:
        """``SEQ:POS`` as printed by :meth:`__str__`; ``ValueError`` otherwise."""
        found = _CURSOR.fullmatch(text.strip())
        if found is None:
            raise ValueError("a cursor is SEQ:POS, as printed after a full page")
        return cls(seq=int(found.group(1)), position=int(found.group(2)))


class ResultQuery(BaseModel):
    """Which results a listing shows. Every field set narrows; None is "any"."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metric_id: str | None = None
    status: StatusName | None = None
    reason: str | None = None
    scope: RecordScope | None = None
    before: ResultCursor | None = None
    limit: int = Field(default=50, ge=1, le=10_000)


class ListedResult(BaseModel):
    """One metric result as a listing shows it: ids, unit, outcome — never evidence or content."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cursor: ResultCursor
    created_at: UtcTime
    trace_id: str
    session_id: str | None
    unit_kind: str
    unit_event_id: str | None
    metric_id: str
    status: StatusName
    reason: str
    score: float | None
    passed: bool | None
    label: str | None
    snapshot_id: str
    evaluation_id: str
    metric_set: str
    metric_set_version: str


_LISTING = """SELECT e.seq, r.position, e.created_at, e.trace_id, s.session_id, s.unit_kind,
    s.unit_event_id, r.metric_id, r.status, r.reason, r.score, r.passed, r.label, e.snapshot_id,
    e.evaluation_id, e.metric_set, e.metric_set_version
FROM evaluations e
CROSS JOIN metric_results r
JOIN snapshots s ON s.snapshot_id = e.snapshot_id
WHERE r.evaluation_id = e.evaluation_id AND {where}
ORDER BY e.seq DESC, r.position DESC
LIMIT :limit"""

# CROSS JOIN keeps evaluations the outer loop in SQLite (PostgreSQL plans it as any inner
# join): a page walks evaluations newest first and stops at the limit. With a plain JOIN, a
# metric or status filter made SQLite scan every result and sort them (a temp B-tree).

_LISTED_FIELDS = tuple(ListedResult.model_fields)[1:]


def _conditions(query: ResultQuery) -> tuple[list[str], dict[str, object]]:
    where, params = scope_filter(query.scope)
    conditions = [where]
    for column, value in (
        ("metric_id", query.metric_id),
        ("status", query.status),
        ("reason", query.reason),
    ):
        if value is not None:
            conditions.append(f"r.{column} = :{column}")
            params[column] = value
    if query.before is not None:
        conditions.append("(e.seq < :seq OR (e.seq = :seq AND r.position < :position))")
        params.update(seq=query.before.seq, position=query.before.position)
    return conditions, params


def _listed(row: Row) -> ListedResult:
    fields: dict[str, Any] = dict(zip(_LISTED_FIELDS, row[2:], strict=True))
    fields["cursor"] = ResultCursor(seq=int(row[0]), position=int(row[1]))
    return ListedResult.model_validate(fields)


def result_listing(
    tx: Tx, query: ResultQuery
) -> tuple[tuple[ListedResult, ...], ResultCursor | None]:
    """Up to ``query.limit`` results, newest first, and the cursor of the next page (None: no
    more). One row beyond the limit is read to know whether another page exists."""
    conditions, params = _conditions(query)
    sql = _LISTING.format(where=" AND ".join(conditions))
    rows = tx.rows(sql, {**params, "limit": query.limit + 1})
    page = tuple(_listed(r) for r in rows[: query.limit])
    more = len(rows) > query.limit
    return page, (page[-1].cursor if more else None)


def listed_reasons(tx: Tx, limit: int) -> tuple[str, ...]:
    """Distinct reason codes of recorded results (sorted, at most ``limit``)."""
    rows = tx.rows(
        "SELECT DISTINCT reason FROM metric_results ORDER BY reason LIMIT :limit",
        {"limit": limit},
    )
    return tuple(str(reason) for (reason,) in rows)
