"""The audit trail of judged results: exact question texts, state digests, resolved models.

Since schema 5 a result's audit is one canonical JSON column of its own ``metric_results`` row
(:func:`audit_json`: ``{"judge_model", "judge_model_reported", "questions": [[id, sha256], …],
"state_sha256"}``), and every distinct question text is stored once in ``question_texts``, keyed
by the sha256 of its UTF-8 text (insert-if-absent, :func:`text_rows`). Both are written in the
evaluation's own transaction, results first, and read back into :attr:`MetricResultRecord.audit`
(:func:`audits_of`). Results recorded under schema 4 keep their audit in ``result_audits`` (one row
per result) and ``result_questions`` (one row per question, indexed by digest); they are read from
there. Why the change: those rows were 35-43% of the store's CPU per evaluation
(``bench/store_writes.py``, docs/concurrency.md "Seventeenth round").

A question text is content when a metric quotes the trace in it (``grounded`` asks about each
claim of the answer), so a retention purge deletes the texts that no snapshot with kept content
asked (:func:`expire_question_texts`): it lists them in ``expired_question_texts`` under its own
sequence number, which is what the ``question_texts`` trigger allows, then deletes them. The
digests stay, so every record stays readable.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from worker.canonical_json import key_json

from ._backends import Row, Tx
from ._records import AskedQuestion, EvaluationRecord, ResultAudit

__all__ = [
    "INSERT_TEXT",
    "audit_json",
    "audits_of",
    "expire_question_texts",
    "insert_texts",
    "lock_for_expiry",
    "text_rows",
]

INSERT_TEXT = """INSERT INTO question_texts (question_sha256, text) VALUES (:question_sha256, :text)
ON CONFLICT DO NOTHING"""

_BOOL = {True: "true", False: "false"}


def audit_json(audit: ResultAudit | None) -> str | None:
    """The canonical JSON of ``audit`` for ``metric_results.audit`` (None: no audit).

    Written from the fields (the same text as ``canonical_json`` of the dict, pinned by a test):
    digests are lowercase hex and need no escaping; ids and model names repeat and are cached.
    """
    if audit is None:
        return None
    model = "null" if audit.judge_model is None else key_json(audit.judge_model)
    asked = ",".join(f'[{key_json(q.question_id)},"{q.sha256}"]' for q in audit.questions)
    return (
        f'{{"judge_model":{model},"judge_model_reported":{_BOOL[audit.judge_model_reported]},'
        f'"questions":[{asked}],"state_sha256":"{audit.state_sha256}"}}'
    )


def text_rows(record: EvaluationRecord) -> dict[str, dict[str, Any]]:
    """The ``question_texts`` rows the record's audits need, once per digest."""
    rows: dict[str, dict[str, Any]] = {}
    for result in record.results:
        for q in () if result.audit is None else result.audit.questions:
            if q.text is not None:
                rows.setdefault(q.sha256, {"question_sha256": q.sha256, "text": q.text})
    return rows


def insert_texts(tx: Tx, rows: dict[str, dict[str, Any]]) -> None:
    """Insert the texts not yet stored, after the results that reference them.

    Digest order: two writers inserting overlapping texts then take the unique index's row locks
    in one order (PostgreSQL), so they cannot deadlock on each other. After the results: a writer
    then holds its ``metric_results`` lock before it relies on a stored text, which is what
    :func:`lock_for_expiry` waits for.
    """
    tx.insert_rows(INSERT_TEXT, [rows[d] for d in sorted(rows)])


# --- reading ---------------------------------------------------------------------------------

_LEGACY_AUDITS = """SELECT metric_id, state_sha256, judge_model, judge_model_reported
FROM result_audits WHERE evaluation_id = :evaluation_id"""
_LEGACY_QUESTIONS = """SELECT q.metric_id, q.question_id, q.question_sha256, t.text
FROM result_questions q LEFT JOIN question_texts t ON t.question_sha256 = q.question_sha256
WHERE q.evaluation_id = :evaluation_id
ORDER BY q.metric_id, q.position"""
_TEXTS = "SELECT question_sha256, text FROM question_texts WHERE question_sha256 IN ({names})"


def _texts(tx: Tx, digests: Sequence[str]) -> dict[str, str]:
    """The stored texts of ``digests`` (an expired one is absent)."""
    names = {f"d{i}": d for i, d in enumerate(dict.fromkeys(digests))}
    if not names:
        return {}
    sql = _TEXTS.format(names=", ".join(f":{n}" for n in names))  # generated names only
    return {str(d): str(t) for d, t in tx.rows(sql, names)}


