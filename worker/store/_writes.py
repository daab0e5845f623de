"""Write transactions. Every statement is an INSERT (most of them insert-if-absent).

Evaluations and outcomes of one trace serialize on a per-trace lock (a PostgreSQL advisory lock;
SQLite's single writer already does it). Without it, an outcome and an evaluation committed at
the same moment under READ COMMITTED would each miss the other and never be linked.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any, NamedTuple

from worker.canonical_json import canonical_json, frozen_json, key_json

from ._attempts import attempt_of
from ._audit import audit_json, expire_question_texts, insert_texts, lock_for_expiry, text_rows
from ._backends import Tx
from ._errors import PermanentStoreError, StoreCode
from ._records import (
    Checkpoint,
    DeadLetterRecord,
    EvaluationRecord,
    OutcomeRecord,
    OutcomeWritten,
    PurgeSummary,
    SendRecord,
    StoredSnapshot,
    TallyRecord,
    UsageRecord,
    Written,
)

__all__ = [
    "PAYLOAD_LIMIT_BYTES",
    "supersedes_same_version",
    "write_checkpoint",
    "write_dead_letter",
    "write_evaluation",
    "write_outcome",
    "write_purge",
    "write_redrive",
    "write_sends",
    "write_snapshot",
    "write_tally",
]

PAYLOAD_LIMIT_BYTES = 64 * 1024
"""Dead letters keep at most this many bytes of the raw payload (plus its size and sha256)."""


def _trace_key(trace_id: str) -> str:
    return f"evalq.trace\x1f{trace_id}"


# --- snapshots -------------------------------------------------------------------------------

_INSERT_SNAPSHOT = """INSERT INTO snapshots (snapshot_id, schema_version, trace_id, session_id,
    unit_kind, unit_event_id, window_rule, cutoff_event_id, cutoff_time, agent_version,
    environment, tool, sampling_lane, sampling_rate, sampling_weight, sampling_rule, metric_set,
    created_at)
VALUES (:snapshot_id, :schema_version, :trace_id, :session_id, :unit_kind, :unit_event_id,
    :window_rule, :cutoff_event_id, :cutoff_time, :agent_version, :environment, :tool,
    :sampling_lane, :sampling_rate, :sampling_weight, :sampling_rule, :metric_set, :now)
ON CONFLICT DO NOTHING"""

_INSERT_CONTENT = """INSERT INTO snapshot_contents (snapshot_id, content)
VALUES (:snapshot_id, :content) ON CONFLICT DO NOTHING"""


def _snapshot_params(snapshot: StoredSnapshot, now: datetime) -> dict[str, Any]:
    m = snapshot.meta
    return {
        "snapshot_id": snapshot.snapshot_id,
        "schema_version": m.schema_version,
        "trace_id": m.trace_id,
        "session_id": m.session_id,
        "unit_kind": m.unit.kind,
        "unit_event_id": m.unit.event_id,
        "window_rule": m.window.rule,
        "cutoff_event_id": m.window.cutoff_event_id,
        "cutoff_time": m.window.cutoff_time,
        "agent_version": m.slice.agent_version,
        "environment": m.slice.environment,
        "tool": m.slice.tool,
        "sampling_lane": m.sampling.lane,
        "sampling_rate": m.sampling.rate,
        "sampling_weight": m.sampling.weight,
        "sampling_rule": m.sampling.rule,
        "metric_set": m.metric_set,
        "now": now,
    }


def write_snapshot(tx: Tx, snapshot: StoredSnapshot, now: datetime) -> bool:
    """Insert the snapshot and its content if absent; return whether the snapshot is new."""
    created = tx.run(_INSERT_SNAPSHOT, _snapshot_params(snapshot, now)) == 1
    params = {"snapshot_id": snapshot.snapshot_id, "content": snapshot.canonical_text}
    tx.run(_INSERT_CONTENT, params)
    return created


_INSERT_SEND = """INSERT INTO sends (send_key, snapshot_id, message_id, lane, rate, weight, rule,
    source, received_at)
