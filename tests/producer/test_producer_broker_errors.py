"""A broker call that fails raises the producer's BrokerError with a code, never the library's
exception; what is not the broker's (a caller's input, a bug) passes through as it is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from amqp.exceptions import MessageNacked, PreconditionFailed
from kombu import Connection, Queue
from kombu.exceptions import (  # type: ignore[attr-defined]  # not in the stubs
    BatchPublishError,
    EncodeError,
    OperationalError,
)

from producer import BrokerError, BrokerFailure, Lane, OutcomeEvent, Producer, Snapshot
from producer._backfill import RedisQueueDepth
from producer._broker import Broker
from tests.hostile.hostile_kit import chat_line, evalq, write
from tests.producer.producer_kit import make_snapshot
from worker.embedded import free_port

_REDIS = Broker.of("redis://127.0.0.1:6379/0")  # its traits only: nothing connects


def _flush_failed(cause: Exception) -> BatchPublishError:
    """kombu's error for a Redis pipeline whose flush failed, raised from ``cause``."""
    exc = BatchPublishError("Redis publish batch failed")
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (OperationalError("down"), BrokerFailure.BROKER_UNREACHABLE),
        (ConnectionRefusedError(), BrokerFailure.BROKER_UNREACHABLE),
        (TimeoutError(), BrokerFailure.BROKER_UNREACHABLE),
        (redis.exceptions.ConnectionError(), BrokerFailure.BROKER_UNREACHABLE),
        (redis.exceptions.ResponseError("OOM"), BrokerFailure.BROKER_ERROR),
        (PreconditionFailed("inequivalent arg"), BrokerFailure.BROKER_ERROR),
        (MessageNacked(), BrokerFailure.PUBLISH_REFUSED),
        (_flush_failed(redis.exceptions.ConnectionError()), BrokerFailure.BROKER_UNREACHABLE),
        (_flush_failed(redis.exceptions.ResponseError()), BrokerFailure.BROKER_ERROR),
    ],
)
def test_library_exceptions_become_broker_errors_with_their_code(
    exc: Exception, code: BrokerFailure
) -> None:
    """A library's broker-call failure is a BrokerError with the code it means, raised from it."""
    # A failed Redis pipeline is coded by what made it fail.
    with pytest.raises(BrokerError) as raised, _REDIS.translating():
        raise exc
    assert raised.value.code is code
    assert raised.value.__cause__ is exc


@pytest.mark.parametrize(
    "exc",
    [
        KeyError("a bug"),
        ValueError("bad input"),
        EncodeError("not JSON"),
        BrokerError(BrokerFailure.CONFIRM_TIMEOUT),
    ],
)
def test_what_is_not_the_brokers_passes_through(exc: Exception) -> None:
    """A bug, a bad value, a non-JSON payload or an already translated error passes through."""
    # KeyError is a bug here, though kombu's Redis transport lists it among connection errors.
    with pytest.raises(type(exc)) as raised, _REDIS.translating():
        raise exc
    assert raised.value is exc


@pytest.fixture
def dead_url() -> str:
    """A Redis URL on a loopback port nothing listens on."""
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.fixture
def dead_producer(dead_url: str) -> Iterator[Producer]:
    """A producer whose broker is down and whose kombu gives up on it at once."""
    with Producer(dead_url, transport_options={"max_retries": 1, "interval_start": 0}) as made:
        yield made


def _outcome() -> OutcomeEvent:
    return OutcomeEvent.model_validate(
        {"event_id": "e", "trace_id": "t", "name": "n", "observed_at": "2025-01-02T03:04:05Z"}
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda p: p.check_broker(timeout_s=1),
        lambda p: p.enqueue(make_snapshot("down")),
        lambda p: p.send_many([make_snapshot("down")], lane=Lane.BACKFILL, batch_size=8),
        lambda p: p.outcome(_outcome()),
    ],
    ids=["check_broker", "enqueue", "send_many", "outcome"],
)
def test_an_unreachable_broker_is_broker_unreachable_on_every_path(
    dead_producer: Producer, call: object
) -> None:
    """Every call to a down broker raises BROKER_UNREACHABLE, caused by the library's exception."""
    with pytest.raises(BrokerError) as raised:
        call(dead_producer)  # type: ignore[operator]
    assert raised.value.code is BrokerFailure.BROKER_UNREACHABLE
    assert raised.value.__cause__ is not None


def test_a_queue_depth_read_from_a_dead_redis_is_broker_unreachable(dead_url: str) -> None:
    """The backfill's back-pressure reading a queue's depth translates redis-py's error too."""
    depth = RedisQueueDepth(dead_url, "evalq.backfill")
    try:
        with pytest.raises(BrokerError) as raised:
            depth()
    finally:
        depth.close()
    assert raised.value.code is BrokerFailure.BROKER_UNREACHABLE


@pytest.mark.services
def test_an_input_error_during_a_bulk_send_stays_the_callers(redis_url: str) -> None:
    """An OSError from the caller's input in a bulk send stays that OSError, not a BrokerError."""
    lost = OSError("the input file went away")

    def snapshots() -> Iterator[Snapshot]:
        yield make_snapshot("buffered")
        raise lost

    with Producer(redis_url) as producer, pytest.raises(OSError, match="went away") as raised:
        producer.send_many(snapshots(), lane=Lane.BACKFILL, batch_size=1)
    assert raised.value is lost


@pytest.mark.services
def test_enqueue_into_a_lane_queue_the_broker_refuses_is_one_line(
    amqp_url: str, tmp_path: Path
) -> None:
    """``evalq enqueue`` the broker refuses: one BROKER_ERROR line, exit 1, no traceback, no URL."""
    # Refused: the lane queue was declared on RabbitMQ with other arguments than the producer's.
    queue = "evalq.live"
    with Connection(amqp_url, connect_timeout=5) as conn:
        conn.default_channel.queue_delete(queue)  # type: ignore[attr-defined]
        Queue(queue, queue_arguments={"x-max-length": 5})(conn.default_channel).declare()
    try:
        path = write(tmp_path / "t.jsonl", chat_line(1))
        env = {"broker_url": amqp_url, "store_url": f"sqlite:///{tmp_path / 'e.db'}"}
        done = evalq(env, "enqueue", str(path), "--lane", "live")
    finally:
        with Connection(amqp_url, connect_timeout=5) as conn:
            conn.default_channel.queue_delete(queue)  # type: ignore[attr-defined]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert lines == ["broker failed (EVALQ_BROKER_URL): BROKER_ERROR"], done.stderr
    assert amqp_url not in done.stderr
