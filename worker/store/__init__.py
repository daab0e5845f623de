"""Append-only record store: SQLite (embedded default, WAL) or PostgreSQL (fleets, psycopg pool).

Open it with ``open_store(EVALQ_STORE_URL)``: ``sqlite:///relative.db``,
``sqlite:////absolute/path.db`` or ``postgresql://user@host/db`` (``postgres://`` too). Anything
else is a ``ValueError`` that names ``EVALQ_STORE_URL``. Opening creates the schema if it is
missing; connections open lazily, per thread (SQLite) or per process pool (PostgreSQL), and again
after a fork. The store knows records, not Celery and not the engine.

Tables
------
``snapshots``
    One row per snapshot id (``producer.snapshot.content_id``: sha256 of the canonical JSON of
    what is evaluated, provenance — ``sampling``, ``source`` — left out): trace, session, unit
    kind and event id, window rule / cutoff event / cutoff time, slice metadata (agent version,
    environment, tool), the *first* send's sampling (lane, rate, weight, rule), metric set,
    created_at. Snapshots recorded before schema version 4 keep their older id (sha256 of the
    whole canonical JSON, sampling included).
``sends``
    Provenance, one row per delivered send of a snapshot: message id, lane, sampling rate,
    weight and rule (``backfill:<id>[/rule]`` for a backfill), source, received_at. Unique per
    (message id, snapshot id), so a redelivered message adds nothing; the same unit sent live
    and under two backfill ids is one snapshot with three sends. A backfill's and a lane's
    snapshots are found through their sends (``RecordScope.backfill_id``/``lane``,
    ``backfill_counts``).
``snapshot_contents``
    The snapshot's canonical JSON. The only place evaluated content lives, in a table of its
    own so that retention can protect or expire it separately: ``Store.purge_content(before)``
    (``evalq purge --content-before``) deletes rows of snapshots recorded before a horizon it
    records first. Reading it back re-checks its hash.
``evaluations``
    One per (snapshot_id, metric_set_version, run) — a UNIQUE constraint, read as "one
    evaluation per snapshot, metric-set version and attempt": ``run`` is the attempt, ``""`` for
    attempt 1 and ``attempt:N`` for the N-th (a retry after a failure, ``evalq retry``; see
    ``attempt_run``/``attempt_of``); any other ``run`` is an explicit named re-run outside the
    attempt chain. The id is deterministic:
    ``sha256("evalq.evaluation.v1␟snapshot_id␟metric_set_version␟run")``, so a redelivered retry
    of one attempt converges on one record. Holds metric set and version, judge kind and model,
    the synthetic flag, request count, usage per request (``[{model, usage|null}]``), elapsed_s,
    window rule and cutoff (copied from the snapshot), lane, created_at and
    ``previous_evaluation_id``: for a retry attempt the latest earlier evaluation of the same
    snapshot and metric-set version (the attempt it supersedes); otherwise the latest earlier
    evaluation of the snapshot, so a re-evaluation (new metric-set version or re-run) links to
    the one before. A failed attempt is never changed: the retry is a new row linked to it.
``metric_results``
    One per metric of an evaluation, written in the same transaction: metric id and version,
    status, reason code, score, passed, label, evidence, judge model, question ids, position,
    and the window rule and cutoff again, so every result says what evidence it saw.
``metric_results.audit`` / ``question_texts``
    The audit trail of judged results, written in the evaluation's transaction: per result (one
    canonical JSON column, schema 5) the sha256 of the state text its judge request sent, the
    resolved judge model (reported by the judge's reply, else the configured one) and the ids and
    digests of the questions it asked; every distinct question text once, keyed by the sha256 of
    its UTF-8 text. Read back as ``MetricResultRecord.audit``. The state stays only in
    ``snapshot_contents``; a purge also deletes the question texts that no snapshot with kept
    content asked, listing them in ``expired_question_texts``.
``result_audits`` / ``result_questions``
    The same audit for results recorded under schema 4 (one row per result, one per question);
    read, no longer written.
``pending_outcomes``
    The outcome criteria (outcome-event names, e.g. ``refund_reversed``) the metric set declared
    for the evaluation. Whether one is still pending is derived — no linked outcome of that name
    yet — and never updated.
``outcomes``
    Outcome events by event id (insert-if-absent: re-sending an event id changes nothing).
``outcome_links``
    outcome → evaluation, unique per pair. Made when an outcome arrives (every evaluation of its
    trace, only those of its unit when it names one) and when an evaluation lands (every earlier
    outcome of its trace that names no unit or names this unit). Writers of one trace serialize
    on a lock, so an outcome and an evaluation arriving together are still linked.
``dead_letters`` / ``redrives``
    Messages that could not be decoded or validated: reason code, task, lane, the first 64 KiB
    of the raw payload with its full size, sha256 and a truncated flag. A redrive is a new row
    in ``redrives``; "open" dead letters are those without one.
``backfill_checkpoints``
    Append-only progress of backfills: (backfill id, source, offset, enqueued, recorded_at).
``content_purges``
    Retention horizons, one row per purge (``content_before``, ``requested_at``).
``sampling_tallies``
    Producers' sampling counts, one row per (tally id, rule, rate, lane, slice) with units seen
    and sampled (insert-if-absent: a redelivered tally adds nothing). ``sampled_out_counts``
    sums them, so reports can say what was not evaluated and weight their estimates.

Guarantees
----------
- Nothing is ever updated or deleted, except retention: a recorded purge may delete
  ``snapshot_contents`` and empty ``dead_letters.payload`` older than its horizon, and delete
  ``question_texts`` no snapshot at or after it asked, and nothing else. Both databases
  enforce it themselves: triggers on every table refuse every other UPDATE and DELETE (and
  TRUNCATE in PostgreSQL) whoever sends them. On PostgreSQL, give the worker a
  role that may only INSERT/SELECT on tables another role owns and migrates
  (``evalq store migrate``): the worker then needs no DDL rights and cannot drop a trigger
  (docs/store-roles.md). SQLite has no roles: whoever can write the file can drop triggers.
- Idempotent writes: a duplicate delivery of an evaluation writes nothing and returns the
  existing id with ``created=False``; earlier rows stay byte-for-byte unchanged.
- An evaluation, its results, criteria and links commit together or not at all.
- JSON columns hold canonical JSON text (sorted keys, compact) in both databases.
- Transient failures (connection refused or lost, serialization failure, deadlock, lock
  timeout, SQLite "database is locked") are retried with stamina around each transaction
  (bounded attempts, and time: ``open_store``'s ``retry_timeout_s``, 30 s unless a caller with
  its own outage policy passes less), then raised as ``TransientStoreError``: the caller leaves the
  message unacked and it is redelivered. Nothing was written in that case. (If a commit
  succeeds but its acknowledgement is lost, the retry finds the row and reports
  ``created=False``.)
- Records hold reason codes only; store exceptions carry a code plus the driver's exception
  class and SQLSTATE, never the driver's message.

Newest attempts
---------------
``Store.newest_evaluation(snapshot_id, metric_set_version)`` reads the newest attempt of a pair;
``NEWEST_ATTEMPT`` is the same rule as an SQL condition over the ``e`` alias (for reads that
count each snapshot and version once); ``Store.iter_retry_candidates(RetryQuery(...))`` lists
the newest attempts whose results carry given reason codes (``evalq retry``).

Listings
--------
``Store.list_results(ResultQuery(...))`` returns one page of metric results, newest recorded
first, filtered by metric, status, reason and a ``RecordScope``: a ``LIMIT`` query, with the
``ResultCursor`` the next page continues before (``evalq results``).

Exceptions::

    StoreError                    .code: a reason code
     ├── TransientStoreError      retry later; the message stays unacked, never a dead letter:
     │                            STORE_UNAVAILABLE (cannot connect/open), STORE_BUSY (SQLite
     │                            locked), STORE_FULL (disk full: SQLITE_FULL, PostgreSQL 53100),
     │                            STORE_IO_ERROR (SQLite I/O error), STORE_REPLACED (the SQLite
     │                            file was deleted or replaced under this process: every later
     │                            call refuses until the process restarts)
     └── PermanentStoreError      STORE_FAILED, STORE_CLOSED, UNKNOWN_SNAPSHOT,
          │                       UNKNOWN_DEAD_LETTER, CONTENT_MISMATCH, SCHEMA_TOO_NEW, …
          └── AppendOnlyError APPEND_ONLY: the database refused an UPDATE/DELETE/TRUNCATE

    ValueError                    invalid EVALQ_STORE_URL, invalid record (pydantic)
"""

