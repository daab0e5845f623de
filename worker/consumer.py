"""A Celery consumer that dead-letters messages which never reach a task body.

Celery's stock consumer logs such messages (with their full body: snapshot content in our case)
and acks them: the message is gone and only a log line remains. Here each becomes a dead-letter
record in the store (reason code + the raw body, bounded by the store) and is then acked; the
worker keeps serving. Reason codes:

- ``CONTENT_DISALLOWED``: a serializer other than JSON (e.g. pickle) — refused, never decoded;
- ``UNDECODABLE``: the body is not valid for its declared content type (malformed JSON);
- ``UNKNOWN_TASK``: a task name this worker does not serve;
- ``UNKNOWN_MESSAGE``: not a Celery task message at all;
- ``INVALID_MESSAGE``: a task message that breaks the protocol (missing fields). Celery raises
  some of these (a ``task`` header without ``id``: ``KeyError``) out of its message handler,
  where kombu's Redis transport takes a ``KeyError`` for a lost connection: the consumer
  reconnected, the message came back, forever — a poison message stopped the worker (found by
  the property tests). The handler is wrapped so such messages are dead-lettered too.

If the store cannot take the record right now, the message is neither acked nor rejected: it stays
with the broker and comes back (Redis: after the visibility timeout; RabbitMQ: on reconnect), so
nothing is lost and the consumer does not spin on it.

It also survives a kombu 5.7 race on Redis connection loss (found by the fault suite): Celery's
``collect()`` detaches the transport from the connection, and the ``close()`` that follows asks
the half-closed channel to restore its unacked messages, which raises ``AttributeError`` (no
connection parameters left). Celery treats that as an unrecoverable error and the whole worker
exits. The close is best-effort here instead: the unacked messages stay in Redis's ``unacked``
hash and come back after the visibility timeout, and the consumer reconnects as usual. For the
same reason a task that was running when the connection was lost (the threads pool cannot cancel
it, as Celery would) must not ack on the dead channel when it finishes: acks and rejects on that
channel are skipped, the message is redelivered, and the store's idempotency makes the second
delivery write nothing.

On ``redis://`` the worker fetches through :mod:`worker._reliable_fetch`: a message is popped and
recorded as unacked in one atomic step, so neither a worker crash nor a Redis outage can drop it
in transit. Where kombu's ``BRPOP`` still fetches (``rediss://``, ``sentinel://``), kombu records
the popped message in ``unacked`` one round trip later, and if Redis goes away in between it raises
and drops the message. :class:`DeliveredAnyway` covers that half of the window there: it keeps the
message and hands it to the task (only a worker crash before the record is written, during the
same broker outage, could still lose it; the reliable fetch closes both halves).
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery.worker.consumer import Consumer
from kombu.exceptions import ContentDisallowed
from kombu.message import Message
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from producer.snapshot import LANE_QUEUES
from worker import metrics, runtime
from worker.settings import Settings
from worker.store import DeadLetterRecord, StoreError

__all__ = ["DeadLetterConsumer", "DeliveredAnyway", "Reason", "protect_deliveries"]

_log = logging.getLogger(__name__)
_LANE_OF_QUEUE = {queue: lane.value for lane, queue in LANE_QUEUES.items()}


class Reason:
    """Dead-letter reason codes of messages rejected before a task body ran."""

    CONTENT_DISALLOWED = "CONTENT_DISALLOWED"
    UNDECODABLE = "UNDECODABLE"
    UNKNOWN_TASK = "UNKNOWN_TASK"
    UNKNOWN_MESSAGE = "UNKNOWN_MESSAGE"
    INVALID_MESSAGE = "INVALID_MESSAGE"


def _raw_body(message: Message) -> bytes:
    body = message.body
    if isinstance(body, bytes):
        return body
    return str(body).encode("utf-8", "surrogatepass")


def _task_name(message: Message) -> str | None:
    headers = message.headers if isinstance(message.headers, dict) else {}
    name = headers.get("task")
    return name if isinstance(name, str) else None


def _lane(message: Message) -> str | None:
    info = message.delivery_info or {}
    queue = info.get("routing_key") or info.get("queue")
    return _LANE_OF_QUEUE.get(queue) if isinstance(queue, str) else None


def dead_letter(message: Message, reason: str, settings: Settings | None = None) -> bool:
    """Record ``message`` as a dead letter and ack it; False (left as is) if the store failed."""
    record = DeadLetterRecord(
        reason=reason, task=_task_name(message), lane=_lane(message), payload=_raw_body(message)
    )
    try:
        runtime.current(settings).store.record_dead_letter(record)
        metrics.observe_dead_letter(reason, record.lane or metrics.OTHER)
    except StoreError as exc:
        _log.error(
            "dead letter not recorded: %s (%s); message left with the broker", reason, exc.code
        )
        return False
    _log.warning("dead letter: %s (task %s)", reason, record.task or "-")
    message.ack()
    return True


_BROKER_GONE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


class DeliveredAnyway(kombu_redis.QoS):
    """kombu's Redis QoS (``BRPOP`` fetch: ``rediss://``, ``sentinel://``), except that a popped
    message whose ``unacked`` entry cannot be written (the broker just went away) is still
    delivered instead of dropped (see the module)."""

    def append(self, message: Message, delivery_tag: Any) -> None:
        """Record the delivery in Redis; if Redis is unreachable, keep it locally and go on."""
        try:
            super().append(message, delivery_tag)
        except _BROKER_GONE as exc:
            _log.warning(
                "broker unreachable right after a delivery (%s); processing the message anyway",
                type(exc).__name__,
            )
            virtual.QoS.append(self, message, delivery_tag)


def protect_deliveries(connection: Any) -> None:
    """Install :class:`DeliveredAnyway` on ``connection``'s consuming channel (kombu's ``BRPOP``
    fetch only: the reliable fetch's QoS, and amqp channels, are left as they are)."""
    qos = getattr(connection.default_channel, "qos", None)  # amqp channels have none
    if type(qos) is kombu_redis.QoS:
        qos.__class__ = DeliveredAnyway