VALUES (:send_key, :snapshot_id, :message_id, :lane, :rate, :weight, :rule, :source, :now)
ON CONFLICT DO NOTHING"""


def write_sends(tx: Tx, sends: tuple[SendRecord, ...], now: datetime) -> int:
    """Append each send unless its key (message id, snapshot id) is stored; return rows added."""
    rows = {
        send.send_key: {**send.model_dump(), "send_key": send.send_key, "now": now}
        for send in sends
    }
    return sum(tx.run(_INSERT_SEND, row) for row in rows.values())


# --- evaluations -----------------------------------------------------------------------------


class _Facts(NamedTuple):
    # Copied verbatim from the snapshot row into every evaluation and result row.
    trace_id: str
    unit_event_id: str | None
    window_rule: str
    cutoff_event_id: str
    cutoff_time: Any


def _facts(tx: Tx, snapshot_id: str) -> _Facts:
    rows = tx.rows(
        """SELECT trace_id, unit_event_id, window_rule, cutoff_event_id, cutoff_time
        FROM snapshots WHERE snapshot_id = :snapshot_id""",
        {"snapshot_id": snapshot_id},
    )
    if not rows:
        raise PermanentStoreError(StoreCode.UNKNOWN_SNAPSHOT, "record the snapshot first")
    return _Facts(*rows[0])


def supersedes_same_version(record: EvaluationRecord) -> bool:
    """Whether ``record`` is a retry attempt (N >= 2): it links to its own version's latest."""
    attempt = attempt_of(record.run)
    return attempt is not None and attempt > 1


def _previous(tx: Tx, record: EvaluationRecord) -> str | None:
    """The evaluation ``record`` follows: for a retry attempt the latest earlier one of the same
    snapshot and metric-set version (the attempt it supersedes), else the snapshot's latest."""
    if supersedes_same_version(record):
        sql = """SELECT evaluation_id FROM evaluations WHERE snapshot_id = :snapshot_id
        AND metric_set_version = :version ORDER BY seq DESC LIMIT 1"""
    else:
        sql = """SELECT evaluation_id FROM evaluations WHERE snapshot_id = :snapshot_id
        ORDER BY seq DESC LIMIT 1"""
    params = {"snapshot_id": record.snapshot_id, "version": record.metric_set_version}
    rows = tx.rows(sql, params)
    return str(rows[0][0]) if rows else None


_INSERT_EVALUATION = """INSERT INTO evaluations (evaluation_id, snapshot_id, trace_id, metric_set,
    metric_set_version, run, judge_kind, judge_model, synthetic, requests, usage, elapsed_s,
    window_rule, cutoff_event_id, cutoff_time, lane, previous_evaluation_id, created_at)
VALUES (:evaluation_id, :snapshot_id, :trace_id, :metric_set, :metric_set_version, :run,
    :judge_kind, :judge_model, :synthetic, :requests, :usage, :elapsed_s, :window_rule,
    :cutoff_event_id, :cutoff_time, :lane, :previous_evaluation_id, :now)
ON CONFLICT DO NOTHING"""


def _evaluation_params(
    record: EvaluationRecord, facts: _Facts, previous: str | None, now: datetime
) -> dict[str, Any]:
    """The evaluations row (shared with the batch path, ``_batch.py``)."""
    # Plain attribute reads: the record's scalar fields hold exactly what model_dump would give,
    # and model_dump(include=...) per evaluation cost ~3 us.
    return {
        "snapshot_id": record.snapshot_id,
        "metric_set": record.metric_set,
        "metric_set_version": record.metric_set_version,
        "run": record.run,
        "judge_kind": record.judge_kind,
        "judge_model": record.judge_model,
        "synthetic": record.synthetic,
        "requests": record.requests,
        "elapsed_s": record.elapsed_s,
        "lane": record.lane,
        "window_rule": facts.window_rule,
        "cutoff_event_id": facts.cutoff_event_id,
        "cutoff_time": facts.cutoff_time,
        "evaluation_id": record.evaluation_id,
        "trace_id": facts.trace_id,
        "usage": _usage_json(record.usage),
        "previous_evaluation_id": previous,
        "now": now,
    }


