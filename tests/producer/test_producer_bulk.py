"""The bulk publish paths declare each queue once per send and still deliver every message."""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import amqp.exceptions
import kombu
import pytest
import redis

from producer import LANE_QUEUES, Lane, Producer
from producer.snapshot import Sampling, Snapshot
from tests.producer.producer_kit import make_snapshot
from worker.embedded import RedisServer

pytestmark = pytest.mark.services


def _on(lane: Lane, trace_id: str) -> Snapshot:
    return make_snapshot(trace_id).model_copy(update={"sampling": Sampling(lane=lane)})


def _lengths(url: str) -> dict[Lane, int]:
    client = redis.Redis.from_url(url)
    try:
        return {lane: int(client.llen(LANE_QUEUES[lane])) for lane in (Lane.LIVE, Lane.BACKFILL)}
    finally:
        client.close()


def test_a_bulk_send_to_a_fresh_broker_reaches_every_lane_of_its_snapshots(
    private_redis: RedisServer,
) -> None:
    """send_many with mixed lanes on an empty Redis: each message lands in its own lane's queue."""
    mixed = [_on(Lane.LIVE if n % 3 == 0 else Lane.BACKFILL, f"trace-{n}") for n in range(12)]
    with Producer(private_redis.url) as producer:
        assert producer.send_many(mixed) == 12
    assert _lengths(private_redis.url) == {Lane.LIVE: 4, Lane.BACKFILL: 8}


def _amqp_counts(url: str, *, delete: bool) -> dict[Lane, int]:
    """Messages in the live and backfill queues (0 when absent); ``delete``: drop them after."""
    counts: dict[Lane, int] = {}
    with kombu.Connection(url) as connection:
        for lane in (Lane.LIVE, Lane.BACKFILL):
            channel: Any = connection.channel()  # py-amqp Channel (kombu types it abstractly)
            try:
                counts[lane] = channel.queue_declare(LANE_QUEUES[lane], passive=True).message_count
                if delete:
                    channel.queue_delete(LANE_QUEUES[lane])
            except amqp.exceptions.NotFound:
                counts[lane] = 0  # the broker closed this channel
            finally:
                with contextlib.suppress(Exception):
                    channel.close()
    return counts


def test_a_bulk_send_declares_the_queues_rabbitmq_would_drop_messages_for(amqp_url: str) -> None:
    """On RabbitMQ a publish to an undeclared queue is dropped: the bulk path declares first."""
    _amqp_counts(amqp_url, delete=True)  # no lane queue exists now
    # kombu's connection pools are process-wide, and a connection remembers the queues declared
    # on it: another test's producer in this process would make the deleted queues look declared.
    kombu.pools.reset()
    mixed = [_on(Lane.LIVE if n % 3 == 0 else Lane.BACKFILL, f"trace-{n}") for n in range(6)]
    with Producer(amqp_url) as producer:
        assert producer.send_many(mixed, batch_size=1) == 6
    assert _amqp_counts(amqp_url, delete=True) == {Lane.LIVE: 2, Lane.BACKFILL: 4}


def _sent_events(url: str, send: Callable[[Producer], None]) -> list[str]:
    """The task ids of the task-sent events published while ``send`` runs (Redis fanout)."""
    client = redis.Redis.from_url(url)
    make_pubsub: Any = client.pubsub  # untyped in redis-py
    pubsub = make_pubsub(ignore_subscribe_messages=True)
    pubsub.psubscribe("*celeryev*")
    try:
        with Producer(url) as producer:
            send(producer)
        ids: list[str] = []
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:  # bounded: events arrive within milliseconds
            message = pubsub.get_message(timeout=0.1)
            if message is not None and message["channel"].endswith(b"task.sent"):
                body = json.loads(base64.b64decode(json.loads(message["data"])["body"]))
                ids.append(body["uuid"])
        return ids
    finally:
        pubsub.close()
        client.close()


def test_only_single_sends_publish_task_sent_events(private_redis: RedisServer) -> None:
    """enqueue sends Flower a task-sent event; send_many and enqueue_many (bulk) send none."""
    one, two, three = (_on(Lane.BACKFILL, f"trace-{n}") for n in range(3))

    def send(producer: Producer) -> None:
        producer.enqueue(one)
        producer.send_many([two], batch_size=1)
        producer.enqueue_many([three], batch_size=1)

    assert len(_sent_events(private_redis.url, send)) == 1
