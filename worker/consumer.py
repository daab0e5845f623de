"""The Celery edge of the message path: kombu messages in, :mod:`worker.handling` verdicts out.

Celery's consumer keeps doing what it does well: the broker connection and its recovery, prefetch
(QoS: at most ``concurrency`` unacked messages per process), heartbeats, remote control
(``celery inspect``/``control``) and task events for Flower. What it does per message is replaced:
instead of a request object, a strategy and a pool slot per message, :class:`EvalqConsumer` hands
each raw kombu message to an :class:`Intake`, which moves every message waiting at that instant to
the runtime's event loop in one hop (a micro-batch: what one fetch returned). There each message is
read into a :class:`~worker.handling.Delivery` and handled; when its verdict is known (its records
committed), the message is acked (or requeued) back on the consumer's thread, many at once: on the
reliable-fetch Redis channel one round trip acks a whole group (:func:`worker.broker.ack_all`).

Reading a message refuses, as dead letters with the raw body (never decoded content in logs):
a body kombu cannot decode (``UNDECODABLE``) or may not (``CONTENT_DISALLOWED``: pickle), a
message without Celery's protocol-2 headers (``UNKNOWN_MESSAGE``) or with broken ones
(``INVALID_MESSAGE``), a task name evalq does not serve — Celery's built-ins included
(``UNKNOWN_TASK``) —, an ``eta``/``countdown`` (``SCHEDULED``: evalq evaluates what arrives) and a
passed ``expires`` (``EXPIRED``). A list item that is not a kombu envelope at all never reaches
kombu's consumer: the reliable fetch hands its raw bytes here (``on_poison``), it is
dead-lettered, and then its ``unacked`` entry is forgotten.

A worker that serves the live lane beside others gives the live lane a runtime of its own (its own
loop thread, judge client, store connections and slots): :class:`Intakes` routes each message to
the intake of its lane. On one loop a live snapshot's every step (hand-over, skip-if-done answer,
judge reply, commit) waited behind the ready callbacks of a saturating backfill; a loop lagging
120 ms at P95 made that ~500 ms submit → recorded (docs/concurrency.md, "Live beside backfill").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

from celery.worker.consumer import Consumer
from kombu.exceptions import ContentDisallowed, DecodeError
from kombu.message import Message

from producer.topology import ENQUEUED_AT_HEADER, TASK_NAMES, Lane, lane_of_queue
from worker import broker, metrics
from worker.dead_letters import DeadLetterCode
from worker.handling import Delivery, Handler, Verdict

__all__ = ["DRAIN_CHUNK", "TASK_NAMES", "EvalqConsumer", "Intake", "Intakes", "delivery_of"]

_log = logging.getLogger(__name__)
DRAIN_CHUNK = 16
"""Messages the intake hands to the handler per loop iteration (one micro-batch)."""


def _raw_body(message: Message) -> bytes:
    body = message.body
    if isinstance(body, bytes):
        return body
    return str(body).encode("utf-8", "surrogatepass")


def _body_size(message: Message) -> int:
    """The length of a message's body as kombu holds it (bytes, or characters of a str)."""
    body: Any = message.body
    return len(body) if body is not None else 0


def _refused(message: Message, code: DeadLetterCode, task: str | None = None) -> Delivery:
    lane = lane_of_queue(_queue(message))
    return Delivery.refusal(code, _raw_body(message), task=task, lane=lane)


def _queue(message: Message) -> Any:
    info = message.delivery_info if isinstance(message.delivery_info, Mapping) else {}
    return info.get("routing_key") or info.get("queue")


def _expired(expires: Any) -> bool:
    """True if ``expires`` (ISO time or unix seconds) has passed; ValueError if unreadable."""
    if isinstance(expires, int | float) and not isinstance(expires, bool):
        return float(expires) < time.time()
    if not isinstance(expires, str):
        raise TypeError("expires")
    when = datetime.fromisoformat(expires)
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    return when < datetime.now(UTC)


def _enqueued_at(headers: Mapping[str, Any]) -> float | None:
    stamp = headers.get(ENQUEUED_AT_HEADER)
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return float(stamp)
    return None


