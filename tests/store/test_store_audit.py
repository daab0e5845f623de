"""The audit trail of judged results: exact question texts once per distinct text, state digests
and resolved judge models, written with the evaluation (schema 5: one column of the result's
row), append-only, readable after a purge that expires the texts only old snapshots asked, and
results recorded under schema 4 (two tables of their own) read back the same."""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import backend_url
from tests.store._store_helpers import (
    QUESTION_TEXTS,
    STATE_SHA256,
    evaluation_record,
    outcome_record,
    raw_connection,
    record_as_schema_4,
    snapshot_record,
    twin_snapshots,
)
from worker.canonical_json import canonical_json
from worker.store import (
    AskedQuestion,
    EvaluationRecord,
    ResultAudit,
    Store,
    open_store,
    text_sha256,
)
from worker.store._schema import SCHEMA_VERSION, statements

_NEW_TABLES = ("question_texts", "result_audits", "result_questions")
_AUDITED = "metric_results WHERE audit IS NOT NULL"


def _count(url: str, table: str) -> int:
    with raw_connection(url) as conn:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # type: ignore[index]


def _audited(record: EvaluationRecord) -> int:
    return sum(r.audit is not None for r in record.results)


def _refused(conn: sqlite3.Connection | psycopg.Connection[Any], sql: str) -> bool:
    try:
        conn.execute(sql)
    except sqlite3.IntegrityError as exc:
        return "append-only" in str(exc)
    except psycopg.Error as exc:
        return exc.sqlstate == "EQ001"
    return False


def _asking(snapshot_id: str, *texts: str, version: str = "agent@1") -> EvaluationRecord:
    """The helper evaluation with its audited result asking exactly ``texts``."""
    record = evaluation_record(snapshot_id, version=version)
    first = record.results[0]
    audit = ResultAudit(
        questions=tuple(AskedQuestion.of(f"q{i}", t) for i, t in enumerate(texts, start=1)),
        state_sha256=STATE_SHA256,
        judge_model="judge-m",
        judge_model_reported=True,
    )
    ids = tuple(q.question_id for q in audit.questions)
    changed = first.model_copy(update={"audit": audit, "question_ids": ids})
    return record.model_copy(update={"results": (changed, record.results[1])})


def test_an_audit_reads_back_exactly_as_written(store: Store) -> None:
    """Texts, digests, the state digest and the resolved model come back as they were recorded."""
    snapshot = snapshot_record()
    record = evaluation_record(snapshot.snapshot_id)
    store.record_evaluation(record, snapshot)
    stored = store.find_evaluation(snapshot.snapshot_id, "agent@1")
    assert stored is not None
    assert stored.record == record
    audit = stored.record.results[0].audit
    assert audit is not None
    assert [q.text for q in audit.questions] == list(QUESTION_TEXTS)
    assert [q.sha256 for q in audit.questions] == [
        hashlib.sha256(t.encode("utf-8")).hexdigest() for t in QUESTION_TEXTS
    ]
    assert (audit.state_sha256, audit.judge_model, audit.judge_model_reported) == (
        STATE_SHA256,
        "judge-m-2025",
        True,
    )
    assert stored.record.results[1].audit is None  # SKIPPED: never sent, nothing to audit


def test_each_distinct_text_is_stored_once(store: Store, store_url: str) -> None:
    """Three evaluations asking overlapping questions store each distinct text one time."""
    for n in range(3):
        snapshot = snapshot_record(f"t-{n}")
        store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)
    assert _count(store_url, "question_texts") == len(set(QUESTION_TEXTS))
    assert _count(store_url, _AUDITED) == 3 * _audited(evaluation_record("ab" * 32))
    assert _count(store_url, "result_audits") + _count(store_url, "result_questions") == 0


def test_the_batch_path_writes_the_same_audit(store: Store, store_url: str) -> None:
    """record_evaluations (the group commit) stores the audits the single path stores."""
    first, second = snapshot_record("b-1"), snapshot_record("b-2")
    items = [
        (evaluation_record(first.snapshot_id), first),
        (_asking(second.snapshot_id, "only in the batch", QUESTION_TEXTS[0]), second),
    ]
    assert [w.created for w in store.record_evaluations(items)] == [True, True]
    for record, _ in items:
        stored = store.get_evaluation(record.evaluation_id)
        assert stored is not None
        assert stored.record == record
    assert _count(store_url, "question_texts") == 3
    assert [w.created for w in store.record_evaluations(items)] == [False, False]
    assert _count(store_url, _AUDITED) == 2 + 1  # a redelivery adds nothing


