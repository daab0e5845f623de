"""The producer's broker client: sends tasks BY NAME, never importing the worker's tasks.

A minimal Celery app (no tasks, no result backend, JSON only) publishes to the lane queues of
:mod:`producer.topology` (declared by its ``celery_routing``). Payloads follow the task contract:

- ``evalq.evaluate``: one argument, a ``Snapshot.wire()`` dict — or, for batches (backfill), a
  list of them: at most ``batch_size`` (clamped to the contract's ``MAX_BATCH_ITEMS``) and
  ``MAX_BATCH_BYTES`` of JSON per message; a snapshot over ``MAX_ITEM_BYTES`` is refused;
- ``evalq.reevaluate``: one argument, a ``Reevaluation.wire()`` dict or a list of them (a retry
  of stored snapshots, on the backfill lane by default), split like backfill batches;
- ``evalq.outcome``: one argument, an ``OutcomeEvent.wire()`` dict (always on the outcomes lane);
- ``evalq.sampling_tally``: one argument, a ``SamplingTally.wire()`` dict (outcomes lane).

Task events carry a short ``argsrepr`` (snapshot or event id, and the trace id beside it: what
a user searches Flower for), never the content, so Flower and event consumers do not copy
traces around. Each message carries ``ENQUEUED_AT_HEADER`` (publish
time) so workers and the queue exporter can measure queue wait and message age. Delivery is
at-least-once from the broker on; the worker's idempotency makes re-sending harmless. Every call
sends through one :class:`~producer._publishing.Publisher`; on RabbitMQ a call returns only once
the broker has acked everything it sent. A broker call that fails raises
:class:`~producer._broker.BrokerError` (``.code`` says why, ``PUBLISH_REFUSED`` if RabbitMQ
refused a message), never the broker library's own exception.

Live apps call :meth:`Producer.submit`: an optional :class:`~producer._sampling.Sampler` decides,
then a :class:`~producer._submitter.LiveSubmitter` (started on first use) buffers and one
background thread sends. That thread publishes through a second Celery app whose kombu options
give up on a dead broker within about a second (one connection attempt, no publish retry), so the
submitter's own bounded stamina backoff is the only retry loop and ``flush``/``close`` stay
bounded; once the broker is back the next attempt reconnects and delivers. The sampler's
sampled-out counts are sent every ``tally_interval_s`` and at close.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from celery import Celery
from kombu.serialization import registry  # type: ignore[attr-defined]  # not in the stubs
from kombu.utils.json import dumps as json_dumps

from ._broker import Broker
from ._publishing import Message, Publisher, TaskIds, publishing
from ._sampling import Sampler
from ._submitter import LiveSubmitter, RetryPolicy, SubmitterStats
from .snapshot import (
    MAX_BATCH_BYTES,
    MAX_BATCH_ITEMS,
    MAX_ITEM_BYTES,
    OutcomeEvent,
    Reevaluation,
    SamplingTally,
    Snapshot,
)
from .topology import (
    EVALUATE_TASK,
    LANE_QUEUES,
    OUTCOME_TASK,
    REEVALUATE_TASK,
    TALLY_TASK,
    TASK_LANES,
    Lane,
    celery_routing,
    trace_label,
)

__all__ = [
    "OversizedSnapshotError",
    "Producer",
    "live_transport_options",
]


_LIVE_SOCKET_CAPS_S = {"socket_timeout": 5.0, "socket_connect_timeout": 1.0}


def live_transport_options(base: Mapping[str, Any] | None) -> dict[str, Any]:
    """``base`` with kombu's connection retries cut to one quick attempt (live publishing).

    kombu otherwise retries a refused connection inside every publish (seconds per call), which
    would stall the flusher far beyond the submitter's own backoff. Socket timeouts, when set (the
    Redis options), are capped so a vanished broker fails a publish in seconds, not 30.
    """
    options = {**(base or {}), "max_retries": 1, "interval_start": 0}
    options |= {"interval_step": 0.05, "interval_max": 0.05}
    for key, cap_s in _LIVE_SOCKET_CAPS_S.items():
        if key in options:
            options[key] = min(float(options[key]), cap_s)
    return options


def _celery(broker_url: str, transport_options: Mapping[str, Any], **extra: Any) -> Celery:
    app = Celery("evalq-producer", set_as_current=False)
    conf: dict[str, Any] = {
        "broker_url": broker_url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": dict(transport_options),
        "result_backend": None,
        "task_ignore_result": True,
        "task_serializer": "json",
        "accept_content": ["json"],
        "task_send_sent_event": True,
        **celery_routing(),
    }
    app.conf.update({**conf, **extra})
    return app


_ENCODED = "evalq-encoded-json"


class _Encoded(str):
    """A task argument that is JSON text already: spliced into the body verbatim."""

    __slots__ = ()


def _encode_body(body: Any) -> str:
    """Celery's ``(args, kwargs, embed)`` as JSON, an :class:`_Encoded` argument spliced in.

    The result is the very JSON ``kombu``'s json serializer would write for the decoded value,
    so workers (``accept_content=["json"]``) decode it like any other message.
    """
    if isinstance(body, tuple) and len(body) == 3:
        args, kwargs, embed = body
        if len(args) == 1 and isinstance(args[0], _Encoded):
            return f"[[{args[0]}],{json_dumps(kwargs)},{json_dumps(embed)}]"
    return str(json_dumps(body))


def _install_encoder() -> None:
    # An encoder only: decoding stays kombu's json (the content type is application/json), and
    # the content type keeps mapping to the name "json" for everything that looks it up.
    registry.register(_ENCODED, _encode_body, None, "application/json", "utf-8")
    registry.type_to_name["application/json"] = "json"


_install_encoder()


class OversizedSnapshotError(ValueError):
    """A snapshot over :data:`~producer.snapshot.MAX_ITEM_BYTES`: no worker would accept it."""


def _encoded(snapshot: Snapshot) -> str:
    """The snapshot's JSON text (pydantic, in Rust), refused when no worker would accept it."""
    text = snapshot.model_dump_json()  # a value nested past pydantic's limit raises ValueError
    if len(text) > MAX_ITEM_BYTES or len(text.encode("utf-8")) > MAX_ITEM_BYTES:
        raise OversizedSnapshotError(f"snapshot is over the worker's {MAX_ITEM_BYTES} bytes")
    return text


