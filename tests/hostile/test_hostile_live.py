"""The live path: one snapshot that cannot be encoded drops only itself, never its batch."""

from __future__ import annotations

import json

import pytest

from producer import Producer, Snapshot
from tests.hostile.hostile_kit import record
from tests.producer.producer_kit import make_snapshot, queued_payloads

pytestmark = pytest.mark.services


def _deep_snapshot() -> Snapshot:
    wire = make_snapshot("deep").wire()
    wire["contexts"] = [json.loads("[" * 300 + "]" * 300)]
    return Snapshot.model_validate(wire)


def test_a_too_deep_live_snapshot_drops_alone(redis_url: str) -> None:
    """Submitted among 4 valid snapshots, a 300-deep one is dropped_failed; the 4 are sent."""
    producer = Producer(redis_url, live_batch_size=10, live_flush_interval_s=0.5)
    try:
        snapshots = [make_snapshot(f"ok{i}") for i in range(2)]
        snapshots += [_deep_snapshot()] + [make_snapshot(f"ok{i}") for i in range(2, 4)]
        assert all(producer.submit(s) for s in snapshots)
        assert producer.flush(timeout_s=10)
        stats = producer.live_stats()
    finally:
        producer.close()
    assert stats is not None
    assert (stats.sent, stats.dropped_failed) == (4, 1)
    sent = sorted(args[0]["trace_id"] for args in queued_payloads(redis_url, "evalq.live"))
    assert sent == ["ok0", "ok1", "ok2", "ok3"]
    record("live submit: 300-deep among 4 valid", "dropped_failed 1, the 4 others sent")