from __future__ import annotations

from ._attempts import ATTEMPT_PREFIX, attempt_of, attempt_run
from ._backends import SQLITE_BULK_ROWS
from ._browse import (
    MAX_PAGE,
    MIN_PREFIX,
    EvaluationLink,
    ResultFilter,
    ResultListRow,
    ReviewedEvaluation,
    SnapshotIndex,
    SnapshotReview,
    VerdictCount,
)
from ._errors import (
    AppendOnlyError,
    PermanentStoreError,
    StoreCode,
    StoreError,
    TransientStoreError,
)
from ._listing import ListedResult, ResultCursor, ResultQuery
from ._newest import IS_ATTEMPT, NEWEST_ATTEMPT, RetryCandidate, RetryQuery
from ._reads import (
    EvaluationRow,
    LinkedOutcome,
    RecordScope,
    ResultCount,
    SendCounts,
    SnapshotLabels,
    VersionCounts,
)
from ._records import (
    AskedQuestion,
    Checkpoint,
    DeadLetter,
    DeadLetterRecord,
    EvaluationRecord,
    MetricResultRecord,
    OutcomeLink,
    OutcomeRecord,
    OutcomeWritten,
    PurgeSummary,
    ResultAudit,
    ResultRow,
    SampledOutCount,
    SendRecord,
    SnapshotMeta,
    SnapshotRecord,
    SnapshotText,
    StatusName,
    StoredEvaluation,
    StoredSnapshot,
    TallyRecord,
    TallyRowRecord,
    UsageRecord,
    Written,
    evaluation_id_for,
    text_sha256,
)
from ._schema import APPEND_ONLY_TABLES, EXPIRABLE_TABLES, SCHEMA_VERSION
from ._store import RETRY_TIMEOUT_S, Store, failure_line, open_store, store_location
from ._url import SETTING as STORE_URL_SETTING
from ._writes import PAYLOAD_LIMIT_BYTES