def _reevaluation_text(item: Reevaluation) -> str:
    """A retry item's JSON, refused when its snapshot is over the worker's item limit."""
    _encoded(item.snapshot)
    return item.model_dump_json()


_Item = TypeVar("_Item", Snapshot, Reevaluation)


def _messages(
    items: Iterable[_Item], size: int, encode: Callable[[_Item], str]
) -> Iterator[list[tuple[_Item, str]]]:
    """Items (snapshots) with their JSON, grouped into messages a worker accepts.

    At most ``size`` (itself at most :data:`MAX_BATCH_ITEMS`) items and
    :data:`MAX_BATCH_BYTES` of JSON per message: a larger wanted batch is split, never sent.
    """
    limit = min(size, MAX_BATCH_ITEMS)
    chunk: list[tuple[_Item, str]] = []
    chunk_bytes = 0
    for snapshot in items:
        text = encode(snapshot)
        if chunk and (len(chunk) >= limit or chunk_bytes + len(text) > MAX_BATCH_BYTES):
            yield chunk
            chunk, chunk_bytes = [], 0
        chunk.append((snapshot, text))
        chunk_bytes += len(text)
    if chunk:
        yield chunk


class Producer:
    """Publish snapshots and outcome events to the evalq lanes of one broker.

    ``transport_options`` are kombu broker transport options (the CLI passes the same ones the
    worker uses). Use as a context manager, or call :meth:`close`.

    Live options (used by :meth:`submit` only): ``sampler`` decides per trace and counts what it
    leaves out (give it to the producer *or* to ``observe``, not both, or units are counted
    twice); ``live_capacity`` bounds the buffer (snapshots), a snapshot submitted while
    the flusher is idle is sent at once, and those submitted during a send go together in the
    next one, up to ``live_batch_size``; ``live_flush_interval_s`` is how often an idle flusher
    looks at its buffer and periodic work, ``live_retry`` bounds the backoff for one
    batch while the broker is down, ``tally_interval_s`` paces the sampled-out counts.
    """

    def __init__(
        self,
        broker_url: str,
        *,
        transport_options: Mapping[str, Any] | None = None,
        sampler: Sampler | None = None,
        live_capacity: int = 10_000,
        live_batch_size: int = 100,
        live_flush_interval_s: float = 0.05,
        live_retry: RetryPolicy | None = None,
        tally_interval_s: float = 60.0,
    ) -> None:
        self._app = _celery(broker_url, transport_options or {})
        # The bulk paths send no task-sent events: one per message was 26% of a backfill's
        # publish time, and a million of them would only churn Flower's task list; Flower
        # still sees each task from the worker's task-received on (docs/concurrency.md).
        self._bulk_app = _celery(broker_url, transport_options or {}, task_send_sent_event=False)
        self._broker_url = broker_url
        self._transport_options = dict(transport_options or {})
        self.sampler = sampler
        self._live_options: dict[str, Any] = {
            "capacity": live_capacity,
            "batch_size": live_batch_size,
            "flush_interval_s": live_flush_interval_s,
            "retry": live_retry or RetryPolicy(),
            "periodic_interval_s": tally_interval_s,
        }
        self._live: LiveSubmitter | None = None
        self._live_app: Celery | None = None
        self._live_lock = threading.Lock()
        self._live_app_lock = threading.Lock()  # apart: building an app must not hold up submit()
        self._closed = False
        self._ids = TaskIds()
        self._broker = Broker.of(broker_url)

    def _publisher(self, app: Celery) -> contextlib.AbstractContextManager[Publisher]:
        """A :class:`Publisher` for one call; everything it sent is confirmed when it closes."""
        return publishing(app, self._ids, self._broker)

    def _bulk_publisher(self) -> contextlib.AbstractContextManager[Publisher]:
        """The bulk paths' publisher: no task-sent events, each queue declared once, and the
        publishes pipelined on Redis (one round trip per ``PIPELINE_OPERATIONS`` instead of
        one, plus a new redis client object, per message)."""
        return publishing(self._bulk_app, self._ids, self._broker, bulk=True)

    def _send(self, message: Message, *, app: Celery | None = None) -> None:
        """Publish one task message on its own (confirmed on RabbitMQ before returning)."""
        with self._publisher(app or self._app) as publisher:
            publisher.send(message)

    def enqueue(self, snapshot: Snapshot, *, lane: Lane | str | None = None) -> str:
        """Send one snapshot (lane: given, else the snapshot's sampling lane); returns its id."""
        queue = LANE_QUEUES[Lane(lane) if lane else snapshot.sampling.lane]
        self._send(Message(EVALUATE_TASK, snapshot.wire(), queue, _snapshot_label(snapshot)))
        return snapshot.snapshot_id

    def enqueue_many(
        self,
        snapshots: Iterable[Snapshot],
        *,
        lane: Lane | str | None = None,
        batch_size: int = 1,
    ) -> list[str]:
        """Send many snapshots over one connection; ``batch_size > 1`` packs them per message.

        Batching (at most the worker's ``EVALQ_BATCH_SIZE``) is meant for the backfill lane.
        Returns the snapshot ids in input order. Computing an id costs a canonical JSON of the
        snapshot: a bulk backfill that does not need them sends with :meth:`send_many`.
        """
        ids: list[str] = []
        self._publish(snapshots, lane, batch_size, ids)
        return ids

    def send_many(
        self,
        snapshots: Iterable[Snapshot],
        *,
        lane: Lane | str | None = None,
        batch_size: int = 1,
    ) -> int:
        """:meth:`enqueue_many` without computing the ids (the workers do): the bulk path.

        Returns how many snapshots were sent. Measured (``bench/p3_producer.py``): 27-52x the
        snapshots per second of ``apply_async`` one by one with batches of 64, 18-26x with 8 (the
        default ``EVALQ_BATCH_SIZE``), 12-16x with 4. Sends no task-sent events (Flower sees
        these tasks from the worker's task-received on).
        """
        return self._publish(snapshots, lane, batch_size, None)

    def _publish(
        self,
        snapshots: Iterable[Snapshot],
        lane: Lane | str | None,
        batch_size: int,
        ids: list[str] | None,
    ) -> int:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        sent = 0
        with self._bulk_publisher() as publisher:
            for chunk in _messages(snapshots, batch_size, _encoded):
                if ids is not None:
                    ids.extend(s.snapshot_id for s, _ in chunk)
                publisher.send(_chunk_message(chunk, lane, batch_size))
                sent += len(chunk)
        return sent

    def reevaluate_many(
        self,
        items: Iterable[Reevaluation],
        *,
        lane: Lane | str | None = None,
        batch_size: int = 1,
    ) -> int:
        """Send retry attempts (``evalq retry``), packed ``batch_size`` per message; how many.

        The lane defaults to the task's (backfill: a retry after an outage is catch-up work and
        must not queue ahead of live traffic). Messages are split like backfill batches (at most
        :data:`MAX_BATCH_ITEMS` items and :data:`MAX_BATCH_BYTES`); an item whose snapshot is
        over :data:`MAX_ITEM_BYTES` is refused (:class:`OversizedSnapshotError`).
        """
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        queue = LANE_QUEUES[Lane(lane) if lane else TASK_LANES[REEVALUATE_TASK]]
        sent = 0
        with self._bulk_publisher() as publisher:
            for chunk in _messages(items, batch_size, _reevaluation_text):
                head = chunk[0][0]
                payload = _payload([text for _, text in chunk], batch_size)
                label = _reevaluation_label(head, len(chunk))
                publisher.send(Message(REEVALUATE_TASK, payload, queue, label, _ENCODED))
                sent += len(chunk)
        return sent

    def check_broker(self, timeout_s: int = 5) -> None:
        """Connect once (no retry loop): raise :class:`BrokerError` (``BROKER_UNREACHABLE``) if
        the broker does not answer.

        The bulk commands call this first, so an unreachable broker is one line at once, not a
        traceback after kombu's publish retries.
        """
        with self._broker.translating(), self._app.connection_for_write() as connection:
            connection.ensure_connection(
                max_retries=1, interval_start=0, interval_step=0, timeout=timeout_s
            )

    def send_batch(self, snapshots: Sequence[Snapshot]) -> None:
        """Send each snapshot on its own lane (the ``LiveSubmitter`` send hook)."""
        self.enqueue_many(snapshots)

    def outcome(self, event: OutcomeEvent) -> str:
        """Send one outcome event on the outcomes lane; returns its event id."""
        queue = LANE_QUEUES[Lane.OUTCOMES]
        label = f"[outcome {event.event_id[:32]} trace {trace_label(event.trace_id)}]"
        self._send(Message(OUTCOME_TASK, event.wire(), queue, label))
        return event.event_id

    def send_raw(self, task: str, payload: Any, *, lane: Lane | str) -> None:
        """Send an already-encoded payload by task name (``evalq redrive`` uses it)."""
        self._send(Message(task, payload, LANE_QUEUES[Lane(lane)], f"[{task} redrive]"))

    # --- live path ------------------------------------------------------------------------

    def submit(self, snapshot: Snapshot) -> bool:
        """Sample, buffer and return at once (``False``: sampled out or dropped).

        Never blocks on the broker and never raises: this runs on the application's request path.
        """
        try:
            # First, so tallies flow even if every unit is sampled out; lock-free once started.
            live = self._live or self._submitter()
            if self.sampler is not None:
                kept = self.sampler.sample(snapshot)
                if kept is None:
                    return False
                snapshot = kept
            return live.submit(snapshot)
        except Exception:  # noqa: BLE001 - the request path must never see our failures
            return False

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait (bounded) until every submitted snapshot was sent or dropped (see live_stats)."""
        live = self._live
        return True if live is None else live.flush(timeout_s)

    def live_stats(self) -> SubmitterStats | None:
        """Counters of the live path (submitted, sent, dropped_*, pending); None before use."""
        live = self._live
        return None if live is None else live.stats()

    def send_tally(self, tally: SamplingTally) -> None:
        """Send sampled-out counts as ``evalq.sampling_tally`` on the outcomes lane (raises)."""
        queue = LANE_QUEUES[Lane.OUTCOMES]
        label = f"[tally {tally.tally_id[:16]}]"
        self._send(Message(TALLY_TASK, tally.wire(), queue, label), app=self._live_celery())

    def _submitter(self) -> LiveSubmitter:
        # Started on first use: a producer that only backfills or sends outcomes has no thread.
        with self._live_lock:
            if self._closed:
                raise RuntimeError("producer closed")  # submit() turns this into False
            if self._live is None:
                periodic = self._report_tally if self.sampler is not None else None
                self._live = LiveSubmitter(self._send_live, periodic=periodic, **self._live_options)
            return self._live

    def _live_celery(self) -> Celery:
        with self._live_app_lock:
            if self._live_app is None:
                self._live_app = _celery(
                    self._broker_url,
                    live_transport_options(self._transport_options),
                    task_publish_retry=False,  # the submitter's stamina backoff retries
                    broker_connection_timeout=1,
                )
            return self._live_app

    def _send_live(self, batch: Sequence[Snapshot]) -> None:
        # Everything is encoded before anything is published: a snapshot that cannot be (too
        # deep, too large) raises ValueError with nothing sent, as LiveSubmitter expects.
        encoded = [(s, _Encoded(_encoded(s))) for s in batch]
        with self._publisher(self._live_celery()) as publisher:
            for snapshot, payload in encoded:
                queue = LANE_QUEUES[snapshot.sampling.lane]
                label = _snapshot_label(snapshot)
                publisher.send(Message(EVALUATE_TASK, payload, queue, label, _ENCODED))

    def _report_tally(self) -> None:
        if self.sampler is not None:
            self.sampler.report(self.send_tally)

    def close(self, timeout_s: float = 5.0) -> None:
        """Drain the live buffer (bounded; the last tally goes too), then release connections."""
        with self._live_lock:
            self._closed = True
        live = self._live
        if live is not None:
            live.close(timeout_s)
        if self._live_app is not None:
            self._live_app.close()
        self._bulk_app.close()
        self._app.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _chunk_message(
    chunk: list[tuple[Snapshot, str]], lane: Lane | str | None, batch_size: int
) -> Message:
    """The message of one chunk of a bulk send (one snapshot, or a list of them)."""
    head = chunk[0][0]
    queue = LANE_QUEUES[Lane(lane) if lane else head.sampling.lane]
    payload = _payload([text for _, text in chunk], batch_size)
    if batch_size == 1:
        return Message(EVALUATE_TASK, payload, queue, _snapshot_label(head), _ENCODED)
    first, trace = head.snapshot_id[:16], trace_label(head.trace_id)
    label = f"[{len(chunk)} snapshots {first}… trace {trace}…]"
    return Message(EVALUATE_TASK, payload, queue, label, _ENCODED)


def _payload(texts: list[str], batch_size: int) -> _Encoded:
    """A bulk message's argument: one item's JSON text, or the list of them (batch_size > 1).

    pydantic serializes each item to JSON text in Rust (several times faster than wire() +
    json.dumps); the texts are spliced into the message body as they are.
    """
    return _Encoded(texts[0] if batch_size == 1 else "[" + ",".join(texts) + "]")


def _snapshot_label(snapshot: Snapshot) -> str:
    """``[snapshot <id16> trace <trace id>]``: the task's ``argsrepr`` (ids, never content)."""
    return f"[snapshot {snapshot.snapshot_id[:16]} trace {trace_label(snapshot.trace_id)}]"


def _reevaluation_label(head: Reevaluation, count: int) -> str:
    """``[reevaluate <id16> attempt N trace <trace id>]`` (ids, never content)."""
    snapshot = head.snapshot
    more = f"{count} snapshots " if count > 1 else ""
    dots = "…" if count > 1 else ""
    return (
        f"[reevaluate {more}{snapshot.snapshot_id[:16]}{dots} attempt {head.attempt} "
        f"trace {trace_label(snapshot.trace_id)}{dots}]"
    )