def _usage_json(usage: tuple[UsageRecord, ...]) -> str:
    """``canonical_json`` of the usage records' JSON dumps, from their fields.

    The same text: the encoder prints frozen JSON as its thawed form, and a record's model is a
    str or None (measured: the dumps were ~2 us a response).
    """
    return canonical_json([{"model": u.model, "usage": u.usage} for u in usage])


def _insert_evaluation(tx: Tx, record: EvaluationRecord, facts: _Facts, now: datetime) -> bool:
    params = _evaluation_params(record, facts, _previous(tx, record), now)
    return tx.run(_INSERT_EVALUATION, params) == 1


_INSERT_RESULT = """INSERT INTO metric_results (evaluation_id, position, metric_id, metric_version,
    status, reason, score, passed, label, evidence, judge_model, question_ids, window_rule,
    cutoff_event_id, cutoff_time, audit)
VALUES (:evaluation_id, :position, :metric_id, :metric_version, :status, :reason, :score,
    :passed, :label, :evidence, :judge_model, :question_ids, :window_rule, :cutoff_event_id,
    :cutoff_time, :audit)"""


def _result_rows(record: EvaluationRecord, facts: _Facts) -> list[dict[str, Any]]:
    """The metric_results rows of an evaluation (shared with the batch path)."""
    evaluation_id = record.evaluation_id
    window_rule, cutoff_event_id, cutoff_time = (
        facts.window_rule,
        facts.cutoff_event_id,
        facts.cutoff_time,
    )
    # Plain attribute reads and one dict display per row: model_dump per result, then a
    # comprehension merged into the row, were a visible share of a write.
    return [
        {
            "metric_id": result.metric_id,
            "metric_version": result.metric_version,
            "reason": result.reason,
            "score": result.score,
            "passed": result.passed,
            "label": result.label,
            "judge_model": result.judge_model,
            "window_rule": window_rule,
            "cutoff_event_id": cutoff_event_id,
            "cutoff_time": cutoff_time,
            "evaluation_id": evaluation_id,
            "position": position,
            "status": str(result.status),
            "evidence": frozen_json(result.evidence),
            "question_ids": _string_list_json(result.question_ids),
            "audit": audit_json(result.audit),
        }
        for position, result in enumerate(record.results)
    ]


def _string_list_json(values: tuple[str, ...]) -> str:
    """``canonical_json`` of a tuple of strings, from cached string texts (ids repeat)."""
    return "[" + ",".join([key_json(value) for value in values]) + "]"


def _insert_results(tx: Tx, record: EvaluationRecord, facts: _Facts) -> None:
    rows = _result_rows(record, facts)
    if rows:
        tx.run_many(_INSERT_RESULT, rows)


_INSERT_CRITERION = """INSERT INTO pending_outcomes (evaluation_id, criterion)
VALUES (:evaluation_id, :criterion)"""


def _criteria_rows(record: EvaluationRecord) -> list[dict[str, Any]]:
    return [
        {"evaluation_id": record.evaluation_id, "criterion": c} for c in record.outcome_criteria
    ]


def _insert_criteria(tx: Tx, record: EvaluationRecord) -> None:
    rows = _criteria_rows(record)
    if rows:
        tx.run_many(_INSERT_CRITERION, rows)


_LINK_EARLIER_OUTCOMES = """INSERT INTO outcome_links (outcome_event_id, evaluation_id, linked_at)
SELECT event_id, CAST(:evaluation_id AS TEXT), :now FROM outcomes
WHERE trace_id = :trace_id AND (unit_event_id IS NULL OR unit_event_id = :unit_event_id)
ON CONFLICT DO NOTHING"""


def _link_earlier_outcomes(tx: Tx, evaluation_id: str, facts: _Facts, now: datetime) -> None:
    params = {
        "evaluation_id": evaluation_id,
        "now": now,
        "trace_id": facts.trace_id,
        "unit_event_id": facts.unit_event_id,
    }
    tx.run(_LINK_EARLIER_OUTCOMES, params)


