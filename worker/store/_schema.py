"""Tables, indexes and append-only triggers for both dialects, and the idempotent migration.

One table list serves both databases; only column types and trigger syntax differ. JSON columns
hold canonical JSON text (sorted keys, compact) in both, so a stored value is byte-for-byte what
was hashed and compared, and PostgreSQL users cast with ``::jsonb`` to query inside it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from ._backends import Tx
from ._errors import APPEND_ONLY_SQLSTATE, PermanentStoreError, StoreCode

__all__ = [
    "APPEND_ONLY_TABLES",
    "BYTEWISE",
    "SCHEMA_VERSION",
    "Dialect",
    "migrate",
    "schema_is_current",
]

Dialect = Literal["sqlite", "postgresql"]
SCHEMA_VERSION = 5
"""2 added ``sampling_tallies`` and the ``snapshots_by_rule`` index; 3 added ``content_purges``
and the triggers that let a recorded purge (and nothing else) expire old snapshot contents and
dead-letter payloads. 4 added the audit trail of each judged result: ``question_texts`` (every
distinct question text by its sha256), ``result_audits`` (state digest and resolved judge model
per result) and ``result_questions`` (the digests of the questions each result asked), and lets
a purge expire question texts no snapshot with kept content asked; and ``sends`` (one provenance
row per delivered send of a snapshot, whose id no longer covers lane, backfill id or sampling),
filled for older snapshots from their own sampling columns. 5 writes a result's audit as one
canonical JSON column of its own row (``metric_results.audit``: state digest, resolved model, the
ids and digests of the questions asked) instead of a ``result_audits`` row and one
``result_questions`` row per question (the two tables stay, read for results recorded under
version 4), and adds ``expired_question_texts``: the texts each purge expired, the list the
``question_texts`` trigger checks. Measured: the audit rows were 35-43% of the store's CPU per
evaluation (``bench/store_writes.py``; docs/concurrency.md, "Seventeenth round"). Every statement
is idempotent (``IF NOT EXISTS``, triggers dropped and re-created, ``INSERT … WHERE NOT EXISTS``,
a column added only where missing: :func:`_add_missing_columns`), so an older database is
upgraded by running them all again."""

BYTEWISE: dict[str, str] = {"sqlite": "COLLATE BINARY", "postgresql": 'COLLATE "C"'}
"""Byte-wise text order per dialect: a prefix is then one contiguous index range, whatever the
database's default collation (SQLite's default is already BINARY)."""

_TYPES: dict[Dialect, dict[str, str]] = {
    "sqlite": {
        "seq": "INTEGER PRIMARY KEY",
        "time": "TEXT",
        "real": "REAL",
        "bool": "INTEGER",
        "blob": "BLOB",
        "int": "INTEGER",
        "bytewise": BYTEWISE["sqlite"],
    },
    "postgresql": {
        "seq": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
        "time": "TIMESTAMPTZ",
        "real": "DOUBLE PRECISION",
        "bool": "BOOLEAN",
        "blob": "BYTEA",
        "int": "BIGINT",
        "bytewise": BYTEWISE["postgresql"],
    },
}

_SCHEMA_TABLE = """CREATE TABLE IF NOT EXISTS evalq_schema (
    version INTEGER PRIMARY KEY,
    applied_at {time} NOT NULL)"""

_TABLES = (
    """CREATE TABLE IF NOT EXISTS snapshots (
    snapshot_id TEXT PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    trace_id TEXT NOT NULL,
    session_id TEXT,
    unit_kind TEXT NOT NULL,
    unit_event_id TEXT,
    window_rule TEXT NOT NULL,
    cutoff_event_id TEXT NOT NULL,
    cutoff_time {time},
    agent_version TEXT,
    environment TEXT,
    tool TEXT,
    sampling_lane TEXT NOT NULL,
    sampling_rate {real} NOT NULL,
    sampling_weight {real} NOT NULL,
    sampling_rule TEXT NOT NULL,
    metric_set TEXT NOT NULL,
    created_at {time} NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS snapshots_by_trace ON snapshots (trace_id)",
    # Backfill read-back: rule ``backfill:<id>`` (equality) or ``backfill:<id>/…`` (a range).
    "CREATE INDEX IF NOT EXISTS snapshots_by_rule ON snapshots (sampling_rule {bytewise})",
    # The evaluated content lives only here, apart from the indexed metadata, so retention can
    # protect or expire it on its own (an operator's maintenance step; the API never deletes).
    """CREATE TABLE IF NOT EXISTS snapshot_contents (
    snapshot_id TEXT PRIMARY KEY REFERENCES snapshots (snapshot_id),
    content TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS evaluations (
    seq {seq},
    evaluation_id TEXT NOT NULL UNIQUE,
    snapshot_id TEXT NOT NULL REFERENCES snapshots (snapshot_id),
    trace_id TEXT NOT NULL,
    metric_set TEXT NOT NULL,
    metric_set_version TEXT NOT NULL,
    run TEXT NOT NULL,
    judge_kind TEXT NOT NULL,
    judge_model TEXT,
    synthetic {bool} NOT NULL,
    requests {int} NOT NULL,
    usage TEXT NOT NULL,
    elapsed_s {real} NOT NULL,
    window_rule TEXT NOT NULL,
    cutoff_event_id TEXT NOT NULL,
    cutoff_time {time},
    lane TEXT NOT NULL,
    previous_evaluation_id TEXT REFERENCES evaluations (evaluation_id),
    created_at {time} NOT NULL,
    UNIQUE (snapshot_id, metric_set_version, run))""",
    "CREATE INDEX IF NOT EXISTS evaluations_by_trace ON evaluations (trace_id)",
    """CREATE TABLE IF NOT EXISTS metric_results (
    evaluation_id TEXT NOT NULL REFERENCES evaluations (evaluation_id),
    position INTEGER NOT NULL,
    metric_id TEXT NOT NULL,
    metric_version TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('DECIDED', 'INCONCLUSIVE', 'SKIPPED', 'ERROR')),
    reason TEXT NOT NULL,
    score {real},
    passed {bool},
    label TEXT,
    evidence TEXT NOT NULL,
    judge_model TEXT,
    question_ids TEXT NOT NULL,
    window_rule TEXT NOT NULL,
    cutoff_event_id TEXT NOT NULL,
    cutoff_time {time},
    audit TEXT,
    PRIMARY KEY (evaluation_id, position),
    UNIQUE (evaluation_id, metric_id))""",
    """CREATE TABLE IF NOT EXISTS pending_outcomes (
    evaluation_id TEXT NOT NULL REFERENCES evaluations (evaluation_id),
    criterion TEXT NOT NULL,
    PRIMARY KEY (evaluation_id, criterion))""",
    """CREATE TABLE IF NOT EXISTS outcomes (
    seq {seq},
    event_id TEXT NOT NULL UNIQUE,
    trace_id TEXT NOT NULL,
    session_id TEXT,
    unit_event_id TEXT,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    observed_at {time} NOT NULL,
    received_at {time} NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS outcomes_by_trace ON outcomes (trace_id)",
    """CREATE TABLE IF NOT EXISTS outcome_links (
    outcome_event_id TEXT NOT NULL REFERENCES outcomes (event_id),
    evaluation_id TEXT NOT NULL REFERENCES evaluations (evaluation_id),
    linked_at {time} NOT NULL,
    PRIMARY KEY (outcome_event_id, evaluation_id))""",
    "CREATE INDEX IF NOT EXISTS outcome_links_by_evaluation ON outcome_links (evaluation_id)",
    """CREATE TABLE IF NOT EXISTS dead_letters (
    seq {seq},
    dead_letter_id TEXT NOT NULL UNIQUE,
    received_at {time} NOT NULL,
    reason TEXT NOT NULL,
    task TEXT,
    lane TEXT,
    payload {blob} NOT NULL,
    payload_size {int} NOT NULL,
    payload_sha256 TEXT NOT NULL,
    truncated {bool} NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS dead_letters_by_reason ON dead_letters (reason)",
    """CREATE TABLE IF NOT EXISTS redrives (
    dead_letter_id TEXT PRIMARY KEY REFERENCES dead_letters (dead_letter_id),
    redriven_at {time} NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS backfill_checkpoints (
    seq {seq},
    backfill_id TEXT NOT NULL,
    source TEXT NOT NULL,
    position {int} NOT NULL,
    enqueued {int} NOT NULL,
    recorded_at {time} NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS backfill_checkpoints_latest
    ON backfill_checkpoints (backfill_id, source, seq)""",
    # Producers' sampling counts (seen / sampled per rule, rate and slice), one row per tally row;
    # row_key is the canonical JSON of the row's grouping columns (NULLs included, which a
    # UNIQUE over the nullable columns themselves would not deduplicate).
    """CREATE TABLE IF NOT EXISTS sampling_tallies (
    seq {seq},
    tally_id TEXT NOT NULL,
    row_key TEXT NOT NULL,
    producer TEXT NOT NULL,
    started_at {time} NOT NULL,
    ended_at {time} NOT NULL,
    rule TEXT NOT NULL,
    rate {real} NOT NULL,
    lane TEXT NOT NULL,
    agent_version TEXT,
    environment TEXT,
    tool TEXT,
    seen {int} NOT NULL CHECK (seen >= 0),
    sampled {int} NOT NULL CHECK (sampled >= 0 AND sampled <= seen),
    received_at {time} NOT NULL,
    UNIQUE (tally_id, row_key))""",
    # Provenance: one row per delivered send of a snapshot (lane, sampling, rule, source);
    # send_key = sha256(message id, snapshot id), so a redelivered message adds nothing. No
    # foreign key: a send may commit before the evaluation that records its snapshot.
    """CREATE TABLE IF NOT EXISTS sends (
    seq {seq},
    send_key TEXT NOT NULL UNIQUE,
    snapshot_id TEXT NOT NULL,
    message_id TEXT NOT NULL,
    lane TEXT NOT NULL,
    rate {real} NOT NULL,
    weight {real} NOT NULL,
    rule TEXT NOT NULL,
    source TEXT,
    received_at {time} NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS sends_by_snapshot ON sends (snapshot_id)",
    # Backfill read-back and --backfill/--lane scopes: rule equality or a byte-wise prefix range.
    "CREATE INDEX IF NOT EXISTS sends_by_rule ON sends (rule {bytewise}, snapshot_id)",
    # Snapshots recorded before version 4 get one send from their own sampling columns (their
    # first send's: the only one a version-3 store kept). message_id "legacy:<snapshot id>".
    """INSERT INTO sends (send_key, snapshot_id, message_id, lane, rate, weight, rule, source,
    received_at)
    SELECT 'legacy:' || s.snapshot_id, s.snapshot_id, 'legacy:' || s.snapshot_id, s.sampling_lane,
    s.sampling_rate, s.sampling_weight, s.sampling_rule, NULL, s.created_at
    FROM snapshots s
    WHERE NOT EXISTS (SELECT 1 FROM sends d WHERE d.snapshot_id = s.snapshot_id)""",
    # Retention, recorded: each purge appends its horizon. The triggers let snapshot contents
    # created before the latest horizon be deleted, and dead-letter payloads received before it
    # be emptied, and refuse every other UPDATE or DELETE.
    """CREATE TABLE IF NOT EXISTS content_purges (
    seq {seq},
    content_before {time} NOT NULL,
    requested_at {time} NOT NULL,
    CHECK (content_before <= requested_at))""",
    # The audit trail of judged results. A question's exact text is stored once per distinct
    # text, keyed by its sha256; each result names the digests it asked, the digest of the state
    # it sent (the state itself stays in snapshot_contents) and the resolved model: since schema
    # 5 in metric_results.audit, under schema 4 in result_audits and result_questions (kept for
    # the results recorded then). Question texts can quote content (a grounded claim), so a
    # purge expires those that only snapshots whose content it expires asked.
    """CREATE TABLE IF NOT EXISTS question_texts (
    question_sha256 TEXT PRIMARY KEY,
    text TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS result_audits (
    evaluation_id TEXT NOT NULL REFERENCES evaluations (evaluation_id),
    metric_id TEXT NOT NULL,
    state_sha256 TEXT NOT NULL,
    judge_model TEXT,
    judge_model_reported {bool} NOT NULL,
    PRIMARY KEY (evaluation_id, metric_id))""",
    """CREATE TABLE IF NOT EXISTS result_questions (
    evaluation_id TEXT NOT NULL,
    metric_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    question_id TEXT NOT NULL,
    question_sha256 TEXT NOT NULL,
    PRIMARY KEY (evaluation_id, metric_id, position),
    FOREIGN KEY (evaluation_id, metric_id) REFERENCES result_audits (evaluation_id, metric_id))""",
    """CREATE INDEX IF NOT EXISTS result_questions_by_text
    ON result_questions (question_sha256)""",
    # What each purge expired (schema 5): the question_texts trigger lets a text go only when the
    # latest purge listed it here (computed in the purge's own transaction).
    """CREATE TABLE IF NOT EXISTS expired_question_texts (
    purge_seq {int} NOT NULL,
    question_sha256 TEXT NOT NULL,
    PRIMARY KEY (purge_seq, question_sha256))""",
)

_ADDED_COLUMNS = (("metric_results", "audit", "TEXT"),)
"""Columns a later version added to an existing table: (table, column, type)."""

APPEND_ONLY_TABLES = (
    "evalq_schema",
    "snapshots",
    "snapshot_contents",
    "evaluations",
    "metric_results",
    "pending_outcomes",
    "outcomes",
    "outcome_links",
    "dead_letters",
    "redrives",
    "backfill_checkpoints",
    "sampling_tallies",
    "content_purges",
    "question_texts",
    "result_audits",
    "result_questions",
    "expired_question_texts",
    "sends",
)
"""Every table: none of them ever sees an UPDATE or DELETE, except the retention expiry of
``EXPIRABLE_TABLES`` that a recorded purge allows (:meth:`Store.purge_content`)."""

EXPIRABLE_TABLES = ("snapshot_contents", "dead_letters", "question_texts")
"""Rows of ``snapshot_contents`` older than a recorded purge may be deleted; the payload of such
``dead_letters`` may be emptied (every other column unchanged); a ``question_texts`` row may be
deleted when the latest recorded purge listed it in ``expired_question_texts`` (the purge lists
the texts no snapshot created at or after its horizon asked). Nothing else, ever."""

_HORIZON = "(SELECT max(content_before) FROM content_purges)"
_DEAD_LETTER_KEPT = (
    "seq",
    "dead_letter_id",
    "received_at",
    "reason",
    "task",
    "lane",
    "payload_size",
    "payload_sha256",
    "truncated",
)
# One condition per expirable table, shared by both dialects (``IS`` / ``IS NOT DISTINCT FROM``
# differ, so the null-safe comparison is written per dialect below).
_CONTENT_EXPIRES = f"""EXISTS (SELECT 1 FROM snapshots s WHERE s.snapshot_id = OLD.snapshot_id
    AND s.created_at < {_HORIZON})"""  # noqa: S608 - a fixed fragment of our own
# A question text goes when the latest purge listed it. The purge decides which (the texts no
# snapshot with kept content asked) with one pass over the kept results; checking that per deleted
# row here would read every kept result's audit JSON once per text (no index reaches inside it).
_QUESTION_TEXT_EXPIRES = """EXISTS (SELECT 1 FROM expired_question_texts x
    WHERE x.question_sha256 = OLD.question_sha256
    AND x.purge_seq = (SELECT max(seq) FROM content_purges))"""


def _payload_expires(same: str) -> str:
    kept = " AND ".join(f"NEW.{c} {same} OLD.{c}" for c in _DEAD_LETTER_KEPT)
    return f"length(NEW.payload) = 0 AND {kept} AND OLD.received_at < {_HORIZON}"


_PG_REFUSE = f"""CREATE OR REPLACE FUNCTION evalq_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'evalq: % on % refused: records are append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = '{APPEND_ONLY_SQLSTATE}';
END
$$"""


def _pg_expiry(table: str, op: str, condition: str, row: str) -> str:
    """A trigger function for one expirable table: ``op`` passes when ``condition`` holds."""
    return f"""CREATE OR REPLACE FUNCTION evalq_expire_{table}() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = '{op}' THEN
        IF coalesce({condition}, false) THEN
            RETURN {row};
        END IF;
    END IF;
    RAISE EXCEPTION 'evalq: % on % refused: records are append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = '{APPEND_ONLY_SQLSTATE}';
END
$$"""


# plpgsql resolves every field a condition names, so each table gets a function of its own.
_PG_EXPIRY = (
    _pg_expiry("snapshot_contents", "DELETE", _CONTENT_EXPIRES, "OLD"),
    _pg_expiry("dead_letters", "UPDATE", _payload_expires("IS NOT DISTINCT FROM"), "NEW"),
    _pg_expiry("question_texts", "DELETE", _QUESTION_TEXT_EXPIRES, "OLD"),
)


def _pg_triggers(table: str) -> tuple[str, ...]:
    guard = f"evalq_expire_{table}" if table in EXPIRABLE_TABLES else "evalq_refuse_change"
    return (
        f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}",
        f"""CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
        FOR EACH ROW EXECUTE FUNCTION {guard}()""",
        f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}",
        f"""CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
        FOR EACH STATEMENT EXECUTE FUNCTION evalq_refuse_change()""",
    )


_SQLITE_ALLOWED = {
    ("snapshot_contents", "DELETE"): _CONTENT_EXPIRES,
    ("dead_letters", "UPDATE"): _payload_expires("IS"),
    ("question_texts", "DELETE"): _QUESTION_TEXT_EXPIRES,
}


def _sqlite_triggers(table: str) -> tuple[str, ...]:
    # SQLite has no TRUNCATE; its DELETE-all optimisation is disabled by any DELETE trigger.
    # Dropped and re-created, so an upgrade replaces an older version's trigger.
    statements: list[str] = []
    for op in ("UPDATE", "DELETE"):
        name = f"{table}_no_{op.lower()}"
        allowed = _SQLITE_ALLOWED.get((table, op))
        when = f" WHEN NOT coalesce({allowed}, 0)" if allowed else ""
        statements += [
            f"DROP TRIGGER IF EXISTS {name}",
            f"""CREATE TRIGGER {name} BEFORE {op} ON {table}{when}
        BEGIN SELECT RAISE(ABORT, 'evalq: {op} on {table} refused: records are append-only');
        END""",
        ]
    return tuple(statements)


def statements(dialect: Dialect) -> tuple[str, ...]:
    """Every DDL statement of the current schema version, in order."""
    tables = tuple(sql.format(**_TYPES[dialect]) for sql in _TABLES)
    if dialect == "postgresql":
        triggers = tuple(s for t in APPEND_ONLY_TABLES for s in _pg_triggers(t))
        return (*tables, _PG_REFUSE, *_PG_EXPIRY, *triggers)
    return (*tables, *(s for t in APPEND_ONLY_TABLES for s in _sqlite_triggers(t)))


def _has_column(tx: Tx, dialect: Dialect, table: str, column: str) -> bool:
    if dialect == "postgresql":
        sql = """SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema()
            AND table_name = :table AND column_name = :column"""
    else:
        sql = "SELECT 1 FROM pragma_table_info(:table) WHERE name = :column"
    return bool(tx.rows(sql, {"table": table, "column": column}))


def _add_missing_columns(tx: Tx, dialect: Dialect) -> None:
    """Add the columns later versions gave existing tables (SQLite has no ``ADD COLUMN IF NOT
    EXISTS``; a new table is created with them already)."""
    for table, column, kind in _ADDED_COLUMNS:
        if not _has_column(tx, dialect, table, column):
            tx.run(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


def _recorded_versions(tx: Tx, dialect: Dialect) -> set[int] | None:
    """Versions in ``evalq_schema``, or None when the table does not exist (no DDL needed)."""
    if dialect == "postgresql":
        (found,) = tx.rows("SELECT to_regclass('evalq_schema') IS NOT NULL")[0]
    else:
        found = bool(tx.rows("SELECT 1 FROM sqlite_master WHERE name = 'evalq_schema'"))
    if not found:
        return None
    return {int(v) for (v,) in tx.rows("SELECT version FROM evalq_schema")}


def _check_not_newer(versions: set[int] | None) -> None:
    if versions and max(versions) > SCHEMA_VERSION:
        raise PermanentStoreError(StoreCode.SCHEMA_TOO_NEW, f"database has version {max(versions)}")


def schema_is_current(tx: Tx, dialect: Dialect) -> bool:
    """Whether this schema version is recorded (read-only: works for an INSERT/SELECT role)."""
    versions = _recorded_versions(tx, dialect)
    _check_not_newer(versions)
    return versions is not None and SCHEMA_VERSION in versions


def migrate(tx: Tx, dialect: Dialect) -> bool:
    """Create the schema unless this version is recorded; return whether anything was created.

    A current schema is recognised with reads only, so a worker whose role may only INSERT and
    SELECT (tables owned by another role, created by ``evalq store migrate``) starts without
    DDL rights. Concurrent workers starting together serialize on a lock, so only one creates
    the tables. A role without DDL rights facing an old or missing schema gets
    ``SCHEMA_NOT_MIGRATED`` (run ``evalq store migrate`` as the owner).
    """
    if schema_is_current(tx, dialect):
        return False
    tx.lock("evalq.migrate")
    if schema_is_current(tx, dialect):  # another worker created it while we waited
        return False
    tx.run(_SCHEMA_TABLE.format(**_TYPES[dialect]))
    for sql in statements(dialect):
        tx.run(sql)
    _add_missing_columns(tx, dialect)
    # ON CONFLICT: under PostgreSQL's repeatable read the re-check above reads the snapshot
    # taken before the lock was granted, so a worker that waited behind another's migration
    # runs the (idempotent) DDL again and must not fail on the version row it cannot see.
    tx.run(
        "INSERT INTO evalq_schema (version, applied_at) VALUES (:version, :now)"
        " ON CONFLICT DO NOTHING",
        {"version": SCHEMA_VERSION, "now": datetime.now(UTC)},
    )
    return True
