"""kombu patches that keep deliveries safe across broker trouble.

- :class:`DeliveredAnyway` (kombu's ``BRPOP`` fetch only: ``rediss://``, ``sentinel://``): kombu
  records a popped message in ``unacked`` one round trip later, and if Redis goes away in between
  it raises and drops the message. This QoS keeps the message and delivers it (only a worker crash
  before the record is written, during the same broker outage, could still lose it; the reliable
  fetch of ``redis://`` closes both halves).
- :func:`retire` survives a kombu 5.7 race on Redis connection loss (found by the fault suite):
  Celery's ``collect()`` detaches the transport from the connection, and the ``close()`` that
  follows asks the half-closed channel to restore its unacked messages, which raises
  ``AttributeError``. Celery treats that as unrecoverable and the whole worker exits. The close is
  best-effort instead: the unacked messages stay in Redis's ``unacked`` hash and come back after
  the visibility timeout. Evaluations still running when the connection was lost must not ack on
  the dead channel when they finish: acks and rejects on it are skipped, the message is
  redelivered, and the store's idempotency makes the second delivery write nothing.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from kombu.message import Message
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

__all__ = ["DeliveredAnyway", "protect_deliveries", "retire"]

_log = logging.getLogger(__name__)


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


def retire(connection: Any, channels: list[Any]) -> None:
    """Make a lost connection safe to abandon (see the module docstring).

    Late acks and rejects on its channels become no-ops (the message stays with the broker and is
    redelivered), and ``close()`` swallows kombu's ``AttributeError`` on a half-closed channel.
    """
    for channel in {id(c): c for c in channels if c is not None}.values():
        channel.evalq_retired = True  # ack_all skips it too
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
