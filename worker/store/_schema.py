"""Tables, indexes and append-only triggers for both dialects, and the idempotent migration.

One table list serves both databases; only column types and trigger syntax differ. JSON columns
hold canonical JSON text (sorted keys, compact) in both, so a stored value is byte-for-byte what
was hashed and compared, and PostgreSQL users cast with ``::jsonb`` to query inside it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from ._backends import Tx
from ._errors import APPEND_ONLY_SQLSTATE, PermanentStoreError

__all__ = ["APPEND_ONLY_TABLES", "BYTEWISE", "SCHEMA_VERSION", "Dialect", "migrate"]

Dialect = Literal["sqlite", "postgresql"]
SCHEMA_VERSION = 2
"""2 added ``sampling_tallies`` and the ``snapshots_by_rule`` index. Every statement is idempotent
(``IF NOT EXISTS``, triggers dropped and re-created), so a version-1 database is upgraded by
running them all again."""

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
)

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
)
"""Every table: none of them ever sees an UPDATE or DELETE."""

_PG_REFUSE = f"""CREATE OR REPLACE FUNCTION evalq_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'evalq: % on % refused: records are append-only', TG_OP, TG_TABLE_NAME
        USING ERRCODE = '{APPEND_ONLY_SQLSTATE}';
END
$$"""


def _pg_triggers(table: str) -> tuple[str, ...]:
    return (
        f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}",
        f"""CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table}
        FOR EACH ROW EXECUTE FUNCTION evalq_refuse_change()""",
        f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}",
        f"""CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table}
        FOR EACH STATEMENT EXECUTE FUNCTION evalq_refuse_change()""",
    )


def _sqlite_triggers(table: str) -> tuple[str, ...]:
    # SQLite has no TRUNCATE; its DELETE-all optimisation is disabled by any DELETE trigger.
    return tuple(
        f"""CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table}
        BEGIN SELECT RAISE(ABORT, 'evalq: {op} on {table} refused: records are append-only');
        END"""
        for op in ("UPDATE", "DELETE")
    )


def statements(dialect: Dialect) -> tuple[str, ...]:
    """Every DDL statement of the current schema version, in order."""
    tables = tuple(sql.format(**_TYPES[dialect]) for sql in _TABLES)
    if dialect == "postgresql":
        triggers = tuple(s for t in APPEND_ONLY_TABLES for s in _pg_triggers(t))
        return (*tables, _PG_REFUSE, *triggers)
    return (*tables, *(s for t in APPEND_ONLY_TABLES for s in _sqlite_triggers(t)))


def migrate(tx: Tx, dialect: Dialect) -> bool:
    """Create the schema unless this version is recorded; return whether anything was created.

    Concurrent workers starting together serialize on a lock, so only one creates the tables.
    """
    tx.lock("evalq.migrate")
    tx.run(_SCHEMA_TABLE.format(**_TYPES[dialect]))
    versions = {int(v) for (v,) in tx.rows("SELECT version FROM evalq_schema")}
    if versions and max(versions) > SCHEMA_VERSION:
        raise PermanentStoreError("SCHEMA_TOO_NEW", f"database has version {max(versions)}")
    if SCHEMA_VERSION in versions:
        return False
    for sql in statements(dialect):
        tx.run(sql)
    tx.run(
        "INSERT INTO evalq_schema (version, applied_at) VALUES (:version, :now)",
        {"version": SCHEMA_VERSION, "now": datetime.now(UTC)},
    )
    return True
