"""One send of a producer: task messages over one kombu producer, confirmed on RabbitMQ.

Every path of :class:`~producer.Producer` (``enqueue``, ``send_many``, ``submit``'s batches,
outcomes, tallies, ``evalq redrive``) sends through a :class:`Publisher` opened for that call:
it names each message (:class:`TaskIds`), declares each queue once where the path is bulk, and
on RabbitMQ publishes each message *mandatory* and waits for the broker's confirms
(:mod:`producer._confirms`) every :data:`CONFIRM_WINDOW` messages and when the call ends, so a
send that returned is the broker's. A nack raises :class:`~producer._broker.BrokerError`
(``PUBLISH_REFUSED``); a message returned as unroutable (its lane queue was deleted while the
producer ran) is sent again once its queue is declared again, and
:class:`~producer._broker.UnroutableError` is raised if it comes back again; a window whose
channel kombu replaced (a reconnect inside a publish) is sent again whole on the new channel.

:func:`publishing` opens a call's publisher: it acquires a pooled kombu producer, batches a bulk
call's publishes (kombu's ``Producer.batch``: one Redis round trip per
:data:`PIPELINE_OPERATIONS`), and settles at the end. Every broker call of it, and of
:class:`Publisher`, raises what fails as a :class:`~producer._broker.BrokerError`
(:meth:`Broker.translating <producer._broker.Broker.translating>`); what the caller's own code
raises inside the ``with`` passes through untouched, and unsent publishes are discarded.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

from celery import Celery
from celery.utils.nodenames import anon_nodename

from ._broker import Broker, BrokerError, BrokerFailure, UnroutableError
from ._confirms import Confirms
from .topology import ENQUEUED_AT_HEADER

__all__ = [
    "CONFIRM_TIMEOUT_S",
    "CONFIRM_WINDOW",
    "PIPELINE_OPERATIONS",
    "Message",
    "Publisher",
    "TaskIds",
    "publishing",
]

CONFIRM_WINDOW = 64
"""Messages published before a wait for their confirms (RabbitMQ): RabbitMQ writes those
published together to disk together, so one wait covers them all."""
CONFIRM_TIMEOUT_S = 30.0
"""How long one wait for confirms may take before the send fails (``CONFIRM_TIMEOUT``)."""
PIPELINE_OPERATIONS = 64
"""Publishes a bulk call pipelines per Redis round trip (kombu's ``Producer.batch``)."""


class TaskIds:
    """Task ids and the origin node name of one producer's messages, each cheap to take.

    Celery's default id is a ``uuid4()`` per message (an ``os.urandom`` read: 11% of a bulk
    publish) and its origin an ``anon_nodename()`` per message (5%; docs/concurrency.md, ninth
    and eleventh rounds). Here one random version-4 UUID per producer gives the first 80 bits and
    a counter the last 48: ids stay UUID-shaped, distinct within a producer (2**48 messages)
    and across producers (74 random bits). The origin is computed once per process id.
    """

    def __init__(self) -> None:
        first = str(uuid.uuid4())
        self._prefix = first[:24]  # "xxxxxxxx-xxxx-4xxx-yxxx-": version and variant kept
        self._counter = itertools.count(int(first[24:], 16))  # next() is atomic in CPython
        self._pid = -1
        self._origin = ""

    def next_id(self) -> str:
        """A new task id."""
        return f"{self._prefix}{next(self._counter) & 0xFFFFFFFFFFFF:012x}"

    @property
    def origin(self) -> str:
        """``gen<pid>@<host>``, as Celery writes it (recomputed after a fork)."""
        pid = os.getpid()
        if pid != self._pid:
            self._origin, self._pid = anon_nodename(), pid
        return self._origin


class Message(NamedTuple):
    """One task message: the task's name, its one argument, where it goes, its Flower label."""

    name: str
    payload: Any
    queue: str
    label: str
    serializer: str | None = None


class Publisher:
    """Sends of one call over one kombu ``producer`` (see the module's docstring).

    ``declare_once``: declare each queue at its first message and skip Celery's check on the
    rest (kombu binds a copy of the queue to look it up: 13% of a bulk backfill's publish time).
    """

    def __init__(
        self, app: Celery, producer: Any, ids: TaskIds, *, broker: Broker, declare_once: bool
    ) -> None:
        self._app = app
        self._producer = producer
        self._ids = ids
        self._broker = broker
        self._declared: set[str] | None = set() if declare_once else None
        self._unconfirmed: dict[str, Message] = {}
        self._window_channel: Any = None

    def send(self, message: Message) -> None:
        """Publish ``message`` (on RabbitMQ, confirmed by :meth:`settle` at the latest)."""
        with self._broker.translating():
            self._send(message)

    def settle(self) -> None:
        """Wait for the confirms of everything sent; resend what came back unroutable."""
        with self._broker.translating():
            self._settle()

    def _send(self, message: Message) -> None:
        declared = self._declared
        if declared is not None and message.queue not in declared:
            self._producer.maybe_declare(self._app.amqp.queues[message.queue])
            declared.add(message.queue)
        task_id = self._ids.next_id()
        if not self._broker.confirms:
            self._publish(message, task_id)
            return
        channel = self._producer.channel
        if not self._unconfirmed:
            self._window_channel = channel
        Confirms.on(channel)  # before the publish: it must be numbered
        self._publish(message, task_id, mandatory=True)
        self._unconfirmed[task_id] = message
        if len(self._unconfirmed) >= CONFIRM_WINDOW:
            self._settle()

    def _settle(self) -> None:
        if not self._unconfirmed:
            return
        sent, self._unconfirmed = self._unconfirmed, {}
        channel = self._producer.channel
        if channel is not self._window_channel:
            self._send_again(channel, sent)
        settled = Confirms.on(channel).wait(CONFIRM_TIMEOUT_S)
        refused = settled.nacked & sent.keys()
        if refused:
            detail = f"{len(refused)} of {len(sent)} messages"
            raise BrokerError(BrokerFailure.PUBLISH_REFUSED, detail)
        returned = {t: m for t, m in sent.items() if t in settled.returned}  # in sent order
        if returned:
            self._declare_again(returned)

    def _send_again(self, channel: Any, sent: dict[str, Message]) -> None:
        """kombu reconnected inside a publish (its retry policy): the old channel's confirms
        can no longer come, so the whole window goes again on the new channel (a duplicate is
        harmless: the worker writes a snapshot once). Replaced again meanwhile: the call fails."""
        Confirms.on(channel)
        for task_id, message in sent.items():
            self._publish(message, task_id, mandatory=True)
        if self._producer.channel is not channel:
            raise BrokerError(BrokerFailure.CONNECTION_REPLACED, "twice during one send")
        self._window_channel = channel

    def _declare_again(self, returned: dict[str, Message]) -> None:
        """Declare the queues of ``returned`` (deleted since this connection declared them),
        each once, and send those messages again, waiting once for all their confirms."""
        channel = self._producer.channel
        queues = {message.queue for message in returned.values()}
        for queue in sorted(queues):
            self._app.amqp.queues[queue].bind(channel).declare()
        for task_id, message in returned.items():
            self._publish(message, task_id, mandatory=True)
        settled = Confirms.on(channel).wait(CONFIRM_TIMEOUT_S)
        if settled.nacked & returned.keys():
            detail = f"a message to {', '.join(sorted(queues))}"
            raise BrokerError(BrokerFailure.PUBLISH_REFUSED, detail)
        again = settled.returned & returned.keys()
        if again:
            raise UnroutableError(returned[min(again)].queue)

    def _publish(self, message: Message, task_id: str, **options: Any) -> None:
        if self._declared is not None:
            options["declare"] = []
        self._app.send_task(
            message.name,
            args=(message.payload,),
            queue=message.queue,
            producer=self._producer,
            argsrepr=message.label,
            kwargsrepr="{}",
            headers={ENQUEUED_AT_HEADER: time.time()},
            serializer=message.serializer,
            task_id=task_id,
            origin=self._ids.origin,
            **options,
        )


@contextlib.contextmanager
def publishing(
    app: Celery, ids: TaskIds, broker: Broker, *, bulk: bool = False
) -> Iterator[Publisher]:
    """One call's :class:`Publisher` over a kombu producer from ``app``'s pool.

    ``bulk``: pipelined publishes and each queue declared once. When the ``with`` body returns,
    everything sent is settled (and a bulk call's pipeline flushed); when it raises, what was
    not yet flushed is dropped and the body's exception passes through as it is.
    """
    with contextlib.ExitStack() as stack:
        with broker.translating():
            acquired = stack.enter_context(app.producer_or_acquire())
            if bulk:
                stack.enter_context(acquired.batch(max_size=PIPELINE_OPERATIONS))
        publisher = Publisher(app, acquired, ids, broker=broker, declare_once=bulk)
        yield publisher
        publisher.settle()
        with broker.translating():
            stack.close()
