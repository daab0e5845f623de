"""The baseline of P2: a Celery app with evalq's exact configuration and one no-op task.

``celery -A bench._noop_app worker ...`` (with the same ``EVALQ_*`` environment and the same
worker arguments as ``python -m worker``) measures Celery's one-task-per-message ceiling under the
broker, pool, prefetch, acks and events settings the real worker uses. The task is registered under
its own name on the backfill queue; it does nothing, so the drain rate is framework overhead only.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from bench._kit import NOOP_TASK
from producer.topology import LANE_QUEUES, Lane
from worker.app import celery_config
from worker.settings import load_settings

__all__ = ["app", "noop"]

_settings = load_settings()
app = Celery("evalq-noop", set_as_current=False)
app.conf.update(celery_config(_settings, _settings.require_broker()))
# The real worker's consumer dead-letters bad messages into the store; the baseline has no store
# and receives only well-formed messages, so Celery's stock consumer is the fair comparison.
app.conf.worker_consumer = "celery.worker.consumer:Consumer"
app.conf.task_routes = {NOOP_TASK: {"queue": LANE_QUEUES[Lane.BACKFILL]}}


@app.task(name=NOOP_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def noop(*_args: Any) -> None:
    """Do nothing: the measured cost is Celery's own, per message."""
