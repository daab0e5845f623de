"""The Celery tasks, by stable name: names and routes only, the work is :mod:`worker.handling`'s.

``evalq.evaluate`` takes ONE positional argument: a snapshot wire dict (``Snapshot.wire()``), or a
list of them (a backfill batch). ``evalq.reevaluate`` takes ONE: a ``Reevaluation.wire()`` dict
(a stored snapshot and the retry attempt it is to be), or a list of them.
``evalq.outcome`` takes ONE: an ``OutcomeEvent.wire()`` dict.
``evalq.sampling_tally`` (outcomes lane) takes ONE: a ``SamplingTally.wire()`` dict.

A worker never runs these bodies: its consumer (:mod:`worker.consumer`) hands every message of
these names straight to the handler. They are registered so the app knows the names, queues and
delivery semantics (``acks_late``, ``reject_on_worker_lost``; producers send by name, Flower and
``celery inspect registered`` list them), and so a task applied in-process (``task.apply()``)
goes through the very same handling path.
"""

from __future__ import annotations

from typing import Any

from celery import Celery, Task
from celery.exceptions import Reject

from producer.topology import TASK_NAMES
from worker import runtime
from worker.dead_letters import raw_bytes
from worker.handling import Delivery, Handler, Verdict
from worker.store import StoreCode

__all__ = ["register"]


def _handle(task: Task[Any, Any], *args: Any, **kwargs: Any) -> None:
    """Run one message through the handler on this process's runtime."""
    rt = runtime.current(getattr(task.app, "settings", None))
    raw = raw_bytes([list(args), kwargs])
    task_id = getattr(task.request, "id", None)
    message_id = task_id if isinstance(task_id, str) and task_id else None
    delivery = Delivery(task.name, args, kwargs, lane=None, raw=raw, message_id=message_id)
    (verdict,) = rt.call(Handler(rt).handle([delivery]), timeout_s=rt.settings.longest_task_s)
    if verdict is Verdict.REQUEUE:
        raise Reject(StoreCode.STORE_UNAVAILABLE.value, requeue=True)


def register(app: Celery) -> None:
    """Register every task on ``app`` under its stable name."""
    for name in sorted(TASK_NAMES):
        # typing=False: arguments are checked by the handler, so bad ones become dead letters.
        app.task(
            name=name,
            bind=True,
            acks_late=True,
            reject_on_worker_lost=True,
            ignore_result=True,
            typing=False,
        )(_handle)