def _message_id(headers: Mapping[str, Any]) -> str | None:
    """Protocol 2's task id: the same on every redelivery of one published message."""
    task_id = headers.get("id")
    return task_id if isinstance(task_id, str) and task_id.strip() else None


def _arguments(message: Message) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Protocol 2's ``[args, kwargs, embed]`` body (ValueError if it is not that shape)."""
    body = message.decode()
    if not isinstance(body, list | tuple) or len(body) != 3:
        raise ValueError("body")
    args, kwargs, _ = body
    if not isinstance(args, list | tuple) or not isinstance(kwargs, dict):
        raise TypeError("arguments")
    return tuple(args), kwargs


def delivery_of(message: Message) -> Delivery:
    """Read one kombu message into a :class:`Delivery` (a refusal when it cannot be handled)."""
    headers = message.headers
    if not isinstance(headers, Mapping) or "task" not in headers:
        return _refused(message, DeadLetterCode.UNKNOWN_MESSAGE)
    task = headers.get("task")
    if not isinstance(task, str) or task not in TASK_NAMES:
        return _refused(
            message, DeadLetterCode.UNKNOWN_TASK, task if isinstance(task, str) else None
        )
    try:
        code = _schedule_code(headers)
        if code is not None:
            return _refused(message, code, task)
        args, kwargs = _arguments(message)
    except ContentDisallowed:
        return _refused(message, DeadLetterCode.CONTENT_DISALLOWED, task)
    except (DecodeError, ValueError, TypeError, KeyError, UnicodeDecodeError):
        undecodable = _undecodable(message)
        code = DeadLetterCode.UNDECODABLE if undecodable else DeadLetterCode.INVALID_MESSAGE
        return _refused(message, code, task)
    lane = lane_of_queue(_queue(message))
    raw = _raw_body(message)
    return Delivery(
        task, args, kwargs, lane, raw, _enqueued_at(headers), message_id=_message_id(headers)
    )


def _schedule_code(headers: Mapping[str, Any]) -> DeadLetterCode | None:
    """SCHEDULED for an ``eta``, EXPIRED for a passed ``expires`` (ValueError if unreadable)."""
    if headers.get("eta") is not None:
        return DeadLetterCode.SCHEDULED
    expires = headers.get("expires")
    if expires is not None and _expired(expires):
        return DeadLetterCode.EXPIRED
    return None


def _read(message: Message) -> Delivery:
    """:func:`delivery_of`, never raising: whatever breaks reading it, the message is kept."""
    try:
        return delivery_of(message)
    except Exception as exc:  # noqa: BLE001 - one unreadable message must not stop its batch
        _log.warning("message unreadable (%s); dead-lettered", type(exc).__name__)
        return _refused(message, DeadLetterCode.UNDECODABLE)


def _undecodable(message: Message) -> bool:
    try:
        message.decode()
    except Exception:  # noqa: BLE001 - any decoding failure is the answer
        return True
    return False