def test_an_audit_column_is_its_canonical_json(store: Store, store_url: str) -> None:
    """metric_results.audit holds the canonical JSON of the audit's fields, ids and digests."""
    snapshot = snapshot_record()
    record = evaluation_record(snapshot.snapshot_id)
    store.record_evaluation(record, snapshot)
    with raw_connection(store_url) as conn:
        stored = dict(conn.execute("SELECT metric_id, audit FROM metric_results").fetchall())
    for result in record.results:
        audit = result.audit
        expected = None
        if audit is not None:
            fields = audit.model_dump(exclude={"questions"})
            fields["questions"] = [[q.question_id, q.sha256] for q in audit.questions]
            expected = canonical_json(fields)
        assert stored[result.metric_id] == expected


def test_audit_tables_refuse_updates_and_deletes(store: Store, store_url: str) -> None:
    """Without a recorded purge, every UPDATE and DELETE on the audit tables is refused."""
    snapshot = snapshot_record()
    store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)
    record_as_schema_4(store, store_url, evaluation_record(snapshot.snapshot_id, version="agent@0"))
    statements_ = (
        "UPDATE question_texts SET text = 'x'",
        "DELETE FROM question_texts",
        "UPDATE result_audits SET judge_model = 'other'",
        "DELETE FROM result_audits",
        "UPDATE result_questions SET question_sha256 = 'x'",
        "DELETE FROM result_questions",
        "UPDATE metric_results SET audit = NULL",
    )
    with raw_connection(store_url) as conn:
        accepted = [sql for sql in statements_ if not _refused(conn, sql)]
    assert accepted == []
    assert _count(store_url, "question_texts") == 2


def test_a_digest_must_match_its_text() -> None:
    """An asked question whose sha256 is not its text's digest is refused."""
    with pytest.raises(ValueError, match="digest"):
        AskedQuestion(question_id="q1", sha256="0" * 64, text="Is it?")
    assert AskedQuestion(question_id="q1", sha256="0" * 64).text is None  # an expired text


def test_purge_expires_texts_only_old_snapshots_asked(store: Store, store_url: str) -> None:
    """A purge deletes the texts no newer snapshot asked; digests stay and records stay readable."""
    old = snapshot_record("t-old")
    store.record_evaluation(_asking(old.snapshot_id, "quotes old content", "shared"), old)
    time.sleep(0.01)
    horizon = datetime.now(UTC)
    time.sleep(0.01)
    new = snapshot_record("t-new")
    store.record_evaluation(_asking(new.snapshot_id, "shared"), new)
    summary = store.purge_content(horizon)
    assert (summary.contents_removed, summary.question_texts_removed) == (1, 1)
    stored = store.find_evaluation(old.snapshot_id, "agent@1")
    assert stored is not None
    audit = stored.record.results[0].audit
    assert audit is not None
    assert [(q.text, q.sha256) for q in audit.questions] == [
        (None, text_sha256("quotes old content")),
        ("shared", text_sha256("shared")),
    ]
    review = store.snapshot_review(old.snapshot_id)
    assert review is not None
    assert not review.snapshot.has_content
    assert review.evaluations[0].evaluation == stored
    with raw_connection(store_url) as conn:  # the newer snapshot's text is still protected
        assert _refused(conn, "DELETE FROM question_texts")
    assert _count(store_url, "question_texts") == 1


def test_snapshot_review_holds_evaluations_outcomes_and_pending(store: Store) -> None:
    """One read: the snapshot, each evaluation whole, its linked outcomes and open criteria."""
    snapshot = snapshot_record()
    first = evaluation_record(snapshot.snapshot_id, criteria=("chargeback", "refund_reversed"))
    store.record_evaluation(first, snapshot)
    store.record_evaluation(evaluation_record(snapshot.snapshot_id, version="agent@2"))
    store.record_outcome(outcome_record("o-1"))
    review = store.snapshot_review(snapshot.snapshot_id, limit=1)
    assert review is not None
    assert review.more is True
    (only,) = review.evaluations
    assert only.evaluation.record == first
    assert [link.outcome.event_id for link in only.outcomes] == ["o-1"]
    assert only.pending == ("chargeback",)
    assert store.snapshot_review("ab" * 32) is None


