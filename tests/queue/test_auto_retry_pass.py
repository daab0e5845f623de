"""One automatic retry pass against a real Redis and store (no worker): due attempts are sent
once, not again by the next pass, never past max_attempts, and not before their back-off."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from producer.snapshot import LANE_QUEUES, Lane
from tests.producer.producer_kit import queued_payloads
from tests.queue.queue_kit import example_snapshots, variants
from worker.auto_retry import AutoRetry
from worker.settings import load_settings
from worker.store import EvaluationRecord, MetricResultRecord, SnapshotRecord, Store, open_store


def _failed(store: Store, prefix: str, count: int, run: str = "") -> list[str]:
    """``count`` snapshots whose attempt ``run`` failed with BACKEND_ERROR; their ids."""
    ids = []
    for snapshot in variants(example_snapshots()["order-42"], count, prefix):
        content = SnapshotRecord(content=snapshot.wire())
        result = MetricResultRecord(
            metric_id="grounded",
            metric_version="1",
            status="ERROR",
            reason="BACKEND_ERROR",
            question_ids=("grounded.q1",),
        )
        record = EvaluationRecord(
            snapshot_id=content.snapshot_id,
            metric_set="agent",
            metric_set_version="agent@1",
            run=run,
            judge_kind="systemone",
            synthetic=False,
            requests=1,
            elapsed_s=0.1,
            lane="live",
            results=(result,),
        )
        store.record_evaluation(record, content)
        ids.append(content.snapshot_id)
    return ids


def _sent(redis_url: str) -> list[tuple[str, int]]:
    payloads = queued_payloads(redis_url, LANE_QUEUES[Lane.BACKFILL])
    items = [
        item for args in payloads for item in (args[0] if isinstance(args[0], list) else [args[0]])
    ]
    return sorted((SnapshotRecord(content=i["snapshot"]).snapshot_id, i["attempt"]) for i in items)


def test_a_pass_sends_each_due_attempt_once_within_its_bound(redis_url: str, workdir: Path) -> None:
    """Two first attempts are sent as attempt 2 once; an attempt 3 (the bound) is left alone."""
    store_url = f"sqlite:///{workdir / 'evalq.db'}"
    settings = load_settings(
        broker_url=redis_url, store_url=store_url, retry_max_attempts=3, retry_backoff_s=30.0
    )
    with open_store(store_url) as store:
        first = _failed(store, "first", 2)
        last = _failed(store, "last", 1, run="attempt:3")
    auto = AutoRetry(settings)
    try:
        early = auto.run_once(datetime.now(UTC) + timedelta(seconds=5))
        assert (early.enqueued, early.not_due) == (0, 2)  # 30 s back-off not yet passed
        assert early.not_retryable == {"MAX_ATTEMPTS": 1}  # at the bound: never due
        later = datetime.now(UTC) + timedelta(seconds=31)
        summary = auto.run_once(later)
        assert summary.enqueued == 2
        assert summary.not_retryable == {"MAX_ATTEMPTS": 1}
        again = auto.run_once(later + timedelta(seconds=1))
        assert again.enqueued == 0  # still queued: not sent a second time
    finally:
        auto.stop()
    assert _sent(redis_url) == sorted((snapshot_id, 2) for snapshot_id in first)
    assert all(snapshot_id not in dict(_sent(redis_url)) for snapshot_id in last)
