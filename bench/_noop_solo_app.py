"""N of ``bench/lanes.py``: a stock Celery app with one no-op task (acks_late, JSON).

``celery -A bench._noop_solo_app worker -P solo -Q bench.noop`` drains empty tasks with Celery's
own defaults (prefetch, no task events): the rate one Celery process reaches on this Redis when
the task costs nothing. Unlike ``bench._noop_app`` (P2's baseline) it carries none of evalq's
configuration, so it is the framework's ceiling, not evalq's.
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from bench._kit import NOOP_TASK

__all__ = ["app", "noop"]

app = Celery("evalq-noop-solo", broker=os.environ["EVALQ_BROKER_URL"], set_as_current=False)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_acks_late=True,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
)


@app.task(name=NOOP_TASK, acks_late=True, ignore_result=True)
def noop(*_args: Any) -> None:
    """Do nothing: the measured cost is Celery's own, per message."""