def _skipped(kind: str) -> Any:
    def skip(*_: Any, **__: Any) -> None:
        _log.info("%s on a lost broker connection skipped; the message is redelivered", kind)

    return skip


def _retire(connection: Any, channels: list[Any]) -> None:
    """Make a lost connection safe to abandon (see the module docstring).

    Late acks and rejects on its channels become no-ops (the message stays with the broker and is
    redelivered), and ``close()`` swallows kombu's ``AttributeError`` on a half-closed channel.
    """
    for channel in {id(c): c for c in channels if c is not None}.values():
        channel.basic_ack = _skipped("ack")
        channel.basic_reject = _skipped("reject")
    close = connection.close

    def close_quietly() -> None:
        try:
            close()
        except AttributeError as exc:
            _log.warning(
                "broker connection cleanup failed (%s); unacked messages return after the "
                "visibility timeout",
                type(exc).__name__,
            )

    connection.close = close_quietly


_MALFORMED = (KeyError, TypeError, ValueError, AttributeError, IndexError)
"""What Celery's handler raises on a task message with missing or mistyped protocol fields."""


class DeadLetterConsumer(Consumer):
    """``worker_consumer``: dead-letters undecodable, disallowed, unknown and invalid messages."""

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Any:
        """Celery's handler, with protocol violations it does not catch dead-lettered."""
        handler = super().create_task_handler(*args, **kwargs)

        def on_task_received(message: Message) -> Any:
            try:
                return handler(message)
            except _MALFORMED as exc:
                _log.warning("task message refused (%s)", type(exc).__name__)
                self._dead_letter(message, Reason.INVALID_MESSAGE)
                return None

        return on_task_received

    def connect(self) -> Any:
        """Celery's connect, with :class:`DeliveredAnyway` on the consuming channel."""
        connection = super().connect()
        protect_deliveries(connection)
        return connection

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        """Celery's reconnect path, with the old connection closed best-effort (see module)."""
        if self.connection is not None:
            consumer = getattr(self, "task_consumer", None)
            channels = [
                getattr(self.connection, "_default_channel", None),
                getattr(consumer, "channel", None),
            ]
            _retire(self.connection, channels)
        super().on_connection_error_after_connected(exc)

    def _dead_letter(self, message: Message, reason: str) -> None:
        dead_letter(message, reason, getattr(self.app, "settings", None))

    def on_decode_error(self, message: Message, exc: Exception) -> None:
        """Body could not be decoded (malformed JSON, or a refused content type)."""
        disallowed = isinstance(exc, ContentDisallowed)
        self._dead_letter(message, Reason.CONTENT_DISALLOWED if disallowed else Reason.UNDECODABLE)

    def on_unknown_message(self, body: Any, message: Message) -> None:  # noqa: ARG002 - Celery's signature
        """Not a task message."""
        self._dead_letter(message, Reason.UNKNOWN_MESSAGE)

    def on_unknown_task(self, body: Any, message: Message, exc: Exception) -> None:  # noqa: ARG002
        """A task name nobody registered here."""
        self._dead_letter(message, Reason.UNKNOWN_TASK)

    def on_invalid_task(self, body: Any, message: Message, exc: Exception) -> None:  # noqa: ARG002
        """Protocol violation, or a refused serializer detected while building the request."""
        disallowed = isinstance(exc, ContentDisallowed)
        self._dead_letter(
            message, Reason.CONTENT_DISALLOWED if disallowed else Reason.INVALID_MESSAGE
        )
