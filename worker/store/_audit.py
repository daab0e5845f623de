"""The audit trail of judged results: exact question texts, state digests, resolved models.

Three append-only tables (schema 4): ``question_texts`` holds every distinct question text once,
keyed by the sha256 of its UTF-8 text (insert-if-absent); ``result_audits`` one row per audited
metric result (the digest of the state its request sent and the resolved judge model);
``result_questions`` the digests of the questions each result asked, in order. They are written
in the evaluation's own transaction (:func:`audit_rows` builds the rows outside it, for both the
single and the batch path) and read back into :attr:`MetricResultRecord.audit`.

A question text is content when a metric quotes the trace in it (``grounded`` asks about each
claim of the answer), so a retention purge deletes the texts that no snapshot with kept content
asked (:func:`expire_question_texts`); the digests stay, so every record stays readable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ._backends import Tx
from ._records import AskedQuestion, EvaluationRecord, ResultAudit

__all__ = [
    "INSERT_AUDIT",
    "INSERT_QUESTION",
    "INSERT_TEXT",
    "AuditRows",
    "audit_rows",
    "audits_of",
    "expire_question_texts",
    "insert_audit_rows",
    "lock_for_expiry",
]

INSERT_TEXT = """INSERT INTO question_texts (question_sha256, text) VALUES (:question_sha256, :text)
ON CONFLICT DO NOTHING"""
INSERT_AUDIT = """INSERT INTO result_audits (evaluation_id, metric_id, state_sha256, judge_model,
    judge_model_reported)
VALUES (:evaluation_id, :metric_id, :state_sha256, :judge_model, :judge_model_reported)"""
INSERT_QUESTION = """INSERT INTO result_questions (evaluation_id, metric_id, position, question_id,
    question_sha256)
VALUES (:evaluation_id, :metric_id, :position, :question_id, :question_sha256)"""


@dataclass
class AuditRows:
    """The audit rows of one or more evaluations, each table's rows in insert order."""

    texts: dict[str, dict[str, Any]] = field(default_factory=dict)  # by digest: once per batch
    audits: list[dict[str, Any]] = field(default_factory=list)
    questions: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, other: AuditRows) -> None:
        """Add another evaluation's rows (texts stay distinct by digest)."""
        for digest, row in other.texts.items():
            self.texts.setdefault(digest, row)
        self.audits.extend(other.audits)
        self.questions.extend(other.questions)


def audit_rows(record: EvaluationRecord) -> AuditRows:
    """The rows of every audited result of ``record`` (none for results without an audit)."""
    rows = AuditRows()
    evaluation_id = record.evaluation_id
    for result in record.results:
        audit = result.audit
        if audit is None:
            continue
        rows.audits.append(
            {
                "evaluation_id": evaluation_id,
                "metric_id": result.metric_id,
                "state_sha256": audit.state_sha256,
                "judge_model": audit.judge_model,
                "judge_model_reported": audit.judge_model_reported,
            }
        )
        for position, question in enumerate(audit.questions):
            rows.questions.append(
                {
                    "evaluation_id": evaluation_id,
                    "metric_id": result.metric_id,
                    "position": position,
                    "question_id": question.question_id,
                    "question_sha256": question.sha256,
                }
            )
            if question.text is not None:
                row = {"question_sha256": question.sha256, "text": question.text}
                rows.texts.setdefault(question.sha256, row)
    return rows


def insert_audit_rows(tx: Tx, rows: AuditRows) -> None:
    """Insert the rows: texts if absent, then audits, then their questions (which reference them).

    Texts go in digest order: two writers inserting overlapping texts then take the unique
    index's row locks in one order (PostgreSQL), so they cannot deadlock on each other.
    """
    tx.insert_rows(INSERT_TEXT, [rows.texts[d] for d in sorted(rows.texts)])
    tx.insert_rows(INSERT_AUDIT, rows.audits)
    tx.insert_rows(INSERT_QUESTION, rows.questions)


_AUDITS = """SELECT metric_id, state_sha256, judge_model, judge_model_reported
FROM result_audits WHERE evaluation_id = :evaluation_id"""
_QUESTIONS = """SELECT q.metric_id, q.question_id, q.question_sha256, t.text
FROM result_questions q LEFT JOIN question_texts t ON t.question_sha256 = q.question_sha256
WHERE q.evaluation_id = :evaluation_id
ORDER BY q.metric_id, q.position"""


def audits_of(tx: Tx, evaluation_id: str) -> dict[str, ResultAudit]:
    """The audit of each audited result of the evaluation, by metric id (texts None if expired)."""
    key = {"evaluation_id": evaluation_id}
    asked: dict[str, list[AskedQuestion]] = {}
    for metric_id, question_id, digest, text in tx.rows(_QUESTIONS, key):
        asked.setdefault(str(metric_id), []).append(
            AskedQuestion(question_id=question_id, sha256=digest, text=text)
        )
    return {
        str(metric_id): ResultAudit(
            questions=tuple(asked.get(str(metric_id), ())),
            state_sha256=state,
            judge_model=model,
            judge_model_reported=bool(reported),
        )
        for metric_id, state, model, reported in tx.rows(_AUDITS, key)
    }


def lock_for_expiry(tx: Tx, dialect: str) -> None:
    """PostgreSQL: hold off new question references until the purge commits.

    Under READ COMMITTED a worker's transaction could reference a stored text (its insert of the
    text was a no-op) while a purge, not seeing that uncommitted reference, deletes the text.
    ``SHARE`` mode waits for every transaction writing ``result_questions`` to finish and blocks
    new ones until this one ends; it must come first, before the purge reads anything. SQLite
    has one writer at a time already.
    """
    if dialect == "postgresql":
        tx.run("LOCK TABLE result_questions IN SHARE MODE")


_EXPIRE_TEXTS = """DELETE FROM question_texts WHERE NOT EXISTS (SELECT 1
    FROM result_questions q
    JOIN evaluations e ON e.evaluation_id = q.evaluation_id
    JOIN snapshots s ON s.snapshot_id = e.snapshot_id
    WHERE q.question_sha256 = question_texts.question_sha256 AND s.created_at >= :before)"""


def expire_question_texts(tx: Tx, before: datetime) -> int:
    """Delete the question texts that only snapshots created before ``before`` asked."""
    return max(0, tx.run(_EXPIRE_TEXTS, {"before": before}))
