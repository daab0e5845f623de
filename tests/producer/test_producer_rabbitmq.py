"""`Producer` on a real RabbitMQ: sends are confirmed; a deleted lane queue is declared again."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kombu import Connection, Queue

from producer import Lane, Producer, Snapshot
from producer._confirms import UnroutableError, confirming, note_return, returned
from producer._submitter import RetryPolicy
from producer.topology import LANE_QUEUES
from tests.producer.producer_kit import make_snapshot
from tests.queue.queue_kit import purge_lane_queues

pytestmark = pytest.mark.services

_Send = Callable[[Producer, Snapshot], None]


def _enqueue(producer: Producer, snapshot: Snapshot) -> None:
    producer.enqueue(snapshot, lane=Lane.LIVE)


def _send_many(producer: Producer, snapshot: Snapshot) -> None:
    producer.send_many([snapshot, make_snapshot(f"{snapshot.trace_id}-b")], lane=Lane.LIVE)


def _submit(producer: Producer, snapshot: Snapshot) -> None:
    assert producer.submit(snapshot)
    assert producer.flush(timeout_s=10)
    stats = producer.live_stats()
    assert stats is not None
    assert stats.dropped_failed == 0


@pytest.fixture
def rabbitmq(amqp_url: str) -> Iterator[str]:
    """The shared RabbitMQ with empty lane queues (emptied again after the test)."""
    purge_lane_queues(amqp_url)
    yield amqp_url
    purge_lane_queues(amqp_url)


def _depth(url: str, queue: str) -> int:
    with Connection(url, connect_timeout=5) as conn:
        return int(conn.default_channel.queue_declare(queue, passive=True).message_count)


def _delete(url: str, queue: str) -> None:
    with Connection(url, connect_timeout=5) as conn:
        conn.default_channel.queue_delete(queue)


@pytest.mark.parametrize("send", [_enqueue, _send_many, _submit], ids=["enqueue", "bulk", "live"])
def test_a_send_after_its_lane_queue_was_deleted_declares_it_again(
    rabbitmq: str, send: _Send
) -> None:
    """A lane queue deleted while a producer runs is declared again by the next send, which
    lands in it: kombu's memory of the first declaration no longer drops it as unroutable."""
    live = LANE_QUEUES[Lane.LIVE]
    with Producer(rabbitmq) as producer:
        send(producer, make_snapshot("before"))
        _delete(rabbitmq, live)
        send(producer, make_snapshot("after"))
        expected = 2 if send is _send_many else 1
        assert _depth(rabbitmq, live) == expected


def test_a_live_publish_the_broker_refuses_is_counted_dropped_not_sent(rabbitmq: str) -> None:
    """A live publish RabbitMQ nacks (the live queue replaced, after the producer declared it,
    by a full one that rejects publishes) ends as ``dropped_failed``, never counted as sent."""
    live = LANE_QUEUES[Lane.LIVE]
    full = Queue(live, queue_arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    once = RetryPolicy(attempts=1, timeout_s=5.0)
    with Producer(rabbitmq, live_retry=once) as producer:
        _submit(producer, make_snapshot("accepted"))
        _delete(rabbitmq, live)
        with Connection(rabbitmq, connect_timeout=5) as conn:
            full(conn.default_channel).declare()
        try:
            assert producer.submit(make_snapshot("refused"))
            assert producer.flush(timeout_s=10)
            stats = producer.live_stats()
            assert stats is not None
            assert (stats.sent, stats.dropped_failed) == (1, 1)
        finally:
            _delete(rabbitmq, live)  # the fixture declares the real one again


def test_only_amqp_brokers_confirm(redis_url: str, amqp_broker: str) -> None:
    """Confirms and returns are RabbitMQ's (kombu's AMQP transports); Redis publishes plainly."""
    assert confirming(amqp_broker)
    assert not confirming(redis_url)


class _Returned:
    properties = {"correlation_id": "task-1"}  # noqa: RUF012 - mirrors py-amqp's message


def test_a_returned_task_id_is_reported_once() -> None:
    """A returned message's task id is reported by `returned` once, then forgotten."""
    note_return(UnroutableError("x"), "evalq", "evalq.live", _Returned())
    assert not returned("task-2")
    assert returned("task-1")
    assert not returned("task-1")
