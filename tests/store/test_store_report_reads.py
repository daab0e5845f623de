"""Scoped reads behind `evalq report` / `evalq status`, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.store._store_helpers import evaluation_record, outcome_record, send_record, wire
from worker.store import DeadLetterRecord, RecordScope, SnapshotRecord, Store


def _snapshot(
    trace_id: str,
    *,
    agent_version: str = "1.2",
    tool: str | None = None,
    rule: str = "half",
    weight: float = 2.0,
    labels: dict[str, Any] | None = None,
    source: str | None = None,
) -> SnapshotRecord:
    content = wire(trace_id)
    content["slice"] = {"agent_version": agent_version, "environment": "prod", "tool": tool}
    content["sampling"] = {"lane": "live", "rate": 1 / weight, "weight": weight, "rule": rule}
    content["labels"] = labels or {}
    if source is not None:
        content["source"] = source
    return SnapshotRecord(content=content)


def _record(store: Store, snapshot: SnapshotRecord, version: str = "agent@1") -> str:
    written = store.record_evaluation(
        evaluation_record(snapshot.snapshot_id, version=version), snapshot
    )
    store.record_sends([send_record(snapshot, f"message-{written.id}")])  # as a worker does
    return written.id


def _fill(store: Store) -> dict[str, SnapshotRecord]:
    snapshots = {
        "a": _snapshot("t-a", labels={"groundedness": {"passed": True}}, source="openai_chat"),
        "b": _snapshot("t-b", agent_version="2.0", tool="refund", weight=4.0),
        "c": _snapshot("t-c", rule="backfill:bf-1"),
        "d": _snapshot("t-d", rule="backfill:bf-1/half", labels={"tool_use": {"label": "x"}}),
        "e": _snapshot("t-e", rule="backfill:bf-10"),  # a different backfill sharing a prefix
    }
    for snapshot in snapshots.values():
        _record(store, snapshot)
    _record(store, snapshots["a"], version="agent@2")
    return snapshots


def test_scoped_counts_follow_slice_backfill_and_version(store: Store) -> None:
    """Counts narrow by slice, backfill id (rule or rule/…, not a longer id) and metric set."""
    _fill(store)
    assert (store.count_snapshots(), store.count_evaluations()) == (5, 6)
    v2 = RecordScope(agent_version="2.0")
    assert (store.count_snapshots(v2), store.count_evaluations(v2)) == (1, 1)
    backfill = RecordScope(backfill_id="bf-1")
    assert (store.count_snapshots(backfill), store.count_evaluations(backfill)) == (2, 2)
    version = RecordScope(metric_set_version="agent@2")
    assert (store.count_snapshots(version), store.count_evaluations(version)) == (1, 1)
    assert store.count_evaluations(RecordScope(metric_set="agent")) == 6
    assert store.count_snapshots(RecordScope(metric_set="agent+trajectory")) == 0
    tool = RecordScope(tool="refund")
    assert store.metric_counts(tool) == {
        "groundedness": {"by_status": {"DECIDED": 1}, "by_reason": {"DECIDED": 1}},
        "helpfulness": {"by_status": {"ERROR": 1}, "by_reason": {"TIMEOUT": 1}},
        "tool_use": {"by_status": {"SKIPPED": 1}, "by_reason": {"NO_TOOL_RESULTS": 1}},
    }
    assert sum(c.n for c in store.result_counts(backfill)) == 6
    assert store.sampling_weight_sum(v2) == (1, 4.0)
    assert store.backfill_counts("bf-1") == (2, 2)  # every fixture evaluation has an ERROR


def test_time_range_bounds_evaluation_created_at(store: Store) -> None:
    """since is inclusive, until exclusive; a future since selects nothing."""
    _fill(store)
    now = datetime.now(UTC)
    assert store.count_evaluations(RecordScope(since=now - timedelta(minutes=5))) == 6
    assert store.count_evaluations(RecordScope(since=now + timedelta(minutes=5))) == 0
    assert store.count_evaluations(RecordScope(until=now - timedelta(minutes=5))) == 0
    assert store.count_snapshots(RecordScope(since=now + timedelta(minutes=5))) == 0
    rows = list(store.iter_results(scope=RecordScope(since=now - timedelta(minutes=5))))
    assert len(rows) == 18


def test_evaluation_rows_carry_slice_sampling_and_usage_in_pages(store: Store) -> None:
    """iter_evaluation_rows pages in recording order with slice, weight and usage."""
    snapshots = _fill(store)
    rows = list(store.iter_evaluation_rows(page_size=2))
    assert [r.snapshot_id for r in rows] == [
        snapshots[k].snapshot_id for k in ("a", "b", "c", "d", "e", "a")
    ]
    b = rows[1]
    assert (b.agent_version, b.tool, b.sampling_weight, b.sampling_rule) == (
        "2.0",
        "refund",
        4,
        "half",
    )
    assert (b.requests, b.usage[0].usage, b.usage[1].usage) == (
        2,
        {"input_tokens": 120, "output_tokens": 7},
        None,
    )
    scoped = list(store.iter_evaluation_rows(RecordScope(backfill_id="bf-1"), page_size=1))
    assert {r.sampling_rule for r in scoped} == {"backfill:bf-1", "backfill:bf-1/half"}


def test_snapshot_labels_are_read_inside_the_database(store: Store) -> None:
    """Only labelled snapshots with an evaluation in scope come back, with labels and source."""
    snapshots = _fill(store)
    labels = {r.snapshot_id: r for r in store.iter_snapshot_labels(page_size=1)}
    assert set(labels) == {snapshots["a"].snapshot_id, snapshots["d"].snapshot_id}
    a = labels[snapshots["a"].snapshot_id]
    assert (a.labels, a.source) == ({"groundedness": {"passed": True}}, "openai_chat")
    assert labels[snapshots["d"].snapshot_id].source is None
    scoped = list(store.iter_snapshot_labels(RecordScope(backfill_id="bf-1")))
    assert [r.snapshot_id for r in scoped] == [snapshots["d"].snapshot_id]


def test_linked_outcomes_dead_letter_counts_and_latest_checkpoints(store: Store) -> None:
    """Outcome links per evaluation, open dead letters by reason, latest checkpoint per source."""
    _fill(store)
    store.record_outcome(outcome_record("o-1", "t-a"))
    store.record_outcome(outcome_record("o-2", "t-b", name="complaint"))
    links = list(store.iter_linked_outcomes(page_size=1))
    assert sorted((link.event_id, link.name) for link in links) == [
        ("o-1", "refund_reversed"),
        ("o-1", "refund_reversed"),  # both evaluations of t-a
        ("o-2", "complaint"),
    ]
    assert [link.name for link in store.iter_linked_outcomes(RecordScope(tool="refund"))] == [
        "complaint"
    ]
    first = store.record_dead_letter(DeadLetterRecord(reason="SCHEMA_INVALID", payload=b"{}"))
    store.record_dead_letter(DeadLetterRecord(reason="SCHEMA_INVALID", payload=b"[]"))
    store.record_dead_letter(DeadLetterRecord(reason="UNDECODABLE", payload=b"x"))
    store.record_redrive(first)
    assert store.open_dead_letter_counts() == {"SCHEMA_INVALID": 1, "UNDECODABLE": 1}
    store.record_checkpoint("bf-1", "/a", 10, 10)
    store.record_checkpoint("bf-1", "/a", 20, 19)
    store.record_checkpoint("bf-1", "complete:/a", 20, 19)
    store.record_checkpoint("bf-2", "/b", 5, 5)
    latest = [(c.backfill_id, c.source, c.position) for c in store.latest_checkpoints()]
    assert latest == [("bf-1", "/a", 20), ("bf-1", "complete:/a", 20), ("bf-2", "/b", 5)]
