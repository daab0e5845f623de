"""Publishing to RabbitMQ without losing a message: publisher confirms and mandatory routing.

Without them, a publish to RabbitMQ returns as soon as the frame is written: a message the
broker then refuses (a full queue that rejects publishes, a broker going down) or cannot route
is dropped with no error at the producer. Two cases matter to evalq:

- **confirms** (kombu's ``confirm_publish`` transport option): each publish waits for the
  broker's ack, so a send that returned is the broker's (a nack raises
  ``amqp.exceptions.MessageNacked``). A ``evalq backfill`` checkpoint, written after its sends,
  then never covers a snapshot the broker did not take.
- **mandatory routing**: kombu remembers the queues a connection declared, so a lane queue
  deleted while a producer runs is never declared again and every later publish to it is
  unroutable, which RabbitMQ drops silently. Published as *mandatory*, such a message comes back
  (``basic.return``, before the confirm); :func:`note_return` records it and the producer
  declares the queue again and sends once more (:class:`UnroutableError` if it comes back again).

Redis has neither (a publish is a reply-checked ``LPUSH``); there, nothing here applies.
Cost on RabbitMQ (``docs/queue.md``): each publish waits a round trip.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from kombu import Connection

__all__ = [
    "UnroutableError",
    "confirming",
    "note_return",
    "returned",
    "watch_returns",
    "with_confirms",
]


class UnroutableError(RuntimeError):
    """RabbitMQ returned a message twice: its lane queue is missing even after declaring it."""


def confirming(broker_url: str) -> bool:
    """True where publishes can be confirmed and returned: kombu's AMQP transports (RabbitMQ)."""
    return bool(Connection(broker_url).transport.driver_type == "amqp")


def with_confirms(broker_url: str, transport_options: Mapping[str, Any]) -> dict[str, Any]:
    """``transport_options`` with publisher confirms turned on where the broker has them."""
    if not confirming(broker_url):
        return dict(transport_options)
    return {**transport_options, "confirm_publish": True}


_returns = threading.local()  # py-amqp runs the handler in the thread waiting for the confirm


def note_return(_exc: Exception, _exchange: str, _routing_key: str, message: Any) -> None:
    """``basic_return`` handler: remember the task id (Celery's correlation id) of the message."""
    ids: set[str] | None = getattr(_returns, "ids", None)
    if ids is None:
        ids = _returns.ids = set()
    ids.add(str(message.properties.get("correlation_id")))


def watch_returns(channel: Any) -> None:
    """Route this channel's returned messages to :func:`note_return` (a set: added once)."""
    channel.events["basic_return"].add(note_return)


def returned(task_id: str) -> bool:
    """Whether the broker returned the message ``task_id`` (and forget it)."""
    ids: set[str] | None = getattr(_returns, "ids", None)
    if not ids or task_id not in ids:
        return False
    ids.discard(task_id)
    return True
