"""A trivial Celery app (one task, JSON only, task events on) for the Flower test.

It stands in for nothing of evalq's logic: it only gives Flower a real worker emitting real task
events over the same Redis broker, so the test can see Flower's /metrics list a task by name.
"""

from __future__ import annotations

import os

from celery import Celery

__all__ = ["PROBE_TASK", "app", "make_app"]

PROBE_TASK = "evalq.ops_probe"


def _probe(value: int) -> int:
    """Return ``value + 1`` (a task that always succeeds)."""
    return value + 1


def make_app(broker_url: str) -> Celery:
    """The probe app on ``broker_url`` (the worker subprocess and the sending test both use it)."""
    app = Celery("ops_probe", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        worker_send_task_events=True,
        task_send_sent_event=True,
        broker_connection_retry_on_startup=True,
    )
    app.task(name=PROBE_TASK)(_probe)
    return app


app = make_app(os.environ.get("OPS_BROKER_URL", "redis://127.0.0.1:6379/0"))