def test_a_prefix_finds_one_snapshot_or_says_it_is_ambiguous(store: Store) -> None:
    """A unique prefix finds its id; a shared one finds both; a short or non-hex one is refused."""
    one, two = twin_snapshots()
    for snapshot in (one, two):
        store.put_snapshot(snapshot)
    other = snapshot_record("t-other")
    store.put_snapshot(other)
    assert store.snapshot_ids_with_prefix(other.snapshot_id[:12]) == (other.snapshot_id,)
    assert set(store.snapshot_ids_with_prefix(one.snapshot_id[:8])) == {
        one.snapshot_id,
        two.snapshot_id,
    }
    assert store.snapshot_ids_with_prefix("f" * 8) == ()  # the top of the range, no upper bound
    for bad in ("abc", "ZZZZZZZZ", "0b31 6d6d"):
        with pytest.raises(ValueError, match="prefix"):
            store.snapshot_ids_with_prefix(bad)


def _create_version_3(url: str, dialect: str) -> None:
    """A database as schema version 3 left it: no audit tables."""
    with raw_connection(url) as conn:
        conn.execute("CREATE TABLE evalq_schema (version INTEGER PRIMARY KEY, applied_at TEXT)")
        for sql in statements(dialect):  # type: ignore[arg-type]
            if not any(name in sql for name in _NEW_TABLES):
                conn.execute(sql)
        conn.execute("INSERT INTO evalq_schema VALUES (3, '2026-01-01T00:00:00+00:00')")


def test_a_version_3_database_is_upgraded_in_place(store_url: str) -> None:
    """Opening a version-3 store adds the audit tables (append-only) and records this version."""
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgresql"
    _create_version_3(store_url, dialect)
    snapshot = snapshot_record()
    record = evaluation_record(snapshot.snapshot_id)
    with open_store(store_url) as upgraded:
        upgraded.record_evaluation(record, snapshot)
        stored = upgraded.get_evaluation(record.evaluation_id)
        assert stored is not None
        assert stored.record == record
        assert upgraded.migrate() is False
    with raw_connection(store_url) as conn:
        versions = sorted(v for (v,) in conn.execute("SELECT version FROM evalq_schema"))
        assert versions == [3, SCHEMA_VERSION]
        assert _refused(conn, "UPDATE metric_results SET audit = NULL")


def _create_version_4(url: str, dialect: str) -> None:
    """A database as schema version 4 left it: audits in two tables, no audit column, no list of
    expired texts (and the version-4 trigger condition, replaced by the upgrade)."""
    with raw_connection(url) as conn:
        conn.execute("CREATE TABLE evalq_schema (version INTEGER PRIMARY KEY, applied_at TEXT)")
        for sql in statements(dialect):  # type: ignore[arg-type]
            if not re.search(r"(EXISTS|TRIGGER|ON) expired_question_texts\b", sql):
                conn.execute(sql.replace("    audit TEXT,\n", ""))
        conn.execute("INSERT INTO evalq_schema VALUES (4, '2026-01-01T00:00:00+00:00')")


def test_a_version_4_database_is_upgraded_in_place(store_url: str) -> None:
    """Opening a version-4 store adds the audit column and expiry list; both layouts read back."""
    # Also pins the purge: a text only a schema-4 result of an old snapshot asked is expired.
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgresql"
    _create_version_4(store_url, dialect)
    old, new = snapshot_record("t-old"), snapshot_record("t-new")
    legacy = _asking(old.snapshot_id, "only the old one asked", "shared")
    with open_store(store_url) as upgraded:
        record_as_schema_4(upgraded, store_url, legacy, old)
        time.sleep(0.01)
        horizon = datetime.now(UTC)
        time.sleep(0.01)
        current = _asking(new.snapshot_id, "shared")
        upgraded.record_evaluation(current, new)
        assert [upgraded.get_evaluation(r.evaluation_id).record for r in (legacy, current)] == [  # type: ignore[union-attr]
            legacy,
            current,
        ]
        assert upgraded.purge_content(horizon).question_texts_removed == 1
        assert upgraded.migrate() is False
        stored = upgraded.get_evaluation(legacy.evaluation_id)
    assert stored is not None
    audit = stored.record.results[0].audit
    assert audit is not None
    assert [q.text for q in audit.questions] == [None, "shared"]
    with raw_connection(store_url) as conn:
        versions = sorted(v for (v,) in conn.execute("SELECT version FROM evalq_schema"))
        listed = conn.execute("SELECT question_sha256 FROM expired_question_texts").fetchall()
        assert _refused(conn, "DELETE FROM question_texts")  # "shared": a kept snapshot asked it
    assert versions == [4, SCHEMA_VERSION]
    assert listed == [(text_sha256("only the old one asked"),)]


