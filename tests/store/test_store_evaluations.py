"""Snapshots and evaluations: idempotent writes, re-evaluation links, reads and report counts."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
from pydantic import ValidationError

from producer.snapshot import Event, Sampling, SliceMeta, Snapshot, Window
from tests.store._store_helpers import evaluation_record, snapshot_record, wire
from worker.canonical_json import canonical_json
from worker.store import (
    EvaluationRecord,
    MetricResultRecord,
    PermanentStoreError,
    SnapshotRecord,
    Store,
    evaluation_id_for,
)


def test_snapshot_id_is_the_hash_of_the_canonical_evaluated_content() -> None:
    """The record's id is sha256 of the canonical JSON less provenance, whatever the key order."""
    content = {**wire("t-hash"), "source": "openai_chat"}
    shuffled = dict(reversed(list(content.items())))
    evaluated = {k: v for k, v in content.items() if k not in ("sampling", "source")}
    expected = hashlib.sha256(canonical_json(evaluated).encode("utf-8")).hexdigest()
    record = SnapshotRecord(content=shuffled)
    assert record.snapshot_id == expected
    assert record.legacy_id == hashlib.sha256(canonical_json(content).encode()).hexdigest()


def test_snapshot_record_agrees_with_the_producer_contract() -> None:
    """A record built from ``Snapshot.wire()`` has the producer's snapshot id and metadata."""
    snapshot = Snapshot(
        trace_id="t-contract",
        session_id="s-9",
        events=(Event(id="e1", type="user", text="hi"),),
        window=Window(rule="invocation_end", cutoff_event_id="e1"),
        labels={},
        slice=SliceMeta(agent_version="7", environment="staging"),
        sampling=Sampling(lane="backfill", rate=0.25, weight=4.0, rule="quarter"),
    )
    record = SnapshotRecord(content=snapshot.wire())
    assert record.snapshot_id == snapshot.snapshot_id
    meta = record.meta
    assert (meta.trace_id, meta.session_id, meta.unit.kind) == ("t-contract", "s-9", "invocation")
    assert (meta.window.rule, meta.window.cutoff_event_id) == ("invocation_end", "e1")
    assert (meta.slice.agent_version, meta.slice.environment) == ("7", "staging")
    assert (meta.sampling.lane, meta.sampling.weight, meta.sampling.rule) == (
        "backfill",
        4.0,
        "quarter",
    )


def test_put_snapshot_is_insert_if_absent(store: Store) -> None:
    """Putting the same snapshot twice keeps one row; the content reads back identical."""
    record = snapshot_record("t-put")
    first, second = store.put_snapshot(record), store.put_snapshot(record)
    assert (first.created, second.created) == (True, False)
    assert first.id == second.id == record.snapshot_id
    assert store.count_snapshots() == 1
    read = store.get_snapshot(record.snapshot_id)
    assert read is not None
    assert read.canonical_text == record.canonical_text
    assert store.get_snapshot("0" * 64) is None


def test_three_deliveries_write_one_evaluation(store: Store) -> None:
    """Three writes of one evaluation: one row, results once, created flags True/False/False."""
    snapshot = snapshot_record("t-idem")
    record = evaluation_record(snapshot.snapshot_id)
    writes = [store.record_evaluation(record, snapshot) for _ in range(3)]
    assert [w.created for w in writes] == [True, False, False]
    assert {w.id for w in writes} == {record.evaluation_id}
    assert store.count_evaluations() == 1
    assert store.count_snapshots() == 1
    assert sum(1 for _ in store.iter_results()) == len(record.results)


def test_duplicate_with_different_content_keeps_the_first(store: Store) -> None:
    """A redelivery judged differently writes nothing: the first recorded evaluation stands."""
    snapshot = snapshot_record("t-first")
    first = evaluation_record(snapshot.snapshot_id, score=0.9)
    again = evaluation_record(snapshot.snapshot_id, score=0.1)
    assert store.record_evaluation(first, snapshot).created
    assert store.record_evaluation(again).created is False
    stored = store.find_evaluation(snapshot.snapshot_id, "agent@1")
    assert stored is not None
    assert stored.record == first


def test_evaluation_reads_back_equal(store: Store) -> None:
    """The stored evaluation equals the record written, plus the snapshot's window and trace."""
    snapshot = snapshot_record("t-read")
    record = evaluation_record(snapshot.snapshot_id, criteria=("refund_reversed", "complaint"))
    store.record_evaluation(record, snapshot)
    stored = store.find_evaluation(snapshot.snapshot_id, "agent@1")
    assert stored is not None
    assert stored.record == record
    assert stored.evaluation_id == record.evaluation_id
    assert stored.trace_id == "t-read"
    window = snapshot.meta.window
    assert (stored.window_rule, stored.cutoff_event_id) == (window.rule, window.cutoff_event_id)
    assert stored.cutoff_time == window.cutoff_time
    assert stored.previous_evaluation_id is None
    assert store.find_evaluation(snapshot.snapshot_id, "agent@2") is None


