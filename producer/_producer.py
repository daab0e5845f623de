"""The producer's broker client: sends tasks BY NAME, never importing the worker's tasks.

A minimal Celery app (no tasks, no result backend, JSON only) publishes to the lane queues of
:data:`producer.snapshot.LANE_QUEUES`. Payloads follow the task contract:

- ``evalq.evaluate``: one argument, a ``Snapshot.wire()`` dict — or, for batches (backfill), a
  list of at most the worker's ``EVALQ_BATCH_SIZE`` of them;
- ``evalq.outcome``: one argument, an ``OutcomeEvent.wire()`` dict (always on the outcomes lane).

Task events carry a short ``argsrepr`` (snapshot or event id), never the content, so Flower and
event consumers do not copy traces around. Each message carries ``ENQUEUED_AT_HEADER`` (publish
time) so workers and the queue exporter can measure queue wait and message age. Delivery is
at-least-once from the broker on; the worker's idempotency makes re-sending harmless.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import islice
from types import TracebackType
from typing import Any, Self

from celery import Celery
from kombu import Exchange, Queue

from .snapshot import (
    ENQUEUED_AT_HEADER,
    EVALUATE_TASK,
    LANE_QUEUES,
    OUTCOME_TASK,
    Lane,
    OutcomeEvent,
    Snapshot,
)

__all__ = ["LANE_EXCHANGE", "Producer", "lane_queues"]

LANE_EXCHANGE = "evalq"
"""One direct exchange; each lane queue is bound with its own name as routing key."""


def lane_queues() -> tuple[Queue, ...]:
    """The lane queues as kombu declares them; workers and producers both use this."""
    exchange = Exchange(LANE_EXCHANGE, type="direct", durable=True)
    return tuple(Queue(name, exchange, routing_key=name) for name in LANE_QUEUES.values())


def _chunks(items: Iterable[Snapshot], size: int) -> Iterator[list[Snapshot]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


class Producer:
    """Publish snapshots and outcome events to the evalq lanes of one broker.

    ``transport_options`` are kombu broker transport options (the CLI passes the same ones the
    worker uses). Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self, broker_url: str, *, transport_options: Mapping[str, Any] | None = None
    ) -> None:
        app = Celery("evalq-producer", set_as_current=False)
        app.conf.update(
            broker_url=broker_url,
            broker_connection_retry_on_startup=True,
            broker_transport_options=dict(transport_options or {}),
            result_backend=None,
            task_ignore_result=True,
            task_serializer="json",
            accept_content=["json"],
            task_send_sent_event=True,
            task_queues=lane_queues(),
            task_default_queue=LANE_QUEUES[Lane.LIVE],
            task_default_exchange=LANE_EXCHANGE,
            task_default_routing_key=LANE_QUEUES[Lane.LIVE],
        )
        self._app = app

    def _send(self, name: str, payload: Any, queue: str, label: str, producer: Any = None) -> None:
        self._app.send_task(
            name,
            args=(payload,),
            queue=queue,
            producer=producer,
            argsrepr=label,
            kwargsrepr="{}",
            headers={ENQUEUED_AT_HEADER: time.time()},
        )

    def enqueue(self, snapshot: Snapshot, *, lane: Lane | str | None = None) -> str:
        """Send one snapshot (lane: given, else the snapshot's sampling lane); returns its id."""
        queue = LANE_QUEUES[Lane(lane) if lane else snapshot.sampling.lane]
        snapshot_id = snapshot.snapshot_id
        self._send(EVALUATE_TASK, snapshot.wire(), queue, f"[snapshot {snapshot_id[:16]}]")
        return snapshot_id

    def enqueue_many(
        self,
        snapshots: Iterable[Snapshot],
        *,
        lane: Lane | str | None = None,
        batch_size: int = 1,
    ) -> list[str]:
        """Send many snapshots over one connection; ``batch_size > 1`` packs them per message.

        Batching (at most the worker's ``EVALQ_BATCH_SIZE``) is meant for the backfill lane.
        Returns the snapshot ids in input order.
        """
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        ids: list[str] = []
        with self._app.producer_or_acquire() as producer:
            for chunk in _chunks(snapshots, batch_size):
                ids.extend(self._send_chunk(chunk, lane, batch_size, producer))
        return ids

    def _send_chunk(
        self, chunk: list[Snapshot], lane: Lane | str | None, batch_size: int, producer: Any
    ) -> list[str]:
        ids = [s.snapshot_id for s in chunk]
        queue = LANE_QUEUES[Lane(lane) if lane else chunk[0].sampling.lane]
        if batch_size == 1:
            payload: Any = chunk[0].wire()
            label = f"[snapshot {ids[0][:16]}]"
        else:
            payload = [s.wire() for s in chunk]
            label = f"[{len(chunk)} snapshots {ids[0][:16]}…]"
        self._send(EVALUATE_TASK, payload, queue, label, producer)
        return ids

    def send_batch(self, snapshots: Sequence[Snapshot]) -> None:
        """Send each snapshot on its own lane (the ``LiveSubmitter`` send hook)."""
        self.enqueue_many(snapshots)

    def outcome(self, event: OutcomeEvent) -> str:
        """Send one outcome event on the outcomes lane; returns its event id."""
        queue = LANE_QUEUES[Lane.OUTCOMES]
        self._send(OUTCOME_TASK, event.wire(), queue, f"[outcome {event.event_id[:32]}]")
        return event.event_id

    def send_raw(self, task: str, payload: Any, *, lane: Lane | str) -> None:
        """Send an already-encoded payload by task name (``evalq redrive`` uses it)."""
        self._send(task, payload, LANE_QUEUES[Lane(lane)], f"[{task} redrive]")

    def close(self) -> None:
        """Release the broker connections."""
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