__all__ = [
    "APPEND_ONLY_TABLES",
    "ATTEMPT_PREFIX",
    "EXPIRABLE_TABLES",
    "IS_ATTEMPT",
    "MAX_PAGE",
    "MIN_PREFIX",
    "NEWEST_ATTEMPT",
    "PAYLOAD_LIMIT_BYTES",
    "RETRY_TIMEOUT_S",
    "SCHEMA_VERSION",
    "SQLITE_BULK_ROWS",
    "STORE_URL_SETTING",
    "AppendOnlyError",
    "AskedQuestion",
    "Checkpoint",
    "DeadLetter",
    "DeadLetterRecord",
    "EvaluationLink",
    "EvaluationRecord",
    "EvaluationRow",
    "LinkedOutcome",
    "ListedResult",
    "MetricResultRecord",
    "OutcomeLink",
    "OutcomeRecord",
    "OutcomeWritten",
    "PermanentStoreError",
    "PurgeSummary",
    "RecordScope",
    "ResultAudit",
    "ResultCount",
    "ResultCursor",
    "ResultFilter",
    "ResultListRow",
    "ResultQuery",
    "ResultRow",
    "RetryCandidate",
    "RetryQuery",
    "ReviewedEvaluation",
    "SampledOutCount",
    "SendCounts",
    "SendRecord",
    "SnapshotIndex",
    "SnapshotLabels",
    "SnapshotMeta",
    "SnapshotRecord",
    "SnapshotReview",
    "SnapshotText",
    "StatusName",
    "Store",
    "StoreCode",
    "StoreError",
    "StoredEvaluation",
    "StoredSnapshot",
    "TallyRecord",
    "TallyRowRecord",
    "TransientStoreError",
    "UsageRecord",
    "VerdictCount",
    "VersionCounts",
    "Written",
    "attempt_of",
    "attempt_run",
    "evaluation_id_for",
    "failure_line",
    "open_store",
    "store_location",
    "text_sha256",
]
