"""Settling delivered messages: acks in groups, requeues, forgetting a dead-lettered poison item.

On kombu's Redis channels an ack is a round trip (``ZREM unacked_index`` + ``HDEL unacked``);
:func:`ack_all` sends the acks of every message settled at once in one pipeline, then frees
their prefetch slots. Elsewhere (RabbitMQ) each message is acked as kombu does it. A channel
retired after a lost connection acks nothing (its messages are redelivered; see ``_qos``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import redis
from kombu.message import Message
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from ._reliable_fetch import Channel as ReliableChannel

__all__ = ["ack_all", "forget", "renew", "requeue", "sweep"]

_log = logging.getLogger(__name__)


def ack_all(messages: Sequence[Message]) -> None:
    """Ack ``messages`` (one round trip per Redis channel); never raises for a lost broker."""
    by_channel: dict[int, list[Message]] = {}
    for message in messages:
        if not message.acknowledged:
            by_channel.setdefault(id(message.channel), []).append(message)
    for group in by_channel.values():
        channel = group[0].channel
        if getattr(channel, "evalq_retired", False):
            continue  # redelivered after the visibility timeout; the store makes it harmless
        qos = getattr(channel, "qos", None)
        if isinstance(qos, kombu_redis.QoS):
            _ack_redis(qos, group)
        else:
            for message in group:
                _ack_one(message)


def _ack_redis(qos: Any, group: list[Message]) -> None:
    try:
        with qos.pipe_or_acquire() as pipe:
            for message in group:
                qos._remove_from_indices(message.delivery_tag, pipe)
            pipe.execute()
    except (redis.exceptions.RedisError, OSError) as exc:
        # Still in Redis's unacked hash: restored after the visibility timeout, then found done.
        _log.warning(
            "acks not written (%s); %d message(s) will be redelivered",
            type(exc).__name__,
            len(group),
        )
    for message in group:
        if message.delivery_tag is not None:
            virtual.QoS.ack(qos, message.delivery_tag)  # free the prefetch slot either way


def _ack_one(message: Message) -> None:
    try:
        message.ack()
    except Exception as exc:  # noqa: BLE001 - a lost connection redelivers the message
        _log.warning("ack not sent (%s); the message will be redelivered", type(exc).__name__)


def requeue(message: Message) -> None:
    """Give ``message`` back to the broker (the store could not record it)."""
    if getattr(message.channel, "evalq_retired", False) or message.acknowledged:
        return
    try:
        message.reject(requeue=True)
    except Exception as exc:  # noqa: BLE001 - a lost connection redelivers the message
        _log.warning("requeue not sent (%s); the message will be redelivered", type(exc).__name__)


def forget(connection: Any, tag: str) -> None:
    """Drop the ``unacked`` entry of a poison item the fetch registered (now a dead letter)."""
    channel = connection.default_channel
    if isinstance(channel, ReliableChannel):
        try:
            channel.forget(tag)
        except (redis.exceptions.RedisError, OSError) as exc:
            _log.warning("poison entry not forgotten (%s)", type(exc).__name__)


def renew(messages: Sequence[Message]) -> None:
    """Renew the visibility lease of messages still being worked on (Redis; elsewhere a no-op).

    kombu's restore sweep redelivers an ``unacked`` entry whose ``unacked_index`` score is older
    than the visibility timeout. A worker holding a long batch moves the score of each message
    it holds to now (``ZADD XX``: only entries still there), one round trip per channel, so the
    timeout bounds how long a *dead* worker's messages wait, not how long a batch may take.
    """
    by_channel: dict[int, list[Message]] = {}
    for message in messages:
        if not message.acknowledged and message.delivery_tag is not None:
            by_channel.setdefault(id(message.channel), []).append(message)
    now = time.time()
    for group in by_channel.values():
        qos = getattr(group[0].channel, "qos", None)
        if getattr(group[0].channel, "evalq_retired", False) or not isinstance(
            qos, kombu_redis.QoS
        ):
            continue
        try:
            with qos.pipe_or_acquire() as pipe:
                pipe.zadd(qos.unacked_index_key, {m.delivery_tag: now for m in group}, xx=True)
                pipe.execute()
        except (redis.exceptions.RedisError, OSError) as exc:
            _log.warning("leases not renewed (%s)", type(exc).__name__)


def sweep(connection: Any) -> None:
    """Restore visibility-timed-out ``unacked`` entries through the connection's live channel.

    kombu's own sweep runs on the poller's first channel with queues, which after a Redis
    restart could still be the dead channel of the lost connection: then nothing restored the
    messages a killed fetch had registered (the fault suite found 64 left in ``unacked`` for
    minutes). This sweep runs beside the lease renewal on the current channel (kombu's mutex
    keeps concurrent sweeps apart); RabbitMQ has no such entries.
    """
    channel = getattr(connection, "default_channel", None) if connection is not None else None
    qos = getattr(channel, "qos", None)
    if not isinstance(qos, kombu_redis.QoS) or getattr(channel, "evalq_retired", False):
        return
    try:
        qos.restore_visible(num=1000, interval=1)
    except (redis.exceptions.RedisError, OSError) as exc:
        _log.warning("unacked sweep failed (%s)", type(exc).__name__)
