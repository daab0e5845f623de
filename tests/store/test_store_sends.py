"""Sends (provenance beside content-addressed snapshots) and the newest-evaluation rule, on
SQLite and PostgreSQL alike."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

from tests.store._store_helpers import (
    evaluation_record,
    raw_connection,
    send_record,
    snapshot_record,
    wire,
)
from worker.canonical_json import canonical_json
from worker.store import RecordScope, SnapshotRecord, Store, open_store
from worker.store._schema import statements


def test_a_redelivered_message_adds_no_send_and_each_message_adds_one(store: Store) -> None:
    """Sends are unique per (message id, snapshot id): redelivery adds nothing, new sends add."""
    snapshot = snapshot_record("t-sends")
    store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)
    live = send_record(snapshot, "task-live")
    assert store.record_sends([live]) == 1
    assert store.record_sends([live, live]) == 0  # the same message again
    backfills = [
        send_record(snapshot, f"task-{bf}", rule=f"backfill:{bf}", lane="backfill")
        for bf in ("bf-a", "bf-b")
    ]
    assert store.record_sends(backfills) == 2
    sent = store.sends(snapshot.snapshot_id)
    assert [(s.message_id, s.lane, s.rule) for s in sent] == [
        ("task-live", "live", "half"),
        ("task-bf-a", "backfill", "backfill:bf-a"),
        ("task-bf-b", "backfill", "backfill:bf-b"),
    ]
    assert (store.count_snapshots(), store.count_evaluations()) == (1, 1)
    counts = store.send_counts(RecordScope(newest=True))
    assert (counts.sends, counts.snapshots, counts.duplicates) == (3, 1, 2)


def test_backfill_and_lane_scopes_find_units_through_any_send(store: Store) -> None:
    """A unit sent live and later by a backfill is in the backfill's scope and the live lane's."""
    shared, live_only = snapshot_record("t-shared"), snapshot_record("t-live-only")
    for snapshot in (shared, live_only):
        store.record_evaluation(evaluation_record(snapshot.snapshot_id), snapshot)
        store.record_sends([send_record(snapshot, f"live-{snapshot.meta.trace_id}")])
    store.record_sends(
        [send_record(shared, "bf-message", rule="backfill:bf-7/half", lane="backfill")]
    )
    assert store.count_evaluations(RecordScope(backfill_id="bf-7")) == 1
    assert store.count_snapshots(RecordScope(backfill_id="bf-7")) == 1
    assert store.count_evaluations(RecordScope(backfill_id="bf-70")) == 0
    assert store.count_evaluations(RecordScope(lane="live")) == 2
    assert store.count_evaluations(RecordScope(lane="backfill")) == 1
    assert store.backfill_counts("bf-7") == (1, 1)  # the fixture evaluation has an ERROR
    in_backfill = list(store.iter_results(scope=RecordScope(backfill_id="bf-7")))
    assert {r.snapshot_id for r in in_backfill} == {shared.snapshot_id}


def test_the_newest_evaluation_per_snapshot_and_version_is_counted(store: Store) -> None:
    """Two runs of one (snapshot, version): the later one counts, the earlier is superseded."""
    snapshot = snapshot_record("t-runs")
    first = evaluation_record(snapshot.snapshot_id, score=0.1)  # run "": failed groundedness
    store.record_evaluation(first, snapshot)
    between = datetime.now(UTC)
    second = evaluation_record(snapshot.snapshot_id, run="attempt-2", score=0.95)
    store.record_evaluation(second)
    other = evaluation_record(snapshot.snapshot_id, version="agent@2")
    store.record_evaluation(other)
    newest = RecordScope(newest=True)
    assert store.count_evaluations() == 3
    assert store.count_evaluations(newest) == 2  # one per metric-set version
    grounded = [r for r in store.iter_results(scope=newest) if r.metric_id == "groundedness"]
    by_version = {r.metric_set_version: (r.run, r.passed) for r in grounded}
    assert by_version == {"agent@1": ("attempt-2", True), "agent@2": ("", True)}
    rows = [
        (v.metric_set_version, v.evaluations, v.newest, v.superseded)
        for v in (store.version_counts(newest))
    ]
    assert rows == [("agent@1", 2, 1, 1), ("agent@2", 1, 1, 0)]
    # Bounded before the re-run, the first run is the newest there is.
    earlier = RecordScope(newest=True, metric_set_version="agent@1", until=between)
    (only,) = [r for r in store.iter_results(scope=earlier) if r.metric_id == "groundedness"]
    assert (only.run, only.passed) == ("", False)
    assert [e.evaluation_id for e in store.iter_evaluation_rows(earlier)] == [first.evaluation_id]


def _as_version_3(url: str, dialect: str) -> None:
    """A database as schema version 3 left it: no sends table."""
    with raw_connection(url) as conn:
        conn.execute("CREATE TABLE evalq_schema (version INTEGER PRIMARY KEY, applied_at TEXT)")
        for sql in statements(dialect):  # type: ignore[arg-type]
            if "sends" not in sql:
                conn.execute(sql)
        conn.execute("INSERT INTO evalq_schema VALUES (3, '2025-01-01T00:00:00+00:00')")


def _put_legacy_snapshot(url: str, content: dict[str, object]) -> str:
    """A snapshot row and its content as version 3 wrote them: id = sha256 of the whole text."""
    text = canonical_json(content)
    legacy_id = hashlib.sha256(text.encode("utf-8")).hexdigest()
    marker = "?" if url.startswith("sqlite") else "%s"
    values = (legacy_id, "t-old", "backfill", 1.0, 1.0, "backfill:bf-old", "2025-01-01T00:00:00Z")
    with raw_connection(url) as conn:
        conn.execute(
            f"""INSERT INTO snapshots (snapshot_id, schema_version, trace_id, unit_kind,
            window_rule, cutoff_event_id, sampling_lane, sampling_rate, sampling_weight,
            sampling_rule, metric_set, created_at) VALUES ({marker}, 1, {marker}, 'invocation',
            'invocation_end', 'a1', {marker}, {marker}, {marker}, {marker}, 'agent', {marker})""",
            values,
        )
        conn.execute(
            f"INSERT INTO snapshot_contents (snapshot_id, content) VALUES ({marker}, {marker})",
            (legacy_id, text),
        )
    return legacy_id


def test_a_version_3_store_gets_sends_for_its_snapshots_and_reads_old_ids(store_url: str) -> None:
    """Upgrading fills one send per older snapshot; its whole-text id still reads back."""
    dialect = "sqlite" if store_url.startswith("sqlite") else "postgresql"
    _as_version_3(store_url, dialect)
    content = {**wire("t-old"), "sampling": {**wire()["sampling"], "rule": "backfill:bf-old"}}
    legacy_id = _put_legacy_snapshot(store_url, content)
    with open_store(store_url) as upgraded:
        (send,) = upgraded.sends(legacy_id)
        assert (send.rule, send.lane) == ("backfill:bf-old", "backfill")
        read = upgraded.get_snapshot(legacy_id)
        assert read is not None
        assert json.loads(read.canonical_text) == content
        assert read.snapshot_id == SnapshotRecord(content=content).snapshot_id != legacy_id
        upgraded.record_evaluation(evaluation_record(legacy_id))
        assert upgraded.backfill_counts("bf-old") == (1, 1)
        assert upgraded.migrate() is False
        assert upgraded.sends(legacy_id) == (send,)  # migrating again adds nothing
    before = datetime.now(UTC) - timedelta(days=1)
    with open_store(store_url) as reopened:
        assert reopened.count_evaluations(RecordScope(since=before, backfill_id="bf-old")) == 1
