"""The queue topology of the contract: lanes, their queues, the exchange, tasks and headers.

Producers publish and workers consume by these names only, so they are defined once, here, and
both sides import them (:mod:`producer.snapshot` re-exports them with the payload models).

- one durable ``direct`` exchange, :data:`LANE_EXCHANGE`; each lane's queue
  (:data:`LANE_QUEUES`) is bound to it with its own name as routing key;
- tasks by stable name: :data:`EVALUATE_TASK` (snapshots, live or backfill lane),
  :data:`REEVALUATE_TASK` (a snapshot again, as a numbered retry attempt: backfill lane),
  :data:`OUTCOME_TASK` and :data:`TALLY_TASK` (outcomes lane); :data:`TASK_LANES` is each
  task's default lane;
- every message carries :data:`ENQUEUED_AT_HEADER` (publish time) for queue-wait and age metrics;
- its ``argsrepr`` (what Flower and task events show) names ids only — the snapshot id and the
  trace id as :func:`trace_label` prints it (workers log it the same way), never content.

Importing this module loads neither Celery nor kombu (the contract stays light for a producer
that only builds snapshots): :func:`lane_queues` and :func:`celery_routing` import kombu when
called, by an app that is about to talk to a broker anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "ENQUEUED_AT_HEADER",
    "EVALUATE_TASK",
    "LANE_EXCHANGE",
    "LANE_QUEUES",
    "OUTCOME_TASK",
    "REEVALUATE_TASK",
    "TALLY_TASK",
    "TASK_LANES",
    "TASK_NAMES",
    "TRACE_LABEL_CHARS",
    "Lane",
    "celery_routing",
    "lane_of_queue",
    "lane_queues",
    "trace_label",
]


class Lane(StrEnum):
    """Queues: ``live`` (latency first), ``backfill`` (throughput first), ``outcomes``."""

    LIVE = "live"
    BACKFILL = "backfill"
    OUTCOMES = "outcomes"


LANE_QUEUES: Mapping[Lane, str] = MappingProxyType(
    {Lane.LIVE: "evalq.live", Lane.BACKFILL: "evalq.backfill", Lane.OUTCOMES: "evalq.outcomes"}
)
"""The broker queue of each lane."""
_LANE_OF_QUEUE = {queue: lane for lane, queue in LANE_QUEUES.items()}
LANE_EXCHANGE: Final = "evalq"
"""One direct exchange; each lane queue is bound with its own name as routing key."""

EVALUATE_TASK: Final = "evalq.evaluate"
REEVALUATE_TASK: Final = "evalq.reevaluate"
"""A retry: one ``Reevaluation.wire()`` dict or a list of them (catch-up work: backfill lane)."""
OUTCOME_TASK: Final = "evalq.outcome"
TALLY_TASK: Final = "evalq.sampling_tally"
TASK_LANES: Mapping[str, Lane] = MappingProxyType(
    {
        EVALUATE_TASK: Lane.LIVE,
        REEVALUATE_TASK: Lane.BACKFILL,
        OUTCOME_TASK: Lane.OUTCOMES,
        TALLY_TASK: Lane.OUTCOMES,
    }
)
"""Each task's default lane (a backfill producer names the backfill lane when it sends)."""
TASK_NAMES: frozenset[str] = frozenset(TASK_LANES)
"""The task names a worker serves; any other (Celery built-ins too) is ``UNKNOWN_TASK``."""

ENQUEUED_AT_HEADER: Final = "evalq_enqueued_at"
"""Message header: unix time (float seconds) of the publish, for queue-wait and age metrics."""


def lane_of_queue(queue: object) -> Lane | None:
    """The lane a broker queue name serves (``None`` for any other queue or value)."""
    return _LANE_OF_QUEUE.get(queue) if isinstance(queue, str) else None


def lane_queues() -> tuple[Any, ...]:
    """The lane queues as kombu declares them (``kombu.Queue``); producers and workers both."""
    # Imported here: the contract is imported by code that never talks to a broker.
    from kombu import Exchange, Queue  # noqa: PLC0415

    exchange = Exchange(LANE_EXCHANGE, type="direct", durable=True)
    return tuple(Queue(name, exchange, routing_key=name) for name in LANE_QUEUES.values())


def celery_routing() -> dict[str, Any]:
    """The Celery settings that declare this topology, shared by the producer's and worker's app."""
    live = LANE_QUEUES[Lane.LIVE]
    return {
        "task_queues": lane_queues(),
        "task_default_queue": live,
        "task_default_exchange": LANE_EXCHANGE,
        "task_default_routing_key": live,
        "task_routes": {task: {"queue": LANE_QUEUES[lane]} for task, lane in TASK_LANES.items()},
    }


TRACE_LABEL_CHARS: Final = 64
"""The longest trace id a label shows whole; longer ones end in ``…``."""


def trace_label(trace_id: str) -> str:
    """``trace_id`` for a label or log line: at most 64 characters, whitespace and control
    characters shown as ``?`` (a trace id is the user's text: it must not forge a log line)."""
    shown = "".join(
        c if c.isprintable() and not c.isspace() else "?" for c in trace_id[:TRACE_LABEL_CHARS]
    )
    return shown + ("…" if len(trace_id) > TRACE_LABEL_CHARS else "")
