"""Publisher confirms and returned messages on RabbitMQ, streamed: publish many, wait once.

Without confirms a publish to RabbitMQ returns as soon as its frame is written: a message the
broker then refuses (a queue at its length limit rejecting publishes) or cannot route (a lane
queue deleted after this connection declared it: kombu remembers declarations and never
declares it again) is dropped with no error anywhere. :class:`Confirms` puts a channel in
confirm mode, numbers each publish as the broker does (1, 2, ... from ``confirm.select``) and
:meth:`Confirms.wait` drains the connection until every publish is acked, reporting the task
ids (Celery's correlation ids) the broker nacked or returned (``basic.return`` comes before the
message's ack, so a finished wait has seen every return).

Why not kombu's ``confirm_publish`` transport option: it waits a round trip after *every*
publish, and RabbitMQ acks a persistent message once it is on disk, so one producer's
``submit`` path fell from 1,901-2,166 to 598-669 snapshots/s and a backfill (8 per message)
from 11,912-14,511 to 4,514-4,886; streamed, they read 1,527-1,687 and 11,341-12,593
(``docs/queue.md``). py-amqp has no streamed form; this is it.

Redis has neither confirms nor returns (a publish is an ``LPUSH`` whose reply is read):
``Broker.confirms`` (:mod:`producer._broker`) is False there and nothing here runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._broker import BrokerError, BrokerFailure

__all__ = ["Confirms", "Settled"]


@dataclass(frozen=True, slots=True)
class Settled:
    """What the broker said of the publishes one :meth:`Confirms.wait` covered (task ids)."""

    nacked: frozenset[str]
    returned: frozenset[str]


_ATTRIBUTE = "_evalq_confirms"


class Confirms:
    """Confirm mode on one py-amqp channel (kombu's ``pyamqp`` channel), kept on the channel."""

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        channel.confirm_select()
        self._tag = 0
        self._pending: dict[int, str] = {}  # delivery tag -> task id ("" for Celery's events)
        self._nacked: set[str] = set()
        self._returned: set[str] = set()
        self._plain_publish: Callable[..., Any] = channel.basic_publish
        channel.basic_publish = self._publish  # as py-amqp itself swaps in its confirm variant
        channel.events["basic_ack"].add(self._on_ack)
        channel.events["basic_nack"].add(self._on_nack)
        channel.events["basic_return"].add(self._on_return)

    @classmethod
    def on(cls, channel: Any) -> Confirms:
        """The channel's confirms, switched on at its first use (a pooled channel keeps them)."""
        confirms: Confirms | None = getattr(channel, _ATTRIBUTE, None)
        if confirms is None:
            confirms = cls(channel)
            setattr(channel, _ATTRIBUTE, confirms)
        return confirms

    def _publish(self, message: Any, *args: Any, **kwargs: Any) -> Any:
        self._tag += 1
        self._pending[self._tag] = str(message.properties.get("correlation_id") or "")
        return self._plain_publish(message, *args, **kwargs)

    def _settle(self, tag: int, multiple: bool, into: set[str] | None) -> None:
        tags = [t for t in self._pending if t <= tag] if multiple else [tag]
        for t in tags:
            task_id = self._pending.pop(t, "")
            if into is not None and task_id:
                into.add(task_id)

    def _on_ack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, None)

    def _on_nack(self, tag: int, multiple: bool) -> None:
        self._settle(tag, multiple, self._nacked)

    def _on_return(self, _exc: Exception, _exchange: str, _key: str, message: Any) -> None:
        self._returned.add(str(message.properties.get("correlation_id") or ""))

    def wait(self, timeout_s: float) -> Settled:
        """Until every publish so far is acked or nacked (``CONFIRM_TIMEOUT`` past the limit)."""
        deadline = time.monotonic() + timeout_s
        while self._pending:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                raise self._timed_out(timeout_s)
            try:
                self._channel.connection.drain_events(timeout=remaining_s)
            except TimeoutError:  # py-amqp's socket timeout: nothing came in time
                raise self._timed_out(timeout_s) from None
        settled = Settled(frozenset(self._nacked), frozenset(self._returned))
        self._nacked.clear()
        self._returned.clear()
        return settled

    def _timed_out(self, timeout_s: float) -> BrokerError:
        detail = f"{len(self._pending)} publishes after {timeout_s} s"
        return BrokerError(BrokerFailure.CONFIRM_TIMEOUT, detail)
