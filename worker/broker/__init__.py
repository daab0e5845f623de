"""Everything broker-specific, in one place: Redis's reliable fetch, kombu patches, transport
options and acks (which lane a queue serves is the contract's: :mod:`producer.topology`).

- :mod:`._reliable_fetch`: on ``redis://`` a fetch pops up to the free prefetch slots' worth of
  messages and registers each in kombu's ``unacked`` hash in one atomic Lua step (nothing is
  lost in transit), live lane first.
- :mod:`._qos`: kombu patches for broker trouble (``BRPOP`` transports, lost connections).
- :mod:`._acks`: acks in groups (one Redis round trip for everything settled at once).
- :mod:`._options`: broker URLs and transport options.
- :mod:`._layout`: kombu's Redis key layout (queue lists, ``unacked``), written down once.
- :mod:`._held`: the bytes of message bodies a process holds; the reliable fetch stops at its
  budget, and where a fetch has no byte bound (RabbitMQ) the prefetch count is sized to it
  (:func:`size_prefetch`).

Nothing outside this package knows kombu's Redis key layout or transport internals.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from ._acks import ack_all, forget, renew, requeue, sweep
from ._held import MIB, HeldBytes
from ._layout import PRIORITY_SEP, PRIORITY_STEPS, UNACKED_INDEX_KEY, UNACKED_KEY, queue_keys
from ._options import SWEEP_MUTEX_S, broker_transport_options, is_redis, transport_setting
from ._qos import DeliveredAnyway, protect_deliveries, retire
from ._reliable_fetch import Channel as ReliableChannel
from ._reliable_fetch import QoS as _ReliableQoS

__all__ = [
    "MIB",
    "PRIORITY_SEP",
    "PRIORITY_STEPS",
    "SWEEP_MUTEX_S",
    "UNACKED_INDEX_KEY",
    "UNACKED_KEY",
    "DeliveredAnyway",
    "HeldBytes",
    "ReliableChannel",
    "ack_all",
    "broker_transport_options",
    "forget",
    "is_redis",
    "protect",
    "protect_deliveries",
    "queue_keys",
    "renew",
    "requeue",
    "retire",
    "size_prefetch",
    "sweep",
    "transport_setting",
]


_PREFETCH_MAX = 0xFFFF
"""The largest prefetch count AMQP can say (a 16-bit field; kombu caps at the same)."""


def protect(
    connection: Any,
    on_poison: Callable[[str, bytes, str | None], None] | None,
    held: HeldBytes | None = None,
) -> None:
    """Install the delivery protections on ``connection``'s consuming channel.

    ``on_poison`` receives the list items the reliable fetch could not hand to kombu; ``held``
    is the consumer's count of the body bytes it holds, which bounds the reliable fetch.
    """
    protect_deliveries(connection)
    channel = connection.default_channel
    if isinstance(channel, ReliableChannel):
        channel.on_poison = on_poison
        cast(_ReliableQoS, channel.qos).held = held
    elif held is not None:
        held.sizes_prefetch = True  # no byte bound in the fetch: size the prefetch count


def size_prefetch(consumer: Any, held: HeldBytes, *, now: bool = False) -> None:
    """Set the consumer's prefetch to ``held``'s size (where it sizes it; see :mod:`._held`).

    Celery's consumer loop applies a changed value before its next poll; ``now`` applies it at
    once (before the consumer starts consuming, so the first push is one message).
    """
    if not held.sizes_prefetch:  # the reliable fetch bounds bytes itself: nothing per message
        return
    qos = getattr(consumer, "qos", None)
    if qos is None:
        return
    wanted = held.prefetch(int(consumer.initial_prefetch_count or 0) or _PREFETCH_MAX)
    if qos.value != wanted:
        qos.value = wanted
        if now:
            qos.update()
