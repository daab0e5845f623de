"""A minimal Celery app for the fetch probes: one task that records its id in Redis.

``celery -A tests.queue.fetch_probe_app worker --pool=solo ...``, configured by environment:

- ``PROBE_BROKER_URL``: the Redis to use;
- ``PROBE_FETCH``: ``reliable`` (``worker.broker._reliable_fetch``) or ``stock``
  (kombu's ``BRPOP``);
- ``PROBE_APPEND_DELAY_S``: a pause at the start of kombu's ``QoS.append``, i.e. between the pop
  and the consumer's bookkeeping of the message: it widens the window a kill must hit, so that a
  probe SIGKILL lands in it almost every time (default 0);
- ``PROBE_TASK_S``: how long the task runs after recording that it started (default 0);
- ``PROBE_VISIBILITY_S``: the visibility timeout (default 3600: nothing restored during a probe).

The task appends its id to the Redis list ``probe:started``, sleeps, then to ``probe:done``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import Celery
from kombu import Queue
from kombu.transport import redis as kombu_redis

from worker.broker import _reliable_fetch

__all__ = ["DONE", "QUEUES", "STARTED", "app", "sender"]

QUEUES = ("probe.live", "probe.backfill")
"""Consumed in this order (``queue_order_strategy=priority``), like evalq's live and backfill."""
STARTED = "probe:started"
DONE = "probe:done"

_URL = os.environ.get("PROBE_BROKER_URL", "redis://127.0.0.1:6379/0")
_APPEND_DELAY_S = float(os.environ.get("PROBE_APPEND_DELAY_S", "0"))
_TASK_S = float(os.environ.get("PROBE_TASK_S", "0"))


def _delayed(qos: type[Any]) -> type[Any]:
    class Delayed(qos):  # type: ignore[misc]  # a kombu QoS class
        def append(self, message: Any, delivery_tag: Any) -> None:
            time.sleep(_APPEND_DELAY_S)
            super().append(message, delivery_tag)

    return Delayed


class StockChannel(kombu_redis.Channel):
    """kombu's channel (``BRPOP``, then ``QoS.append``), with the delayed append."""

    QoS = _delayed(kombu_redis.QoS)


class ReliableChannel(_reliable_fetch.Channel):
    """The reliable-fetch channel, with the delayed append."""

    QoS = _delayed(_reliable_fetch.QoS)


class StockTransport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`StockChannel`."""

    Channel = StockChannel


class ReliableTransport(_reliable_fetch.Transport):
    """The reliable-fetch transport with :class:`ReliableChannel`."""

    Channel = ReliableChannel


def sender(broker_url: str) -> Celery:
    """An app that sends ``probe.record`` to the probe queues of ``broker_url`` (kombu's stock
    transport: publishing is the same on both)."""
    app = Celery("probe-sender", set_as_current=False)
    app.conf.update(broker_url=broker_url, task_queues=_queues(), accept_content=["json"])
    return app


def _queues() -> list[Queue]:
    return [Queue(name) for name in QUEUES]


app = Celery("probe", set_as_current=False)
app.conf.update(
    broker_url=_URL,
    broker_transport=f"{__name__}:{os.environ.get('PROBE_FETCH', 'reliable').title()}Transport",
    broker_transport_options={
        "visibility_timeout": float(os.environ.get("PROBE_VISIBILITY_S", "3600")),
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
        "queue_order_strategy": "priority",
    },
    task_queues=_queues(),
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    accept_content=["json"],
    task_ignore_result=True,
    worker_hijack_root_logger=True,
)
_client = redis.Redis.from_url(_URL)


@app.task(name="probe.record", bind=True)
def record(self: Any) -> None:
    """Record the start, run for ``PROBE_TASK_S``, record the end."""
    _client.rpush(STARTED, self.request.id)
    time.sleep(_TASK_S)
    _client.rpush(DONE, self.request.id)