class Intake:
    """Hands messages from the consumer's thread to the loop, and verdicts back (see module).

    :meth:`put` runs on the consumer's thread; everything else on the loop, except the acks,
    which :meth:`_flush` runs back on the consumer's thread (``hub.call_soon``), batched.
    """

    def __init__(
        self, handler: Handler, consumer: Any, held: broker.HeldBytes | None = None
    ) -> None:
        self.handler = handler
        self.held = held or broker.HeldBytes(handler.rt.settings.held_mib * broker.MIB)
        self.loop = handler.rt.loop
        self.consumer = consumer
        self._incoming: collections.deque[Message] = collections.deque()
        self._scheduled = False
        self._settled: collections.deque[tuple[Message, Verdict]] = collections.deque()
        self._flush_scheduled = False
        self.in_flight = 0
        self._held: dict[int, Message] = {}  # id -> message, between drain and settle
        self._idle: asyncio.Event | None = None  # set when nothing is in flight (shutdown)
        self._parked: list[Message] = []  # arrived after a halt: left unacked

    # -- consumer thread ------------------------------------------------------------------------

    def put(self, message: Message) -> None:
        """Take one message off kombu (the consumer's ``on_message``).

        Once the runtime halted, a message is held, never handled nor acked: it fills the
        prefetch, so nothing more is fetched, and the broker restores it when the process ends.
        """
        self.held.took(_body_size(message))
        broker.size_prefetch(self.consumer, self.held)
        if self.handler.rt.halt.reason is not None:
            self._parked.append(message)
            return
        self._incoming.append(message)
        self._send_event("task-received", message)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon_threadsafe(self._drain)

    def poisoned(self, queue: str, raw: bytes, tag: str | None) -> None:
        """An unreadable list item from the reliable fetch: dead-letter it, then forget it."""
        delivery = Delivery.refusal(DeadLetterCode.UNDECODABLE, raw, lane=lane_of_queue(queue))
        self.loop.call_soon_threadsafe(self._handle_poison, delivery, queue, tag)

    def renew_leases(self) -> None:
        """Renew the visibility lease of every message held (a timer on the consumer's thread)."""
        held = list(self._held.values())  # one C-level copy: the loop thread may add meanwhile
        if held:
            broker.renew(held)
        broker.sweep(getattr(self.consumer, "connection", None))

    def flush_pending(self) -> None:
        """Settle now what waits for the consumer's thread (shutdown: the hub runs no more)."""
        self._flush()

    def _flush(self) -> None:
        """Ack (or requeue) every settled message; send their task events."""
        settled = []
        while self._settled:
            settled.append(self._settled.popleft())
        self._flush_scheduled = False
        acked = [m for m, verdict in settled if verdict is Verdict.ACK]
        broker.ack_all(acked)
        for message, verdict in settled:
            self.held.settled(_body_size(message))
            if verdict is Verdict.REQUEUE:
                broker.requeue(message)
            self._send_event(
                "task-succeeded" if verdict is Verdict.ACK else "task-retried", message
            )

    def _send_event(self, kind: str, message: Message) -> None:
        dispatcher = getattr(self.consumer, "event_dispatcher", None)
        if dispatcher is None or not dispatcher.enabled:
            return
        headers = message.headers if isinstance(message.headers, Mapping) else {}
        fields: dict[str, Any] = {"uuid": headers.get("id"), "name": headers.get("task")}
        if kind == "task-received":
            fields.update(args=headers.get("argsrepr") or "", kwargs="", retries=0)
        dispatcher.send(kind, **fields)

    # -- loop -----------------------------------------------------------------------------------

    def _drain(self) -> None:
        """Take everything waiting; live messages first, the rest in bounded chunks.

        Decoding and accepting a message is CPU work on the loop: a fetch of 256 backfill
        batches decoded in one go blocked the loop for a few hundred milliseconds, and every
        live snapshot in flight waited behind it. Each chunk is one micro-batch (one
        skip-if-done query); the next chunk runs on a later loop iteration.
        """
        self._scheduled = False
        messages = []
        while self._incoming:
            messages.append(self._incoming.popleft())
        if not messages:
            return
        self.in_flight += len(messages)
        self._held.update((id(m), m) for m in messages)
        messages.sort(key=lambda m: lane_of_queue(_queue(m)) is not Lane.LIVE)  # stable
        self._submit_chunks(messages)

    def _submit_chunks(self, messages: list[Message]) -> None:
        chunk, rest = messages[:DRAIN_CHUNK], messages[DRAIN_CHUNK:]
        deliveries = [_read(m) for m in chunk]
        for delivery in deliveries:
            if delivery.enqueued_at is not None and delivery.lane is not None:
                metrics.observe_queue_wait(delivery.lane.value, time.time() - delivery.enqueued_at)
        for message, verdict in zip(chunk, self.handler.submit(deliveries), strict=True):
            verdict.add_done_callback(partial(self._settle, message))
        if rest:
            self.loop.call_soon(self._submit_chunks, rest)

    def _settle(self, message: Message, verdict: asyncio.Future[Verdict]) -> None:
        self.in_flight -= 1
        self._held.pop(id(message), None)
        if not self.in_flight and self._idle is not None:
            self._idle.set()
        self._settled.append((message, verdict.result()))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._on_consumer_thread(self._flush)

    def _handle_poison(self, delivery: Delivery, queue: str, tag: str | None) -> None:
        (verdict,) = self.handler.submit([delivery])

        def forget(done: asyncio.Future[Verdict]) -> None:
            if done.result() is Verdict.ACK and tag is not None:
                self._on_consumer_thread(partial(broker.forget, self.consumer.connection, tag))

        verdict.add_done_callback(forget)
        _log.warning("unreadable message on %s dead-lettered", queue)

    def _on_consumer_thread(self, work: Any) -> None:
        hub = getattr(self.consumer, "hub", None)
        if hub is not None and not getattr(self.consumer, "evalq_stopping", False):
            hub.call_soon(work)
        else:  # no event loop (shutting down): acks go straight to the broker
            work()

    async def settled(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until nothing is in flight; True if nothing is."""
        if self.in_flight:
            self._idle = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._idle.wait()
        return not self.in_flight

    def wait_settled(self, timeout_s: float) -> bool:
        """:meth:`settled`, from another thread (warm shutdown)."""
        return self.handler.rt.call(self.settled(timeout_s), timeout_s=timeout_s + 5.0)


class Intakes:
    """The intake of each lane: live on its own runtime when other lanes share the process.

    The same face as one :class:`Intake` to the consumer and the lifecycle step: messages are
    routed by the lane of their queue; ``other`` takes every lane without an intake of its own.
    """

    def __init__(self, other: Intake, live: Intake | None = None) -> None:
        self.other = other
        self.live = live
        self.all = (other,) if live is None else (live, other)
        self.held = other.held
        """The body bytes the process holds (the lifecycle builds both intakes with one count)."""

    def for_queue(self, queue: Any) -> Intake:
        """The intake that handles messages of ``queue``."""
        if self.live is not None and lane_of_queue(queue) is Lane.LIVE:
            return self.live
        return self.other

    def put(self, message: Message) -> None:
        """Take one message off kombu (the consumer's ``on_message``)."""
        self.for_queue(_queue(message)).put(message)

    def poisoned(self, queue: str, raw: bytes, tag: str | None) -> None:
        """An unreadable list item: dead-lettered by its lane's intake."""
        self.for_queue(queue).poisoned(queue, raw, tag)

    def renew_leases(self) -> None:
        """Renew the leases every intake holds (a timer on the consumer's thread)."""
        for intake in self.all:
            intake.renew_leases()

    def flush_pending(self) -> None:
        """Settle now what waits for the consumer's thread, in every intake."""
        for intake in self.all:
            intake.flush_pending()

    @property
    def in_flight(self) -> int:
        """Messages taken and not yet settled, over every intake."""
        return sum(intake.in_flight for intake in self.all)

    def wait_settled(self, timeout_s: float) -> bool:
        """Wait (one deadline for all) until no intake has messages in flight."""
        deadline = time.monotonic() + timeout_s
        finished = [i.wait_settled(max(0.0, deadline - time.monotonic())) for i in self.all]
        return all(finished)


class EvalqConsumer(Consumer):
    """``worker_consumer``: messages go to the :class:`Intake` instead of Celery's strategies."""

    evalq_intake: Intake | None = None
    evalq_stopping = False

    def create_task_handler(self, *args: Any, **kwargs: Any) -> Any:  # noqa: ARG002 - Celery's
        """Celery asks once per connection for the function that takes every task message."""
        intake = self.evalq_intake
        if intake is None:
            raise RuntimeError("the evalq lifecycle step did not start")
        return intake.put

    def connect(self) -> Any:
        """Celery's connect, with the broker's delivery protections installed."""
        connection = super().connect()
        intake = self.evalq_intake
        if intake is None:
            broker.protect(connection, None)
        else:
            broker.protect(connection, intake.poisoned, intake.held)
        return connection

    def on_connection_error_after_connected(self, exc: Exception) -> None:
        """Celery's reconnect path, with the old connection closed best-effort."""
        if self.connection is not None:
            consumer = getattr(self, "task_consumer", None)
            channels = [
                getattr(self.connection, "_default_channel", None),
                getattr(consumer, "channel", None),
            ]
            broker.retire(self.connection, channels)
        super().on_connection_error_after_connected(exc)
