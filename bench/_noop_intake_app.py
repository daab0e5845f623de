"""evalq's consumer with a handler that does nothing: the consumer-level hand-off's own cost.

The counterpart of :mod:`bench._noop_app` (Celery's stock consumer, a ``Request``, the strategy
and the pool per message, a no-op task): here every message takes evalq's path up to the
handler — :class:`worker.consumer.EvalqConsumer`, the intake's micro-batch hop to the loop,
reading the message into a ``Delivery`` — and the handler answers ``ACK`` at once, so the acks
are batched as in the worker. The difference per message between the two is what the
consumer-level hand-off saves over one Celery request per message. Used by
``bench/execution_models.py`` (model ``noop-intake``); not part of the worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from bench._kit import NOOP_TASK
from producer.topology import EVALUATE_TASK, LANE_QUEUES, Lane
from worker import consumer, handling, lifecycle
from worker.app import create_app
from worker.settings import load_settings

__all__ = ["NoopHandler", "app"]


class NoopHandler(handling.Handler):
    """Answers every delivery ``ACK`` at once (nothing decoded, evaluated or written)."""

    def submit(
        self, deliveries: Sequence[handling.Delivery]
    ) -> list[asyncio.Future[handling.Verdict]]:
        """A done future per delivery."""
        futures = []
        for _ in deliveries:
            future: asyncio.Future[handling.Verdict] = self.rt.loop.create_future()
            future.set_result(handling.Verdict.ACK)
            futures.append(future)
        return futures


# The bench fixture swaps the handler the lifecycle step builds; the worker's code is unchanged.
lifecycle.Handler = NoopHandler  # type: ignore[attr-defined, misc, unused-ignore]
# Celery's no-op task name is served like evalq's own (the same messages as bench._noop_app).
consumer.TASK_NAMES = frozenset({*consumer.TASK_NAMES, NOOP_TASK})
app = create_app(load_settings())
app.conf.task_routes = {
    NOOP_TASK: {"queue": LANE_QUEUES[Lane.BACKFILL]},
    EVALUATE_TASK: {"queue": LANE_QUEUES[Lane.LIVE]},
}
