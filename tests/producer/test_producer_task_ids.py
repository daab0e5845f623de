"""Task ids of a producer's messages: UUID-shaped, distinct, cheap; the origin as Celery has it."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
import redis
from celery.utils.nodenames import anon_nodename

from producer import LANE_QUEUES, Lane, Producer
from producer._publishing import TaskIds
from tests.producer.producer_kit import make_snapshot
from worker.embedded import RedisServer


def test_task_ids_are_version_4_uuids_and_distinct() -> None:
    """Every id parses as a version-4 UUID and none repeats within one source."""
    ids = TaskIds()
    taken = [ids.next_id() for _ in range(10_000)]
    assert len(set(taken)) == len(taken)
    assert {uuid.UUID(t).version for t in taken} == {4}
    assert all(str(uuid.UUID(t)) == t for t in taken[:100])


def test_two_sources_share_no_id() -> None:
    """Two producers draw ids from different random prefixes."""
    first, second = TaskIds(), TaskIds()
    assert {first.next_id() for _ in range(1000)}.isdisjoint(second.next_id() for _ in range(1000))


def test_the_counter_wraps_within_48_bits() -> None:
    """An id past 2**48 messages keeps its 36 characters (the counter wraps, the prefix stays)."""
    ids = TaskIds()
    ids._counter = iter([2**48 + 5])  # type: ignore[assignment]  # the counter is private
    taken = ids.next_id()
    assert len(taken) == 36
    assert taken.endswith("000000000005")


def test_the_origin_is_celerys_anonymous_node_name() -> None:
    """The origin equals Celery's anon_nodename() for this process."""
    assert TaskIds().origin == anon_nodename()


@pytest.mark.services
def test_bulk_messages_carry_distinct_ids_and_the_origin(private_redis: RedisServer) -> None:
    """send_many's messages on Redis each have their own task id and this process's origin."""
    snapshots = [make_snapshot(f"trace-{n}") for n in range(12)]
    with Producer(private_redis.url) as producer:
        producer.send_many(snapshots, lane=Lane.BACKFILL, batch_size=3)
    client = redis.Redis.from_url(private_redis.url)
    try:
        raw = client.lrange(LANE_QUEUES[Lane.BACKFILL], 0, -1)
    finally:
        client.close()
    headers = [json.loads(m)["headers"] for m in raw]
    assert len(headers) == 4
    assert len({h["id"] for h in headers}) == 4
    assert {h["origin"] for h in headers} == {anon_nodename()}
    bodies = [json.loads(base64.b64decode(json.loads(m)["body"])) for m in raw]
    assert sum(len(b[0][0]) for b in bodies) == 12