def test_evaluation_of_an_unknown_snapshot_is_refused(store: Store) -> None:
    """Without its snapshot an evaluation is refused (UNKNOWN_SNAPSHOT) and nothing is written."""
    record = evaluation_record(snapshot_record("t-missing").snapshot_id)
    with pytest.raises(PermanentStoreError) as caught:
        store.record_evaluation(record)
    assert caught.value.code == "UNKNOWN_SNAPSHOT"
    assert store.count_evaluations() == 0


def test_mismatched_snapshot_argument_is_refused(store: Store) -> None:
    """Passing a snapshot other than the one the evaluation names is a ValueError."""
    record = evaluation_record(snapshot_record("t-a").snapshot_id)
    with pytest.raises(ValueError, match="snapshot"):
        store.record_evaluation(record, snapshot_record("t-b"))


def test_re_evaluation_links_to_the_previous_one(store: Store) -> None:
    """A new metric-set version links to v1; an explicit re-run links to the latest before it."""
    snapshot = snapshot_record("t-re")
    v1 = evaluation_record(snapshot.snapshot_id, version="agent@1")
    v2 = evaluation_record(snapshot.snapshot_id, version="agent@2")
    rerun = evaluation_record(snapshot.snapshot_id, version="agent@2", run="rerun-1")
    ids = [store.record_evaluation(r, snapshot).id for r in (v1, v2, rerun)]
    assert len(set(ids)) == 3
    chain = [store.get_evaluation(i) for i in ids]
    assert [e.previous_evaluation_id if e else "missing" for e in chain] == [None, ids[0], ids[1]]
    assert store.record_evaluation(rerun).created is False
    assert store.count_evaluations() == 3


def test_evaluation_id_is_deterministic_per_key() -> None:
    """The id depends on exactly (snapshot, version, run): equal keys agree, others differ."""
    sid = "a" * 64
    record = evaluation_record(sid, version="v", run="r")
    assert record.evaluation_id == evaluation_id_for(sid, "v", "r")
    others = {evaluation_id_for(sid, "v", ""), evaluation_id_for(sid, "w", "r")}
    others.add(evaluation_id_for("b" * 64, "v", "r"))
    assert record.evaluation_id not in others
    assert len(others) == 3


def test_invalid_records_are_refused() -> None:
    """Duplicate metric ids, ``passed`` outside DECIDED and out-of-range scores are refused."""
    record = evaluation_record("c" * 64)
    with pytest.raises(ValidationError):
        EvaluationRecord.model_validate(
            {**record.model_dump(), "results": [record.results[0].model_dump()] * 2}
        )
    with pytest.raises(ValidationError):
        MetricResultRecord(
            metric_id="m", metric_version="1", status="ERROR", reason="TIMEOUT", passed=False
        )
    with pytest.raises(ValidationError):
        MetricResultRecord(
            metric_id="m", metric_version="1", status="DECIDED", reason="DECIDED", score=1.5
        )


def test_metric_counts_and_totals(store: Store) -> None:
    """Report counts match the results written, grouped by status and by reason per metric."""
    written: list[MetricResultRecord] = []
    for i in range(3):
        snapshot = snapshot_record(f"t-count-{i}")
        record = evaluation_record(snapshot.snapshot_id, score=0.9 if i else 0.5)
        store.record_evaluation(record, snapshot)
        written.extend(record.results)
    counts = store.metric_counts()
    assert set(counts) == {r.metric_id for r in written}
    for metric_id, entry in counts.items():
        mine = [r for r in written if r.metric_id == metric_id]
        assert entry["by_status"] == dict(Counter(r.status for r in mine))
        assert entry["by_reason"] == dict(Counter(r.reason for r in mine))
    assert (store.count_snapshots(), store.count_evaluations()) == (3, 3)


def test_iter_results_pages_in_recording_order(store: Store) -> None:
    """Results come back in (evaluation, position) order across pages, filterable by version."""
    expected = []
    for i in range(3):
        snapshot = snapshot_record(f"t-iter-{i}")
        version = "agent@1" if i != 1 else "agent@9"
        record = evaluation_record(snapshot.snapshot_id, version=version)
        store.record_evaluation(record, snapshot)
        expected += [(record.evaluation_id, r.metric_id, version) for r in record.results]
    rows = list(store.iter_results(page_size=2))
    assert [(r.evaluation_id, r.metric_id, r.metric_set_version) for r in rows] == expected
    assert all(r.window_rule == "invocation_end" and r.sampling_weight == 2.0 for r in rows)
    only = list(store.iter_results(metric_set_version="agent@9", page_size=2))
    assert [(r.evaluation_id, r.metric_id, "agent@9") for r in only] == [
        e for e in expected if e[2] == "agent@9"
    ]
