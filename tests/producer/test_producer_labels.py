"""Task labels (``argsrepr``, what Flower shows): snapshot id and trace id, never content."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from producer import LANE_QUEUES, Lane, OutcomeEvent, Producer
from producer.topology import TRACE_LABEL_CHARS, trace_label
from tests.producer.producer_kit import make_snapshot
from worker.embedded import RedisServer

pytestmark = pytest.mark.services

SECRET_TEXT = "the user's private question"


@pytest.fixture
def broker(private_redis: RedisServer) -> str:
    """A Redis of the test's own (its queues hold only what the test sent)."""
    return private_redis.url


def _headers(url: str, lane: Lane) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(url)
    try:
        return [json.loads(m)["headers"] for m in client.lrange(LANE_QUEUES[lane], 0, -1)]
    finally:
        client.close()


def test_every_publish_path_labels_snapshot_and_trace(broker: str) -> None:
    """enqueue, batches, the live path and outcomes all put the trace id in argsrepr."""
    one, two, three = (make_snapshot(f"trace-{n}", text=SECRET_TEXT) for n in range(3))
    live = make_snapshot("trace-live", text=SECRET_TEXT)
    with Producer(broker) as producer:
        producer.enqueue(one)
        producer.enqueue_many([two, three], lane=Lane.BACKFILL, batch_size=2)
        assert producer.submit(live)
        assert producer.flush(10.0)
        producer.outcome(
            OutcomeEvent(
                event_id="o-1", trace_id="trace-1", name="refund", observed_at=datetime.now(UTC)
            )
        )
    live_labels = [h["argsrepr"] for h in _headers(broker, Lane.LIVE)]
    assert sorted(live_labels) == sorted(
        [
            f"[snapshot {one.snapshot_id[:16]} trace trace-0]",
            f"[snapshot {live.snapshot_id[:16]} trace trace-live]",
        ]
    )
    (batch,) = [h["argsrepr"] for h in _headers(broker, Lane.BACKFILL)]
    assert batch == f"[2 snapshots {two.snapshot_id[:16]}… trace trace-1…]"
    (outcome,) = [h["argsrepr"] for h in _headers(broker, Lane.OUTCOMES)]
    assert outcome == "[outcome o-1 trace trace-1]"
    assert all(SECRET_TEXT not in label for label in [*live_labels, batch, outcome])


def test_a_hostile_trace_id_is_bounded_and_cannot_forge_a_line(broker: str) -> None:
    """Whitespace and control characters become ``?``; past 64 characters the label ends in …."""
    hostile = "evil\nINFO forged\x1b[31m" + "x" * 100
    snapshot = make_snapshot(hostile)
    with Producer(broker) as producer:
        producer.enqueue(snapshot)
    (headers,) = _headers(broker, Lane.LIVE)
    shown = trace_label(hostile)
    assert headers["argsrepr"] == f"[snapshot {snapshot.snapshot_id[:16]} trace {shown}]"
    assert shown.startswith("evil?INFO?forged?[31m")
    assert len(shown) == TRACE_LABEL_CHARS + 1
    assert shown.endswith("…")
    assert "\n" not in headers["argsrepr"]
    assert "\x1b" not in headers["argsrepr"]
