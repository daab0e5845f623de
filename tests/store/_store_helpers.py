"""Builders for store records and raw (driver-level) access to a store's database in tests."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from typing import Any

import psycopg

from producer.snapshot import content_id
from worker.store import (
    APPEND_ONLY_TABLES,
    AskedQuestion,
    EvaluationRecord,
    MetricResultRecord,
    OutcomeRecord,
    ResultAudit,
    SendRecord,
    SnapshotRecord,
    UsageRecord,
)

__all__ = [
    "QUESTION_TEXTS",
    "STATE_SHA256",
    "Dump",
    "dump_tables",
    "evaluation_record",
    "outcome_record",
    "raw_connection",
    "record_as_schema_4",
    "send_record",
    "snapshot_record",
    "twin_snapshots",
    "wire",
]

Dump = dict[str, list[tuple[Any, ...]]]

QUESTION_TEXTS = (
    '{"type":"noul","instructions":"Is claim 1 supported? \u00e9t\u00e9 ok"}',
    '{"type":"noul","instructions":"Is claim 2 [b]supported[/b]? :x:"}',
)
"""The exact texts the helper evaluation's ``groundedness`` result asked (non-ASCII, Rich markup
and an emoji code included: they must print as they are)."""
STATE_SHA256 = "5e" * 32
"""The state digest the helper evaluation's ``groundedness`` result records."""


def wire(
    trace_id: str = "trace-1", *, unit_event_id: str | None = None, text: str = "hello"
) -> dict[str, Any]:
    """A snapshot's wire JSON (the shape ``producer.snapshot.Snapshot.wire()`` produces)."""
    return {
        "schema_version": 1,
        "trace_id": trace_id,
        "session_id": "session-1",
        "unit": {"kind": "invocation", "event_id": unit_event_id},
        "events": [
            {"id": "u1", "type": "user", "text": text},
            {"id": "a1", "type": "assistant", "text": "Your refund is on its way."},
        ],
        "window": {
            "rule": "invocation_end",
            "cutoff_event_id": "a1",
            "cutoff_time": "2025-01-02T03:04:05Z",
        },
        "labels": {},
        "slice": {"agent_version": "1.2", "environment": "prod", "tool": None},
        "sampling": {"lane": "live", "rate": 0.5, "weight": 2.0, "rule": "half"},
        "metric_set": "agent",
    }


def snapshot_record(
    trace_id: str = "trace-1", *, unit_event_id: str | None = None, text: str = "hello"
) -> SnapshotRecord:
    """A snapshot record for ``trace_id`` (``text`` varies the content, hence the id)."""
    return SnapshotRecord(content=wire(trace_id, unit_event_id=unit_event_id, text=text))


@cache
def twin_snapshots() -> tuple[SnapshotRecord, SnapshotRecord]:
    """Two snapshots whose ids share their first 8 hex digits (found by hashing, ~65k tries)."""
    seen: dict[str, str] = {}
    n = 0
    while True:
        text = f"twin-{n}"
        digest = content_id(wire(text=text))
        if digest[:8] in seen:
            return snapshot_record(text=seen[digest[:8]]), snapshot_record(text=text)
        seen[digest[:8]] = text
        n += 1


def send_record(
    snapshot: SnapshotRecord,
    message_id: str = "message-1",
    *,
    rule: str | None = None,
    lane: str | None = None,
) -> SendRecord:
    """A send of ``snapshot`` in ``message_id``: its own sampling, or ``rule``/``lane`` instead."""
    send = SendRecord.of(snapshot.snapshot_id, snapshot.meta, message_id, lane)
    return send if rule is None else send.model_copy(update={"rule": rule})


