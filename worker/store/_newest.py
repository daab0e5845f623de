"""Newest-attempt reads: the latest evaluation of each (snapshot, metric-set version).

A snapshot re-evaluated after a failure has several attempts under one metric-set version
(:mod:`._attempts`); what it "is" now is its newest attempt. :data:`NEWEST_ATTEMPT` is that rule
as one SQL condition over the ``e`` (evaluations) alias, for any read that must count each
snapshot and version once; :func:`retry_candidate_page` lists the newest attempts whose results
carry given reason codes (``evalq retry`` and the automatic retry policy read it).

Newest is the highest ``seq`` among the attempt runs of the pair: attempt N + 1 is only ever
requested after attempt N was recorded, so recording order is attempt order. Runs that are not
attempts (an explicit named re-run) are not part of the chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ._attempts import ATTEMPT_PREFIX, attempt_of
from ._backends import Tx
from ._reads import RecordScope, scope_filter
from ._records import UtcTime

__all__ = [
    "IS_ATTEMPT",
    "NEWEST_ATTEMPT",
    "RetryCandidate",
    "RetryQuery",
    "newest_evaluation_id",
    "retry_candidate_page",
]

_PREFIX_LEN = len(ATTEMPT_PREFIX)
IS_ATTEMPT = f"(e.run = '' OR substr(e.run, 1, {_PREFIX_LEN}) = '{ATTEMPT_PREFIX}')"
"""``e.run`` names an attempt (``""`` or ``attempt:N``)."""
NEWEST_ATTEMPT = f"""{IS_ATTEMPT} AND e.seq = (SELECT MAX(n.seq) FROM evaluations n
    WHERE n.snapshot_id = e.snapshot_id AND n.metric_set_version = e.metric_set_version
    AND (n.run = '' OR substr(n.run, 1, {_PREFIX_LEN}) = '{ATTEMPT_PREFIX}'))"""  # noqa: S608
"""``e`` is the newest attempt of its (snapshot, metric-set version): walks the UNIQUE index."""


class RetryQuery(BaseModel):
    """Which newest attempts to list: those with a result of one of ``reasons``.

    ``metric_id`` narrows to results of that metric; ``scope`` narrows as everywhere (``since``
    and ``until`` bound the newest attempt's ``created_at``, ``backfill_id`` the snapshots).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    reasons: tuple[str, ...] = Field(min_length=1)
    metric_id: str | None = None
    scope: RecordScope | None = None


class RetryCandidate(BaseModel):
    """A newest attempt that a retry would supersede."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seq: int
    evaluation_id: str
    snapshot_id: str
    trace_id: str
    metric_set: str
    metric_set_version: str
    run: str
    lane: str
    created_at: UtcTime
    content_kept: bool
    """False once ``evalq purge`` expired the snapshot's content: it cannot be re-enqueued."""

    @property
    def attempt(self) -> int | None:
        """The attempt this evaluation is (1 for the first); None for a run merely prefixed
        ``attempt:`` that :func:`attempt_of` does not read as one (``attempt:02``)."""
        return attempt_of(self.run)


_CANDIDATES = """SELECT e.seq, e.evaluation_id, e.snapshot_id, e.trace_id, e.metric_set,
    e.metric_set_version, e.run, e.lane, e.created_at,
    EXISTS (SELECT 1 FROM snapshot_contents c WHERE c.snapshot_id = e.snapshot_id)
FROM evaluations e JOIN snapshots s ON s.snapshot_id = e.snapshot_id
WHERE e.seq > :after_seq AND {newest} AND EXISTS (SELECT 1 FROM metric_results r
        WHERE r.evaluation_id = e.evaluation_id AND r.reason IN ({reasons})
        AND (CAST(:metric_id AS TEXT) IS NULL OR r.metric_id = :metric_id))
    AND {scope}
ORDER BY e.seq LIMIT :limit"""

_FIELDS = tuple(RetryCandidate.model_fields)


def _reason_params(reasons: Sequence[str]) -> tuple[str, dict[str, Any]]:
    names = [f"reason{i}" for i in range(len(reasons))]
    return ", ".join(f":{n}" for n in names), dict(zip(names, reasons, strict=True))


def retry_candidate_page(
    tx: Tx, query: RetryQuery, after: int, limit: int
) -> tuple[tuple[RetryCandidate, ...], int | None]:
    """Up to ``limit`` newest attempts matching ``query`` after ``seq`` ``after``, and the next
    cursor (None on the last page)."""
    where, params = scope_filter(query.scope)
    placeholders, reason_params = _reason_params(query.reasons)
    sql = _CANDIDATES.format(newest=NEWEST_ATTEMPT, reasons=placeholders, scope=where)
    rows = tx.rows(
        sql,
        {
            **params,
            **reason_params,
            "metric_id": query.metric_id,
            "after_seq": after,
            "limit": limit,
        },
    )
    page = []
    for row in rows:
        fields = dict(zip(_FIELDS, row, strict=True))
        fields["content_kept"] = bool(fields["content_kept"])
        page.append(RetryCandidate.model_validate(fields))
    return tuple(page), (int(rows[-1][0]) if len(rows) == limit else None)


def newest_evaluation_id(tx: Tx, snapshot_id: str, metric_set_version: str) -> str | None:
    """The id of the newest attempt of (snapshot, metric-set version), or None."""
    rows = tx.rows(
        f"""SELECT e.evaluation_id FROM evaluations e
        WHERE e.snapshot_id = :snapshot_id AND e.metric_set_version = :version AND {IS_ATTEMPT}
        ORDER BY e.seq DESC LIMIT 1""",  # noqa: S608 - a fixed fragment of our own
        {"snapshot_id": snapshot_id, "version": metric_set_version},
    )
    return str(rows[0][0]) if rows else None