def write_evaluation(
    tx: Tx, record: EvaluationRecord, snapshot: StoredSnapshot | None, now: datetime
) -> Written:
    """Insert the evaluation with its results, criteria and links, unless it exists."""
    if snapshot is not None:
        tx.lock(_trace_key(snapshot.meta.trace_id))
        write_snapshot(tx, snapshot, now)
    facts = _facts(tx, record.snapshot_id)
    if snapshot is None:
        tx.lock(_trace_key(facts.trace_id))
    if not _insert_evaluation(tx, record, facts, now):
        return Written(record.evaluation_id, created=False)
    _insert_results(tx, record, facts)
    insert_texts(tx, text_rows(record))  # after the results: see insert_texts
    _insert_criteria(tx, record)
    _link_earlier_outcomes(tx, record.evaluation_id, facts, now)
    return Written(record.evaluation_id, created=True)


# --- outcomes --------------------------------------------------------------------------------

_INSERT_OUTCOME = """INSERT INTO outcomes (event_id, trace_id, session_id, unit_event_id, name,
    value, observed_at, received_at)
VALUES (:event_id, :trace_id, :session_id, :unit_event_id, :name, :value, :observed_at, :now)
ON CONFLICT DO NOTHING"""

_STORED_OUTCOME = """SELECT trace_id, session_id, unit_event_id, name, value, observed_at
FROM outcomes WHERE event_id = :event_id"""
_OUTCOME_FIELDS = ("trace_id", "session_id", "unit_event_id", "name", "value", "observed_at")


def _differs(tx: Tx, outcome: OutcomeRecord) -> bool:
    """True if the outcome stored under ``outcome.event_id`` has other content."""
    rows = tx.rows(_STORED_OUTCOME, {"event_id": outcome.event_id})
    if not rows:
        return False
    fields = dict(zip(_OUTCOME_FIELDS, rows[0], strict=True))
    fields["value"] = json.loads(fields["value"])
    stored = OutcomeRecord.model_validate({**fields, "event_id": outcome.event_id})
    return stored != outcome


_EVALUATIONS_OF_UNIT = """SELECT e.evaluation_id FROM evaluations e
JOIN snapshots s ON s.snapshot_id = e.snapshot_id
WHERE e.trace_id = :trace_id
    AND (CAST(:unit_event_id AS TEXT) IS NULL OR s.unit_event_id = :unit_event_id)
ORDER BY e.seq"""

_INSERT_LINK = """INSERT INTO outcome_links (outcome_event_id, evaluation_id, linked_at)
VALUES (:event_id, :evaluation_id, :now) ON CONFLICT DO NOTHING"""


def write_outcome(tx: Tx, outcome: OutcomeRecord, now: datetime) -> OutcomeWritten:
    """Insert the outcome if its event id is new and link it to its trace's evaluations."""
    tx.lock(_trace_key(outcome.trace_id))
    params = {
        **outcome.model_dump(exclude={"value"}),
        "value": canonical_json(outcome.value),
        "now": now,
    }
    if tx.run(_INSERT_OUTCOME, params) == 0:
        return OutcomeWritten(created=False, linked=(), conflict=_differs(tx, outcome))
    unit = {"trace_id": outcome.trace_id, "unit_event_id": outcome.unit_event_id}
    linked = tuple(str(eid) for (eid,) in tx.rows(_EVALUATIONS_OF_UNIT, unit))
    links = [{"event_id": outcome.event_id, "evaluation_id": e, "now": now} for e in linked]
    if links:
        tx.run_many(_INSERT_LINK, links)
    return OutcomeWritten(created=True, linked=linked)


# --- dead letters, redrives, checkpoints -----------------------------------------------------

_INSERT_DEAD_LETTER = """INSERT INTO dead_letters (dead_letter_id, received_at, reason, task,
    lane, payload, payload_size, payload_sha256, truncated)
VALUES (:dead_letter_id, :now, :reason, :task, :lane, :payload, :payload_size, :payload_sha256,
    :truncated)
ON CONFLICT DO NOTHING"""