def evaluation_record(
    snapshot_id: str,
    *,
    version: str = "agent@1",
    run: str = "",
    criteria: tuple[str, ...] = (),
    score: float = 0.9,
) -> EvaluationRecord:
    """An evaluation with three results of different statuses."""
    results = (
        MetricResultRecord(
            metric_id="groundedness",
            metric_version="3",
            status="DECIDED",
            reason="DECIDED",
            score=score,
            passed=score >= 0.8,
            evidence={"claims": 2, "supported": ["c1", "c2"]},
            judge_model="judge-m",
            question_ids=("q1", "q2"),
            audit=ResultAudit(
                questions=tuple(
                    AskedQuestion.of(qid, text)
                    for qid, text in zip(("q1", "q2"), QUESTION_TEXTS, strict=True)
                ),
                state_sha256=STATE_SHA256,
                judge_model="judge-m-2025",
                judge_model_reported=True,
            ),
        ),
        MetricResultRecord(
            metric_id="tool_use",
            metric_version="1",
            status="SKIPPED",
            reason="NO_TOOL_RESULTS",
        ),
        MetricResultRecord(
            metric_id="helpfulness",
            metric_version="2",
            status="ERROR",
            reason="TIMEOUT",
            judge_model="judge-m",
            audit=ResultAudit(
                questions=(AskedQuestion.of("h1", QUESTION_TEXTS[1]),),
                state_sha256=STATE_SHA256,
                judge_model="judge-m",
                judge_model_reported=False,
            ),
        ),
    )
    return EvaluationRecord(
        snapshot_id=snapshot_id,
        metric_set="agent",
        metric_set_version=version,
        run=run,
        judge_kind="chat",
        judge_model="judge-m",
        synthetic=False,
        requests=2,
        usage=(
            UsageRecord(model="judge-m", usage={"input_tokens": 120, "output_tokens": 7}),
            UsageRecord(model=None, usage=None),
        ),
        elapsed_s=1.25,
        lane="live",
        results=results,
        outcome_criteria=criteria,
    )


def outcome_record(
    event_id: str,
    trace_id: str = "trace-1",
    *,
    name: str = "refund_reversed",
    unit_event_id: str | None = None,
) -> OutcomeRecord:
    """An outcome event of ``trace_id``."""
    return OutcomeRecord(
        event_id=event_id,
        trace_id=trace_id,
        unit_event_id=unit_event_id,
        name=name,
        value={"amount": 12.5},
        observed_at=datetime(2025, 1, 3, tzinfo=UTC),
    )


@contextmanager
def raw_connection(url: str) -> Iterator[sqlite3.Connection | psycopg.Connection[Any]]:
    """A plain driver connection (autocommit) to the store's database, bypassing the store."""
    if url.startswith("sqlite:///"):
        conn = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()
        return
    with psycopg.connect(url, autocommit=True) as pg:
        yield pg


def _sqlite_dump(conn: sqlite3.Connection, table: str) -> list[tuple[Any, ...]]:
    return sorted(conn.execute(f"SELECT rowid, * FROM {table}").fetchall(), key=repr)


def _pg_dump(conn: psycopg.Connection[Any], table: str) -> list[tuple[Any, ...]]:
    # xmin changes whenever a row version is rewritten, even with identical values.
    rows = conn.execute(f"SELECT xmin::text, ctid::text, {table}::text FROM {table}").fetchall()
    return sorted(rows)


def dump_tables(url: str) -> Dump:
    """Every row of every store table, as the database returns it."""
    with raw_connection(url) as conn:
        if isinstance(conn, sqlite3.Connection):
            return {t: _sqlite_dump(conn, t) for t in APPEND_ONLY_TABLES}
        return {t: _pg_dump(conn, t) for t in APPEND_ONLY_TABLES}


_SCHEMA_4_ROWS = (
    ("INSERT INTO question_texts VALUES ({}, {}) ON CONFLICT DO NOTHING", "texts"),
    ("INSERT INTO result_audits VALUES ({}, {}, {}, {}, {})", "audits"),
    ("INSERT INTO result_questions VALUES ({}, {}, {}, {}, {})", "questions"),
)


def _schema_4_rows(record: EvaluationRecord) -> dict[str, list[tuple[Any, ...]]]:
    rows: dict[str, list[tuple[Any, ...]]] = {"texts": [], "audits": [], "questions": []}
    for result in record.results:
        audit = result.audit
        if audit is None:
            continue
        key = (record.evaluation_id, result.metric_id)
        rows["audits"].append(
            (*key, audit.state_sha256, audit.judge_model, audit.judge_model_reported)
        )
        for position, q in enumerate(audit.questions):
            rows["questions"].append((*key, position, q.question_id, q.sha256))
            rows["texts"] += [(q.sha256, q.text)] if q.text is not None else []
    return rows


def record_as_schema_4(
    store: Any, url: str, record: EvaluationRecord, snapshot: SnapshotRecord | None = None
) -> None:
    """Record ``record`` as a schema-4 worker did: results without the ``audit`` column, the
    audit in ``result_audits`` / ``result_questions`` and its texts in ``question_texts``."""
    bare = tuple(r.model_copy(update={"audit": None}) for r in record.results)
    store.record_evaluation(record.model_copy(update={"results": bare}), snapshot)
    rows = _schema_4_rows(record)
    with raw_connection(url) as conn:
        mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
        for sql, part in _SCHEMA_4_ROWS:
            for row in rows[part]:
                conn.execute(sql.format(*[mark] * len(row)), row)