def test_a_purge_keeps_texts_a_kept_schema_4_result_asked(store: Store, store_url: str) -> None:
    """Texts asked only by results recorded in the old layout for kept snapshots stay."""
    old, new = snapshot_record("t-old"), snapshot_record("t-new")
    store.record_evaluation(_asking(old.snapshot_id, "old, new layout"), old)
    time.sleep(0.01)
    horizon = datetime.now(UTC)
    time.sleep(0.01)
    record_as_schema_4(store, store_url, _asking(new.snapshot_id, "new, old layout"), new)
    assert store.purge_content(horizon).question_texts_removed == 1
    with raw_connection(store_url) as conn:
        texts = [t for (t,) in conn.execute("SELECT text FROM question_texts")]
    assert texts == ["new, old layout"]


def test_each_purge_lists_only_what_it_expired(store: Store, store_url: str) -> None:
    """Each purge lists only the texts it expired, even a text expired once and asked again."""
    # The middle purge's horizon is before the re-ask, so it keeps the text; the last expires it.
    first = snapshot_record("t-1")
    store.record_evaluation(_asking(first.snapshot_id, "asked twice"), first)
    assert store.purge_content(datetime.now(UTC)).question_texts_removed == 1
    time.sleep(0.01)
    between = datetime.now(UTC)
    time.sleep(0.01)
    second = snapshot_record("t-2")
    store.record_evaluation(_asking(second.snapshot_id, "asked twice"), second)
    assert store.purge_content(between).question_texts_removed == 0
    with raw_connection(store_url) as conn:
        assert _refused(conn, "DELETE FROM question_texts")  # the latest purge listed nothing
    assert store.purge_content(datetime.now(UTC)).question_texts_removed == 1
    with raw_connection(store_url) as conn:
        seqs = [s for (s,) in conn.execute("SELECT purge_seq FROM expired_question_texts")]
    assert len(set(seqs)) == len(seqs) == 2


_COPY_EVALUATION = """INSERT INTO evaluations ({columns}, evaluation_id, snapshot_id)
SELECT {columns}, 'e-in-flight', %(snapshot)s FROM evaluations WHERE evaluation_id = %(source)s"""
_COPY_RESULTS = """INSERT INTO metric_results ({columns}, evaluation_id)
SELECT {columns}, 'e-in-flight' FROM metric_results WHERE evaluation_id = %(source)s"""


def _columns(conn: psycopg.Connection[Any], table: str) -> str:
    names = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = %s AND column_name NOT IN ('seq', 'evaluation_id', 'snapshot_id')",
        (table,),
    ).fetchall()
    return ", ".join(name for (name,) in names)


@pytest.fixture
def pg_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A new schema in the session's PostgreSQL database."""
    with backend_url("postgresql", request, tmp_path, "store") as url:
        yield url


@pytest.mark.services
def test_a_purge_waits_for_a_writer_referencing_a_stored_text(pg_store_url: str) -> None:
    """PostgreSQL: a purge waits for an open writer reusing a stored text, then keeps the text."""
    # Reusing: the writer's text insert is a no-op; only its newer snapshot's results ask the text.
    with open_store(pg_store_url) as store:
        old, new = snapshot_record("t-old"), snapshot_record("t-new")
        source = _asking(old.snapshot_id, "asked by both")
        store.record_evaluation(source, old)
        time.sleep(0.01)
        horizon = datetime.now(UTC)
        time.sleep(0.01)
        store.put_snapshot(new)
        with psycopg.connect(pg_store_url) as writer:  # a worker's transaction, not committed
            params = {"snapshot": new.snapshot_id, "source": source.evaluation_id}
            for sql, table in (
                (_COPY_EVALUATION, "evaluations"),
                (_COPY_RESULTS, "metric_results"),
            ):
                writer.execute(sql.format(columns=_columns(writer, table)), params)
            purge = ThreadPoolExecutor(1).submit(store.purge_content, horizon)
            time.sleep(0.5)
            assert not purge.done()  # held off by the writer's lock on metric_results
            writer.commit()
        assert purge.result(timeout=10).question_texts_removed == 0
    assert _count(pg_store_url, "question_texts") == 1