def write_dead_letter(
    tx: Tx, dead_letter_id: str, record: DeadLetterRecord, now: datetime
) -> Written:
    """Insert a dead letter with its payload cut to :data:`PAYLOAD_LIMIT_BYTES`."""
    payload = record.payload
    params = {
        **record.model_dump(include={"reason", "task", "lane"}),
        "dead_letter_id": dead_letter_id,
        "now": now,
        "payload": payload[:PAYLOAD_LIMIT_BYTES],
        "payload_size": len(payload),
        "payload_sha256": hashlib.sha256(payload).hexdigest(),
        "truncated": len(payload) > PAYLOAD_LIMIT_BYTES,
    }
    return Written(dead_letter_id, created=tx.run(_INSERT_DEAD_LETTER, params) == 1)


def write_redrive(tx: Tx, dead_letter_id: str, now: datetime) -> bool:
    """Record that a dead letter was re-enqueued; False if it already was."""
    known = tx.rows("SELECT 1 FROM dead_letters WHERE dead_letter_id = :id", {"id": dead_letter_id})
    if not known:
        raise PermanentStoreError(StoreCode.UNKNOWN_DEAD_LETTER)
    inserted = tx.run(
        "INSERT INTO redrives (dead_letter_id, redriven_at) VALUES (:id, :now)"
        " ON CONFLICT DO NOTHING",
        {"id": dead_letter_id, "now": now},
    )
    return inserted == 1


def write_checkpoint(tx: Tx, checkpoint: Checkpoint) -> None:
    """Append one backfill checkpoint."""
    tx.run(
        """INSERT INTO backfill_checkpoints (backfill_id, source, position, enqueued, recorded_at)
        VALUES (:backfill_id, :source, :position, :enqueued, :recorded_at)""",
        checkpoint.model_dump(),
    )


# --- sampling tallies ------------------------------------------------------------------------

_INSERT_TALLY_ROW = """INSERT INTO sampling_tallies (tally_id, row_key, producer, started_at,
    ended_at, rule, rate, lane, agent_version, environment, tool, seen, sampled, received_at)
VALUES (:tally_id, :row_key, :producer, :started_at, :ended_at, :rule, :rate, :lane,
    :agent_version, :environment, :tool, :seen, :sampled, :now)
ON CONFLICT DO NOTHING"""


def write_tally(tx: Tx, tally: TallyRecord, now: datetime) -> int:
    """Insert each row of the tally unless (tally id, row key) is stored; return rows written."""
    head = tally.model_dump(include={"tally_id", "producer", "started_at", "ended_at"})
    return sum(
        tx.run(_INSERT_TALLY_ROW, {**head, **row.model_dump(), "row_key": row.key, "now": now})
        for row in tally.rows
    )


# --- retention -------------------------------------------------------------------------------

_RECORD_PURGE = """INSERT INTO content_purges (content_before, requested_at)
VALUES (:before, :now)"""
_EXPIRE_CONTENTS = """DELETE FROM snapshot_contents WHERE snapshot_id IN (
    SELECT snapshot_id FROM snapshots WHERE created_at < :before)"""
_EXPIRE_PAYLOADS = """UPDATE dead_letters SET payload = :empty
WHERE received_at < :before AND length(payload) > 0"""


def write_purge(tx: Tx, before: datetime, now: datetime, dialect: str) -> PurgeSummary:
    """Record the purge horizon, then expire what the triggers now allow (and only that)."""
    lock_for_expiry(tx, dialect)  # first: before this transaction reads anything
    tx.run(_RECORD_PURGE, {"before": before, "now": now})
    removed = tx.run(_EXPIRE_CONTENTS, {"before": before})
    cleared = tx.run(_EXPIRE_PAYLOADS, {"before": before, "empty": b""})
    texts = expire_question_texts(tx, before, dialect)
    return PurgeSummary(
        content_before=before,
        requested_at=now,
        contents_removed=max(0, removed),
        payloads_cleared=max(0, cleared),
        question_texts_removed=texts,
    )