def _audit(parsed: dict[str, Any], texts: dict[str, str]) -> ResultAudit:
    asked = tuple(
        AskedQuestion(question_id=i, sha256=d, text=texts.get(d)) for i, d in parsed["questions"]
    )
    return ResultAudit(
        questions=asked,
        state_sha256=parsed["state_sha256"],
        judge_model=parsed["judge_model"],
        judge_model_reported=parsed["judge_model_reported"],
    )


def _legacy_audits(tx: Tx, evaluation_id: str) -> dict[str, ResultAudit]:
    """The audits of a result set recorded under schema 4 (two tables)."""
    key = {"evaluation_id": evaluation_id}
    asked: dict[str, list[AskedQuestion]] = {}
    for metric_id, question_id, digest, text in tx.rows(_LEGACY_QUESTIONS, key):
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
        for metric_id, state, model, reported in tx.rows(_LEGACY_AUDITS, key)
    }


def audits_of(tx: Tx, evaluation_id: str, columns: Sequence[Row]) -> dict[str, ResultAudit]:
    """The audit of each audited result, by metric id (texts None where a purge expired them).

    ``columns``: ``(metric_id, audit)`` of the evaluation's ``metric_results`` rows. When none
    holds an audit the evaluation may be one recorded under schema 4: its tables are read.
    """
    parsed = {str(m): json.loads(a) for m, a in columns if a is not None}
    if not parsed:
        return _legacy_audits(tx, evaluation_id)
    texts = _texts(tx, [d for p in parsed.values() for _, d in p["questions"]])
    return {metric_id: _audit(p, texts) for metric_id, p in parsed.items()}


# --- retention -------------------------------------------------------------------------------


def lock_for_expiry(tx: Tx, dialect: str) -> None:
    """PostgreSQL: hold off new question references until the purge commits.

    Under READ COMMITTED a worker's transaction could reference a stored text (its insert of the
    text a no-op) while a purge, not seeing that uncommitted reference, deletes the text.
    ``SHARE`` mode on ``metric_results`` (where references are written, before their texts:
    :func:`insert_texts`) waits for every transaction writing results to finish and blocks new
    ones until this one ends; it must come first, before the purge reads anything. SQLite has one
    writer at a time already.
    """
    if dialect == "postgresql":
        tx.run("LOCK TABLE metric_results IN SHARE MODE")


_KEPT_AUDIT_DIGESTS = {
    "sqlite": """SELECT json_extract(j.value, '$[1]')
    FROM metric_results r
    JOIN evaluations e ON e.evaluation_id = r.evaluation_id
    JOIN snapshots s ON s.snapshot_id = e.snapshot_id,
    json_each(r.audit, '$.questions') j
    WHERE r.audit IS NOT NULL AND s.created_at >= :before""",
    "postgresql": """SELECT j.value ->> 1
    FROM metric_results r
    JOIN evaluations e ON e.evaluation_id = r.evaluation_id
    JOIN snapshots s ON s.snapshot_id = e.snapshot_id,
    jsonb_array_elements(r.audit::jsonb -> 'questions') j
    WHERE r.audit IS NOT NULL AND s.created_at >= :before""",
}
_KEPT_LEGACY_DIGESTS = """SELECT q.question_sha256 FROM result_questions q
    JOIN evaluations e ON e.evaluation_id = q.evaluation_id
    JOIN snapshots s ON s.snapshot_id = e.snapshot_id
    WHERE s.created_at >= :before"""
# NOT IN: a NULL among the kept digests (it cannot occur) would expire nothing, never too much.
_LIST_EXPIRED = """INSERT INTO expired_question_texts (purge_seq, question_sha256)
SELECT (SELECT max(seq) FROM content_purges), t.question_sha256 FROM question_texts t
WHERE t.question_sha256 NOT IN ({kept} UNION {legacy})"""
_EXPIRE_LISTED = """DELETE FROM question_texts WHERE question_sha256 IN (
    SELECT question_sha256 FROM expired_question_texts
    WHERE purge_seq = (SELECT max(seq) FROM content_purges))"""


def expire_question_texts(tx: Tx, before: datetime, dialect: str) -> int:
    """List, then delete, the question texts that only snapshots created before ``before`` asked.

    Call after recording the purge: the list is filed under its sequence number. One pass over
    the results of kept snapshots (their audit JSON and, for schema-4 results, their rows).
    """
    kept = _KEPT_AUDIT_DIGESTS[dialect]
    tx.run(_LIST_EXPIRED.format(kept=kept, legacy=_KEPT_LEGACY_DIGESTS), {"before": before})
    return max(0, tx.run(_EXPIRE_LISTED))
