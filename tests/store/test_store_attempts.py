"""Attempts: a retry is a new evaluation of the same snapshot and version, linked, not a change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.store._store_helpers import dump_tables, snapshot_record
from worker.store import (
    EvaluationRecord,
    MetricResultRecord,
    RecordScope,
    RetryQuery,
    Store,
    attempt_of,
    attempt_run,
    evaluation_id_for,
)

FAILED = ("BACKEND_ERROR", "TIMEOUT")


def _record(
    snapshot_id: str, *, run: str = "", reason: str = "BACKEND_ERROR", version: str = "agent@1"
) -> EvaluationRecord:
    """An evaluation whose judged metric has ``reason`` (ERROR) or is DECIDED (``DECIDED``)."""
    decided = reason == "DECIDED"
    judged = MetricResultRecord(
        metric_id="grounded",
        metric_version="1",
        status="DECIDED" if decided else "ERROR",
        reason=reason,
        score=0.9 if decided else None,
        passed=True if decided else None,
        question_ids=("grounded.q1",),
    )
    plain = MetricResultRecord(
        metric_id="tool_execution", metric_version="1", status="DECIDED", reason="ALL_OK"
    )
    return EvaluationRecord(
        snapshot_id=snapshot_id,
        metric_set="agent",
        metric_set_version=version,
        run=run,
        judge_kind="systemone",
        synthetic=False,
        requests=1,
        elapsed_s=0.5,
        lane="backfill" if run else "live",
        results=(judged, plain),
    )


def test_attempt_runs_round_trip() -> None:
    """Attempt 1 is run '', attempt N is 'attempt:N'; other runs are not attempts."""
    assert attempt_run(1) == ""
    assert attempt_run(7) == "attempt:7"
    assert [attempt_of(attempt_run(n)) for n in (1, 2, 10)] == [1, 2, 10]
    assert attempt_of("attempt:02") is None
    assert attempt_of("attempt:1") is None
    assert attempt_of("nightly") is None
    with pytest.raises(ValueError, match="from 1"):
        attempt_run(0)


def test_a_retry_is_a_new_record_linked_to_the_failed_one(store: Store, store_url: str) -> None:
    """Attempt 2 gets its own id and row; previous_evaluation_id is attempt 1; nothing changed."""
    snap = snapshot_record("t-retry")
    first = store.record_evaluation(_record(snap.snapshot_id), snap)
    before = dump_tables(store_url)
    second = store.record_evaluation(_record(snap.snapshot_id, run="attempt:2", reason="DECIDED"))
    assert second.created
    assert second.id != first.id
    assert second.id == evaluation_id_for(snap.snapshot_id, "agent@1", "attempt:2")
    stored = store.get_evaluation(second.id)
    assert stored is not None
    assert stored.previous_evaluation_id == first.id
    after = dump_tables(store_url)
    assert all(after[t][: len(rows)] == rows for t, rows in before.items())  # only appended
    again = store.record_evaluation(_record(snap.snapshot_id, run="attempt:2", reason="DECIDED"))
    assert again == (second.id, False)  # a redelivered retry writes nothing
    assert store.count_evaluations() == 2


def test_a_retry_links_to_its_own_version_not_the_snapshots_latest(store: Store) -> None:
    """With another version evaluated in between, attempt 2 still links to attempt 1 of its own."""
    snap = snapshot_record("t-versions")
    first = store.record_evaluation(_record(snap.snapshot_id), snap)
    other = store.record_evaluation(_record(snap.snapshot_id, version="agent@2"))
    retried = store.record_evaluation(_record(snap.snapshot_id, run="attempt:2"))
    stored_other = store.get_evaluation(other.id)
    stored_retry = store.get_evaluation(retried.id)
    assert stored_other is not None
    assert stored_other.previous_evaluation_id == first.id
    assert stored_retry is not None
    assert stored_retry.previous_evaluation_id == first.id


def test_the_batch_path_links_retries_the_same_way(store: Store) -> None:
    """record_evaluations (group commit) links attempt 2 and 3 in one batch to the one before."""
    snap = snapshot_record("t-batch")
    first = store.record_evaluation(_record(snap.snapshot_id), snap)
    store.record_evaluation(_record(snap.snapshot_id, version="agent@2"))
    written = store.record_evaluations(
        [
            (_record(snap.snapshot_id, run="attempt:2"), None),
            (_record(snap.snapshot_id, run="attempt:3", reason="DECIDED"), None),
            (_record(snap.snapshot_id, run="attempt:3", reason="DECIDED"), None),
        ]
    )
    assert [w.created for w in written] == [True, True, False]
    second, third = (store.get_evaluation(w.id) for w in written[:2])
    assert second is not None
    assert second.previous_evaluation_id == first.id
    assert third is not None
    assert third.previous_evaluation_id == written[0].id


def test_newest_evaluation_is_the_latest_attempt_of_the_pair(store: Store) -> None:
    """newest_evaluation reads attempt 1, then the retry; another version or a named run never."""
    snap = snapshot_record("t-newest")
    first = store.record_evaluation(_record(snap.snapshot_id), snap)
    newest = store.newest_evaluation(snap.snapshot_id, "agent@1")
    assert newest is not None
    assert newest.evaluation_id == first.id
    retried = store.record_evaluation(_record(snap.snapshot_id, run="attempt:2", reason="DECIDED"))
    store.record_evaluation(_record(snap.snapshot_id, run="nightly"))
    store.record_evaluation(_record(snap.snapshot_id, version="agent@2"))
    newest = store.newest_evaluation(snap.snapshot_id, "agent@1")
    assert newest is not None
    assert newest.evaluation_id == retried.id
    assert newest.record.results[0].status == "DECIDED"
    assert store.newest_evaluation(snap.snapshot_id, "agent@9") is None


def _candidates(store: Store, query: RetryQuery) -> list[tuple[str, str, int | None]]:
    return [(c.snapshot_id, c.run, c.attempt) for c in store.iter_retry_candidates(query)]


def test_retry_candidates_are_newest_attempts_with_the_reasons(store: Store) -> None:
    """Only a newest attempt with a chosen reason is listed; a recovered snapshot drops out."""
    down = snapshot_record("t-down")
    recovered = snapshot_record("t-recovered")
    slow = snapshot_record("t-slow")
    fine = snapshot_record("t-fine")
    store.record_evaluation(_record(down.snapshot_id), down)
    store.record_evaluation(_record(recovered.snapshot_id), recovered)
    store.record_evaluation(_record(recovered.snapshot_id, run="attempt:2", reason="DECIDED"), None)
    store.record_evaluation(_record(slow.snapshot_id, reason="TIMEOUT"), slow)
    store.record_evaluation(_record(fine.snapshot_id, reason="DECIDED"), fine)
    listed = _candidates(store, RetryQuery(reasons=FAILED))
    assert listed == [(down.snapshot_id, "", 1), (slow.snapshot_id, "", 1)]
    only_timeouts = _candidates(store, RetryQuery(reasons=("TIMEOUT",)))
    assert only_timeouts == [(slow.snapshot_id, "", 1)]
    assert _candidates(store, RetryQuery(reasons=FAILED, metric_id="tool_execution")) == []
    store.record_evaluation(_record(down.snapshot_id, run="attempt:2"))  # failed again
    assert _candidates(store, RetryQuery(reasons=("BACKEND_ERROR",))) == [
        (down.snapshot_id, "attempt:2", 2)
    ]


def test_retry_candidates_page_and_scope(store: Store) -> None:
    """Pages continue by seq without gaps; since/backfill scopes narrow; content kept is said."""
    snaps = [snapshot_record(f"t-page-{i}") for i in range(5)]
    for snap in snaps:
        store.record_evaluation(_record(snap.snapshot_id), snap)
    query = RetryQuery(reasons=FAILED)
    first, cursor = store.retry_candidates(query, limit=2)
    assert len(first) == 2
    assert cursor is not None
    rest = list(store.iter_retry_candidates(query, page_size=2))
    assert [c.snapshot_id for c in rest] == [s.snapshot_id for s in snaps]
    assert all(c.content_kept for c in rest)
    later = datetime.now(UTC) + timedelta(hours=1)
    assert _candidates(store, RetryQuery(reasons=FAILED, scope=RecordScope(since=later))) == []
    in_backfill = RetryQuery(reasons=FAILED, scope=RecordScope(backfill_id="bf-none"))
    assert _candidates(store, in_backfill) == []
